"""A user's own model for `training.custom_model: tests.custom_model_example:build`: it gets
the feature specs and the training settings and returns a tf_keras model, like the module
file TFX's Trainer takes. Built from gpupipe's preprocessing helpers, so serving still
takes raw features."""
import tf_keras

from components.train.model import FeatureParts, output_layer


def build(specs, settings):
    parts = FeatureParts(specs, settings)  # every feature's input and encoding, as its kind declares it
    x = tf_keras.layers.Dense(24, activation="tanh", name="custom_hidden")(parts.dense)
    return tf_keras.Model(parts.inputs, output_layer(specs, x), name="custom_tanh")
