"""One pass over the eval split: read, parsed once per large batch in parallel for
everything evaluate needs of it (the model's features, the label, the slices, the linear
baseline's columns), and scored on both cores: the model through its raw-features signature
(a concrete function, called from one thread per core on consecutive batches), the linear
baseline's weights applied inside the same parse (linear.py: linear_scores), so no row's
columns are held after its batch. The eval split's column blocks are read when ingest wrote
them (contracts/blocks.py: a block of 1,024 rows parsed at once); data without blocks
(from elsewhere, images) and a model without a raw-features signature
are read from the row shards. The per-slice metrics come from group codes, not a metric
call per value."""
from __future__ import annotations

import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np

from components import release_free_memory
from components.contracts import names
from components.contracts.examples import split_files
from components.contracts.settings import safe_name
from components.kinds import load_feature_specs

SCORE_BATCH = 8192  # rows per parse and per model call
# Every this many batches scored, the memory freed by the pass's threads is handed back
# (components: release_free_memory): at 1.98M eval rows the pass's RSS stayed within about
# 1,030-1,130 MB instead of climbing to 1,160-1,250 (docs/benchmarks.md, "Scale").
TRIM_BATCHES = 32
PREFETCH = 16  # batches parsed ahead (about 8 MB each on the click-through table): while the model loads
_CYCLE = 8  # shards read side by side


@dataclass
class Predictions:
    classes: List[str]  # empty for regression
    labels: np.ndarray  # class index per row (-1: a label unseen in training), or the regression target
    probabilities: np.ndarray  # [rows, classes], or [rows] predictions for regression
    slice_values: Dict[str, np.ndarray]  # feature -> value per row ("" when missing)
    task: str = "multiclass"
    linear: Optional[np.ndarray] = None  # predict's `linear` baseline's predictions on the same rows
    # model_load, scoring_pass (wall) and scoring_pass_cpu (every thread's); read: blocks or rows
    seconds: Dict[str, float] = field(default_factory=dict)
    read: str = ""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _records(files: List[str]):
    import tensorflow as tf

    cycle = max(1, min(len(files), _CYCLE))
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20),
        cycle_length=cycle, num_parallel_calls=min(cycle, _cores()), deterministic=True)


def eval_records(examples_dir: str):
    """The eval split's serialized records: its shards read side by side and interleaved in
    a fixed order, the same on every call (misclassified.py finds rows by their place in it)."""
    return _records(split_files(examples_dir, names.EVAL_SPLIT))


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


class _Codes:
    """A slice feature's values, batch by batch, as int32 codes into the distinct values seen
    (first seen first): 4 bytes a row held through the pass, not a string object per row."""

    def __init__(self):
        self.index: Dict[bytes, int] = {}
        self.parts: List[np.ndarray] = []

    def add(self, values: np.ndarray) -> None:
        import pandas as pd

        codes, distinct = pd.factorize(values.reshape(-1))  # hashed: no sort of the batch's strings
        to_code = np.array([self.index.setdefault(v, len(self.index)) for v in distinct], np.int32)
        self.parts.append(to_code[codes] if len(codes) else np.empty(0, np.int32))

    def values(self) -> np.ndarray:
        """str per row (object array): each distinct value decoded once and shared by its rows."""
        decoded = np.array([v.decode("utf-8") for v in self.index], dtype=object)
        return decoded[np.concatenate(self.parts)] if self.parts else np.empty(0, dtype=object)


def _batches(examples_dir: str, model_spec: dict, wanted: dict, finish: Callable, examples: bool, specs):
    """(the pass's dataset of (model inputs, finish's values[, serialized batch]), "blocks" or
    "rows"): every key parsed once (a key the model parses another way than `wanted` says
    is parsed twice, from the row shards), one value a row."""
    import tensorflow as tf

    from components.contracts.blocks import read_blocks, readable_blocks

    first, second = dict(model_spec), {}
    for key, feature in wanted.items():
        if key in first and not _same(first[key], feature):
            second[key] = feature
        else:
            first.setdefault(key, feature)
    cores = _cores()
    per_example = any(kind.per_example for kind, _ in specs.kinds())  # images: the row order misclassified reads
    blocks = [] if examples or second or per_example else readable_blocks(examples_dir, names.EVAL_SPLIT, first)
    if blocks:
        def split(columns):
            return {k: columns[k] for k in model_spec}, finish({k: columns[k] for k in wanted})

        return read_blocks(blocks, first, SCORE_BATCH, cores).map(split, num_parallel_calls=cores,
                                                                   deterministic=True), "blocks"

    def parse(batch):
        parsed = tf.io.parse_example(batch, first)
        extra = tf.io.parse_example(batch, second) if second else {}
        values = finish({k: tf.squeeze((extra if k in extra else parsed)[k], -1) for k in wanted})
        model_inputs = {k: tf.squeeze(parsed[k], -1) for k in model_spec}
        return (model_inputs, values, batch) if examples else (model_inputs, values)

    return eval_records(examples_dir).batch(SCORE_BATCH).map(parse, num_parallel_calls=cores,
                                                             deterministic=True), "rows"


def predict(model_dir: str, examples_dir: str, slices: List[str], serve: Optional[Callable] = None,
            linear=None) -> Predictions:
    """Scores the eval split in one read. The model scores through its raw-features signature
    on the parsed batches (or `serving_examples` when it has no such signature); `serve`:
    another function from a batch of serialized examples to the outputs (e.g. the TFLite
    model's). `linear`: the baseline's fit (linear.py: BaselineFit), or a Future of it (then
    the model loads while it is fitted), scored on the same rows (Predictions.linear).
    The pass's batches, freed by its threads, are handed back to the system before the
    metrics' arrays are made (components: release_free_memory)."""
    predictions = _scoring_pass(model_dir, examples_dir, slices, serve, linear)
    release_free_memory()
    return predictions


