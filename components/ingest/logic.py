"""Ingest: a CSV file into gzip TFRecord shards of tf.train.Example, one folder per split.

Rows are read in Arrow batches and written as they come, so memory stays flat. The
train/eval split is a deterministic hash of a key column (or of the whole row): the
same rows land in the same split on every run. A missing value stays a missing
feature (an empty Feature), never 0 or "nan".
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
from typing import Dict, Iterator, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from components import names
from components.errors import GpupipeError, reports_errors
from components.ingest import synthetic
from components.io import open_for_reading, size_of

SHARD_ROWS = 200_000
READ_BLOCK_BYTES = 4 << 20
# The hash key is fixed, so splits never depend on the process or the machine.
_HASH_KEY = "gpupipe-split-v1"


def _read_header(source: str) -> List[str]:
    with open_for_reading(source, "data.source") as f:
        first = f.readline()
    if not first.strip():
        raise GpupipeError(f"data.source: {source} is empty; point data.source at a CSV file with a header row")
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError:
        raise GpupipeError(f"data.source: {source} line 1 is not UTF-8; re-encode the file as UTF-8") from None
    return [c.strip().strip('"') for c in text.rstrip("\r\n").split(",")]


def source_columns(source: str) -> List[str]:
    """The column names a source offers."""
    if synthetic.is_synthetic(source):
        synthetic.parse_source(source)
        return synthetic.columns()
    return _read_header(source)


def check_columns(source: str, label: str, features: List[str], split_key: Optional[str] = None) -> List[str]:
    """Fails with one line when the label, a feature or the split key is not a column."""
    header = source_columns(source)
    if label not in header:
        raise GpupipeError(
            f"data.label: column '{label}' not found in {source} (columns: {', '.join(header)}); fix data.label")
    missing = [f for f in features if f not in header]
    if missing:
        raise GpupipeError(
            f"data features: column(s) {', '.join(missing)} not found in {source} (columns: {', '.join(header)}); "
            "fix data.numeric_features / data.categorical_features")
    if split_key and split_key not in header:
        raise GpupipeError(f"data.split.key: column '{split_key}' not found in {source}; fix data.split.key")
    return header


def _column_types(label: str, numeric: List[str], categorical: List[str],
                  numeric_label: bool = False) -> Dict[str, pa.DataType]:
    types = {name: pa.float32() for name in numeric}
    types.update({name: pa.string() for name in categorical})
    types[label] = pa.float32() if numeric_label else pa.string()
    return types


def read_synthetic_batches(source: str, label: str, numeric: List[str], categorical: List[str],
                           numeric_label: bool = False) -> Iterator[pa.RecordBatch]:
    """The declared columns of the synthetic CTR table, typed like a file source's."""
    rows, seed = synthetic.parse_source(source)
    types = _column_types(label, numeric, categorical, numeric_label)
    for batch in synthetic.ctr_batches(rows, seed):
        yield pa.RecordBatch.from_arrays(
            [batch.column(batch.schema.get_field_index(c)).cast(types[c]) for c in [label, *numeric, *categorical]],
            [label, *numeric, *categorical])


def read_csv_batches(source: str, label: str, numeric: List[str], categorical: List[str],
                     numeric_label: bool = False) -> Iterator[pa.RecordBatch]:
    """Streams the declared columns of a CSV as Arrow record batches with the declared types."""
    if synthetic.is_synthetic(source):
        yield from read_synthetic_batches(source, label, numeric, categorical, numeric_label)
        return
    columns = [label, *numeric, *categorical]
    stream = open_for_reading(source, "data.source")
    try:
        reader = pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=READ_BLOCK_BYTES),
            convert_options=pacsv.ConvertOptions(
                column_types=_column_types(label, numeric, categorical, numeric_label),
                include_columns=columns,
                strings_can_be_null=True,
            ),
        )
        for batch in reader:
            yield batch
    except pa.ArrowInvalid as err:
        raise GpupipeError(_explain_arrow_error(source, _arrow_message(err),
                                                set(numeric) | ({label} if numeric_label else set()))) from None
    finally:
        stream.close()


_COLUMN_NO = re.compile(r"In CSV column #(\d+): ")


def _explain_arrow_error(source: str, message: str, numeric: set) -> str:
    """Arrow names a column by position and no row; name both, found by rescanning the file."""
    m = _COLUMN_NO.search(message)
    if not m:
        return f"data.source: {source}: {message}"
    header = _read_header(source)
    column = header[int(m.group(1))] if int(m.group(1)) < len(header) else f"#{m.group(1)}"
    detail = _COLUMN_NO.sub("", message)
    where = ""
    if column in numeric:
        where = _first_non_numeric(source, header.index(column))
        return (f"data.source: {source}{where}: column '{column}' is declared numeric but holds "
                f"{detail.split('invalid value ')[-1]}; fix the data or move '{column}' to categorical_features")
    return f"data.source: {source}: column '{column}': {detail}"


def _first_non_numeric(source: str, index: int) -> str:
    with open_for_reading(source, "data.source") as raw:
        rows = csv.reader(io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=""))
        next(rows, None)
        for line_no, row in enumerate(rows, start=2):
            value = row[index].strip() if index < len(row) else ""
            if value in _NULLS:
                continue
            try:
                float(value)
            except ValueError:
                return f" line {line_no}"
    return ""


# Arrow's default null spellings (pyarrow.csv.ConvertOptions.null_values).
_NULLS = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "N/A", "NA",
          "NULL", "NaN", "n/a", "nan", "null"}


