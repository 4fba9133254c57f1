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
from components.kinds import FeatureSpecs
from components.kinds.categorical import IDS, table_rows
from components.kinds.layers import concat
from components.train.settings import TrainSettings

PREDICTIONS = names.PREDICTIONS


class CrossLayer(tf_keras.layers.Layer):
    """One DCN-v2 cross layer: x0 * (W x + b) + x."""

    def build(self, input_shape):
        self.dense = tf_keras.layers.Dense(input_shape[-1][-1], kernel_initializer="glorot_uniform")
        super().build(input_shape)

    def call(self, inputs):
        x0, x = inputs
        return x0 * self.dense(x) + x


def model_inputs(specs: FeatureSpecs) -> Dict[str, tf_keras.Input]:
    """One raw input per feature, as its kind declares it ([batch, 1] float32 numeric,
    string categorical, ...)."""
    return {spec.name: kind.model_input(spec) for kind, spec in specs.each()}


# The feature layers work on all the features of a kind at once (one imputation and
# normalisation over [batch, numeric features], one embedding table for every categorical
# feature: components/kinds/) rather than one layer chain per feature: the same model, with
# a train step of a third of the ops to trace and optimise before the first step (1,265 ->
# 422 on the click-through model: 26 embedding tables, their gradients and their optimizer
# updates become one of each; docs/benchmarks.md, "Fourth round").

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


class FeatureParts:
    """What every family (and a custom model) builds on: the raw inputs, each kind's encoded
    part (`encoded[kind]`: components/kinds/base.py Encoded), the dense vector of them all
    (`dense`), and, built when a family asks for it, that vector through the ReLU tower
    (`deep`). Shortcuts: `ids`, the categorical features' rows of the shared embedding table
    ([batch, categorical features], or None), and `numeric`, the standardised numerics (a
    list of one [batch, numeric features] tensor, or empty)."""

    def __init__(self, specs: FeatureSpecs, settings: TrainSettings):
        self.specs, self.settings = specs, settings
        self.inputs = model_inputs(specs)
        self.encoded = {kind.name: kind.encode(kind_specs, self.inputs, settings) for kind, kind_specs in specs.kinds()}
        categorical = self.encoded.get("categorical")
        self.ids = categorical.extras.get(IDS) if categorical else None
        self.numeric = self.encoded["numeric"].dense if "numeric" in self.encoded else []
        self.dense = concat([t for part in self.encoded.values() for t in part.dense], "features")
        self._deep = None

    @property
    def deep(self):
        if self._deep is None:
            self._deep = _dense_tower(self.dense, list(self.settings.hidden_units), self.settings.dropout)
        return self._deep


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
        wide.append(tf_keras.layers.CategoryEncoding(table_rows(parts.specs.categorical), output_mode="multi_hot",
                                                     name="categorical_onehot")(parts.ids))
    return concat([parts.deep, *wide, *parts.numeric], "wide_and_deep")


@model_family("cross")
def cross(parts: FeatureParts, settings: TrainSettings):
    """A DCN-v2 cross network beside the tower."""
    x = parts.dense
    for i in range(settings.cross_layers):
        x = CrossLayer(name=f"cross_{i}")([parts.dense, x])
    return concat([x, parts.deep], "cross_and_deep")


def build_model(specs: FeatureSpecs, settings: TrainSettings, start=None) -> tf_keras.Model:
    """The family `settings.model` on the shared feature parts, with the task's output head
    (with `start`, a fitted linear start: beside the linear model, initialised to it). A
    custom model (training.custom_model) has this signature without `start`."""
    top = FAMILIES.get(settings.model)
    if top is None:
        raise GpupipeError(f"training.model: '{settings.model}' is not a model family; use one of "
                           f"{', '.join(FAMILIES)} or training.custom_model")
    parts = FeatureParts(specs, settings)
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
