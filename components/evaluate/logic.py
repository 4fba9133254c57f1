"""Evaluate: score the candidate SavedModel on the eval split (through its serialized
tf.Example signature, as TF Serving would), score the model now served on the same rows,
and bless the candidate as TFMA does: value thresholds, and change thresholds against
the served baseline (skipped on the first run, when nothing is served). With
`must_beat_trivial`, the candidate must also beat what a model that learnt nothing (the
best constant answer) scores on the same eval rows, computed here at run time."""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from components.contracts import names
from components.contracts.blessing import Blessing, write_blessing
from components.contracts.errors import GpupipeError, reports_errors
from components.evaluate.compressed import check_compressed, render_forms
from components.evaluate.scoring import Predictions, predict, slice_metrics  # noqa: F401  (Predictions: the API)
from components.evaluate.metrics import (LOWER_IS_BETTER, classification_report, constant_answer_metrics,
                                        confusion_matrix, regression_metrics)
from components.evaluate.settings import EvaluationSettings

EVALUATION_FILE = names.EVALUATION_FILE


@dataclass
class Evaluation:
    metrics: Dict[str, float]
    classes: List[str]
    confusion_matrix: List[List[int]]  # rows: true class, columns: predicted class
    slices: Dict[str, Dict[str, Dict[str, float]]] = field(default_factory=dict)  # feature -> value -> metrics
    roc: Optional[Dict[str, List[float]]] = None  # binary only: fpr, tpr, thresholds
    pr: Optional[Dict[str, List[float]]] = None  # binary only: precision, recall, thresholds
    trivial: Optional[Dict[str, float]] = None  # what a model that learnt nothing scores on the same rows
    linear: Optional[Dict[str, float]] = None  # the linear baseline's metrics on the same eval split
    linear_model: str = ""  # which: LogisticRegression or Ridge (or why there is none)
    misclassified: List[dict] = field(default_factory=list)  # image models: the mistakes' files (misclassified.py)
    compressed: Optional[dict] = None  # serving.export float16/int8: both forms' sizes and metrics (compressed.py)
    # where run_evaluate's wall time went: model_load (the first batches read meanwhile; and the
    # baseline's fit, when fitted here), scoring_pass (the eval split read, parsed and scored by
    # the model and the baseline once; and its CPU seconds, every thread's: scoring_pass_cpu),
    # imports (TensorFlow's, when the process has not imported it yet), linear_baseline (the
    # rest of it: its fit's reading, its metrics), metrics (the candidate's and the model that
    # learnt nothing's), total (run_evaluate's: the process's start and the step's module
    # imports are not in it)
    seconds: Dict[str, float] = field(default_factory=dict)

    @property
    def per_class(self) -> Dict[str, Dict[str, float]]:
        return {c: {"precision": self.metrics[f"precision/{c}"], "recall": self.metrics[f"recall/{c}"]}
                for c in self.classes}


def evaluate_predictions(pred: Predictions) -> Evaluation:
    """Overall metrics, confusion matrix, per-slice metrics and (two classes) the ROC and
    precision-recall curves; RMSE and MAE (overall and per slice) for regression."""
    y, p = pred.labels, pred.probabilities
    if pred.task == "regression":
        metrics = {**regression_metrics(y, p), "examples": int(len(y))}
        slices = {feature: slice_metrics(y, p, values, True) for feature, values in pred.slice_values.items()}
        return Evaluation(metrics=metrics, classes=[], confusion_matrix=[], slices=slices)
    metrics, curves = classification_report(y, p, pred.classes)
    metrics["examples"] = int(len(y))
    slices = {feature: slice_metrics(y, p, values, False) for feature, values in pred.slice_values.items()}
    roc, pr = (curves.roc, curves.pr) if curves is not None else (None, None)
    cm = confusion_matrix(y, p.argmax(axis=1), len(pred.classes))
    return Evaluation(metrics=metrics, classes=pred.classes, confusion_matrix=cm.tolist(), slices=slices, roc=roc,
                      pr=pr)


