"""Unit tests of evaluate: metrics by task, slices, TFMA-style blessing with a served baseline."""
import json

import numpy as np
import pytest

from components.contracts.blessing import read_blessing, write_blessing
from components.contracts.errors import GpupipeError
from components.evaluate.logic import Evaluation, bless_model, render_report, run_evaluate, score_model
from components.evaluate.metrics import (average_precision, binary_metrics, multiclass_metrics, pr_curve,
                                        regression_metrics, roc_auc)
from components.evaluate.settings import EvaluationSettings
from components.store.base import ServingStore

pytestmark = pytest.mark.unit


def test_scores_eval_split_with_slices(penguin_model, penguin_examples):
    evaluation = score_model(penguin_model, penguin_examples, slices=["island"])
    assert evaluation.classes == ["Adelie", "Chinstrap", "Gentoo"]
    total = sum(sum(row) for row in evaluation.confusion_matrix)
    assert total == evaluation.metrics["examples"] > 0
    correct = sum(evaluation.confusion_matrix[i][i] for i in range(3))
    assert evaluation.metrics["accuracy"] == pytest.approx(correct / total)
    assert evaluation.metrics["log_loss"] > 0
    assert set(evaluation.slices["island"]) <= {"Biscoe", "Dream", "Torgersen"}
    assert sum(s["examples"] for s in evaluation.slices["island"].values()) == total
    assert set(evaluation.per_class) == set(evaluation.classes)


def test_multiclass_metrics_by_hand():
    y = np.array([0, 1, 2, 2])
    p = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    m = multiclass_metrics(y, p, ["a", "b", "c"])
    assert m["accuracy"] == 0.75
    assert m["precision/b"] == 0.5 and m["recall/b"] == 1.0 and m["recall/c"] == 0.5
    assert m["log_loss"] == pytest.approx(-np.mean(np.log([0.8, 0.8, 0.1, 0.6])))


@pytest.mark.parametrize("classes", [2, 7])
def test_the_counted_metrics_are_scikit_learns(classes):
    """Accuracy, per-class precision and recall and the confusion matrix from numpy's
    bincount equal scikit-learn's, with labels unseen in training (-1) and a class never
    predicted (its precision 0, as zero_division=0 gives)."""
    from sklearn import metrics as sk

    from components.evaluate.metrics import confusion_matrix

    rng = np.random.default_rng(classes)
    y = rng.integers(-1, classes, 5000)
    p = rng.random((5000, classes))
    p[:, classes - 1] = 0  # never the argmax
    p /= p.sum(axis=1, keepdims=True)  # probabilities, as the model's softmax gives
    names = [f"c{i}" for i in range(classes)]
    m = multiclass_metrics(y, p, names)
    pred, known, labels = p.argmax(1), y >= 0, list(range(classes))
    precision, recall, _, _ = sk.precision_recall_fscore_support(y[known], pred[known], labels=labels, average=None,
                                                                 zero_division=0)
    assert m["accuracy"] == sk.accuracy_score(y, pred)
    assert [m[f"precision/{c}"] for c in names] == list(precision) and m[f"precision/c{classes - 1}"] == 0
    assert [m[f"recall/{c}"] for c in names] == list(recall)
    np.testing.assert_array_equal(confusion_matrix(y, pred, classes),
                                  sk.confusion_matrix(y[known], pred[known], labels=labels))


