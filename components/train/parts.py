"""What every model family builds on: one raw input per feature and each kind's encoding
of it (FeatureParts), the ReLU tower, the task's output head, and the registry of families
(training.model). A family is one function `top(parts, settings) -> tensor` registered with
@model_family; the table families are in model.py, the image families in vision.py."""
from __future__ import annotations

from typing import Callable, Dict, List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.kinds import FeatureSpecs
from components.kinds.categorical import IDS
from components.kinds.layers import concat
from components.train.settings import TrainSettings

PREDICTIONS = names.PREDICTIONS


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
        dense = [t for part in self.encoded.values() for t in part.dense]
        self.dense = concat(dense, "features") if dense else None  # None: only images (their families take them)
        self._deep = None

    @property
    def deep(self):
        if self._deep is None and self.dense is not None:
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
