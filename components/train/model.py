"""The tf_keras models, the tf.data input pipeline and the SavedModel export.

Preprocessing (imputation, normalisation, vocabularies, hashing) lives inside the model,
so the exported graph takes raw feature values.
"""
from __future__ import annotations

import importlib
import math
import os
from typing import Callable, Dict, List, Optional

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.features import FeatureSpecs
from components.train.settings import TrainSettings

PREDICTIONS = names.PREDICTIONS

# Regression targets (training.target_transform): what the network's head learns.
STANDARDIZE, LOG = "standardize", "log"
LOG_SKEW = 0.5  # auto: log(1 + y) when the label is never negative and 3 (mean - median) / std is at least this


def choose_target_transform(label_stats, setting: str = "auto"):
    """(transform, why) for a regression label from its train statistics (TFDV numeric
    statistics): "log" (log(1 + y), standardised) for a label that is never negative and
    skewed to the right, else "standardize"."""
    num = label_stats.num_stats
    skew = 3 * (num.mean - num.median) / num.std_dev if num.std_dev > 0 else 0.0
    if setting != "auto":
        return setting, f"training.target_transform: {setting}"
    if num.min >= 0 and skew >= LOG_SKEW:
        return LOG, f"never negative (min {num.min:g}) and skewed (3 (mean - median) / std = {skew:.2f} >= {LOG_SKEW:g})"
    return STANDARDIZE, (f"skew 3 (mean - median) / std = {skew:.2f}" if num.min >= 0 else f"min {num.min:g} < 0")


def log_target_moments(label_stats):
    """The mean and deviation of log(1 + y) from the label's quantile histogram (each
    bucket's rows at the middle of its log edges): the constants that standardise it."""
    import numpy as np

    buckets = []
    for h in label_stats.num_stats.histograms:
        if h.type == h.QUANTILES:
            buckets = [(b.low_value, b.high_value, b.sample_count) for b in h.buckets]
    if not buckets:  # no quantiles: from the mean and deviation (a log-normal's)
        num = label_stats.num_stats
        return float(np.log1p(max(num.mean, 0.0))), float(max(num.std_dev / max(1.0 + num.mean, 1e-6), 1e-3))
    mid = np.array([(np.log1p(max(lo, 0.0)) + np.log1p(max(hi, 0.0))) / 2 for lo, hi, _ in buckets])
    count = np.array([c for _, _, c in buckets], dtype=float)
    mean = float((mid * count).sum() / count.sum())
    std = float(np.sqrt((count * (mid - mean) ** 2).sum() / count.sum()))
    return mean, max(std, 1e-3)


def to_label_units(values, transform: str, smearing: float = 1.0):
    """A head's output (the model's) -> the label's units. For log(1 + y), `smearing` is
    Duan's factor (the mean of exp(residual) on held-out rows): exp(u) alone is the median
    of 1 + y given the features, exp(u) x the factor its mean, what rmse rewards."""
    if transform != LOG:
        return values
    return tf.maximum(tf.exp(values) * smearing - 1.0, 0.0)


def smearing_factor(model, dataset, max_batches: int = 200) -> float:
    """Duan's smearing estimate for a log(1 + y) target: the mean of exp(target - output)
    over `dataset`'s (features, log(1 + y)) batches (at most `max_batches`); 1.0 without rows."""
    total, count = 0.0, 0
    for features, target in dataset.take(max_batches):
        u = tf.reshape(tf.cast(model(features, training=False), tf.float32), [-1])
        total += float(tf.reduce_sum(tf.exp(tf.reshape(tf.cast(target, tf.float32), [-1]) - u)))
        count += int(tf.size(u))
    factor = total / count if count else 1.0
    return factor if math.isfinite(factor) and factor > 0 else 1.0


class LabelUnitsRMSE(tf_keras.metrics.Metric):
    """RMSE in the label's units when the network learns log(1 + y): both the target and
    the prediction mapped back before the error."""

    def __init__(self, transform: str = LOG, name: str = "rmse", **kwargs):
        super().__init__(name=name, **kwargs)
        self.transform = transform
        self.total = self.add_weight("total", initializer="zeros")
        self.count = self.add_weight("count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.reshape(to_label_units(tf.cast(y_true, tf.float32), self.transform), [-1])
        y_pred = tf.reshape(to_label_units(tf.cast(y_pred, tf.float32), self.transform), [-1])
        self.total.assign_add(tf.reduce_sum(tf.square(y_true - y_pred)))
        self.count.assign_add(tf.cast(tf.size(y_true), tf.float32))

    def result(self):
        return tf.sqrt(tf.math.divide_no_nan(self.total, self.count))

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "transform": self.transform}


