"""The SavedModel export: the trained model plus two serving signatures, raw features and
serialized tf.Example, both answering in the label's units; the feature specs beside it."""
from __future__ import annotations

import os

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names
from components.kinds import FeatureSpecs, write_feature_specs
from components.train.data import parse_spec
from components.train.target import STANDARDIZE, to_label_units

PREDICTIONS = names.PREDICTIONS


class _Untracked:
    """A value held outside tf.Module's tracking (see ServingModule)."""

    def __init__(self, value):
        self.value = value


def model_resources(model: tf_keras.Model) -> list:
    """The resources the model's layers own (StringLookup's and TextVectorization's tables,
    with their vocabulary assets), found by TensorFlow's checkpoint walk of the model."""
    return [t for t in tf.train.TrackableView(model).descendants()
            if isinstance(t, tf.saved_model.experimental.TrackableResource)]


class ServingModule(tf.Module):
    """What the SavedModel exports: the trained model's variables and tables, and the
    signatures (`signatures`). Neither the tf_keras model nor the signatures' tf.functions
    are tracked: the SavedModel would hold the model's whole object graph, the optimizer's
    slots with it (on configs/ctr.yaml Adam's m and v, 6.9M of the 10.4M values: 41 MB
    against 14 MB), and tf.saved_model.save walked tf_keras' object graph and traced each
    tracked tf.function once more: the export took 2.4 s at 2M rows, now 1.1 s
    (docs/benchmarks.md, "Scale")."""

    def __init__(self, model: tf_keras.Model, specs: FeatureSpecs, target: str = STANDARDIZE,
                 smearing: float = 1.0):
        super().__init__()
        self._model = _Untracked(model)
        self.target = target  # regression: log -> the head's log(1 + y) mapped back to the label's units
        self.smearing = float(smearing)
        self.model_variables = list(model.variables)  # what the model learnt, by layer name, in the SavedModel
        self.model_resources = model_resources(model)
        self.task = specs.task
        self._features = _Untracked(list(specs.each()))
        self.class_names = tf.constant(specs.classes or [""])
        self._parse_spec = parse_spec(specs, with_label=False)

    def signatures(self) -> dict:
        """{signature name: its concrete function} (export_saved_model's docstring)."""
        each = self._features.value
        out = {names.SERVING_SIGNATURE: tf.function(self._serve_raw, input_signature=[
                   {f.name: kind.serving_spec(f) for kind, f in each}]).get_concrete_function(),
               names.EXAMPLES_SIGNATURE: tf.function(self._serve_examples, input_signature=[
                   tf.TensorSpec([None], tf.string, name="examples")]).get_concrete_function()}
        if any(kind.decoded_spec(f) is not None for kind, f in each):
            decoded = {f.name: kind.decoded_spec(f) if kind.decoded_spec(f) is not None else kind.serving_spec(f)
                       for kind, f in each}
            out[names.DECODED_SIGNATURE] = tf.function(self._serve_decoded,
                                                       input_signature=[decoded]).get_concrete_function()
        return out

    def _predict(self, features):
        outputs = tf.cast(self._model.value(features, training=False), tf.float32)
        if self.task == "regression":
            return {PREDICTIONS: to_label_units(tf.squeeze(outputs, axis=-1), self.target, self.smearing)}
        classes = tf.gather(self.class_names, tf.argmax(outputs, axis=-1))
        return {names.PROBABILITIES: outputs, names.CLASSES: classes}

    def _model_inputs(self, parsed):
        """[batch, 1] parsed values -> the model's inputs: each kind's decode_batch (images decoded)."""
        return {f.name: kind.decode_batch(f, parsed[f.name]) for kind, f in self._features.value}

    def _serve_raw(self, features):
        return self._predict(self._model_inputs({k: tf.expand_dims(v, -1) for k, v in features.items()}))

    def _serve_examples(self, examples):
        return self._predict(self._model_inputs(tf.io.parse_example(examples, self._parse_spec)))

    def _serve_decoded(self, features):
        """The decoded features as they are (images: float pixels), the others as raw rows."""
        return self._predict({f.name: features[f.name] if kind.decoded_spec(f) is not None else
                              kind.decode_batch(f, tf.expand_dims(features[f.name], -1)) for kind, f in self._features.value})


def export_saved_model(model: tf_keras.Model, specs: FeatureSpecs, export_dir: str,
                       target: str = STANDARDIZE, smearing: float = 1.0) -> None:
    """SavedModel with `serving_default` (raw features, one value per row: REST/JSON friendly;
    an image is its encoded bytes, {"b64": ...} in TF Serving's REST API), `serving_examples`
    (serialized tf.Example: TF Serving gRPC Predict) and, with image features,
    `serving_decoded` (images as [batch, height, width, channels] float pixels in 0-255); each
    returns a regression's prediction in the label's units (`target` log: the head's
    log(1 + y) mapped back inside the signature, times Duan's `smearing` factor)."""
    module = ServingModule(model, specs, target, smearing)
    tf.saved_model.save(module, export_dir, signatures=module.signatures())


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
