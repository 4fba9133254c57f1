"""The tf_keras models: the shared feature layers, the model families (training.model) and
a custom builder (training.custom_model). Preprocessing (imputation, normalisation,
vocabularies, hashing) lives inside the model, so the exported graph takes raw feature
values (components/train/export.py)."""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Optional

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.features import FeatureSpecs
from components.train.settings import TrainSettings

PREDICTIONS = names.PREDICTIONS


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


def output_layer(specs: FeatureSpecs, x, linear=None):
    """Class probabilities (softmax, float32 even under mixed precision) or, for
    regression, the prediction in the label's units. With `linear` (the linear start's
    logits or standardised prediction, components/train/linear_start.py) the head on `x`
    is a residual added to it, starting at zero."""
    if linear is not None:
        from components.train.linear_start import residual_head

        return residual_head(specs, x, linear)
    if specs.task == "regression":
        z = tf_keras.layers.Dense(1, dtype="float32", name="regression_head")(x)
        return tf_keras.layers.Rescaling(specs.label_std or 1.0, offset=specs.label_mean or 0.0, dtype="float32",
                                         name=PREDICTIONS)(z)
    return tf_keras.layers.Dense(len(specs.classes), activation="softmax", dtype="float32",
                                 name=names.PROBABILITIES)(x)


def _dense_tower(x, hidden_units: List[int], dropout: float = 0.0):
    for i, units in enumerate(hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
        if dropout:
            x = tf_keras.layers.Dropout(dropout, name=f"dropout_{i}")(x)
    return x


def _concat(parts, name):
    return tf_keras.layers.Concatenate(name=name)(parts) if len(parts) > 1 else parts[0]


class FeatureParts:
    """What every family builds on: the raw inputs, the categorical ids (`ids`: [batch,
    categorical features] rows of the shared table, or None), the encoded numeric features
    (`numeric`: a list of one [batch, numeric features] tensor, or empty), and the dense
    vector (numerics and embeddings) through the tower."""

    def __init__(self, specs: FeatureSpecs, hidden_units: List[int], embedding_dim: int, dropout: float = 0.0):
        self.specs = specs
        self.inputs = model_inputs(specs)
        self.ids = categorical_ids(specs, self.inputs)
        self.numeric = encode_numeric(specs, self.inputs)
        self.dense = _concat(self.numeric + embed_categorical(specs, self.ids, embedding_dim), "features")
        self.deep = _dense_tower(self.dense, hidden_units, dropout)


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


def build_model(specs: FeatureSpecs, settings: TrainSettings, start=None) -> tf_keras.Model:
    """The family `settings.model` on the shared feature parts, with the task's output head
    (with `start`, a fitted linear start: beside the linear model, initialised to it). A
    custom model (training.custom_model) has this signature without `start`."""
    top = FAMILIES.get(settings.model)
    if top is None:
        raise GpupipeError(f"training.model: '{settings.model}' is not a model family; use one of "
                           f"{', '.join(FAMILIES)} or training.custom_model")
    parts = FeatureParts(specs, list(settings.hidden_units), settings.embedding_dim, settings.dropout)
    from components.train.linear_start import initialise, linear_part

    model = tf_keras.Model(inputs=parts.inputs, name=settings.model, outputs=output_layer(
        specs, top(parts, settings), linear_part(start, parts.inputs) if start is not None else None))
    return initialise(model, start) if start is not None else model


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
