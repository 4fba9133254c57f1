"""Reading a data source as typed Arrow record batches, streamed: the entry points.

A source is a local file, directory or glob, a `gs://` or `s3://bucket/prefix` (or object, or glob;
read through components/contracts/storage),
or `synthetic:ctr?rows=N&seed=S`; formats are CSV (optionally .gz), Parquet and TFRecord
of tf.train.Example (optionally gzip), chosen by `data.format` or the file extension.
Every error a user can cause is a GpupipeError of one line naming the file, the column
and, where it applies, the line.

This module dispatches on a file's format: the files a source names are files.py's, the
formats csv_text.py's and records.py's (Parquet, TFRecord), the casts to the declared types
cells.py's. Steps import only this module.
"""
from __future__ import annotations

import itertools
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence

import pyarrow as pa

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.kinds import config_keys
from components.sources import images, synthetic
from components.sources.cells import select_and_cast
from components.sources.csv_text import csv_batches, csv_header, csv_sample
from components.sources.files import (FORMATS, IMAGE_FILE, SourceFile, check_later_file, detect_format, fingerprint,
                                      resolve, unique_columns)
from components.sources.records import (parquet_batches, parquet_file, parquet_sample, tfrecord_batches,
                                        tfrecord_sample)

__all__ = ["FORMATS", "IMAGE_FILE", "SourceFile", "check_columns", "check_file_columns", "columns_of", "csv_header",
           "detect_format", "fingerprint", "read_batches", "read_units", "resolve", "sample", "unique_columns", "Unit"]


def columns_of(f: SourceFile) -> List[str]:
    if f.format == "synthetic":
        return synthetic.columns()
    if f.format == IMAGE_FILE:
        return list(images.COLUMNS)
    if f.format == "csv":
        return csv_header(f.uri)
    if f.format == "parquet":
        return unique_columns(list(parquet_file(f.uri).schema_arrow.names), f.uri)
    # TFRecord: the features of the first example
    for batch in tfrecord_batches(f.uri, max_records=1):
        return list(batch.schema.names)
    raise GpupipeError(f"data.source: {f.uri} holds no records; point data.source at non-empty files")


def read_batches(f: SourceFile, types: Dict[str, pa.DataType],
                 na_values: Sequence[str] = names.NA_VALUES) -> Iterator[pa.RecordBatch]:
    """Record batches holding exactly the columns of `types`, cast to those types; in a
    CSV, a cell spelt like one of `na_values` is missing."""
    if f.format == "synthetic":
        rows, seed = synthetic.parse_source(f.uri)
        for batch in synthetic.ctr_batches(rows, seed):
            yield select_and_cast(batch, types, f.uri)
    elif f.format == "csv":
        yield from csv_batches(f.uri, types, na_values)
    elif f.format == "parquet":
        yield from parquet_batches(f.uri, types)
    elif f.format == IMAGE_FILE:
        yield select_and_cast(images.read_files([f.uri], f.root), types, f.uri)
    else:
        for batch in tfrecord_batches(f.uri):
            yield select_and_cast(batch, types, f.uri)


class Unit(NamedTuple):
    """What ingest and predict read together: a file, or a chunk of an image folder's class
    folder (named by the folder, each row's own file in `files`)."""

    uri: str
    size: int
    format: str
    batches: Iterator[pa.RecordBatch]
    files: Optional[List[str]] = None


def read_units(files: List[SourceFile], types: Dict[str, pa.DataType],
               na_values: Sequence[str] = names.NA_VALUES) -> Iterator[Unit]:
    """A source's files as units, in order: each file, or for an image folder chunks of a
    class folder's files read together."""
    if files and files[0].format == IMAGE_FILE:
        root = files[0].root
        by_class: Dict[str, List[SourceFile]] = {}
        for f in files:
            by_class.setdefault(images.class_of(f.uri, root), []).append(f)
        for cls, members in by_class.items():
            for chunk in images.chunks(members):
                uris = [f.uri for f in chunk]
                batch = select_and_cast(images.read_files(uris, root), types, f"{root}/{cls}")
                yield Unit(f"{root}/{cls}", sum(f.size for f in chunk), IMAGE_FILE, iter([batch]), uris)
        return
    for f in files:
        yield Unit(f.uri, f.size, f.format, read_batches(f, types, na_values))


def check_columns(source: str, label: str, features: List[str], split_key: Optional[str] = None,
                  data_format: str = "auto") -> List[str]:
    """Fails with one line when the label, a feature or the split key is not a column of
    one of the source's files (the first file's problem first; CSV and Parquet: every
    file, their headers or footers read a few at a time; TFRecord: the first file, since an
    example may leave a feature out). Returns the first file's columns."""
    files = resolve(source, data_format)
    header = check_file_columns(files[0], label, features, split_key)
    later = files[1:] if files[0].format in ("csv", "parquet") else []
    if later:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(min(8, len(later))) as pool:
            headers = pool.map(columns_of, later)
            for i, (f, columns) in enumerate(zip(later, headers), start=2):
                check_later_file(f, columns, [label, *features, *([split_key] if split_key else [])],
                                 f"file {i} of {len(files)} of data.source")
    return header


def check_file_columns(first: SourceFile, label: str, features: List[str],
                       split_key: Optional[str] = None) -> List[str]:
    header = columns_of(first)
    where = first.uri
    if label not in header:
        raise GpupipeError(
            f"data.label: column '{label}' not found in {where} (columns: {', '.join(header)}); fix data.label")
    if first.format != "tfrecord":  # a tf.Example may leave a feature out: that is a missing value
        missing = [f for f in features if f not in header]
        if missing:
            raise GpupipeError(
                f"data features: column(s) {', '.join(missing)} not found in {where} (columns: {', '.join(header)}); "
                f"fix {config_keys()}")
    if split_key and split_key not in header:
        raise GpupipeError(f"data.split.key: column '{split_key}' not found in {where}; fix data.split.key")
    return header


def sample(f: SourceFile, rows: int, na_values: Sequence[str] = names.NA_VALUES) -> pa.Table:
    """Up to the first `rows` rows of one file, every column, with the types its format
    gives (CSV: Arrow's type inference on the first block; TFRecord: one value per feature;
    bytes as UTF-8 text): what `gpupipe init` proposes a config from."""
    if f.format == "synthetic":
        total, seed = synthetic.parse_source(f.uri)
        batches = list(itertools.islice(synthetic.ctr_batches(min(rows, total), seed), 1))
    elif f.format == "csv":
        batches = csv_sample(f.uri, rows, na_values)
    elif f.format == "parquet":
        batches = parquet_sample(f.uri, rows)
    else:
        batches = tfrecord_sample(f.uri, rows)
    if not batches:
        raise GpupipeError(f"data.source: {f.uri} has no data rows; point it at a file with data")
    return pa.Table.from_batches(batches).slice(0, rows)
