"""`gpupipe init DATA --label COLUMN`: a commented config proposed from a sample of the table
(TFDV schema inference) that runs as it is; a label no model can learn is refused in one
line. The acceptance runs: a table built like a real public one (init, then `gpupipe run`,
pushed), and penguins (the proposed config reaches accuracy >= 0.95)."""
import csv
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

# Imported here, while collecting: run_local's default console is the sys.stderr of its first
# import, which inside a capsys test (the in-process `gpupipe run` below) is a stream closed after it.
import pipelines.local_run  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
PENGUINS = ROOT / "data" / "penguins.csv"


def init(capsys, *args) -> tuple:
    """`gpupipe init ...` as the command line runs it: (exit code, stdout lines, stderr lines)."""
    from pipelines.cli import main

    code = main(["init", *map(str, args)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.out.splitlines(), out.err.splitlines()


def write_rows(path: Path, header, rows) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


@pytest.mark.unit
@pytest.mark.parametrize("labels, expected", [
    (["yes"] * 30, "label 'y' has one value ('yes') in its 30 sampled rows, and a model needs two or more: pass "
                   "--label another column, or sample more rows"),
    ([""] * 30, "label 'y' is empty in all 30 sampled rows: pass --label the column to predict"),
    ([f"user{i}" for i in range(30)], "label 'y' has a different value in each of its 30 sampled rows (an ID, not "
                                      "a class): pass --label the column to predict"),
])
def test_a_label_no_model_can_learn_is_refused_in_one_line(tmp_path, capsys, labels, expected):
    data = write_rows(tmp_path / "t.csv", ["x", "y"], [[i, v] for i, v in enumerate(labels)])
    code, out, err = init(capsys, data, "--label", "y", "-o", tmp_path / "c.yaml")
    assert code == 1 and err == [f"error: {data}: {expected}"] and out == []
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.unit
def test_a_label_that_is_not_a_column_names_the_columns(tmp_path, capsys):
    data = write_rows(tmp_path / "t.csv", ["x", "y"], [[1, "a"], [2, "b"]])
    code, _, err = init(capsys, data, "--label", "target", "-o", tmp_path / "c.yaml")
    assert code == 1 and err == [f"error: {data}: no column 'target' (columns: x, y): pass --label one of them"]


@pytest.mark.unit
def test_task_metric_and_threshold_follow_from_the_label(tmp_path):
    from pipelines.init import propose

    rng = np.random.default_rng(0)
    rows = [[f"{rng.normal():.3f}", rng.choice(["a", "b", "c"]), i % 4, f"{rng.normal(50, 10):.2f}",
             int(rng.integers(0, 2))] for i in range(200)]
    data = write_rows(tmp_path / "t.csv", ["x", "color", "grade", "price", "flag"], rows)
    grade = propose(str(data), "grade")
    assert (grade.task, grade.metric, grade.sample_trivial) == ("multiclass", "accuracy", 0.25)  # four equal classes
    regression = propose(str(data), "price")
    assert (regression.task, regression.metric) == ("regression", "rmse")
    assert regression.sample_trivial == pytest.approx(np.std([float(r[3]) for r in rows]), rel=1e-3)
    binary = propose(str(data), "flag")
    assert (binary.task, binary.metric, binary.sample_trivial) == ("binary", "auc", 0.5)
    assert binary.numeric == ["x", "price"] and binary.categorical == ["color", "grade"]  # grade: 4 integer codes
    assert binary.threshold == "from the eval split at run time"


@pytest.mark.unit
def test_an_existing_config_is_never_overwritten(tmp_path, capsys):
    target = tmp_path / "c.yaml"
    target.write_text("mine\n")
    code, _, err = init(capsys, PENGUINS, "--label", "species", "-o", target)
    assert code == 1 and err == [f"error: {target}: exists, and init does not overwrite a config: pass -o a new "
                                 "path, or remove it"]
    assert target.read_text() == "mine\n"


@pytest.mark.unit
def test_the_config_proposed_for_penguins_reaches_accuracy_095(tmp_path, capsys):
    """Acceptance 3: `gpupipe init data/penguins.csv --label species`, then the config's own
    data, training and evaluation settings through ingest, validate, train and evaluate
    (the functions the pipeline's tasks call; in process, to spare the suite a second
    penguins run through kfp.local)."""
    from components.kinds import Columns
    from components.evaluate.logic import score_model
    from components.ingest.logic import run_ingest
    from components.train.logic import train_model
    from components.validate.logic import run_validation
    from pipelines.config import load_config

    target = tmp_path / "penguins.yaml"
    code, out, _ = init(capsys, "data/penguins.csv", "--label", "species", "-o", target)
    assert code == 0 and out[0] == (f"wrote {target}: multiclass label 'species' (accuracy, threshold from the eval "
                                    "split at run time), 4 numeric and 3 categorical feature(s) from 344 sampled rows")
    assert out[-1] == f"next: gpupipe run {target}"
    text = target.read_text()
    assert text.startswith(f"# Proposed by `gpupipe init data/penguins.csv --label species -o {target}` from 344 "
                           "sampled rows (the whole file).")
    assert ("  # (always answering 'Adelie', the most frequent class; on the sampled rows it scores 0.4419).\n"
            "  must_beat_trivial: true\n") in text and "\n  # (must_beat_baseline: on unless set to false)\n  threshold: 0  # " in text
    assert "  #   year: integers with 3 distinct values in the sample: proposed as categorical codes" in text
    config = load_config(target)
    data = config.data
    assert (data.label, config.training.task, config.evaluation.metric) == ("species", "multiclass", "accuracy")
    assert config.evaluation.must_beat_trivial and config.evaluation.threshold == 0
    assert data.numeric_features == ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    assert data.categorical_features == ["island", "sex", "year"]
    # Training length (issue #27): an epoch cap with room for about 20,000 steps (344 rows, batch 32:
    # 9 steps an epoch, so the 300-epoch ceiling), early stopping on a tenth of the train split
    training = config.training
    assert training.epochs == 300 and training.validation_percent == 10
    assert (training.early_stopping.metric, training.early_stopping.patience) == ("loss", 10)

    cwd = os.getcwd()
    os.chdir(ROOT)  # relative data.source starts at the working directory, as in `gpupipe run`
    try:
        ex = str(tmp_path / "ex")
        run_ingest(settings=data, examples_dir=ex)
    finally:
        os.chdir(cwd)
    run_validation(ex, data.label, str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                   str(tmp_path / "r.html"), config.validation)
    report = train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), Columns.part_of(data), config.training)
    accuracy = score_model(str(tmp_path / "m"), ex).metrics["accuracy"]
    assert accuracy >= 0.95, accuracy
    assert report["early_stopping_monitor"] in ("loss", "val_loss") and report["best_epoch"] is not None


