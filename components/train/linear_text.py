"""The linear start's layer inside the model (components/train/linear_start.py: linear_part):
the design's numeric columns (a dense tensor), each categorical feature's block (a gather of
its value's row) and each text feature's TF-IDF block, computed from the raw string as components/contracts/linear_text.py computes it
(tokens by the shared rule in TensorFlow's string ops, the vocabulary lookup, sublinear term
frequency times idf, L2-normalised, times the block's scale), through one kernel and bias: the
fitted linear model's coefficients and intercept. A text block is never a dense
[batch, vocabulary] tensor: each row's distinct tokens gather their rows of the kernel."""
from __future__ import annotations

from typing import List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.kinds.text_ops import tokenize_tensor


def text_logits(values, lookup, idf, scale: float, ngrams: int, kernel):
    """[batch] strings -> [batch, outputs]: the TF-IDF block (`lookup`: vocabulary token i -> i + 1,
    others 0; `idf` [vocabulary]) times `kernel` [vocabulary, outputs]."""
    tokens = tokenize_tensor(values, ngrams)
    width = tf.cast(tf.shape(idf)[0] + 1, tf.int64)
    ids = tf.cast(lookup(tokens.flat_values), tf.int64)
    rows = tokens.value_rowids()
    keys, at = tf.unique(rows * width + ids)  # a row's distinct tokens, each with its count
    counts = tf.math.unsorted_segment_sum(tf.ones_like(at, tf.float32), at, tf.size(keys))
    row, column = keys // width, keys % width
    known = column > 0
    row, column, counts = row[known], column[known] - 1, counts[known]
    weight = (1.0 + tf.math.log(counts)) * tf.gather(idf, column)
    norm = tf.sqrt(tf.math.unsorted_segment_sum(tf.square(weight), row, tokens.nrows()))
    weight = scale * weight / tf.maximum(tf.gather(norm, row), 1e-12)
    return tf.math.unsorted_segment_sum(weight[:, None] * tf.gather(kernel, column), row, tokens.nrows())


class LinearLogits(tf_keras.layers.Layer):
    """[the numeric block [batch, numeric_width] (when `numeric_width`: standardised values and
    missing indicators), then (when `categories`) the categorical features' kernel rows
    [batch, categorical features] (feature k's block is `categories[k]` wide: its first row
    any other value, row i + 1 the design's value i; kinds.layers.VocabularyRows), then
    each text feature's [batch, 1] strings] -> [batch, outputs]: the linear model's logits
    (or standardised prediction). Its weights are the whole design's kernel [width, outputs]
    and bias [outputs] (the numeric columns, each categorical block, each text block, in the
    design's order), set from the fit and not trained. The categorical blocks are one gather
    of their values' kernel rows, never a one-hot [batch, values] tensor (measured on the ctr
    config at 2M rows with 1,000 values a feature: its one epoch took 65.2 s one-hot, 50.0 s
    gathered)."""

    def __init__(self, numeric_width: int, categories: List[int], texts: List[dict], outputs: int, **kwargs):
        super().__init__(**kwargs)
        self.numeric_width, self.categories = int(numeric_width), [int(n) for n in categories]
        self.texts, self.outputs = [dict(t) for t in texts], int(outputs)
        self.lookups = [tf_keras.layers.StringLookup(vocabulary=list(t["tokens"]) or None, num_oov_indices=1,
                                                     mask_token=None, name=f"lookup_{i}")
                        for i, t in enumerate(self.texts)]

    def build(self, input_shape):
        width = self.numeric_width + sum(self.categories) + sum(len(t["tokens"]) for t in self.texts)
        self.kernel = self.add_weight(name="kernel", shape=(width, self.outputs), initializer="zeros",
                                      trainable=False)
        self.bias = self.add_weight(name="bias", shape=(self.outputs,), initializer="zeros", trainable=False)
        super().build(input_shape)

    def call(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        z = self.bias[None, :]
        if self.numeric_width:
            z = z + tf.matmul(tf.cast(inputs.pop(0), tf.float32), self.kernel[:self.numeric_width])
        if self.categories:  # rows of the whole kernel (a slice of it would not be quantized with it)
            z = z + tf.reduce_sum(tf.gather(self.kernel, tf.cast(inputs.pop(0), tf.int64)), axis=1)
        offset = self.numeric_width + sum(self.categories)
        for t, lookup, values in zip(self.texts, self.lookups, inputs):
            size = len(t["tokens"])
            if size:
                idf = tf.constant(t["idf"], tf.float32)
                z = z + text_logits(tf.reshape(values, [-1]), lookup, idf, float(t["scale"]), int(t["ngrams"]),
                                    self.kernel[offset:offset + size])
            offset += size
        return z

    def get_config(self):
        return {**super().get_config(), "numeric_width": self.numeric_width, "categories": self.categories,
                "texts": self.texts, "outputs": self.outputs}