class FillMissing(tf_keras.layers.Layer):
    """Replaces NaN (a missing numeric value) with a constant per column: the training mean."""

    def __init__(self, value, **kwargs):
        super().__init__(**kwargs)
        self.value = value

    def call(self, inputs):
        return tf.where(tf.math.is_nan(inputs), tf.constant(self.value, inputs.dtype), inputs)

    def get_config(self):
        return {**super().get_config(), "value": self.value}


class SharedTableRows(tf_keras.layers.Layer):
    """Per-feature ids ([batch, 1] each) -> [batch, features] rows of one shared table:
    feature i's ids shifted by `offsets[i]`, the rows of the features before it."""

    def __init__(self, offsets: List[int], **kwargs):
        super().__init__(**kwargs)
        self.offsets = list(offsets)

    def call(self, inputs):
        ids = tf.concat([tf.cast(x, tf.int64) for x in inputs], axis=-1)
        return ids + tf.constant(self.offsets, tf.int64)

    def get_config(self):
        return {**super().get_config(), "offsets": self.offsets}


class CrossLayer(tf_keras.layers.Layer):
    """One DCN-v2 cross layer: x0 * (W x + b) + x."""

    def build(self, input_shape):
        self.dense = tf_keras.layers.Dense(input_shape[-1][-1], kernel_initializer="glorot_uniform")
        super().build(input_shape)

    def call(self, inputs):
        x0, x = inputs
        return x0 * self.dense(x) + x


def model_inputs(specs: FeatureSpecs) -> Dict[str, tf_keras.Input]:
    """One [batch, 1] raw input per feature: float32 numeric, string categorical."""
    inputs = {f.name: tf_keras.Input(shape=(1,), name=f.name, dtype=tf.float32) for f in specs.numeric}
    inputs.update({f.name: tf_keras.Input(shape=(1,), name=f.name, dtype=tf.string) for f in specs.categorical})
    return inputs


# The feature layers work on all the features of a kind at once (one imputation and
# normalisation over [batch, numeric features], one embedding table for every categorical
# feature) rather than one layer chain per feature: the same model, with a train step of
# a third of the ops to trace and optimise before the first step (1,265 -> 422 on the
# click-through model: 26 embedding tables, their gradients and their optimizer updates
# become one of each; docs/benchmarks.md, "Fourth round").

def encode_numeric(specs: FeatureSpecs, inputs) -> List[tf.Tensor]:
    """The numeric features imputed (training mean) and standardised: one [batch, numeric
    features] tensor in spec order, in a list (empty without numeric features)."""
    if not specs.numeric:
        return []
    x = _concat([inputs[f.name] for f in specs.numeric], "numeric")
    x = FillMissing([f.mean for f in specs.numeric], name="numeric_fill")(x)
    return [tf_keras.layers.Normalization(mean=[f.mean for f in specs.numeric],
                                          variance=[f.std ** 2 for f in specs.numeric], name="numeric_norm")(x)]


def table_offsets(specs: FeatureSpecs) -> List[int]:
    """Each categorical feature's first row in the shared table (its rows: its cardinality)."""
    offsets, row = [], 0
    for f in specs.categorical:
        offsets.append(row)
        row += f.cardinality
    return offsets


def table_rows(specs: FeatureSpecs) -> int:
    """The shared table's rows: every categorical feature's block."""
    return sum(f.cardinality for f in specs.categorical)


def categorical_ids(specs: FeatureSpecs, inputs) -> Optional[tf.Tensor]:
    """[batch, categorical features] rows of the shared table, in spec order: each feature's
    vocabulary lookup (its row 0 = out of vocabulary) or hash bucket, after the rows of the
    features before it. None without categorical features."""
    if not specs.categorical:
        return None
    ids = []
    for f in specs.categorical:
        if f.hash_buckets:
            ids.append(tf_keras.layers.Hashing(f.hash_buckets, name=f"{f.name}_hash")(inputs[f.name]))
        else:
            ids.append(tf_keras.layers.StringLookup(vocabulary=f.vocabulary, num_oov_indices=1,
                                                    name=f"{f.name}_lookup")(inputs[f.name]))
    return SharedTableRows(table_offsets(specs), name="categorical_rows")(ids)


def embed_categorical(specs: FeatureSpecs, ids, embedding_dim: int) -> List[tf.Tensor]:
    """The categorical features' embeddings from one table: [batch, features x
    embedding_dim] in spec order, in a list (empty without categorical features)."""
    if ids is None:
        return []
    emb = tf_keras.layers.Embedding(table_rows(specs), embedding_dim, name="categorical_embeddings")(ids)
    return [tf_keras.layers.Flatten(name="categorical_flat")(emb)]