def write_census_like(path: Path, rows: int = 3000, seed: int = 7) -> Path:
    """A table built like the issue's real public one (census income): 10 numeric and 6
    text categorical features with missing values in every column, column names as such
    tables have them (spaces, '-', ':', '()'), a binary label missing in about 1% of rows, a
    row ID, one column empty in every row, and 20 countries that occur once each: those
    the split puts into eval are unseen in training (under 1% of eval rows)."""
    rng = np.random.default_rng(seed)
    numeric = {"age (years)": rng.normal(40, 12, rows).clip(17, 90).round(),
               "fnlwgt": rng.lognormal(12, 0.5, rows).round(),
               "education-num": rng.integers(1, 17, rows).astype(float),
               "capital gain": np.where(rng.random(rows) < 0.1, rng.lognormal(8, 1, rows), 0).round(),
               "capital loss": np.where(rng.random(rows) < 0.05, rng.lognormal(7, 0.5, rows), 0).round(),
               "hours per week": rng.normal(40, 10, rows).clip(1, 99).round(),
               "tenure:months": rng.exponential(60, rows).round(1),
               "commute_km": rng.gamma(2, 8, rows).round(1),
               "credit score": rng.normal(650, 80, rows).round(),
               "dependents": rng.poisson(1.2, rows).astype(float)}
    pick = lambda values, p=None: rng.choice(values, rows, p=p)  # noqa: E731
    categorical = {"workclass": pick(["Private", "Self-emp", "Gov", "Without-pay"], [0.7, 0.15, 0.13, 0.02]),
                   "education": pick(["HS-grad", "Some-college", "Bachelors", "Masters", "Doctorate"]),
                   "marital status": pick(["Married", "Never-married", "Divorced", "Widowed"]),
                   "occupation": pick(["Tech", "Sales", "Craft", "Admin", "Service", "Other"]),
                   "relationship": pick(["Husband", "Wife", "Own-child", "Unmarried"]),
                   "native-country": pick(["United-States", "Mexico", "India", "Germany", "Canada"],
                                          [0.85, 0.05, 0.04, 0.03, 0.03])}
    for i, row in enumerate(rng.choice(rows, 20, replace=False)):
        categorical["native-country"][row] = f"Island-{i}"
    z = (0.04 * (numeric["age (years)"] - 40) + 0.25 * (numeric["education-num"] - 9)
         + 0.05 * (numeric["hours per week"] - 40) + 0.0003 * numeric["capital gain"]
         + np.where(categorical["marital status"] == "Married", 1.2, -0.6)
         + np.where(categorical["occupation"] == "Tech", 0.8, 0.0) - 0.5)
    label = np.where(rng.random(rows) < 1 / (1 + np.exp(-z)), ">50K", "<=50K")
    table = []
    for r in range(rows):
        cells = [str(r + 1)]
        cells += ["" if rng.random() < 0.08 else f"{numeric[c][r]:g}" for c in numeric]
        cells += [("NA" if rng.random() < 0.5 else "") if rng.random() < 0.06 else categorical[c][r]
                  for c in categorical]
        table.append([*cells, "", "" if rng.random() < 0.01 else label[r]])
    return write_rows(path, ["id", *numeric, *categorical, "notes", "income"], table)


