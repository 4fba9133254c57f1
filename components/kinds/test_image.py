"""The image kind's parts, without kfp or a pipeline: the header read at ingest (against
the bytes TensorFlow's own encoders write), the decode the input pipeline and the serving
signatures share (each fit, grayscale, a GIF's first frame), and the training-only
augmentation."""
import numpy as np
import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow as tf

from components.kinds.image import ImageFeature
from components.kinds.image_header import NotAnImage, read_header
from components.kinds.image_ops import augment_image, decode_image

pytestmark = pytest.mark.unit


def _pixels(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)


def _gradient(height: int, width: int) -> np.ndarray:
    """A left-to-right ramp, the same in every row and channel: flips and crops show in it."""
    ramp = np.linspace(0, 255, width).astype(np.uint8)
    return np.broadcast_to(ramp[None, :, None], (height, width, 3)).copy()


@pytest.mark.parametrize("fmt,encode", [
    ("png", lambda p: tf.io.encode_png(p).numpy()),
    ("jpeg", lambda p: tf.io.encode_jpeg(p, quality=90).numpy()),
    ("bmp", lambda p: _bmp(p)),
])
def test_the_header_gives_format_and_size_without_decoding(fmt, encode):
    data = encode(_pixels(37, 53))
    header = read_header(data)
    assert (header.format, header.height, header.width, header.channels) == (fmt, 37, 53, 3)
    assert tuple(tf.io.decode_image(data).shape) == (37, 53, 3)  # and TensorFlow reads what the header says


def _bmp(pixels: np.ndarray) -> bytes:
    """A 24-bit BMP (TensorFlow writes none): file header, BITMAPINFOHEADER, bottom-up BGR rows
    padded to 4 bytes."""
    import struct

    height, width, _ = pixels.shape
    row = (width * 3 + 3) // 4 * 4
    body = b"".join(pixels[y, :, ::-1].tobytes().ljust(row, b"\0") for y in range(height - 1, -1, -1))
    return (b"BM" + struct.pack("<IHHI", 54 + len(body), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(body), 0, 0, 0, 0) + body)


def test_a_grayscale_png_has_one_channel_and_a_cut_jpeg_is_refused():
    assert read_header(tf.io.encode_png(_pixels(8, 8, 1)).numpy()).channels == 1
    jpeg = tf.io.encode_jpeg(_pixels(64, 64)).numpy()
    with pytest.raises(NotAnImage, match="cut short|whole|end"):
        read_header(jpeg[: len(jpeg) // 2])
    with pytest.raises(NotAnImage, match="empty"):
        read_header(b"")
    with pytest.raises(NotAnImage, match="not a JPEG, PNG, GIF or BMP"):
        read_header(b"label,image\n1,cat.jpg\n")


@pytest.mark.parametrize("fit", ["resize", "crop", "pad"])
def test_every_fit_decodes_to_the_spec_shape_as_uint8(fit):
    spec = ImageFeature(name="image", height=24, width=32, channels=3, fit=fit)
    image = decode_image(tf.io.encode_png(_pixels(40, 30)), spec)
    assert image.dtype == tf.uint8 and image.shape == (24, 32, 3)


def test_an_image_at_the_size_is_its_own_pixels_and_the_fits_differ_where_the_shape_differs():
    pixels = _pixels(16, 16)
    spec = ImageFeature(name="image", height=16, width=16, channels=3)
    np.testing.assert_array_equal(decode_image(tf.io.encode_png(pixels), spec).numpy(), pixels)
    wide = tf.io.encode_png(_gradient(10, 40))  # 4:1 into a square
    square = {fit: decode_image(wide, ImageFeature(name="i", height=10, width=10, channels=3, fit=fit)).numpy()
              for fit in ("resize", "crop", "pad")}
    assert square["pad"][0].max() == 0 and square["pad"][-1].max() == 0 and square["pad"][4].max() > 200  # bars
    crop_span = int(square["crop"][5, -1, 0]) - int(square["crop"][5, 0, 0])
    resize_span = int(square["resize"][5, -1, 0]) - int(square["resize"][5, 0, 0])
    assert crop_span < resize_span / 2  # the centre quarter of the ramp, not all of it


def test_grayscale_specs_convert_colour_files_and_a_gif_gives_its_first_frame():
    gray = ImageFeature(name="image", height=8, width=8, channels=1)
    assert decode_image(tf.io.encode_png(_pixels(8, 8)), gray).shape == (8, 8, 1)
    # A two-frame GIF (the smallest valid one: a 1x1 image drawn twice) decodes to one frame.
    gif = (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00"
           b"!\xf9\x04\x00\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00"
           b"!\xf9\x04\x00\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02L\x01\x00;")
    assert tf.io.decode_gif(gif).shape[0] == 2
    frame = decode_image(gif, ImageFeature(name="image", height=1, width=1, channels=3))
    assert frame.shape == (1, 1, 3)
    assert read_header(gif).format == "gif"


AUGMENT = {"flip": True, "crop": 0.2, "brightness": 0.2, "contrast": 0.3}


def test_augmentation_changes_training_images_only_and_keeps_shape_and_range():
    spec = ImageFeature(name="image", height=32, width=32, channels=3, augment=AUGMENT)
    pixels = tf.constant(_pixels(32, 32))
    evaluated = augment_image(pixels, spec, training=False)
    np.testing.assert_array_equal(evaluated.numpy(), pixels.numpy().astype(np.float32))
    tf.random.set_seed(3)
    seen = [augment_image(pixels, spec, training=True).numpy() for _ in range(8)]
    for image in seen:
        assert image.shape == (32, 32, 3) and image.dtype == np.float32
        assert image.min() >= 0.0 and image.max() <= 255.0
    assert len({image.tobytes() for image in seen}) == 8  # a new change each time
    assert all(np.abs(image - pixels.numpy()).mean() > 1.0 for image in seen)


def test_a_flip_mirrors_and_a_crop_zooms_in():
    ramp = tf.constant(_gradient(16, 64))
    flips = ImageFeature(name="image", height=16, width=64, channels=3, augment={"flip": True})
    tf.random.set_seed(1)
    rows = [augment_image(ramp, flips, training=True).numpy()[0, :, 0] for _ in range(16)]
    mirrored = [r for r in rows if r[0] > r[-1]]
    assert 0 < len(mirrored) < 16  # about half, and each one the ramp reversed
    np.testing.assert_array_equal(mirrored[0], ramp.numpy()[0, ::-1, 0].astype(np.float32))
    crops = ImageFeature(name="image", height=16, width=64, channels=3, augment={"crop": 0.4})
    spans = [np.ptp(augment_image(ramp, crops, training=True).numpy()[8, :, 0]) for _ in range(8)]
    assert max(spans) < 255 and min(spans) > 255 * (1 - 2 * 0.4) - 8  # a part of the ramp, resized back