@pytest.mark.parametrize("classes", [2, 7, 300])
def test_the_labels_go_to_scikit_learn_in_their_smallest_type_with_the_same_scores(classes):
    """The class indices scikit-learn gets are int8 (int16 past 128 classes), so its label
    checks sort bytes, not int64; AUC, PR-AUC, log loss and top-5 accuracy are scikit-learn's
    on the int64 labels."""
    from sklearn import metrics as sk

    from components.evaluate.metrics import class_indices, classification_metrics

    rng = np.random.default_rng(classes)
    y = rng.integers(-1, classes, 4000)
    assert class_indices(y, classes).dtype == (np.int16 if classes > 128 else np.int8)
    np.testing.assert_array_equal(class_indices(y, classes), y)
    p = rng.random((4000, classes))
    p /= p.sum(axis=1, keepdims=True)
    m, known = classification_metrics(y, p, [str(i) for i in range(classes)]), y >= 0
    if classes == 2:
        assert m["auc"] == sk.roc_auc_score(y[known], p[known, 1])
        assert m["pr_auc"] == pytest.approx(sk.average_precision_score(y[known], p[known, 1]), abs=1e-12)
        assert m["log_loss"] == sk.log_loss(y[known], p[known, 1], labels=[0, 1])
    else:
        assert m["log_loss"] == sk.log_loss(y[known], p[known], labels=list(range(classes)))
        assert m["top_5_accuracy"] == sk.top_k_accuracy_score(y[known], p[known], k=5, labels=list(range(classes)))


def test_binary_metrics_by_hand():
    y = np.array([0, 0, 1, 1])
    score = np.array([0.1, 0.4, 0.35, 0.8])
    assert roc_auc(y, score) == pytest.approx(0.75)  # the classic example
    assert average_precision(y, score) == pytest.approx((1 / 1 + 2 / 3) / 2)
    m = binary_metrics(y, score)
    assert m["accuracy"] == 0.75 and m["auc"] == pytest.approx(0.75)
    assert m["calibration"] == pytest.approx(np.mean(score) / 0.5)
    assert 0 <= m["calibration_error"] <= 1


def test_the_curves_from_one_sort_are_scikit_learns_on_the_rows_as_given_ties_included():
    """binary_curves sorts the rows by score once for both curves: its ROC and PR points and
    areas are scikit-learn's on the rows in their own order, with many scores tied."""
    from sklearn import metrics as sk

    from components.evaluate.metrics import binary_curves, roc_curve

    rng = np.random.default_rng(3)
    score = rng.integers(0, 40, 5000) / 40  # 40 distinct scores: ties everywhere
    y = (rng.random(5000) < score).astype(np.int8)
    curves = binary_curves(y, score)
    assert curves.auc == sk.roc_auc_score(y, score)
    assert curves.pr_auc == pytest.approx(sk.average_precision_score(y, score), abs=1e-12)
    assert [curves.roc[k] for k in ("fpr", "tpr", "thresholds")] == list(roc_curve(y, score))
    assert [curves.pr[k] for k in ("precision", "recall", "thresholds")] == list(pr_curve(y, score))


def test_pr_curve_by_hand_and_thinned_to_its_point_budget():
    y, score = np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])
    precision, recall, thresholds = pr_curve(y, score)
    # thresholds 0.1, 0.35, 0.4, 0.8: (2/4, 1), (2/3, 1), (1/2, 1/2), (1, 1/2); then the end point (1, 0)
    assert precision == pytest.approx([0.5, 2 / 3, 0.5, 1.0, 1.0]) and recall == [1.0, 1.0, 0.5, 0.5, 0.0]
    assert thresholds == pytest.approx([0.1, 0.35, 0.4, 0.8, 1.0])
    rng = np.random.default_rng(0)
    precision, recall, _ = pr_curve(rng.integers(0, 2, 5000), rng.random(5000))
    assert len(precision) == len(recall) <= 201 and recall[0] == 1.0 and recall[-1] == 0.0


def test_regression_metrics_by_hand():
    m = regression_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 4.0, 2.0]))
    assert m["rmse"] == pytest.approx(np.sqrt(5 / 3)) and m["mae"] == pytest.approx(1.0)


def _evaluation(accuracy, log_loss=0.3):
    return Evaluation(metrics={"accuracy": accuracy, "log_loss": log_loss, "examples": 10}, classes=["a", "b"],
                      confusion_matrix=[[5, 0], [0, 5]])


def test_blessed_at_or_above_threshold(tmp_path):
    blessing = bless_model(_evaluation(0.9), "accuracy", 0.9)
    assert blessing.blessed and blessing.reasons == ["accuracy 0.9000 meets threshold (>= 0.9000)"]
    write_blessing(blessing, str(tmp_path))
    assert read_blessing(str(tmp_path)) == blessing


