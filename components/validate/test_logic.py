"""Unit tests of validate logic: real TFDV statistics, schema and anomalies."""
import base64
import os
import re

import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.errors import GpupipeError
from components.ingest.logic import ingest_csv
from components.validate.logic import load_statistics, run_validation

pytestmark = pytest.mark.unit


def test_statistics_schema_report_for_both_splits(penguin_examples, penguin_validation):
    train = load_statistics(penguin_validation["statistics"], "train")
    evals = load_statistics(penguin_validation["statistics"], "eval")
    assert train.num_examples + evals.num_examples == 344
    mass = next(f for f in train.features if f.path.step[0] == "body_mass_g")
    assert 3000 < mass.num_stats.mean < 5500
    schema_text = open(os.path.join(penguin_validation["schema"], "schema.pbtxt")).read()
    assert 'name: "species"' in schema_text and "min_fraction: 1.0" in schema_text
    assert "No anomalies." in open(os.path.join(penguin_validation["anomalies"], "anomalies.md")).read()
    # TFDV's Facets report embeds both splits' statistics as a base64 proto.
    html = open(penguin_validation["report"]).read()
    embedded = re.search(r'proto-input="([A-Za-z0-9+/=]+)"', html).group(1)
    shown = statistics_pb2.DatasetFeatureStatisticsList.FromString(base64.b64decode(embedded))
    assert sorted(d.name for d in shown.datasets) == ["eval", "train"]


def _ingest(tmp_path, text):
    src = tmp_path / "data.csv"
    src.write_text(text)
    out = str(tmp_path / "examples")
    ingest_csv(str(src), out, "label", ["x"], ["color"], eval_percent=50)
    return out


def test_unseen_categorical_values_in_eval_fail_with_readable_list(tmp_path):
    # Rows whose colour is never seen in train land in eval by hash; force it with many rows.
    rows = "".join(f"a,{i}.0,{'red' if i % 2 else 'blue'}\n" for i in range(60))
    rows += "".join(f"b,{i}.0,green{i}\n" for i in range(60))
    examples = _ingest(tmp_path, "label,x,color\n" + rows)
    dirs = {k: str(tmp_path / k) for k in ("s", "c", "a")}
    with pytest.raises(GpupipeError) as err:
        run_validation(examples, "label", dirs["s"], dirs["c"], dirs["a"], str(tmp_path / "r.html"))
    message = str(err.value)
    assert "feature 'color'" in message and "eval:" in message and "\n" not in message
    summary = open(os.path.join(dirs["a"], "anomalies.md")).read()
    assert "- eval: feature 'color'" in summary  # outputs are written before the step fails


def test_anomalies_only_warn_when_configured(tmp_path):
    rows = "".join(f"a,{i}.0,{'red' if i % 2 else 'blue'}\n" for i in range(60))
    rows += "".join(f"b,{i}.0,green{i}\n" for i in range(60))
    examples = _ingest(tmp_path, "label,x,color\n" + rows)
    result = run_validation(examples, "label", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), fail_on_anomalies=False)
    assert any("color" in p for p in result.problems)


def _shifted_penguins(tmp_path, penguins_csv, column, factor):
    """The penguins data with one numeric column scaled by `factor`, ingested."""
    import csv

    tmp_path = tmp_path / f"{column}-{factor}"
    tmp_path.mkdir()
    rows = list(csv.DictReader(open(penguins_csv)))
    for row in rows:
        if row[column] != "NA":
            row[column] = str(float(row[column]) * factor)
    path = tmp_path / "shifted.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = str(tmp_path / "examples")
    ingest_csv(str(path), out, "species", ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"],
               ["island", "sex"], eval_percent=20)
    return out


def test_numeric_drift_past_threshold_against_baseline_fails(tmp_path, penguins_csv, penguin_validation):
    from components.validate.logic import DriftSettings

    baseline = load_statistics(penguin_validation["statistics"], "train")
    examples = _shifted_penguins(tmp_path, penguins_csv, "body_mass_g", 1.6)
    with pytest.raises(GpupipeError) as err:
        run_validation(examples, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                       str(tmp_path / "r.html"), baseline_stats=baseline, baseline_name="served version 1",
                       drift=DriftSettings(numeric_threshold=0.3))
    message = str(err.value)
    assert "train vs served version 1: feature 'body_mass_g'" in message and "Jensen-Shannon" in message
    assert "bill_length_mm" not in message  # unshifted columns do not drift
    summary = (tmp_path / "a" / "anomalies.md").read_text()
    assert "Baseline: served version 1." in summary and "body_mass_g" in summary


def test_same_data_does_not_drift_and_warn_only_drift_passes(tmp_path, penguins_csv, penguin_validation):
    from components.validate.logic import DriftSettings

    baseline = load_statistics(penguin_validation["statistics"], "train")
    same = _shifted_penguins(tmp_path, penguins_csv, "body_mass_g", 1.0)
    result = run_validation(same, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), baseline_stats=baseline, baseline_name="served version 1")
    assert result.ok and result.baseline == "served version 1"
    shifted = _shifted_penguins(tmp_path, penguins_csv, "flipper_length_mm", 1.5)
    result = run_validation(shifted, "species", str(tmp_path / "s2"), str(tmp_path / "c2"), str(tmp_path / "a2"),
                            str(tmp_path / "r2.html"), baseline_stats=baseline, baseline_name="served version 1",
                            drift=DriftSettings(blocking=False))
    assert [line.split(":")[1].strip() for line in result.drift] == ["feature 'flipper_length_mm'"]
