"""Unit tests of train logic: feature specs, strategy choice, the exported signatures."""
import json

import numpy as np
import pytest
import tensorflow as tf

from components.kinds import Columns, load_feature_specs, specs_from_statistics
from components.contracts.statistics import load_statistics
from components.train.runtime import cluster_workers, is_chief

pytestmark = pytest.mark.unit

ROWS = {
    "bill_length_mm": [39.1, 46.5, 50.0], "bill_depth_mm": [18.7, 13.5, 19.5],
    "flipper_length_mm": [181.0, 210.0, 196.0], "body_mass_g": [3750.0, 4550.0, 3900.0],
    "island": ["Torgersen", "Biscoe", "Dream"], "sex": ["male", "female", "male"],
}


def test_specs_come_from_train_statistics(penguin_validation):
    stats = load_statistics(penguin_validation["statistics"], "train")
    specs = specs_from_statistics(stats, Columns(label="species", numeric_features=["body_mass_g"],
                                                 categorical_features=["island"]))
    assert specs.classes == ["Adelie", "Chinstrap", "Gentoo"]
    assert 3000 < specs.numeric[0].mean < 5500 and specs.numeric[0].std > 100
    assert set(specs.categorical[0].vocabulary) == {"Biscoe", "Dream", "Torgersen"}


def test_serving_default_takes_raw_rows_and_matches_example_signature(penguin_model):
    loaded = tf.saved_model.load(penguin_model)
    raw = loaded.signatures["serving_default"](**{
        k: tf.constant(v, tf.string if isinstance(v[0], str) else tf.float32) for k, v in ROWS.items()})
    probabilities = raw["probabilities"].numpy()
    assert probabilities.shape == (3, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)

    def example(i):
        feats = {}
        for k, v in ROWS.items():
            if isinstance(v[i], str):
                feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v[i].encode()]))
            else:
                feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[v[i]]))
        return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()

    from_examples = loaded.signatures["serving_examples"](examples=tf.constant([example(i) for i in range(3)]))
    np.testing.assert_allclose(from_examples["probabilities"].numpy(), probabilities, rtol=1e-6)
    assert list(from_examples["classes"].numpy()) == list(raw["classes"].numpy())


def test_missing_values_are_imputed_inside_the_model(penguin_model):
    serve = tf.saved_model.load(penguin_model).signatures["serving_default"]
    rows = {k: tf.constant(v[:1], tf.string if isinstance(v[0], str) else tf.float32) for k, v in ROWS.items()}
    rows["body_mass_g"] = tf.constant([float("nan")])
    rows["sex"] = tf.constant([""])
    assert np.isfinite(serve(**rows)["probabilities"].numpy()).all()


def test_feature_specs_are_stored_with_the_model(penguin_model):
    specs = load_feature_specs(penguin_model)
    assert specs.label == "species" and len(specs.numeric) == 4 and len(specs.categorical) == 2


def test_the_served_model_answers_as_the_trained_one_and_holds_no_optimizer_state(tmp_path):
    """The export tracks the model's variables and lookup tables, not the tf_keras model:
    the optimizer's slots (Adam's m and v) stay out of the serving directory, and both
    signatures give what the trained model gives."""
    import os

    import tf_keras

    from components.kinds.categorical import CategoricalFeature
    from components.kinds.numeric import NumericFeature
    from components.train.export import export_saved_model
    from components.kinds import FeatureSpecs

    x = tf_keras.Input(shape=(1,), name="x", dtype=tf.float32)
    c = tf_keras.Input(shape=(1,), name="c", dtype=tf.string)
    index = tf_keras.layers.StringLookup(vocabulary=["a", "b"], name="c_index")(c)
    embedded = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(3, 2)(index))
    out = tf_keras.layers.Dense(3, activation="softmax")(tf_keras.layers.Concatenate()([x, embedded]))
    model = tf_keras.Model({"x": x, "c": c}, out)
    model.compile(optimizer=tf_keras.optimizers.legacy.Adam(0.1), loss="sparse_categorical_crossentropy")
    rows = {"x": np.array([[0.5], [-1.0], [2.0]], np.float32), "c": np.array([[b"a"], [b"b"], [b"zz"]])}
    model.fit(rows, np.array([0, 1, 2]), epochs=2, verbose=0)
    assert model.optimizer.weights  # the slots exist, to be left out
    specs = FeatureSpecs(label="y", classes=["p", "q", "r"], task="multiclass", features={
        "numeric": [NumericFeature("x", 0.0, 1.0)], "categorical": [CategoricalFeature("c", ["a", "b"])]})
    export_saved_model(model, specs, str(tmp_path / "m"))

    saved = [name for name, _ in tf.train.list_variables(os.path.join(tmp_path, "m", "variables", "variables"))]
    assert saved and not [n for n in saved if "OPTIMIZER_SLOT" in n or "optimizer" in n.lower()], saved
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    assert len(loaded.model_variables) == len(model.variables) and len(loaded.model_resources) == 1
    expected = model.predict(rows, verbose=0)
    raw = loaded.signatures["serving_default"](x=tf.constant([0.5, -1.0, 2.0]), c=tf.constant(["a", "b", "zz"]))
    np.testing.assert_allclose(raw["probabilities"].numpy(), expected, rtol=1e-6)
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)])),
        "c": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b]))})).SerializeToString()
        for v, b in zip([0.5, -1.0, 2.0], [b"a", b"b", b"zz"])]
    served = loaded.signatures["serving_examples"](examples=tf.constant(examples))
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, rtol=1e-6)
    assert [v.decode() for v in served["classes"].numpy()] == [["p", "q", "r"][i] for i in expected.argmax(1)]


