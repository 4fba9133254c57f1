"""The same job as `gpupipe run configs/digits.yaml`, written by hand with tf_keras, for
bench/images.py --e2e: read the class folders, hold out 20% for evaluation, train the same
small CNN (two blocks of two batch-normalised 3x3 convolutions, 32 then 64 filters, max
pools, global mean, softmax; Adam at 0.003, batch 32) with 10% of train for early stopping
(patience 10, at most 300 epochs), report the eval accuracy and save a SavedModel. What it
leaves out is what gpupipe adds: statistics and anomalies, the gates, a served version,
serving signatures for encoded bytes, the report.

  python bench/keras_digits.py DATA_DIR OUTPUT_DIR
"""
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tf_keras  # noqa: E402


def main(data: str, output: str) -> None:
    common = dict(image_size=(8, 8), color_mode="grayscale", batch_size=None, seed=7, label_mode="int")
    train = tf_keras.utils.image_dataset_from_directory(data, validation_split=0.2, subset="training", **common)
    test = tf_keras.utils.image_dataset_from_directory(data, validation_split=0.2, subset="validation", **common)
    # Small enough for arrays: fit's validation_split then holds out the same last 10% every epoch
    # (a take/skip on the directory dataset would not: it reshuffles at each pass).
    images, labels = (np.stack(a) for a in zip(*[(image.numpy(), label.numpy()) for image, label in train]))
    test_images, test_labels = (np.stack(a) for a in zip(*[(image.numpy(), label.numpy()) for image, label in test]))

    inputs = tf_keras.Input((8, 8, 1))
    x = tf_keras.layers.Rescaling(1 / 255)(inputs)
    filters = 32
    for _ in range(2):
        for _ in range(2):
            x = tf_keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = tf_keras.layers.BatchNormalization()(x)
            x = tf_keras.layers.Activation("relu")(x)
        x = tf_keras.layers.MaxPooling2D(2)(x)
        filters *= 2
    x = tf_keras.layers.GlobalAveragePooling2D()(x)
    outputs = tf_keras.layers.Dense(10, activation="softmax")(x)
    model = tf_keras.Model(inputs, outputs)
    model.compile(optimizer=tf_keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(images, labels, batch_size=32, validation_split=0.1, epochs=300, verbose=0,
                        callbacks=[tf_keras.callbacks.EarlyStopping(patience=10, restore_best_weights=True)])
    _, accuracy = model.evaluate(test_images, test_labels, verbose=0)
    model.save(output)
    print(f"eval accuracy {accuracy:.4f} after {len(history.history['loss'])} epochs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
