"""The linear baseline beside every evaluation: scikit-learn's LogisticRegression
(classification) or Ridge (regression), trained on the same train split and features as
the candidate and scored on the same eval split by the same metric functions.

Features as the examples artifact's manifest declares them, in the shared linear design
(components/contracts/linear.py, the one the default model starts from): numeric ones
imputed with the train median (plus a missing indicator) and standardised; categorical
ones one-hot, the `LINEAR_MAX_CATEGORIES` most frequent values of each (the rest, and
values unseen in training, share one column). At most about `LINEAR_MAX_TRAIN_ROWS` train
rows, every k-th one across the split, so the baseline's cost stays bounded on a large
table (the click-through table's 160k train rows: about 4 s; see docs/quality.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from components.contracts import names
from components.contracts.examples import read_manifest
from components.contracts.linear import (LINEAR_MAX_TRAIN_ROWS, design_matrix, fit_design, fit_linear, read_linear_fit,
                                         read_split)
from components.kinds import kind_named
from components.kinds.base import LINEAR_CATEGORICAL, LINEAR_NUMERIC


@dataclass
class LinearBaseline:
    """The baseline's name (what it is) and its labels and predictions on the eval split,
    in the candidate's class order (labels: class index, -1 unseen in training)."""

    name: str
    labels: np.ndarray
    predictions: np.ndarray  # [rows, classes] probabilities, or [rows] for regression
    train_rows: int


@dataclass
class BaselineInput:
    """What the baseline reads of each row: the label and its features' columns."""

    label: str
    kinds: Dict[str, str]  # feature -> LINEAR_NUMERIC or LINEAR_CATEGORICAL
    train_rows: int
    fingerprint: str = ""  # the examples' source's (the manifest's)

    def source(self) -> dict:
        """What a fit on these examples was read from (contracts/linear.py: write_linear_fit)."""
        return {"examples": self.fingerprint, "label": self.label, "kinds": dict(self.kinds),
                "train_rows": self.train_rows}

    def of(self, kind: str) -> List[str]:
        return [n for n, k in self.kinds.items() if k == kind]


def baseline_input(examples_dir: str) -> Tuple[Optional[BaselineInput], str]:
    """(what the baseline reads, "") or (None, why there is none): no manifest (examples
    from elsewhere), or no feature of a kind a linear model takes."""
    manifest = read_manifest(examples_dir)
    if manifest is None or not manifest.get("features"):
        return None, "the examples have no manifest naming their features"
    # How the design takes each feature: its kind's `linear` (a kind a linear model cannot take is left out).
    kinds = {n: kind_named(k).linear for n, k in manifest["features"].items() if kind_named(k).linear}
    if not kinds:
        return None, "no feature of a kind a linear model takes"
    return BaselineInput(manifest["label"], kinds, int(manifest.get("rows", {}).get(names.TRAIN_SPLIT, 0)),
                         str(manifest.get("source_fingerprint") or "")), ""


def saved_fit(model_dir: str, found: BaselineInput, task: str):
    """The model's linear start (contracts/linear.py: read_linear_fit) when it is the fit this
    baseline would make: classification (a regression's start learns a scaled target), read
    from the same examples, label, features and train rows (so the same rows, the same
    design, the same LogisticRegression); else None."""
    saved = read_linear_fit(model_dir) if task != "regression" and found.fingerprint else None
    return saved if saved is not None and saved[2] == found.source() else None


def read_train(examples_dir: str, found: BaselineInput, regression: bool) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """The train rows the baseline is fitted on: every k-th one past LINEAR_MAX_TRAIN_ROWS."""
    stride = max(1, math.ceil(found.train_rows / LINEAR_MAX_TRAIN_ROWS))
    return read_split(examples_dir, names.TRAIN_SPLIT, found.label, found.kinds, regression, stride)


def linear_baseline(examples_dir: str, task: str, classes: List[str],
                    eval_columns: Optional[Dict[str, np.ndarray]] = None, eval_labels: Optional[np.ndarray] = None, train=None) -> Tuple[Optional[LinearBaseline], str]:
    """(the baseline, "") or (None, why there is none: see baseline_input; or one class in
    the train split). `eval_columns` and `eval_labels` (class indices in `classes`' order, or
    the target): the eval rows as the candidate's scoring pass read them (else the eval split
    is read here); `train`: read_train's rows (else read here), or saved_fit's (the fit itself:
    then `eval_columns` must be given)."""
    found, why = baseline_input(examples_dir)
    if found is None:
        return None, why
    regression = task == "regression"
    if isinstance(train, tuple) and len(train) == 4:  # saved_fit's: the linear start is this baseline
        design, fit, _, fit_rows = train
        return LinearBaseline(fit.name, np.asarray(eval_labels), fit.predict(design_matrix(design, eval_columns)),
                              fit_rows), ""
    x_train, y_train = train if train is not None else read_train(examples_dir, found, regression)
    if eval_columns is None:
        eval_columns, y_eval = read_split(examples_dir, names.EVAL_SPLIT, found.label, found.kinds, regression)
        if not regression:
            index = {c: i for i, c in enumerate(classes)}
            eval_labels = np.array([index.get(v, -1) for v in y_eval])
        else:
            eval_labels = y_eval.astype(np.float64)
    if not regression and len(set(y_train)) < 2:
        return None, "the train split holds one class"
    design = fit_design(x_train, found.of(LINEAR_NUMERIC), found.of(LINEAR_CATEGORICAL))
    fit = fit_linear(design_matrix(design, x_train), y_train, regression, classes)
    predictions = fit.predict(design_matrix(design, eval_columns))
    return LinearBaseline(fit.name, np.asarray(eval_labels), predictions, len(y_train)), ""
