"""`gpupipe init DIR` on an image folder (ROOT/<class>/*.jpg): a commented image config.

The classes are the class folders; `SAMPLE_IMAGES` files drawn at random across them give
the image size (the sampled images' median height and width, at most `MAX_SIDE` on the
longer side, keeping their shape) and the channels (1 when every sampled image is
grayscale); the family is `cnn` for small images (at most `SMALL_SIDE` pixels a side) and
`mobilenetv3` above, the epochs a cap of about `TARGET_STEPS` steps that early stopping
usually ends sooner. Headers only: no image is decoded."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.kinds.image_header import NotAnImage, read_header
from components.sources import images, readers
from pipelines.init.proposal import MAX_EPOCHS, MIN_EPOCHS, TARGET_STEPS, pipeline_name

SAMPLE_IMAGES = 500
MAX_SIDE = 224  # the longer side of a proposed image size
SMALL_SIDE = 64  # up to this a side: the small cnn; above: mobilenetv3
SEED = 0


@dataclass
class ImageProposal:
    name: str
    source: str
    classes: Dict[str, int]  # images per class folder
    image_size: Tuple[int, int]
    channels: int
    formats: Dict[str, int]
    sampled: int
    model: str
    epochs: int
    batch_size: int
    learning_rate: float
    sizes: str  # what was measured, for the comment
    notes: List[str] = field(default_factory=list)

    # what `gpupipe init` prints, as for a table
    task, metric, threshold, label = "multiclass", "accuracy", "from the eval split at run time", images.LABEL
    left_out: List[Tuple[str, str]] = field(default_factory=list)
    renamed: List[Tuple[str, str]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(self.classes.values())


def _proposed_size(heights: List[int], widths: List[int]) -> Tuple[int, int]:
    h, w = float(np.median(heights)), float(np.median(widths))
    scale = min(1.0, MAX_SIDE / max(h, w))
    return max(1, round(h * scale)), max(1, round(w * scale))


def propose_images(source: str, files: List[readers.SourceFile], name: str = None) -> ImageProposal:
    root = files[0].root
    classes: Dict[str, int] = {}
    for f in files:
        cls = images.class_of(f.uri, root)
        classes[cls] = classes.get(cls, 0) + 1
    picked = sorted(np.random.default_rng(SEED).choice(len(files), min(SAMPLE_IMAGES, len(files)), replace=False))
    heights, widths, channels, formats = [], [], set(), {}
    for i in picked:
        data = storage.read_bytes(files[i].uri) or b""
        try:
            header = read_header(data)
        except NotAnImage as err:
            raise GpupipeError(f"gpupipe init: {files[i].uri} {err}; remove it, or replace it with a whole image")
        heights.append(header.height)
        widths.append(header.width)
        channels.add(header.channels)
        formats[header.format] = formats.get(header.format, 0) + 1
    size = _proposed_size(heights, widths)
    small = max(size) <= SMALL_SIDE
    batch_size = 32 if len(files) < 10_000 else 64
    steps_per_epoch = max(1, math.ceil(len(files) * 0.8 * 0.9 / batch_size))
    measured = (f"{min(heights)}-{max(heights)} x {min(widths)}-{max(widths)} pixels, median "
                f"{int(np.median(heights))} x {int(np.median(widths))}")
    return ImageProposal(
        name=name or pipeline_name(source), source=source, classes=dict(sorted(classes.items())), image_size=size,
        channels=1 if channels == {1} else 3, formats=dict(sorted(formats.items())), sampled=len(picked),
        model="cnn" if small else "mobilenetv3", batch_size=batch_size,
        epochs=min(MAX_EPOCHS, max(MIN_EPOCHS, math.ceil(TARGET_STEPS / steps_per_epoch))),
        learning_rate=0.003 if small else 0.001, sizes=measured, notes=list(getattr(files, "notes", [])))


def render_images(p: ImageProposal, command: str, path: str) -> str:
    """The image config as commented YAML."""
    classes = ", ".join(f"{c} ({n})" for c, n in list(p.classes.items())[:20])
    more = f", and {len(p.classes) - 20} more" if len(p.classes) > 20 else ""
    lines = [
        f"# Proposed by `{command}` from the {p.rows} images of {len(p.classes)} class folders under {p.source}",
        f"# ({p.sampled} sampled for their size). Review it, then run it as it is: gpupipe run {path}",
        "# Every key and its default: docs/config.md; image data: docs/image-data.md.",
        f"name: {p.name}",
        f"description: {json.dumps(f'image classifier of the class folders of {os.path.basename(p.source.rstrip(chr(47)))} (gpupipe init)')}",
        "data:",
        f"  source: {json.dumps(p.source)}",
        "  format: images  # ROOT/<class>/*.jpg: the columns image (the file's bytes), label (its folder), file",
        f"  label: label  # the classes: {classes}{more}",
        *([f"  # {note}" for note in p.notes]),
        "  image_features:",
        "    - name: image",
        f"      # sampled sizes {p.sizes}; formats {', '.join(f'{k} ({v})' for k, v in p.formats.items())}",
        f"      image_size: [{p.image_size[0]}, {p.image_size[1]}]  # every image is resized to this",
        f"      channels: {p.channels}  # {'every sampled image is grayscale' if p.channels == 1 else 'RGB'}",
        "      # augment: {flip: true, crop: 0.1, brightness: 0.1, contrast: 0.1}  # training only; flip suits photos,",
        "      #   not digits or text",
        "  split:",
        "    eval_percent: 20  # a hash of each file's bytes (never its class): the same file always on one side",
        "training:",
        "  task: multiclass",
        f"  model: {p.model}  # {'a small CNN for small images' if p.model == 'cnn' else 'MobileNetV3, from scratch'}; "
        f"or {', '.join(f for f in ('cnn', 'resnet50', 'efficientnetb0', 'mobilenetv3', 'vit') if f != p.model)}",
        "  # image: {weights: path/to/notop.h5, fine_tune_after: 3}  # start a backbone from a weights file",
        f"  batch_size: {p.batch_size}",
        f"  epochs: {p.epochs}  # a cap: room for about {TARGET_STEPS:,} steps; early stopping usually ends sooner",
        "  validation_percent: 10",
        "  early_stopping: {metric: loss, patience: 10}",
        f"  learning_rate: {p.learning_rate}",
        "evaluation:",
        "  metric: accuracy",
        "  must_beat_trivial: true  # beat a model that answers the most frequent class, on the eval split",
        "  threshold: 0  # a fixed lower bound on accuracy besides; 0: none",
        "serving:",
        "  base: serving  # TF Serving versions land in serving/<model_name>/<N>/",
        f"  model_name: {p.name}",
    ]
    return "\n".join(lines) + "\n"
