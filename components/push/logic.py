"""Push: a blessed SavedModel into `<serving base>/<model name>/<integer version>/`, the
layout TF Serving and KServe load, with what the next run needs stored beside it.

Order: fail what dead pushes left -> claim the next number and record it as a candidate
with its lineage -> stage a copy with its extras (warmup requests, training statistics and
schema, metrics, lineage) and add it, whole or not at all -> with an endpoint, label it
`canary` and smoke-test it -> make it `stable` (or, with `canary_percent`, leave it the
canary) -> drop versions beyond `keep_versions`. Any failure after the claim marks the
version failed and removes it; a kill is repaired by the next push (components/store/).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import List, Optional

from components.contracts import names
from components.contracts.blessing import Blessing, read_blessing
from components.contracts.errors import GpupipeError, reports_errors
from components.contracts.examples import split_files
from components.push.settings import ServingSettings
from components.store import served, states
from components.store.base import SAVED_MODEL_PB, ServingStore


@dataclass
class PushResult:
    pushed: bool
    reason: str
    version: Optional[int] = None
    path: Optional[str] = None
    stable: Optional[int] = None
    canary: Optional[int] = None
    removed_versions: Optional[List[int]] = None
    smoke_test: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)

    def markdown(self) -> str:
        """What the push task shows in the Kubeflow UI: pushed where, or not pushed and why."""
        if not self.pushed:
            return f"# Not pushed\n\nnot pushed: {self.reason}\n"
        lines = [f"# Pushed version {self.version}", "", f"- path: `{self.path}`", f"- {self.reason}"]
        if self.canary is not None:
            lines.append(f"- canary: version {self.canary} (`gpupipe promote` makes it stable, "
                         "`gpupipe abort` drops it)")
        if self.smoke_test:
            lines.append(f"- smoke test {self.smoke_test}")
        if self.removed_versions:
            lines.append(f"- retention removed versions {', '.join(map(str, self.removed_versions))}")
        return "\n".join(lines) + "\n"


def eval_examples(examples_dir: str, count: int) -> List[bytes]:
    """The first `count` serialized eval examples (warmup requests and smoke test rows)."""
    import components

    components.import_tensorflow()  # push's first TensorFlow: without the Google API client
    import tensorflow as tf

    files = split_files(examples_dir, names.EVAL_SPLIT, required=False)
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").take(count)
    return [r.numpy() for r in dataset]


def write_warmup_requests(path: str, model_name: str, examples: List[bytes]) -> None:
    """TF Serving warmup file: a TFRecord of PredictionLog, one Predict request per row."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from components.push.smoke import predict_request

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for example in examples:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=predict_request(model_name, [example])))
            writer.write(log.SerializeToString())


