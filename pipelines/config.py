"""The pipeline config schema: one YAML file under configs/ describes one pipeline.

Each step's section is that step's own settings model (components/<step>/settings.py), so
the config, the compiled pipeline and the step read the same fields; this module adds
what only the pipeline needs (images, cluster). Unknown keys are errors; every error
names the YAML key. It imports neither kfp nor TensorFlow.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from components.contracts.errors import GpupipeError
from components.contracts.pods import Toleration
from components.contracts.settings import StorageSettings, Strict, check_secret_name
from components.contracts.storage import schemes
from components.evaluate.settings import EvaluationSettings
from components.ingest.settings import DataSettings
from components.kinds import KINDS
from components.notify.settings import NotifySettings
from components.push.settings import NAME_RE, ServingSettings
from components.train.settings import TrainSettings
from components.validate.settings import ValidationSettings
from pipelines import steps
from pipelines.resources import StepResourcesOverride
from pipelines.version import image_tag

DEFAULT_REGISTRY = "ghcr.io/gpupipe"
KFP_GPU_COUNTS = (0, 1, 2, 4, 8, 16)
# An image reference (the distribution project's reference grammar, loosely): registry host
# with an optional port, lowercase path components, then a tag and/or a sha256 digest.
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
                       r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")


class ImagesConfig(Strict):
    registry: str = DEFAULT_REGISTRY
    cpu: Optional[str] = Field(
        None, description="full image reference, a tag or a digest (repo@sha256:...); "
                          "defaults to <registry>/gpupipe-cpu:<version>-<commit> (pipelines/version.py)")
    gpu: Optional[str] = Field(None, description="full image reference; defaults to <registry>/gpupipe-gpu:<version>-<commit>")

    @field_validator("cpu", "gpu")
    @classmethod
    def _pinned(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        if not _IMAGE_RE.fullmatch(v):
            raise ValueError(f"'{v}' is not an image reference; give e.g. ghcr.io/acme/gpupipe-cpu:0.1.0 or "
                             "repo@sha256:<64 hex digits>")
        if "@sha256:" in v:
            return v
        tag = v.rsplit("/", 1)[-1].partition(":")[2]
        if not tag or tag == "latest":
            raise ValueError(f"'{v}' is not pinned: give a version tag or a digest (repo@sha256:...), never :latest")
        return v

    @property
    def cpu_image(self) -> str:
        return self.cpu or f"{self.registry}/gpupipe-cpu:{image_tag()}"

    @property
    def gpu_image(self) -> str:
        return self.gpu or f"{self.registry}/gpupipe-gpu:{image_tag()}"


class ConfigDeprecation(UserWarning):
    """A config key that moved: still read, with one line naming the new key (the CLI prints
    it as `warning: ...`)."""


# old place -> new place, each (section, key); the value is moved before validation
MOVED_KEYS = {("cluster", "gcs_credentials_secret"): ("storage", "gcs", "credentials_secret"),
              ("cluster", "gcs_credentials_key"): ("storage", "gcs", "credentials_key")}


def _moved(raw: dict) -> dict:
    """`raw` with each old key (MOVED_KEYS) moved to its new place, warning once per key;
    the caller's mapping is left as it was. Both places set to different values: an error."""
    for (section, key), new in MOVED_KEYS.items():
        old_section = raw.get(section)
        if not isinstance(old_section, dict) or key not in old_section:
            continue
        raw = {**raw, section: {k: v for k, v in old_section.items() if k != key}}
        node, path = raw, list(new[:-1])
        for part in path:  # copy each mapping on the way so the caller's stays as it was
            inner = node.get(part)
            node[part] = dict(inner) if isinstance(inner, dict) else ({} if inner is None else inner)
            node = node[part]
        if not isinstance(node, dict):
            continue  # the new section is malformed: its own validation says so
        value, new_key = old_section[key], ".".join(new)
        if new[-1] in node and node[new[-1]] != value:
            raise ValueError(f"{section}.{key} (deprecated) and {new_key} are both set, to different values; keep "
                             f"{new_key} alone")
        node[new[-1]] = value
        warnings.warn(f"{section}.{key} is deprecated; move it to {new_key} (same value)", ConfigDeprecation,
                      stacklevel=2)
    return raw


