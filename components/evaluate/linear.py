"""The linear baseline beside every evaluation: scikit-learn's LogisticRegression
(classification) or Ridge (regression), trained on the same train split and features as
the candidate and scored on the same eval split by the same metric functions.

Features as the examples artifact's manifest declares them: numeric ones imputed with the
train median (plus a missing indicator) and standardised; categorical ones one-hot, the
`LINEAR_MAX_CATEGORIES` most frequent values of each (the rest, and values unseen in
training, share one column). At most about `LINEAR_MAX_TRAIN_ROWS` train rows, every k-th
one across the split, so the baseline's cost stays bounded on a large table (the
click-through table's 160k train rows: about 4 s; see docs/quality.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from components.contracts import names
from components.contracts.examples import read_manifest, split_files

LINEAR_MAX_TRAIN_ROWS = 50_000
LINEAR_MAX_CATEGORIES = 100
_READ_BATCH = 4096


@dataclass
class LinearBaseline:
    """The baseline's name (what it is) and its labels and predictions on the eval split,
    in the candidate's class order (labels: class index, -1 unseen in training)."""

    name: str
    labels: np.ndarray
    predictions: np.ndarray  # [rows, classes] probabilities, or [rows] for regression
    train_rows: int


def _read(examples_dir: str, split: str, label: str, kinds: Dict[str, str], regression: bool,
          stride: int = 1) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """Every `stride`-th example of a split as columns: numeric float (NaN when missing),
    categorical bytes (b"" when missing); and the labels (text for classes)."""
    import tensorflow as tf

    spec = {label: tf.io.FixedLenFeature([], tf.float32 if regression else tf.string)}
    for name, kind in kinds.items():
        spec[name] = (tf.io.FixedLenFeature([], tf.float32, default_value=math.nan) if kind == "numeric" else
                      tf.io.FixedLenFeature([], tf.string, default_value=""))
    dataset = tf.data.TFRecordDataset(split_files(examples_dir, split), compression_type="GZIP")
    if stride > 1:
        dataset = dataset.shard(stride, 0)
    columns: Dict[str, List[np.ndarray]] = {name: [] for name in spec}
    for batch in dataset.batch(_READ_BATCH):
        parsed = tf.io.parse_example(batch, spec)
        for name in spec:
            columns[name].append(parsed[name].numpy())
    out = {name: np.concatenate(parts) if parts else np.empty(0) for name, parts in columns.items()}
    y = out.pop(label)
    if not regression:
        values, inverse = np.unique(y, return_inverse=True)
        y = np.array([v.decode("utf-8") for v in values], dtype=object)[inverse]
    return out, y


def _design(train: Dict[str, np.ndarray], evals: Dict[str, np.ndarray], numeric: List[str], categorical: List[str]):
    """(train matrix, eval matrix), sparse: per numeric feature the value imputed with the
    train median and standardised, and a missing indicator; per categorical feature one
    column for each of its LINEAR_MAX_CATEGORIES most frequent train values and one for
    the rest (and values unseen in training)."""
    import pandas as pd
    from scipy import sparse

    blocks = ([], [])
    for name in numeric:
        values = train[name].astype(np.float64)
        median = float(np.nanmedian(values)) if np.isfinite(values).any() else 0.0
        filled = np.where(np.isnan(values), median, values)
        mean, std = filled.mean(), filled.std() or 1.0
        for data, out in zip((train, evals), blocks):
            x = data[name].astype(np.float64)
            missing = np.isnan(x)
            out.append(sparse.csr_matrix(np.column_stack([(np.where(missing, median, x) - mean) / std,
                                                          missing.astype(np.float64)])))
    for name in categorical:
        top = pd.Series(train[name]).value_counts().index[:LINEAR_MAX_CATEGORIES]
        for data, out in zip((train, evals), blocks):
            codes = pd.Categorical(data[name], categories=top).codes.astype(np.int64)
            codes = np.where(codes < 0, len(top), codes)
            out.append(sparse.csr_matrix((np.ones(len(codes)), (np.arange(len(codes)), codes)),
                                         shape=(len(codes), len(top) + 1)))
    return sparse.hstack(blocks[0]).tocsr(), sparse.hstack(blocks[1]).tocsr()


def linear_baseline(examples_dir: str, task: str, classes: List[str]) -> Tuple[Optional[LinearBaseline], str]:
    """(the baseline, "") or (None, why there is none): no manifest (examples from
    elsewhere), or one class in the train split."""
    from sklearn.linear_model import LogisticRegression, Ridge

    manifest = read_manifest(examples_dir)
    if manifest is None or not manifest.get("features"):
        return None, "the examples have no manifest naming their features"
    regression = task == "regression"
    label, kinds = manifest["label"], dict(manifest["features"])
    numeric = [n for n, k in kinds.items() if k == "numeric"]
    categorical = [n for n, k in kinds.items() if k != "numeric"]
    train_rows = int(manifest.get("rows", {}).get(names.TRAIN_SPLIT, 0))
    stride = max(1, math.ceil(train_rows / LINEAR_MAX_TRAIN_ROWS))
    x_train, y_train = _read(examples_dir, names.TRAIN_SPLIT, label, kinds, regression, stride)
    x_eval, y_eval = _read(examples_dir, names.EVAL_SPLIT, label, kinds, regression)
    if not regression and len(set(y_train)) < 2:
        return None, "the train split holds one class"
    train_matrix, eval_matrix = _design(x_train, x_eval, numeric, categorical)
    if regression:
        model = Ridge(alpha=1.0).fit(train_matrix, y_train.astype(np.float64))
        return LinearBaseline("Ridge", y_eval.astype(np.float64), model.predict(eval_matrix),
                              len(y_train)), ""
    model = LogisticRegression(max_iter=2000).fit(train_matrix, y_train)
    found = model.predict_proba(eval_matrix)
    probabilities = np.zeros((len(y_eval), len(classes)))
    learnt = {c: i for i, c in enumerate(model.classes_)}
    for i, c in enumerate(classes):
        if c in learnt:
            probabilities[:, i] = found[:, learnt[c]]
    index = {c: i for i, c in enumerate(classes)}
    labels = np.array([index.get(v, -1) for v in y_eval])
    return LinearBaseline("LogisticRegression", labels, probabilities, len(y_train)), ""
