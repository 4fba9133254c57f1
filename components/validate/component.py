"""KFP wrapper for validate: maps typed artifacts to `components.validate.logic.run_validate`."""
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Output


def validate(examples: Input[Dataset], columns: str, settings: str, serving_base: str,
             model_name: str, served_version: str, statistics: Output[Artifact], schema: Output[Artifact],
             anomalies: Output[Artifact], summary: Output[Markdown], report: Output[HTML]):
    """TFDV statistics (train and eval), inferred schema.pbtxt, anomalies per split and the
    drift of train against the served version's statistics, with a Markdown summary, and
    TFDV's HTML report. Fails the task on blocking anomalies or drift. `settings`: the
    config's validation section as JSON. `served_version` (from the fingerprint step) is in
    the cache key: after a push, validate runs again against the new baseline."""
    from components.kinds import Columns
    from components.validate.logic import run_validate
    from components.validate.settings import ValidationSettings

    result = run_validate(examples_dir=examples.path, columns=Columns.from_json(columns),
                          settings=ValidationSettings.from_json(settings), statistics_dir=statistics.path,
                          schema_dir=schema.path, anomalies_dir=anomalies.path, summary_md=summary.path,
                          report_html=report.path, serving_base=serving_base, model_name=model_name)
    anomalies.metadata.update({k: result[k] for k in ("anomalies", "drift", "baseline")})
    anomalies.metadata["served_version_at_fingerprint"] = served_version
    statistics.metadata.update({"examples": result["examples"]})
