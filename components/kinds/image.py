"""The image kind (data.image_features): an encoded JPEG, PNG, GIF or BMP per row, kept as
its bytes through ingest (only its header and end are read: image_header.py); train decodes
it in the input pipeline (in parallel, resized or cropped to `image_size`, cached decoded
when the split fits), augments it for training only, and the model takes [height, width,
channels] pixels in 0-255. The serving signatures decode the bytes inside the SavedModel
with the same function, so training and serving cannot disagree.

A table's image column holds paths (relative to the table's folder) or URIs, which ingest
reads; a TFRecord's holds the bytes; an image folder (components/sources/images.py) gives
each file's bytes."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Literal, Optional, Tuple

from pydantic import Field, field_validator

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.contracts.settings import Strict
from components.kinds.base import ColumnFacts, Encoded, FeatureKind, FeatureSetting, RowSource
from components.kinds.image_header import FORMATS, NotAnImage, image_format, read_header

IMAGES = "images"  # Encoded.extras: {feature: its [batch, height, width, channels] float32 pixels}
# Pillow's Image.MAX_IMAGE_PIXELS: past it a file is taken for a decompression bomb.
MAX_PIXELS = 89_478_485
DERIVED = ("format", "height", "width")  # the statistics of each image feature: <name>__format, ...
_READERS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="gpupipe-image-read")


class Augmentation(Strict):
    """Random changes to each training image, every epoch (never to eval, validation or serving)."""

    flip: bool = Field(False, description="mirror left-right at random (not for digits or text)")
    crop: float = Field(0.0, ge=0, lt=0.5, description="crop up to this share of each side at random, then resize back")
    brightness: float = Field(0.0, ge=0, le=1, description="add a random delta in [-b, b] (pixels scaled to 0-1)")
    contrast: float = Field(0.0, ge=0, lt=1, description="scale the contrast by a random factor in [1-c, 1+c]")


class ImageSetting(FeatureSetting):
    """One image column's settings: the size the model takes and how to get there."""

    image_size: Tuple[int, int] = Field((224, 224), description="[height, width] the model takes")
    channels: Literal[1, 3] = Field(3, description="1: grayscale, 3: RGB (a file of other channels is converted)")
    fit: Literal["resize", "crop", "pad"] = Field(
        "resize", description="resize: stretch to image_size; crop: scale the short side, crop the centre; pad: scale "
                              "the long side, pad with black")
    max_pixels: int = Field(MAX_PIXELS, gt=0, description="a file of more pixels is refused (a decompression bomb)")
    augment: Augmentation = Field(Augmentation(), description="training-only augmentation")

    @field_validator("image_size")
    @classmethod
    def _size(cls, v):
        if min(v) < 1 or max(v) > 4096:
            raise ValueError(f"{list(v)} is not an image size; give [height, width], each 1 to 4096")
        return v


@dataclass(frozen=True)
class ImageFeature:
    name: str
    height: int
    width: int
    channels: int
    fit: str = "resize"
    augment: Dict[str, float] = field(default_factory=dict)

    @property
    def shape(self) -> List[int]:
        return [self.height, self.width, self.channels]


