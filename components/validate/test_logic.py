"""Unit tests of validate logic: real TFDV statistics, schema and anomalies."""
import base64
import os
import re

import pytest
from tensorflow_metadata.proto.v0 import statistics_pb2

from components.contracts.errors import GpupipeError
from components.contracts.statistics import load_statistics
from components.validate.logic import run_validation
from components.validate.settings import DriftSettings, ValidationSettings

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


@pytest.fixture
def ingest_text(tmp_path, ingest):
    def write(text):
        src = tmp_path / "data.csv"
        src.write_text(text)
        out = str(tmp_path / "examples")
        ingest(str(src), out, "label", ["x"], ["color"], eval_percent=50)
        return out

    return write


def test_unseen_categorical_values_in_eval_fail_with_readable_list(tmp_path, ingest_text):
    # Rows whose colour is never seen in train land in eval by hash; force it with many rows.
    rows = "".join(f"a,{i}.0,{'red' if i % 2 else 'blue'}\n" for i in range(60))
    rows += "".join(f"b,{i}.0,green{i}\n" for i in range(60))
    examples = ingest_text("label,x,color\n" + rows)
    dirs = {k: str(tmp_path / k) for k in ("s", "c", "a")}
    with pytest.raises(GpupipeError) as err:
        run_validation(examples, "label", dirs["s"], dirs["c"], dirs["a"], str(tmp_path / "r.html"))
    message = str(err.value)
    assert "feature 'color'" in message and "eval:" in message and "\n" not in message
    summary = open(os.path.join(dirs["a"], "anomalies.md")).read()
    assert "- eval: feature 'color'" in summary  # outputs are written before the step fails


def test_anomalies_only_warn_when_configured(tmp_path, ingest_text):
    rows = "".join(f"a,{i}.0,{'red' if i % 2 else 'blue'}\n" for i in range(60))
    rows += "".join(f"b,{i}.0,green{i}\n" for i in range(60))
    examples = ingest_text("label,x,color\n" + rows)
    result = run_validation(examples, "label", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), ValidationSettings(fail_on_anomalies=False))
    assert any("color" in p for p in result.problems)


def _shifted_penguins(ingest, tmp_path, penguins_csv, column, factor):
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
    ingest(str(path), out, "species", ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"],
               ["island", "sex"], eval_percent=20)
    return out


def test_numeric_drift_past_threshold_against_baseline_fails(tmp_path, ingest, penguins_csv, penguin_validation):
    baseline = load_statistics(penguin_validation["statistics"], "train")
    examples = _shifted_penguins(ingest, tmp_path, penguins_csv, "body_mass_g", 1.6)
    with pytest.raises(GpupipeError) as err:
        run_validation(examples, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                       str(tmp_path / "r.html"), ValidationSettings(drift=DriftSettings(numeric_threshold=0.3)),
                       baseline_stats=baseline, baseline_name="served version 1")
    message = str(err.value)
    assert "train vs served version 1: feature 'body_mass_g'" in message and "Jensen-Shannon" in message
    assert "bill_length_mm" not in message  # unshifted columns do not drift
    summary = (tmp_path / "a" / "anomalies.md").read_text()
    assert "Baseline: served version 1." in summary and "body_mass_g" in summary


def test_same_data_does_not_drift_and_warn_only_drift_passes(tmp_path, ingest, penguins_csv, penguin_validation):
    baseline = load_statistics(penguin_validation["statistics"], "train")
    same = _shifted_penguins(ingest, tmp_path, penguins_csv, "body_mass_g", 1.0)
    result = run_validation(same, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), baseline_stats=baseline, baseline_name="served version 1")
    assert result.ok and result.baseline == "served version 1"
    shifted = _shifted_penguins(ingest, tmp_path, penguins_csv, "flipper_length_mm", 1.5)
    result = run_validation(shifted, "species", str(tmp_path / "s2"), str(tmp_path / "c2"), str(tmp_path / "a2"),
                            str(tmp_path / "r2.html"), ValidationSettings(drift=DriftSettings(blocking=False)),
                            baseline_stats=baseline, baseline_name="served version 1")
    assert [line.split(":")[1].strip() for line in result.drift] == ["feature 'flipper_length_mm'"]


