"""The whole pipeline through kfp.local (SubprocessRunner), as `gpupipe run` runs it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


def test_penguins_end_to_end_pushes_a_servable_model(tmp_path):
    serving = tmp_path / "serving"
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "configs/penguins.yaml", "--runs-dir", str(tmp_path / "runs"),
         "--serving-base", str(serving)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = out.stdout
    for step in ("ingest", "validate", "train", "evaluate", "push"):
        assert f"  {step:<9} SUCCESS" in summary
    assert f"pushed version 1: {serving / 'penguins' / '1'}" in summary

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

    run_dir = next((tmp_path / "runs").glob("penguins-*"))
    blessing = json.loads((run_dir / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"] and blessing["value"] >= 0.9
    assert f"eval accuracy: {blessing['value']:.4f} (threshold 0.9000): blessed" in summary
    assert (run_dir / "validate" / "report").is_file()


def test_model_below_threshold_is_not_pushed(tmp_path):
    from pipelines.config import load_config
    from pipelines.local_run import run_local

    serving = tmp_path / "serving"
    summary = run_local(load_config(ROOT / "configs" / "penguins.yaml"), runs_dir=str(tmp_path / "runs"),
                        overrides={"epochs": 1, "eval_threshold": 0.999, "serving_base": str(serving)})
    assert summary.ok  # every step ran; the gate said no
    assert summary.push["pushed"] is False
    assert "below threshold 0.9990" in summary.push["reason"]
    assert "not pushed: not blessed: accuracy" in summary.render()
    assert not serving.exists() or not any(serving.rglob("saved_model.pb"))


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
    assert statuses == {"ingest": "SUCCESS", "validate": "FAILURE", "train": "NOT RUN", "evaluate": "NOT RUN",
                        "push": "NOT RUN"}
    assert len(summary.errors) == 1
    assert summary.errors[0].startswith("validate: data validation found") and "feature 'island'" in summary.errors[0]
    assert not os.path.exists(serving)