@pytest.mark.e2e
def test_a_real_looking_table_runs_on_the_config_init_proposes_and_pushes(tmp_path, capsys):
    """Acceptance 2: `gpupipe init` on the table, then `gpupipe run` on the config as written."""
    data = write_census_like(tmp_path / "census.csv")
    target = tmp_path / "census.yaml"
    code, out, _ = init(capsys, data, "--label", "income", "-o", target)
    assert code == 0 and out[0] == (f"wrote {target}: binary label 'income' (auc, threshold from the eval split at run "
                                    "time), 9 numeric and 7 categorical feature(s) from 3000 sampled rows")
    assert "  #   dependents: integers with " in target.read_text()  # a count with few values: codes, said why
    assert "  left out 'notes': empty in every sampled row" in out
    assert ("  left out 'id': a different value in each of its 3000 sampled rows (an ID: nothing a model can learn "
            "from)") in out
    assert "  'age (years)' is age_years in the examples, the schema and the model's inputs" in out
    assert '    - "age (years)"  # the model\'s input: age_years' in target.read_text()

    serving = tmp_path / "serving"
    from pipelines.cli import main  # `gpupipe run` in process (its tasks are still processes of their own)

    code = main(["run", str(target), "--runs-dir", str(tmp_path / "runs"), "--serving-base", str(serving)])
    run = capsys.readouterr()
    assert code == 0 and "Traceback" not in run.err, run.out + run.err
    summary = run.out
    assert "gpupipe run census: SUCCESS" in summary and f"pushed version 1: {serving / 'census' / '1'}" in summary
    assert "  ingest: 27 row(s) without a 'income' dropped (empty or one of data.na_values)" in summary
    warning = next(line for line in summary.splitlines() if line.startswith("  warning: validate: eval: feature "
                                                                            "'native_country': "))
    assert "unseen in training, within the tolerance 1.00% (validation.unseen_category_tolerance)" in warning

    import tensorflow as tf

    version = serving / "census" / "1"
    serve = tf.saved_model.load(str(version)).signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == sorted([
        "age_years", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week", "tenure_months",
        "commute_km", "credit_score", "dependents", "workclass", "education", "marital_status", "occupation",
        "relationship", "native_country"])
    schema = (version / "assets.extra" / "gpupipe" / "schema.pbtxt").read_text()
    assert "comment: \"column \\'age (years)\\' in the data (renamed to a name TensorFlow takes)\"" in schema