def test_in_process_statistics_match_tfdv_on_beam(penguin_examples, penguin_validation):
    """The batch-by-batch in-process path and generate_statistics_from_tfrecord on Beam's
    DirectRunner agree on counts and means."""
    from components.validate.logic import beam_split_statistics, split_statistics

    fast = split_statistics(penguin_examples, "train").datasets[0]
    beam = beam_split_statistics(penguin_examples, "train", ["--runner=DirectRunner"]).datasets[0]
    assert fast.num_examples == beam.num_examples
    by_name = lambda d: {f.path.step[0]: f for f in d.features}  # noqa: E731
    for name, feature in by_name(fast).items():
        other = by_name(beam)[name]
        if feature.HasField("num_stats"):
            assert feature.num_stats.mean == pytest.approx(other.num_stats.mean, rel=1e-6)
            assert feature.num_stats.common_stats.num_non_missing == other.num_stats.common_stats.num_non_missing
        else:
            assert feature.string_stats.unique == other.string_stats.unique


def test_statistics_merge_across_batches(tmp_path, monkeypatch, penguin_examples):
    """Many small batches merged give the same statistics as one batch."""
    from components.validate import logic

    whole = logic.split_statistics(penguin_examples, "train").datasets[0]
    monkeypatch.setattr(logic, "READ_BATCH", 7)
    merged = logic.split_statistics(penguin_examples, "train").datasets[0]
    assert merged.num_examples == whole.num_examples
    for a, b in zip(sorted(whole.features, key=str), sorted(merged.features, key=str)):
        if a.HasField("num_stats"):
            assert a.num_stats.mean == pytest.approx(b.num_stats.mean, rel=1e-6)
            assert a.num_stats.std_dev == pytest.approx(b.num_stats.std_dev, rel=1e-5)


def test_curated_schema_catches_a_column_full_of_unseen_values(tmp_path, ingest, penguins_csv, penguin_validation):
    """With the schema reviewed from earlier data, a categorical column whose values were
    never seen stops the run, naming the column."""
    schema = os.path.join(penguin_validation["schema"], "schema.pbtxt")
    text = open(penguins_csv).read()
    for island in ("Biscoe", "Dream", "Torgersen"):
        text = text.replace(f",{island},", f",{island}-new,")
    src = tmp_path / "unseen.csv"
    src.write_text(text)
    out = str(tmp_path / "examples")
    ingest(str(src), out, "species", ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"],
               ["island", "sex"])
    with pytest.raises(GpupipeError) as err:
        run_validation(out, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                       str(tmp_path / "r.html"), ValidationSettings(schema_file=schema))
    from components.contracts.examples import read_manifest

    train_rows = read_manifest(out)["rows"]["train"]
    assert (f"train: feature 'island': {train_rows} of {train_rows} train rows (100.00%) hold values unseen in training "
            f"('Biscoe-new', ") in str(err.value)
    assert f"add them to the domain of 'island' in {schema} (validation.schema_file)" in str(err.value)
    result = run_validation(out, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), ValidationSettings(schema_file=schema, warn_only=["island"]))
    assert any("island" in p for p in result.problems)  # reported, not blocking


def test_train_eval_skew_is_reported(tmp_path, ingest_text):
    rows = "".join(f"a,{i}.0,{'red' if i % 2 else 'blue'}\n" for i in range(200))
    examples = ingest_text("label,x,color\n" + rows)
    result = run_validation(examples, "label", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                            str(tmp_path / "r.html"), ValidationSettings(skew_threshold=0.3))
    assert result.ok  # the same distribution in both splits


def test_ingest_statistics_match_statistics_decoded_from_the_shards(penguin_examples):
    """Validate uses the statistics ingest computed on its Arrow batches; they equal the
    statistics of the written shards."""
    from components.validate.logic import ingest_statistics, split_statistics

    from_ingest = ingest_statistics(penguin_examples)
    assert from_ingest is not None
    for split in ("train", "eval"):
        a = from_ingest[split].datasets[0]
        b = split_statistics(penguin_examples, split).datasets[0]
        assert a.num_examples == b.num_examples
        means_a = {f.path.step[0]: f.num_stats.mean for f in a.features if f.HasField("num_stats")}
        means_b = {f.path.step[0]: f.num_stats.mean for f in b.features if f.HasField("num_stats")}
        assert means_a.keys() == means_b.keys()
        for name in means_a:
            assert means_a[name] == pytest.approx(means_b[name], rel=1e-6)
        def missing(dataset):
            return {f.path.step[0]: (f.num_stats if f.HasField("num_stats") else f.string_stats).common_stats.num_missing
                    for f in dataset.features}

        assert missing(a) == missing(b) and sum(missing(a).values()) > 0


