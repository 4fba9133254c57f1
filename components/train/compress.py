"""The compressed export (serving.export float16 or int8, components/contracts/compressed.py):
post-training quantization of the exported SavedModel's `serving_default` signature through
tf.lite.TFLiteConverter, written as `model.tflite` beside it, checked on rows of the train split.

What converts (measured on TF 2.16.2 with the penguins and ctr models, docs/serving.md):
- The models take raw strings and floats and look them up inside the graph (one hash table
  for the categorical vocabularies, Hashing, CategoryEncoding): DenseBincount and
  StringToHashBucketFast have no TFLite builtin,
  so the converter needs SELECT_TF_OPS (the Flex delegate runs those few ops).
- float16: the weights stored as float16 (`supported_types`), computed in float32.
- int8: dynamic-range quantization (weights int8, activations quantized on the fly). Full-
  integer quantization with a representative dataset crashes the converter's calibrator on
  these graphs (SIGSEGV, exit 139, with SELECT_TF_OPS and string inputs), so the train split's
  rows are not a calibration set here: they are the check that the TFLite model answers as
  the SavedModel does (`check_rows`, recorded as the largest output difference and the share
  of rows whose class agrees).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Optional

from components.contracts import names, storage
from components.contracts.compressed import (TFLITE_FILE, compression_path, raw_features, saved_model_sizes,
                                             tflite_runner)
from components.contracts.examples import split_files
from components.kinds import load_feature_specs

CHECK_ROWS = 512  # train rows both forms answer after the conversion


def convert(model_dir: str, export: str) -> bytes:
    """The TFLite flatbuffer of the SavedModel's raw-feature signature in the `export` form."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(model_dir, signature_keys=[names.SERVING_SIGNATURE])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if export == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def check_rows(model_dir: str, tflite_path: str, examples_dir: str, rows: int = CHECK_ROWS) -> dict:
    """Both forms on the first `rows` rows of the train split: the largest absolute difference
    of their outputs (probabilities, or a regression's predictions) and, for a classifier, the
    share of rows where they answer the same class."""
    import numpy as np
    import tensorflow as tf

    specs = load_feature_specs(model_dir)
    serve = tf.saved_model.load(model_dir).signatures[names.SERVING_SIGNATURE]
    run = tflite_runner(tflite_path)
    files = split_files(examples_dir, names.TRAIN_SPLIT)
    batch = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP").batch(rows)))
    features = raw_features(batch, specs)
    output = names.PREDICTIONS if specs.task == "regression" else names.PROBABILITIES
    full = serve(**{k: tf.constant(v) for k, v in features.items()})[output].numpy()
    small = np.asarray(run(features)[output])
    check = {"rows": int(len(full)), "max_abs_difference": float(np.max(np.abs(full - small)))}
    if specs.task != "regression":
        check["class_agreement"] = float(np.mean(full.argmax(axis=-1) == small.argmax(axis=-1)))
    return check


def compress_export(model_dir: str, examples_dir: str, export: str, scratch: str = "") -> Optional[dict]:
    """Writes `model.tflite` (the `export` form) and its record into the model at `model_dir`
    (a local path or an object store URI; the model and the train split are staged locally
    first when remote) and returns the record; float32: nothing (None)."""
    if export == "float32":
        return None
    remote = storage.is_remote(model_dir) or storage.is_remote(examples_dir)
    stage = tempfile.mkdtemp(prefix="gpupipe-compress-", dir=scratch or None) if remote else ""
    try:
        local_model = storage.local_dir(model_dir, os.path.join(stage, "model"))
        local_examples = storage.local_dir(examples_dir, os.path.join(stage, "examples"))
        tflite_path = os.path.join(local_model, TFLITE_FILE)
        with open(tflite_path, "wb") as f:
            f.write(convert(local_model, export))
        record = {"export": export, "tflite_bytes": os.path.getsize(tflite_path), **saved_model_sizes(local_model),
                  "ops": "TFLITE_BUILTINS + SELECT_TF_OPS",
                  "quantization": {"float16": "float16 weights", "int8": "dynamic range (int8 weights)"}[export],
                  "train_check": check_rows(local_model, tflite_path, local_examples)}
        text = json.dumps(record, indent=2)
        if local_model != model_dir:
            storage.upload_file(tflite_path, storage.join(model_dir, TFLITE_FILE))
        storage.write_text(compression_path(model_dir), text)
        print(f"export: {TFLITE_FILE} ({export}) {record['tflite_bytes']:,} bytes, SavedModel variables "
              f"{record['variables_bytes']:,} bytes; on {record['train_check']['rows']} train rows the largest output "
              f"difference is {record['train_check']['max_abs_difference']:.2g}", flush=True)
        return record
    finally:
        if stage:
            shutil.rmtree(stage, ignore_errors=True)
