"""Example image folders, made from what installed packages ship (nothing is downloaded):

- `digits`: scikit-learn's 1,797 handwritten digits (8x8 pixels, 16 grey levels), each a
  grayscale PNG under its class folder `0` to `9`;
- `shapes`: generated RGB images of a circle, a square or a triangle (the class) of a random
  size, place and colour on a noisy background of another colour: no pixel's value or
  colour tells the class, only the arrangement of pixels does, so a model needs
  convolutions (or attention) to solve it.

`write_example(name, folder)` writes one (`gpupipe examples NAME FOLDER`)."""
from __future__ import annotations

import os
from typing import Callable, Dict

import numpy as np

from components.contracts.errors import GpupipeError
from components.sources.images import EXAMPLE_NAMES

SHAPES = ("circle", "square", "triangle")


def _png(pixels: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_png(pixels.astype(np.uint8)).numpy()


def _jpeg(pixels: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_jpeg(pixels.astype(np.uint8), quality=90).numpy()


def write_digits(folder: str) -> int:
    """scikit-learn's digits as 8x8 grayscale PNGs: folder/<digit>/<index>.png."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    for i, (image, target) in enumerate(zip(digits.images, digits.target)):
        path = os.path.join(folder, str(target), f"{i:04d}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(_png(np.round(image * 255 / 16)[:, :, None]))
    return len(digits.target)


def shape_image(shape: str, size: int, rng: np.random.Generator) -> np.ndarray:
    """One [size, size, 3] image of `shape`: a random radius, centre and colour on noise."""
    background, colour = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    while np.abs(colour.astype(int) - background.astype(int)).sum() < 150:  # the shape must show
        colour = rng.integers(0, 256, 3)
    image = np.clip(background + rng.normal(0, 12, (size, size, 3)), 0, 255)
    r = rng.uniform(size * 0.15, size * 0.3)
    cy, cx = rng.uniform(r, size - r, 2)
    y, x = np.mgrid[0:size, 0:size] + 0.5
    if shape == "circle":
        inside = (y - cy) ** 2 + (x - cx) ** 2 <= r ** 2
    elif shape == "square":
        half = r * 0.85
        inside = (np.abs(y - cy) <= half) & (np.abs(x - cx) <= half)
    else:  # an upright triangle in the circle of radius r
        top, base = cy - r, cy + r / 2
        width = (y - top) / (1.5 * r) * r * np.sqrt(3) / 2
        inside = (y >= top) & (y <= base) & (np.abs(x - cx) <= width)
    image[inside] = colour
    return image


def write_shapes(folder: str, per_class: int = 300, size: int = 32, seed: int = 0) -> int:
    """`per_class` JPEGs of each shape: folder/<shape>/<index>.jpg."""
    rng = np.random.default_rng(seed)
    count = 0
    for shape in SHAPES:
        os.makedirs(os.path.join(folder, shape), exist_ok=True)
        for i in range(per_class):
            with open(os.path.join(folder, shape, f"{i:04d}.jpg"), "wb") as f:
                f.write(_jpeg(shape_image(shape, size, rng)))
            count += 1
    return count


EXAMPLES: Dict[str, Callable[[str], int]] = dict(zip(EXAMPLE_NAMES, (write_digits, write_shapes)))


def write_example(name: str, folder: str) -> int:
    """Writes the example image folder `name` into `folder` (which must not hold files); its images."""
    if name not in EXAMPLES:
        raise GpupipeError(f"examples: '{name}' is not an example; use one of {', '.join(EXAMPLES)}")
    if os.path.isdir(folder) and os.listdir(folder):
        raise GpupipeError(f"examples: {folder} is not empty; give a new folder")
    return EXAMPLES[name](folder)
