"""Evaluation metrics by task, on numpy arrays (no TensorFlow, no kfp), computed by
scikit-learn.

multiclass: accuracy, log loss, per-class precision/recall, top-5 accuracy (more than 5
classes), confusion matrix;
binary: AUC, PR-AUC (average precision), accuracy, log loss, calibration;
regression: RMSE, MAE.

A label unseen in training (index -1) counts as a wrong prediction for accuracy and is
left out of the metrics that need a class (log loss, precision, recall, the confusion
matrix, the binary metrics).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
from sklearn import metrics as sk

# Metrics where smaller is better; every other metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"log_loss", "rmse", "mae", "calibration_error"})
ROC_POINTS = 201
TOP_K = 5  # top-5 accuracy, with more than 5 classes  # at most this many points of the ROC curve go to the Kubeflow UI


def confusion_matrix(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows: true class, columns: predicted class. Labels < 0 (unseen in training) are left out."""
    known = y >= 0
    return sk.confusion_matrix(y[known], pred[known], labels=list(range(n_classes)))


def multiclass_metrics(y: np.ndarray, p: np.ndarray, classes: List[str]) -> Dict[str, float]:
    pred = p.argmax(axis=1)
    known = y >= 0
    labels = list(range(len(classes)))
    metrics = {
        "accuracy": float(sk.accuracy_score(y, pred)) if len(y) else float("nan"),
        "log_loss": float(sk.log_loss(y[known], p[known], labels=labels)) if known.any() else float("nan"),
    }
    precision = sk.precision_score(y[known], pred[known], labels=labels, average=None, zero_division=0)
    recall = sk.recall_score(y[known], pred[known], labels=labels, average=None, zero_division=0)
    for i, c in enumerate(classes):
        metrics[f"precision/{c}"] = float(precision[i])
        metrics[f"recall/{c}"] = float(recall[i])
    if len(classes) > TOP_K and known.any():  # the true class among the K most probable
        metrics[f"top_{TOP_K}_accuracy"] = float(sk.top_k_accuracy_score(y[known], p[known], k=TOP_K, labels=labels))
    return metrics


def roc_auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve; nan when one class is absent."""
    return float(sk.roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


def average_precision(y: np.ndarray, score: np.ndarray) -> float:
    """PR-AUC as average precision (ties at one threshold count together); nan without positives."""
    return float(sk.average_precision_score(y, score)) if y.sum() else float("nan")


def roc_curve(y: np.ndarray, score: np.ndarray) -> Tuple[List[float], List[float], List[float]]:
    """(fpr, tpr, thresholds) at the scores' own thresholds (at most ROC_POINTS of them, evenly
    picked), for KFP's ClassificationMetrics. The first threshold is 1.0 (nothing positive)."""
    fpr, tpr, thresholds = sk.roc_curve(y, score)
    thresholds = np.minimum(thresholds, 1.0)  # scikit-learn's first threshold is +inf
    if len(fpr) > ROC_POINTS:
        keep = np.unique(np.linspace(0, len(fpr) - 1, ROC_POINTS).round().astype(int))
        fpr, tpr, thresholds = fpr[keep], tpr[keep], thresholds[keep]
    return [float(v) for v in fpr], [float(v) for v in tpr], [float(v) for v in thresholds]


def pr_curve(y: np.ndarray, score: np.ndarray) -> Tuple[List[float], List[float], List[float]]:
    """(precision, recall, thresholds) at the scores' own thresholds (at most ROC_POINTS of
    them, evenly picked), for the run report; the last point is recall 0, precision 1."""
    precision, recall, thresholds = sk.precision_recall_curve(y, score)
    thresholds = np.append(thresholds, 1.0)  # scikit-learn gives one threshold fewer than points
    if len(precision) > ROC_POINTS:
        keep = np.unique(np.linspace(0, len(precision) - 1, ROC_POINTS).round().astype(int))
        precision, recall, thresholds = precision[keep], recall[keep], thresholds[keep]
    return [float(v) for v in precision], [float(v) for v in recall], [float(v) for v in thresholds]


def binary_metrics(y: np.ndarray, score: np.ndarray, bins: int = 10) -> Dict[str, float]:
    """`score` is the positive class probability; `y` is 0/1."""
    edges = np.minimum((score * bins).astype(int), bins - 1)
    ece = sum(abs(score[edges == b].mean() - y[edges == b].mean()) * (edges == b).mean()
              for b in range(bins) if (edges == b).any())
    return {
        "auc": roc_auc(y, score),
        "pr_auc": average_precision(y, score),
        "accuracy": float(sk.accuracy_score(y, score >= 0.5)),
        "log_loss": float(sk.log_loss(y, score, labels=[0, 1])),
        "calibration_error": float(ece),  # expected calibration error over `bins` bins
        "calibration": float(score.mean() / y.mean()) if y.mean() > 0 else float("nan"),  # mean prediction / base rate
    }


def regression_metrics(y: np.ndarray, pred: np.ndarray) -> Dict[str, float]:
    return {"rmse": float(np.sqrt(sk.mean_squared_error(y, pred))), "mae": float(sk.mean_absolute_error(y, pred))}


def classification_metrics(y: np.ndarray, p: np.ndarray, classes: List[str]) -> Dict[str, float]:
    """Multiclass metrics, plus the binary ones (positive class = classes[1]) for two classes."""
    metrics = multiclass_metrics(y, p, classes)
    if len(classes) == 2:
        known = y >= 0
        metrics.update({k: v for k, v in binary_metrics(y[known].astype(int), p[known, 1]).items()
                        if k != "accuracy"})
    return metrics