def test_below_value_threshold_is_not_blessed_and_says_why():
    blessing = bless_model(_evaluation(0.85), "accuracy", 0.9)
    assert not blessing.blessed and blessing.reasons == ["accuracy 0.8500 is below threshold 0.9000"]


def test_lower_is_better_metrics_take_an_upper_bound():
    assert bless_model(_evaluation(0.9, log_loss=0.2), "log_loss", 0.25).blessed
    blessing = bless_model(_evaluation(0.9, log_loss=0.3), "log_loss", 0.25)
    assert blessing.reasons == ["log_loss 0.3000 is above threshold 0.2500"]


def test_first_run_needs_only_value_thresholds():
    blessing = bless_model(_evaluation(0.91), "accuracy", 0.9, {"accuracy": {"change": {"absolute": -0.01}}})
    assert blessing.blessed and blessing.baseline_version is None
    assert "accuracy: no served model yet, change threshold skipped" in blessing.reasons


def test_worse_than_served_baseline_beyond_change_threshold_is_not_blessed():
    rules = {"accuracy": {"change": {"absolute": -0.02}}}
    ok = bless_model(_evaluation(0.93), "accuracy", 0.9, rules, baseline=_evaluation(0.94), baseline_version=3)
    assert ok.blessed and ok.baseline_version == 3 and ok.baseline_value == 0.94
    worse = bless_model(_evaluation(0.91), "accuracy", 0.9, rules, baseline=_evaluation(0.94), baseline_version=3)
    assert not worse.blessed
    assert worse.reasons == ["accuracy 0.9100 vs served version 3 0.9400: change -0.0300 (worse) fails the change "
                             "threshold -0.0200"]


def test_relative_change_and_lower_is_better_direction():
    rules = {"log_loss": {"change": {"relative": 0.10}}}  # at most 10% higher log loss
    ok = bless_model(_evaluation(0.9, 0.21), "accuracy", 0.5, rules, _evaluation(0.9, 0.20), 1)
    bad = bless_model(_evaluation(0.9, 0.25), "accuracy", 0.5, rules, _evaluation(0.9, 0.20), 1)
    assert ok.blessed and not bad.blessed
    assert "relative change +25.00% (worse) fails the change threshold +10.00%" in bad.reasons[0]


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(GpupipeError, match="metric 'auc' is not computed"):
        bless_model(_evaluation(0.9), "auc", 0.5)


def test_run_evaluate_scores_the_served_baseline(tmp_path, penguin_model, penguin_examples):
    base = str(tmp_path / "serving")
    ServingStore(base, "penguins").add_version(penguin_model)
    settings = EvaluationSettings(metric="accuracy", threshold=0.0, change_threshold={"absolute": 0.0},
                                  slices=["island"])
    evaluation, blessing = run_evaluate(
        model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "blessing"),
        report_md=str(tmp_path / "report.md"), settings=settings, serving_base=base, model_name="penguins")
    assert blessing.baseline_version == 1 and blessing.baseline_value == evaluation.metrics["accuracy"]
    assert blessing.blessed  # the same model is not worse than itself
    report = (tmp_path / "report.md").read_text()
    assert "served v1" in report and "## Slices by island" in report and "Confusion matrix" in report
    saved = json.loads((tmp_path / "blessing" / "evaluation.json").read_text())
    assert saved["metrics"]["accuracy"] == evaluation.metrics["accuracy"]


def test_fail_if_not_blessed_fails_the_step_after_writing_why(tmp_path, penguin_model, penguin_examples):
    settings = EvaluationSettings(metric="accuracy", threshold=1.01, fail_if_not_blessed=True)
    with pytest.raises(GpupipeError) as err:
        run_evaluate(model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "b"),
                     report_md=str(tmp_path / "report.md"), settings=settings)
    assert str(err.value).startswith("model not blessed: accuracy ") and "below threshold 1.0100" in str(err.value)
    assert "evaluation.fail_if_not_blessed is true" in str(err.value) and "\n" not in str(err.value)
    assert read_blessing(str(tmp_path / "b")).blessed is False  # push and the summary still learn why
    assert "NOT BLESSED" in (tmp_path / "report.md").read_text()


