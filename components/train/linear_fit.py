"""The linear start's fit (components/train/linear_start.py: the model starts as this linear
model), without TensorFlow, so the train task can fit it in a process of its own while its
own process imports TensorFlow (`fitted_beside`): at 2M rows on 2 cores the fit (ingest's
sample read, scikit-learn's import, the design, LogisticRegression) took about 2.8 s of the
task before the model could be built, and TensorFlow's import about 2.6 s, each on one core
(docs/benchmarks.md, "The linear start beside TensorFlow's import")."""
from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from components.contracts import names
from components.contracts.linear import (LINEAR_MAX_TRAIN_ROWS, LinearDesign, LinearFit, design_matrix, fit_design,
                                         fit_linear, read_split, read_train_sample)
from components.kinds import FeatureSpecs
from components.kinds.base import LINEAR_CATEGORICAL, LINEAR_NUMERIC, LINEAR_TEXT


@dataclass
class LinearStart:
    design: LinearDesign
    fit: LinearFit
    fit_rows: int
    target: str  # regression: the target the fit (and the network) learns, "standardize" or "log"
    why: str  # regression: why that target (the transform's choice)
    specs: FeatureSpecs  # what the network is built on (for a log target, log(1 + y)'s mean and deviation)
    choice_rmse: Optional[float] = None  # regression: the chosen target linear model's cross-validated rmse


def _kinds(specs: FeatureSpecs):
    """{feature: numeric, categorical or text}: how the linear design takes each feature (its
    kind's `linear`); a kind a linear model cannot take is left out of it."""
    return {f.name: kind.linear for kind, f in specs.each() if kind.linear}


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


def fit_linear_start(examples_dir: str, specs: FeatureSpecs, train_stats, target: str, why: str,
                     model_specs: FeatureSpecs, setting: str, held_out: int = 0,
                     on_design: Optional[Callable[[LinearDesign], None]] = None) -> Optional[LinearStart]:
    """The linear fit the model starts from: evaluate's baseline, on the train split's rows
    (ingest's sample of them, contracts/linear.py: read_train_sample; without one, every k-th
    of them past LINEAR_MAX_TRAIN_ROWS, as evaluate), in the same design; None
    when they hold one class only. With a text feature, on the rows outside the validation
    slice (`held_out` percent), which early stopping scores the start on: its TF-IDF columns,
    thousands of them, each in a few rows, fit the rows they see (rotten-tomatoes: a validation
    loss of 0.233 on the slice's rows fitted, 0.446 held out), so a start fitted on the slice
    would look better there than it is and no epoch could replace it. A design of numbers and
    categories scores alike on rows fitted and held out, and is fitted on them all, as
    evaluate's own baseline is. Regression: see the module's docstring for the
    target; `target`, `why`, `model_specs` are the transform's statistics-based choice.
    `on_design`: called with a classifier's design as soon as it is known, before the fit
    (the model can be built on it meanwhile: `design_start`)."""
    regression = specs.task == "regression"
    kinds = _kinds(specs)
    if not kinds:  # no feature a linear model takes (images only): nothing to start from
        return None
    numeric = [n for n, k in kinds.items() if k == LINEAR_NUMERIC]
    categorical = [n for n, k in kinds.items() if k == LINEAR_CATEGORICAL]
    text = {f.name: f.ngrams for _, f in specs.each() if kinds.get(f.name) == LINEAR_TEXT}
    rows = int(train_stats.num_examples)
    stride = max(1, math.ceil(rows / LINEAR_MAX_TRAIN_ROWS))
    # the slice early stopping scores the start on: rows neither the start nor the network saw
    skip = held_out if text else 0
    sample = read_train_sample(examples_dir, specs.label, kinds, regression, skip)
    if sample is not None:
        x, y = sample
    else:  # examples without ingest's sample: from the split
        keep = None
        if skip:
            import tensorflow as tf

            from components.train.data import in_validation_slice

            keep = lambda records: tf.logical_not(in_validation_slice(records, skip))  # noqa: E731
        x, y = read_split(examples_dir, names.TRAIN_SPLIT, specs.label, kinds, regression, stride, rows, keep)
    if not regression and len(set(y)) < 2:
        return None
    design = fit_design(x, numeric, categorical, text)
    if on_design is not None and not regression:
        on_design(design)
    matrix = design_matrix(design, x)
    if not regression:
        return LinearStart(design, fit_linear(matrix, y, False, specs.classes), len(y), "standardize", "", specs)
    from components.train.target import LOG, STANDARDIZE, regression_target  # (TensorFlow: a regression's alone)

    def scaled(transform: str, on: FeatureSpecs, values):
        t = np.log1p(np.maximum(values, 0.0)) if transform == LOG else values.astype(np.float64)
        return (t - (on.label_mean or 0.0)) / (on.label_std or 1.0)

    candidates = [(target, why, model_specs)]
    if setting == "auto" and len(y) >= 5 * CHOICE_FOLDS and float(np.min(y)) >= 0:
        other = STANDARDIZE if target == LOG else LOG
        candidates.append((other, *regression_target(specs, train_stats, other)[1:]))
    if len(candidates) == 1:
        return LinearStart(design, fit_linear(matrix, scaled(target, model_specs, y), True, []), len(y), target, why,
                           model_specs)
    scored = [(_cross_validated_rmse(matrix, y, transform, lambda v, t=transform, o=on: scaled(t, o, v), on),
               transform, on) for transform, _, on in candidates]
    rmse, transform, on = min(scored, key=lambda c: c[0])
    summary = ", ".join(f"{_TARGETS[t]} {r:.4g}" for r, t, _ in scored)
    return LinearStart(design, fit_linear(matrix, scaled(transform, on, y), True, []), len(y), transform,
                       f"the linear model's {CHOICE_FOLDS}-fold rmse on the train rows: {summary}", on, rmse)


