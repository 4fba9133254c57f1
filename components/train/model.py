"""The tf_keras models: the table families (dnn, wide_deep, cross; the image families are
vision.py's), the model `build_model` makes of the configured family (training.model) and
a custom builder (training.custom_model), and `compile_model`, that model compiled under
the strategy with the task's loss, metric and optimizer. Preprocessing (imputation, normalisation,
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
from components.kinds.categorical import table_rows
from components.kinds.layers import concat
from components.train import vision
from components.train.parts import FAMILIES, FeatureParts, model_family, model_inputs, output_layer  # noqa: F401
from components.train.settings import TrainSettings


class CrossLayer(tf_keras.layers.Layer):
    """One DCN-v2 cross layer: x0 * (W x + b) + x."""

    def build(self, input_shape):
        self.dense = tf_keras.layers.Dense(input_shape[-1][-1], kernel_initializer="glorot_uniform")
        super().build(input_shape)

    def call(self, inputs):
        x0, x = inputs
        return x0 * self.dense(x) + x


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
    if specs.of_kind("image") and settings.model not in vision.IMAGE_FAMILIES:
        raise GpupipeError(f"training.model: {settings.model} takes no image features (data.image_features); use an "
                           f"image family: {', '.join(IMAGE_FAMILIES)}")
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


def compile_model(specs: FeatureSpecs, settings: TrainSettings, strategy, learning_rate: float,
                  steps_per_epoch: int = 1, target: str = "standardize", start=None):
    """The configured family (or the custom builder) under the strategy, compiled with the
    task's loss and metric. Regression: the head learns the target standardised (its
    Rescaling by `specs`' label mean and deviation); with `target` log, `specs` carries
    log(1 + y)'s, the loss is on that scale and the rmse metric in the label's units."""
    from components.train.optimizers import accumulate, build_optimizer_slots, learning_rate_schedule, make_optimizer
    from components.train.target import LOG, LabelUnitsRMSE

    k = settings.gradient_accumulation_steps
    with strategy.scope():
        builder = load_custom_builder(settings.custom_model) if settings.custom_model else build_model
        model = builder(specs, settings) if start is None else builder(specs, settings, start)
        # The schedule counts optimizer steps: one per k training steps with accumulation.
        learning_rate = learning_rate_schedule(learning_rate, settings.lr_schedule,
                                               settings.epochs * steps_per_epoch // k)
        if settings.task == "regression":
            loss = tf_keras.losses.MeanSquaredError()
            metrics = [LabelUnitsRMSE(LOG) if target == LOG else tf_keras.metrics.RootMeanSquaredError(name="rmse")]
        else:
            loss = tf_keras.losses.SparseCategoricalCrossentropy()
            metrics = [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        model.compile(optimizer=make_optimizer(settings.optimizer, learning_rate), loss=loss, metrics=metrics,
                      jit_compile=settings.xla)
        accumulate(model, k)
        build_optimizer_slots(model.optimizer, model.trainable_variables)
    return model
