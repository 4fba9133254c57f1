"""The datetime kind's TensorFlow side: strings parsed inside the model (and so inside the
SavedModel, in TF Serving) with TensorFlow's RE2 string ops only, by the same regex and
arithmetic as ingest's (datetime_parse.py), then encoded as the model's inputs."""
from __future__ import annotations

import math

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.kinds.datetime_parse import PARTS, DatetimeFeature, compile_format, day_of_week, days_from_civil, days_in_month, in_range

# The columns of one datetime feature's encoding, in order (WIDTH of them).
COLUMNS = ("year", "month_sin", "month_cos", "day_sin", "day_cos", "weekday_sin", "weekday_cos", "hour_sin",
           "hour_cos", "minute_sin", "minute_cos", "elapsed", "missing")
WIDTH = len(COLUMNS)


def _where(condition, a, b):
    """tf.where on int64, as the arithmetic of datetime_parse takes it (Python ints broadcast)."""
    return tf.where(condition, tf.cast(a, tf.int64), tf.cast(b, tf.int64))


def parse_tensor(values, fmt: str = ""):
    """[batch] strings -> (missing [batch] bool, ok [batch] bool, {part: [batch] int64},
    seconds since 1970 [batch] int64; 0 where not ok): datetime_parse.parse_strings in TF ops."""
    compiled = compile_format(fmt or None)
    text = tf.strings.strip(values)
    missing = tf.equal(text, "")
    matched = tf.strings.regex_full_match(text, compiled.pattern)
    safe = tf.where(matched, text, compiled.example)  # to_number must see digits
    pieces = tf.strings.split(tf.strings.regex_replace(safe, compiled.pattern, compiled.rewrite), " ")
    numbers = tf.reshape(tf.strings.to_number(pieces.flat_values, tf.int64), [-1, len(PARTS)])
    parts = {p: numbers[:, i] for i, p in enumerate(PARTS)}
    y, m, d, hh, mm, ss = (parts[p] for p in PARTS)
    ok = matched & ~missing & in_range(y, m, d, hh, mm, ss, _where)
    offset = tf.zeros_like(y)
    if compiled.offset:
        sign_group, hour_group, minute_group = compiled.offset
        sign = tf.strings.regex_replace(safe, compiled.pattern, f"\\{sign_group}")
        oh, om = (tf.strings.to_number(tf.strings.regex_replace(safe, compiled.pattern, f"0\\{g}"), tf.int64)
                  for g in (hour_group, minute_group))
        ok = ok & (oh <= 23) & (om <= 59)
        offset = tf.where(tf.equal(sign, "-"), -tf.ones_like(oh), tf.ones_like(oh)) * (oh * 3600 + om * 60)
    one = tf.ones_like(m)
    days = days_from_civil(y, tf.where(ok, m, one), tf.where(ok, d, one), _where)
    seconds = tf.where(ok, days * 86400 + hh * 3600 + mm * 60 + ss - offset, tf.zeros_like(days))
    return missing, ok, parts, seconds


def _cyclic(value, period):
    angle = 2.0 * math.pi * value / period
    return [tf.sin(angle), tf.cos(angle)]


def encode_tensor(values, spec):
    """[batch] strings -> [batch, WIDTH] float32 (COLUMNS): the year standardised with the train
    split's, month, day of month, day of week, hour and minute as sin/cos of their period,
    the days since the train split's reference standardised, and 1 for a value missing or not
    parsing (whose other columns are 0)."""
    _, ok, parts, seconds = parse_tensor(values, spec.format)
    y, m, d, hh, mm = (tf.cast(parts[p], tf.float32) for p in "YmdHM")
    day_count = tf.cast(days_in_month(parts["Y"], tf.where(ok, parts["m"], tf.ones_like(parts["m"])), _where),
                        tf.float32)
    # the weekday where it was written (the parts' date; seconds are UTC with an offset)
    one = tf.ones_like(parts["m"])
    local_days = days_from_civil(parts["Y"], tf.where(ok, parts["m"], one), tf.where(ok, parts["d"], one), _where)
    weekday = tf.cast(day_of_week(local_days), tf.float32)
    elapsed = tf.cast(seconds - spec.reference, tf.float64) / 86400.0
    columns = [(y - spec.year_mean) / spec.year_std, *_cyclic(m - 1.0, 12.0), *_cyclic(d - 1.0, day_count),
               *_cyclic(weekday, 7.0), *_cyclic(hh, 24.0), *_cyclic(mm, 60.0),
               tf.cast((elapsed - spec.elapsed_mean) / spec.elapsed_std, tf.float32)]
    kept = tf.cast(ok, tf.float32)
    return tf.stack([c * kept for c in columns] + [1.0 - kept], axis=-1)


class DatetimeEncoding(tf_keras.layers.Layer):
    """[batch, 1] strings as written -> [batch, WIDTH] (encode_tensor), for one feature's spec."""

    def __init__(self, spec: dict, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.spec = dict(spec)

    def call(self, inputs):
        return encode_tensor(tf.reshape(inputs, [-1]), DatetimeFeature(**self.spec))

    def get_config(self):
        return {**super().get_config(), "spec": self.spec}
