"""The linear baseline beside every evaluation: scikit-learn's LogisticRegression
(classification) or Ridge (regression), trained on the same train split and features as
the candidate and scored on the same eval split by the same metric functions.

Features as the examples artifact's manifest declares them, in the shared linear design
(components/contracts/linear.py, the one the default model starts from): numeric ones
imputed with the train median (plus a missing indicator) and standardised; categorical
ones one-hot, the `LINEAR_MAX_CATEGORIES` most frequent values of each (the rest, and
values unseen in training, share one column); text ones the TF-IDF of their tokens and
n-grams (contracts/linear_text.py). At most about `LINEAR_MAX_TRAIN_ROWS` train
rows, every k-th one across the split, so the baseline's cost stays bounded on a large
table (the click-through table's 160k train rows: about 4 s; see docs/quality.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from components.contracts import names
from components.contracts.examples import read_manifest
from components.contracts.linear import (LINEAR_MAX_TRAIN_ROWS, LinearDesign, LinearFit, design_matrix, fit_design,
                                         fit_linear, read_linear_fit, read_split, read_train_sample)
from components.kinds import kind_named
from components.kinds.base import LINEAR_CATEGORICAL, LINEAR_NUMERIC, LINEAR_TEXT


@dataclass
class BaselineInput:
    """What the baseline reads of each row: the label and its features' columns."""

    label: str
    kinds: Dict[str, str]  # feature -> LINEAR_NUMERIC or LINEAR_CATEGORICAL
    train_rows: int
    fingerprint: str = ""  # the examples' source's (the manifest's)

    def source(self) -> dict:
        """What a fit on these examples was read from (contracts/linear.py: write_linear_fit)."""
        return {"examples": self.fingerprint, "label": self.label, "kinds": dict(self.kinds),
                "train_rows": self.train_rows}

    def of(self, kind: str) -> List[str]:
        return [n for n, k in self.kinds.items() if k == kind]


def baseline_input(examples_dir: str) -> Tuple[Optional[BaselineInput], str]:
    """(what the baseline reads, "") or (None, why there is none): no manifest (examples
    from elsewhere), or no feature of a kind a linear model takes."""
    manifest = read_manifest(examples_dir)
    if manifest is None or not manifest.get("features"):
        return None, "the examples have no manifest naming their features"
    # How the design takes each feature: its kind's `linear` (a kind a linear model cannot take is left out).
    kinds = {n: kind_named(k).linear for n, k in manifest["features"].items() if kind_named(k).linear}
    if not kinds:
        return None, "no feature of a kind a linear model takes"
    return BaselineInput(manifest["label"], kinds, int(manifest.get("rows", {}).get(names.TRAIN_SPLIT, 0)),
                         str(manifest.get("source_fingerprint") or "")), ""


def saved_fit(model_dir: str, found: BaselineInput, task: str):
    """The model's linear start (contracts/linear.py: read_linear_fit) when it is the fit this
    baseline would make: classification (a regression's start learns a scaled target), read
    from the same examples, label, features and train rows (so the same rows, the same
    design, the same LogisticRegression); else None."""
    saved = read_linear_fit(model_dir) if task != "regression" and found.fingerprint else None
    return saved if saved is not None and saved[2] == found.source() else None



def read_train(examples_dir: str, found: BaselineInput, regression: bool) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """The train rows the baseline is fitted on: ingest's sample of them (the linear start's,
    contracts/linear.py: read_train_sample), else every k-th one past LINEAR_MAX_TRAIN_ROWS."""
    sample = read_train_sample(examples_dir, found.label, found.kinds, regression)
    if sample is not None:
        return sample
    stride = max(1, math.ceil(found.train_rows / LINEAR_MAX_TRAIN_ROWS))
    return read_split(examples_dir, names.TRAIN_SPLIT, found.label, found.kinds, regression, stride)


@dataclass
class BaselineFit:
    """The baseline: its design and fit (contracts/linear.py) and the train rows it was fitted on."""

    design: LinearDesign
    fit: LinearFit
    train_rows: int

    @property
    def name(self) -> str:
        return self.fit.name


def saved_baseline(model_dir: str, found: BaselineInput, task: str) -> Optional[BaselineFit]:
    """The model's linear start as the baseline, when it is this fit (saved_fit)."""
    saved = saved_fit(model_dir, found, task)
    return None if saved is None else BaselineFit(saved[0], saved[1], saved[3])


