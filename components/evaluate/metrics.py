"""Evaluation metrics by task, on numpy arrays (no TensorFlow, no kfp), computed by
scikit-learn; the counts (the confusion matrix, accuracy, per-class precision and recall)
by numpy's bincount, as scikit-learn defines them: its input checks sort the labels again
for each metric, 0.5 s a sort at 2M eval rows on 2 cores, and took 3.2 of a binary
report's 8.3 s there (docs/benchmarks.md, "The linear start beside TensorFlow's import").

multiclass: accuracy, log loss, per-class precision/recall, top-5 accuracy (more than 5
classes), confusion matrix;
binary: AUC, PR-AUC (average precision), accuracy, log loss, calibration;
regression: RMSE, MAE.

A label unseen in training (index -1) counts as a wrong prediction for accuracy and is
left out of the metrics that need a class (log loss, precision, recall, the confusion
matrix, the binary metrics).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
from sklearn import metrics as sk

# Metrics where smaller is better; every other metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"log_loss", "rmse", "mae", "calibration_error"})
ROC_POINTS = 201
TOP_K = 5  # top-5 accuracy, with more than 5 classes  # at most this many points of the ROC curve go to the Kubeflow UI


def class_indices(y: np.ndarray, n_classes: int) -> np.ndarray:
    """Known labels' class indices in the smallest integer type that holds them: scikit-learn
    checks the labels' type with np.unique, a sort of every row for each metric, and at 2M
    eval rows a sort of int8 takes 0.04 s against 0.46 for int64 (docs/benchmarks.md,
    "Ingest's fifth round")."""
    return np.asarray(y).astype(np.min_scalar_type(-max(n_classes, 1)))


def confusion_matrix(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows: true class, columns: predicted class (sklearn.metrics.confusion_matrix with
    labels 0..n_classes - 1). Labels < 0 (unseen in training) are left out."""
    known = y >= 0
    cells = np.asarray(y)[known].astype(np.int64) * n_classes + np.asarray(pred)[known].astype(np.int64)
    return np.bincount(cells, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def multiclass_metrics(y: np.ndarray, p: np.ndarray, classes: List[str], log_loss: bool = True) -> Dict[str, float]:
    """`log_loss` False: left out (two classes: binary_metrics' is the one reported)."""
    pred = p.argmax(axis=1)
    known = y >= 0
    labels, truth = list(range(len(classes))), class_indices(y[known], len(classes))
    metrics = {"accuracy": float(np.mean(y == pred)) if len(y) else float("nan")}
    if log_loss:
        metrics["log_loss"] = float(sk.log_loss(truth, p[known], labels=labels)) if known.any() else float("nan")
    # precision_recall_fscore_support's (zero_division=0), from the confusion matrix
    cm = confusion_matrix(y, pred, len(classes))
    hits, predicted, true = np.diag(cm), cm.sum(axis=0), cm.sum(axis=1)
    precision = np.divide(hits, predicted, out=np.zeros(len(classes)), where=predicted > 0)
    recall = np.divide(hits, true, out=np.zeros(len(classes)), where=true > 0)
    for i, c in enumerate(classes):
        metrics[f"precision/{c}"] = float(precision[i])
        metrics[f"recall/{c}"] = float(recall[i])
    if len(classes) > TOP_K and known.any():  # the true class among the K most probable
        metrics[f"top_{TOP_K}_accuracy"] = float(sk.top_k_accuracy_score(truth, p[known], k=TOP_K, labels=labels))
    return metrics


def roc_auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve; nan when one class is absent."""
    return float(sk.roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


def average_precision(y: np.ndarray, score: np.ndarray) -> float:
    """PR-AUC as average precision (ties at one threshold count together); nan without positives."""
    return float(sk.average_precision_score(y, score)) if y.sum() else float("nan")


def _thinned(*arrays) -> List[List[float]]:
    """At most ROC_POINTS points of a curve, evenly picked."""
    if len(arrays[0]) > ROC_POINTS:
        keep = np.unique(np.linspace(0, len(arrays[0]) - 1, ROC_POINTS).round().astype(int))
        arrays = [a[keep] for a in arrays]
    return [[float(v) for v in a] for a in arrays]


def roc_curve(y: np.ndarray, score: np.ndarray) -> Tuple[List[float], List[float], List[float]]:
    """(fpr, tpr, thresholds) at the scores' own thresholds (at most ROC_POINTS of them, evenly
    picked), for KFP's ClassificationMetrics. The first threshold is 1.0 (nothing positive)."""
    fpr, tpr, thresholds = sk.roc_curve(y, score)
    return tuple(_thinned(fpr, tpr, np.minimum(thresholds, 1.0)))  # scikit-learn's first threshold is +inf


def pr_curve(y: np.ndarray, score: np.ndarray) -> Tuple[List[float], List[float], List[float]]:
    """(precision, recall, thresholds) at the scores' own thresholds (at most ROC_POINTS of
    them, evenly picked), for the run report; the last point is recall 0, precision 1."""
    precision, recall, thresholds = sk.precision_recall_curve(y, score)
    # scikit-learn gives one threshold fewer than points
    return tuple(_thinned(precision, recall, np.append(thresholds, 1.0)))