def score_model(model_dir: str, examples_dir: str, slices: Optional[List[str]] = None) -> Evaluation:
    return evaluate_predictions(predict(model_dir, examples_dir, slices or []))


@dataclass
class Trivial:
    """What a model that learnt nothing scores on the eval split: `metrics` by the same
    metric functions as the candidate's, `answers` says what it answered for each."""

    metrics: Dict[str, float]
    answers: Dict[str, str]


def trivial_scores(pred: Predictions) -> Trivial:
    """The best constant answer on these rows, scored by the candidate's own metric
    functions: classification, the eval split's class shares as probabilities for every
    row (accuracy: always the most frequent class; AUC 0.5; PR-AUC the positive share; log
    loss their entropy); regression, the mean (rmse) and the median (mae) of the labels."""
    y = pred.labels
    if pred.task == "regression":
        mean, median = float(np.mean(y)), float(np.median(y))
        metrics = {"rmse": regression_metrics(y, np.full(len(y), mean))["rmse"],
                   "mae": regression_metrics(y, np.full(len(y), median))["mae"]}
        return Trivial(metrics, {"rmse": f"always predicting the mean, {mean:.4g}",
                                 "mae": f"always predicting the median, {median:.4g}"})
    known = y[y >= 0]
    counts = np.bincount(known, minlength=len(pred.classes)).astype(float)
    shares = counts / counts.sum() if counts.sum() else np.full(len(pred.classes), 1 / len(pred.classes))
    metrics = constant_answer_metrics(counts, len(y), shares)
    top = pred.classes[int(np.argmax(shares))]
    share_text = ", ".join(f"{c} {v:.2f}" for c, v in zip(pred.classes, shares))
    answers = {"accuracy": f"always answering {top!r}, the most frequent class",
               "log_loss": f"the class shares for every row ({share_text})"}
    if len(pred.classes) == 2:
        answers.update({"auc": "the same score for every row", "pr_auc": "the same score for every row"})
    return Trivial({k: float(v) for k, v in metrics.items() if k in answers}, answers)


def _check_value(metric: str, value: float, lower: Optional[float], upper: Optional[float]) -> List[str]:
    failures = []
    if lower is not None and not value >= lower:
        failures.append(f"{metric} {value:.4f} is below threshold {lower:.4f}")
    if upper is not None and not value <= upper:
        failures.append(f"{metric} {value:.4f} is above threshold {upper:.4f}")
    return failures


def _check_change(metric: str, value: float, baseline: float, version: int, change: dict) -> List[str]:
    lower_better = metric in LOWER_IS_BETTER
    diff = value - baseline
    failures = []
    absolute, relative = change.get("absolute"), change.get("relative")
    worse = "worse" if (diff > 0) == lower_better and diff != 0 else "better"
    if absolute is not None and not (diff <= absolute if lower_better else diff >= absolute):
        failures.append(f"{metric} {value:.4f} vs served version {version} {baseline:.4f}: change {diff:+.4f} "
                        f"({worse}) fails the change threshold {absolute:+.4f}")
    if relative is not None:
        ratio = diff / abs(baseline) if baseline else math.copysign(math.inf, diff) if diff else 0.0
        if not (ratio <= relative if lower_better else ratio >= relative):
            failures.append(f"{metric} {value:.4f} vs served version {version} {baseline:.4f}: relative change "
                            f"{ratio:+.2%} ({worse}) fails the change threshold {relative:+.2%}")
    return failures


def _check_trivial(metric: str, value: float, trivial: Trivial) -> Tuple[bool, str]:
    """(passes, the reason): the candidate against a model that learnt nothing."""
    if metric not in trivial.metrics:
        raise GpupipeError(f"evaluation.must_beat_trivial: a model that learnt nothing has no score for metric "
                           f"'{metric}'; use metric one of {', '.join(sorted(trivial.metrics))}, or set "
                           "must_beat_trivial: false")
    score = trivial.metrics[metric]
    beats = value < score if metric in LOWER_IS_BETTER else value > score
    what = f"a model that learnt nothing ({trivial.answers[metric]}) scores {score:.4f} on the eval split"
    return beats, (f"{metric} {value:.4f} beats {what}" if beats else
                   f"{metric} {value:.4f} does not beat {what}: the model learnt nothing it can show")


