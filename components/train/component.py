"""KFP wrapper for train: maps typed artifacts to `components.train.logic.run_train_task`."""
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output


def train(examples: Input[Dataset], columns: str, settings: str, launch: str, export: str,
          epochs: int, learning_rate: float, model: Output[Model], tensorboard: Output[Artifact],
          report: Output[Metrics], summary: Output[Markdown]):
    """A tf_keras model (a registered family or a custom one) trained under a tf.distribute
    strategy (in this pod, or as a multi-worker JobSet/TFJob when `launch` is set),
    resumable from BackupAndRestore checkpoints; exports a SavedModel taking raw features.
    `settings`: the config's training section as JSON; `epochs` and `learning_rate` (run
    parameters) replace its own. Report: examples/s, step time p50/p95, input wait, GPU
    utilisation, GPU-hours and cost. The statistics are those ingest computed, inside the
    examples artifact: train's cache key is its data and settings, not validate's run (which
    runs again after each push, against the new drift baseline). `export` (serving.export):
    float16 or int8 adds a quantized model.tflite beside the SavedModel."""
    from components.contracts.examples import ingest_statistics_dir
    from components.kinds import Columns
    from components.train.linear_fit import fitted_beside
    from components.train.settings import TrainSettings

    train_settings = TrainSettings.from_json(settings).model_copy(
        update={"epochs": epochs, "learning_rate": learning_rate})
    # the linear start, fitted in a process of its own while this one imports TensorFlow
    with fitted_beside(examples.path, Columns.from_json(columns), train_settings, launch) as linear:
        from components.train.logic import run_train_task

        result = run_train_task(examples=(examples.path, examples.uri), statistics=(ingest_statistics_dir(examples.path), ingest_statistics_dir(examples.uri)),
                                model=(model.path, model.uri), log_dir=tensorboard.path, summary_md=summary.path,
                                columns=Columns.from_json(columns), settings=train_settings, launch=launch,
                                export=export, linear=linear)
    for key, value in result.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            report.log_metric(key, value)
    model.metadata.update({"strategy": result["strategy"], "framework": "tensorflow"})
