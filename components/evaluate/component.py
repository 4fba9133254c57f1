"""KFP wrapper for evaluate: maps typed artifacts to `components.evaluate.logic.run_evaluate`."""
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output


def evaluate(model: Input[Model], examples: Input[Dataset], settings: str, threshold: float, serving_base: str,
             model_name: str, served_version: str, metrics: Output[Metrics], confusion: Output[ClassificationMetrics],
             report: Output[Markdown], blessing: Output[Artifact]):
    """Scores the model and the model now served on the eval split: Metrics, a confusion
    matrix (and ROC curve for two classes), a Markdown report with slices, and a blessing
    (value thresholds, and change thresholds against the served version). `settings`: the
    config's evaluation section as JSON; `threshold` (a run parameter) replaces its own.
    `served_version` (from the fingerprint step) is in the cache key: after a push, the same
    model is evaluated again against the new served version."""
    from components.evaluate.logic import run_evaluate
    from components.evaluate.settings import EvaluationSettings

    evaluation_settings = EvaluationSettings.from_json(settings).model_copy(update={"threshold": threshold})
    evaluation, verdict = run_evaluate(model_dir=model.path, examples_dir=examples.path, blessing_dir=blessing.path,
                                       report_md=report.path, settings=evaluation_settings,
                                       serving_base=serving_base, model_name=model_name)
    for key, value in evaluation.metrics.items():
        metrics.log_metric(key, value)
    if evaluation.classes:
        confusion.log_confusion_matrix(evaluation.classes, evaluation.confusion_matrix)
    if evaluation.roc:
        confusion.log_roc_curve(evaluation.roc["fpr"], evaluation.roc["tpr"], evaluation.roc["thresholds"])
    blessing.metadata.update({"blessed": verdict.blessed, "reasons": verdict.reasons,
                              "baseline_version": verdict.baseline_version,
                              "served_version_at_fingerprint": served_version})
