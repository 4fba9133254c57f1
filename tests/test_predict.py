"""Batch scoring (`gpupipe predict`, components/predict): data/penguins.csv scored with a pushed
version through its serving_examples signature gives one prediction per row, in order, the
same classes as the model's other signature (serving_default, raw features) gives, and the
same output from Beam's DirectRunner as from the local engine; the scoring pipeline compiles."""
import csv
import json
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("predict")]
ROOT = Path(__file__).resolve().parents[1]
PENGUINS = ROOT / "data" / "penguins.csv"


@pytest.fixture(scope="module")
def served(tmp_path_factory, penguin_model):
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings

    base = tmp_path_factory.mktemp("predict") / "serving"
    result = push_model(ServingSettings(base=str(base), model_name="penguins"), penguin_model,
                        Blessing(True, "accuracy", 1.0, 0.0, ["a test model"]))
    assert result.pushed and result.version == 1
    return base


def gpupipe(capsys, *args) -> tuple:
    """`gpupipe ARGS` as the command runs it (in this process: TensorFlow is imported once)."""
    from pipelines.cli import main

    capsys.readouterr()
    code = main([*args])
    out = capsys.readouterr()
    return code, out.out, out.err


def predict(capsys, tmp_path, served, output: str, *extra):
    code, out, err = gpupipe(capsys, "predict", str(ROOT / "configs" / "penguins.yaml"), "--data", str(PENGUINS),
                             "--output", str(tmp_path / output), "--serving-base", str(served), *extra)
    assert code == 0, err[-3000:]
    return out


def test_every_row_gets_the_class_the_serving_signature_gives(tmp_path, served, capsys):
    import numpy as np
    import pandas as pd
    import tensorflow as tf

    said = predict(capsys, tmp_path, served, "penguins.csv")
    rows = list(csv.DictReader(open(tmp_path / "penguins.csv")))
    table = pd.read_csv(PENGUINS)
    assert said.strip() == f"predict: {len(table)} rows scored with version 1 (local) -> {tmp_path / 'penguins.csv'}"
    assert len(rows) == len(table) and [int(r["row"]) for r in rows] == list(range(len(table)))
    assert list(rows[0]) == ["row", "classes", "probabilities_Adelie", "probabilities_Chinstrap",
                             "probabilities_Gentoo"]
    for r in rows:
        assert abs(sum(float(r[f"probabilities_{c}"]) for c in ("Adelie", "Chinstrap", "Gentoo")) - 1) < 1e-4

    # the other signature, fed the complete rows as raw values: the same classes
    serve = tf.saved_model.load(str(served / "penguins" / "1")).signatures["serving_default"]
    numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    complete = table.dropna(subset=[*numeric, "island", "sex"])
    inputs = {c: tf.constant(complete[c].to_numpy(np.float32)) for c in numeric}
    inputs.update({c: tf.constant(complete[c].astype(str).to_numpy()) for c in ("island", "sex")})
    if "year" in serve.structured_input_signature[1]:
        inputs["year"] = tf.constant(complete["year"].to_numpy(np.float32))
    expected = [c.decode() for c in serve(**inputs)["classes"].numpy()]
    assert [rows[i]["classes"] for i in complete.index] == expected
    assert len(complete) < len(table)  # rows with missing values were scored too (imputed in the graph)


def test_beams_directrunner_writes_the_same_predictions(tmp_path, served, capsys):
    predict(capsys, tmp_path, served, "local.jsonl")
    said = predict(capsys, tmp_path, served, "beam.jsonl", "--engine", "beam")
    assert "(beam)" in said
    local = [json.loads(line) for line in open(tmp_path / "local.jsonl")]
    beam = [json.loads(line) for line in open(tmp_path / "beam.jsonl")]
    assert len(local) == 344 and [r["classes"] for r in beam] == [r["classes"] for r in local]
    assert all(abs(a["probabilities_Gentoo"] - b["probabilities_Gentoo"]) < 1e-6 for a, b in zip(local, beam))


def test_a_missing_version_or_output_format_is_one_line(tmp_path, served, capsys):
    for extra, message in ((["--version", "7", "--output", str(tmp_path / "p.csv")], "--version 7: "),
                           (["--output", str(tmp_path / "p.parquet")], "write predictions to a .csv or .jsonl")):
        code, _, err = gpupipe(capsys, "predict", str(ROOT / "configs" / "penguins.yaml"), "--data", str(PENGUINS),
                               "--serving-base", str(served), *extra)
        assert code == 1 and "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert line.startswith("error: ") and message in line
    assert not (tmp_path / "p.csv").exists()


def test_the_scoring_pipeline_is_one_task_with_the_served_version_as_a_parameter():
    from pipelines.cli import compile_to_text
    from pipelines.config import load_config

    spec = next(yaml.safe_load_all(compile_to_text(load_config(ROOT / "configs" / "penguins.yaml"), scoring=True)))
    assert spec["pipelineInfo"]["name"] == "penguins-scoring"
    assert list(spec["root"]["dag"]["tasks"]) == ["predict"]
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert inputs["version"]["defaultValue"] == "stable"
    assert inputs["output"]["defaultValue"] == "gs://gpupipe-example/serving/predictions/penguins.jsonl"
    (executor,) = spec["deploymentSpec"]["executors"].values()
    assert executor["container"]["image"].split("/")[-1].startswith("gpupipe-cpu:")