def output_layer(specs: FeatureSpecs, x):
    """Class probabilities (softmax, float32 even under mixed precision) or, for
    regression, the prediction in the label's units."""
    if specs.task == "regression":
        z = tf_keras.layers.Dense(1, dtype="float32", name="regression_head")(x)
        return tf_keras.layers.Rescaling(specs.label_std or 1.0, offset=specs.label_mean or 0.0, dtype="float32",
                                         name=PREDICTIONS)(z)
    return tf_keras.layers.Dense(len(specs.classes), activation="softmax", dtype="float32",
                                 name=names.PROBABILITIES)(x)


def _dense_tower(x, hidden_units: List[int]):
    for i, units in enumerate(hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
    return x


def _concat(parts, name):
    return tf_keras.layers.Concatenate(name=name)(parts) if len(parts) > 1 else parts[0]


class FeatureParts:
    """What every family builds on: the raw inputs, the categorical ids (`ids`: [batch,
    categorical features] rows of the shared table, or None), the encoded numeric features
    (`numeric`: a list of one [batch, numeric features] tensor, or empty), and the dense
    vector (numerics and embeddings) through the tower."""

    def __init__(self, specs: FeatureSpecs, hidden_units: List[int], embedding_dim: int):
        self.specs = specs
        self.inputs = model_inputs(specs)
        self.ids = categorical_ids(specs, self.inputs)
        self.numeric = encode_numeric(specs, self.inputs)
        self.dense = _concat(self.numeric + embed_categorical(specs, self.ids, embedding_dim), "features")
        self.deep = _dense_tower(self.dense, hidden_units)


# Model families by name (training.model): each takes the shared parts and the settings and
# returns the layer the output head sits on. A new family joins with one @model_family.
FAMILIES: Dict[str, Callable[[FeatureParts, TrainSettings], tf.Tensor]] = {}


def model_family(name: str):
    def register(top: Callable[[FeatureParts, TrainSettings], tf.Tensor]):
        FAMILIES[name] = top
        return top

    return register


@model_family("dnn")
def dnn(parts: FeatureParts, settings: TrainSettings):
    """Embeddings and standardised numerics through a ReLU tower."""
    return parts.deep


@model_family("wide_deep")
def wide_deep(parts: FeatureParts, settings: TrainSettings):
    """The tower plus a wide linear part over one-hot categorical ids and the numerics."""
    wide = []
    if parts.ids is not None:  # each feature's one-hot, side by side: its rows of the shared table
        wide.append(tf_keras.layers.CategoryEncoding(table_rows(parts.specs), output_mode="multi_hot",
                                                     name="categorical_onehot")(parts.ids))
    return _concat([parts.deep, *wide, *parts.numeric], "wide_and_deep")


@model_family("cross")
def cross(parts: FeatureParts, settings: TrainSettings):
    """A DCN-v2 cross network beside the tower."""
    x = parts.dense
    for i in range(settings.cross_layers):
        x = CrossLayer(name=f"cross_{i}")([parts.dense, x])
    return _concat([x, parts.deep], "cross_and_deep")


def build_model(specs: FeatureSpecs, settings: TrainSettings) -> tf_keras.Model:
    """The family `settings.model` on the shared feature parts, with the task's output head.
    A custom model (training.custom_model) has this signature."""
    top = FAMILIES.get(settings.model)
    if top is None:
        raise GpupipeError(f"training.model: '{settings.model}' is not a model family; use one of "
                           f"{', '.join(FAMILIES)} or training.custom_model")
    parts = FeatureParts(specs, list(settings.hidden_units), settings.embedding_dim)
    return tf_keras.Model(inputs=parts.inputs, outputs=output_layer(specs, top(parts, settings)),
                          name=settings.model)


def load_custom_builder(reference: str) -> Callable[..., tf_keras.Model]:
    """`module:function` -> the function (called like build_model, returns a tf_keras model)."""
    module_name, _, function = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise GpupipeError(f"training.custom_model: cannot import '{module_name}' ({err}); "
                           "install it into the image or put it on PYTHONPATH") from None
    builder = getattr(module, function, None)
    if not callable(builder):
        raise GpupipeError(f"training.custom_model: '{module_name}' has no function '{function}'")
    return builder


def parse_spec(specs: FeatureSpecs, with_label: bool) -> Dict[str, tf.io.FixedLenFeature]:
    """tf.Example parse spec: a missing numeric value parses as NaN, a missing string as ''."""
    spec = {f.name: tf.io.FixedLenFeature([1], tf.float32, default_value=[float("nan")]) for f in specs.numeric}
    spec.update({f.name: tf.io.FixedLenFeature([1], tf.string, default_value=[""]) for f in specs.categorical})
    if with_label:
        dtype = tf.float32 if specs.task == "regression" else tf.string
        spec[specs.label] = tf.io.FixedLenFeature([1], dtype)
    return spec


def label_transform(specs: FeatureSpecs, target: str = STANDARDIZE):
    """Raw label tensor [batch, 1] -> training target: class index, or the float value
    (log(1 + y) when the target transform is log)."""
    if specs.task == "regression":
        if target == LOG:
            return lambda raw: tf.math.log1p(tf.maximum(tf.squeeze(raw, axis=-1), 0.0))
        return lambda raw: tf.squeeze(raw, axis=-1)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(specs.classes), tf.range(len(specs.classes), dtype=tf.int64)),
        default_value=-1)
    return lambda raw: table.lookup(tf.squeeze(raw, axis=-1))


