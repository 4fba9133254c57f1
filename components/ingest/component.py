"""KFP wrapper for ingest: maps typed artifacts to `components.ingest.logic.run_ingest`."""
from kfp.dsl import Dataset, Output


def ingest(source: str, settings: str, numeric_label: bool, source_fingerprint: str, examples: Output[Dataset]):
    """CSV, Parquet or TFRecord (a file, directory, glob or gs:// prefix) -> gzip TFRecord
    tf.Example shards in examples/{train,eval}/ plus examples/manifest.json (rows per split,
    source files with sizes, split rule, feature types). `settings`: the config's data
    section as JSON; `source` (a run parameter) replaces its source. `source_fingerprint`
    (from the fingerprint step) is in the cache key: new data at the same source is
    ingested anew. `data.engine: beam` runs it as one Apache Beam job on the runner in
    `data.beam_pipeline_args` (the DirectRunner in this task, or Dataflow, Flink, Spark)."""
    from components.ingest.logic import run_ingest
    from components.ingest.settings import DataSettings

    data = DataSettings.from_json(settings).model_copy(update={"source": source})
    manifest = run_ingest(settings=data, examples_dir=examples.path, numeric_label=numeric_label,
                          source_fingerprint=source_fingerprint)
    examples.metadata.update({"rows": manifest["rows"], "source": manifest["source"],
                              "source_fingerprint": manifest["source_fingerprint"]})
