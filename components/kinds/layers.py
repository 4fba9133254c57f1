"""The tf_keras layers the kinds' encoders share (imported only when a model is built)."""
from __future__ import annotations

from typing import List, Optional

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


class VocabularyRows(tf_keras.layers.Layer):
    """Each feature's value ([batch, 1] strings, one tensor a feature) -> [batch, features]
    rows of one table: feature i's value at `offsets[i]` + its id. The id of a value in the
    feature's vocabulary `vocabularies[i]` is 1 + its index there, of any other value 0 (as
    tf_keras' StringLookup with one out-of-vocabulary index gives it); a feature without a
    vocabulary (None) hashes its value into `hash_buckets[i]` buckets (as tf_keras' Hashing
    does: tf.strings.to_hash_bucket_fast).

    Every vocabulary is one lookup table, keyed "i:value": one resource in the model and the
    SavedModel where a StringLookup a feature made one each. Building the click-through
    model's 43 lookups and exporting their tables took about 1 s of train's time outside
    the epoch (docs/benchmarks.md, "Ingest's gzip by ISA-L, one lookup table, uncompressed
    blocks")."""

    def __init__(self, vocabularies: List[Optional[List[str]]], hash_buckets: List[int], offsets: List[int],
                 **kwargs):
        super().__init__(**kwargs)
        self.vocabularies = [None if v is None else [str(x) for x in v] for v in vocabularies]
        self.hash_buckets, self.offsets = [int(n) for n in hash_buckets], [int(o) for o in offsets]
        self._looked = [i for i, v in enumerate(self.vocabularies) if v is not None]
        self._hashed = [i for i, v in enumerate(self.vocabularies) if v is None]
        keys = [f"{i}:{value}" for i in self._looked for value in self.vocabularies[i]]
        ids = [j + 1 for i in self._looked for j in range(len(self.vocabularies[i]))]
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(keys, tf.string), tf.constant(ids, tf.int64)),
            default_value=0) if self._looked else None
        # the columns back in the features' order, after the looked-up then the hashed ones
        order = self._looked + self._hashed
        self._unshuffle = None if order == sorted(order) else [order.index(i) for i in range(len(order))]

    def call(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        values = tf.concat(inputs, axis=-1) if len(inputs) > 1 else inputs[0]
        parts = []
        if self._looked:
            prefixes = tf.constant([f"{i}:" for i in self._looked], tf.string)
            looked = values if not self._hashed else tf.gather(values, self._looked, axis=-1)
            parts.append(self._table.lookup(prefixes + looked))
        parts += [tf.strings.to_hash_bucket_fast(values[:, i:i + 1], self.hash_buckets[i]) for i in self._hashed]
        ids = tf.concat(parts, axis=-1) if len(parts) > 1 else parts[0]
        if self._unshuffle is not None:
            ids = tf.gather(ids, self._unshuffle, axis=-1)
        return ids + tf.constant(self.offsets, tf.int64)

    def get_config(self):
        return {**super().get_config(), "vocabularies": self.vocabularies, "hash_buckets": self.hash_buckets,
                "offsets": self.offsets}


def concat(parts, name):
    """Concatenate on the last axis, or the one part as it is."""
    return tf_keras.layers.Concatenate(name=name)(parts) if len(parts) > 1 else parts[0]