CHOICE_FOLDS = 5
_TARGETS = {"standardize": "the label standardised", "log": "log(1 + y) standardised"}


def _cross_validated_rmse(matrix, y: np.ndarray, transform: str, scaled, on: FeatureSpecs) -> float:
    """The linear model's rmse in the label's units, by CHOICE_FOLDS-fold cross-validation
    on the fitted rows, learning `scaled(y)` (for log(1 + y): mapped back with Duan's
    smearing from each fold's fitted rows)."""
    from sklearn.model_selection import KFold

    std, mean = on.label_std or 1.0, on.label_mean or 0.0
    errors = []
    for fit_rows, held in KFold(CHOICE_FOLDS, shuffle=True, random_state=0).split(y):
        fit = fit_linear(matrix[fit_rows], scaled(y[fit_rows]), True, [])
        u = fit.predict(matrix[held]) * std + mean
        if transform == "log":
            fitted = fit.predict(matrix[fit_rows]) * std + mean
            smear = float(np.mean(np.exp(np.log1p(np.maximum(y[fit_rows], 0.0)) - fitted)))
            u = np.maximum(np.exp(u) * smear - 1.0, 0.0)
        errors.append(np.asarray(u - y[held], np.float64) ** 2)
    return float(np.sqrt(np.mean(np.concatenate(errors))))


def design_start(design: LinearDesign, specs: FeatureSpecs) -> LinearStart:
    """A classifier's start on `design` before its fit: zero weights of the fit's shape. The
    model is built on it (its linear part's layers follow the design), then takes the fit's
    weights (linear_start.py: initialise)."""
    width, classes = design.width, len(specs.classes)
    pending = LinearFit("LogisticRegression", np.zeros((width, classes)), np.zeros(classes), False)
    return LinearStart(design, pending, 0, "standardize", "", specs)


def same_design(a: Optional[LinearStart], b: Optional[LinearStart]) -> bool:
    """Whether two starts' linear parts are built alike (their designs equal)."""
    return a is not None and b is not None and pickle.dumps(a.design) == pickle.dumps(b.design)


def _fit_for(examples_dir: str, statistics_dir: str, columns, settings,
             on_design: Optional[Callable] = None) -> Optional[LinearStart]:
    """The classifier's linear start as the task's plan makes it (logic.py: plan_training, the
    same statistics, specs and validation slice); `on_design(design, specs)` as soon as its
    design is known."""
    from components.contracts.statistics import load_statistics
    from components.kinds import specs_from_statistics
    from components.train.settings import validation_slice

    s = settings
    stats = load_statistics(statistics_dir, names.TRAIN_SPLIT)
    specs = specs_from_statistics(stats, columns, s.task, s.max_vocabulary, s.hash_buckets)
    held_out = validation_slice(s, int(stats.num_examples))
    return fit_linear_start(examples_dir, specs, stats, "standardize", "", specs, s.target_transform, held_out,
                            on_design=(lambda design: on_design(design, specs)) if on_design else None)