@pytest.mark.unit
def test_parquet_and_tfrecord_samples_give_the_same_proposal_as_csv(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

    from pipelines.init import propose

    rows = 60
    table = pa.table({"label": [("a" if i % 3 else "b") for i in range(rows)],
                      "x": [None if i % 7 == 0 else i * 0.5 for i in range(rows)],
                      "color": [("red" if i % 4 else None) for i in range(rows)],
                      "row id": [f"r{i}" for i in range(rows)]})
    pq.write_table(table, tmp_path / "t.parquet")
    with tf.io.TFRecordWriter(str(tmp_path / "t.tfrecord")) as writer:
        for row in table.to_pylist():
            feature = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[v])) if isinstance(v, float) else
                       tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()])) for k, v in row.items()
                       if v is not None}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    found = {}
    for name in ("t.parquet", "t.tfrecord"):
        p = propose(str(tmp_path / name), "label")
        found[name] = (p.format, p.task, p.numeric, p.categorical, [c for c, _ in p.left_out])
    assert found == {"t.parquet": ("parquet", "binary", ["x"], ["color"], ["row id"]),
                     "t.tfrecord": ("tfrecord", "binary", ["x"], ["color"], ["row id"])}


@pytest.mark.unit
def test_a_column_the_label_is_computed_from_is_left_out_and_says_why(tmp_path, capsys):
    """Acceptance (issue #27, 3): the label is a function of one column ('score' for the
    class, 'minutes' for the regression target); that column is left out with a line
    saying why, and features that only help (hours, 0.8 accuracy alone) stay."""
    from pipelines.init import propose

    rng = np.random.default_rng(3)
    n = 3000
    hours = rng.normal(10, 3, n)
    score = hours * 4 + rng.normal(0, 8, n)
    result = np.where(score > 40, "pass", "fail")
    minutes = rng.gamma(3, 20, n)
    cost = 2.5 * minutes + 4  # a price computed from the minutes
    town = rng.choice(["north", "south", "east"], n)
    grade = np.where(score > 40, "P", "F")  # a text copy of the label
    rows = [[f"{hours[i]:.2f}", f"{score[i]:.2f}", result[i], f"{minutes[i]:.2f}", f"{cost[i]:.3f}", town[i], grade[i]]
            for i in range(n)]
    data = write_rows(tmp_path / "t.csv", ["hours", "score", "result", "minutes", "cost", "town", "grade"], rows)
    target = tmp_path / "c.yaml"
    code, out, _ = init(capsys, data, "--label", "result", "-o", target)
    assert code == 0
    leak = [line for line in out if line.startswith("  left out 'score': alone predicts 'result' almost perfectly "
                                                    "(accuracy ")]
    assert len(leak) == 1 and "on held-out sampled rows, against 0." in leak[0] and "a leak" in leak[0]
    assert any(line.startswith("  left out 'grade': alone predicts 'result' almost perfectly") for line in out)
    p = propose(str(data), "result")
    assert p.numeric == ["hours", "minutes", "cost"] and p.categorical == ["town"]
    assert "  #   score: alone predicts 'result' almost perfectly" in target.read_text()
    regression = propose(str(data), "cost")
    assert [c for c, _ in regression.left_out] == ["minutes"]
    assert regression.left_out[0][1].startswith("alone predicts 'cost' almost perfectly (R^2 0.99")
    assert regression.numeric == ["hours", "score"] and regression.categorical == ["result", "town", "grade"]


@pytest.mark.unit
def test_integer_codes_are_proposed_as_categorical_and_say_why(tmp_path):
    """Acceptance (issue #27, 3): integer columns with few values, integers with a code-like
    name (taxi tables: community area, hour, month) and digit codes with leading zeros are
    categorical, each with its reason; integer quantities with many values stay numbers."""
    from pipelines.init import propose

    rng = np.random.default_rng(5)
    n = 2000
    columns = {"pickup_community_area": rng.integers(1, 78, n), "trip_start_hour": rng.integers(0, 24, n),
               "trip_start_month": rng.integers(1, 13, n), "passengers": rng.integers(1, 5, n),
               "zip": [f"{z:05d}" for z in rng.choice([2134, 2139, 60601, 60614, 1002], n)],
               "fare": rng.integers(3, 300, n), "hours per week": rng.normal(40, 10, n).round().astype(int),
               "trip_miles": rng.gamma(2, 2, n).round(2)}
    label = np.where(rng.random(n) < 0.3, "yes", "no")
    header = [*columns, "tipped"]
    data = write_rows(tmp_path / "taxi.csv", header, [[columns[c][i] for c in columns] + [label[i]] for i in range(n)])
    p = propose(str(data), "tipped")
    assert p.numeric == ["fare", "hours per week", "trip_miles"]
    assert p.categorical == ["pickup_community_area", "trip_start_hour", "trip_start_month", "passengers", "zip"]
    why = dict(p.codes)
    assert why["passengers"].startswith("integers with 4 distinct values in the sample: proposed as categorical")
    assert why["pickup_community_area"].startswith("integers with 77 distinct values and a code-like name ('area')")
    assert "a code-like name ('hour')" in why["trip_start_hour"] and "('month')" in why["trip_start_month"]
    assert why["zip"] == "digits with leading zeros (such as '02134'): codes, proposed as categorical"
    from pipelines.init import render

    text = render(p, "gpupipe init", "c.yaml")
    assert "  #   zip: digits with leading zeros (such as '02134')" in text


