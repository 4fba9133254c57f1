"""The image families (training.model: cnn, resnet50, efficientnetb0, mobilenetv3, vit): each
image feature through its own backbone to a pooled vector, beside the other features'
dense vector through the tower, under the task's head (model.py adds it).

The backbones take the image kind's input, [height, width, channels] pixels in 0-255
(components/kinds/image.py). resnet50, efficientnetb0 and mobilenetv3 are tf_keras'
applications, built without weights (nothing is downloaded at run time); `training.image.
weights` names a weights file to start from (Keras' `*_notop.h5` for them), and
`fine_tune_after` keeps the backbone frozen for that many epochs (`FineTune`). cnn (a small
network, from scratch) and vit (a Vision Transformer) are written with tf_keras layers here.
"""
from __future__ import annotations

import math
import os
import tempfile
from typing import Callable, Dict, List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.kinds.image import IMAGES
from components.kinds.layers import concat
from components.train.parts import FeatureParts, model_family
from components.train.settings import TrainSettings
from components.train.vision_settings import VisionSettings

BACKBONE = "backbone"  # each image feature's backbone layer is named <feature>_backbone
APPLICATION_MIN_SIDE = 32  # tf_keras' applications take no smaller input


def backbone_name(feature: str) -> str:
    return f"{feature}_{BACKBONE}"


