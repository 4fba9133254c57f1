"""predict: scores every row of a table with a served version of the model, through its
`serving_examples` signature (serialized tf.Example, as TF Serving's gRPC Predict takes them),
and writes one prediction per input row, in the input's order, with the input's key column:
CSV or JSON lines, by the output's extension.

The rows are read by the same readers as ingest (components/sources) and encoded by the same
Arrow encoder (components/contracts/examples.py), so the model sees what it saw in training.
`engine="beam"` scores the files in an Apache Beam job (the DirectRunner in this process, or
the runner in `beam_pipeline_args`) and writes the same output. The output is written whole:
to a staging file first, then copied to `output` in one piece.
"""
from __future__ import annotations

import csv
import json
import os
import tempfile
from typing import Dict, Iterator, List, Optional, Sequence

from components.contracts import names, storage
from components.contracts.errors import GpupipeError, reports_errors
from components.contracts.examples import as_list_batch, encode_examples
from components.kinds import load_feature_specs
from components.kinds import Columns
from components.sources import readers
from components.store import served, states
from components.store.base import ServingStore

ROW_COLUMN = "row"  # the key when the table has none: the row's number in the source, from 0
IMAGE_KEY = "file"  # an image folder's key: each file's path under the folder
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


def output_format(output: str) -> str:
    ext = os.path.splitext(output.rstrip("/"))[1].lower()
    if ext not in FORMATS:
        raise GpupipeError(f"--output {output}: write predictions to a .csv or .jsonl file (JSON lines)")
    return FORMATS[ext]


def served_version(serving_base: str, model_name: str, version: str = "stable") -> int:
    """The version to score with: `stable` (what serving serves) or a number that is whole."""
    store = ServingStore(serving_base, model_name)
    whole = store.versions()
    if version == "stable":
        stable = states.stable(served.read_record(store))
        chosen = stable if stable in whole else (max(whole) if whole and stable is None else None)
        if chosen is None:
            raise GpupipeError(f"{store.model_root}: no served version of {model_name} to score with; push one "
                               "(gpupipe run) or give --version N")
        return chosen
    if not version.isdigit() or int(version) not in whole:
        raise GpupipeError(f"--version {version}: {store.model_root} holds versions {whole or 'none'}; give one of "
                           "them or stable")
    return int(version)


def _types(columns: Columns, key: Optional[str]) -> Dict[str, object]:
    import pyarrow as pa

    types = {name: kind.arrow_type(setting) for name, kind, setting in columns.declared()}
    if key and key not in types:
        types[key] = pa.string()
    return types


class Scorer:
    """The SavedModel's serving_examples signature, and how its outputs become columns."""

    def __init__(self, model_dir: str):
        import tensorflow as tf

        self.model = tf.saved_model.load(model_dir)
        self.signature = self.model.signatures[names.EXAMPLES_SIGNATURE]
        self.classes = load_feature_specs(model_dir).classes

    def columns(self) -> List[str]:
        if self.classes:
            return [names.CLASSES] + [f"{names.PROBABILITIES}_{c}" for c in self.classes]
        return [name for name in sorted(self.signature.structured_outputs)]

    def score(self, examples: List[bytes]) -> List[dict]:
        import tensorflow as tf

        out = {k: v.numpy() for k, v in self.signature(examples=tf.constant(examples)).items()}
        rows = []
        for i in range(len(examples)):
            if self.classes:
                row = {names.CLASSES: out[names.CLASSES][i].decode()}
                row.update({f"{names.PROBABILITIES}_{c}": float(p) for c, p in zip(self.classes,
                                                                                  out[names.PROBABILITIES][i])})
            else:
                row = {k: float(v[i]) for k, v in sorted(out.items())}
            rows.append(row)
        return rows


def score_file(scorer: Scorer, f: readers.SourceFile, columns: Columns, key: Optional[str],
               na_values: Sequence[str], first_row: int = 0) -> Iterator[dict]:
    """One source file's rows, scored, in order: {key or row: ..., predictions ...}."""
    return score_batches(scorer, readers.read_batches(f, _types(columns, key), na_values=na_values), columns, key,
                         first_row)