@pytest.mark.parametrize("tf_config, workers, chief", [
    (None, 1, True),
    (json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}), 2, True),
    (json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}), 2, False),
    (json.dumps({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}), 2, False),
    (json.dumps({"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}), 2, True),
])
def test_workers_and_chief_from_tf_config(tf_config, workers, chief):
    assert cluster_workers(tf_config) == workers
    assert is_chief(tf_config) is chief


@pytest.mark.parametrize("setting, capability, policy", [
    ("auto", None, "float32"),          # CPU
    ("auto", (7, 5), "mixed_float16"),  # T4
    ("auto", (8, 0), "mixed_bfloat16"),  # A100
    ("float16", (8, 9), "mixed_float16"),
    ("off", (9, 0), "float32"),
    ("auto", (6, 1), "float32"),        # P4: no fast float16
])
def test_precision_follows_compute_capability(setting, capability, policy):
    from components.train.runtime import precision_policy

    assert precision_policy(setting, capability) == policy


def test_bfloat16_needs_ampere():
    from components.train.runtime import precision_policy

    with pytest.raises(ValueError, match="bfloat16 needs compute capability 8.0"):
        precision_policy("bfloat16", (7, 5))


@pytest.mark.parametrize("family", ["wide_deep", "cross"])
def test_model_families_build_train_and_export(tmp_path, penguin_examples, penguin_validation, family):
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         penguin_settings(model=family, epochs=2))
    assert report["model"] == family and report["optimizer_steps"] == 2 * report["steps_per_epoch"]
    # One trace for the whole fit: every epoch, and the short last batch, reuse it.
    assert report["train_function_traces"] == 1
    assert tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"] is not None


def test_high_cardinality_features_are_hashed(penguin_validation):
    stats = load_statistics(penguin_validation["statistics"], "train")
    specs = specs_from_statistics(stats, Columns(label="species", categorical_features=["island", "sex"]), max_vocabulary=2,
                                  hash_buckets=64)
    island, sex = specs.categorical
    assert island.hash_buckets == 64 and island.vocabulary == []  # 3 islands > 2
    assert sex.hash_buckets == 0 and sorted(sex.vocabulary) == ["female", "male"]


def test_categorical_features_share_one_embedding_table_with_a_block_of_rows_each(penguin_validation):
    """island hashed into 64 buckets (rows 0-63), sex by vocabulary (row 64 out of
    vocabulary, 65-66 its two values); numerics imputed and standardised together."""
    import tf_keras

    from components.train.model import FeatureParts, build_model
    from conftest import penguin_settings

    stats = load_statistics(penguin_validation["statistics"], "train")
    specs = specs_from_statistics(stats, Columns(label="species", numeric_features=["bill_length_mm", "body_mass_g"],
                                                 categorical_features=["island", "sex"]),
                                  max_vocabulary=2, hash_buckets=64)
    parts = FeatureParts(specs, penguin_settings())
    probe = tf_keras.Model(parts.inputs, [parts.ids, *parts.numeric])
    rows, numeric = probe({"island": tf.constant([["Biscoe"], ["Dream"]]), "sex": tf.constant([["male"], ["?"]]),
                           "bill_length_mm": tf.constant([[float("nan")], [39.1]]),
                           "body_mass_g": tf.constant([[4000.0], [float("nan")]])})
    sex_vocabulary = specs.categorical[1].vocabulary
    island_buckets = tf_keras.layers.Hashing(64)(tf.constant([["Biscoe"], ["Dream"]])).numpy().reshape(-1)
    np.testing.assert_array_equal(rows.numpy(), [[island_buckets[0], 64 + 1 + sex_vocabulary.index("male")],
                                                 [island_buckets[1], 64]])
    bill, mass = specs.numeric
    np.testing.assert_allclose(numeric.numpy(), [[0.0, (4000.0 - mass.mean) / mass.std],
                                                 [(39.1 - bill.mean) / bill.std, 0.0]], rtol=1e-4, atol=1e-5)

    model = build_model(specs, penguin_settings())
    tables = [layer for layer in model.layers if isinstance(layer, tf_keras.layers.Embedding)]
    assert [t.input_dim for t in tables] == [64 + 3]