def make_dataset(file_pattern: str, specs: FeatureSpecs, batch_size: int, shuffle: bool, seed: int,
                 repeat: bool = False, cache: str = names.CACHE_NONE, cache_dir: str = "",
                 shuffle_buffer: int = 10_000, validation_percent: int = 0, part: str = "all",
                 target: str = STANDARDIZE) -> tf.data.Dataset:
    """(features, target) batches from gzip TFRecord shards: parallel interleaved reads,
    shuffle, batch then one vectorised parse per batch, prefetch.

    `cache`: "none" reads and parses the shards every epoch; "memory" keeps the parsed
    batches of the first epoch in memory; "disk" writes them to a file under `cache_dir`
    (local scratch) during the first epoch and reads them back in later epochs, which
    skips decompression and parsing (the costly part on the CPU: about 10 of 16
    core-microseconds per example here). Cached batches are replayed in a new order
    every epoch; the examples inside a batch stay together.

    Reads and parses run on every core the process may use (`input_parallelism`), set
    rather than left to tf.data's autotuner: its model thread, once training has run
    for a while, sleeps for up to its optimisation period (tens of seconds), and an
    iterator read inside `fit`'s train function waits for it when it is destroyed,
    which is the end of `fit`. On the click-through example that was 8-17 s of a 50 s
    train task doing nothing; with the autotuner off the teardown takes 0.3 s and the
    input delivers the same examples/s (docs/benchmarks.md, "Fourth round").

    `part`: "all" the examples, or with `validation_percent` > 0 the "train" rows or the
    "validation" slice of them (`in_validation_slice`: a hash of the serialized example,
    so the same rows every epoch and on every worker, the two parts disjoint)."""
    if part not in ("all", "train", "validation"):
        raise GpupipeError(f"input part: '{part}' is not all, train or validation")
    if cache not in names.INPUT_CACHES:
        raise GpupipeError(f"input cache: '{cache}' is not one of {', '.join(names.INPUT_CACHES)}")
    if cache == names.CACHE_DISK and not cache_dir:
        raise GpupipeError("input cache: 'disk' needs a local scratch directory; set training.scratch_dir")
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise GpupipeError(f"examples: no files match {file_pattern}; run ingest first")
    spec = parse_spec(specs, with_label=True)
    to_target = label_transform(specs, target)

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        return parsed, to_target(parsed.pop(specs.label))

    parallel, cycle = input_parallelism(), min(len(files), 8)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20),
                       cycle_length=cycle, num_parallel_calls=min(cycle, parallel),
                       deterministic=not shuffle)
    if part != "all" and validation_percent > 0:
        held = part == "validation"
        ds = ds.filter(lambda record: tf.equal(in_validation_slice(record, validation_percent), held))
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed)
    if cache == names.CACHE_NONE:
        if repeat:
            ds = ds.repeat()
        ds = ds.batch(batch_size).map(parse, num_parallel_calls=parallel)
    else:
        # The first pass parses and caches; later passes replay the parsed batches from
        # the cache in a new order.
        cached = ds.batch(batch_size).map(parse, num_parallel_calls=parallel).cache(
            os.path.join(cache_dir, "parsed-batches") if cache == names.CACHE_DISK else "")
        # batches held for reordering: fewer when memory is short (disk)
        replay = cached.shuffle(256 if cache == names.CACHE_MEMORY else 64, seed=seed) if shuffle else cached
        if not repeat:
            ds = replay
        elif shuffle:
            # The first pass streams its batches as they are parsed (already in a shuffled
            # order: the example buffer above), so training starts on the first batch, not
            # after the whole split is parsed into the batch buffer; the later passes are
            # the reordered replay. Both read the one cache.
            ds = cached.concatenate(replay.repeat())
        else:
            ds = cached.repeat()
    options = tf.data.Options()
    # Few shards: shard by record, not by file, across multi-worker replicas.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.autotune.enabled = False  # the parallelism above is set (see the docstring)
    # The prefetch buffer still grows while the model waits for input (tf.data's prefetch
    # autotuner, which is not the model thread's).
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def in_validation_slice(serialized, percent: int):
    """Whether serialized examples fall in the validation slice of the train split: their
    bytes' hash in the first `percent` of 100 buckets (the same rows every run and epoch)."""
    return tf.strings.to_hash_bucket_fast(serialized, 100) < percent