@pytest.mark.unit
def test_the_sample_is_drawn_across_the_whole_file(tmp_path):
    """A table sorted by its label: 500 sampled rows of 6000 cover the label's range
    (the first 500 would hold only its lowest values)."""
    from pipelines.init import propose, sample_table
    from components.sources import readers

    rng = np.random.default_rng(11)
    y = np.sort(rng.uniform(0, 300, 6000))
    data = write_rows(tmp_path / "sorted.csv", ["x", "y"], [[f"{v / 3 + rng.normal(0, 15):.3f}", f"{v:.3f}"] for v in y])
    table, total, _ = sample_table(readers.resolve(str(data)), 500)
    sampled = np.array(table.column("y").to_pylist())
    assert total == 6000 and len(sampled) == 500 and len(set(sampled)) == 500
    assert sampled.min() < np.quantile(y, 0.02) and sampled.max() > np.quantile(y, 0.98)
    assert np.std(sampled) == pytest.approx(np.std(y), rel=0.1)
    assert np.std(y[:500]) < 0.1 * np.std(y)  # what the first 500 rows would have given
    again, _, _ = sample_table(readers.resolve(str(data)), 500)
    assert again.equals(table)  # seeded: the same proposal every time
    p = propose(str(data), "y", sample_rows=500)
    assert (p.rows, p.total_rows, p.whole_file) == (500, 6000, False)
    from pipelines.init import render

    assert "from 500 sampled rows (drawn at random from all 6,000 rows of " in render(p, "gpupipe init", "c.yaml")


@pytest.mark.unit
def test_a_table_sorted_by_its_label_gets_the_gate_from_the_eval_split(tmp_path, capsys):
    """Acceptance (issue #27, 4): on a regression table sorted by its label, init writes
    must_beat_trivial (no constant from its sample), and evaluate's threshold against a
    model that learnt nothing is the RMSE of predicting the mean on this run's eval split,
    read here from the eval shards; the first rows' standard deviation (what a sample of
    the first rows gave) is far below it."""
    import tensorflow as tf

    from components.contracts.examples import split_files
    from components.kinds import Columns
    from components.evaluate.logic import run_evaluate
    from components.ingest.logic import run_ingest
    from components.train.logic import train_model
    from components.validate.logic import run_validation
    from pipelines.config import load_config

    rng = np.random.default_rng(2)
    n = 2000
    a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
    y = 50 + 10 * a + 5 * b + rng.normal(0, 3, n)
    order = np.argsort(y)
    data = write_rows(tmp_path / "sorted.csv", ["a", "b", "y"],
                      [[f"{a[i]:.4f}", f"{b[i]:.4f}", f"{y[i]:.3f}"] for i in order])
    target = tmp_path / "sorted.yaml"
    code, out, _ = init(capsys, data, "--label", "y", "--sample-rows", 400, "-o", target)
    assert code == 0 and "(rmse, threshold from the eval split at run time)" in out[0]
    config = load_config(target)
    assert config.evaluation.must_beat_trivial and config.evaluation.threshold == 0
    assert config.data.numeric_features == ["a", "b"]

    ex = str(tmp_path / "ex")
    run_ingest(settings=config.data, examples_dir=ex, numeric_label=True)
    run_validation(ex, "y", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "an"), str(tmp_path / "r.html"),
                   config.validation)
    training = config.training.model_copy(update={"epochs": 8})
    train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), Columns.part_of(config.data), training)
    evaluation, blessing = run_evaluate(model_dir=str(tmp_path / "m"), examples_dir=ex,
                                        blessing_dir=str(tmp_path / "bl"), report_md=str(tmp_path / "e.md"),
                                        settings=config.evaluation)
    eval_y = np.array([tf.train.Example.FromString(r.numpy()).features.feature["y"].float_list.value[0]
                       for r in tf.data.TFRecordDataset(split_files(ex, "eval"), compression_type="GZIP")])
    mean_rmse = float(np.sqrt(np.mean((eval_y - eval_y.mean()) ** 2)))
    assert blessing.threshold == pytest.approx(mean_rmse, rel=1e-5)
    assert np.std(np.sort(y)[:400]) < 0.5 * mean_rmse  # a threshold from the first rows would refuse a good model
    assert f"a model that learnt nothing (always predicting the mean, {eval_y.mean():.4g}) scores {mean_rmse:.4f} " \
           "on the eval split" in blessing.reasons[0]
    assert blessing.blessed and evaluation.metrics["rmse"] < 0.5 * mean_rmse, evaluation.metrics
    # the linear baseline beside it: Ridge on a target linear in a and b, up to noise of deviation 3
    assert evaluation.linear_model == "Ridge" and 2.5 < evaluation.linear["rmse"] < 3.5, evaluation.linear


