"""The linear start (training.linear_start, on by default for the built-in families): the
model contains the linear model and training starts from it.

Before training, LogisticRegression or Ridge (components/contracts/linear.py) is fitted on
the train split (with a text feature, its rows outside the validation slice: fit_linear_start)
in the design evaluate's baseline uses: the model starts as that baseline.
The model gets a linear part over every feature in that
design (numbers median-imputed and standardised with a missing indicator, categories
one-hot over their most frequent values, text as the TF-IDF of its tokens and n-grams),
initialised with the fitted weights, and the
family's network becomes a residual beside it: its output layer starts at zero, so the
untrained model is the linear model. Early stopping scores the validation slice before the
first epoch too (an epoch must beat them by two standard errors of the slice's mean loss),
and the best weights (the starting ones included) are restored at the end, also when
training runs to its cap: on the validation slice the trained model is at least the linear
one, and it is the linear one unless an epoch is clearly better.

Regression with `training.target_transform: auto` and a label that is never negative: the
linear model is cross-validated on the fitted rows on both targets (the label standardised,
and log(1 + y) standardised, mapped back with Duan's smearing) and the target whose linear
model scores the better rmse, in the label's units, is the one the network learns.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import List, Optional

import numpy as np
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.kinds import FeatureSpecs
from components.train.linear_fit import LinearStart, _kinds, fit_linear_start

LINEAR_LAYER = "linear_start"


def with_linear_start(examples_dir: str, statistics_dir: str, plan, beside=None):
    """(the plan, its regression target as the linear start chose it; the start), or (the
    plan, None) when the train rows hold one class. `beside`: the start being fitted in a
    process of its own (linear_fit.py: fitted_beside), taken when it fitted it for this plan."""
    import dataclasses

    from components.contracts.statistics import load_statistics

    if beside is not None:
        taken, start = beside.result(plan.specs)
        if taken:
            return plan, start
        print(f"linear start: fitted here ({start})", flush=True)
    s = plan.settings
    stats = load_statistics(statistics_dir, names.TRAIN_SPLIT)
    start = fit_linear_start(examples_dir, plan.specs, stats, plan.target, plan.target_why, plan.model_specs,
                             s.target_transform, plan.held_out)
    if start is None:
        return plan, None
    return dataclasses.replace(plan, target=start.target, target_why=start.why, model_specs=start.specs), start


def model_on_the_start(examples_dir: str, statistics_dir: str, plan, beside, build, phases, model_phase: str):
    """(the plan, the model or None, the start): with the fit's process (`beside`), the
    model is built (`build(plan, start)`) on the design that process sends first, while the
    fit goes on, then takes the fit's weights; None when there is no such design or the fit
    came out on another one (the caller then builds it on the start). Phases: `model_phase`
    (the build), then LINEAR_START (the wait for the fit)."""
    from components.train import phases as phase
    from components.train.linear_fit import same_design

    early = beside.design_start(plan.specs) if beside is not None else None
    model = build(plan, early) if early is not None else None
    if model is not None:
        phases.mark(model_phase)
    plan, start = with_linear_start(examples_dir, statistics_dir, plan, beside)
    phases.mark(phase.LINEAR_START)
    return plan, initialise(model, start) if model is not None and same_design(start, early) else None, start


def save_for_evaluate(examples_dir: str, model_dir: str, start: Optional[LinearStart], train_rows: int) -> None:
    """A classifier's linear start beside the model (contracts/linear.py: write_linear_fit):
    read from these examples, label, features and rows, it is the baseline evaluate fits, and
    evaluate takes it instead of reading the train split again (evaluate/linear.py: saved_fit)."""
    from components.contracts.examples import read_manifest
    from components.contracts.linear import write_linear_fit

    fingerprint = (read_manifest(examples_dir) or {}).get("source_fingerprint")
    if start is None or start.specs.task == "regression" or not fingerprint:
        return
    write_linear_fit(model_dir, start.design, start.fit, {
        "examples": str(fingerprint), "label": start.specs.label, "kinds": _kinds(start.specs),
        "train_rows": int(train_rows)}, start.fit_rows)


@contextlib.contextmanager
def read_beside(plan, make_validation):
    """Yields the validation slice's dataset (`make_validation()`), its first pass (the
    read, the hash of every record, the parse into the memory cache: mostly one core)
    running in a thread beside the body (the linear start: mostly one core too), done when
    the body is; or yields None when that pass cannot run early: no slice, no memory cache
    to keep it, or a regression, whose target the linear start may change."""
    if not plan.held_out or plan.validation_cache != names.CACHE_MEMORY or plan.specs.task == "regression":
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    validation = make_validation()
    with ThreadPoolExecutor(1, thread_name_prefix="validation-slice") as pool:
        read = pool.submit(lambda: sum(1 for _ in validation))  # a whole pass: the cache is complete after it
        try:
            yield validation
        finally:
            read.result()


class LinearDesignNumeric(tf_keras.layers.Layer):
    """[batch, numeric features] raw values (NaN missing) -> [batch, 2 x features]: each
    imputed with `fill` and standardised, then the missing indicators (the linear design's
    numeric columns)."""

    def __init__(self, fill: List[float], mean: List[float], std: List[float], **kwargs):
        super().__init__(**kwargs)
        self.fill, self.mean, self.std = list(fill), list(mean), list(std)

    def call(self, inputs):
        x = tf.cast(inputs, tf.float32)
        missing = tf.math.is_nan(x)
        filled = tf.where(missing, tf.constant(self.fill, tf.float32), x)
        return tf.concat([(filled - tf.constant(self.mean, tf.float32)) / tf.constant(self.std, tf.float32),
                          tf.cast(missing, tf.float32)], axis=-1)

    def get_config(self):
        return {**super().get_config(), "fill": self.fill, "mean": self.mean, "std": self.std}


def linear_part(start: LinearStart, inputs) -> tf.Tensor:
    """The linear model inside the network: [batch, outputs] logits (classification) or
    the standardised target (regression), computed from the raw inputs exactly as the design
    matrix, through one layer (`LINEAR_LAYER`, linear_text.LinearLogits: the numeric columns,
    a gather per categorical feature, each text feature's TF-IDF) whose weights `initialise`
    sets. It is not trained further: the fit is already the regularised optimum, and the network learns
    what it leaves (measured: trained along, the first epochs move it off that optimum and
    the validation loss rises)."""
    parts = []
    if start.design.numeric:
        columns = [inputs[c.name] for c in start.design.numeric]
        x = tf_keras.layers.Concatenate(name="linear_numeric_raw")(columns) if len(columns) > 1 else columns[0]
        parts.append(LinearDesignNumeric([c.fill for c in start.design.numeric], [c.mean for c in start.design.numeric],
                                         [c.std for c in start.design.numeric], dtype="float32",
                                         name="linear_numeric")(x))
    from components.kinds.layers import VocabularyRows
    from components.train.linear_text import LinearLogits

    texts = [{"tokens": c.tokens, "idf": c.idf, "scale": c.scale, "ngrams": c.ngrams} for c in start.design.text]
    sizes = [len(c.values) + 1 for c in start.design.categorical]
    numeric_width = start.design.dense_width - sum(sizes)
    if start.design.categorical:  # each value's kernel row (its block's first: any other value), for a gather
        vocabularies = [[v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in c.values]
                        for c in start.design.categorical]
        offsets = [int(o) for o in numeric_width + np.cumsum([0] + sizes[:-1])]
        parts.append(VocabularyRows(vocabularies, [0] * len(sizes), offsets, name="linear_rows")(
            [inputs[c.name] for c in start.design.categorical]))
    return LinearLogits(numeric_width, sizes, texts, start.fit.coef.shape[1], dtype="float32", name=LINEAR_LAYER,
                        trainable=False)(parts + [inputs[c.name] for c in start.design.text])


def initialise(model: tf_keras.Model, start: LinearStart) -> tf_keras.Model:
    """The model, its linear part's weights set to the fitted model's."""
    model.get_layer(LINEAR_LAYER).set_weights([start.fit.coef.astype(np.float32),
                                               start.fit.intercept.astype(np.float32)])
    return model


def residual_head(specs: FeatureSpecs, x, linear) -> tf.Tensor:
    """The output on the network's last layer `x` as a residual to `linear`: a head
    starting at zero (kernel and bias) added to the linear part, then softmax for classes,
    or the Rescaling to the label's units for regression (the names of model.output_layer)."""

    zero = {"kernel_initializer": "zeros", "bias_initializer": "zeros", "dtype": "float32"}
    regression = specs.task == "regression"
    z = tf_keras.layers.Dense(1 if regression else len(specs.classes), name="residual_head", **zero)(x)
    z = tf_keras.layers.Add(dtype="float32", name="linear_plus_residual")([linear, z])
    if regression:
        return tf_keras.layers.Rescaling(specs.label_std or 1.0, offset=specs.label_mean or 0.0, dtype="float32",
                                         name=names.PREDICTIONS)(z)
    return tf_keras.layers.Activation("softmax", dtype="float32", name=names.PROBABILITIES)(z)


# How many standard errors of the paired per-row difference an epoch's validation loss must
# be below the linear start's to replace it. Every epoch of up to training.epochs is one more
# comparison with the start, so one standard error (a one-sided 16% chance per epoch of a
# network no better than the start passing) let a lucky epoch replace the start on small
# slices; at two, 2.3% per epoch.
START_MARGIN = 2.0


class EarlyStoppingFromTheStart(tf_keras.callbacks.EarlyStopping):
    """tf_keras' EarlyStopping whose candidates include the weights training starts from
    (the linear start): `validation` is scored before the first epoch and is the best until
    an epoch beats it, for val_loss by more than START_MARGIN standard errors of the mean per-row
    difference between the start's loss and the epoch's on the same rows (`start_margin`,
    the last one computed: a slice of tens of rows is noisy, and the start is the model
    evaluate's baseline is); the best weights are restored when training ends, also
    at the cap (`best_epoch` -1: the starting weights were kept)."""

    def __init__(self, validation=None, **kwargs):
        super().__init__(**kwargs)
        self.validation = validation
        self.start_value: Optional[float] = None
        self.start_scores: dict = {}
        self.start_margin = 0.0
        self._start_rows: Optional[np.ndarray] = None
        self._losses = None  # the traced per-row loss (_row_losses)
        self.passes = {"seconds": 0.0, "cpu_seconds": 0.0}  # its own passes over the slice (the report's phases)

    def _timed(self, started) -> None:
        self.passes["seconds"] += time.monotonic() - started[0]
        self.passes["cpu_seconds"] += time.process_time() - started[1]

    def _row_losses(self) -> np.ndarray:
        """The current weights' loss per row of the validation slice (squared error on the
        target's scale, or cross-entropy), in the slice's fixed order."""
        if self._losses is None:  # one traced function (a model called eagerly per batch took seconds a pass)
            model = self.model

            @tf.function(reduce_retracing=True)
            def losses(features, target):
                out = tf.cast(model(features, training=False), tf.float32)
                if out.shape[-1] == 1:
                    return tf.square(tf.reshape(tf.cast(target, tf.float32), [-1]) - tf.reshape(out, [-1]))
                picked = tf.gather(out, tf.maximum(tf.cast(target, tf.int32), 0), batch_dims=1)
                return -tf.math.log(tf.maximum(picked, 1e-7))

            self._losses = losses
        rows = [self._losses(features, target).numpy() for features, target in self.validation]
        return np.concatenate(rows) if rows else np.empty(0)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self.validation is None or not self.monitor.startswith("val_"):
            return
        started = (time.monotonic(), time.process_time())
        self._score_the_start()
        self._timed(started)

    def _start_scores(self):
        """(the starting weights' scores on the slice, their per-row losses or None: a pass then)."""
        return self.model.evaluate(self.validation, verbose=0, return_dict=True), None

    def _score_the_start(self) -> None:
        scores, rows = self._start_scores()
        self.start_scores = {k: float(v) for k, v in scores.items()}  # the report's best_validation_* when kept
        value = scores.get(self.monitor[len("val_"):])
        if value is not None and math.isfinite(value):
            self.start_value = float(value)
            self._start_rows = (self._row_losses() if rows is None else rows) if self.monitor == "val_loss" else None
            self.best, self.best_epoch = self.start_value, -1
            self.best_weights = self.model.get_weights()
            print(f"early stopping: {self.monitor} {value:.5g} before the first epoch (the linear start); an epoch "
                  f"replaces it when lower by {START_MARGIN:g} standard errors of the per-row difference", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if self.best_epoch == -1 and self._start_rows is not None and len(self._start_rows) > 1:
            started = (time.monotonic(), time.process_time())
            diff = self._start_rows - self._row_losses()  # paired: the same rows, the start's loss minus this epoch's
            self._timed(started)
            if len(diff) == len(self._start_rows):
                self.start_margin = START_MARGIN * float(diff.std(ddof=1) / np.sqrt(len(diff)))
                self.best = self.start_value - self.start_margin  # the bar this epoch must pass
        super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        if self.restore_best_weights and self.best_weights is not None and not self.stopped_epoch:
            self.model.set_weights(self.best_weights)  # ran to the cap: EarlyStopping itself restores only on a stop
        super().on_train_end(logs)
