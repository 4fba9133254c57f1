"""KFP wrapper for evaluate: maps typed artifacts to `components.evaluate.logic.run_evaluate`."""
from kfp import dsl
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output


def evaluate(model: Input[Model], examples: Input[Dataset], metric: str, threshold: float, metrics: Output[Metrics],
             confusion: Output[ClassificationMetrics], blessing: Output[Artifact]):
    """Scores the model on the eval split: Metrics (accuracy, log loss, per-class precision
    and recall), a confusion matrix, and a blessing (blessed when metric >= threshold)."""
    from components.evaluate.logic import run_evaluate

    evaluation, verdict = run_evaluate(model.path, examples.path, blessing.path, metric, threshold)
    for key, value in evaluation.metrics.items():
        metrics.log_metric(key, value)
    for name, scores in evaluation.per_class.items():
        metrics.log_metric(f"precision/{name}", scores["precision"])
        metrics.log_metric(f"recall/{name}", scores["recall"])
    confusion.log_confusion_matrix(evaluation.classes, evaluation.confusion_matrix)
    blessing.metadata.update({"blessed": verdict.blessed, "reasons": verdict.reasons})


def make_evaluate_op(image: str):
    return dsl.component(evaluate, base_image=image, install_kfp_package=False)