@pytest.mark.unit
def test_a_constant_column_is_left_out_and_says_why(tmp_path, capsys):
    """One value in every sampled row (text or number) is no feature; one value in some rows
    and missing in the others stays (the missingness can carry signal), and all-missing
    is left out as empty."""
    from pipelines.init import propose

    rng = np.random.default_rng(5)
    n = 200
    hours = rng.normal(10, 3, n)
    result = np.where(hours + rng.normal(0, 2, n) > 10, "pass", "fail")
    rows = [[f"{hours[i]:.2f}", "US", 7, "", "yes" if i % 3 else "", result[i]] for i in range(n)]
    data = write_rows(tmp_path / "t.csv", ["hours", "country", "version", "notes", "flag", "result"], rows)
    code, out, _ = init(capsys, data, "--label", "result", "-o", tmp_path / "c.yaml")
    assert code == 0
    assert "  left out 'country': the same value ('US') in each of its 200 sampled rows (a constant carries no " \
           "signal)" in out
    assert "  left out 'version': the same value (7) in each of its 200 sampled rows (a constant carries no " \
           "signal)" in out
    assert "  left out 'notes': empty in every sampled row" in out
    assert "  #   country: the same value ('US') in each of its 200 sampled rows" in (tmp_path / "c.yaml").read_text()
    p = propose(str(data), "result")
    assert p.numeric == ["hours"] and p.categorical == ["flag"]
    assert [c for c, _ in p.left_out] == ["country", "version", "notes"]


@pytest.mark.unit
def test_a_near_empty_column_is_left_out_and_says_how_empty(tmp_path, capsys):
    """A real taxi table's pickup_census_tract has a value in 1 of 15,002 rows: a column with a
    value in under 1% of the sampled rows is left out, with the count in the config; one at 1%
    stays."""
    rng = np.random.default_rng(7)
    n = 1500
    hours = rng.normal(10, 3, n)
    result = np.where(hours + rng.normal(0, 2, n) > 10, "pass", "fail")
    rows = [[f"{hours[i]:.2f}", 17031081800 if i == 700 else "", f"{rng.normal():.3f}" if i % 100 == 0 else "",
             result[i]] for i in range(n)]
    data = write_rows(tmp_path / "t.csv", ["hours", "pickup_census_tract", "sometimes", "result"], rows)
    code, out, _ = init(capsys, data, "--label", "result", "-o", tmp_path / "c.yaml")
    assert code == 0
    why = "a value in only 1 of its 1500 sampled rows (under 1%: too sparse to learn from)"
    assert f"  left out 'pickup_census_tract': {why}" in out
    config = (tmp_path / "c.yaml").read_text()
    assert f"  #   pickup_census_tract: {why}" in config
    assert yaml.safe_load(config)["data"]["numeric_features"] == ["hours", "sometimes"]  # 15 of 1500: 1%, kept
