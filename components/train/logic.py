"""Train: a tf_keras model from the config and the train-split statistics, under a
tf.distribute strategy, exported as a SavedModel that takes raw features."""
from __future__ import annotations

import json
import os
import time
from typing import List, Optional

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from components import names
from components.errors import GpupipeError, reports_errors
from components.ingest.logic import examples_pattern
from components.train.features import FeatureSpecs, specs_from_statistics

SPECS_FILE = "gpupipe_features.json"  # inside the SavedModel's assets.extra/


def cluster_workers(tf_config: Optional[str]) -> int:
    """How many workers (chief included) TF_CONFIG names; 1 when unset."""
    if not tf_config:
        return 1
    cluster = json.loads(tf_config).get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def choose_strategy(name: str = "auto"):
    """`auto`: MultiWorkerMirroredStrategy when TF_CONFIG names several workers,
    MirroredStrategy on one node with several GPUs, else one device (GPU if any)."""
    import tensorflow as tf

    workers = cluster_workers(os.environ.get("TF_CONFIG"))
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if name == "multi_worker" or (name == "auto" and workers > 1):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored" or (name == "auto" and len(gpus) > 1):
        return tf.distribute.MirroredStrategy()
    return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")


def is_chief(tf_config: Optional[str]) -> bool:
    """The chief (or the only process) writes the model; other workers write to scratch."""
    if not tf_config:
        return True
    cfg = json.loads(tf_config)
    task = cfg.get("task", {})
    cluster = cfg.get("cluster", {})
    if "chief" in cluster:
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and task.get("index", 0) == 0


def train_model(
    examples_dir: str,
    statistics_dir: str,
    model_dir: str,
    label: str,
    numeric_features: List[str],
    categorical_features: List[str],
    hidden_units: List[int],
    embedding_dim: int = 8,
    epochs: int = 10,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    strategy: str = "auto",
    seed: int = 42,
    log_dir: Optional[str] = None,
) -> dict:
    """Trains on `examples_dir/train`, exports a SavedModel to `model_dir` and returns a
    report (examples/s, final loss and accuracy, replicas)."""
    import tensorflow as tf
    import tf_keras

    from components.train.model import build_dnn, export_saved_model, make_dataset
    from components.validate.logic import load_statistics

    tf_keras.utils.set_random_seed(seed)
    train_stats = load_statistics(statistics_dir, names.TRAIN_SPLIT)
    specs = specs_from_statistics(train_stats, label, numeric_features, categorical_features)
    dist = choose_strategy(strategy)
    global_batch = batch_size * dist.num_replicas_in_sync
    dataset = make_dataset(examples_pattern(examples_dir, names.TRAIN_SPLIT), specs, global_batch, shuffle=True, seed=seed)

    with dist.scope():
        model = build_dnn(specs, hidden_units, embedding_dim)
        model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(),
                      metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    callbacks = [tf_keras.callbacks.TensorBoard(log_dir)] if log_dir else []
    started = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, callbacks=callbacks, verbose=2)
    seconds = time.perf_counter() - started
    train_rows = int(train_stats.num_examples)

    chief = is_chief(os.environ.get("TF_CONFIG"))
    # Every worker must take part in the save (collective ops); only the chief's copy is kept.
    target = model_dir if chief else os.path.join(model_dir + "-scratch", f"worker-{os.getpid()}")
    export_saved_model(model, specs, target)
    if chief:
        extra = os.path.join(model_dir, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, SPECS_FILE), "w", encoding="utf-8") as f:
            json.dump(specs.to_dict(), f, indent=2)
    else:
        tf.io.gfile.rmtree(target)
    return {
        "examples_per_second": round(train_rows * epochs / seconds, 1),
        "train_seconds": round(seconds, 2),
        "epochs": epochs,
        "train_examples": train_rows,
        "replicas": dist.num_replicas_in_sync,
        "strategy": type(dist).__name__,
        "global_batch_size": global_batch,
        "final_loss": float(history.history["loss"][-1]),
        "final_train_accuracy": float(history.history["accuracy"][-1]),
        "chief": chief,
    }


def load_feature_specs(model_dir: str) -> FeatureSpecs:
    """The feature specs a trained model was built with (written next to it at export)."""
    path = os.path.join(model_dir, "assets.extra", SPECS_FILE)
    if not os.path.isfile(path):
        raise GpupipeError(f"model: {path} not found; {model_dir} is not a gpupipe model, retrain it")
    with open(path, encoding="utf-8") as f:
        return FeatureSpecs.from_dict(json.load(f))


@reports_errors("train")
def run_train(examples_dir: str, statistics_dir: str, model_dir: str, log_dir: str, report_dir: str,
              label: str, numeric_features: List[str], categorical_features: List[str], hidden_units: List[int],
              embedding_dim: int, epochs: int, batch_size: int, learning_rate: float, strategy: str,
              seed: int) -> dict:
    """The train step as the component calls it: trains, exports, writes the report JSON."""
    report = train_model(examples_dir, statistics_dir, model_dir, label, numeric_features, categorical_features,
                         hidden_units, embedding_dim, epochs, batch_size, learning_rate, strategy, seed, log_dir)
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, names.TRAIN_REPORT_FILE), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    return report
