"""The pipeline config schema: one YAML file under configs/ describes one pipeline.

This module is the reference for every option. Unknown keys are errors; every error
names the YAML key. It imports neither kfp nor TensorFlow, so components can use it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from components.errors import GpupipeError
from pipelines.version import __version__

DEFAULT_REGISTRY = "ghcr.io/gpupipe"
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SplitConfig(_Strict):
    """How rows are split into train and eval: a deterministic hash, so reruns agree."""

    eval_percent: int = Field(20, ge=1, le=99, description="share of rows in the eval split")
    key: Optional[str] = Field(None, description="column to hash; the whole row when unset")


class DataConfig(_Strict):
    source: str = Field(description="a file, directory or glob (relative to the working directory), a "
                                    "gs://bucket/prefix, object or glob, or synthetic:ctr?rows=N&seed=S")
    format: Literal["auto", "csv", "parquet", "tfrecord"] = Field(
        "auto", description="auto: from the file extension (.csv[.gz], .parquet, .tfrecord[.gz])")
    label: str
    numeric_features: List[str] = Field(default_factory=list)
    categorical_features: List[str] = Field(default_factory=list)
    split: SplitConfig = SplitConfig()

    @model_validator(mode="after")
    def _features_are_distinct(self) -> "DataConfig":
        if not self.numeric_features and not self.categorical_features:
            raise ValueError("declare at least one of numeric_features, categorical_features")
        names = self.numeric_features + self.categorical_features
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"feature listed twice: {', '.join(dupes)}")
        if self.label in names:
            raise ValueError(f"label '{self.label}' is also listed as a feature")
        if self.split.key is not None and self.split.key == self.label:
            raise ValueError("split.key must not be the label")
        return self


class DriftConfig(_Strict):
    """Drift of the train split against a baseline: the training statistics stored with the
    version now served (or `baseline_statistics`). TFDV's comparators: L-infinity distance
    for categorical features, Jensen-Shannon divergence for numeric ones."""

    categorical_threshold: float = Field(0.3, gt=0, le=1, description="L-infinity distance")
    numeric_threshold: float = Field(0.3, gt=0, le=1, description="Jensen-Shannon divergence")
    features: Dict[str, float] = Field(default_factory=dict, description="per-feature thresholds")
    blocking: bool = Field(True, description="drift fails the run (false: warn in the summary)")
    baseline_statistics: Optional[str] = Field(
        None, description="a statistics file (validate's stats.pb) to compare with instead of the served version's")


class ValidationConfig(_Strict):
    fail_on_anomalies: bool = Field(True, description="stop the run when TFDV reports a schema anomaly or skew")
    warn_only: List[str] = Field(default_factory=list, description="features whose anomalies and drift only warn")
    schema_file: Optional[str] = Field(
        None, description="a curated schema.pbtxt (`gpupipe schema CONFIG` writes the inferred one to review); "
                          "inferred from the train split when unset")
    skew_threshold: float = Field(0.0, ge=0, le=1, description="train vs eval L-infinity skew per categorical "
                                                              "feature; 0 disables")
    statistics_engine: Literal["in_process", "beam"] = Field(
        "in_process", description="in_process: TFDV's in-memory path batch by batch (one machine); beam: "
                                  "generate_statistics_from_tfrecord on the runner in beam_pipeline_args")
    beam_pipeline_args: List[str] = Field(
        default_factory=list, description="e.g. [--runner=DataflowRunner, --project=p, --region=r, "
                                          "--temp_location=gs://b/tmp]")
    drift: DriftConfig = DriftConfig()


class Toleration(_Strict):
    key: str
    operator: Literal["Equal", "Exists"] = "Exists"
    value: Optional[str] = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class TrainingConfig(_Strict):
    task: Literal["multiclass", "binary", "regression"] = "multiclass"
    model: Literal["dnn", "wide_deep", "cross"] = Field(
        "dnn", description="dnn; wide_deep (a linear part on the categorical features beside the DNN); "
                           "cross (a DCN-v2 cross network beside the DNN)")
    custom_model: Optional[str] = Field(
        None, description="module:function building your own tf_keras model from the feature specs "
                          "(see components/train/model.py: build_model); overrides `model`")
    hidden_units: List[int] = Field(default_factory=lambda: [64, 32])
    embedding_dim: int = Field(8, ge=1)
    max_vocabulary: int = Field(
        1000, ge=1, le=1000, description="categorical features with at most this many distinct values get a vocabulary "
                                "(top values from the statistics); larger ones are hashed")
    hash_buckets: int = Field(1000, ge=2, description="hash buckets for high-cardinality categorical features")
    cross_layers: int = Field(2, ge=1, description="cross layers of the `cross` model")
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1, description="per-replica batch size; global = this x replicas")
    learning_rate: float = Field(1e-3, gt=0)
    optimizer: Literal["adam", "adagrad", "ftrl", "sgd"] = Field(
        "adam", description="adagrad/ftrl update only the embedding rows a batch touches; Adam's moments make "
                            "every step touch every row (measured 3.3x slower on the click-through model)")
    scale_learning_rate: bool = Field(False, description="multiply the learning rate by the number of replicas")
    shuffle_buffer: int = Field(10_000, ge=1)
    cache_budget_mb: int = Field(
        1024, ge=0, description="cache parsed batches in memory when the train split fits this budget (0: never)")
    disk_cache_budget_mb: int = Field(
        20480, ge=0, description="otherwise write the parsed batches to local scratch in the first epoch and read "
                                 "them from there in later epochs when they fit this budget (0: never); on the "
                                 "cluster the train pod gets an emptyDir of this size")
    scratch_dir: Optional[str] = Field(
        None, description="local directory for the disk cache (default: the emptyDir on the cluster, the system "
                          "temp directory locally)")
    strategy: Literal["auto", "one_device", "mirrored", "multi_worker"] = "auto"
    mixed_precision: Literal["auto", "off", "float16", "bfloat16"] = Field(
        "auto", description="auto: float16 on compute capability 7.x, bfloat16 on 8.x and later; off on CPU")
    xla: bool = Field(False, description="compile the train step with XLA (jit_compile)")
    checkpoint_steps: int = Field(
        200, ge=1, description="BackupAndRestore every N steps; a retried or preempted run resumes from there")
    retries: int = Field(2, ge=0, description="KFP retries of the train task (preemption exits 143)")
    retry_backoff: str = Field("60s", pattern=r"^\d+(s|m|h)$")
    accelerator: Optional[str] = Field(
        None, description="Kubernetes GPU resource name requested by the train task, e.g. nvidia.com/gpu")
    gpus: int = Field(0, ge=0, description="GPUs per worker (a limit)")
    workers: int = Field(1, ge=1, description="> 1: the train task launches a Kubeflow TFJob with this many workers")
    gpu_hour_price: float = Field(0.0, ge=0, description="price of one GPU-hour, for the cost in the training report")
    cpu: Optional[str] = Field(None, description="CPU limit of the train task, e.g. '4'")
    memory: Optional[str] = Field(None, description="memory limit of the train task, e.g. '16G'")
    node_selector: Dict[str, str] = Field(default_factory=dict)
    tolerations: List[Toleration] = Field(default_factory=list)
    tfjob_namespace: Optional[str] = Field(None, description="namespace of the TFJob (default: the task's own)")
    seed: int = 42

    @field_validator("hidden_units")
    @classmethod
    def _positive_units(cls, v: List[int]) -> List[int]:
        if not v or any(u < 1 for u in v):
            raise ValueError("give one or more positive layer widths, e.g. [64, 32]")
        return v

    @field_validator("custom_model")
    @classmethod
    def _module_function(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", v):
            raise ValueError(f"'{v}' is not module:function, e.g. my_models.wide:build")
        return v

    @model_validator(mode="after")
    def _gpus_need_accelerator(self) -> "TrainingConfig":
        if self.gpus and not self.accelerator:
            raise ValueError("gpus is set but accelerator is not; add accelerator: nvidia.com/gpu")
        if self.accelerator and not self.gpus:
            raise ValueError("accelerator is set but gpus is 0; set gpus: 1 or more")
        return self


class ChangeThreshold(_Strict):
    """Candidate vs the model now served, as TFMA's GenericChangeThreshold: with
    higher-is-better metrics the candidate passes when (candidate - baseline) >= absolute and
    (candidate - baseline) / |baseline| >= relative; lower-is-better flips both to <=.
    `absolute: -0.02` on accuracy allows a drop of at most 0.02."""

    absolute: Optional[float] = None
    relative: Optional[float] = None

    @model_validator(mode="after")
    def _one_bound(self) -> "ChangeThreshold":
        if self.absolute is None and self.relative is None:
            raise ValueError("give absolute, relative or both")
        return self


class MetricThreshold(_Strict):
    """Value bounds (TFMA's GenericValueThreshold) and an optional change threshold."""

    lower_bound: Optional[float] = None
    upper_bound: Optional[float] = None
    change: Optional[ChangeThreshold] = None


class EvaluationConfig(_Strict):
    metric: str = Field("accuracy", description="primary metric: shown in the summary; `threshold` bounds it")
    threshold: float = Field(
        0.0, description="value threshold on the primary metric: a lower bound (an upper bound for "
                         "lower-is-better metrics such as log_loss); pipeline parameter eval_threshold")
    change_threshold: Optional[ChangeThreshold] = Field(
        None, description="primary metric vs the model now served; skipped when nothing is served yet")
    thresholds: Dict[str, MetricThreshold] = Field(default_factory=dict, description="more metrics to gate on")
    slices: List[str] = Field(default_factory=list, description="categorical features to slice metrics by")
    fail_if_not_blessed: bool = Field(False, description="fail the run (not only skip the push) when not blessed")


class ServingConfig(_Strict):
    base: str = Field("serving", description="serving base directory (local path or gs:// URI)")
    model_name: str
    keep_versions: int = Field(5, ge=1, description="newest versions kept; the one labelled stable is always kept")
    endpoint: Optional[str] = Field(
        None, description="TF Serving gRPC host:port; when set, push waits for the new version and smoke-tests it")
    smoke_rows: int = Field(8, ge=1, description="eval rows sent in the smoke test and in warmup requests")
    smoke_timeout_seconds: float = Field(120.0, gt=0)
    tf_serving_version: str = Field("2.16.1", description="TF Serving runtime in the KServe manifest")
    namespace: Optional[str] = Field(None, description="Kubernetes namespace of the KServe InferenceService")
    service_account: Optional[str] = Field(
        None, description="service account the KServe predictor reads the serving base with")

    @field_validator("model_name")
    @classmethod
    def _safe_model_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a plain name: use lowercase letters, digits and '-' (no '/', '..')")
        return v


class ImagesConfig(_Strict):
    registry: str = DEFAULT_REGISTRY
    cpu: Optional[str] = Field(
        None, description="full image reference, a tag or a digest (repo@sha256:...); "
                          "defaults to <registry>/gpupipe-cpu:<version>")
    gpu: Optional[str] = Field(None, description="full image reference; defaults to <registry>/gpupipe-gpu:<version>")

    @field_validator("cpu", "gpu")
    @classmethod
    def _pinned(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        if "@sha256:" in v:
            return v
        tag = v.rsplit("/", 1)[-1].partition(":")[2]
        if not tag or tag == "latest":
            raise ValueError(f"'{v}' is not pinned: give a version tag or a digest (repo@sha256:...), never :latest")
        return v

    @property
    def cpu_image(self) -> str:
        return self.cpu or f"{self.registry}/gpupipe-cpu:{__version__}"

    @property
    def gpu_image(self) -> str:
        return self.gpu or f"{self.registry}/gpupipe-gpu:{__version__}"


class ClusterConfig(_Strict):
    """Kubernetes secrets the tasks use on the cluster, by reference only (kfp-kubernetes):
    the secret values never appear in the config or the compiled pipeline."""

    gcs_credentials_secret: Optional[str] = Field(
        None, description="Secret holding a GCP service-account key, mounted into every task")
    gcs_credentials_key: str = Field("key.json", description="the key file's name inside that Secret")
    image_pull_secrets: List[str] = Field(default_factory=list, description="Secrets for pulling the images")

    @field_validator("gcs_credentials_secret", "image_pull_secrets")
    @classmethod
    def _secret_names(cls, v):
        for name in ([v] if isinstance(v, str) else v or []):
            if not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", name):
                raise ValueError(f"'{name}' is not a Kubernetes Secret name (the name, never the secret itself)")
        return v


class PipelineConfig(_Strict):
    name: str = Field(description="pipeline name: lowercase letters, digits and '-'")
    description: str = ""
    pipeline_root: Optional[str] = Field(None, description="KFP pipeline root on the cluster, e.g. gs://bucket/runs")
    data: DataConfig
    validation: ValidationConfig = ValidationConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    serving: ServingConfig
    images: ImagesConfig = ImagesConfig()
    cluster: ClusterConfig = ClusterConfig()

    @model_validator(mode="after")
    def _slices_are_categorical(self) -> "PipelineConfig":
        unknown = [s for s in self.evaluation.slices if s not in self.data.categorical_features]
        if unknown:
            raise ValueError(f"evaluation.slices: {', '.join(unknown)} not in data.categorical_features")
        return self

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a plain name: use lowercase letters, digits and '-'")
        return v

    @property
    def train_image(self) -> str:
        return self.images.gpu_image if self.training.gpus else self.images.cpu_image


def _format_error(err: dict) -> str:
    key = ".".join(str(p) for p in err["loc"])
    if not key:
        return err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{key}: unknown key (check its spelling; pipelines/config.py lists the options)"
    if err["type"] == "missing":
        return f"{key}: required key is missing"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{key}: {msg}"


def parse_config(raw: object, origin: str = "config") -> PipelineConfig:
    """Validates a parsed YAML mapping; raises GpupipeError with one line naming the key."""
    if not isinstance(raw, dict):
        raise GpupipeError(f"{origin}: expected a YAML mapping at the top level")
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(_format_error(e) for e in err.errors())
        raise GpupipeError(f"{origin}: {problems}") from None


def load_config(path: str | Path) -> PipelineConfig:
    """Reads and validates a config file; raises GpupipeError with one line naming the
    file and the key."""
    path = Path(path)
    if not path.is_file():
        raise GpupipeError(f"{path}: config file not found; pass a path such as configs/penguins.yaml")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise GpupipeError(f"{path}: not valid YAML{where}; fix the syntax") from None
    return parse_config(raw, origin=str(path))