def test_report_renders_reasons():
    text = render_report(_evaluation(0.8), bless_model(_evaluation(0.8), "accuracy", 0.9), None)
    assert text.startswith("# Model evaluation: **NOT BLESSED**") and "below threshold" in text


# ------------------------------------------------- a model that learnt nothing (must_beat_trivial)
def test_trivial_scores_are_the_best_constant_answer_on_the_rows():
    from components.evaluate.logic import Predictions, trivial_scores
    from components.evaluate.metrics import classification_metrics

    y = np.array([0, 0, 0, 1, 2, -1])  # -1: a label unseen in training, never right
    three = trivial_scores(Predictions(["a", "b", "c"], y, np.zeros((6, 3)), {}))
    assert three.metrics["accuracy"] == pytest.approx(3 / 6)
    shares = np.array([3, 1, 1]) / 5
    assert three.metrics["log_loss"] == pytest.approx(-np.sum(shares * np.log(shares)))
    assert "always answering 'a'" in three.answers["accuracy"] and set(three.metrics) == {"accuracy", "log_loss"}
    two = trivial_scores(Predictions(["n", "y"], np.array([0, 0, 0, 1]), np.zeros((4, 2)), {}))
    assert two.metrics["auc"] == 0.5 and two.metrics["pr_auc"] == pytest.approx(0.25)
    assert two.metrics["accuracy"] == 0.75
    # From the label counts, the same figures as the metric functions on the constant
    # answer repeated for every row (the matrix evaluate no longer builds).
    rng = np.random.default_rng(3)
    for classes in (["n", "y"], ["a", "b", "c", "d"]):
        y = rng.choice(np.arange(-1, len(classes)), size=5000, p=[0.01] + [0.99 / len(classes)] * len(classes))
        y[y == 1] = rng.choice([0, 1], size=(y == 1).sum(), p=[0.7, 0.3])  # unequal shares
        trivial = trivial_scores(Predictions(classes, y, np.zeros((len(y), len(classes))), {}))
        counts = np.bincount(y[y >= 0], minlength=len(classes))
        full = classification_metrics(y, np.tile(counts / counts.sum(), (len(y), 1)), classes)
        assert trivial.metrics == pytest.approx({k: full[k] for k in trivial.metrics}, rel=1e-12)
    target = np.array([1.0, 2.0, 3.0, 10.0])
    reg = trivial_scores(Predictions([], target, np.zeros(4), {}, task="regression"))
    assert reg.metrics["rmse"] == pytest.approx(np.std(target))  # predicting the mean
    assert reg.metrics["mae"] == pytest.approx(np.mean(np.abs(target - 2.5)))  # predicting the median
    assert reg.answers["rmse"] == "always predicting the mean, 4"


def test_must_beat_trivial_blesses_only_a_model_better_than_learning_nothing():
    from components.evaluate.logic import Trivial

    trivial = Trivial({"accuracy": 0.6, "log_loss": 0.67}, {"accuracy": "always answering 'b', the most frequent "
                                                                        "class", "log_loss": "the class shares"})
    better = bless_model(_evaluation(0.7), "accuracy", 0.0, trivial=trivial)
    assert better.blessed and better.threshold == 0.6
    assert better.reasons == ["accuracy 0.7000 beats a model that learnt nothing (always answering 'b', the most "
                              "frequent class) scores 0.6000 on the eval split"]
    level = bless_model(_evaluation(0.6), "accuracy", 0.0, trivial=trivial)
    assert not level.blessed and level.reasons[0].startswith("accuracy 0.6000 does not beat a model that learnt "
                                                             "nothing")
    # a fixed threshold still bounds it; the blessing's threshold is the stricter of the two
    both = bless_model(_evaluation(0.7), "accuracy", 0.8, trivial=trivial)
    assert not both.blessed and both.threshold == 0.8 and "accuracy 0.7000 is below threshold 0.8000" in both.reasons
    lower = bless_model(_evaluation(0.7, log_loss=0.7), "log_loss", 0.0, trivial=trivial)
    assert not lower.blessed and lower.threshold == 0.67  # lower is better: 0.7 is worse than 0.67
    assert bless_model(_evaluation(0.7, log_loss=0.5), "log_loss", 0.0, trivial=trivial).blessed