def _scoring_pass(model_dir: str, examples_dir: str, slices: List[str], serve: Optional[Callable],
                  linear) -> Predictions:
    import tensorflow as tf

    from components.evaluate.linear import linear_scores

    started = time.monotonic()
    specs = load_feature_specs(model_dir)
    regression = specs.task == "regression"
    # What is read of each row besides the model's features; the examples name a column by
    # its safe name, a slice keeps the name the config gives.
    wanted = {specs.label: tf.io.FixedLenFeature([1], tf.float32 if regression else tf.string)}
    wanted.update({safe_name(s): tf.io.FixedLenFeature([1], tf.string, default_value=[""]) for s in slices})
    loaded = None
    if isinstance(linear, Future):  # fitted on train rows beside the load: the pass needs the fit
        loaded = tf.saved_model.load(model_dir) if serve is None else None
        linear = linear.result()
    scorer = linear_scores(linear) if linear is not None else None
    if linear is not None:  # the baseline's columns: numeric float (NaN missing), categorical, text bytes ("" missing)
        for c in linear.design.numeric:
            wanted.setdefault(c.name, tf.io.FixedLenFeature([1], tf.float32, default_value=[float("nan")]))
        for c in list(linear.design.categorical) + list(linear.design.text):
            wanted.setdefault(c.name, tf.io.FixedLenFeature([1], tf.string, default_value=[""]))
    to_index = None
    if not regression:
        to_index = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(specs.classes), tf.range(len(specs.classes), dtype=tf.int64)), default_value=-1)

    def finish(values):
        """A batch's columns -> what is kept of it: label (class index), slices, the baseline's predictions."""
        label = values[specs.label]
        out = {"label": label if regression else to_index.lookup(label),
               "slices": {s: values[safe_name(s)] for s in slices}}
        if scorer is not None:
            out["linear"] = scorer(values)
        return out

    model_spec = {f.name: kind.parse_feature(f) for kind, f in specs.each()}
    options = tf.data.Options()
    options.autotune.enabled = False  # the parallelism is set; no autotuner thread to wait for at the end

    def start(examples: bool):
        """The pass's batches, the first one read (which starts the reads ahead of it)."""
        dataset, read = _batches(examples_dir, model_spec if not examples else {}, wanted, finish, examples, specs)
        batches = iter(dataset.prefetch(PREFETCH).with_options(options))
        return batches, next(batches, None), read

    batches, head, read = start(serve is not None)
    raw = None
    if serve is None:
        loaded = loaded if loaded is not None else tf.saved_model.load(model_dir)  # the first batches read meanwhile
        raw = _raw_signature(loaded, model_spec)
        if raw is None:
            signature = loaded.signatures[names.EXAMPLES_SIGNATURE]
            serve = lambda batch: signature(examples=batch)  # noqa: E731
            batches, head, read = start(True)
    loaded_at, cpu_at = time.monotonic(), time.process_time()
    output = names.PREDICTIONS if regression else names.PROBABILITIES

    def score(element) -> np.ndarray:
        return np.asarray((raw(**element[0]) if raw is not None else serve(element[2]))[output])

    # What is kept of each batch, as numpy arrays at once (a string tensor per batch would hold
    # an object per row): at 2M eval rows the pass then holds about 40 bytes a row.
    outputs, labels, linear_parts = [], [], []
    codes = {s: _Codes() for s in slices}
    cores = _cores()
    with ThreadPoolExecutor(cores) as pool:  # one model call per core at a time, in the batches' order
        pending = deque()

        def take():
            future, values = pending.popleft()
            outputs.append(future.result())
            if len(outputs) % TRIM_BATCHES == 0:  # what TensorFlow's threads freed of the batches so far
                release_free_memory()
            labels.append(values["label"].numpy())
            for s in slices:
                codes[s].add(values["slices"][s].numpy())
            if scorer is not None:
                linear_parts.append(values["linear"].numpy())

        element = head
        while element is not None:
            pending.append((pool.submit(score, element), element[1]))
            if len(pending) > cores:
                take()
            element = next(batches, None)
        while pending:
            take()
    width = 1 if regression else len(specs.classes)
    probabilities = np.concatenate(outputs) if outputs else np.empty((0,) if regression else (0, width))

    def joined(parts, empty):
        return np.concatenate(parts) if parts else empty

    return Predictions(
        classes=list(specs.classes), labels=joined(labels, np.empty(0, np.float32 if regression else np.int64)),
        probabilities=probabilities, slice_values={s: codes[s].values() for s in slices},
        task=specs.task, read=read,
        linear=joined(linear_parts, np.empty((0,) if regression else (0, width))) if scorer is not None else None,
        seconds={"model_load": loaded_at - started, "scoring_pass": time.monotonic() - loaded_at,
                 "scoring_pass_cpu": time.process_time() - cpu_at})
def _groups(values: np.ndarray):
    """(the distinct values, sorted; each row's index into them; rows per value). Hashed
    (pandas.factorize), then only the distinct values sorted: no sort of a string per row."""
    import pandas as pd

    codes, unique = pd.factorize(values.reshape(-1), sort=True)
    return np.asarray(unique), codes, np.bincount(codes, minlength=len(unique))


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