def _arrow_message(err: Exception) -> str:
    # Arrow's messages carry useful detail (column, value, row) but can span lines.
    return " ".join(str(err).split())


def split_is_eval(batch: pa.RecordBatch, eval_percent: int, key: Optional[str]) -> np.ndarray:
    """A boolean per row: True for the eval split. Deterministic for the same values."""
    frame = batch.to_pandas()
    if key:
        frame = frame[[key]]
    hashes = pd.util.hash_pandas_object(frame, index=False, hash_key=_HASH_KEY.ljust(16)[:16]).to_numpy()
    return (hashes % np.uint64(100)) < np.uint64(eval_percent)


def _as_list_column(array: pa.Array) -> pa.Array:
    """Scalar column -> list column (what the tf.Example encoder takes); null -> null list,
    which encodes as a feature with no values (missing)."""
    valid = pc.is_valid(array).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(valid, dtype=np.int32)]).astype(np.int32)
    values = array.drop_null()
    if pa.types.is_string(values.type):
        values = values.cast(pa.binary())
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~valid))


def encode_examples(batch: pa.RecordBatch) -> List[bytes]:
    """Encodes a record batch as serialized tf.train.Example with tfx_bsl's Arrow encoder."""
    from tfx_bsl.coders import example_coder

    lists = pa.RecordBatch.from_arrays([_as_list_column(c) for c in batch.columns], batch.schema.names)
    return example_coder.RecordBatchToExamples(lists)


class _ShardWriter:
    """Writes gzip TFRecord shards of at most `shard_rows` records into one split folder."""

    def __init__(self, directory: str, shard_rows: int):
        import tensorflow as tf

        self._tf = tf
        self._dir = directory
        self._shard_rows = shard_rows
        self._writer = None
        self._in_shard = 0
        self.shards = 0
        self.rows = 0
        tf.io.gfile.makedirs(directory)

    def write(self, records: List[bytes]) -> None:
        for record in records:
            if self._writer is None or self._in_shard >= self._shard_rows:
                self._roll()
            self._writer.write(record)
            self._in_shard += 1
            self.rows += 1

    def _roll(self) -> None:
        if self._writer is not None:
            self._writer.close()
        path = os.path.join(self._dir, f"part-{self.shards:05d}.tfrecord.gz")
        self._writer = self._tf.io.TFRecordWriter(path, options=self._tf.io.TFRecordOptions(compression_type="GZIP"))
        self.shards += 1
        self._in_shard = 0

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def ingest_csv(
    source: str,
    output_dir: str,
    label: str,
    numeric_features: List[str],
    categorical_features: List[str],
    eval_percent: int = 20,
    split_key: Optional[str] = None,
    shard_rows: int = SHARD_ROWS,
    numeric_label: bool = False,
) -> dict:
    """Reads `source` (CSV, local or gs://) and writes `output_dir/{train,eval}/part-*.tfrecord.gz`
    plus `output_dir/manifest.json`. Returns the manifest."""
    check_columns(source, label, [*numeric_features, *categorical_features], split_key)
    writers = {split: _ShardWriter(os.path.join(output_dir, split), shard_rows) for split in names.SPLITS}
    dropped_no_label = 0
    try:
        for batch in read_csv_batches(source, label, numeric_features, categorical_features, numeric_label):
            has_label = pc.is_valid(batch.column(label))
            dropped_no_label += batch.num_rows - pc.sum(has_label).as_py() if batch.num_rows else 0
            batch = batch.filter(has_label)
            if batch.num_rows == 0:
                continue
            is_eval = split_is_eval(batch, eval_percent, split_key)
            writers[names.EVAL_SPLIT].write(encode_examples(batch.filter(pa.array(is_eval))))
            writers[names.TRAIN_SPLIT].write(encode_examples(batch.filter(pa.array(~is_eval))))
    finally:
        for writer in writers.values():
            writer.close()
    rows = {split: w.rows for split, w in writers.items()}
    if sum(rows.values()) == 0:
        raise GpupipeError(f"data.source: {source} has a header but no data rows; point data.source at a file with data")
    for split, count in rows.items():
        if count == 0:
            raise GpupipeError(
                f"data.split: the {split} split of {source} is empty ({sum(rows.values())} rows in all); "
                "add rows or change data.split.eval_percent")
    manifest = {
        "source": source,
        "source_bytes": 0 if synthetic.is_synthetic(source) else size_of(source),
        "format": "csv",
        "rows": rows,
        "shards": {split: w.shards for split, w in writers.items()},
        "rows_dropped_missing_label": dropped_no_label,
        "split": {"rule": "hash", "key": split_key or "<whole row>", "eval_percent": eval_percent},
        "label": label,
        "features": {
            **{name: "numeric" for name in numeric_features},
            **{name: "categorical" for name in categorical_features},
        },
        "compression": "GZIP",
    }
    with open(os.path.join(output_dir, names.MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def examples_pattern(examples_dir: str, split: str) -> str:
    """The glob of one split's shards inside an ingest output."""
    return os.path.join(examples_dir, split, "part-*.tfrecord.gz")


@reports_errors("ingest")
def run_ingest(source: str, output_dir: str, label: str, numeric_features: List[str],
               categorical_features: List[str], eval_percent: int, split_key: str = "",
               numeric_label: bool = False) -> dict:
    """The ingest step as the component calls it (`split_key` "" means: hash the whole row)."""
    return ingest_csv(source, output_dir, label, numeric_features, categorical_features, eval_percent,
                      split_key or None, numeric_label=numeric_label)
