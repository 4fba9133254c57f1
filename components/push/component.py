"""KFP wrapper for push: maps typed artifacts to `components.push.logic.run_push`."""
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output


def push(model: Input[Model], blessing: Input[Artifact], examples: Input[Dataset], statistics: Input[Artifact],
         schema: Input[Artifact], settings: str, serving_base: str, run_id: str, run_name: str, lineage: str,
         data_fingerprint: str, pushed: Output[Artifact], outcome: Output[Metrics], summary: Output[Markdown]) -> str:
    """Copies a blessed model to <serving_base>/<model_name>/<next integer version>/ (whole or
    not at all) with warmup requests, training statistics, schema and metrics; labels it in
    models.config; smoke-tests it when an endpoint is set; keeps the newest versions. An
    unblessed model is not pushed: the task's Markdown says "not pushed: <reason>" and its
    metric `pushed` is 0. `settings`: the config's serving section as JSON; `serving_base`
    (a run parameter) replaces its base. `run_id` (the KFP run's) makes a retried push of the
    same model the same version; with `run_name`, `lineage` (JSON: pipeline, gpupipe version,
    image, config digest) and `data_fingerprint` it is the version's recorded lineage.
    Returns the version's path or "" (empty)."""
    import json

    from components.push.logic import run_push
    from components.push.settings import ServingSettings

    serving = ServingSettings.from_json(settings).model_copy(update={"base": serving_base})
    result = run_push(model_dir=model.path, blessing_dir=blessing.path, examples_dir=examples.path,
                      statistics_dir=statistics.path, schema_dir=schema.path, output_dir=pushed.path,
                      settings=serving, run_id=run_id,
                      lineage={**json.loads(lineage or "{}"), "run_name": run_name,
                               "data_fingerprint": data_fingerprint})
    pushed.metadata.update(result.to_dict())
    outcome.log_metric("pushed", int(result.pushed))
    if result.version is not None:
        outcome.log_metric("version", result.version)
    with open(summary.path, "w", encoding="utf-8") as f:
        f.write(result.markdown())
    return result.path or ""
