"""Unit tests of evaluate logic: real scoring of a trained SavedModel, and the blessing rule."""
import pytest

from components.evaluate.logic import Evaluation, bless_model, read_blessing, score_model, write_blessing
from components.errors import GpupipeError

pytestmark = pytest.mark.unit


def test_scores_eval_split(penguin_model, penguin_examples):
    evaluation = score_model(penguin_model, penguin_examples)
    assert evaluation.classes == ["Adelie", "Chinstrap", "Gentoo"]
    total = sum(sum(row) for row in evaluation.confusion_matrix)
    assert total == evaluation.metrics["examples"] > 0
    correct = sum(evaluation.confusion_matrix[i][i] for i in range(3))
    assert evaluation.metrics["accuracy"] == pytest.approx(correct / total)
    assert evaluation.metrics["log_loss"] > 0
    assert set(evaluation.per_class) == set(evaluation.classes)


def _evaluation(accuracy):
    return Evaluation(metrics={"accuracy": accuracy, "log_loss": 0.3, "examples": 10}, classes=["a", "b"],
                      confusion_matrix=[[5, 0], [0, 5]], per_class={})


def test_blessed_at_or_above_threshold(tmp_path):
    blessing = bless_model(_evaluation(0.9), "accuracy", 0.9)
    assert blessing.blessed and "meets threshold" in blessing.reasons[0]
    write_blessing(blessing, str(tmp_path))
    assert read_blessing(str(tmp_path)) == blessing


def test_not_blessed_below_threshold_says_why():
    blessing = bless_model(_evaluation(0.85), "accuracy", 0.9)
    assert not blessing.blessed
    assert blessing.reasons == ["accuracy 0.8500 is below threshold 0.9000"]


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(GpupipeError, match="evaluation.metric: 'auc' is not computed"):
        bless_model(_evaluation(0.9), "auc", 0.5)
