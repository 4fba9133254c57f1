"""KFP wrapper for ingest: maps typed artifacts to `components.ingest.logic.run_ingest`."""
from kfp import dsl
from kfp.dsl import Dataset, Output


def ingest(source: str, label: str, numeric_features: list, categorical_features: list, eval_percent: int,
           split_key: str, numeric_label: bool, data_format: str, source_fingerprint: str,
           examples: Output[Dataset]):
    """CSV, Parquet or TFRecord (a file, directory, glob or gs:// prefix) -> gzip TFRecord
    tf.Example shards in examples/{train,eval}/ plus examples/manifest.json (rows per split,
    source files with sizes, split rule, feature types). `source_fingerprint` (from the
    fingerprint step) is in the cache key: new data at the same source is ingested anew."""
    from components.ingest.logic import run_ingest

    manifest = run_ingest(source, examples.path, label, numeric_features, categorical_features, eval_percent, split_key,
                          numeric_label, data_format, source_fingerprint)
    examples.metadata.update({"rows": manifest["rows"], "source": manifest["source"],
                              "source_fingerprint": manifest["source_fingerprint"]})


def make_ingest_op(image: str):
    return dsl.component(ingest, base_image=image, install_kfp_package=False)