class ClusterConfig(Strict):
    """What the pods need on the cluster: Kubernetes secrets by reference only (kfp-kubernetes;
    the secret values never appear in the config or the compiled pipeline), and each step's
    resources and deadline."""

    image_pull_secrets: List[str] = Field(default_factory=list, description="Secrets for pulling the images")
    data_source: Optional[str] = Field(
        None, description=f"the data source on the cluster, a URI every pod can read ({schemes.named()}); the compiled "
                          "pipeline's default (data.source stays the local run's)")
    serving_base: Optional[str] = Field(
        None, description=f"the serving base on the cluster ({schemes.named()}); the compiled pipeline's default "
                          "(serving.base stays the local run's)")
    service_account: Optional[str] = Field(
        None, description="service account of the multi-worker training pods (the run's own for the KFP tasks)")
    queue: Optional[str] = Field(
        None, description="Kueue LocalQueue that admits the GPU workload (the train pod, or the multi-worker job as "
                          "one unit): the label kueue.x-k8s.io/queue-name; the other tasks are not queued")
    priority: Optional[str] = Field(
        None, description="Kueue WorkloadPriorityClass of the GPU workload (kueue.x-k8s.io/priority-class)")
    spot_node_selector: Dict[str, str] = Field(
        default_factory=lambda: {"cloud.google.com/gke-spot": "true"},
        description="with training.pods.spot: the spot pool's node labels (GKE's by default)")
    spot_tolerations: List[Toleration] = Field(
        default_factory=lambda: [Toleration(key="cloud.google.com/gke-spot", operator="Equal", value="true",
                                            effect="NoSchedule")],
        description="with training.pods.spot: the spot pool's taints tolerated")
    resources: Dict[str, StepResourcesOverride] = Field(
        default_factory=dict, description=f"per step ({', '.join(steps.names())}): cpu, cpu_limit, memory, "
                                          "memory_limit, timeout over the step's defaults (pipelines/steps.py)")

    @field_validator("resources")
    @classmethod
    def _known_steps(cls, v: Dict[str, StepResourcesOverride]) -> Dict[str, StepResourcesOverride]:
        known = steps.names()
        unknown = sorted(set(v) - set(known))
        if unknown:
            raise ValueError(f"unknown step(s) {', '.join(unknown)}; use {', '.join(known)}")
        return v

    @field_validator("queue", "priority")
    @classmethod
    def _object_names(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", v):
            raise ValueError(f"'{v}' is not a Kubernetes object name (lowercase letters, digits, '-' and '.')")
        return v

    @field_validator("image_pull_secrets", "service_account")
    @classmethod
    def _secret_names(cls, v):
        for name in ([v] if isinstance(v, str) else v or []):
            check_secret_name(name)
        return v


class PipelineConfig(Strict):
    name: str = Field(description="pipeline name: lowercase letters, digits and '-'")
    description: str = ""
    pipeline_root: Optional[str] = Field(
        None, description="KFP pipeline root on the cluster, e.g. gs://bucket/runs (unset: the KFP installation's "
                          "default artifact store)")
    data: DataSettings
    validation: ValidationSettings = ValidationSettings()
    training: TrainSettings = TrainSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    serving: ServingSettings
    images: ImagesConfig = ImagesConfig()
    cluster: ClusterConfig = ClusterConfig()
    notify: NotifySettings = Field(
        NotifySettings(), description="a webhook told when a run fails, is not blessed or pushes (Slack's JSON)")
    storage: StorageSettings = Field(
        StorageSettings(), description="how the object stores are reached: gcs (the credentials' Secret), s3 "
                                       "(endpoint, region, addressing, conditional writes, the credentials' Secret); "
                                       "the same for the compiled tasks, the multi-worker job and gpupipe run")

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, raw):
        return _moved(raw) if isinstance(raw, dict) else raw

    @model_validator(mode="after")
    def _kfp_takes_the_gpus(self) -> "PipelineConfig":
        # Only launcher: pod asks KFP for the GPUs, and kfp 2.13's set_accelerator_limit
        # (kfp/dsl/pipeline_task.py) takes only these counts; a JobSet's or TFJob's pods take any.
        t = self.training.pods
        if t.launcher == "pod" and t.workers > 1:
            raise ValueError(f"training.pods.launcher: pod trains on one worker, and training.pods.workers is {t.workers}; "
                             "set training.pods.launcher: jobset (or tfjob), or training.pods.workers: 1")
        if t.launcher == "pod" and t.gpus not in KFP_GPU_COUNTS:
            raise ValueError(f"training.pods.gpus: {t.gpus} with launcher: pod, and Kubeflow Pipelines gives a task 1, 2, 4, "
                             "8 or 16 GPUs; set training.pods.gpus to one of them, or training.pods.launcher: jobset")
        return self

    @model_validator(mode="after")
    def _slices_are_categorical(self) -> "PipelineConfig":
        sliceable = [kind for kind in KINDS.values() if kind.sliceable]
        unknown = [s for s in self.evaluation.slices if (self.data.kind_of(s) or None) not in sliceable]
        if unknown:
            raise ValueError(f"evaluation.slices: {', '.join(unknown)} not in "
                             f"{' or '.join(f'data.{kind.config_key}' for kind in sliceable)}")
        return self

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a plain name: use lowercase letters, digits and '-'")
        return v

    @property
    def train_image(self) -> str:
        return self.images.gpu_image if self.training.pods.gpus else self.images.cpu_image


QUOTE_LIMIT = 60  # characters of a quoted value an error line keeps


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """A value as an error line quotes it: control characters escaped (a newline is \\n),
    at most `limit` characters, then an ellipsis and the full length."""
    text = str(value)
    escaped = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return escaped if len(escaped) <= limit else f"{escaped[:limit]}... ({len(text)} characters)"


def _format_error(err: dict) -> str:
    key = ".".join(quoted(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    given = err.get("input")
    if isinstance(given, str) and given and given in msg and quoted(given) != given:
        msg = msg.replace(given, quoted(given))  # the value the check quotes, one line and short
    if not key:
        return msg
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key (check its spelling; pipelines/config.py lists the options)"
    if err["type"] == "missing":
        return f"{key}: required key is missing"
    return f"{key}: {msg}"


def parse_config(raw: object, origin: str = "config") -> PipelineConfig:
    """Validates a parsed YAML mapping; raises GpupipeError with one line naming the key."""
    if not isinstance(raw, dict):
        raise GpupipeError(f"{origin}: expected a YAML mapping at the top level")
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(_format_error(e) for e in err.errors())
        # whatever a check quoted, the error stays one line
        raise GpupipeError(f"{origin}: {quoted(problems, limit=2000)}") from None


def load_config(path: str | Path) -> PipelineConfig:
    """Reads and validates a config file; raises GpupipeError with one line naming the
    file and the key."""
    path = Path(path)
    if not path.is_file():
        raise GpupipeError(f"{path}: config file not found; pass a path such as configs/penguins.yaml")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise GpupipeError(f"{path}: not UTF-8 (byte {err.start}); save the config as UTF-8") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise GpupipeError(f"{path}: not valid YAML{where}; fix the syntax") from None
    return parse_config(raw, origin=str(path))
