"""Steps one after another without kfp, where a test needs more than one step's logic:
ingest, validate, train and evaluate on a regression task, and evaluate's metrics cross-checked
against scikit-learn on real models."""
import numpy as np
import pytest

from components.kinds import Columns
from components.evaluate.logic import score_model
from components.ingest.logic import ingest_data
from components.ingest.settings import DataSettings
from components.train.logic import train_model
from components.validate.logic import run_validation
from conftest import penguin_settings

pytestmark = pytest.mark.unit


def test_regression_task_trains_and_serves_predictions(tmp_path, penguins_csv):
    ex = str(tmp_path / "ex")
    ingest_data(DataSettings(source=str(penguins_csv), label="body_mass_g",
                             numeric_features=["bill_length_mm", "flipper_length_mm"],
                             categorical_features=["species", "sex"]), ex, numeric_label=True)
    run_validation(ex, "body_mass_g", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                   str(tmp_path / "r.html"))
    columns = Columns(label="body_mass_g", numeric_features=["bill_length_mm", "flipper_length_mm"],
                      categorical_features=["species", "sex"])
    report = train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), columns,
                         penguin_settings(task="regression", epochs=30))
    assert "final_train_rmse" in report
    evaluation = score_model(str(tmp_path / "m"), ex)
    assert evaluation.classes == [] and evaluation.metrics["rmse"] < 600  # body mass sd is about 800 g




def _predictions(model_dir: str, examples_dir: str, label: str):
    """The SavedModel's own class probabilities and the eval labels, read here without
    gpupipe's evaluate: the independent side of the cross-check."""
    import tensorflow as tf

    from components.contracts.examples import split_files

    serve = tf.saved_model.load(model_dir).signatures["serving_examples"]
    probs, labels = [], []
    for batch in tf.data.TFRecordDataset(split_files(examples_dir, "eval"), compression_type="GZIP").batch(64):
        probs.append(serve(examples=batch)["probabilities"].numpy())
        parsed = tf.io.parse_example(batch, {label: tf.io.FixedLenFeature([], tf.string)})
        labels += [v.decode() for v in parsed[label].numpy()]
    return np.concatenate(probs), labels


def test_evaluate_metrics_match_scikit_learn_on_a_real_model(tmp_path, penguins_csv, penguin_model,
                                                             penguin_examples):
    """Multiclass (species) and binary (sex) models: evaluate's metrics equal scikit-learn's
    on the same predictions, computed from the SavedModel and the shards directly."""
    from sklearn import metrics as sk

    evaluation = score_model(penguin_model, penguin_examples)
    probs, labels = _predictions(penguin_model, penguin_examples, "species")
    y = np.array([evaluation.classes.index(v) for v in labels])
    m = evaluation.metrics
    assert m["accuracy"] == pytest.approx(sk.accuracy_score(y, probs.argmax(axis=1)))
    assert m["log_loss"] == pytest.approx(sk.log_loss(y, probs, labels=[0, 1, 2]), rel=1e-6)
    recall = sk.recall_score(y, probs.argmax(axis=1), average=None, labels=[0, 1, 2], zero_division=0)
    assert [m[f"recall/{c}"] for c in evaluation.classes] == pytest.approx(list(recall))
    assert evaluation.confusion_matrix == sk.confusion_matrix(y, probs.argmax(axis=1)).tolist()

    ex = str(tmp_path / "ex")
    ingest_data(DataSettings(source=str(penguins_csv), label="sex",
                             numeric_features=["bill_length_mm", "bill_depth_mm", "body_mass_g"],
                             categorical_features=["species"]), ex)
    run_validation(ex, "sex", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"), str(tmp_path / "r.html"))
    columns = Columns(label="sex", numeric_features=["bill_length_mm", "bill_depth_mm", "body_mass_g"],
                      categorical_features=["species"])
    train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), columns, penguin_settings(task="binary", epochs=20))
    binary = score_model(str(tmp_path / "m"), ex)
    probs, labels = _predictions(str(tmp_path / "m"), ex, "sex")
    y = np.array([binary.classes.index(v) for v in labels])
    score = probs[:, 1]
    b = binary.metrics
    assert b["auc"] == pytest.approx(sk.roc_auc_score(y, score)) and b["auc"] > 0.8
    assert b["pr_auc"] == pytest.approx(sk.average_precision_score(y, score))
    assert b["log_loss"] == pytest.approx(sk.log_loss(y, score), rel=1e-6)
    fpr, tpr, _ = sk.roc_curve(y, score)
    assert binary.roc["fpr"][-1] == 1.0 and binary.roc["tpr"][-1] == 1.0
    assert len(binary.roc["fpr"]) == min(len(fpr), 201)


