"""Training that fits the data (issue #27): early stopping on a validation slice of the train
split (never the eval split), and a regression target learnt standardised or as log(1 + y),
served in the label's own units."""
import json

import numpy as np
import pytest
import tensorflow as tf

from components.contracts import names
from components.contracts.examples import examples_pattern
from components.kinds import FeatureSpecs, load_feature_specs, specs_from_statistics
from components.kinds import Columns
from components.kinds.numeric import NumericFeature
from components.contracts.statistics import load_statistics


def _rows(dataset):
    """Each example of a parsed dataset as a tuple of its values (NaN as a string)."""
    out = []
    for features, target in dataset:
        keys = sorted(features)
        columns = [features[k].numpy().reshape(-1) for k in keys] + [target.numpy().reshape(-1)]
        out += [tuple(str(v) for v in row) for row in zip(*columns)]
    return out


def test_the_validation_slice_is_train_rows_disjoint_from_the_rows_trained_on_and_from_eval(
        penguin_examples, penguin_validation):
    from components.train.data import make_dataset
    from conftest import PENGUIN_COLUMNS

    stats = load_statistics(penguin_validation["statistics"], names.TRAIN_SPLIT)
    c = PENGUIN_COLUMNS
    specs = specs_from_statistics(stats, c)

    def rows(split, part):
        return _rows(make_dataset(examples_pattern(penguin_examples, split), specs, 32, shuffle=False, seed=1,
                                  validation_percent=20, part=part))

    everything, fit, held = rows(names.TRAIN_SPLIT, "all"), rows(names.TRAIN_SPLIT, "train"), \
        rows(names.TRAIN_SPLIT, "validation")
    evals = set(rows(names.EVAL_SPLIT, "all"))
    assert sorted(fit + held) == sorted(everything)  # every train row in exactly one part
    assert 0.1 * len(everything) < len(held) < 0.3 * len(everything)
    assert not set(held) & set(fit) and not set(held) & evals
    assert rows(names.TRAIN_SPLIT, "validation") == held  # the same rows every time (the examples' hash)


def test_early_stopping_monitors_the_validation_slice_and_keeps_the_best_epoch(
        tmp_path, penguin_examples, penguin_validation):
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    settings = penguin_settings(epochs=60, validation_percent=25, early_stopping={"patience": 3})
    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         settings)
    train_rows = report["train_examples"]
    assert report["early_stopping_monitor"] == "val_loss" and report["validation_percent"] == 25
    assert report["steps_per_epoch"] == int(np.ceil((train_rows - report["validation_examples_estimate"]) / 32))
    val_loss = report["history"]["val_loss"]
    assert len(val_loss) == report["epochs_run"]
    # the candidates: the starting (linear) weights, scored before the first epoch (an epoch must beat them
    # by one standard error of the per-row difference), then every epoch
    best = report["best_epoch"]
    if best == 0:  # no epoch passed the bar: the start's value less the margin
        assert report["start_margin"] > 0
    else:
        assert val_loss[best - 1] == min(val_loss) < report["start_validation_value"]
    # stopped `patience` epochs after the best one, or ran to the cap
    assert report["epochs_run"] == min(60, best + 3)


def test_without_enough_rows_for_a_slice_it_monitors_the_training_loss(tmp_path, penguin_examples,
                                                                      penguin_validation):
    from components.train.logic import validation_slice
    from conftest import penguin_settings

    assert validation_slice(penguin_settings(), 1000) == 10
    assert validation_slice(penguin_settings(), 200) == 0  # 20 rows: too few to steer
    assert validation_slice(penguin_settings(early_stopping=None), 1000) == 0
    assert validation_slice(penguin_settings(validation_percent=0), 1000) == 0


def _tiny_regression(bias: float):
    """A model whose output is `bias` whatever the input (a zero kernel)."""
    import tf_keras

    x = tf_keras.Input(shape=(1,), name="x", dtype=tf.float32)
    out = tf_keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer=tf_keras.initializers.Constant(bias),
                                name=names.PREDICTIONS)(x)
    return tf_keras.Model({"x": x}, out)


