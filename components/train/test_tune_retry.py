"""training.tune when the train task is retried (a spot node lost, the pod evicted): the
trials' directories are where the last attempt left them, beside the model's URI. A trial
that finished is reused, not trained again; one trained with other values is removed before
its directory is used, so no backup of other hyperparameters is restored."""
import json
import os
from pathlib import Path

import pytest

from components.contracts import names
from components.train import tune
from components.train.settings import TrainSettings
from components.train.tune_settings import TuneSettings

pytestmark = pytest.mark.unit


class PodLost(BaseException):
    """The attempt's process ends in the middle of a trial (not an error the search records)."""


def trial_writing_its_report(lose_pod_at=None):
    """A scripted trial that writes its report where run_train does (trial_dir/report), its
    validation loss a function of the learning rate; `lose_pod_at`: the call that dies."""
    seen = []

    def train_trial(s: TrainSettings, trial_dir: str):
        seen.append(trial_dir)
        if lose_pod_at is not None and len(seen) == lose_pod_at:
            Path(trial_dir, "backup").mkdir(parents=True)
            raise PodLost()
        v = abs(s.learning_rate - 0.003) * 100 + s.dropout
        report = {"epochs_run": 3, "best_epoch": 2, "optimizer_steps": 30, "train_seconds": 0.1,
                  "history": {"loss": [v] * 3, "val_loss": [v + 1, v, v + 0.5]}, "early_stopping_monitor": "val_loss"}
        Path(trial_dir, "report").mkdir(parents=True, exist_ok=True)
        Path(trial_dir, "report", names.TRAIN_REPORT_FILE).write_text(json.dumps(report))
        return tune.score(report, "val_loss", "min"), report

    return train_trial, seen


def settings() -> TrainSettings:
    return TrainSettings(validation_percent=25, tune=TuneSettings(trials=3, algorithm="random"))


def test_a_retried_search_reuses_the_trials_that_finished_and_trains_the_rest(tmp_path, capsys):
    first, trained_first = trial_writing_its_report(lose_pod_at=2)
    with pytest.raises(PodLost):
        tune.search(settings(), first, str(tmp_path))
    assert len(trained_first) == 2  # trial 0 finished, the pod was lost in trial 1
    capsys.readouterr()

    retry, trained_again = trial_writing_its_report()
    result = tune.search(settings(), retry, str(tmp_path))
    out = capsys.readouterr().out
    assert trained_again == [os.path.join(str(tmp_path), f"trial-{t['trial_id']}") for t in result["trials"][1:]]
    assert f"tune: trial {result['trials'][0]['trial_id']} finished in an earlier attempt of this task: reused" in out
    assert [t.get("reused", False) for t in result["trials"]] == [True, False, False]
    assert all(t["status"] == "completed" for t in result["trials"]) and result["trials_run"] == 3
    # the same search: the random oracle proposes the same values in the same order
    again, _ = trial_writing_its_report()
    fresh = tune.search(settings(), again, str(tmp_path / "fresh"))
    assert [t["value"] for t in fresh["trials"]] == [t["value"] for t in result["trials"]]
    assert fresh["best_trial"] == result["best_trial"]


def test_a_trial_directory_of_other_hyperparameters_is_cleared_before_the_trial_trains(tmp_path):
    stale = tmp_path / "trial-0"
    (stale / "backup").mkdir(parents=True)
    (stale / "backup" / "checkpoint").write_text("weights of another trial")
    (stale / tune.TRIAL_FILE).write_text(json.dumps({"hyperparameters": {"learning_rate": 0.5}, "completed": True}))
    train_trial, trained = trial_writing_its_report()
    result = tune.search(settings(), train_trial, str(tmp_path))
    assert str(stale) in trained and not (stale / "backup").exists()
    assert not any(t.get("reused") for t in result["trials"])
    assert json.loads((stale / tune.TRIAL_FILE).read_text())["completed"] is True