def test_columns_tensorflow_refuses_are_renamed_from_ingest_to_evaluate(tmp_path, penguins_csv):
    """Headers as a spreadsheet writes them: the examples, the schema, the feature specs and
    the model's inputs use the safe names; the config and the evaluation's slices keep the
    names as written."""
    import csv
    import json

    import tensorflow as tf

    rows = list(csv.reader(penguins_csv.open()))
    header = ["species", "island name", "bill length (mm)", "bill-depth-mm", "flipper_length_mm", "body mass:g", "sex",
              "year"]
    source = tmp_path / "sheet.csv"
    with source.open("w", newline="") as f:
        csv.writer(f).writerows([header, *rows[1:]])
    columns = Columns(label="species", numeric_features=["bill length (mm)", "bill-depth-mm", "body mass:g"],
                      categorical_features=["island name", "sex"])
    ex = str(tmp_path / "ex")
    manifest = ingest_data(DataSettings(source=str(source), **columns.model_dump()), ex)
    assert manifest["columns"] == {"bill_length_mm": "bill length (mm)", "bill_depth_mm": "bill-depth-mm",
                                   "body_mass_g": "body mass:g", "island_name": "island name"}
    run_validation(ex, "species", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                   str(tmp_path / "r.html"))
    schema = (tmp_path / "c" / "schema.pbtxt").read_text()
    assert "name: \"island_name\"" in schema and "column \\'island name\\' in the data" in schema
    train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), columns, penguin_settings(epochs=2))
    specs = json.loads((tmp_path / "m" / "assets.extra" / "gpupipe_features.json").read_text())
    assert specs["columns"] == manifest["columns"]
    serve = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["bill_depth_mm", "bill_length_mm", "body_mass_g",
                                                          "island_name", "sex"]
    out = serve(bill_length_mm=tf.constant([39.1]), bill_depth_mm=tf.constant([18.7]),
                body_mass_g=tf.constant([3750.0]), island_name=tf.constant(["Torgersen"]), sex=tf.constant(["male"]))
    assert out["probabilities"].shape == (1, 3)
    sliced = score_model(str(tmp_path / "m"), ex, slices=["island name"]).slices["island name"]
    assert sorted(sliced) == ["Biscoe", "Dream", "Torgersen"]



def test_a_strided_read_takes_spread_shards_and_about_one_row_in_stride(tmp_path):
    """A large split read for the linear start or the baseline: about total/stride rows, from
    shards spread over the split (the table here is sorted by its label: every class comes)."""
    import csv

    from components.contracts import names
    from components.contracts.examples import split_files
    from components.contracts.linear import read_split
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings

    source = tmp_path / "sorted.csv"
    with source.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["x", "label"])
        w.writerows([[i, f"c{i * 4 // 4000}"] for i in range(4000)])  # four classes, in order
    ex = str(tmp_path / "ex")
    ingest_data(DataSettings(source=str(source), label="label", numeric_features=["x"]), ex, shard_rows=200)
    files = split_files(ex, names.TRAIN_SPLIT)
    assert len(files) >= 15
    whole, _ = read_split(ex, names.TRAIN_SPLIT, "label", {"x": "numeric"}, False)
    x, y = read_split(ex, names.TRAIN_SPLIT, "label", {"x": "numeric"}, False, stride=10)
    assert 0.6 * len(whole["x"]) / 10 <= len(x["x"]) <= 1.6 * len(whole["x"]) / 10
    assert sorted(set(y)) == ["c0", "c1", "c2", "c3"]  # the whole range, not the first shards