# Relative difference from the linear baseline that float32 rounding alone makes (the
# model that kept its linear start is the baseline: 53.674427 against 53.674426 on diabetes).
ROUNDING = 1e-5


def bless_model(evaluation: Evaluation, metric: str, threshold: float, thresholds: Optional[Dict[str, dict]] = None,
                baseline: Optional[Evaluation] = None, baseline_version: Optional[int] = None,
                trivial: Optional[Trivial] = None, linear: Optional[Evaluation] = None) -> Blessing:
    """TFMA-style blessing. `metric`/`threshold` is the primary value threshold (a lower
    bound, or an upper bound for lower-is-better metrics; 0: none); `thresholds` maps more
    metrics to {lower_bound, upper_bound, change: {absolute, relative}}; a `change` on
    `metric` itself may be given there too. Change thresholds need a baseline and are
    skipped (and said so) without one. `trivial`: the primary metric must also beat what
    a model that learnt nothing scored on the same rows; the blessing's threshold is then
    the stricter of the two. `linear`: the primary metric must also be at least as good as
    the linear baseline's (its `linear_model` names it)."""
    if metric not in evaluation.metrics:
        raise GpupipeError(f"evaluation thresholds: metric '{metric}' is not computed for this model; "
                           f"use one of {', '.join(sorted(evaluation.metrics))}")
    all_thresholds = {k: dict(v) for k, v in (thresholds or {}).items()}
    primary = all_thresholds.setdefault(metric, {})
    if threshold:
        primary["upper_bound" if metric in LOWER_IS_BETTER else "lower_bound"] = threshold
    failures, passes = [], []
    if trivial is not None:
        beats, reason = _check_trivial(metric, evaluation.metrics[metric], trivial)
        (passes if beats else failures).append(reason)
        score = trivial.metrics[metric]
        threshold = score if not threshold else (min if metric in LOWER_IS_BETTER else max)(threshold, score)
    elif not threshold and linear is None:
        passes.append(f"{metric} {evaluation.metrics[metric]:.4f}: no fixed threshold (evaluation.threshold 0)")
    if linear is not None:
        value, score = evaluation.metrics[metric], linear.metrics[metric]
        # the same linear function in the model's float32 and scikit-learn's float64 differs in the
        # sixth or seventh digit: not worse within that
        worse = value > score * (1 + ROUNDING) if metric in LOWER_IS_BETTER else value < score * (1 - ROUNDING)
        line = (f"{metric} {value:.4f} vs the linear baseline ({linear.linear_model} on the same train split and "
                f"features) {score:.4f} on the eval split")
        if worse:
            failures.append(f"{line}: worse (evaluation.must_beat_baseline)")
        else:
            passes.append(f"{line}: not worse")
    for name, rule in sorted(all_thresholds.items()):
        if name not in evaluation.metrics:
            raise GpupipeError(f"evaluation thresholds: metric '{name}' is not computed for this model; "
                               f"use one of {', '.join(sorted(evaluation.metrics))}")
        value = evaluation.metrics[name]
        value_failures = _check_value(name, value, rule.get("lower_bound"), rule.get("upper_bound"))
        failures += value_failures
        if not value_failures and (rule.get("lower_bound") is not None or rule.get("upper_bound") is not None):
            bounds = " and ".join(f"{'>=' if k == 'lower_bound' else '<='} {rule[k]:.4f}"
                                  for k in ("lower_bound", "upper_bound") if rule.get(k) is not None)
            passes.append(f"{name} {value:.4f} meets threshold ({bounds})")
        change = rule.get("change")
        if change:
            if baseline is None:
                passes.append(f"{name}: no served model yet, change threshold skipped")
            else:
                change_failures = _check_change(name, value, baseline.metrics[name], baseline_version, change)
                failures += change_failures
                if not change_failures:
                    passes.append(f"{name} {value:.4f} vs served version {baseline_version} "
                                  f"{baseline.metrics[name]:.4f}: within the change threshold")
    blessed = not failures
    return Blessing(
        blessed=blessed, metric=metric, value=evaluation.metrics[metric], threshold=threshold,
        reasons=failures if failures else passes, baseline_version=baseline_version,
        baseline_value=baseline.metrics[metric] if baseline is not None else None,
        metrics={k: v for k, v in evaluation.metrics.items()})


