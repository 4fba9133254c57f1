"""`gpupipe report CONFIG`: the pool view of a config's recent local runs, from the
training reports in their run directories (written here in train's report.json format);
and `gpupipe report RUN_DIR --open` on such a run."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def train_report(**measured) -> dict:
    """A training report as components/train/logic.py writes it (report.json)."""
    report = {"examples_per_second": 6501.6, "train_seconds": 1.77, "epochs": 40, "epochs_run": 40,
              "steps_per_epoch": 9, "optimizer_steps": 360, "train_function_traces": 1, "resumed_from_step": 0,
              "preemptions": 0, "resumes": 0, "first_epoch_seconds": 0.619, "steady_epoch_seconds": 0.019,
              "step_seconds_p50": 0.0012, "step_seconds_p95": 0.002, "compute_only_step_seconds_p50": 0.0012,
              "input_wait_fraction": 0.001, "train_examples": 275, "replicas": 1, "workers": 1,
              "strategy": "default (one device)", "global_batch_size": 32, "learning_rate": 0.01, "optimizer": "adam",
              "precision_policy": "float32", "xla": False, "input_cache": "memory", "gpus": 0,
              "gpu_utilization_mean": None, "gpu_hours": 0.0, "estimated_cost": 0.0, "final_loss": 0.0002,
              "final_train_accuracy": 1.0, "model": "dnn", "chief": True,
              "history": {"loss": [0.6, 0.1], "accuracy": [0.8, 1.0]}}
    return {**report, **measured}


def write_run(runs: Path, name: str, report=None) -> None:
    run = runs / name
    (run / "validate").mkdir(parents=True)
    if report is not None:
        (run / "train" / "report").mkdir(parents=True)
        (run / "train" / "report" / "report.json").write_text(json.dumps(report))


def gpupipe(*args):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_pool_view_lists_the_configs_runs_newest_first_and_flags_input_bound_ones(tmp_path):
    runs = tmp_path / "runs"
    write_run(runs, "penguins-2026-12-01-09-00-00-000001",
              train_report(gpus=4, workers=2, gpu_hours=0.5, estimated_cost=1.25, examples_per_second=12000.0,
                           input_wait_fraction=0.45, gpu_utilization_mean=38.0, preemptions=2, resumes=2))
    write_run(runs, "penguins-2026-12-01-08-00-00-000002",
              train_report(gpus=1, gpu_hours=0.25, estimated_cost=0.625, examples_per_second=9000.5,
                           input_wait_fraction=0.05, gpu_utilization_mean=91.0))
    write_run(runs, "penguins-2026-12-01-07-00-00-000003")  # stopped at validate
    write_run(runs, "penguins-big-2026-12-01-10-00-00-000004", train_report())  # another config's run
    (runs / "penguins-last.log").write_text("")
    out = gpupipe("report", "configs/penguins.yaml", "--runs-dir", str(runs))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"penguins: 3 recent local run(s) under {runs}, newest first"
    assert lines[1].split() == ["run", "GPU-hours", "examples/s", "input", "wait", "GPU", "util", "preempted", "cost"]
    assert lines[2].split() == ["penguins-2026-12-01-09-00-00-000001", "0.5000", "12,000.0", "45.0%", "38%", "2",
                                "1.2500", "input-bound"]
    assert lines[3].split() == ["penguins-2026-12-01-08-00-00-000002", "0.2500", "9,000.5", "5.0%", "91%", "0",
                                "0.6250"]
    assert lines[4].startswith("penguins-2026-12-01-07-00-00-000003  (no training report")
    assert lines[5].split() == ["total", "0.7500", "2", "1.8750"]
    assert lines[6].startswith("input-bound (input wait above 30% of the step time): 1 run(s)")
    assert len(lines) == 7

    stricter = gpupipe("report", "configs/penguins.yaml", "--runs-dir", str(runs), "--limit", "2",
                       "--input-bound", "0.01")
    assert stricter.returncode == 0, stricter.stderr
    assert [line.split()[-1] for line in stricter.stdout.splitlines()[2:4]] == ["input-bound", "input-bound"]
    assert "2 recent local run(s)" in stricter.stdout


def test_pool_view_bad_input_is_one_line(tmp_path):
    out = gpupipe("report", "configs/penguins.yaml", "--input-bound", "30")
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        "error: report --input-bound 30.0: give a fraction between 0 and 1, e.g. 0.3"]
    out = gpupipe("report", str(tmp_path / "nothing-here"))
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        f"error: report: {tmp_path / 'nothing-here'} is not a directory; give a run directory "
        "(runs/<pipeline>-<time>) or a config"]
    (tmp_path / "empty-run").mkdir()
    out = gpupipe("report", str(tmp_path / "empty-run"))
    assert out.returncode == 1 and "holds no training report (train/report/report.json)" in out.stderr


def test_report_of_a_run_dir_without_a_page_builds_it_and_open_hands_it_to_the_browser(tmp_path):
    """An older run (no report.html): the page is built from the artifacts it has; --open
    gives its file:// URL to the browser $BROWSER names (webbrowser's own convention)."""
    import os

    run = tmp_path / "runs" / "penguins-2026-12-01-09-00-00-000001"
    write_run(tmp_path / "runs", run.name, train_report())
    opened = tmp_path / "opened"
    env = {**os.environ, "BROWSER": f"sh -c 'echo \"$0\" > {opened}' %s"}
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "report", str(run), "--open"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    page = run / "report.html"
    assert out.stdout == f"{page}\n" and page.is_file()
    assert opened.read_text().strip() == page.as_uri()
    text = page.read_text(encoding="utf-8")
    assert 'id="plot-loss"' in text and "The release gate did not run." in text