def model_digest(model_dir: str) -> str:
    """sha256 over the SavedModel's files (names and bytes): the same model, the same digest."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(model_dir)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            digest.update(os.path.relpath(path, model_dir).encode())
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def stage_version(model_dir: str, into: str, model_name: str, examples: List[bytes], statistics_file: str = "",
                  schema_file: str = "", metrics: Optional[dict] = None, identity: Optional[dict] = None) -> str:
    """A copy of the SavedModel with its extras, ready to become a version."""
    staged = os.path.join(into, "version")
    shutil.copytree(model_dir, staged)
    if examples:
        write_warmup_requests(os.path.join(staged, served.EXTRA_DIR, served.WARMUP_FILE), model_name, examples)
    extra = os.path.join(staged, served.EXTRA_DIR, served.GPUPIPE_DIR)
    os.makedirs(extra, exist_ok=True)
    if statistics_file:
        shutil.copy(statistics_file, os.path.join(extra, names.STATS_FILE))
    if schema_file:
        shutil.copy(schema_file, os.path.join(extra, names.SCHEMA_FILE))
    with open(os.path.join(extra, served.METRICS_FILE), "w", encoding="utf-8") as f:
        json.dump(metrics or {}, f, indent=2)
    with open(os.path.join(extra, served.MODEL_FILE), "w", encoding="utf-8") as f:
        json.dump(identity or {"model_digest": model_digest(model_dir), "run_id": ""}, f, indent=1, sort_keys=True)
    return staged


def running_image() -> dict:
    """What the image this task runs in says of itself: the tag it was built as and, where the
    runtime passes it, its digest (none outside an image)."""
    found = {"image_built": os.environ.get(names.IMAGE_TAG_ENV), "image_digest": os.environ.get(names.IMAGE_DIGEST_ENV)}
    return {key: value for key, value in found.items() if value}


def push_model(settings: ServingSettings, model_dir: str, blessing: Blessing, *,
               examples: Optional[List[bytes]] = None, statistics_file: str = "", schema_file: str = "",
               run_id: str = "", lineage: Optional[dict] = None) -> PushResult:
    """Pushes a blessed model to `settings.base` as the next integer version; an unblessed
    one is not pushed and the result says why. `settings`: the config's serving section (its
    base as this run gives it); the rest is the run's: the model, evaluate's verdict on it
    (its metrics are stored beside the version), the warmup and smoke-test rows, the
    training statistics and schema, the run id and lineage. The version is recorded as a
    candidate with its lineage, written whole, then (with `settings.endpoint`) labelled
    canary and smoke-tested, then made stable, or with `settings.canary_percent` left as the
    canary. With `run_id`, a push this run already made of the same model (a KFP retry of
    the task) is that version, not a new one."""
    blessed, blessing_reasons, metrics = blessing.blessed, blessing.reasons, blessing.metrics
    base, model_name, keep_versions = settings.base, settings.model_name, settings.keep_versions
    endpoint, canary_percent = settings.endpoint or "", settings.canary_percent
    if not blessed:
        return PushResult(pushed=False, reason="not blessed: " + "; ".join(blessing_reasons))
    if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_PB)):  # before anything is recorded
        raise GpupipeError(f"model: {model_dir} has no {SAVED_MODEL_PB}; it is not a SavedModel, retrain it")
    store = ServingStore(base, model_name)
    served.recover(store, run_id)  # dead pushes (and this run's earlier attempt) leave no canary behind
    digest = model_digest(model_dir)
    already = served.version_of(store, digest, run_id) if run_id else None
    if already is not None:  # a retry of this run's push: the same model is the same version
        result = PushResult(pushed=True, reason=f"already pushed as version {already} by this run (same model digest)",
                            version=already, path=store.version_path(already),
                            stable=states.stable(served.read_record(store)))
        if keep_versions:  # finish what the earlier attempt may not have
            result.removed_versions = served.apply_retention(store, keep_versions)
        return result
    now = time.time()
    identity = {**(lineage or {}), **running_image(), "run_id": run_id, "model_digest": digest, "metrics": metrics or {},
                "blessing": {k: v for k, v in blessing.to_dict().items() if k != "metrics"},
                "pushed_at": states.now_iso(now)}
    version = served.register_candidate(store, identity, deadline=now + settings.push_timeout_seconds, now=now)
    try:
        with tempfile.TemporaryDirectory(prefix="gpupipe-push-") as tmp:
            staged = stage_version(model_dir, tmp, model_name, examples or [], statistics_file, schema_file, metrics,
                                   identity)
            store.add_version(staged, version)
        result = PushResult(pushed=True, reason="blessed: " + "; ".join(blessing_reasons), version=version,
                            path=store.version_path(version))
        if endpoint:
            from components.push.smoke import smoke_test

            served.begin_canary(store, version)
            gap = smoke_test(endpoint, model_name, version, model_dir, examples or [], settings.smoke_timeout_seconds)
            result.smoke_test = f"passed on {endpoint}: max probability gap {gap:.2e}"
    except Exception as err:
        # A failed version must not stay where serving (the highest version, when no
        # label is used), the next run's baseline or a rollback could pick it.
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        served.fail_version(store, version, f"push failed: {why}")
        raise
    if canary_percent:
        served.pass_canary(store, version, f"canary for {canary_percent}% of the traffic")
        stable_before = states.stable(served.read_record(store))
        result.canary = version
        result.stable = stable_before
        result.reason += f"; canary for {canary_percent}% of the traffic, stable stays version {stable_before}"
    else:
        stable_before = served.make_stable(store, version, "pushed" + (" after its smoke test" if endpoint else ""),
                                           newer_only=True)
        if stable_before is not None and stable_before > version:  # a concurrent push's newer version
            result.stable = stable_before
            result.reason += f"; stable stays version {stable_before}, pushed meanwhile by another run"
        else:
            result.stable = version
            if stable_before is not None and stable_before != version:
                result.reason += f"; stable moved from version {stable_before}"
    if keep_versions:
        # The previous stable version survives retention: it is what a rollback goes back to.
        result.removed_versions = served.apply_retention(store, keep_versions)
    return result


def write_result(result: PushResult, output_dir: str) -> None:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, names.PUSH_RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result.to_dict(), f, indent=2)


@reports_errors("push")
def run_push(*, model_dir: str, blessing_dir: str, examples_dir: str, statistics_dir: str, schema_dir: str,
             output_dir: str, settings: ServingSettings, run_id: str = "",
             lineage: Optional[dict] = None) -> PushResult:
    """The push step: reads the blessing, pushes to `settings.base` (as this run gives it)
    or not, and records why in `output_dir`. `lineage`: what the version records of where
    it comes from (run name, pipeline, gpupipe version, image, data fingerprint, config
    digest); the run id, model digest, metrics and blessing are added here."""
    blessing = read_blessing(blessing_dir)
    settings.check_base()
    try:
        result = push_model(
            settings, model_dir, blessing,
            examples=eval_examples(examples_dir, settings.smoke_rows) if blessing.blessed else [],
            statistics_file=os.path.join(statistics_dir, names.STATS_FILE),
            schema_file=os.path.join(schema_dir, names.SCHEMA_FILE), run_id=run_id, lineage=lineage)
    except GpupipeError as err:
        write_result(PushResult(pushed=False, reason=str(err)), output_dir)
        raise
    write_result(result, output_dir)
    if run_id:  # what this run decided, for the exit handler that reports it (components/notify)
        gate = {k: v for k, v in blessing.to_dict().items() if k in ("blessed", "metric", "value", "threshold")}
        served.record_run(ServingStore(settings.base, settings.model_name), run_id,
                          {**gate, "run_id": run_id, "pushed": result.pushed, "version": result.version,
                           "reason": result.reason, "reasons": blessing.reasons})
    return result
