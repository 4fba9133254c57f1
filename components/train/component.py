"""KFP wrapper for train: maps typed artifacts to `components.train.logic.run_train`."""
from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output


def train(examples: Input[Dataset], statistics: Input[Artifact], label: str, numeric_features: list,
          categorical_features: list, hidden_units: list, embedding_dim: int, epochs: int, batch_size: int,
          learning_rate: float, strategy: str, seed: int, model: Output[Model], tensorboard: Output[Artifact],
          report: Output[Metrics]):
    """A tf_keras DNN trained under a tf.distribute strategy; exports a SavedModel whose
    serving_default takes raw features. Report: examples/s, loss, replicas."""
    import os

    from components.train.logic import run_train

    result = run_train(examples.path, statistics.path, model.path, tensorboard.path,
                       os.path.join(os.path.dirname(report.path), "train-report"), label, numeric_features,
                       categorical_features, hidden_units, embedding_dim, epochs, batch_size, learning_rate,
                       strategy, seed)
    for key in ("examples_per_second", "train_seconds", "final_loss", "final_train_accuracy", "replicas"):
        report.log_metric(key, result[key])
    model.metadata.update({"strategy": result["strategy"], "framework": "tensorflow"})


def make_train_op(image: str):
    return dsl.component(train, base_image=image, install_kfp_package=False)
