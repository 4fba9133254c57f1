"""The compressed export (serving.export float16 or int8): a TFLite model, `model.tflite`, beside
the SavedModel in the model artifact (and so in each pushed version; TF Serving still loads
the SavedModel and ignores the file), converted from the `serving_default` signature, so it
takes the same raw features (one value per row; numeric float32, categorical strings) and
answers the same outputs. Train writes it with a record of the conversion
(`assets.extra/gpupipe_compression.json`); evaluate scores it on the eval split; the run report
and bench/serving.py read both.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Dict, Optional

from components.contracts import names, storage

EXPORTS = ("float32", "float16", "int8")  # float32: the SavedModel alone
TFLITE_FILE = "model.tflite"
COMPRESSION_FILE = "gpupipe_compression.json"  # inside the SavedModel's assets.extra/
SAVED_MODEL_PARTS = ("saved_model.pb", "variables", "assets", "fingerprint.pb")  # what TF Serving loads


def compression_path(model_dir: str) -> str:
    return storage.join(model_dir, "assets.extra", COMPRESSION_FILE)


def load_compression(model_dir: str) -> Optional[dict]:
    """The conversion's record (form, sizes, how it was converted), None without a compressed export."""
    text = storage.read_text(compression_path(model_dir))
    return json.loads(text) if text else None


def tree_bytes(path: str) -> int:
    """Bytes of the files under a local `path` (a file: its size; missing: 0)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def saved_model_sizes(model_dir: str) -> Dict[str, int]:
    """A local SavedModel's bytes on disk: `variables` (the weights) and `saved_model` (what TF
    Serving loads: the graph, the variables, assets), without assets.extra and model.tflite."""
    return {"variables_bytes": tree_bytes(os.path.join(model_dir, "variables")),
            "saved_model_bytes": sum(tree_bytes(os.path.join(model_dir, p)) for p in SAVED_MODEL_PARTS)}


def raw_features(serialized, specs) -> Dict[str, object]:
    """A batch of serialized tf.Example as the raw-feature signature takes it: numpy arrays
    of one value per row, a missing numeric value NaN and a missing string "" (as training
    parses them)."""
    import tensorflow as tf

    spec = {f.name: tf.io.FixedLenFeature([], tf.float32, default_value=float("nan")) for f in specs.numeric}
    spec.update({f.name: tf.io.FixedLenFeature([], tf.string, default_value="") for f in specs.categorical})
    return {k: v.numpy() for k, v in tf.io.parse_example(serialized, spec).items()}


def tflite_runner(path: str) -> Callable[[Dict[str, object]], Dict[str, object]]:
    """A function from raw features (numpy, one value per row) to the model's outputs, through
    TensorFlow's TFLite interpreter (the TensorFlow pip package links the Flex delegate that the
    model's TensorFlow ops, e.g. the string lookups, need)."""
    import numpy as np
    import tensorflow as tf

    interpreter = tf.lite.Interpreter(model_path=path, num_threads=1)
    runner = interpreter.get_signature_runner(names.SERVING_SIGNATURE)
    return lambda features: runner(**{k: np.asarray(v) for k, v in features.items()})
