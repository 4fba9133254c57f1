"""training.tune: the search (Keras Tuner's oracles over our own trial runs), its budgets
and its failures with a scripted trial; then four real trials through the train step on the
penguins table, the best one's model becoming the step's model."""
import json
import math
import os
from pathlib import Path

import pytest

from components.contracts.errors import GpupipeError
from components.train import tune
from components.train.settings import TrainSettings
from components.train.tune_settings import TuneSettings

pytestmark = pytest.mark.unit


def settings(**tune_settings) -> TrainSettings:
    return TrainSettings(validation_percent=25, tune=TuneSettings(**tune_settings))


def scripted(value_of, epochs: int = 3, fail=lambda s: False):
    """A trial that trains nothing: its validation loss is `value_of(settings)`, at epoch 2 of
    `epochs` (the kept one); it records what it was asked to run."""
    seen = []

    def train_trial(s: TrainSettings, trial_dir: str):
        seen.append((s, trial_dir))
        if fail(s):
            raise GpupipeError("training: out of memory (scripted)")
        v = value_of(s)
        history = {"loss": [v] * epochs, "val_loss": [v + 1, v] + [v + 0.5] * (epochs - 2)}
        report = {"epochs_run": epochs, "best_epoch": 2, "optimizer_steps": 10 * epochs, "train_seconds": 0.1,
                  "history": history, "early_stopping_monitor": "val_loss"}
        return tune.score(report, "val_loss", "min"), report

    return train_trial, seen


def distance_to(rate: float):
    return lambda s: abs(s.learning_rate - rate) * 100 + s.dropout