def score_batches(scorer: Scorer, batches, columns: Columns, key: Optional[str], first_row: int = 0) -> Iterator[dict]:
    """Record batches' rows, scored, in order."""
    import pyarrow as pa

    row = first_row
    features = columns.features
    for batch in batches:
        chosen = pa.RecordBatch.from_arrays([batch.column(batch.schema.get_field_index(n)) for n in features],
                                            features)
        keys = batch.column(batch.schema.get_field_index(key)).to_pylist() if key else None
        for i, prediction in enumerate(scorer.score(encode_examples(chosen, as_list_batch(chosen)))):
            yield {(key or ROW_COLUMN): keys[i] if keys else row + i, **prediction}
        row += batch.num_rows


def _write(rows: Iterator[dict], header: List[str], fmt: str, path: str) -> int:
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=header) if fmt == "csv" else None
        if writer:
            writer.writeheader()
        for row in rows:
            if writer:
                writer.writerow(row)
            else:
                out.write(json.dumps(row) + "\n")
            count += 1
    return count


def _scored_by_beam(model_dir: str, files: List[readers.SourceFile], columns: Columns, key: Optional[str],
                    na_values: Sequence[str], pipeline_args: List[str], staging: str) -> Iterator[dict]:
    """The same scoring as an Apache Beam job: one element per file, each scored by a DoFn
    that loads the model once per worker; the driver reads the job's output back in the
    input's order (file, then row)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    class ScoreFile(beam.DoFn):
        def setup(self):
            self.scorer = Scorer(model_dir)

        def process(self, element):
            index, f = element
            for position, row in enumerate(score_file(self.scorer, f, columns, key, na_values)):
                yield json.dumps([index, position, row])

    prefix = os.path.join(staging, "scored")
    with beam.Pipeline(options=PipelineOptions(list(pipeline_args))) as p:
        _ = (p | beam.Create(list(enumerate(files))) | beam.ParDo(ScoreFile())
             | beam.io.WriteToText(prefix, file_name_suffix=".jsonl"))
    scored = []
    for name in sorted(os.listdir(staging)):
        if name.startswith("scored") and name.endswith(".jsonl"):
            with open(os.path.join(staging, name), encoding="utf-8") as f:
                scored += [json.loads(line) for line in f if line.strip()]
    scored.sort(key=lambda item: (item[0], item[1]))
    return iter([row for _, _, row in scored])


@reports_errors("predict")
def predict(*, source: str, data_format: str, columns: Columns, serving_base: str, model_name: str, output: str,
            version: str = "stable", key: Optional[str] = None, na_values: Sequence[str] = names.NA_VALUES,
            engine: str = "local", beam_pipeline_args: Sequence[str] = ()) -> dict:
    """Scores `source` with version `version` (stable, or a number) of `model_name` under
    `serving_base`; writes `output` (.csv or .jsonl) whole. Returns what it did: the version,
    the rows, the output."""
    fmt = output_format(output)
    number = served_version(serving_base, model_name, version)
    files = readers.resolve(source, data_format, key="--data")
    if key is None and files[0].format == readers.IMAGE_FILE:
        key = IMAGE_KEY  # an image folder's rows are its files
    header = readers.check_columns(source, columns.features[0], columns.features[1:], None, data_format)
    if key and key not in header:
        raise GpupipeError(f"--key {key}: not a column of {source} (it has {', '.join(header[:12])}); give the "
                           "column that names each row, or leave --key out to number the rows")
    store = ServingStore(serving_base, model_name)
    with tempfile.TemporaryDirectory(prefix="gpupipe-predict-") as tmp:
        model_dir = store.download_version(number, os.path.join(tmp, "model"))
        scorer = Scorer(model_dir)
        header = [key or ROW_COLUMN, *scorer.columns()]
        if engine == "beam":
            rows = _scored_by_beam(model_dir, files, columns, key, na_values, list(beam_pipeline_args), tmp)
        else:
            def local_rows():
                start = 0
                for unit in readers.read_units(files, _types(columns, key), na_values):
                    n = 0
                    for n, row in enumerate(score_batches(scorer, unit.batches, columns, key, start), 1):
                        yield row
                    start += n
            rows = local_rows()
        staged = os.path.join(tmp, "predictions" + os.path.splitext(output)[1])
        count = _write(rows, header, fmt, staged)
        storage.upload_file(staged, output)
    return {"version": number, "rows": count, "output": output, "columns": header, "engine": engine}


def summary(result: dict) -> str:
    return (f"predict: {result['rows']} rows scored with version {result['version']} ({result['engine']}) -> "
            f"{result['output']}")

