"""KFP wrapper for train: maps typed artifacts to `components.train.logic.run_train_task`."""
from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output


def train(examples: Input[Dataset], statistics: Input[Artifact], settings: str, tfjob: str, epochs: int,
          learning_rate: float, model: Output[Model], tensorboard: Output[Artifact], report: Output[Metrics],
          summary: Output[Markdown]):
    """A tf_keras model (dnn, wide_deep, cross or custom) trained under a tf.distribute
    strategy (in this pod, or as a TFJob when `tfjob` is set), resumable from
    BackupAndRestore checkpoints; exports a SavedModel taking raw features. Report:
    examples/s, step time p50/p95, input wait, GPU utilisation, GPU-hours and cost."""
    from components.train.logic import run_train_task

    result = run_train_task((examples.path, examples.uri), (statistics.path, statistics.uri),
                            (model.path, model.uri), tensorboard.path, summary.path, settings, epochs,
                            learning_rate, tfjob)
    for key, value in result.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            report.log_metric(key, value)
    model.metadata.update({"strategy": result["strategy"], "framework": "tensorflow"})


def make_train_op(image: str):
    return dsl.component(train, base_image=image, install_kfp_package=False)