def render_report(evaluation: Evaluation, blessing: Blessing, baseline: Optional[Evaluation]) -> str:
    """Markdown: verdict and reasons, metrics beside the baseline's, slices, confusion matrix."""
    verdict = "**BLESSED**" if blessing.blessed else "**NOT BLESSED**"
    lines = [f"# Model evaluation: {verdict}", ""]
    lines += [f"- {r}" for r in blessing.reasons] + [""]
    trivial, linear = evaluation.trivial or {}, evaluation.linear or {}
    head = "| metric | candidate |" + (f" served v{blessing.baseline_version} |" if baseline else "")
    head += f" linear ({evaluation.linear_model}) |" if linear else ""
    head += " learnt nothing |" if trivial else ""
    lines += [head, "|---|---|" + ("---|" if baseline else "") + ("---|" if linear else "") + ("---|" if trivial else "")]
    for k, v in evaluation.metrics.items():
        row = f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |"
        if baseline:
            b = baseline.metrics.get(k)
            row += f" {b:.4f} |" if isinstance(b, float) else f" {b} |"
        if linear:
            row += f" {linear[k]:.4f} |" if isinstance(linear.get(k), float) else f" {linear.get(k, '')} |"
        if trivial:
            row += f" {trivial[k]:.4f} |" if k in trivial else " |"
        lines.append(row)
    for feature, values in evaluation.slices.items():
        keys = [k for k in next(iter(values.values()), {}) if k != "examples"]
        lines += ["", f"## Slices by {feature}", "", "| value | examples | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        lines += [f"| {v} | {m['examples']} | " + " | ".join(f"{m[k]:.4f}" for k in keys) + " |"
                  for v, m in values.items()]
    if not evaluation.classes:
        return "\n".join(lines) + "\n"
    lines += ["", "## Confusion matrix (rows: true, columns: predicted)", "",
              "| | " + " | ".join(evaluation.classes) + " |", "|---|" + "---|" * len(evaluation.classes)]
    lines += [f"| {c} | " + " | ".join(str(n) for n in row) + " |"
              for c, row in zip(evaluation.classes, evaluation.confusion_matrix)]
    return "\n".join(lines) + "\n"


def linear_evaluation(pred: Predictions, name: str) -> Evaluation:
    """The linear baseline (components/evaluate/linear.py) scored like the candidate, with the
    candidate's classes and labels, on its predictions on the same rows (`pred.linear`)."""
    scored = evaluate_predictions(Predictions(classes=pred.classes, labels=pred.labels, probabilities=pred.linear,
                                              slice_values={}, task=pred.task))
    scored.linear_model = name
    return scored


def score_with_baseline(model_dir: str, examples_dir: str, slices: List[str]):
    """(the candidate's predictions, the linear baseline's evaluation or None, why none) in
    one read of the eval split: the baseline is scored inside the candidate's scoring pass;
    its fit is the model's linear start when that is the same fit (linear.py: saved_fit),
    else fitted on train rows read while the model loads."""
    from concurrent.futures import ThreadPoolExecutor

    from components.evaluate.linear import baseline_input, fit_baseline, saved_baseline
    from components.kinds import load_feature_specs

    found, why = baseline_input(examples_dir)
    if found is None:
        return predict(model_dir, examples_dir, slices), None, why
    specs = load_feature_specs(model_dir)
    fit = saved_baseline(model_dir, found, specs.task)
    if fit is None:
        with ThreadPoolExecutor(1) as pool:
            ngrams = {f.name: f.ngrams for _, f in specs.each() if hasattr(f, "ngrams")}
            fitting = pool.submit(fit_baseline, examples_dir, found, specs.task, list(specs.classes), ngrams)
            predictions = predict(model_dir, examples_dir, slices, linear=pool.submit(lambda: fitting.result()[0]))
        fit, why = fitting.result()
    else:
        predictions = predict(model_dir, examples_dir, slices, linear=fit)
    if fit is None:
        return predictions, None, why
    return predictions, linear_evaluation(predictions, fit.name), ""