def fit_baseline(examples_dir: str, found: BaselineInput, task: str, classes: List[str],
                 ngrams: Optional[Dict[str, int]] = None) -> Tuple[Optional[BaselineFit], str]:
    """(the baseline fitted on read_train's rows, "") or (None, why there is none: one class
    in the train split). `ngrams`: {text feature: its n-grams} (the model's settings; the
    text kind's default, TextSetting's, for one not named)."""
    from components.kinds.text_kind import TextSetting

    regression = task == "regression"
    x_train, y_train = read_train(examples_dir, found, regression)
    if not regression and len(set(y_train)) < 2:
        return None, "the train split holds one class"
    default = TextSetting.model_fields["ngrams"].default
    text = {name: (ngrams or {}).get(name, default) for name in found.of(LINEAR_TEXT)}
    design = fit_design(x_train, found.of(LINEAR_NUMERIC), found.of(LINEAR_CATEGORICAL), text)
    return BaselineFit(design, fit_linear(design_matrix(design, x_train), y_train, regression, classes),
                       len(y_train)), ""


def linear_scores(baseline: BaselineFit) -> Callable:
    """A function from a batch's columns {name: [rows] tensor: numeric float32, NaN missing;
    categorical bytes, b"" missing} to the baseline's predictions on them, in float64
    ([rows, classes] probabilities, or [rows] for regression): contracts/linear.py's design
    and the fit's weights applied in TensorFlow, for use inside a tf.data map: the numeric
    block one matrix product, each categorical feature a table lookup of its value's column
    and a gather of that column's weights. The same figures as
    `fit.predict(design_matrix(design, columns))` up to float64 rounding (the sums' order),
    without building the sparse design."""
    import tensorflow as tf

    design, fit = baseline.design, baseline.fit
    if design.text:  # a text feature's TF-IDF: contracts/linear_text.py's own numpy, on the pass's batch
        order = [c.name for group in (design.numeric, design.categorical, design.text) for c in group]
        classes = 1 if fit.regression else np.asarray(fit.coef).shape[1]

        def predicted(*values):
            return fit.predict(design_matrix(design, dict(zip(order, values)))).astype(np.float64)

        def scored(columns: Dict[str, "tf.Tensor"]):
            out = tf.numpy_function(predicted, [columns[name] for name in order], tf.float64, stateful=False)
            return tf.reshape(out, [-1] if fit.regression else [-1, classes])

        return scored
    coef, numeric = np.asarray(fit.coef, np.float64), design.numeric
    n = len(numeric)
    fill, mean, std = (tf.constant([getattr(c, k) for c in numeric], tf.float64) for k in ("fill", "mean", "std"))
    value_w, missing_w = tf.constant(coef[:n]), tf.constant(coef[n:2 * n])
    categorical, offset = [], 2 * n
    for c in design.categorical:
        block = tf.constant(coef[offset:offset + len(c.values) + 1])  # row 0: every other value
        offset += len(c.values) + 1
        table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(c.values, tf.string), tf.range(1, len(c.values) + 1, dtype=tf.int64)),
            default_value=0) if c.values else None
        categorical.append((c.name, table, block))
    intercept = tf.constant(np.asarray(fit.intercept, np.float64))

    def scores(columns: Dict[str, "tf.Tensor"]):
        rows = tf.size(next(iter(columns.values())))
        z = tf.zeros([rows, coef.shape[1]], tf.float64) + intercept
        if n:
            x = tf.cast(tf.stack([columns[c.name] for c in numeric], axis=1), tf.float64)
            missing = tf.math.is_nan(x)
            standard = (tf.where(missing, fill, x) - mean) / std
            z += tf.matmul(standard, value_w) + tf.matmul(tf.cast(missing, tf.float64), missing_w)
        for name, table, block in categorical:
            z += tf.gather(block, table.lookup(columns[name]) if table is not None
                           else tf.zeros([rows], tf.int64))
        if fit.regression:
            return z[:, 0]
        e = tf.exp(z - tf.reduce_max(z, axis=1, keepdims=True))  # LinearFit.predict's softmax, step by step
        return e / tf.reduce_sum(e, axis=1, keepdims=True)

    return scores
