"""Gradient accumulation (training.gradient_accumulation_steps): k accumulated steps make the
update of one step of k x the batch (default strategy; a 2-replica MirroredStrategy under
mixed_float16), a resume mid-window continues the window, the learning-rate schedule counts
applied updates, and the trainer takes the key."""
import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from components.contracts.compat.tensorflow import graph_code_without_autograph
from components.train.optimizers import accumulate, build_optimizer_slots, make_optimizer

pytestmark = pytest.mark.unit
graph_code_without_autograph()  # as train_model does: the first trace in 1 s, not 15

ROWS = 64
MODULE = "components.train.test_accumulation"  # run as a process of its own by the mirrored test


def data():
    rng = np.random.default_rng(0)
    x = {"ids": rng.integers(0, 10, (ROWS, 1)), "num": rng.normal(size=(ROWS, 3)).astype("float32")}
    return x, rng.integers(0, 3, (ROWS,))


def tiny_model():
    """An embedding (a sparse gradient) and two dense layers, the same weights every call."""
    tf_keras.utils.set_random_seed(1)
    ids, num = tf_keras.Input((1,), dtype="int64", name="ids"), tf_keras.Input((3,), name="num")
    embedded = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(10, 4)(ids))
    hidden = tf_keras.layers.Dense(8, activation="relu")(tf_keras.layers.Concatenate()([embedded, num]))
    return tf_keras.Model([ids, num], tf_keras.layers.Dense(3, activation="softmax", dtype="float32")(hidden))


def compiled(k, optimizer, strategy=None):
    with (strategy or tf.distribute.get_strategy()).scope():
        model = tiny_model()
        model.compile(optimizer=make_optimizer(optimizer, 0.1), loss="sparse_categorical_crossentropy")
        accumulate(model, k)  # as compile_model does
        build_optimizer_slots(model.optimizer, model.trainable_variables)
    return model


def gap(a, b) -> float:
    return max(float(np.max(np.abs(u.numpy() - v.numpy()))) for u, v in zip(a.trainable_variables,
                                                                          b.trainable_variables))


def compare(optimizer, strategy=None, small_steps=True, large_strategy=None) -> dict:
    """k=4 x batch 8 (under `strategy`) against k=1 x batch 32 (under `large_strategy`, by
    default the same) over the same 64 rows in the same order (two updates each), and plain
    batch-8 steps for scale."""
    x, y = data()
    runs = {}
    for name, k, batch in [("accumulated", 4, 8), ("large", 1, 32)] + ([("small", 1, 8)] if small_steps else []):
        model = compiled(k, optimizer, large_strategy if name == "large" and large_strategy else strategy)
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch), epochs=1, verbose=0)
        runs[name] = model
    acc = runs["accumulated"]
    return {"gap": gap(acc, runs["large"]),
            "small_steps_gap": gap(runs["small"], runs["large"]) if small_steps else None,
            "iterations": int(acc.optimizer.iterations.numpy()), "micro_steps": int(acc.optimizer.micro_steps.numpy()),
            "large_iterations": int(runs["large"].optimizer.iterations.numpy()),
            "traces": acc.train_function.experimental_get_tracing_count(),
            "wrapped": type(acc.optimizer.inner_optimizer).__name__}


def check(result, tolerance):
    assert result["gap"] < tolerance, result
    if result["small_steps_gap"] is not None:  # the comparison can tell the difference
        assert result["small_steps_gap"] > 100 * tolerance, result
    assert (result["iterations"], result["micro_steps"], result["large_iterations"]) == (2, 8, 2), result
    assert result["traces"] == 1, result  # the cond adds no retrace


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_four_accumulated_steps_make_the_update_of_one_step_of_four_times_the_batch(optimizer):
    check(compare(optimizer), 1e-5)


