"""The whole pipeline through kfp.local (SubprocessRunner), as `gpupipe run` runs it, with
its data source and serving base on an S3 protocol server on loopback (tests/fixtures/s3.py,
moto's server mode, a FIXTURE for MinIO / Ceph / AWS S3). The same run on the local disk is
`./dev run` and tests/test_init.py; on GCS, tests/test_cluster_run.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipelines import steps

# One worker runs this file: its tests share the module's first run (./dev test: --dist loadgroup).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e-first-run")]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def s3_bucket():
    from tests.fixtures.s3 import s3_server

    with pytest.MonkeyPatch.context() as monkeypatch, s3_server(monkeypatch) as bucket:
        from components.contracts import storage

        storage.upload_file(str(ROOT / "data" / "penguins.csv"), f"s3://{bucket}/data/penguins.csv")
        yield bucket


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, s3_bucket):
    """`gpupipe run configs/penguins.yaml` as a user types it, data and serving base on S3:
    one run, shared by the tests that read its outputs and by the second run that builds on
    its served version. `serving` is a local copy of the bucket's serving base after it."""
    from components.contracts import storage

    tmp_path = tmp_path_factory.mktemp("first-run")
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "configs/penguins.yaml", "--runs-dir", str(tmp_path / "runs"),
         "--data-source", f"s3://{s3_bucket}/data/penguins.csv", "--serving-base", f"s3://{s3_bucket}/serving"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    storage.download_prefix(f"s3://{s3_bucket}/serving", str(tmp_path / "serving"))
    return tmp_path, out.stdout, out.stderr