@reports_errors("evaluate")
def run_evaluate(*, model_dir: str, examples_dir: str, blessing_dir: str, report_md: str,
                 settings: EvaluationSettings, serving_base: str = "", model_name: str = "",
                 ) -> tuple[Evaluation, Blessing]:
    """The evaluate step: scores the candidate, a model that learnt nothing (on the same
    eval rows) and the served baseline (if any), blesses (settings.threshold as this run
    gives it; with must_beat_trivial, against the model that learnt nothing too), writes blessing.json and evaluation.json
    into `blessing_dir` and the Markdown report to the file `report_md`. With
    `fail_if_not_blessed`, an unblessed model then fails the step."""
    from components.store.served import served_version

    started = time.monotonic()
    import components

    # In a new process about 1.7 s: the step's start, not the baseline's time. Without tf_keras
    # (0.2 s): a SavedModel loads and scores without it.
    components.import_tensorflow(keras=False)

    imported = time.monotonic()
    predictions, linear, why = score_with_baseline(model_dir, examples_dir, list(settings.slices))
    scored = time.monotonic()
    evaluation = evaluate_predictions(predictions)
    trivial = trivial_scores(predictions)
    measured = time.monotonic()
    evaluation.trivial = dict(trivial.metrics)
    if linear is not None:
        evaluation.linear, evaluation.linear_model = dict(linear.metrics), linear.linear_model
    elif settings.must_beat_baseline is True:
        raise GpupipeError(f"evaluation.must_beat_baseline: no linear baseline for {examples_dir} ({why}); set "
                           "evaluation.must_beat_baseline: false")
    else:  # unset (on by default): the gate goes on without it, and says so
        print(f"note: evaluate: no linear baseline: {why}", flush=True)
    baseline, baseline_version = None, None
    if serving_base and model_name:
        found = served_version(serving_base, model_name)
        if found is not None:
            baseline_version, baseline_dir = found
            baseline = score_model(baseline_dir, examples_dir, list(settings.slices))
    blessing = bless_model(evaluation, settings.metric, settings.threshold, settings.rules(), baseline,
                           baseline_version, trivial if settings.must_beat_trivial else None,
                           linear if settings.must_beat_baseline is not False else None)
    blessing = check_compressed(model_dir, evaluation, blessing, settings, score=lambda serve: evaluate_predictions(
        predict(model_dir, examples_dir, [], serve)).metrics)
    write_blessing(blessing, blessing_dir)
    if predictions.task != "regression":
        from components.evaluate.misclassified import write_misclassified

        evaluation.misclassified = write_misclassified(model_dir, examples_dir, predictions.labels,
                                                       predictions.probabilities, predictions.classes, blessing_dir)
    evaluation.seconds = {**{k: round(v, 3) for k, v in predictions.seconds.items()},
                          "imports": round(imported - started, 3),
                          "linear_baseline": round(scored - imported - predictions.seconds.get("model_load", 0.0)
                                                   - predictions.seconds.get("scoring_pass", 0.0), 3),
                          "metrics": round(measured - scored, 3), "total": round(time.monotonic() - started, 3)}
    with open(os.path.join(blessing_dir, EVALUATION_FILE), "w", encoding="utf-8") as f:
        json.dump(asdict(evaluation), f, indent=2)
    os.makedirs(os.path.dirname(report_md) or ".", exist_ok=True)
    with open(report_md, "w", encoding="utf-8") as f:
        f.write(render_report(evaluation, blessing, baseline) + render_forms(evaluation.compressed))
    if settings.fail_if_not_blessed and not blessing.blessed:
        raise GpupipeError(f"model not blessed: {'; '.join(blessing.reasons)} (evaluation.fail_if_not_blessed is "
                           "true; set it to false to end the run green without a push)")
    return evaluation, blessing