def mirrored_result() -> dict:
    """In a process of its own (`python -m components.train.test_accumulation`): two logical
    CPUs (devices are fixed once TensorFlow starts), a 2-replica MirroredStrategy, and the
    comparison under mixed_float16 (what the small GPUs, compute capability 7.x, train
    with), against one step of the large batch on one device (a one-replica trace costs
    less than a mirrored one)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {"replicas": strategy.num_replicas_in_sync}
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    out["mixed_float16"] = compare("adam", strategy, small_steps=False, large_strategy=tf.distribute.get_strategy())
    return out


def test_under_mirrored_strategy_each_replica_accumulates_and_the_update_matches_the_large_batch(warm_module):
    """Two replicas (two logical CPUs, in a process of their own: devices are fixed once TF
    starts): each accumulates its half of every micro-batch, the all-reduce runs when applying,
    and the weights end as after one step of 4 x the batch on one device. Under
    mixed_float16, so the LossScaleOptimizer sits inside the accumulation (and the
    accumulation's cross-replica path is the same with or without it). The process is a fork
    of the session's warm server (the root conftest's `warm_module`), which imported
    TensorFlow without starting its runtime, so the devices are still this process's to set."""
    from conftest import ROOT

    python, warm_env = warm_module(MODULE)
    done = subprocess.run([python, "-m", MODULE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **warm_env, "PYTHONPATH": str(ROOT),
                               "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert out["replicas"] == 2
    check(out["mixed_float16"], 1e-3)
    assert out["mixed_float16"]["wrapped"] == "LossScaleOptimizer"


class Interrupted(Exception):
    pass


def test_a_resume_in_the_middle_of_a_window_restores_the_accumulated_gradients(tmp_path):
    """The accumulators and the micro-step counter are checkpointed with the optimizer: a run
    stopped after 6 of 12 steps (k=4: one update and half a window) and resumed from its
    checkpoint (the one of step 6) trains steps 7 to 12 and ends with the weights of an
    uninterrupted run. The same batch every step, so that the resumed run (whose dataset
    starts over) sees the same data."""
    x, y = data()
    batch = tf.data.Dataset.from_tensor_slices((x, y)).take(8).batch(8).repeat()

    def fit(model, callbacks=()):
        model.fit(batch, epochs=1, steps_per_epoch=12, callbacks=list(callbacks), verbose=0)

    uninterrupted = compiled(4, "adam")
    fit(uninterrupted)

    class StopAfterSixSteps(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            if step == 5:
                raise Interrupted

    class Steps(tf_keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_train_batch_end(self, step, logs=None):
            self.seen.append(step)

    first = compiled(4, "adam")
    with pytest.raises(Interrupted):  # BackupAndRestore saves at step 6, then the run stops
        fit(first, [tf_keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=6), StopAfterSixSteps()])
    assert (int(first.optimizer.iterations.numpy()), int(first.optimizer.micro_steps.numpy())) == (1, 6)

    resumed, steps = compiled(4, "adam"), Steps()
    fit(resumed, [tf_keras.callbacks.BackupAndRestore(str(tmp_path), save_freq=6), steps])
    assert steps.seen == list(range(6, 12))  # it resumed at step 7, not from the start
    assert (int(resumed.optimizer.iterations.numpy()), int(resumed.optimizer.micro_steps.numpy())) == (3, 12)
    assert gap(resumed, uninterrupted) < 1e-6


def test_the_schedule_counts_applied_updates(penguin_validation):
    """3 epochs of 8 steps with k=4: 6 optimizer steps, so a cosine schedule with 2 warmup
    steps decays over 4; after the 24th step the optimizer has applied 6 updates, the last at
    the rate of step 5."""
    from components.kinds import Columns, specs_from_statistics
    from components.contracts.statistics import load_statistics
    from components.train.model import compile_model
    from conftest import penguin_settings

    specs = specs_from_statistics(load_statistics(penguin_validation["statistics"], "train"), Columns(label="species", numeric_features=["body_mass_g"], categorical_features=["island"]))
    settings = penguin_settings(epochs=3, gradient_accumulation_steps=4,
                                lr_schedule={"warmup_steps": 2, "decay": "cosine", "alpha": 0.1})
    model = compile_model(specs, settings, tf.distribute.get_strategy(), 0.1, steps_per_epoch=8)
    zeros = [tf.zeros_like(v) for v in model.trainable_variables]
    for _ in range(24):
        model.optimizer.apply_gradients(zip(zeros, model.trainable_variables))
    assert (int(model.optimizer.iterations.numpy()), int(model.optimizer.micro_steps.numpy())) == (6, 24)
    cosine = 0.1 * (0.9 * 0.5 * (1 + np.cos(np.pi * (5 - 2) / 4)) + 0.1)
    # the rate of the last applied update (the optimizer's iterations were 5 then)
    assert float(model.optimizer.lr(model.optimizer.iterations - 1)) == pytest.approx(cosine, rel=1e-5)


def test_the_trainer_accumulates_and_reports_the_effective_batch(tmp_path, penguin_examples, penguin_validation):
    from components.train.logic import train_model
    from conftest import PENGUIN_COLUMNS, penguin_settings

    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         penguin_settings(epochs=2, gradient_accumulation_steps=3))
    assert report["gradient_accumulation_steps"] == 3
    assert report["effective_batch_size"] == 3 * report["global_batch_size"] == 96
    # An epoch is whole windows over the train split: ceil(rows / 96) updates of 3 steps.
    assert report["steps_per_epoch"] == 3 * -(-report["train_examples"] // 96)
    assert report["optimizer_steps"] == 2 * report["steps_per_epoch"] // 3
    assert report["train_function_traces"] == 1
    assert report["compute_only_step_seconds_p50"] is not None  # the timing copy takes the wrapper too
    assert tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"] is not None


if __name__ == "__main__":
    print("RESULT " + json.dumps(mirrored_result()), flush=True)