def input_parallelism() -> int:
    """The cores this process may run on (its CPU affinity: a pod's cpuset, a taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def make_naive_dataset(file_pattern: str, specs: FeatureSpecs, batch_size: int) -> tf.data.Dataset:
    """The input pipeline people write first: one file after another, per-example parse,
    no parallelism, no prefetch. Only for the benchmark's comparison."""
    spec = parse_spec(specs, with_label=True)
    to_target = label_transform(specs)

    def parse_one(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        return parsed, parsed.pop(specs.label)

    ds = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(file_pattern)), compression_type="GZIP").map(parse_one)
    return ds.batch(batch_size).map(lambda f, y: (f, to_target(y)))


class ServingModule(tf.Module):
    """What the SavedModel exports: the trained model plus two signatures."""

    def __init__(self, model: tf_keras.Model, specs: FeatureSpecs, target: str = STANDARDIZE,
                 smearing: float = 1.0):
        super().__init__()
        self.model = model
        self.target = target  # regression: log -> the head's log(1 + y) mapped back to the label's units
        self.smearing = float(smearing)
        self.model_variables = list(model.variables)  # what the model learnt, by layer name, in the SavedModel
        self.task = specs.task
        self.class_names = tf.constant(specs.classes or [""])
        self._parse_spec = parse_spec(specs, with_label=False)
        raw_spec = {f.name: tf.TensorSpec([None], tf.float32, name=f.name) for f in specs.numeric}
        raw_spec.update({f.name: tf.TensorSpec([None], tf.string, name=f.name) for f in specs.categorical})
        self.serve_raw = tf.function(self._serve_raw, input_signature=[raw_spec])
        self.serve_examples = tf.function(
            self._serve_examples, input_signature=[tf.TensorSpec([None], tf.string, name="examples")])

    def _predict(self, features):
        outputs = tf.cast(self.model(features, training=False), tf.float32)
        if self.task == "regression":
            return {PREDICTIONS: to_label_units(tf.squeeze(outputs, axis=-1), self.target, self.smearing)}
        classes = tf.gather(self.class_names, tf.argmax(outputs, axis=-1))
        return {names.PROBABILITIES: outputs, names.CLASSES: classes}

    def _serve_raw(self, features):
        return self._predict({k: tf.expand_dims(v, -1) for k, v in features.items()})

    def _serve_examples(self, examples):
        return self._predict(tf.io.parse_example(examples, self._parse_spec))


def export_saved_model(model: tf_keras.Model, specs: FeatureSpecs, export_dir: str,
                       target: str = STANDARDIZE, smearing: float = 1.0) -> None:
    """SavedModel with `serving_default` (raw features, one value per row: REST/JSON friendly)
    and `serving_examples` (serialized tf.Example: TF Serving gRPC Predict); both return a
    regression's prediction in the label's units (`target` log: the head's log(1 + y) mapped
    back inside the signature, times Duan's `smearing` factor)."""
    from tf_keras.src.saving.legacy.saved_model.utils import keras_option_scope

    module = ServingModule(model, specs, target, smearing)
    # Serving needs the two signatures, not tf_keras' per-layer call traces (which it saves
    # for reloading it as Keras, which a ServingModule never is): on the ctr model the
    # export took 6.5 s with them and 3.1 s without.
    with keras_option_scope(save_traces=False, in_tf_saved_model_scope=True):
        tf.saved_model.save(module, export_dir, signatures={
            names.SERVING_SIGNATURE: module.serve_raw.get_concrete_function(),
            names.EXAMPLES_SIGNATURE: module.serve_examples.get_concrete_function(),
        })
