"""A user's own model for `training.custom_model: tests.custom_model_example:build`: it gets
the feature specs and the training settings and returns a tf_keras model, like the module
file TFX's Trainer takes. Built from gpupipe's preprocessing helpers, so serving still
takes raw features."""
import tf_keras

from components.train.model import categorical_ids, embed_categorical, encode_numeric, model_inputs, output_layer


def build(specs, settings):
    inputs = model_inputs(specs)
    parts = encode_numeric(specs, inputs) + embed_categorical(specs, categorical_ids(specs, inputs),
                                                              settings.embedding_dim)
    x = tf_keras.layers.Concatenate(name="custom_features")(parts)
    x = tf_keras.layers.Dense(24, activation="tanh", name="custom_hidden")(x)
    return tf_keras.Model(inputs, output_layer(specs, x), name="custom_tanh")
