"""Reuse of what did not change, locally as KFP's cache does on the cluster (pipelines/task_cache.py):
an unchanged re-run reuses train's model instead of training; a new learning rate trains again;
a run that failed at push resumes with `gpupipe resume` without training again. And the compiled
pipeline caches train and evaluate with keys that hold what they depend on."""
import json
import shutil
from pathlib import Path

import pytest
import yaml

from pipelines import steps

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("cache-runs")]
ROOT = Path(__file__).resolve().parents[1]


def config(tmp_path: Path):
    from pipelines.config import parse_config

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["data"]["source"] = str(ROOT / "data" / "penguins.csv")
    raw["serving"]["base"] = str(tmp_path / "serving")
    return parse_config(raw)


# A short training (the caching does not depend on how long train takes) that still meets
# the threshold, so the first run pushes version 1 and the reruns evaluate against it.
SHORT = {"epochs": 4, "eval_threshold": 0.5}


def statuses(summary) -> dict:
    return {s.name: s.status for s in summary.steps}


def trained(summary) -> bool:
    """Whether the run's train task trained: its log has the trainer's epoch lines."""
    log = Path(summary.log_file).read_text()
    return "progress: epoch 1/" in log


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from pipelines.local_run import run_local

    tmp_path = tmp_path_factory.mktemp("cache")
    cfg = config(tmp_path)
    first = run_local(cfg, runs_dir=str(tmp_path / "runs"), overrides=SHORT, quiet=True)
    again = run_local(cfg, runs_dir=str(tmp_path / "runs"), overrides=SHORT, quiet=True)
    new_rate = run_local(cfg, runs_dir=str(tmp_path / "runs"), overrides={**SHORT, "learning_rate": 0.02},
                         quiet=True)
    return tmp_path, first, again, new_rate


def test_an_unchanged_rerun_reuses_the_trained_model_and_says_how_much_it_saved(runs):
    _, first, again, _ = runs
    assert first.ok and again.ok and trained(first)
    assert statuses(first)["train"] == "SUCCESS" and not first.cached
    assert statuses(again)["train"] == "CACHED" and statuses(again)["ingest"] == "CACHED"
    assert not trained(again)
    # version 1 is served now: validate (drift) and evaluate (against it) run again
    assert statuses(again)["validate"] == "SUCCESS" and statuses(again)["evaluate"] == "SUCCESS"
    assert again.saved["train"] > 0.5 and "cached: ingest, train reused" in again.render()
    # the reused model is the first run's, byte for byte
    from components.push.logic import model_digest

    model = lambda s: str(Path(s.run_dir) / "train" / "model")  # noqa: E731
    assert model_digest(model(again)) == model_digest(model(first))


def test_a_new_learning_rate_trains_again(runs):
    _, _, _, new_rate = runs
    assert new_rate.ok and statuses(new_rate)["train"] == "SUCCESS" and trained(new_rate)
    assert statuses(new_rate)["ingest"] == "CACHED"


def test_a_run_that_failed_at_push_resumes_without_training_again(runs, capsys):
    """The fault: models.config under the serving base is a folder, so push cannot write it.
    Mended, `gpupipe resume RUN_DIR` reruns with the run's own config and parameters."""
    from pipelines.cli import main
    from pipelines.local_run import run_local

    tmp_path, *_ = runs
    serving = tmp_path / "serving-broken"
    (serving / "models.config").mkdir(parents=True)
    cfg = config(tmp_path).model_copy(update={"serving": config(tmp_path).serving.model_copy(
        update={"base": str(serving)})})
    failed = run_local(cfg, runs_dir=str(tmp_path / "runs"), overrides=SHORT, quiet=True)
    assert statuses(failed)["push"] == "FAILURE" and statuses(failed)["report"] == "NOT RUN"
    assert statuses(failed)["train"] == "CACHED" and not trained(failed)  # the first run's model
    assert json.loads((Path(failed.run_dir) / "gpupipe-run.json").read_text())["parameters"]["serving_base"] \
        == str(serving)
    shutil.rmtree(serving / "models.config")

    capsys.readouterr()
    code = main(["resume", failed.run_dir, "--quiet"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    lines = {line.split()[0]: line.split()[1] for line in out.out.splitlines()[1:1 + len(steps.names())]}
    # what finished is reused (ingest, validate, train, evaluate); push and report run again
    assert lines == {step.name: "CACHED" if step.cached else "SUCCESS" for step in steps.registered()}, out.out
    assert lines["train"] == "CACHED" and lines["push"] == "SUCCESS"
    assert f"pushed version 1: {serving}/penguins/1" in out.out
    assert (serving / "penguins" / "1" / "saved_model.pb").is_file()


def test_resume_of_a_folder_that_is_not_a_run_is_one_line(tmp_path, capsys):
    from pipelines.cli import main

    code = main(["resume", str(tmp_path)])  # the command in process: an exception here is a traceback
    out = capsys.readouterr()
    assert code == 1 and "Traceback" not in out.err and out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line.startswith(f"error: {tmp_path}: no gpupipe-run.json here")


def test_the_compiled_pipeline_caches_train_and_evaluate_on_keys_that_hold_what_they_read():
    spec = next(yaml.safe_load_all((ROOT / "pipelines" / "compiled" / "penguins.yaml").read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    cached = {name for name, t in tasks.items() if t.get("cachingOptions", {}).get("enableCache")}
    assert cached == {"ingest", "validate", "train", "evaluate"}
    # train reads the examples (ingest's statistics inside them), not validate's run, which
    # runs again after each push; it still waits for validate's verdict
    assert set(tasks["train"]["inputs"]["artifacts"]) == {"examples"}
    assert "validate" in tasks["train"]["dependentTasks"]
    # evaluate compares with the served model: the served version is in its key
    served = tasks["evaluate"]["inputs"]["parameters"]["served_version"]["taskOutputParameter"]
    assert served == {"outputParameterKey": "served", "producerTask": "fingerprint"}
