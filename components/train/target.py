"""A regression label's target transform (training.target_transform): what the network's
head learns (the label standardised, or log(1 + y) standardised for a label that is never
negative and skewed), and the way back to the label's units (Duan's smearing factor, the
rmse metric in the label's units)."""
from __future__ import annotations

import math

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.kinds import FeatureSpecs, feature_statistics

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


def regression_target(specs: FeatureSpecs, train_stats, setting: str):
    """(transform, why, the specs the network is built on): for a log target the label's
    mean and deviation there are log(1 + y)'s, so the head's Rescaling standardises that."""
    import dataclasses

    if specs.task != "regression":
        return STANDARDIZE, "", specs
    label_stats = feature_statistics(train_stats, specs.label)
    transform, why = choose_target_transform(label_stats, setting)
    if transform != LOG:
        return transform, why, specs
    mean, std = log_target_moments(label_stats)
    return transform, why, dataclasses.replace(specs, label_mean=mean, label_std=std)