@pytest.mark.parametrize("target, smearing, expected", [("log", 1.0, 9.0), ("log", 1.1, 10.0),
                                                       ("standardize", 1.1, float(np.log1p(9.0)))])
def test_both_signatures_return_the_label_units(tmp_path, target, smearing, expected):
    from components.train.export import export_saved_model

    specs = FeatureSpecs(label="y", classes=[], features={"numeric": [NumericFeature("x", 0.0, 1.0)]}, task="regression")
    export_saved_model(_tiny_regression(float(np.log1p(9.0))), specs, str(tmp_path / "m"), target, smearing)
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    raw = loaded.signatures[names.SERVING_SIGNATURE](x=tf.constant([0.0, 5.0]))
    example = tf.train.Example(features=tf.train.Features(
        feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[3.0]))})).SerializeToString()
    served = loaded.signatures[names.EXAMPLES_SIGNATURE](examples=tf.constant([example]))
    np.testing.assert_allclose(raw[names.PREDICTIONS].numpy(), [expected, expected], rtol=1e-5)
    np.testing.assert_allclose(served[names.PREDICTIONS].numpy(), [expected], rtol=1e-5)


def test_the_transform_is_chosen_from_the_label_statistics():
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from components.train.target import choose_target_transform

    def stats(mean, median, std, low):
        f = statistics_pb2.FeatureNameStatistics()
        f.num_stats.mean, f.num_stats.median, f.num_stats.std_dev, f.num_stats.min = mean, median, std, low
        return f

    assert choose_target_transform(stats(10, 4, 12, 0))[0] == "log"  # skew 1.5, never negative
    assert choose_target_transform(stats(10, 9, 12, 0))[0] == "standardize"  # skew 0.25
    assert choose_target_transform(stats(10, 7.5, 12, 0))[0] == "log"  # skew 0.625
    assert choose_target_transform(stats(10, 4, 12, -1))[0] == "standardize"  # negative values
    assert choose_target_transform(stats(10, 4, 12, 0), "standardize")[0] == "standardize"


def test_a_skewed_target_is_learnt_as_log_and_reported_and_served_in_label_units(tmp_path, ingest):
    """A log-normal label (its mean far above its median): training picks log(1 + y); the
    rmse the report states is in the label's units (the same value evaluate's formula gives
    on the training rows' predictions is in the same range), and the served predictions'
    median is the label's, not its logarithm's."""
    from components.train.logic import train_model
    from components.contracts.examples import ingest_statistics_dir
    from components.train.settings import TrainSettings

    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 1500)
    y = np.exp(1 + 0.9 * x + rng.normal(0, 0.3, len(x)))  # log-normal: 3 (mean - median) / std about 0.9
    csv = tmp_path / "skewed.csv"
    csv.write_text("x,y\n" + "\n".join(f"{a:.5f},{b:.5f}" for a, b in zip(x, y)) + "\n")
    examples = str(tmp_path / "examples")
    ingest(str(csv), examples, "y", ["x"], [], eval_percent=20, numeric_label=True)
    statistics = ingest_statistics_dir(examples)  # what the train task reads: ingest's statistics
    settings = TrainSettings(task="regression", hidden_units=[16], epochs=40, batch_size=32, learning_rate=0.01,
                             early_stopping={"patience": 5})
    report = train_model(examples, statistics, str(tmp_path / "m"), Columns(label="y", numeric_features=["x"]),
                         settings)
    assert report["target_transform"] == "log", report["target_transform_why"]
    assert report["early_stopping_monitor"] == "val_loss"
    # rmse in the label's units (the label's deviation is about 4; the noise on the log scale 0.3)
    assert 1.0 < report["best_validation_rmse"] < np.std(y)
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    grid = np.linspace(-1.5, 1.5, 13).astype(np.float32)
    predicted = loaded.signatures[names.SERVING_SIGNATURE](x=tf.constant(grid))[names.PREDICTIONS].numpy()
    truth_median = np.exp(1 + 0.9 * grid)
    np.testing.assert_allclose(predicted, truth_median, rtol=0.25)
    # the specs beside the model keep the label's own mean (what the train split's statistics say)
    stored = load_feature_specs(str(tmp_path / "m"))
    assert stored.label_mean == pytest.approx(np.mean(y), rel=0.1)