def test_threshold_zero_is_no_fixed_bound():
    blessing = bless_model(_evaluation(0.9, log_loss=0.3), "log_loss", 0.0)
    assert blessing.blessed and blessing.reasons == ["log_loss 0.3000: no fixed threshold (evaluation.threshold 0)"]


def test_must_beat_trivial_needs_a_metric_a_constant_answer_has():
    with pytest.raises(ValueError, match="must_beat_trivial: a model that learnt nothing has no score for metric "
                                         "'calibration'"):
        EvaluationSettings(metric="calibration", must_beat_trivial=True)


def test_run_evaluate_scores_learning_nothing_on_the_eval_split(tmp_path, penguin_model, penguin_examples):
    """The trivial score comes from this run's eval split: the most frequent species' share
    of the eval rows, read here from the shards."""
    import tensorflow as tf

    from components.contracts.examples import split_files

    labels = [tf.train.Example.FromString(r.numpy()).features.feature["species"].bytes_list.value[0]
              for r in tf.data.TFRecordDataset(split_files(penguin_examples, "eval"), compression_type="GZIP")]
    top_share = max(labels.count(v) for v in set(labels)) / len(labels)
    settings = EvaluationSettings(metric="accuracy", must_beat_trivial=True)
    evaluation, blessing = run_evaluate(
        model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "b"),
        report_md=str(tmp_path / "report.md"), settings=settings)
    assert evaluation.trivial["accuracy"] == pytest.approx(top_share) and blessing.threshold == pytest.approx(top_share)
    assert blessing.blessed == (evaluation.metrics["accuracy"] > top_share)
    assert f"a model that learnt nothing (always answering 'Adelie', the most frequent class) scores {top_share:.4f} " \
           "on the eval split" in blessing.reasons[0]
    assert "| accuracy |" in (tmp_path / "report.md").read_text() and "learnt nothing |" in \
        (tmp_path / "report.md").read_text()
    saved = json.loads((tmp_path / "b" / "evaluation.json").read_text())
    assert saved["trivial"]["accuracy"] == pytest.approx(top_share)


# ------------------------------------------------- the linear baseline (must_beat_baseline)
def test_the_linear_baseline_is_reported_beside_the_model_and_gates_with_must_beat_baseline(
        tmp_path, penguin_model, penguin_examples):
    """LogisticRegression on the penguins' train split and features, scored on the eval
    split: a real model (species from bill, flipper and mass is close to linear); with
    must_beat_baseline a candidate worse than it is refused, and the reasons say by how much."""
    settings = EvaluationSettings(metric="accuracy", must_beat_baseline=True)
    evaluation, blessing = run_evaluate(
        model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "b"),
        report_md=str(tmp_path / "report.md"), settings=settings)
    linear = evaluation.linear
    assert evaluation.linear_model == "LogisticRegression" and linear["examples"] == evaluation.metrics["examples"]
    assert linear["accuracy"] >= 0.9 and linear["log_loss"] < 0.5, linear
    line = (f"accuracy {evaluation.metrics['accuracy']:.4f} vs the linear baseline (LogisticRegression on the same "
            f"train split and features) {linear['accuracy']:.4f} on the eval split")
    worse = evaluation.metrics["accuracy"] < linear["accuracy"]
    assert blessing.blessed == (not worse)
    assert (line + (": worse (evaluation.must_beat_baseline)" if worse else ": not worse")) in blessing.reasons
    assert "| linear (LogisticRegression) |" in (tmp_path / "report.md").read_text()
    # a candidate below the baseline's accuracy is refused
    below = Evaluation(metrics={**evaluation.metrics, "accuracy": linear["accuracy"] - 0.01}, classes=[],
                       confusion_matrix=[])
    refused = bless_model(below, "accuracy", 0.0, linear=Evaluation(metrics=linear, classes=[], confusion_matrix=[],
                                                                     linear_model="LogisticRegression"))
    assert not refused.blessed and refused.reasons[0].endswith(": worse (evaluation.must_beat_baseline)")
    off, _ = run_evaluate(model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "c"),
                          report_md=str(tmp_path / "r2.md"), settings=EvaluationSettings(metric="accuracy"))
    assert off.linear == linear  # reported either way, and the same fit


