"""One pass over the eval split: the records read (parallel over the shards, in a fixed
order), parsed once per large batch, in parallel, for everything evaluate needs of them
(the model's features, the label, the slices, the linear baseline's columns), and scored
by the model's raw-features signature (a concrete function) on those parsed batches; the
per-slice metrics computed from group codes, not a metric call per value."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

from components.contracts import names
from components.contracts.examples import split_files
from components.contracts.settings import safe_name
from components.kinds import load_feature_specs

SCORE_BATCH = 8192  # rows per parse and per model call
_CYCLE = 8  # shards read side by side


@dataclass
class Predictions:
    classes: List[str]  # empty for regression
    labels: np.ndarray  # class index per row (-1: a label unseen in training), or the regression target
    probabilities: np.ndarray  # [rows, classes], or [rows] predictions for regression
    slice_values: Dict[str, np.ndarray]  # feature -> value per row ("" when missing)
    task: str = "multiclass"
    columns: Dict[str, np.ndarray] = field(default_factory=dict)  # predict's `columns`, one value per row
    seconds: Dict[str, float] = field(default_factory=dict)  # model_load, scoring_pass (wall), scoring_pass_cpu


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def eval_records(examples_dir: str):
    """The eval split's serialized records: its shards read side by side and interleaved in
    a fixed order, the same on every call (misclassified.py finds rows by their place in it)."""
    import tensorflow as tf

    files = split_files(examples_dir, names.EVAL_SPLIT)
    cycle = max(1, min(len(files), _CYCLE))
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20),
        cycle_length=cycle, num_parallel_calls=min(cycle, _cores()), deterministic=True)


def _same(a, b) -> bool:
    """Two parse features that parse a key to the same values."""
    da, db = np.asarray(a.default_value), np.asarray(b.default_value)
    return (a.dtype == b.dtype and list(a.shape) == list(b.shape) and da.shape == db.shape
            and bool(np.all((da == db) | ((da != da) & (db != db)))))


def _raw_signature(loaded, model_spec: dict):
    """The SavedModel's raw-features signature when it takes exactly the parsed features
    (one value per row), else None (then the serialized-examples one scores)."""
    signature = loaded.signatures.get(names.SERVING_SIGNATURE)
    if signature is None:
        return None
    inputs = signature.structured_input_signature[1]
    if set(inputs) != set(model_spec) or any(inputs[k].dtype != model_spec[k].dtype for k in inputs):
        return None
    return signature


def _text(values: np.ndarray) -> np.ndarray:
    """Bytes per row -> str per row (object array), decoding each distinct value once."""
    if not len(values):
        return np.empty(0, dtype=object)
    unique, inverse = np.unique(values, return_inverse=True)
    return np.array([v.decode("utf-8") for v in unique], dtype=object)[inverse.reshape(-1)]


def predict(model_dir: str, examples_dir: str, slices: List[str], serve: Optional[Callable] = None,
            columns: Optional[Dict[str, str]] = None) -> Predictions:
    """Scores the eval split in one read (eval_records' order). The model scores through its
    raw-features signature on the parsed batches (or `serving_examples` when it has no such
    signature); `serve`: another function from a batch of serialized examples to the outputs
    (e.g. the TFLite model's). `columns` {name: numeric or categorical}: more columns to
    return per row, parsed in the same pass (numeric float, NaN missing; categorical bytes)."""
    import tensorflow as tf

    started = time.monotonic()
    specs = load_feature_specs(model_dir)
    regression = specs.task == "regression"
    model_spec = {f.name: kind.parse_feature(f) for kind, f in specs.each()}
    raw = None
    if serve is None:
        loaded = tf.saved_model.load(model_dir)
        raw = _raw_signature(loaded, model_spec)
        if raw is None:
            signature = loaded.signatures[names.EXAMPLES_SIGNATURE]
            serve = lambda batch: signature(examples=batch)  # noqa: E731
    # What else is read of each row, one value per row; the examples name a column by its
    # safe name, a slice keeps the name the config gives.
    wanted = {specs.label: tf.io.FixedLenFeature([1], tf.float32 if regression else tf.string)}
    wanted.update({safe_name(s): tf.io.FixedLenFeature([1], tf.string, default_value=[""]) for s in slices})
    for name, kind in (columns or {}).items():
        wanted[name] = (tf.io.FixedLenFeature([1], tf.float32, default_value=[float("nan")]) if kind == "numeric" else
                        tf.io.FixedLenFeature([1], tf.string, default_value=[""]))
    first = dict(model_spec) if raw is not None else {}
    second = {}
    for key, feature in wanted.items():
        if key in first and not _same(first[key], feature):
            second[key] = feature  # the model parses this key differently: a second parse for it
        else:
            first.setdefault(key, feature)

    def parse(batch):
        parsed = tf.io.parse_example(batch, first) if first else {}
        extra = tf.io.parse_example(batch, second) if second else {}
        model_inputs = {k: tf.squeeze(parsed[k], -1) for k in model_spec} if raw is not None else {}
        return batch, model_inputs, {k: tf.squeeze((extra if k in extra else parsed)[k], -1) for k in wanted}

    loaded_at, cpu_at = time.monotonic(), time.process_time()
    cores = _cores()
    dataset = eval_records(examples_dir).batch(SCORE_BATCH).map(parse, num_parallel_calls=cores, deterministic=True)
    output = names.PREDICTIONS if regression else names.PROBABILITIES
    outputs, parts = [], {k: [] for k in wanted}
    for batch, model_inputs, values in dataset.prefetch(2):
        outputs.append(np.asarray((raw(**model_inputs) if raw is not None else serve(batch))[output]))
        for k, v in values.items():
            parts[k].append(v.numpy())
    got = {k: np.concatenate(v) if v else np.empty(0) for k, v in parts.items()}
    labels = got.pop(specs.label)
    if not regression:
        index = {c.encode("utf-8"): i for i, c in enumerate(specs.classes)}
        unique, inverse = np.unique(labels, return_inverse=True) if len(labels) else (labels, labels)
        labels = np.array([index.get(v, -1) for v in unique], dtype=np.int64)[inverse.reshape(-1)] \
            if len(unique) else np.empty(0, dtype=np.int64)
    width = 1 if regression else len(specs.classes)
    probabilities = np.concatenate(outputs) if outputs else np.empty((0,) if regression else (0, width))
    return Predictions(classes=list(specs.classes), labels=labels, probabilities=probabilities,
                       slice_values={s: _text(got[safe_name(s)]) for s in slices}, task=specs.task,
                       columns={k: got[k] for k in (columns or {})},
                       seconds={"model_load": loaded_at - started, "scoring_pass": time.monotonic() - loaded_at,
                                "scoring_pass_cpu": time.process_time() - cpu_at})


def _groups(values: np.ndarray):
    """(the distinct values, sorted; each row's index into them; rows per value)."""
    unique, codes = np.unique(values, return_inverse=True)
    codes = codes.reshape(-1)
    return unique, codes, np.bincount(codes, minlength=len(unique))


def _group_mean(codes: np.ndarray, weights: np.ndarray, counts: np.ndarray) -> np.ndarray:
    sums = np.bincount(codes, weights=weights, minlength=len(counts))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def slice_metrics(y: np.ndarray, p: np.ndarray, values: np.ndarray, regression: bool) -> Dict[str, Dict[str, float]]:
    """{value ("<missing>" for ""): {examples, then accuracy and log_loss, or rmse and mae}},
    as the overall metrics define them (metrics.py: a label unseen in training is wrong for
    accuracy and left out of log loss; log loss clips as scikit-learn does), for every value
    at once."""
    unique, codes, counts = _groups(values)
    if regression:
        err = np.asarray(p, np.float64) - np.asarray(y, np.float64)
        rmse = np.sqrt(_group_mean(codes, err ** 2, counts))
        mae = _group_mean(codes, np.abs(err), counts)
        stats = {"rmse": rmse, "mae": mae}
    else:
        correct = (p.argmax(axis=1) == y).astype(np.float64) if len(y) else np.empty(0)
        known = y >= 0
        eps = np.finfo(p.dtype).eps
        picked = np.clip(p[np.arange(len(y)), np.maximum(y, 0)], eps, 1 - eps) if len(y) else np.empty(0)
        loss = np.where(known, -np.log(picked.astype(np.float64)), 0.0)
        known_counts = np.bincount(codes, weights=known.astype(np.float64), minlength=len(unique))
        stats = {"accuracy": _group_mean(codes, correct, counts), "log_loss": _group_mean(codes, loss, known_counts)}
    return {(value or "<missing>"): {"examples": int(counts[i]), **{k: float(v[i]) for k, v in stats.items()}}
            for i, value in enumerate(unique)}
