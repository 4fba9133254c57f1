"""The linear start (issue #27): the default model contains the linear model evaluate's
baseline fits, starts from it, and keeps it when no epoch beats it on the validation slice."""
import numpy as np
import pytest
import tensorflow as tf

from components.contracts import names
from components.contracts.examples import ingest_statistics_dir
from components.kinds import Columns, specs_from_statistics
from components.contracts.linear import design_matrix, fit_linear, read_split
from components.contracts.statistics import load_statistics


def _penguin_start(penguin_examples, penguin_validation, held_out: int = 0):
    from components.train.linear_start import fit_linear_start
    from conftest import PENGUIN_COLUMNS as c

    stats = load_statistics(penguin_validation["statistics"], names.TRAIN_SPLIT)
    specs = specs_from_statistics(stats, c)
    return specs, fit_linear_start(penguin_examples, specs, stats, "standardize", "", specs, "auto", held_out)


def test_a_binary_fit_gives_logistic_regressions_probabilities_in_the_given_class_order():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = np.where(x[:, 0] + 0.5 * rng.normal(size=200) > 0, "yes", "no").astype(object)
    fit = fit_linear(x, y, False, ["yes", "no"])
    expected = LogisticRegression(max_iter=2000).fit(x, y).predict_proba(x)  # columns: no, yes
    np.testing.assert_allclose(fit.predict(x), expected[:, ::-1], atol=1e-6)  # the weights at float32 precision


def test_the_untrained_model_is_the_linear_fit_also_for_missing_and_unseen_values(
        penguin_examples, penguin_validation):
    from components.train.model import build_model
    from conftest import CATEGORICAL, NUMERIC, penguin_settings

    specs, start = _penguin_start(penguin_examples, penguin_validation)
    model = build_model(specs, penguin_settings(), start)
    kinds = {**{n: "numeric" for n in NUMERIC}, **{n: "categorical" for n in CATEGORICAL}}
    x, _ = read_split(penguin_examples, names.EVAL_SPLIT, "species", kinds, False)
    x["bill_length_mm"][:3] = np.nan  # missing numbers
    x["island"][3:5] = b"Atlantis"  # a category never seen in training
    x["sex"][5] = b""  # a missing category
    expected = start.fit.predict(design_matrix(start.design, x))
    found = model({k: tf.constant(v.reshape(-1, 1)) for k, v in x.items()}).numpy()
    np.testing.assert_allclose(found, expected, atol=1e-5)
    assert 0.9 < (found.argmax(1) == expected.argmax(1)).mean() <= 1  # a real model, not a constant
    assert len(set(found.argmax(1))) == len(specs.classes)


def test_training_keeps_the_linear_start_when_no_epoch_beats_it(tmp_path, penguin_examples, penguin_validation):
    """A learning rate that wrecks the weights in the first epoch: the validation slice's best
    is the start, so the exported model is the linear fit (best_epoch 0). The fit runs in a
    process of its own (linear_fit.py: fitted_beside), which sends its design first: the
    model is built on it, then takes the fit's weights (a task that fits it itself: the
    penguins' runs, tests/test_e2e.py, whose sample is below linear_start_process_rows)."""
    from components.train.linear_fit import fitted_beside
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    settings = penguin_settings(epochs=30, learning_rate=50.0, validation_percent=25,
                                early_stopping={"patience": 2}, linear_start_process_rows=0)
    with fitted_beside(penguin_examples, PENGUIN_COLUMNS, settings) as linear:
        report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"),
                             PENGUIN_COLUMNS, settings, linear=linear)
    phases = [p["name"] for p in report["phases"]]
    # the model was built before the wait for the fit's weights
    assert phases.index("model and input, the validation slice's first read beside them") < phases.index(
        "linear start") < phases.index("epoch 1")
    assert report["linear_start"].startswith("LogisticRegression on ")
    assert report["best_epoch"] == 0 and report["epochs_run"] == 2, report["history"]
    assert report["start_validation_value"] - report["start_margin"] < min(report["history"]["val_loss"])
    assert report["start_margin"] > 0  # standard errors of the per-row difference, the start's loss minus the epoch's
    # the kept start's own validation accuracy is the report's best, not missing
    assert 0.5 < report["best_validation_accuracy"] <= 1.0
    _, start = _penguin_start(penguin_examples, penguin_validation, held_out=25)  # no text: fitted on every row
    assert report["linear_start"] == f"LogisticRegression on {start.fit_rows} train rows"
    assert start.fit_rows == _penguin_start(penguin_examples, penguin_validation)[1].fit_rows
    kinds = {**{c.name: "numeric" for c in start.design.numeric},
             **{c.name: "categorical" for c in start.design.categorical}}
    x, _ = read_split(penguin_examples, names.EVAL_SPLIT, "species", kinds, False)
    served = tf.saved_model.load(str(tmp_path / "m")).signatures[names.SERVING_SIGNATURE](
        **{k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(served[names.PROBABILITIES].numpy(), start.fit.predict(design_matrix(start.design, x)),
                               atol=1e-5)


def test_the_regression_target_is_the_one_whose_linear_model_cross_validates_better(tmp_path, ingest):
    """A label linear in its feature, but skewed (the feature is): its statistics say log,
    the linear model's cross-validated rmse says the label itself, and that is learnt."""
    from components.train.linear_start import fit_linear_start
    from components.train.target import regression_target

    rng = np.random.default_rng(1)
    x = rng.exponential(1.0, 800)
    y = 2 + 3 * x + rng.normal(0, 0.3, len(x)).clip(-1.9, None)
    csv = tmp_path / "linear.csv"
    csv.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in zip(x, y)) + "\n")
    examples = str(tmp_path / "examples")
    ingest(str(csv), examples, "y", ["x"], [], eval_percent=20, numeric_label=True)
    stats = load_statistics(ingest_statistics_dir(examples), names.TRAIN_SPLIT)
    specs = specs_from_statistics(stats, Columns(label="y", numeric_features=["x"], categorical_features=[]), "regression")
    by_statistics, why, model_specs = regression_target(specs, stats, "auto")
    assert by_statistics == "log", why
    start = fit_linear_start(examples, specs, stats, by_statistics, why, model_specs, "auto")
    assert start.target == "standardize" and start.specs == specs, start.why
    assert "the label standardised" in start.why and "log(1 + y) standardised" in start.why
    assert start.choice_rmse == pytest.approx(0.3, rel=0.25)
    forced = fit_linear_start(examples, specs, stats, "log", "set", model_specs, "log")
    assert forced.target == "log" and forced.why == "set"  # an explicit transform is not second-guessed