def test_must_beat_baseline_is_on_by_default_and_allows_only_float32_rounding():
    """On by default (issue #27): a candidate equal to the linear baseline but for float32
    rounding (the model that kept its linear start) is not worse; one a little further off is."""
    assert EvaluationSettings(metric="rmse").must_beat_baseline is None  # unset: on
    linear = Evaluation(metrics={"rmse": 53.674426}, classes=[], confusion_matrix=[], linear_model="Ridge")

    def gate(rmse):
        return bless_model(Evaluation(metrics={"rmse": rmse}, classes=[], confusion_matrix=[]), "rmse", 0.0,
                           linear=linear)

    assert gate(53.674427).blessed  # 2e-8 relative: rounding
    assert gate(53.0).blessed  # better
    worse = gate(53.6752)  # 1.4e-5 relative: worse
    assert not worse.blessed and worse.reasons[0].endswith(": worse (evaluation.must_beat_baseline)")


def test_without_a_baseline_the_default_gate_notes_it_and_an_explicit_one_fails(tmp_path, penguin_model,
                                                                                   penguin_examples, capsys,
                                                                                   monkeypatch):
    import components.evaluate.linear as linear

    monkeypatch.setattr(linear, "saved_baseline", lambda *args: None)
    monkeypatch.setattr(linear, "fit_baseline", lambda *args: (None, "the train split holds one class"))
    # as the pipeline hands the settings over: the whole section as JSON (pipelines/factory.py)
    settings = EvaluationSettings.from_json(EvaluationSettings(metric="accuracy").model_dump_json())
    evaluation, blessing = run_evaluate(
        model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "b"),
        report_md=str(tmp_path / "r.md"), settings=settings)
    assert blessing.blessed and not evaluation.linear
    assert "note: evaluate: no linear baseline: the train split holds one class" in capsys.readouterr().out
    with pytest.raises(GpupipeError, match="evaluation.must_beat_baseline: no linear baseline for .* set "
                                           "evaluation.must_beat_baseline: false"):
        run_evaluate(model_dir=penguin_model, examples_dir=penguin_examples, blessing_dir=str(tmp_path / "c"),
                     report_md=str(tmp_path / "r2.md"),
                     settings=EvaluationSettings(metric="accuracy", must_beat_baseline=True))


def test_slice_metrics_for_every_value_at_once_match_the_metric_functions_per_value():
    from components.evaluate.metrics import classification_metrics, regression_metrics
    from components.evaluate.scoring import slice_metrics

    rng = np.random.default_rng(0)
    values = rng.choice(np.array(["a", "b", "", "c"], dtype=object), 500)
    y = rng.integers(-1, 3, 500)  # -1: a label unseen in training
    p = rng.dirichlet(np.ones(3), 500).astype(np.float32)
    p[0] = [1.0, 0.0, 0.0]  # clipped as scikit-learn clips
    y[0], values[0] = 1, "a"
    got = slice_metrics(y, p, values, regression=False)
    assert list(got) == ["<missing>", "a", "b", "c"]
    for value, m in got.items():
        rows = values == ("" if value == "<missing>" else value)
        want = classification_metrics(y[rows], p[rows], ["x", "y", "z"])
        assert m["examples"] == rows.sum()
        assert m["accuracy"] == pytest.approx(want["accuracy"], abs=1e-12)
        assert m["log_loss"] == pytest.approx(want["log_loss"], rel=1e-6)
    target, pred = rng.normal(size=500), rng.normal(size=500)
    for value, m in slice_metrics(target, pred, values, regression=True).items():
        rows = values == ("" if value == "<missing>" else value)
        want = regression_metrics(target[rows], pred[rows])
        assert (m["rmse"], m["mae"]) == pytest.approx((want["rmse"], want["mae"]), rel=1e-9)
