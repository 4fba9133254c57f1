"""Unit tests of evaluate's scoring pass: the eval split read from ingest's column blocks or
from its row shards, and the linear baseline scored inside the pass, against the same
figures computed the plain way."""
import dataclasses

import numpy as np
import pytest

from components.evaluate.logic import run_evaluate
from components.evaluate.settings import EvaluationSettings

pytestmark = pytest.mark.unit


def test_the_baseline_on_the_scoring_pass_rows_is_the_baseline_on_its_own_read(penguin_model, penguin_examples):
    """The baseline scored inside the candidate's pass, from the model's saved linear start
    (the same examples, rows and features: the same fit), is the one fitted afresh on a read
    of its own and scored through the sparse design (contracts/linear.py)."""
    from components.contracts.linear import design_matrix, read_split
    from components.evaluate.linear import baseline_input, fit_baseline, saved_baseline, saved_fit
    from components.evaluate.logic import Predictions, evaluate_predictions, score_with_baseline

    found, _ = baseline_input(penguin_examples)
    assert saved_fit(penguin_model, found, "multiclass") is not None  # the linear start is this baseline
    assert saved_fit(penguin_model, dataclasses.replace(found, train_rows=found.train_rows + 1), "multiclass") is None
    pred, shared, why = score_with_baseline(penguin_model, penguin_examples, ["island"])
    assert shared is not None and why == "" and shared.linear_model == "LogisticRegression"
    alone, _ = fit_baseline(penguin_examples, found, pred.task, pred.classes)  # reads the train split itself
    assert alone.design == saved_baseline(penguin_model, found, pred.task).design
    columns, y_eval = read_split(penguin_examples, "eval", found.label, found.kinds, False)
    labels = np.array([pred.classes.index(v) if v in pred.classes else -1 for v in y_eval])
    probabilities = alone.fit.predict(design_matrix(alone.design, columns))
    alone_scored = evaluate_predictions(Predictions(pred.classes, labels, probabilities, {}, pred.task))
    assert len(labels) == len(pred.labels) == shared.metrics["examples"]
    for key in ("accuracy", "log_loss"):
        assert shared.metrics[key] == pytest.approx(alone_scored.metrics[key], rel=1e-9)


def test_linear_scores_in_tensorflow_are_the_sparse_design_times_the_fit():
    """The baseline's weights applied inside the scoring pass (a matrix product for the
    numbers, a table lookup and gather per categorical feature) give fit.predict on
    contracts/linear.py's sparse design: missing numbers, missing and unseen values included."""
    import tensorflow as tf

    from components.contracts.linear import design_matrix, fit_design, fit_linear
    from components.evaluate.linear import BaselineFit, linear_scores

    rng = np.random.default_rng(1)
    rows = 600
    x = rng.normal(size=rows).astype(np.float32)
    x[rng.random(rows) < 0.2] = np.nan
    colour = rng.choice(np.array([b"red", b"green", b"", b"blue"], dtype=object), rows)
    columns = {"x": x, "colour": colour, "never": np.full(rows, b"", dtype=object)}
    y = np.where(np.nan_to_num(x) + (colour == b"red") > 0.3, "yes", "no").astype(object)
    design = fit_design(columns, ["x"], ["colour", "never"])
    later = {"x": np.append(x, [np.nan, 4.0]).astype(np.float32),  # rows the fit never saw
             "colour": np.append(colour, [b"purple", b""]), "never": np.append(columns["never"], [b"a", b""])}
    tensors = {k: tf.constant(v) for k, v in later.items()}
    for regression, classes, target in ((False, ["no", "yes", "maybe"], y),
                                        (True, [], x.astype(np.float64) * 2 + 1)):
        target = np.where(np.isnan(target), 0.0, target) if regression else target
        fit = fit_linear(design_matrix(design, columns), target, regression, classes)
        got = linear_scores(BaselineFit(design, fit, rows))(tensors).numpy()
        np.testing.assert_allclose(got, fit.predict(design_matrix(design, later)), rtol=1e-12, atol=1e-15)


def test_linear_scores_with_a_text_feature_are_the_sparse_design_times_the_fit():
    """A design with a text feature's TF-IDF block (contracts/linear_text.py) scores inside
    the pass as fit.predict on the sparse design: empty text and unseen words included."""
    import tensorflow as tf

    from components.contracts.linear import design_matrix, fit_design, fit_linear
    from components.evaluate.linear import BaselineFit, linear_scores

    rng = np.random.default_rng(2)
    words = np.array(["good", "bad", "film", "plot", "great", "dull", "the", "a"])
    rows = 400
    text = np.array([" ".join(rng.choice(words, rng.integers(0, 6))).encode() for _ in range(rows)], dtype=object)
    x = rng.normal(size=rows).astype(np.float32)
    columns = {"x": x, "review": text}
    y = np.where([(b"good" in t or b"great" in t) for t in text], "pos", "neg").astype(object)
    design = fit_design(columns, ["x"], [], {"review": 2})
    assert design.text and design.text[0].tokens
    later = {"x": np.append(x, [1.0, np.nan]).astype(np.float32),
             "review": np.append(text, [b"unseen words only", b""])}
    fit = fit_linear(design_matrix(design, columns), y, False, ["neg", "pos"])
    scores = linear_scores(BaselineFit(design, fit, rows))
    got = scores({k: tf.constant(v) for k, v in later.items()}).numpy()
    assert got.shape == (rows + 2, 2)
    np.testing.assert_allclose(got, fit.predict(design_matrix(design, later)), rtol=1e-12, atol=1e-15)
    assert (got.argmax(1)[:rows] == (y == "pos")).mean() > 0.9  # the text's words carry the label


def test_the_column_blocks_and_the_row_shards_give_the_same_evaluation(tmp_path, penguin_model, penguin_examples):
    """The eval split read from ingest's column blocks and from its row shards (a copy of the
    examples without blocks, as data gpupipe did not write) gives the same metrics, slices and
    baseline: the same rows, whichever way they are read."""
    import shutil

    from components.evaluate.logic import score_with_baseline

    rows_only = str(tmp_path / "examples")
    shutil.copytree(penguin_examples, rows_only, ignore=shutil.ignore_patterns("blocks"))
    by_blocks, linear_blocks, _ = score_with_baseline(penguin_model, penguin_examples, ["island"])
    by_rows, linear_rows, _ = score_with_baseline(penguin_model, rows_only, ["island"])
    assert (by_blocks.read, by_rows.read) == ("blocks", "rows")
    settings = EvaluationSettings(metric="accuracy", slices=["island"])
    results = []
    for i, examples in enumerate((penguin_examples, rows_only)):
        evaluation, _ = run_evaluate(model_dir=penguin_model, examples_dir=examples,
                                     blessing_dir=str(tmp_path / f"b{i}"), report_md=str(tmp_path / f"r{i}.md"),
                                     settings=settings)
        results.append(evaluation)
    blocks, rows = results
    assert blocks.metrics["examples"] == rows.metrics["examples"] > 0
    for key, value in rows.metrics.items():
        assert blocks.metrics[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert blocks.slices.keys() == rows.slices.keys() and blocks.confusion_matrix == rows.confusion_matrix
    for value, metrics in rows.slices["island"].items():
        assert blocks.slices["island"][value] == pytest.approx(metrics, rel=1e-6)
    assert blocks.linear == pytest.approx(rows.linear, rel=1e-9) and blocks.linear_model == rows.linear_model
    assert linear_blocks.metrics == pytest.approx(linear_rows.metrics, rel=1e-9)
