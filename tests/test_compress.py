"""The compressed export across train and evaluate on the penguins model (conftest's
penguin_model, penguin_examples): train's conversion (components/train/compress.py) writes
model.tflite and its record into the model, evaluate scores it beside the SavedModel
(components/evaluate/compressed.py) and gates on evaluation.max_compression_drop."""
import json
import shutil

import pytest

from components.contracts.compressed import load_compression
from components.evaluate.compressed import drop, render_forms
from components.evaluate.logic import run_evaluate
from components.evaluate.settings import EvaluationSettings
from components.train.compress import compress_export

pytestmark = pytest.mark.unit


@pytest.fixture
def float16_model(tmp_path, penguin_model, penguin_examples) -> str:
    model_dir = str(tmp_path / "model")
    shutil.copytree(penguin_model, model_dir)
    compress_export(model_dir, penguin_examples, "float16")
    return model_dir


def test_float32_writes_nothing_beside_the_saved_model(tmp_path, penguin_model, penguin_examples):
    model_dir = str(tmp_path / "model")
    shutil.copytree(penguin_model, model_dir)
    assert compress_export(model_dir, penguin_examples, "float32") is None
    assert not (tmp_path / "model" / "model.tflite").exists() and load_compression(model_dir) is None


def test_float16_answers_as_the_saved_model_on_train_rows(float16_model):
    record = load_compression(float16_model)
    assert record["export"] == "float16" and record["quantization"] == "float16 weights"
    assert record["tflite_bytes"] > 0 and record["variables_bytes"] > 0
    check = record["train_check"]
    assert check["rows"] > 100 and check["class_agreement"] == 1.0 and check["max_abs_difference"] < 0.01


def test_evaluate_scores_both_forms_and_says_so_in_the_gate_and_the_report(tmp_path, float16_model,
                                                                          penguin_examples):
    report = tmp_path / "report.md"
    evaluation, blessing = run_evaluate(model_dir=float16_model, examples_dir=penguin_examples,
                                        blessing_dir=str(tmp_path / "blessing"), report_md=str(report),
                                        settings=EvaluationSettings(metric="log_loss", max_compression_drop=0.05))
    saved, lite = evaluation.compressed["forms"]
    assert saved["metrics"]["log_loss"] == evaluation.metrics["log_loss"]
    assert abs(lite["metrics"]["log_loss"] - saved["metrics"]["log_loss"]) < 0.01
    assert evaluation.compressed["drop"] == pytest.approx(drop("log_loss", saved["metrics"]["log_loss"],
                                                               lite["metrics"]["log_loss"]))
    (line,) = [r for r in blessing.reasons if "TFLite" in r]
    assert line.startswith(f"log_loss {lite['metrics']['log_loss']:.4f} of the float16 TFLite model")
    assert f"(accuracy {lite['metrics']['accuracy']:.4f} vs {saved['metrics']['accuracy']:.4f})" in line
    assert line.endswith("within evaluation.max_compression_drop 0.05")
    written = json.loads((tmp_path / "blessing" / "evaluation.json").read_text())
    assert written["compressed"]["forms"] == evaluation.compressed["forms"]
    assert "## Forms (serving.export)" in report.read_text() and render_forms(None) == ""
    # lower is better for log_loss and rmse: a drop is an increase there, a decrease elsewhere
    assert drop("log_loss", 0.2, 0.25) == pytest.approx(0.05) and drop("accuracy", 0.9, 0.85) == pytest.approx(0.05)
