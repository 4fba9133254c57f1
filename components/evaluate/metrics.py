"""Evaluation metrics by task, on numpy arrays (no TensorFlow, no kfp).

multiclass: accuracy, log loss, per-class precision/recall, confusion matrix;
binary: AUC, PR-AUC (average precision), accuracy, log loss, calibration;
regression: RMSE, MAE.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

# Metrics where smaller is better; every other metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"log_loss", "rmse", "mae", "calibration_error"})
_EPS = 1e-7


def confusion_matrix(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows: true class, columns: predicted class. Labels < 0 (unseen in training) are left out."""
    known = y >= 0
    return np.bincount(y[known] * n_classes + pred[known], minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def multiclass_metrics(y: np.ndarray, p: np.ndarray, classes: List[str]) -> Dict[str, float]:
    pred = p.argmax(axis=1)
    known = y >= 0
    cm = confusion_matrix(y, pred, len(classes))
    metrics = {
        "accuracy": float(np.mean(pred == y)) if len(y) else float("nan"),
        "log_loss": float(-np.mean(np.log(np.clip(p[known, y[known]], _EPS, 1.0)))) if known.any() else float("nan"),
    }
    for i, c in enumerate(classes):
        tp, predicted, actual = cm[i, i], cm[:, i].sum(), cm[i, :].sum()
        metrics[f"precision/{c}"] = float(tp / predicted) if predicted else 0.0
        metrics[f"recall/{c}"] = float(tp / actual) if actual else 0.0
    return metrics


def roc_auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (the Mann-Whitney statistic; ties count one half)."""
    pos, neg = int(y.sum()), int(len(y) - y.sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    sorted_scores = score[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts - 1) / 2.0 + 1
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def average_precision(y: np.ndarray, score: np.ndarray) -> float:
    """PR-AUC as average precision: the mean of precision at each positive's rank."""
    if y.sum() == 0:
        return float("nan")
    order = np.argsort(-score, kind="mergesort")
    hits = y[order]
    precision_at = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float(precision_at[hits == 1].mean())


def roc_curve(y: np.ndarray, score: np.ndarray, points: int = 21) -> Tuple[List[float], List[float], List[float]]:
    """(fpr, tpr, thresholds) at evenly spaced thresholds, for KFP's ClassificationMetrics."""
    thresholds = np.linspace(1.0, 0.0, points)
    pos, neg = max(int(y.sum()), 1), max(int(len(y) - y.sum()), 1)
    tpr = [float(((score >= t) & (y == 1)).sum() / pos) for t in thresholds]
    fpr = [float(((score >= t) & (y == 0)).sum() / neg) for t in thresholds]
    return fpr, tpr, [float(t) for t in thresholds]


def binary_metrics(y: np.ndarray, score: np.ndarray, bins: int = 10) -> Dict[str, float]:
    """`score` is the positive class probability; `y` is 0/1."""
    p = np.clip(score, _EPS, 1 - _EPS)
    edges = np.minimum((score * bins).astype(int), bins - 1)
    ece = sum(abs(score[edges == b].mean() - y[edges == b].mean()) * (edges == b).mean()
              for b in range(bins) if (edges == b).any())
    return {
        "auc": roc_auc(y, score),
        "pr_auc": average_precision(y, score),
        "accuracy": float(np.mean((score >= 0.5) == (y == 1))),
        "log_loss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))),
        "calibration_error": float(ece),  # expected calibration error over `bins` bins
        "calibration": float(score.mean() / y.mean()) if y.mean() > 0 else float("nan"),  # mean prediction / base rate
    }


def regression_metrics(y: np.ndarray, pred: np.ndarray) -> Dict[str, float]:
    err = pred - y
    return {"rmse": float(np.sqrt(np.mean(err ** 2))), "mae": float(np.mean(np.abs(err)))}


def classification_metrics(y: np.ndarray, p: np.ndarray, classes: List[str]) -> Dict[str, float]:
    """Multiclass metrics, plus the binary ones (positive class = classes[1]) for two classes."""
    metrics = multiclass_metrics(y, p, classes)
    if len(classes) == 2:
        known = y >= 0
        metrics.update({k: v for k, v in binary_metrics(y[known].astype(int), p[known, 1]).items()
                        if k != "accuracy"})
    return metrics