def test_optimizers_by_name():
    import tf_keras

    from components.contracts.errors import GpupipeError
    from components.train.optimizers import make_optimizer

    assert isinstance(make_optimizer("adagrad", 0.05), tf_keras.optimizers.legacy.Adagrad)
    assert isinstance(make_optimizer("adam", 1e-3), tf_keras.optimizers.legacy.Adam)
    assert isinstance(make_optimizer("sgd", 0.1), tf_keras.optimizers.legacy.SGD)
    with pytest.raises(GpupipeError, match="training.optimizer: 'lamb' is not one of"):
        make_optimizer("lamb", 0.1)


def test_adam_applies_embedding_gradients_densely_with_the_same_result_as_the_sparse_path():
    """components.train.runtime.Adam against tf_keras' own legacy Adam, whose sparse path
    updates every row's moments too: the same weights after a few steps on an embedding
    (rows looked up twice in a batch, rows never looked up) and a dense layer."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from components.contracts.compat.tensorflow import graph_code_without_autograph
    from components.contracts.compat.tf_keras import Adam

    graph_code_without_autograph()  # as the trainer does

    def train(optimizer):
        tf_keras.utils.set_random_seed(3)
        ids = tf_keras.Input((2,), dtype=tf.int32)
        x = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(50, 4)(ids))
        model = tf_keras.Model(ids, tf_keras.layers.Dense(1)(x))
        model.compile(optimizer=optimizer, loss="mse")
        initial = model.get_weights()
        rows = np.array([[1, 1], [2, 7], [7, 9], [1, 30]], dtype=np.int32)  # rows 0, 3-6, ... never looked up
        model.fit(rows, np.array([0.5, -1.0, 2.0, 0.0]), batch_size=4, epochs=5, verbose=0)
        assert int(model.optimizer.iterations.numpy()) == 5
        return initial, model.get_weights()

    (initial, fused), (_, library) = train(Adam(0.1)), train(tf_keras.optimizers.legacy.Adam(0.1))
    looked_up = [1, 2, 7, 9, 30]
    assert not np.allclose(fused[0][looked_up], initial[0][looked_up])  # the embedding rows trained
    np.testing.assert_array_equal(np.delete(fused[0], looked_up, axis=0), np.delete(initial[0], looked_up, axis=0))
    for mine, theirs in zip(fused, library):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_early_stopping_ends_training_when_the_metric_stops_improving(tmp_path, penguin_examples, penguin_validation):
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    # A learning rate of ~0: the loss cannot improve by min_delta, so training stops after `patience` epochs.
    settings = penguin_settings(epochs=50, learning_rate=1e-9,
                                early_stopping={"metric": "loss", "patience": 2, "min_delta": 0.01})
    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         settings)
    assert report["epochs"] == 50 and report["epochs_run"] == 3
    assert [len(report["history"][k]) for k in ("loss", "accuracy")] == [3, 3]  # one value per epoch run
    assert report["optimizer_steps"] == 3 * report["steps_per_epoch"]
    assert tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"] is not None


@pytest.mark.parametrize("decay, expected", [
    # rate 0.1, 10 warmup steps, then 100 steps of decay
    ("cosine", {0: 0.0, 5: 0.05, 10: 0.1, 60: 0.01 + 0.09 * 0.5 * (1 + np.cos(np.pi * 0.5)), 110: 0.01, 500: 0.01}),
    ("step", {0: 0.0, 5: 0.05, 10: 0.1, 39: 0.1, 40: 0.05, 70: 0.025}),
    ("none", {5: 0.05, 10: 0.1, 500: 0.1}),
])
def test_the_learning_rate_schedule_follows_its_formula(decay, expected):
    from components.train.optimizers import learning_rate_schedule
    from components.train.settings import LearningRateSchedule

    schedule = learning_rate_schedule(0.1, LearningRateSchedule(warmup_steps=10, decay=decay, alpha=0.1,
                                                                every_steps=30, factor=0.5), total_steps=110)
    for step, rate in expected.items():
        assert float(schedule(step)) == pytest.approx(rate, rel=1e-5, abs=1e-7), step


def test_a_scheduled_and_profiled_run_trains_and_writes_a_trace_under_the_tensorboard_logs(
        tmp_path, penguin_examples, penguin_validation):
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    settings = penguin_settings(epochs=3, lr_schedule={"warmup_steps": 5, "decay": "cosine"}, profile_steps=(2, 4))
    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         settings, log_dir=str(tmp_path / "tensorboard"))
    assert report["optimizer_steps"] == 3 * report["steps_per_epoch"]
    traces = list((tmp_path / "tensorboard").glob("plugins/profile/*/*.xplane.pb"))
    assert traces and traces[0].stat().st_size > 0


def test_a_corrupt_checkpoint_fails_once_in_one_line_and_the_retry_trains_from_step_0(
        tmp_path, penguin_examples, penguin_validation):
    from components.contracts.errors import GpupipeError
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    backup = tmp_path / "backup"
    train = lambda: train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"),  # noqa: E731
                                PENGUIN_COLUMNS, penguin_settings(epochs=2), backup_dir=str(backup))
    (backup / "chief").mkdir(parents=True)
    (backup / "chief" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    (backup / "chief" / "ckpt-7.index").write_bytes(b"\x00not an index")
    (backup / "chief" / "ckpt-7.data-00000-of-00001").write_bytes(b"\x00garbage")
    with pytest.raises(GpupipeError) as err:
        train()
    message = str(err.value)
    assert message.startswith(f"training: the checkpoint in {backup} cannot be restored (") and "\n" not in message
    assert message.endswith("it was removed, so the next retry of this task trains from step 0")
    assert not backup.exists()
    report = train()  # the retry
    assert report["resumed_from_step"] == 0 and report["optimizer_steps"] == 2 * report["steps_per_epoch"]


def test_a_single_worker_error_is_reported_once(tmp_path, penguin_examples, monkeypatch):
    """run_train_task (the task) calls run_train: the error file gets the one line once."""
    from components.contracts.errors import ERROR_FILE_ENV, GpupipeError
    from components.train.logic import run_train_task
    from conftest import PENGUIN_COLUMNS, penguin_settings

    errors = tmp_path / "errors.txt"
    monkeypatch.setenv(ERROR_FILE_ENV, str(errors))
    missing = str(tmp_path / "no-statistics")
    with pytest.raises(GpupipeError, match="run validate first"):
        run_train_task(examples=(penguin_examples, penguin_examples), statistics=(missing, missing),
                       model=(str(tmp_path / "m"), str(tmp_path / "m")), log_dir="", summary_md="",
                       columns=PENGUIN_COLUMNS, settings=penguin_settings())
    lines = errors.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and lines[0].startswith("train: statistics: ") and "run validate first" in lines[0]


def test_a_worker_entry_point_error_is_reported_once_and_exits_2(tmp_path, penguin_examples, monkeypatch, capsys):
    from components.contracts.errors import ERROR_FILE_ENV
    from components.train.__main__ import main
    from conftest import PENGUIN_COLUMNS, penguin_settings

    errors = tmp_path / "errors.txt"
    monkeypatch.setenv(ERROR_FILE_ENV, str(errors))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    code = main(["--examples", penguin_examples, "--statistics", str(tmp_path / "none"), "--model-dir",
                 str(tmp_path / "m"), "--columns", PENGUIN_COLUMNS.model_dump_json(),
                 "--settings", penguin_settings().model_dump_json()])
    assert code == 2 and "run validate first" in capsys.readouterr().err
    assert len(errors.read_text(encoding="utf-8").splitlines()) == 1


@pytest.fixture(scope="module")
def written_report(tmp_path_factory, penguin_examples, penguin_validation):
    """run_train's report, the JSON it wrote and the run's wall time: 2 epochs with the
    linear start and a validation slice (20% of the penguins' train rows)."""
    import time

    from components.contracts import names
    from components.train.logic import run_train
    from conftest import PENGUIN_COLUMNS, penguin_settings

    tmp_path = tmp_path_factory.mktemp("report")
    started = time.monotonic()
    report = run_train(examples_dir=penguin_examples, statistics_dir=penguin_validation["statistics"],
                       model_dir=str(tmp_path / "m"), columns=PENGUIN_COLUMNS,
                       settings=penguin_settings(epochs=2, validation_percent=20), report_dir=str(tmp_path / "r"))
    seconds = time.monotonic() - started
    return report, json.loads((tmp_path / "r" / names.TRAIN_REPORT_FILE).read_text(encoding="utf-8")), seconds


def test_the_report_is_typed_and_its_json_keys_are_the_ones_written_before(written_report):
    """train_model returns a TrainReport; run_train writes its to_dict() (the keys evaluate, the
    run summary and the KFP metrics read, in the order they had)."""
    from components.train.report import TrainReport

    report, written, _ = written_report
    assert written == report
    assert list(written) == [
        "examples_per_second", "train_seconds", "epochs", "epochs_run", "early_stopping_monitor", "best_epoch",
        "linear_start", "start_validation_value", "start_margin", "validation_percent", "validation_examples_estimate", "target_transform", "target_transform_why",
        "log_target_smearing", "steps_per_epoch", "optimizer_steps", "train_function_traces", "resumed_from_step",
        "preemptions", "resumes", "steps_lost", "interruptions", "first_epoch_seconds", "steady_epoch_seconds",
        "step_seconds_p50", "step_seconds_p95", "compute_only_step_seconds_p50", "input_wait_fraction",
        "input_core_us_per_example", "feed_examples_per_core_second", "train_examples", "replicas", "workers", "strategy", "global_batch_size", "gradient_accumulation_steps",
        "effective_batch_size", "learning_rate", "optimizer", "precision_policy", "xla", "input_cache", "gpus",
        "gpu_utilization_mean", "gpu_hours", "estimated_cost", "final_loss", "final_train_accuracy",
        "best_validation_accuracy", "model", "chief", "history", "phases"]
    typed = TrainReport(**{**{k: v for k, v in written.items()
                              if k not in ("final_train_accuracy", "best_validation_accuracy")},
                           "metric": "accuracy", "final_train_metric": written["final_train_accuracy"],
                           "best_validation_metric": 0.5})
    assert typed.to_dict()["best_validation_accuracy"] == 0.5 and typed["final_train_accuracy"] == typed.final_train_metric
    assert "final_train_metric" not in typed and "metric" not in typed.to_dict()


def test_the_report_says_where_the_time_went_phase_by_phase(written_report):
    """The phases, in order, cover the run: their sum is its wall time within 15%; each
    epoch's training steps are inside the epoch the StepTimer measured (its validation
    pass out), and the Markdown report has them as a table."""
    from components.train import phases as p
    from components.train.report import render_report

    report, written, seconds = written_report
    assert written["validation_percent"] == 20 and written["linear_start"] and written["epochs_run"] == 2
    names_ = [phase["name"] for phase in written["phases"]]
    # the slice is cached in memory here: its first pass runs beside the linear start and the model build
    assert names_ == [p.START, p.STATISTICS, p.LINEAR_START, p.MODEL_BESIDE, p.VALIDATION, p.epoch_phase(1),
                      p.epoch_phase(2), p.FIT_OTHER, p.EXPORT, p.REPORT]
    spent = {phase["name"]: phase["seconds"] for phase in written["phases"]}
    assert all(v >= 0 for v in spent.values()) and spent[p.VALIDATION] > 0 and spent[p.EXPORT] > 0
    assert abs(sum(spent.values()) - seconds) <= 0.15 * seconds, (spent, seconds)
    fit = spent[p.VALIDATION] + spent[p.epoch_phase(1)] + spent[p.epoch_phase(2)] + spent[p.FIT_OTHER]
    assert abs(fit - written["train_seconds"]) <= 0.15 * written["train_seconds"], (fit, written["train_seconds"])
    # a classifier's linear start: the stopper scores the slice after the epoch's own timing,
    # so the epoch phase is its steps and the slice's passes are the validation phase
    assert spent[p.epoch_phase(1)] <= written["first_epoch_seconds"]
    assert "val_loss" in written["history"] and "val_accuracy" in written["history"]
    assert f"| {p.EXPORT} | {spent[p.EXPORT]:.2f} |" in render_report(written)
    # the feed's cost per example and the per-core rate it gives (telemetry.feed_cost), where the run tells it
    if written["input_core_us_per_example"] is not None:
        assert written["input_core_us_per_example"] > 0
        # the rate comes from the unrounded cost: within the cost's rounding to 0.01 µs and its own to 1
        us, rate = written["input_core_us_per_example"], written["feed_examples_per_core_second"]
        assert abs(rate - 1e6 / us) <= 1e6 * 0.005 / (us * (us - 0.005)) + 0.5, (rate, us)