@dataclass
class Curves:
    """A binary scoring's ROC and precision-recall curves (roc_curve's and pr_curve's) and the
    areas scikit-learn's roc_auc_score and average_precision_score compute from the same
    curves: each curve computed once for its area and its points."""

    auc: float
    pr_auc: float
    roc: Dict[str, List[float]]  # fpr, tpr, thresholds
    pr: Dict[str, List[float]]  # precision, recall, thresholds


def binary_curves(y: np.ndarray, score: np.ndarray) -> Curves:
    # The rows in descending order of score, sorted once: each scikit-learn curve sorts its
    # input again (a stable sort, which on rows already in that order is nearly free) and
    # neither curve depends on the rows' order. At 2M rows the two curves took 1.06 s, now
    # 0.61 s with this sort (docs/benchmarks.md, "Evaluate's curves from one sort").
    order = np.argsort(score, kind="stable")[::-1]
    y, score = np.asarray(y)[order], np.asarray(score)[order]
    fpr, tpr, thresholds = sk.roc_curve(y, score)
    auc = float(sk.auc(fpr, tpr)) if 0 < y.sum() < len(y) else float("nan")
    precision, recall, cuts = sk.precision_recall_curve(y, score)
    # average_precision_score's step integral (its last precision is 1)
    pr_auc = float(max(0.0, -np.sum(np.diff(recall) * precision[:-1]))) if y.sum() else float("nan")
    roc = _thinned(fpr, tpr, np.minimum(thresholds, 1.0))
    pr = _thinned(precision, recall, np.append(cuts, 1.0))
    return Curves(auc, pr_auc, dict(zip(("fpr", "tpr", "thresholds"), roc)),
                  dict(zip(("precision", "recall", "thresholds"), pr)))


def binary_metrics(y: np.ndarray, score: np.ndarray, bins: int = 10, curves: Optional[Curves] = None,
                   accuracy: bool = True) -> Dict[str, float]:
    """`score` is the positive class probability; `y` is 0/1; `curves`: binary_curves(y, score)
    when already computed."""
    edges = np.minimum((score * bins).astype(int), bins - 1)
    ece = sum(abs(score[edges == b].mean() - y[edges == b].mean()) * (edges == b).mean()
              for b in range(bins) if (edges == b).any())
    curves = curves if curves is not None else binary_curves(y, score)
    metrics = {"auc": curves.auc, "pr_auc": curves.pr_auc}
    if accuracy:
        metrics["accuracy"] = float(sk.accuracy_score(y, score >= 0.5))
    return {**metrics,
            "log_loss": float(sk.log_loss(y, score, labels=[0, 1])),
            "calibration_error": float(ece),  # expected calibration error over `bins` bins
            # mean prediction / base rate
            "calibration": float(score.mean() / y.mean()) if y.mean() > 0 else float("nan")}


def regression_metrics(y: np.ndarray, pred: np.ndarray) -> Dict[str, float]:
    return {"rmse": float(np.sqrt(sk.mean_squared_error(y, pred))), "mae": float(sk.mean_absolute_error(y, pred))}


def classification_metrics(y: np.ndarray, p: np.ndarray, classes: List[str]) -> Dict[str, float]:
    """Multiclass metrics, plus the binary ones (positive class = classes[1]) for two classes."""
    return classification_report(y, p, classes)[0]


def classification_report(y: np.ndarray, p: np.ndarray,
                          classes: List[str]) -> Tuple[Dict[str, float], Optional[Curves]]:
    """(classification_metrics, and for two classes the curves its AUC and PR-AUC come from)."""
    binary = len(classes) == 2
    metrics = multiclass_metrics(y, p, classes, log_loss=not binary)
    if not binary:
        return metrics, None
    known = y >= 0
    truth, score = class_indices(y[known], 2), p[known, 1]
    curves = binary_curves(truth, score)
    scores = binary_metrics(truth, score, curves=curves, accuracy=False)
    first = {"accuracy": metrics.pop("accuracy"), "log_loss": scores.pop("log_loss")}  # the order they always had
    return {**first, **metrics, **scores}, curves


def constant_answer_metrics(counts: np.ndarray, rows: int, shares: np.ndarray) -> Dict[str, float]:
    """The metrics above of one answer for every row, the probabilities `shares`, from the
    known labels' `counts` per class and the eval rows (`rows`, unseen labels included): a
    constant answer's figures depend on the label counts alone, so no [rows, classes]
    matrix is built (at 1.98M eval rows scoring one took 270 MB more).
    accuracy: the top class's rows over every row; log loss: the labels' cross-entropy with
    the shares, clipped as scikit-learn clips; two classes: AUC 0.5 (every row tied) and
    PR-AUC the positive share (average precision at one threshold)."""
    known = counts.sum()
    metrics = {"accuracy": float(counts[int(np.argmax(shares))] / rows) if rows else float("nan")}
    eps = np.finfo(np.float64).eps
    with np.errstate(divide="ignore", invalid="ignore"):
        metrics["log_loss"] = (float(-np.sum(np.where(counts > 0, counts * np.log(np.clip(shares, eps, 1 - eps)), 0.0))
                                     / known) if known else float("nan"))
    if len(counts) == 2:
        metrics["auc"] = 0.5 if counts.all() else float("nan")
        metrics["pr_auc"] = float(counts[1] / known) if counts[1] else float("nan")
    return metrics
