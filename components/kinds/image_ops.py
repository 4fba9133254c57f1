"""The image kind's TensorFlow ops: decode and resize (the input pipeline and the serving
signatures both call `decode_image`, so training and serving see the same pixels), and the
training-only augmentation."""
from __future__ import annotations

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf


def decode_image(data, spec) -> tf.Tensor:
    """Encoded bytes (a scalar string) -> [height, width, channels] uint8 as the spec asks:
    `resize` stretches, `crop` scales the short side to fit and crops the centre, `pad`
    scales the long side to fit and pads with black. GIF: the first frame."""
    image = tf.io.decode_image(data, channels=spec.channels, expand_animations=False)
    image.set_shape([None, None, spec.channels])
    size = tf.constant([spec.height, spec.width])

    def fitted():
        if spec.fit == "pad":
            resized = tf.image.resize_with_pad(image, spec.height, spec.width)
        elif spec.fit == "crop":
            shape = tf.cast(tf.shape(image)[:2], tf.float32)
            scale = tf.reduce_max(tf.cast(size, tf.float32) / shape)
            scaled = tf.image.resize(image, tf.cast(tf.math.ceil(shape * scale), tf.int32))
            resized = tf.image.resize_with_crop_or_pad(scaled, spec.height, spec.width)
        else:
            resized = tf.image.resize(image, size)
        return tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)

    # An image already at the size is the decoded bytes as they are: no float round trip
    # (bench/images.py: a third of the decode's cost on 224x224 JPEGs).
    return tf.cond(tf.reduce_all(tf.equal(tf.shape(image)[:2], size)), lambda: image, fitted)


def augment_image(image, spec, training: bool) -> tf.Tensor:
    """uint8 [height, width, channels] -> float32 in 0-255; in training, the spec's random
    flip, crop (then resized back), brightness and contrast."""
    x = tf.cast(image, tf.float32)
    a = spec.augment or {}
    if not training or not any(a.values()):
        return x
    if a.get("flip"):
        x = tf.image.random_flip_left_right(x)
    if a.get("crop"):
        keep = 1.0 - tf.random.uniform([], 0.0, 2 * a["crop"])
        box = tf.cast(tf.math.ceil(tf.constant([spec.height, spec.width], tf.float32) * keep), tf.int32)
        x = tf.image.random_crop(x, tf.concat([box, [spec.channels]], 0))
        x = tf.image.resize(x, [spec.height, spec.width])
    if a.get("brightness"):
        x = x + tf.random.uniform([], -a["brightness"], a["brightness"]) * 255.0
    if a.get("contrast"):
        x = tf.image.random_contrast(x, 1.0 - a["contrast"], 1.0 + a["contrast"])
    return tf.clip_by_value(x, 0.0, 255.0)
