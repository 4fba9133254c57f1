"""KFP wrapper for validate: maps typed artifacts to `components.validate.logic.run_validate`."""
from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Output


def validate(examples: Input[Dataset], label: str, fail_on_anomalies: bool, statistics: Output[Artifact],
             schema: Output[Artifact], anomalies: Output[Artifact], report: Output[HTML]):
    """TFDV statistics (train and eval), inferred schema.pbtxt, anomalies per split with a
    Markdown summary, and TFDV's HTML report. Fails the task on anomalies when told to."""
    from components.validate.logic import run_validate

    summary = run_validate(examples.path, label, statistics.path, schema.path, anomalies.path, report.path,
                           fail_on_anomalies)
    anomalies.metadata.update({"count": summary["anomalies"]})
    statistics.metadata.update({"examples": summary["examples"]})


def make_validate_op(image: str):
    return dsl.component(validate, base_image=image, install_kfp_package=False)
