"""The eval images the model got wrong, for the run report's grid: up to `LIMIT` of them,
the most confident mistakes first, each written into the blessing artifact as its encoded
bytes with its true and predicted class. Only for a model with image features."""
from __future__ import annotations

import os
from typing import List

import numpy as np

from components.evaluate.scoring import eval_records
from components.kinds import load_feature_specs
from components.kinds.image_header import image_format

LIMIT = 24
MAX_BYTES = 256 * 1024  # a larger file is left out of the page
FOLDER = "misclassified"  # inside the blessing artifact


def write_misclassified(model_dir: str, examples_dir: str, labels: np.ndarray, probabilities: np.ndarray,
                        classes: List[str], blessing_dir: str) -> List[dict]:
    """[{file, true, predicted, probability}] of the written mistakes (empty without image
    features or mistakes); `labels` and `probabilities` are the eval split's in its order."""
    import tensorflow as tf

    specs = load_feature_specs(model_dir)
    images = specs.of_kind("image")
    if not images or not classes:
        return []
    predicted = probabilities.argmax(axis=1)
    wrong = np.flatnonzero((labels >= 0) & (predicted != labels))
    wrong = wrong[np.argsort(-probabilities[wrong, predicted[wrong]], kind="stable")][:LIMIT]
    if not len(wrong):
        return []
    wanted = {int(i): rank for rank, i in enumerate(wrong)}
    feature = images[0].name
    spec = {feature: tf.io.FixedLenFeature([], tf.string, default_value="")}
    found = {}
    records = eval_records(examples_dir)  # the order predict scored the rows in
    for row, record in enumerate(records.take(int(wrong.max()) + 1)):
        if row in wanted:
            found[row] = tf.io.parse_single_example(record, spec)[feature].numpy()
    os.makedirs(os.path.join(blessing_dir, FOLDER), exist_ok=True)
    written = []
    for row in wrong:
        data = found.get(int(row), b"")
        if not data or len(data) > MAX_BYTES:
            continue
        name = f"{wanted[int(row)]:02d}.{image_format(data) or 'bin'}"
        with open(os.path.join(blessing_dir, FOLDER, name), "wb") as f:
            f.write(data)
        written.append({"file": f"{FOLDER}/{name}", "true": classes[labels[row]], "predicted": classes[predicted[row]],
                        "probability": float(probabilities[row, predicted[row]])})
    return written