# Bayesian: three trials are its two random ones and one the Gaussian process proposes (each
# proposal is Keras Tuner's 20-restart fit and 50-restart acquisition search, seconds of CPU).
@pytest.mark.parametrize("algorithm, trials", [("random", 4), ("bayesian", 3)])
def test_the_search_runs_the_trials_and_keeps_the_best(tmp_path, algorithm, trials):
    if algorithm == "bayesian":
        assert tune.initial_random_trials(trials) < trials  # at least one trial is the Gaussian process's
    train_trial, seen = scripted(distance_to(0.003))
    result = tune.search(settings(trials=trials, algorithm=algorithm), train_trial, str(tmp_path))
    trials_run = result["trials"]
    assert len(trials_run) == len(seen) == trials and result["stopped_by"] == "trials"
    chosen = {(t["learning_rate"], tuple(t["hidden_units"]), t["dropout"], t["batch_size"]) for t in trials_run}
    assert len(chosen) == trials  # distinct hyperparameter sets
    best = min(trials_run, key=lambda t: t["value"])
    assert result["best_trial"] == best["trial_id"] and result["best_value"] == best["value"]
    assert result["best_directory"] == os.path.join(str(tmp_path), f"trial-{best['trial_id']}")
    assert len({d for _, d in seen}) == trials  # each trial in its own directory
    for s, _ in seen:  # within the default space, no search of its own
        assert s.tune is None and 1e-4 <= s.learning_rate <= 1e-2 and 0 <= s.dropout <= 0.3
        assert s.batch_size in (32, 64, 128, 256) and 1 <= len(s.hidden_units) <= 3
        assert s.hidden_units[0] in (32, 64, 128, 256)
        assert s.hidden_units == [max(4, s.hidden_units[0] // 2 ** i) for i in range(len(s.hidden_units))]
    # the score is the kept (best) epoch's validation loss, not the last epoch's
    assert all(t["value"] == distance_to(0.003)(s) for t, (s, _) in zip(trials_run, seen))


def test_accuracy_is_maximised():
    s = TrainSettings(validation_percent=25, early_stopping={"metric": "accuracy"}, tune=TuneSettings())
    assert tune.objective(s) == ("val_accuracy", "max")
    assert tune.objective(TrainSettings(task="regression", tune=TuneSettings())) == ("val_loss", "min")
    report = {"early_stopping_monitor": "val_accuracy", "best_epoch": None, "history": {"val_accuracy": [0.5, 0.9]}}
    assert tune.score(report, "val_accuracy", "max") == 0.9
    # best epoch 0: the linear start was kept, and its value before the first epoch is the trial's
    kept = {"early_stopping_monitor": "val_loss", "best_epoch": 0, "start_validation_value": 0.2,
            "history": {"val_loss": [0.3, 0.25]}}
    assert tune.score(kept, "val_loss", "min") == 0.2


def test_the_budgets_stop_the_search(tmp_path):
    train_trial, seen = scripted(distance_to(0.003), epochs=4)
    result = tune.search(settings(trials=10, budget_epochs=8), train_trial, str(tmp_path))
    assert len(seen) == 2 and result["stopped_by"] == "budget_epochs" and result["trials_planned"] == 10
    ticks = iter(range(0, 1000, 10))  # each reading of the clock: 10 s later
    train_trial, seen = scripted(distance_to(0.003))
    result = tune.search(settings(trials=10, budget_seconds=35), train_trial, str(tmp_path),
                         clock=lambda: next(ticks))
    assert result["stopped_by"] == "budget_seconds" and 1 <= len(seen) < 10


def test_a_failed_trial_is_recorded_and_the_search_goes_on(tmp_path):
    train_trial, seen = scripted(distance_to(0.003), fail=lambda s: s.batch_size == 256)
    result = tune.search(settings(trials=4, batch_size=[64, 256]), train_trial, str(tmp_path))
    failed = [t for t in result["trials"] if t["status"] == "failed"]
    assert failed and all(t["batch_size"] == 256 and "out of memory" in t["message"] for t in failed)
    assert next(t for t in result["trials"] if t["trial_id"] == result["best_trial"])["batch_size"] == 64
    with pytest.raises(GpupipeError, match=r"^training.tune: no trial finished \(GpupipeError: training: out of "):
        tune.search(settings(trials=2), scripted(distance_to(0), fail=lambda s: True)[0], str(tmp_path))


def test_parallel_trials_share_one_oracle(tmp_path):
    train_trial, seen = scripted(distance_to(0.003))
    result = tune.search(settings(trials=5), train_trial, str(tmp_path), parallel=3)
    assert len(seen) == 5 and sorted(t["trial_id"] for t in result["trials"]) == ["0", "1", "2", "3", "4"]
    assert len({(s.learning_rate, s.batch_size) for s, _ in seen}) == 5


def test_tuning_needs_a_validation_slice_and_sane_ranges():
    with pytest.raises(ValueError, match="tune: trials are compared on the validation slice"):  # when the config loads
        TrainSettings(validation_percent=0, tune=TuneSettings())
    with pytest.raises(ValueError, match="keep early_stopping"):
        TrainSettings(early_stopping=None, tune=TuneSettings())
    unchecked = TrainSettings().model_copy(update={"validation_percent": 0, "tune": TuneSettings()})
    with pytest.raises(GpupipeError, match="training.tune: trials are compared on the validation slice"):
        tune.objective(unchecked)  # and again where the step starts, for settings built past the check
    with pytest.raises(GpupipeError, match=r"a trial reported no val_loss: its validation slice was under 30 rows"):
        tune.score({"early_stopping_monitor": "loss", "history": {"loss": [1.0]}, "train_examples": 100},
                   "val_loss", "min")
    for bad, message in (({"learning_rate": [0.1, 0.01]}, "learning_rate"), ({"depth": [0, 2]}, "depth"),
                         ({"dropout": [0.2, 1.0]}, "dropout"), ({"width": []}, "positive"),
                         ({"priority_class": "Tuning!"}, "Kubernetes object name")):
        with pytest.raises(ValueError, match=message):
            TuneSettings(**bad)


def test_four_trials_through_the_train_step_locally(tmp_path, penguin_examples):
    """Acceptance 5 (locally): four trials, one after another, each its own model; the step's
    model is the best trial's, and the report lists every trial."""
    from components.contracts.examples import ingest_statistics_dir
    from components.train.logic import run_train_task
    from conftest import PENGUIN_COLUMNS

    task = tmp_path / "train"
    model = str(task / "model")
    s = TrainSettings(embedding_dim=2, epochs=6, validation_percent=25, early_stopping={"patience": 2},
                      tune=TuneSettings(trials=4, width=[8, 16, 32], depth=[1, 2], batch_size=[16, 32, 64],
                                        learning_rate=[0.001, 0.05]))
    stats = ingest_statistics_dir(penguin_examples)
    report = run_train_task(examples=(penguin_examples, penguin_examples), statistics=(stats, stats),
                            model=(model, model), log_dir=str(task / "tensorboard"),
                            summary_md=str(task / "summary.md"), columns=PENGUIN_COLUMNS, settings=s)
    tuning = report["tuning"]
    trials = tuning["trials"]
    assert len(trials) == 4 and all(t["status"] == "completed" for t in trials)
    assert len({(t["learning_rate"], tuple(t["hidden_units"]), t["dropout"], t["batch_size"]) for t in trials}) == 4
    assert all(t["epochs_run"] >= 1 and t["optimizer_steps"] > 0 and t["seconds"] > 0 for t in trials)
    best = min(trials, key=lambda t: t["value"])
    assert tuning["best_trial"] == best["trial_id"] and tuning["objective"] == "val_loss"
    # The step's report is the best trial's: its own validation loss at the kept epoch.
    assert report["history"]["val_loss"][report["best_epoch"] - 1] == best["value"]
    assert report["learning_rate"] == best["learning_rate"]

    # The step's model is the best trial's model, byte for byte; no other trial's.
    def files(d: Path) -> dict:
        return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}

    step_model = files(Path(model))
    assert "saved_model.pb" in step_model
    for t in trials:
        same = files(Path(t["directory"]) / "model") == step_model
        assert same == (t["trial_id"] == best["trial_id"]), t["trial_id"]
    saved = json.loads((task / "report" / "report.json").read_text())
    assert saved["tuning"]["best_trial"] == best["trial_id"] and len(saved["tuning"]["trials"]) == 4
    summary = (task / "summary.md").read_text()
    assert "## Tuning" in summary and f"| {best['trial_id']} (best) |" in summary
    assert sum(line.startswith("| ") and "completed" in line for line in summary.splitlines()) == 4


def test_dropout_follows_each_layer_of_the_tower(penguin_examples):
    from components.contracts.examples import ingest_statistics_dir
    from components.kinds import Columns, specs_from_statistics
    from components.contracts.statistics import load_statistics
    from components.train.model import build_model
    from conftest import CATEGORICAL, LABEL, NUMERIC

    stats = load_statistics(ingest_statistics_dir(penguin_examples), "train")
    specs = specs_from_statistics(stats, Columns(label=LABEL, numeric_features=NUMERIC, categorical_features=CATEGORICAL))

    def dropouts(s: TrainSettings) -> list:
        return [layer.rate for layer in build_model(specs, s).layers if type(layer).__name__ == "Dropout"]

    assert dropouts(TrainSettings(hidden_units=[16, 8], dropout=0.25)) == [0.25, 0.25]
    assert dropouts(TrainSettings(hidden_units=[16, 8])) == []  # the default: none


def test_a_diverged_trial_is_recorded_as_failed_and_never_chosen(tmp_path):
    """A NaN validation loss (a trial that diverged) fails that trial; the search goes on and
    the best finished trial is chosen."""
    calls = []

    def value_of(s):
        calls.append(s)
        return float("nan") if len(calls) == 2 else distance_to(0.003)(s)

    train_trial, _ = scripted(value_of)
    result = tune.search(settings(trials=4), train_trial, str(tmp_path))
    failed = [t for t in result["trials"] if t["status"] == "failed"]
    assert len(failed) == 1 and "the trial diverged; narrow training.tune.learning_rate" in failed[0]["message"]
    assert result["best_trial"] != failed[0]["trial_id"] and math.isfinite(result["best_value"])
