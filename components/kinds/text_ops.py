"""The text kind's TensorFlow side: tokens by the same rule as ingest's (text_tokens.py) in
TensorFlow's RE2 string ops, inside the model and so inside the SavedModel; the vocabulary
lookup with tokens outside it hashed into the spec's buckets (tf_keras StringLookup with
num_oov_indices), and the two encoders: an embedding bag (mean) of unigrams and n-grams, and
a small Transformer encoder over the first `sequence_length` tokens."""
from __future__ import annotations

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.kinds.text_tokens import SEPARATORS


def tokenize_tensor(values, ngrams: int = 1):
    """[batch] strings -> a RaggedTensor [batch, (tokens)] of each value's tokens followed by its
    n-grams up to `ngrams` (text_tokens.with_ngrams, value by value)."""
    text = tf.strings.regex_replace(tf.strings.lower(values, encoding="utf-8"), SEPARATORS, " ")
    tokens = tf.strings.split(tf.strings.strip(text))
    if ngrams < 2:
        return tokens
    return tf.concat([tokens, *(tf.strings.ngrams(tokens, n, separator=" ") for n in range(2, ngrams + 1))], axis=1)


def _lookup(spec: dict, name: str):
    """Vocabulary tokens -> hash_buckets + their rank; others -> a hash bucket in [0, hash_buckets)."""
    return tf_keras.layers.StringLookup(vocabulary=list(spec["vocabulary"]) or None, num_oov_indices=spec["hash_buckets"],
                                        mask_token=None, name=name)


def rows(spec: dict) -> int:
    """Embedding rows of a feature's lookup: the hash buckets and the vocabulary."""
    return spec["hash_buckets"] + len(spec["vocabulary"])


class TokenIds(tf_keras.layers.Layer):
    """[batch, 1] strings -> [batch, sequence_length] int64 ids of the first tokens (unigrams):
    0 is padding, a token's id its lookup + 1. What the Transformer encoder and a custom model
    (training.custom_model: FeatureParts.encoded['text'].extras['token_ids']) take."""

    def __init__(self, spec: dict, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.spec = dict(spec)
        self.lookup = _lookup(self.spec, "lookup")

    def call(self, inputs):
        tokens = tokenize_tensor(tf.reshape(inputs, [-1]), 1)
        length = self.spec["sequence_length"]
        tokens = tokens[:, :length]
        ids = tf.ragged.map_flat_values(lambda t: tf.cast(self.lookup(t), tf.int64) + 1, tokens)
        return ids.to_tensor(default_value=0, shape=[None, length])

    def get_config(self):
        return {**super().get_config(), "spec": self.spec}


class TextBag(tf_keras.layers.Layer):
    """[batch, 1] strings -> [batch, dim + 1]: the mean embedding of the value's tokens and
    n-grams (each looked up, or hashed past the vocabulary), layer-normalised (0 for a value
    with no token), and 1 for a value with no token."""

    def __init__(self, spec: dict, **kwargs):
        super().__init__(**kwargs)
        self.spec = dict(spec)
        self.lookup = _lookup(self.spec, "lookup")
        # The mean of many small random vectors starts near zero, and the tower above it (a residual
        # beside the linear start, at zero) then barely learns: normalised, it starts at unit scale.
        self.norm = tf_keras.layers.LayerNormalization(name="norm")

    def build(self, input_shape):
        self.table = self.add_weight(name="embeddings", shape=(rows(self.spec), self.spec["dim"]),
                                     initializer=tf_keras.initializers.RandomUniform(-0.05, 0.05))
        super().build(input_shape)

    def call(self, inputs):
        tokens = tokenize_tensor(tf.reshape(inputs, [-1]), self.spec["ngrams"])
        ids = self.lookup(tokens.flat_values)
        vectors = tf.gather(tf.cast(self.table, self.compute_dtype), ids)
        total = tf.math.unsorted_segment_sum(vectors, tokens.value_rowids(), tokens.nrows())
        count = tf.cast(tokens.row_lengths(), self.compute_dtype)[:, None]
        empty = tf.cast(tf.equal(count, 0), self.compute_dtype)
        return tf.concat([self.norm(total / tf.maximum(count, 1.0)) * (1.0 - empty), empty], axis=-1)

    def get_config(self):
        return {**super().get_config(), "spec": self.spec}


class TransformerBlock(tf_keras.layers.Layer):
    """Self-attention and a feed-forward layer, each with a residual and layer normalisation."""

    def __init__(self, dim: int, heads: int, **kwargs):
        super().__init__(**kwargs)
        self.attention = tf_keras.layers.MultiHeadAttention(heads, max(1, dim // heads), name="attention")
        self.ffn = [tf_keras.layers.Dense(2 * dim, activation="relu", name="ffn_in"),
                    tf_keras.layers.Dense(dim, name="ffn_out")]
        self.norms = [tf_keras.layers.LayerNormalization(name=f"norm_{i}") for i in range(2)]

    def call(self, x, mask):
        pair = tf.logical_and(mask[:, :, None], mask[:, None, :])
        x = self.norms[0](x + self.attention(x, x, attention_mask=pair))
        return self.norms[1](x + self.ffn[1](self.ffn[0](x)))


class TextTransformer(tf_keras.layers.Layer):
    """[batch, sequence_length] token ids (TokenIds) -> [batch, dim + 1]: token and position
    embeddings through `layers` Transformer blocks, mean-pooled over the tokens present, and
    1 for a value with no token."""

    def __init__(self, spec: dict, **kwargs):
        super().__init__(**kwargs)
        self.spec = dict(spec)
        dim, length = self.spec["dim"], self.spec["sequence_length"]
        self.tokens = tf_keras.layers.Embedding(rows(self.spec) + 1, dim, name="token_embeddings")
        self.positions = tf_keras.layers.Embedding(length, dim, name="position_embeddings")
        self.blocks = [TransformerBlock(dim, self.spec["heads"], name=f"block_{i}") for i in range(self.spec["layers"])]

    def call(self, ids):
        mask = tf.not_equal(ids, 0)
        x = self.tokens(ids) + self.positions(tf.range(tf.shape(ids)[1]))[None]
        for block in self.blocks:
            x = block(x, mask)
        kept = tf.cast(mask, x.dtype)[:, :, None]
        count = tf.reduce_sum(kept, axis=1)
        pooled = tf.reduce_sum(x * kept, axis=1) / tf.maximum(count, 1.0)
        return tf.concat([pooled, tf.cast(tf.equal(count, 0), x.dtype)], axis=-1)

    def get_config(self):
        return {**super().get_config(), "spec": self.spec}
