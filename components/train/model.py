"""The tf_keras model, the tf.data input pipeline and the SavedModel export.

Preprocessing (imputation, normalisation, vocabularies) lives inside the model, so the
exported graph takes raw feature values.
"""
from __future__ import annotations

import glob
from typing import Dict, List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components import names
from components.train.features import FeatureSpecs


class FillMissing(tf_keras.layers.Layer):
    """Replaces NaN (a missing numeric value) with a constant: the training mean."""

    def __init__(self, value: float, **kwargs):
        super().__init__(**kwargs)
        self.value = value

    def call(self, inputs):
        return tf.where(tf.math.is_nan(inputs), tf.constant(self.value, inputs.dtype), inputs)

    def get_config(self):
        return {**super().get_config(), "value": self.value}


def build_dnn(specs: FeatureSpecs, hidden_units: List[int], embedding_dim: int) -> tf_keras.Model:
    """Raw features in (one [batch, 1] input per feature), class probabilities out."""
    inputs, encoded = {}, []
    for f in specs.numeric:
        x = inputs[f.name] = tf_keras.Input(shape=(1,), name=f.name, dtype=tf.float32)
        x = FillMissing(f.mean, name=f"{f.name}_fill")(x)
        encoded.append(tf_keras.layers.Normalization(mean=f.mean, variance=f.std ** 2, name=f"{f.name}_norm")(x))
    for f in specs.categorical:
        x = inputs[f.name] = tf_keras.Input(shape=(1,), name=f.name, dtype=tf.string)
        ids = tf_keras.layers.StringLookup(vocabulary=f.vocabulary, num_oov_indices=1, name=f"{f.name}_lookup")(x)
        emb = tf_keras.layers.Embedding(len(f.vocabulary) + 1, embedding_dim, name=f"{f.name}_embed")(ids)
        encoded.append(tf_keras.layers.Flatten(name=f"{f.name}_flat")(emb))
    x = tf_keras.layers.Concatenate(name="features")(encoded) if len(encoded) > 1 else encoded[0]
    for i, units in enumerate(hidden_units):
        x = tf_keras.layers.Dense(units, activation="relu", name=f"dense_{i}")(x)
    outputs = tf_keras.layers.Dense(len(specs.classes), activation="softmax", name=names.PROBABILITIES)(x)
    return tf_keras.Model(inputs=inputs, outputs=outputs, name="dnn")


def parse_spec(specs: FeatureSpecs, with_label: bool) -> Dict[str, tf.io.FixedLenFeature]:
    """tf.Example parse spec: a missing numeric value parses as NaN, a missing string as ''."""
    spec = {f.name: tf.io.FixedLenFeature([1], tf.float32, default_value=[float("nan")]) for f in specs.numeric}
    spec.update({f.name: tf.io.FixedLenFeature([1], tf.string, default_value=[""]) for f in specs.categorical})
    if with_label:
        spec[specs.label] = tf.io.FixedLenFeature([1], tf.string)
    return spec


def make_dataset(file_pattern: str, specs: FeatureSpecs, batch_size: int, shuffle: bool, seed: int,
                 repeat: bool = False) -> tf.data.Dataset:
    """(features, label index) batches from gzip TFRecord shards: interleaved reads, batched
    parse, prefetch."""
    files = sorted(glob.glob(file_pattern))
    label_table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(specs.classes), tf.range(len(specs.classes), dtype=tf.int64)),
        default_value=-1)
    spec = parse_spec(specs, with_label=True)

    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        label = label_table.lookup(tf.squeeze(parsed.pop(specs.label), axis=-1))
        return parsed, label

    ds = tf.data.Dataset.from_tensor_slices(files)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                       cycle_length=max(1, min(len(files), 4)), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=not shuffle)
    if shuffle:
        ds = ds.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Few shards: shard by record, not by file, across multi-worker replicas.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


class ServingModule(tf.Module):
    """What the SavedModel exports: the trained model plus two signatures."""

    def __init__(self, model: tf_keras.Model, specs: FeatureSpecs):
        super().__init__()
        self.model = model
        self.class_names = tf.constant(specs.classes)
        self._parse_spec = parse_spec(specs, with_label=False)
        raw_spec = {f.name: tf.TensorSpec([None], tf.float32, name=f.name) for f in specs.numeric}
        raw_spec.update({f.name: tf.TensorSpec([None], tf.string, name=f.name) for f in specs.categorical})
        self.serve_raw = tf.function(self._serve_raw, input_signature=[raw_spec])
        self.serve_examples = tf.function(
            self._serve_examples, input_signature=[tf.TensorSpec([None], tf.string, name="examples")])

    def _predict(self, features):
        probabilities = self.model(features, training=False)
        classes = tf.gather(self.class_names, tf.argmax(probabilities, axis=-1))
        return {names.PROBABILITIES: probabilities, names.CLASSES: classes}

    def _serve_raw(self, features):
        return self._predict({k: tf.expand_dims(v, -1) for k, v in features.items()})

    def _serve_examples(self, examples):
        return self._predict(tf.io.parse_example(examples, self._parse_spec))


def export_saved_model(model: tf_keras.Model, specs: FeatureSpecs, export_dir: str) -> None:
    """SavedModel with `serving_default` (raw features, one value per row: REST/JSON friendly)
    and `serving_examples` (serialized tf.Example: TF Serving gRPC)."""
    module = ServingModule(model, specs)
    tf.saved_model.save(module, export_dir, signatures={
        names.SERVING_SIGNATURE: module.serve_raw.get_concrete_function(),
        names.EXAMPLES_SIGNATURE: module.serve_examples.get_concrete_function(),
    })
