"""The compressed export (issue #40, acceptance 2): with serving.export int8 a `gpupipe run` pushes
a version holding the SavedModel and model.tflite, evaluate scores both forms on the eval
split, and with evaluation.max_compression_drop 0 the release gate refuses the int8 model in
one line. Run on the click-through model (configs/ctr.yaml's cross network on a small
synthetic table), whose embeddings dynamic-range quantization does shrink; its log_loss, the
gated metric here, is convex in the logits, so the quantization's noise makes it worse."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("compressed-export")]
ROOT = Path(__file__).resolve().parents[1]


def ctr_int8(tmp_path, **evaluation) -> str:
    raw = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    raw["data"]["source"] = "synthetic:ctr?rows=6000&seed=7"
    # smaller tables and layers than the config's: the same shapes, a faster save and conversion
    raw["training"].update(epochs=2, batch_size=256, hash_buckets=2000, hidden_units=[64, 32])
    raw["evaluation"] = {"metric": "log_loss", "threshold": 0.6, "must_beat_baseline": False, **evaluation}
    raw["serving"]["export"] = "int8"
    path = tmp_path / f"ctr-int8-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def gpupipe_run(config: str, tmp_path) -> str:
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", config, "--runs-dir", str(tmp_path / "runs"),
                          "--serving-base", str(tmp_path / "serving"), "--quiet"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def evaluation_of_last_run(tmp_path) -> dict:
    run = sorted(p for p in (tmp_path / "runs").glob("ctr-*") if p.is_dir())[-1]  # not the -last.log link
    (path,) = run.glob("evaluate/**/evaluation.json")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def int8_runs(tmp_path_factory):
    """Two runs: int8 within the default max_compression_drop (pushed), then the same model
    (train reused) with max_compression_drop 0."""
    tmp_path = tmp_path_factory.mktemp("int8")
    first = gpupipe_run(ctr_int8(tmp_path), tmp_path)
    first_evaluation = evaluation_of_last_run(tmp_path)
    second = gpupipe_run(ctr_int8(tmp_path, max_compression_drop=0), tmp_path)
    return tmp_path, first, first_evaluation, second


def test_an_int8_run_pushes_the_saved_model_and_model_tflite(int8_runs):
    tmp_path, summary, evaluation, _ = int8_runs
    assert "pushed version 1:" in summary
    version = tmp_path / "serving" / "ctr" / "1"
    assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir()
    tflite = version / "model.tflite"
    record = json.loads((version / "assets.extra" / "gpupipe_compression.json").read_text())
    assert record["export"] == "int8" and record["tflite_bytes"] == tflite.stat().st_size
    # the embeddings' int8 weights: at least 2x smaller than the SavedModel's variables
    assert record["variables_bytes"] >= 2 * record["tflite_bytes"]
    assert record["train_check"]["rows"] > 0 and record["train_check"]["class_agreement"] > 0.95
    # TF Serving still loads the SavedModel; the TFLite model answers the same signature
    import tensorflow as tf

    from components.contracts.compressed import tflite_runner

    assert "serving_default" in tf.saved_model.load(str(version)).signatures
    import numpy as np

    outputs = tflite_runner(str(tflite))({**{f"I{i}": np.ones(2, np.float32) for i in range(1, 14)},
                                          **{f"C{i}": np.array([b"a", b""]) for i in range(1, 27)}})
    assert set(outputs) == {"classes", "probabilities"}


def test_evaluate_reports_both_forms_accuracy_and_size(int8_runs):
    _, summary, evaluation, _ = int8_runs
    saved, lite = evaluation["compressed"]["forms"]
    assert (saved["form"], lite["form"]) == ("SavedModel (float32)", "TFLite (int8)")
    for form in (saved, lite):
        assert 0.5 < form["metrics"]["accuracy"] <= 1 and form["bytes"] > 0
    assert saved["metrics"]["accuracy"] == evaluation["metrics"]["accuracy"]
    (line,) = [line for line in summary.splitlines() if "of the int8 TFLite model" in line]
    assert f"(accuracy {lite['metrics']['accuracy']:.4f} vs {saved['metrics']['accuracy']:.4f})" in line
    assert "within evaluation.max_compression_drop 0.01" in line
    assert evaluation["compressed"]["drop"] > 0  # quantization cost something, so a limit of 0 must refuse


def test_max_compression_drop_0_refuses_the_release_in_one_line(int8_runs):
    _, _, evaluation, summary = int8_runs
    assert "  train       CACHED" in summary  # the same model, held to the stricter limit
    assert "not blessed" in summary and "pushed version" not in summary
    reasons = [line.strip()[2:] for line in summary.splitlines() if line.strip().startswith("- ")]
    (refusal,) = [r for r in reasons if "max_compression_drop" in r]  # the gate's one line
    drop = evaluation["compressed"]["drop"]
    assert refusal.endswith(f"a drop of {drop:.4g} exceeds evaluation.max_compression_drop 0; raise it, or export "
                            "another form (serving.export: float16 or float32)")
    assert f"  not pushed: not blessed: {refusal}" in summary.splitlines()
