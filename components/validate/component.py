"""KFP wrapper for validate: maps typed artifacts to `components.validate.logic.run_validate`."""
from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Output


def validate(examples: Input[Dataset], label: str, settings: str, serving_base: str,
             model_name: str, served_version: str, statistics: Output[Artifact], schema: Output[Artifact],
             anomalies: Output[Artifact], summary: Output[Markdown], report: Output[HTML]):
    """TFDV statistics (train and eval), inferred schema.pbtxt, anomalies per split and the
    drift of train against the served version's statistics, with a Markdown summary, and
    TFDV's HTML report. Fails the task on blocking anomalies or drift. `served_version`
    (from the fingerprint step) is in the cache key: after a push, validate runs again
    against the new baseline."""
    from components.validate.logic import run_validate

    result = run_validate(examples.path, label, statistics.path, schema.path, anomalies.path, summary.path,
                          report.path, settings, serving_base, model_name)
    anomalies.metadata.update({k: result[k] for k in ("anomalies", "drift", "baseline")})
    anomalies.metadata["served_version_at_fingerprint"] = served_version
    statistics.metadata.update({"examples": result["examples"]})


def make_validate_op(image: str):
    return dsl.component(validate, base_image=image, install_kfp_package=False)