def _small_cnn(shape, vision: VisionSettings, name: str) -> tf_keras.Model:
    """Blocks of two 3x3 convolutions (batch-normalised, ReLU) and a 2x2 max pool, the
    filters doubling each block, until the image is a few pixels across; then the mean."""
    inputs = tf_keras.Input(shape)
    x = tf_keras.layers.Rescaling(1 / 255)(inputs)
    blocks = max(2, min(5, int(math.log2(max(1, min(shape[0], shape[1])))) - 1))
    filters = vision.filters
    for b in range(blocks):
        for c in range(2):
            x = tf_keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"block{b}_conv{c}")(x)
            x = tf_keras.layers.BatchNormalization(name=f"block{b}_bn{c}")(x)
            x = tf_keras.layers.Activation("relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = tf_keras.layers.MaxPooling2D(2, name=f"block{b}_pool")(x)
        filters *= 2
    return tf_keras.Model(inputs, tf_keras.layers.GlobalAveragePooling2D()(x), name=name)


class PatchPositions(tf_keras.layers.Layer):
    """Adds a learnt position embedding to each patch's."""

    def build(self, input_shape):
        self.positions = self.add_weight(name="positions", shape=(1, input_shape[1], input_shape[2]),
                                         initializer=tf_keras.initializers.RandomNormal(stddev=0.02))

    def call(self, x):
        return x + tf.cast(self.positions, x.dtype)


def _vit(shape, vision: VisionSettings, name: str) -> tf_keras.Model:
    """A Vision Transformer: non-overlapping patches embedded, positions added, pre-norm
    transformer blocks (multi-head self-attention, a GELU MLP), the patches' mean."""
    if vision.patch_size > min(shape[0], shape[1]):
        raise GpupipeError(f"training.image.patch_size: {vision.patch_size} is larger than the image "
                           f"({shape[0]}x{shape[1]}); give at most {min(shape[0], shape[1])}")
    inputs = tf_keras.Input(shape)
    x = tf_keras.layers.Rescaling(1 / 127.5, offset=-1)(inputs)
    x = tf_keras.layers.Conv2D(vision.vit_dim, vision.patch_size, strides=vision.patch_size, name="patches")(x)
    x = tf_keras.layers.Reshape((x.shape[1] * x.shape[2], vision.vit_dim))(x)
    x = PatchPositions(name="positions")(x)
    for i in range(vision.vit_layers):
        h = tf_keras.layers.LayerNormalization(epsilon=1e-6, name=f"block{i}_norm0")(x)
        h = tf_keras.layers.MultiHeadAttention(vision.vit_heads, vision.vit_dim // vision.vit_heads,
                                               name=f"block{i}_attention")(h, h)
        x = tf_keras.layers.Add()([x, h])
        h = tf_keras.layers.LayerNormalization(epsilon=1e-6, name=f"block{i}_norm1")(x)
        h = tf_keras.layers.Dense(2 * vision.vit_dim, activation="gelu", name=f"block{i}_mlp0")(h)
        h = tf_keras.layers.Dense(vision.vit_dim, name=f"block{i}_mlp1")(h)
        x = tf_keras.layers.Add()([x, h])
    x = tf_keras.layers.LayerNormalization(epsilon=1e-6, name="norm")(x)
    return tf_keras.Model(inputs, tf_keras.layers.GlobalAveragePooling1D()(x), name=name)


def _application(build: Callable, preprocess: Callable = None):
    """A tf_keras application without its top, no weights, average-pooled; inputs under
    APPLICATION_MIN_SIDE pixels are scaled up to it first."""
    def backbone(shape, vision: VisionSettings, name: str) -> tf_keras.Model:
        inputs = tf_keras.Input(shape)
        x = inputs
        side = (max(shape[0], APPLICATION_MIN_SIDE), max(shape[1], APPLICATION_MIN_SIDE))
        if side != tuple(shape[:2]):
            x = tf_keras.layers.Resizing(*side, name="upscale")(x)
        if preprocess is not None:
            x = preprocess(x, shape[2])
        net = build(include_top=False, weights=None, input_shape=(*side, shape[2]), pooling="avg")
        return tf_keras.Model(inputs, net(x), name=name)

    return backbone


def _caffe(x, channels: int):
    """ResNet50's ImageNet preprocessing (BGR, mean subtracted) for RGB; else centred on 0."""
    if channels == 3:
        return tf_keras.layers.Lambda(tf_keras.applications.resnet50.preprocess_input, name="caffe")(x)
    return tf_keras.layers.Rescaling(1 / 127.5, offset=-1)(x)


BACKBONES: Dict[str, Callable] = {
    "cnn": _small_cnn,
    "resnet50": _application(tf_keras.applications.ResNet50, _caffe),
    # Both rescale 0-255 inside (include_preprocessing / the Rescaling and Normalization they hold).
    "efficientnetb0": _application(tf_keras.applications.EfficientNetB0),
    "mobilenetv3": _application(lambda **kw: tf_keras.applications.MobileNetV3Small(include_preprocessing=True, **kw)),
    "vit": _vit,
}


def load_backbone_weights(backbone: tf_keras.Model, weights: str) -> None:
    """The weights file (local, gs:// or s3://) into the backbone; one line when they do not fit."""
    local, tmp = weights, ""
    if storage.is_remote(weights):
        tmp = tempfile.mkdtemp(prefix="gpupipe-weights-")
        local = os.path.join(tmp, storage.basename(weights))
        storage.download_file(weights, local)
    elif not os.path.exists(weights):
        raise GpupipeError(f"training.image.weights: {weights} not found; give the path or URI of a weights file")
    try:
        backbone.load_weights(local)
    except (ValueError, OSError) as err:
        raise GpupipeError(f"training.image.weights: {weights} does not fit the {backbone.name} backbone "
                           f"({' '.join(str(err).split())[:200]}); give weights of the same family, input channels "
                           "and no top") from None
    finally:
        if tmp:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def image_top(family: str) -> Callable[[FeatureParts, TrainSettings], tf.Tensor]:
    def top(parts: FeatureParts, settings: TrainSettings):
        images = parts.encoded["image"].extras[IMAGES] if "image" in parts.encoded else {}
        if not images:
            raise GpupipeError(f"training.model: {family} is an image family, and the data declares no "
                               "image_features; declare data.image_features, or use dnn, wide_deep or cross")
        pooled: List[tf.Tensor] = []
        for feature, pixels in images.items():
            backbone = BACKBONES[family](tuple(pixels.shape[1:]), settings.image, backbone_name(feature))
            if settings.image.weights:
                load_backbone_weights(backbone, settings.image.weights)
            pooled.append(backbone(pixels))
        x = concat(pooled + ([parts.deep] if parts.dense is not None else []), "image_and_features")
        return tf_keras.layers.Dropout(settings.dropout, name="image_dropout")(x) if settings.dropout else x

    top.__doc__ = f"{family}: each image through its own backbone, beside the other features' tower."
    return top


for _family in BACKBONES:
    model_family(_family)(image_top(_family))

IMAGE_FAMILIES = tuple(BACKBONES)


class FineTune(tf_keras.callbacks.Callback):
    """The backbones frozen for the first `after` epochs (the head learns on the starting
    weights), trainable from then on: the train step is traced again for the new set of
    trainable weights (fit reads model.train_function at each step). A resumed run takes
    the state of the epoch it resumes at."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def _backbones(self):
        return [layer for layer in self.model.layers if layer.name.endswith("_" + BACKBONE)]

    def on_epoch_begin(self, epoch, logs=None):
        frozen = epoch < self.after
        layers = self._backbones()
        if layers and any(layer.trainable == frozen for layer in layers):
            for layer in layers:
                layer.trainable = not frozen
            self.model.train_function = None
            self.model.make_train_function(force=True)
            print(f"fine-tune: backbone {'frozen' if frozen else 'trainable'} from epoch {epoch + 1}", flush=True)