def test_a_few_unseen_categories_are_tolerated_and_more_are_not():
    """Eval values of a categorical feature unseen in training: within the tolerance (1% by
    default) the model's out-of-vocabulary row takes them; past it, or for the label, they
    are an anomaly."""
    import pandas as pd
    import tensorflow_data_validation as tfdv

    from components.validate.logic import describe_anomalies, infer_schema

    train = tfdv.generate_statistics_from_dataframe(pd.DataFrame(
        {"label": ["a", "b"] * 200, "color": ["red", "blue"] * 200}))

    def problems(colors, labels=None, **settings):
        evals = tfdv.generate_statistics_from_dataframe(pd.DataFrame(
            {"label": labels or (["a", "b"] * len(colors))[:len(colors)], "color": colors}))
        schema = infer_schema(train, "label", ValidationSettings(**settings))
        return describe_anomalies("eval", tfdv.validate_statistics(evals, schema))

    few = ["red", "blue"] * 100 + ["purple"]  # 1 in 201: under 1%
    assert problems(few[:-1] + ["red"]) == [] and problems(few + ["red"]) == []
    assert [p.split(":")[1].strip() for p in problems(few + ["red"], unseen_category_tolerance=0.0)] == [
        "feature 'color'"]
    many = ["red", "blue"] * 40 + ["purple", "green"] * 10  # 20%
    assert [p.split(":")[1].strip() for p in problems(many)] == ["feature 'color'"]
    assert problems(many, unseen_category_tolerance_by_feature={"color": 0.25}) == []
    assert [p.split(":")[1].strip() for p in problems(few + ["red"], labels=["a", "b"] * 100 + ["c", "a"])] == [
        "feature 'label'"]


def test_tolerated_unseen_categories_are_a_warning_line_in_the_markdown(tmp_path):
    """Below the tolerance, unseen values pass, but not silently: one warning line per
    split and feature naming the fraction and the tolerance, in validate's Markdown and
    validation.json (which the run summary shows: tests/test_bad_input.py)."""
    import json

    import pandas as pd
    import tensorflow_data_validation as tfdv

    from components.validate.logic import ValidationResult, infer_schema, tolerated_unseen, write_outputs

    frame = pd.DataFrame({"label": ["a", "b"] * 200, "color": ["red", "blue"] * 200, "shape": ["o", "x"] * 200})
    train = tfdv.generate_statistics_from_dataframe(frame)
    evals = tfdv.generate_statistics_from_dataframe(pd.DataFrame(
        {"label": ["a", "b"] * 100 + ["a"], "color": ["red", "blue"] * 100 + ["purple"], "shape": ["o"] * 201}))
    stats = {"train": train, "eval": evals}
    schema = infer_schema(train, "label", ValidationSettings(unseen_category_tolerance_by_feature={"color": 0.02}))
    lines = tolerated_unseen(stats, schema, "label", problems=[])
    assert lines == ["eval: feature 'color': 0.50% of values (1 of 201) unseen in training, within the tolerance "
                     "2.00% (validation.unseen_category_tolerance): the model's out-of-vocabulary row takes them"]
    assert tolerated_unseen(stats, schema, "label", problems=["eval: feature 'color': too many"]) == []
    dirs = [str(tmp_path / k) for k in ("s", "c", "a")]
    write_outputs(ValidationResult(statistics=stats, schema=schema, anomalies={}, warnings=lines), *dirs,
                  str(tmp_path / "r.html"), str(tmp_path / "summary.md"))
    markdown = (tmp_path / "summary.md").read_text()
    assert "## Warnings\n\n- warning: eval: feature 'color': 0.50% of values" in markdown
    validation = json.loads((tmp_path / "a" / "validation.json").read_text())
    assert validation["warnings"] == lines
