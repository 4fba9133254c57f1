"""Evaluate: score the exported SavedModel on the eval split (through its serialized
tf.Example signature, as TF Serving would) and bless it when the metric meets its threshold."""
from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List

import numpy as np

from components import names
from components.errors import GpupipeError, reports_errors
from components.ingest.logic import examples_pattern

SCORE_BATCH = 1024


@dataclass
class Evaluation:
    metrics: Dict[str, float]
    classes: List[str]
    confusion_matrix: List[List[int]]  # rows: true class, columns: predicted class
    per_class: Dict[str, Dict[str, float]]


@dataclass
class Blessing:
    blessed: bool
    metric: str
    value: float
    threshold: float
    reasons: List[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def score_model(model_dir: str, examples_dir: str) -> Evaluation:
    """Accuracy, log loss, confusion matrix and per-class precision/recall on the eval split."""
    import tensorflow as tf

    from components.train.logic import load_feature_specs

    specs = load_feature_specs(model_dir)
    serve = tf.saved_model.load(model_dir).signatures[names.EXAMPLES_SIGNATURE]
    files = sorted(glob.glob(examples_pattern(examples_dir, names.EVAL_SPLIT)))
    if not files:
        raise GpupipeError(f"examples: no eval shards under {examples_dir}; run ingest first")
    label_spec = {specs.label: tf.io.FixedLenFeature([], tf.string)}
    index = {c: i for i, c in enumerate(specs.classes)}
    probs, labels = [], []
    for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(SCORE_BATCH):
        probs.append(serve(examples=batch)[names.PROBABILITIES].numpy())
        raw = tf.io.parse_example(batch, label_spec)[specs.label].numpy()
        labels.append(np.array([index.get(v.decode("utf-8"), -1) for v in raw]))
    p, y = np.concatenate(probs), np.concatenate(labels)
    known = y >= 0  # a label unseen in training counts as wrong, and is left out of log loss
    pred = p.argmax(axis=1)
    n = len(specs.classes)
    cm = np.zeros((n, n), dtype=int)
    for t, q in zip(y[known], pred[known]):
        cm[t, q] += 1
    per_class = {}
    for i, c in enumerate(specs.classes):
        tp, col, row = cm[i, i], cm[:, i].sum(), cm[i, :].sum()
        per_class[c] = {"precision": float(tp / col) if col else 0.0, "recall": float(tp / row) if row else 0.0}
    eps = 1e-7
    metrics = {
        "accuracy": float(np.mean(pred == y)),
        "log_loss": float(-np.mean(np.log(np.clip(p[known, y[known]], eps, 1.0)))) if known.any() else float("nan"),
        "examples": int(len(y)),
    }
    return Evaluation(metrics=metrics, classes=list(specs.classes), confusion_matrix=cm.tolist(), per_class=per_class)


def bless_model(evaluation: Evaluation, metric: str, threshold: float) -> Blessing:
    """Blessed when `metric` >= `threshold`; the reasons say why either way."""
    if metric not in evaluation.metrics:
        raise GpupipeError(f"evaluation.metric: '{metric}' is not computed; use one of {', '.join(evaluation.metrics)}")
    value = evaluation.metrics[metric]
    blessed = bool(value >= threshold)
    reason = (f"{metric} {value:.4f} meets threshold {threshold:.4f}" if blessed
              else f"{metric} {value:.4f} is below threshold {threshold:.4f}")
    return Blessing(blessed=blessed, metric=metric, value=value, threshold=threshold, reasons=[reason])


def write_blessing(blessing: Blessing, blessing_dir: str) -> None:
    os.makedirs(blessing_dir, exist_ok=True)
    with open(os.path.join(blessing_dir, names.BLESSING_FILE), "w", encoding="utf-8") as f:
        json.dump(blessing.to_dict(), f, indent=2)


def read_blessing(blessing_dir: str) -> Blessing:
    path = os.path.join(blessing_dir, names.BLESSING_FILE)
    if not os.path.isfile(path):
        raise GpupipeError(f"blessing: {path} not found; run evaluate before push")
    with open(path, encoding="utf-8") as f:
        return Blessing(**json.load(f))


@reports_errors("evaluate")
def run_evaluate(model_dir: str, examples_dir: str, blessing_dir: str, metric: str, threshold: float
                 ) -> tuple[Evaluation, Blessing]:
    """The evaluate step as the component calls it: scores, blesses, writes the blessing."""
    evaluation = score_model(model_dir, examples_dir)
    blessing = bless_model(evaluation, metric, threshold)
    write_blessing(blessing, blessing_dir)
    return evaluation, blessing
