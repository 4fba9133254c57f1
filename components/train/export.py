"""The SavedModel export: the trained model plus two serving signatures, raw features and
serialized tf.Example, both answering in the label's units; the feature specs beside it."""
from __future__ import annotations

import os

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.contracts.compat.tf_keras import saved_model_without_traces
from components.kinds import FeatureSpecs, write_feature_specs
from components.train.data import parse_spec
from components.train.target import STANDARDIZE, to_label_units

PREDICTIONS = names.PREDICTIONS


class _Features:
    """(kind, spec) of every feature, held outside tf.Module's tracking (it wraps lists)."""

    def __init__(self, specs: FeatureSpecs):
        self.each = list(specs.each())


class ServingModule(tf.Module):
    """What the SavedModel exports: the trained model plus its signatures."""

    def __init__(self, model: tf_keras.Model, specs: FeatureSpecs, target: str = STANDARDIZE,
                 smearing: float = 1.0):
        super().__init__()
        self.model = model
        self.target = target  # regression: log -> the head's log(1 + y) mapped back to the label's units
        self.smearing = float(smearing)
        self.model_variables = list(model.variables)  # what the model learnt, by layer name, in the SavedModel
        self.task = specs.task
        self._features = _Features(specs)
        self.class_names = tf.constant(specs.classes or [""])
        self._parse_spec = parse_spec(specs, with_label=False)
        raw_spec = {f.name: kind.serving_spec(f) for kind, f in self._features.each}
        self.serve_raw = tf.function(self._serve_raw, input_signature=[raw_spec])
        self.serve_examples = tf.function(
            self._serve_examples, input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        decoded = {f.name: kind.decoded_spec(f) if kind.decoded_spec(f) is not None else kind.serving_spec(f)
                   for kind, f in self._features.each}
        self.serve_decoded = tf.function(self._serve_decoded, input_signature=[decoded]) \
            if any(kind.decoded_spec(f) is not None for kind, f in self._features.each) else None

    def _predict(self, features):
        outputs = tf.cast(self.model(features, training=False), tf.float32)
        if self.task == "regression":
            return {PREDICTIONS: to_label_units(tf.squeeze(outputs, axis=-1), self.target, self.smearing)}
        classes = tf.gather(self.class_names, tf.argmax(outputs, axis=-1))
        return {names.PROBABILITIES: outputs, names.CLASSES: classes}

    def _model_inputs(self, parsed):
        """[batch, 1] parsed values -> the model's inputs: each kind's decode_batch (images decoded)."""
        return {f.name: kind.decode_batch(f, parsed[f.name]) for kind, f in self._features.each}

    def _serve_raw(self, features):
        return self._predict(self._model_inputs({k: tf.expand_dims(v, -1) for k, v in features.items()}))

    def _serve_examples(self, examples):
        return self._predict(self._model_inputs(tf.io.parse_example(examples, self._parse_spec)))

    def _serve_decoded(self, features):
        """The decoded features as they are (images: float pixels), the others as raw rows."""
        return self._predict({f.name: features[f.name] if kind.decoded_spec(f) is not None else
                              kind.decode_batch(f, tf.expand_dims(features[f.name], -1)) for kind, f in self._features.each})


def export_saved_model(model: tf_keras.Model, specs: FeatureSpecs, export_dir: str,
                       target: str = STANDARDIZE, smearing: float = 1.0) -> None:
    """SavedModel with `serving_default` (raw features, one value per row: REST/JSON friendly;
    an image is its encoded bytes, {"b64": ...} in TF Serving's REST API), `serving_examples`
    (serialized tf.Example: TF Serving gRPC Predict) and, with image features,
    `serving_decoded` (images as [batch, height, width, channels] float pixels in 0-255); each
    returns a regression's prediction in the label's units (`target` log: the head's
    log(1 + y) mapped back inside the signature, times Duan's `smearing` factor)."""
    module = ServingModule(model, specs, target, smearing)
    signatures = {names.SERVING_SIGNATURE: module.serve_raw.get_concrete_function(),
                  names.EXAMPLES_SIGNATURE: module.serve_examples.get_concrete_function()}
    if module.serve_decoded is not None:
        signatures[names.DECODED_SIGNATURE] = module.serve_decoded.get_concrete_function()
    # Serving needs the signatures, not tf_keras' per-layer call traces (for reloading it as
    # Keras, which a ServingModule never is).
    with saved_model_without_traces():
        tf.saved_model.save(module, export_dir, signatures=signatures)


def export_model(model, specs: FeatureSpecs, model_dir: str, chief: bool, target: str = "standardize",
                 smearing: float = 1.0) -> None:
    """Every worker takes part in the save (collective ops); only the chief's copy is kept,
    with the feature specs beside it."""
    path = model_dir if chief else os.path.join(model_dir + "-scratch", f"worker-{os.getpid()}")
    export_saved_model(model, specs, path, target, smearing)
    if chief:
        write_feature_specs(specs, model_dir)
    else:
        tf.io.gfile.rmtree(path)