def test_penguins_end_to_end_pushes_a_servable_model(first_run, s3_bucket):
    from components.store import models_config

    tmp_path, summary, _ = first_run
    serving = tmp_path / "serving"
    for step in steps.names():
        assert f"  {step:<11} SUCCESS" in summary
    assert f"pushed version 1: s3://{s3_bucket}/serving/penguins/1" in summary
    (entry,) = models_config.parse((serving / "models.config").read_text()).model_config_list.config
    assert entry.base_path == f"s3://{s3_bucket}/serving/penguins"  # what TF Serving's S3 filesystem reads
    assert "data drift: no baseline yet (nothing served)" in summary

    version = serving / "penguins" / "1"
    assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir()
    import tensorflow as tf

    serve = tf.saved_model.load(str(version)).signatures["serving_default"]
    rows = serve(
        bill_length_mm=tf.constant([39.1, 46.5, 49.5]), bill_depth_mm=tf.constant([18.7, 13.5, 19.0]),
        flipper_length_mm=tf.constant([181.0, 210.0, 200.0]), body_mass_g=tf.constant([3750.0, 4550.0, 3800.0]),
        island=tf.constant(["Torgersen", "Biscoe", "Dream"]), sex=tf.constant(["male", "female", "male"]))
    probabilities = rows["probabilities"].numpy()
    assert probabilities.shape == (3, 3)  # one probability per species
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert [c.decode() for c in rows["classes"].numpy()] == ["Adelie", "Gentoo", "Chinstrap"]

    run_dir = next(p for p in (tmp_path / "runs").glob("penguins-*") if p.is_dir())  # not the -last.log link
    blessing = json.loads((run_dir / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"] and blessing["value"] >= 0.9 and blessing["baseline_version"] is None
    assert f"eval accuracy: {blessing['value']:.4f} (threshold 0.9000): blessed" in summary
    assert (run_dir / "validate" / "report").is_file()

    # The version's state and lineage, as the pipeline wired them through kfp.local.
    record = json.loads((serving / "penguins" / "versions.json").read_text())["versions"]["1"]
    lineage = record["lineage"]
    assert record["state"] == "stable" and lineage["pipeline"] == "penguins" and lineage["run_id"]
    assert lineage["run_name"] and lineage["data_fingerprint"] and len(lineage["config_digest"]) == 64
    assert lineage["blessing"]["blessed"] and lineage["metrics"]["accuracy"] == blessing["value"]


def test_the_run_records_each_steps_peak_rss_and_the_page_where_train_spent_its_time(first_run):
    """The run's record (gpupipe-run.json) has every step's status, seconds, its task
    process's seconds and peak RSS; the train report's phases start with the task's start and are on the page."""
    from components.contracts import names
    from pipelines.run_dir import RUN_FILE

    tmp_path, _, _ = first_run
    run_dir = next(p for p in (tmp_path / "runs").glob("penguins-*") if p.is_dir())
    record = json.loads((run_dir / RUN_FILE).read_text())["steps"]
    assert list(record) == list(steps.names())
    for name, step in record.items():
        assert step["status"] == "SUCCESS" and step["seconds"] > 0, (name, step)
        assert 20 < step["peak_rss_mb"] < 8192, (name, step)  # a Python with its libraries, well under the machine
        # the task's process, start to exit: inside the step's time (which adds the run's cache work)
        assert 0 < step["task_seconds"] <= step["seconds"], (name, step)
    train = json.loads((run_dir / "train" / "report" / "report.json").read_text())
    phases = [p["name"] for p in train["phases"]]
    assert phases[0] == "start" and phases[-1] == "report" and "epoch 1" in phases
    assert sum(p["seconds"] for p in train["phases"]) <= record["train"]["task_seconds"]  # inside the task's process
    assert "<h3>Where the time went</h3>" in (run_dir / names.RUN_REPORT_PAGE).read_text(encoding="utf-8")


def test_gpupipe_report_prints_the_run_pages_path(first_run, capsys, monkeypatch):
    from pipelines.cli import main  # `gpupipe report` in process, as the command line calls it

    tmp_path, summary, _ = first_run
    run_dir = next(p for p in (tmp_path / "runs").glob("penguins-*") if p.is_dir())  # not the -last.log link
    page = run_dir / "report.html"
    assert f"  run report: {page}" in summary
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    code = main(["report", str(run_dir)])
    out = capsys.readouterr()
    assert code == 0 and out.out == f"{page}\n", out.err
    text = page.read_text(encoding="utf-8")
    blessing = json.loads((run_dir / "evaluate" / "blessing" / "blessing.json").read_text())
    assert f"blessed: accuracy {blessing['value']:.4f} (threshold 0.9000)" in text
    for section in ("Release gate", "Throughput and cost", "Slices", "By island", "drift not checked"):
        assert section in text, section
    # The pool view of the config reads the same run's training report.
    code = main(["report", "configs/penguins.yaml", "--runs-dir", str(tmp_path / "runs")])
    pool = capsys.readouterr()
    report = json.loads((run_dir / "train" / "report" / "report.json").read_text())
    row = pool.out.splitlines()[2].split()
    assert code == 0 and row[:3] == [run_dir.name, "0.0000", f"{report['examples_per_second']:,.1f}"]
    assert row[3] == f"{report['input_wait_fraction']:.1%}", pool.out


def test_the_run_report_renders_its_plots_in_a_browser_without_network(first_run):
    """Headless Chromium, the network cut off: each figure's div holds the SVG Plotly drew
    (plotly.js inlined in the page ran), with the run's own numbers."""
    from tests.fixtures.browser import drawn_plots, rendered_dom

    tmp_path, _, _ = first_run
    run_dir = next(p for p in (tmp_path / "runs").glob("penguins-*") if p.is_dir())  # not the -last.log link
    plots = drawn_plots(rendered_dom(str(run_dir / "report.html")))
    assert sorted(plots) == ["plot-confusion", "plot-loss", "plot-metrics"]  # three classes, nothing served before
    assert all(p["main_svg"] >= 1 for p in plots.values()), plots
    epochs = len(json.loads((run_dir / "train" / "report" / "report.json").read_text())["history"]["loss"])
    assert epochs == 40 and plots["plot-loss"]["traces"] == ["scatter"] and plots["plot-loss"]["points"] == epochs
    assert plots["plot-metrics"]["traces"] == ["scatter"] and plots["plot-metrics"]["points"] == epochs
    evaluation = json.loads((run_dir / "evaluate" / "blessing" / "evaluation.json").read_text())
    assert plots["plot-confusion"]["traces"] == ["heatmap"]
    assert plots["plot-confusion"]["labels"] == [str(n) for row in evaluation["confusion_matrix"] for n in row]


def test_live_progress_shows_on_a_non_tty(first_run):
    """stderr is a pipe here: plain progress lines, the first and the last epoch at least."""
    _, _, console = first_run
    lines = console.splitlines()
    assert lines[0] == f"gpupipe run penguins: running {len(steps.names())} steps locally (kfp.local)"
    progress = [line for line in lines if line.startswith("  train       epoch ")]
    assert progress[0].startswith("  train       epoch 1/40 step 9/360 loss ")
    assert progress[-1].startswith("  train       epoch 40/40 step 360/360 loss ") and progress[-1].endswith(" eta 0s")
    assert all(" examples/s " in line and "\r" not in line and "\x1b" not in line for line in progress)
    done = next(i for i, line in enumerate(lines) if line.startswith("  train       SUCCESS in "))
    assert lines.index(progress[-1]) < done


def test_second_run_compares_with_the_first_runs_version(first_run, s3_bucket):
    """Run 1 pushed version 1. Run 2 (one epoch at a tiny learning rate: a worse model)
    validates against version 1's statistics, scores version 1 as its baseline, fails the
    change threshold and is not pushed. Its model is built by a custom module
    (training.custom_model), which the train task's own process imports."""
    import yaml

    from components.contracts import storage
    from pipelines.config import parse_config
    from pipelines.local_run import run_local

    tmp_path, _, _ = first_run
    serving = tmp_path / "serving"
    stored = serving / "penguins" / "1" / "assets.extra"
    assert (stored / "gpupipe" / "stats.pb").is_file() and (stored / "gpupipe" / "schema.pbtxt").is_file()
    assert (stored / "tf_serving_warmup_requests").is_file()

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["training"]["learning_rate"] = 0.0003
    raw["training"]["custom_model"] = "tests.custom_model_example:build"
    second = run_local(parse_config(raw), runs_dir=str(tmp_path / "runs-2"),
                       overrides={"serving_base": f"s3://{s3_bucket}/serving", "epochs": 1, "eval_threshold": 0.0,
                                  "data_source": f"s3://{s3_bucket}/data/penguins.csv"})
    assert second.ok  # every step ran; the gate said no
    assert second.validation["baseline"] == "served version 1" and second.validation["drift"] == []
    assert second.blessing["baseline_version"] == 1 and not second.blessing["blessed"]
    assert any("vs served version 1" in r and "fails the change threshold -0.0200" in r
               for r in second.blessing["reasons"])
    text = second.render()
    assert "data drift vs served version 1: no drift past thresholds" in text
    assert "baseline: served version 1, accuracy" in text
    assert "not pushed: not blessed: accuracy" in text
    versions = {storage.relative(e, f"s3://{s3_bucket}/serving/penguins").split("/")[0]
                for e in storage.list_prefix(f"s3://{s3_bucket}/serving/penguins")}
    assert sorted(v for v in versions if v.isdigit()) == ["1"]  # no version 2
    page = Path(second.report).read_text(encoding="utf-8")  # the run report: the gate and the drift
    assert "not blessed: accuracy" in page and "Baseline: served version 1, accuracy" in page
    assert 'id="plot-drift"' in page and "Baseline: served version 1. No feature drifted past its threshold." in page
    push_summary = next(Path(second.run_dir).glob("push/summary")).read_text()  # the push task's UI output
    assert push_summary.startswith("# Not pushed") and "not pushed: not blessed: accuracy" in push_summary

    # The custom module's model, as trained and exported by the train task.
    report = json.loads((Path(second.run_dir) / "train" / "report" / "report.json").read_text())
    assert report["model"] == "tests.custom_model_example:build"
    import tensorflow as tf

    loaded = tf.saved_model.load(str(Path(second.run_dir) / "train" / "model"))
    assert any(v.name.startswith("custom_hidden") for v in loaded.model_variables)
    out = loaded.signatures["serving_default"](
        bill_length_mm=tf.constant([39.1]), bill_depth_mm=tf.constant([18.7]), flipper_length_mm=tf.constant([181.0]),
        body_mass_g=tf.constant([3750.0]), island=tf.constant(["Torgersen"]), sex=tf.constant(["male"]))
    assert out["probabilities"].shape == (1, 3)


def test_bad_data_stops_the_run_before_training(tmp_path):
    from pipelines.config import load_config
    from pipelines.local_run import run_local

    # Eval rows hold island names never seen in training: TFDV flags them, validate fails.
    lines = (ROOT / "data" / "penguins.csv").read_text().splitlines()
    rows = [lines[0]] + [l.replace("Dream", f"Atlantis{i}") for i, l in enumerate(lines[1:])]
    data = tmp_path / "drifted.csv"
    data.write_text("\n".join(rows) + "\n")
    serving = tmp_path / "serving"
    summary = run_local(load_config(ROOT / "configs" / "penguins.yaml"), runs_dir=str(tmp_path / "runs"),
                        overrides={"data_source": str(data), "serving_base": str(serving)})
    assert not summary.ok
    statuses = {s.name: s.status for s in summary.steps}
    assert statuses == {"fingerprint": "SUCCESS", "ingest": "SUCCESS", "validate": "FAILURE", "train": "NOT RUN",
                        "evaluate": "NOT RUN", "push": "NOT RUN", "report": "NOT RUN"}
    assert len(summary.errors) == 1
    assert summary.errors[0].startswith("validate: data validation found") and "feature 'island'" in summary.errors[0]
    assert not os.path.exists(serving)