class ImageKind(FeatureKind):
    name = "image"
    config_key = "image_features"
    description = ("columns of encoded images (JPEG, PNG, GIF, BMP): an image folder's files, a table's paths or "
                   "URIs, a TFRecord's bytes; decoded, resized and augmented in training, decoded inside the "
                   "SavedModel for serving")
    settings = ImageSetting
    spec_type = ImageFeature
    per_example = True

    def arrow_type(self, setting):
        import pyarrow as pa

        return pa.binary()

    def prepare_column(self, column, name: str, setting: ImageSetting, source: RowSource):
        """A table's paths or URIs read into bytes; each image's header and end checked;
        the format, height and width columns for the statistics."""
        import pyarrow as pa

        values, uri = column.to_pylist(), source.uri
        paths = [i for i, v in enumerate(values) if v is not None and image_format(v) is None] \
            if source.holds_paths else []
        if paths:
            base = storage.parent(uri)
            located = {i: _locate(values[i].decode("utf-8", "replace").strip(), base) for i in paths}
            contents = _READERS.map(lambda i: storage.read_bytes(located[i]), located)
            for i, content in zip(located, contents):
                if content is None:
                    raise GpupipeError(f"data.image_features: column '{name}' row {i + 1} of {uri} names "
                                       f"{values[i].decode('utf-8', 'replace')}, not found at {located[i]}; fix the "
                                       "path (relative to the table's folder, or a URI) or add the file")
                values[i] = content
        formats, heights, widths = [], [], []
        for i, data in enumerate(values):
            where = source.where(i, len(values))
            if data is None:
                raise GpupipeError(f"data.image_features: {where} has no '{name}' image; give every row an image, "
                                   "or leave the row out")
            try:
                header = read_header(data)
            except NotAnImage as err:
                raise GpupipeError(f"data.image_features: {where} {err}; remove it, or replace it with a whole image "
                                   f"({', '.join(FORMATS)})") from None
            if header.pixels > setting.max_pixels:
                raise GpupipeError(
                    f"data.image_features: {where} is {header.width}x{header.height} pixels ({header.pixels:,}), over "
                    f"max_pixels ({setting.max_pixels:,}: a decompression bomb, or a scan too large to train on); "
                    f"resize it, or raise max_pixels in the data.image_features entry of '{name}'")
            formats.append(header.format)
            heights.append(float(header.height))
            widths.append(float(header.width))
        derived = {f"{name}__format": pa.array(formats, pa.string()), f"{name}__height": pa.array(heights, pa.float32()),
                   f"{name}__width": pa.array(widths, pa.float32())}
        return pa.array(values, pa.binary()), derived

    def edit_schema(self, feature) -> None:
        """TFMD's image_domain: the bytes have no distribution to compare (validate compares the
        format, height and width columns instead)."""
        feature.image_domain.SetInParent()

    def spec(self, name: str, stats, setting: ImageSetting, options) -> ImageFeature:
        height, width = setting.image_size
        return ImageFeature(name=name, height=height, width=width, channels=setting.channels, fit=setting.fit,
                            augment=setting.augment.model_dump())

    def parsed_bytes(self, spec: ImageFeature, stats) -> int:
        return spec.height * spec.width * spec.channels + 64  # decoded uint8 pixels

    def parse_feature(self, spec):
        import tensorflow as tf

        return tf.io.FixedLenFeature([1], tf.string, default_value=[""])

    def serving_spec(self, spec):
        import tensorflow as tf

        return tf.TensorSpec([None], tf.string, name=spec.name)

    def decoded_spec(self, spec: ImageFeature):
        import tensorflow as tf

        return tf.TensorSpec([None, *spec.shape], tf.float32, name=spec.name)

    def model_input(self, spec: ImageFeature):
        import tensorflow as tf
        import tf_keras

        return tf_keras.Input(shape=tuple(spec.shape), name=spec.name, dtype=tf.float32)

    def decode_example(self, spec: ImageFeature, value):
        """One example's parsed [1] bytes -> [height, width, channels] uint8, resized to the spec."""
        from components.kinds.image_ops import decode_image

        return decode_image(value[0], spec)

    def decode_batch(self, spec: ImageFeature, values):
        """[batch, 1] bytes -> [batch, height, width, channels] float32 pixels (serving)."""
        import tensorflow as tf

        from components.kinds.image_ops import decode_image

        images = tf.map_fn(lambda v: decode_image(v, spec), values[:, 0],
                           fn_output_signature=tf.TensorSpec(spec.shape, tf.uint8))
        return tf.cast(images, tf.float32)

    def augment(self, spec: ImageFeature, image, training: bool):
        """uint8 pixels -> float32 0-255, augmented in training (one image); without
        augmentation a cast, on a batch as well."""
        from components.kinds.image_ops import augment_image

        return augment_image(image, spec, training)

    def augments_each(self, spec: ImageFeature, training: bool) -> bool:
        return training and any(spec.augment.values())

    def encode(self, specs: List[ImageFeature], inputs, options) -> Encoded:
        """Images go to an image family's backbone (components/train/vision.py), not the dense vector."""
        return Encoded(dense=[], extras={IMAGES: {f.name: inputs[f.name] for f in specs}})

    def detect(self, facts: ColumnFacts) -> Optional[str]:
        return None  # an image folder is proposed by gpupipe init DIR; a table's paths are declared by hand


def _locate(path: str, base: str) -> str:
    """A path as a table names it: a URI or an absolute path as it is, else relative to the table's folder."""
    if storage.is_remote(path) or os.path.isabs(path):
        return path
    return storage.join(base, path)
