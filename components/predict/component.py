"""KFP wrapper for predict, the scoring pipeline's one step: maps its parameters to
`components.predict.logic.predict`."""
from kfp import dsl
from kfp.dsl import Markdown, Output


def predict(source: str, data_format: str, columns: str, serving_base: str, model_name: str, output: str,
            version: str, key: str, na_values: str, engine: str, beam_pipeline_args: str,
            summary: Output[Markdown]) -> int:
    """Scores every row of `source` with version `version` (stable, or a number) of the model
    served under `serving_base`, through its serving_examples signature, and writes `output`
    (.csv or .jsonl, gs://, s3:// or a path) whole: one prediction per row with the `key`
    column (empty: the row's number). `engine`: local, or beam (the job on
    `beam_pipeline_args`, JSON). Returns the rows scored."""
    import json

    from components.kinds import Columns
    from components.predict.logic import predict as score
    from components.predict.logic import summary as line

    result = score(source=source, data_format=data_format, columns=Columns.from_json(columns),
                   serving_base=serving_base, model_name=model_name, output=output, version=version, key=key or None,
                   na_values=json.loads(na_values), engine=engine, beam_pipeline_args=json.loads(beam_pipeline_args))
    with open(summary.path, "w", encoding="utf-8") as f:
        f.write(f"# Predictions\n\n{line(result)}\n")
    return result["rows"]


def make_predict_op(image: str):
    return dsl.component(predict, base_image=image, install_kfp_package=False)
