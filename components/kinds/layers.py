"""The tf_keras layers the kinds' encoders share (imported only when a model is built)."""
from __future__ import annotations

from typing import List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras


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


def concat(parts, name):
    """Concatenate on the last axis, or the one part as it is."""
    return tf_keras.layers.Concatenate(name=name)(parts) if len(parts) > 1 else parts[0]