class FitBeside:
    """The linear start being fitted by `python -m components.train.linear_fit` (started by
    `fitted_beside`); `result(specs)` waits for it."""

    def __init__(self, process: subprocess.Popen, home: str, started: float):
        self._process, self._home, self._started = process, home, started

    def design_start(self, specs: FeatureSpecs) -> Optional[LinearStart]:
        """The start's design as soon as the process has it (`design_start`: zero weights),
        for the model to be built while the fit goes on; None when the process ends without
        one, or had other specs (the caller then waits for `result`)."""
        out = os.path.join(self._home, DESIGN_FILE)
        while not os.path.exists(out) and self._process.poll() is None:
            time.sleep(0.005)
        try:
            with open(out, "rb") as fh:
                design, fitted_specs = pickle.load(fh)
        except Exception:  # noqa: BLE001  (none sent, or unreadable: the model waits for the fit)
            return None
        return design_start(design, specs) if fitted_specs == specs else None

    def result(self, specs: FeatureSpecs):
        """(True, the start or None) when the process fitted it for these `specs`; raises its
        GpupipeError (bad data: what the fit here would raise); (False, why) when it failed
        otherwise or fitted other specs (the caller fits it in its own process)."""
        from components.contracts.errors import GpupipeError

        code = self._process.wait()
        out = os.path.join(self._home, START_FILE)
        if code != 0 or not os.path.exists(out):
            return False, f"its process exited with {code}"
        try:
            with open(out, "rb") as fh:
                kind, value, seconds, peak_kb = pickle.load(fh)
        except Exception as err:  # noqa: BLE001  (fitted here instead)
            return False, f"its result did not load: {type(err).__name__}: {err}"
        if peak_kb:  # a pod's memory is its processes' sum: the task's peak counts this one's
            import components

            components.record_workers_peak_rss(peak_kb, beside_start=True)
        if kind == "error":
            raise GpupipeError(value)
        if kind != "start":
            return False, value
        if value is not None and value.specs != specs:
            return False, "it fitted other feature specs"
        waited = time.monotonic() - self._started
        print(f"linear start: fitted in {seconds:.1f} s in a process of its own, beside this one's start "
              f"({waited:.1f} s after it began)", flush=True)
        return True, value

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        import shutil

        shutil.rmtree(self._home, ignore_errors=True)


@contextlib.contextmanager
def fitted_beside(examples_dir: str, columns, settings, launch: str = ""):
    """`with fitted_beside(examples_dir, columns, settings, launch) as beside:` starts the
    classifier's linear start in a process of its own before the caller imports TensorFlow,
    and yields a FitBeside (train_model waits for it when it needs the start), or None when
    the task does not train here (`launch`: a multi-worker job's workers fit it) or fits it
    itself: no linear start, a custom model, a tuning search, a regression (its target choice
    needs TensorFlow), examples without ingest's sample (their read needs it too), or a sample
    of fewer than `training.linear_start_process_rows` rows (the fit is then quicker than the
    process's start). The process sends the design first (FitBeside.design_start): the
    task builds the model on it while the fit goes on. The process is stopped, and its files
    removed, when the block ends."""
    import components
    from components.contracts.examples import ingest_statistics_dir, read_manifest

    s = settings
    sample = (read_manifest(examples_dir) or {}).get("sample") or {}
    if (launch or not s.linear_start or s.custom_model or s.tune or s.task == "regression" or not sample
            or int(sample.get("rows", 0)) < s.linear_start_process_rows):
        yield None
        return
    home = tempfile.mkdtemp(prefix="gpupipe-linear-start-")
    request = {"examples": examples_dir, "statistics": ingest_statistics_dir(examples_dir),
               "columns": columns.model_dump_json(), "settings": s.model_dump_json()}
    with open(os.path.join(home, "request.json"), "w", encoding="utf-8") as fh:
        json.dump(request, fh)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop(components.PEAK_RSS_ENV, None)  # its peak is reported with its result (FitBeside.result), not as the task's
    process = subprocess.Popen([sys.executable, "-m", "components.train.linear_fit", home], env=env)
    beside = FitBeside(process, home, time.monotonic())
    try:
        yield beside
    finally:
        beside.close()


DESIGN_FILE, START_FILE = "design.pkl", "start.pkl"  # what the process writes into its home, in that order


def main(home: str) -> int:
    """The process `fitted_beside` starts: reads `home`/request.json, writes
    `home`/design.pkl (the design and the specs it is for) as soon as the design is known,
    then `home`/start.pkl: ("start", the LinearStart or None, seconds, peak RSS in kB), ("error", a
    GpupipeError's text, 0, peak) or ("failed", why, 0, peak)."""
    import components
    from components.contracts.errors import GpupipeError
    from components.kinds import Columns
    from components.train.settings import TrainSettings

    started = time.monotonic()
    with open(os.path.join(home, "request.json"), encoding="utf-8") as fh:
        request = json.load(fh)
    try:
        start = _fit_for(request["examples"], request["statistics"], Columns.from_json(request["columns"]),
                         TrainSettings.from_json(request["settings"]),
                         on_design=lambda design, specs: _send(home, DESIGN_FILE, (design, specs)))
        result = ("start", start, time.monotonic() - started)
    except GpupipeError as err:
        result = ("error", str(err), 0.0)
    except Exception as err:  # noqa: BLE001  (the task fits it itself and reports what it finds)
        result = ("failed", f"{type(err).__name__}: {err}", 0.0)
    _send(home, START_FILE, (*result, components.vm_hwm_kb()))
    return 0


def _send(home: str, name: str, value) -> None:
    """`value` pickled to `home`/`name`, written whole and then renamed: the task never reads half of it."""
    with open(os.path.join(home, name + ".tmp"), "wb") as fh:
        pickle.dump(value, fh)
    os.replace(os.path.join(home, name + ".tmp"), os.path.join(home, name))


if __name__ == "__main__":
    # run from the module by its name, so what it pickles names components.train.linear_fit, not __main__
    from components.train import linear_fit

    sys.exit(linear_fit.main(sys.argv[1]))
