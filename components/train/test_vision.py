"""The image families' backbones, without kfp: each builds from no weights and pools an
image batch to a vector; a weights file the user names loads (and one of another family is
refused in one line); FineTune keeps a backbone frozen for its epochs, then trains it; under
mixed precision the backbone computes in float16 and the output layer in float32."""
import numpy as np
import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow as tf
import tf_keras

from components.contracts.errors import GpupipeError
from components.train.optimizers import build_optimizer_slots, make_optimizer
from components.train.vision import BACKBONES, FineTune, backbone_name, load_backbone_weights
from components.train.vision_settings import VisionSettings

pytestmark = pytest.mark.unit
SMALL = VisionSettings(filters=8, vit_layers=1, vit_dim=16, vit_heads=2, patch_size=4)


@pytest.mark.parametrize("family", sorted(BACKBONES))
def test_each_family_builds_without_weights_and_pools_a_batch(family):
    backbone = BACKBONES[family]((16, 16, 3), SMALL, backbone_name("image"))
    pooled = backbone(tf.random.uniform([2, 16, 16, 3], 0, 255))
    assert pooled.shape[0] == 2 and len(pooled.shape) == 2 and np.isfinite(pooled.numpy()).all()
    assert backbone.name == "image_backbone"


def test_grayscale_images_build_too_and_a_vit_patch_larger_than_the_image_is_named():
    assert BACKBONES["cnn"]((8, 8, 1), SMALL, "digit_backbone")(tf.zeros([1, 8, 8, 1])).shape[0] == 1
    with pytest.raises(GpupipeError, match=r"training.image.patch_size: 16 is larger than the image \(8x8\)"):
        BACKBONES["vit"]((8, 8, 1), VisionSettings(patch_size=16), "digit_backbone")


def test_a_weights_file_loads_into_the_same_family_and_another_family_is_refused(tmp_path):
    trained = BACKBONES["cnn"]((16, 16, 3), SMALL, "image_backbone")
    for w in trained.weights:
        w.assign(tf.random.normal(w.shape))
    path = str(tmp_path / "cnn_notop.h5")
    trained.save_weights(path)
    fresh = BACKBONES["cnn"]((16, 16, 3), SMALL, "image_backbone")
    load_backbone_weights(fresh, path)
    for a, b in zip(trained.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    other = BACKBONES["vit"]((16, 16, 3), SMALL, "image_backbone")
    with pytest.raises(GpupipeError, match=r"training.image.weights: .*cnn_notop.h5 does not fit the image_backbone"):
        load_backbone_weights(other, path)
    with pytest.raises(GpupipeError, match="training.image.weights: .*missing.h5 not found"):
        load_backbone_weights(fresh, str(tmp_path / "missing.h5"))


def test_fine_tune_freezes_the_backbone_for_its_epochs_then_trains_it(capsys):
    backbone = BACKBONES["cnn"]((8, 8, 1), SMALL, "image_backbone")
    inputs = tf_keras.Input((8, 8, 1))
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2, activation="softmax")(backbone(inputs)))
    model.compile(optimizer=make_optimizer("adam", 0.01), loss="sparse_categorical_crossentropy")
    build_optimizer_slots(model.optimizer, model.trainable_variables)  # as compile_model does, all unfrozen
    x = np.random.default_rng(0).uniform(0, 255, (16, 8, 8, 1)).astype("float32")
    y = (x.mean(axis=(1, 2, 3)) > 127).astype("int32")
    kernel = backbone.get_layer("block0_conv0").kernel

    class Snapshot(tf_keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.kernels = []

        def on_epoch_end(self, epoch, logs=None):
            self.kernels.append(kernel.numpy().copy())

    snap = Snapshot()
    model.fit(x, y, epochs=4, batch_size=8, verbose=0, callbacks=[FineTune(after=2), snap])
    np.testing.assert_array_equal(snap.kernels[0], snap.kernels[1])  # frozen: epochs 1 and 2
    assert not np.array_equal(snap.kernels[1], snap.kernels[3])  # trainable from epoch 3
    out = capsys.readouterr().out
    assert "fine-tune: backbone frozen from epoch 1" in out and "fine-tune: backbone trainable from epoch 3" in out


@pytest.mark.parametrize("family", ["cnn", "vit", "mobilenetv3"])
def test_under_mixed_precision_the_backbone_computes_in_float16_and_the_output_layer_in_float32(family):
    """What a GPU run sets (runtime.precision_policy: mixed_float16 on a T4): the image model's
    convolutions or attention in float16, its class probabilities in float32."""
    from components.contracts import names
    from components.kinds.image import ImageFeature
    from components.kinds.specs import FeatureSpecs
    from components.train.model import build_model
    from components.train.settings import TrainSettings

    specs = FeatureSpecs(label="label", classes=["circle", "square", "triangle"],
                         features={"image": [ImageFeature(name="image", height=16, width=16, channels=3)]})
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = build_model(specs, TrainSettings(model=family, image=SMALL))
    finally:
        tf_keras.mixed_precision.set_global_policy("float32")
    backbone = model.get_layer(backbone_name("image"))
    computing = [layer for layer in backbone.layers if layer.trainable_weights]
    assert computing and all(layer.compute_dtype == "float16" for layer in computing)
    head = model.get_layer(names.PROBABILITIES)
    assert head.compute_dtype == "float32" and head.kernel.dtype == tf.float32
    probabilities = model({"image": tf.random.uniform([2, 16, 16, 3], 0, 255)})
    assert probabilities.dtype == tf.float32 and probabilities.shape == (2, 3)
    np.testing.assert_allclose(tf.reduce_sum(probabilities, axis=1).numpy(), 1.0, rtol=1e-5)
