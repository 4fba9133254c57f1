"""Parquet files and TFRecord files of tf.train.Example (optionally gzip), as record batches.

Parquet is read in row groups of PARQUET_BATCH_ROWS; TFRecord is decoded by tfx_bsl, a
remote file first copied to a local temporary file (TensorFlow's own filesystems would need
their own credentials, and none reads s3://), and each feature's one-value list becomes a
scalar column; a feature with several values in one record is an error, not a guess. A file
cut short or failing a CRC is one line naming the record (tfrecord_check), not TensorFlow's.
"""
from __future__ import annotations

import itertools
import os
import tempfile
from typing import Iterator, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.contracts.storage import open_for_reading
from components.sources.cells import select_and_cast, to_utf8
from components.sources import tfrecord_check
from components.sources.files import SourceFile, check_later_file, is_gzip

PARQUET_BATCH_ROWS = 65_536
TFRECORD_BATCH_ROWS = 20_000


def parquet_file(uri: str):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(open_for_reading(uri, "data.source"))
    except (pa.ArrowInvalid, OSError) as err:
        raise GpupipeError(f"data.source: {uri} is not a readable Parquet file, truncated or corrupt "
                           f"({' '.join(str(err).split())}); re-export it") from None


def _corrupt(uri: str, err: Exception) -> GpupipeError:
    return GpupipeError(f"data.source: {uri} is truncated or corrupt ({' '.join(str(err).split())}); re-export it")


def parquet_batches(uri: str, types) -> Iterator[pa.RecordBatch]:
    pf = parquet_file(uri)
    check_later_file(SourceFile(uri, 0, "parquet"), list(pf.schema_arrow.names), list(types),
                     "one of data.source's files")
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(types)):
            yield select_and_cast(batch, types, uri)
    except (pa.ArrowInvalid, OSError) as err:
        raise _corrupt(uri, err) from None


def parquet_sample(uri: str, rows: int) -> List[pa.RecordBatch]:
    """The first `rows` rows, every column, as the file types them."""
    pf = parquet_file(uri)
    try:
        return list(itertools.islice(pf.iter_batches(batch_size=rows), 1))
    except (pa.ArrowInvalid, OSError) as err:
        raise _corrupt(uri, err) from None


def tfrecord_sample(uri: str, rows: int) -> List[pa.RecordBatch]:
    """The first `rows` examples, every feature, bytes as UTF-8 text."""
    return [pa.RecordBatch.from_arrays(
        [to_utf8(c, uri, n) if pa.types.is_binary(c.type) else c for n, c in zip(batch.schema.names, batch.columns)],
        batch.schema.names) for batch in tfrecord_batches(uri, max_records=rows)]


def tfrecord_batches(uri: str, max_records: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """tf.Example records decoded by tfx_bsl; list columns with one value become scalars."""
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    local, tmp = uri, None
    try:
        if storage.is_remote(uri):  # a local copy: TF's own filesystems need their own credentials (none does s3://)
            tmp = tempfile.NamedTemporaryFile(suffix=os.path.basename(uri), delete=False)
            with tmp, open_for_reading(uri, "data.source") as src:
                while chunk := src.read(8 << 20):
                    tmp.write(chunk)
            local = tmp.name
        dataset = tf.data.TFRecordDataset(local, compression_type="GZIP" if is_gzip(uri) else "")
        if max_records:
            dataset = dataset.take(max_records)
        decoder = example_coder.ExamplesToRecordBatchDecoder()
        first_record, data_bytes = 1, 0
        for records in dataset.batch(TFRECORD_BATCH_ROWS):
            records = list(records.numpy())
            data_bytes += sum(map(len, records))
            try:
                batch = decoder.DecodeBatch(records)
            except RuntimeError as err:  # tfx_bsl: DATA_LOSS: Unable to parse example
                raise GpupipeError(f"data.source: {uri} holds TFRecords that are not tf.train.Example ({err}); "
                                   "write tf.train.Example records, or export the table as CSV or Parquet") from None
            for name, column in zip(batch.schema.names, batch.columns):
                _one_value_each(column, name, uri, first_record)
            first_record += batch.num_rows
            yield pa.RecordBatch.from_arrays([_first_values(c) for c in batch.columns], batch.schema.names)
        read_all = not max_records or first_record - 1 < max_records
        if read_all and tfrecord_check.ends_early(local, is_gzip(uri), data_bytes, first_record - 1):
            raise GpupipeError(tfrecord_check.damage(local, uri, is_gzip(uri)))
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        raise GpupipeError(tfrecord_check.damage(local, uri, is_gzip(uri), err.message)) from None
    finally:
        if tmp is not None:
            os.unlink(tmp.name)


def _one_value_each(column: pa.Array, name: str, uri: str, first_record: int) -> None:
    """A feature with several values in one record is not a table cell: taking one of them
    would be a silent guess."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return
    lengths = np.diff(column.offsets.to_numpy())
    if len(lengths) and lengths.max() > 1:
        at = int(np.argmax(lengths > 1))
        raise GpupipeError(f"data.source: {uri} record {first_record + at}: feature '{name}' holds {lengths[at]} "
                           "values; gpupipe reads one value per feature: write one value per feature (one feature "
                           "per value)")


def _first_values(column: pa.Array) -> pa.Array:
    """list<T> -> T: the first value of each list; an empty or null list -> null."""
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return column
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    valid = (lengths > 0) & pc.is_valid(column).to_numpy(zero_copy_only=False)
    values = column.values.take(pa.array(offsets[:-1][valid]))
    indices = np.cumsum(valid) - 1
    out = values.take(pa.array(np.where(valid, indices, 0))) if len(values) else pa.nulls(len(column), values.type)
    return pc.if_else(pa.array(valid), out, pa.nulls(len(column), out.type))
