"""Reading a data source as typed Arrow record batches, streamed.

A source is a local file, directory or glob, a `gs://` or `s3://bucket/prefix` (or object, or glob;
read through components/contracts/storage),
or `synthetic:ctr?rows=N&seed=S`; formats are CSV (optionally .gz), Parquet and TFRecord
of tf.train.Example (optionally gzip), chosen by `data.format` or the file extension.
Every error a user can cause is a GpupipeError of one line naming the file, the column
and, where it applies, the line.
"""
from __future__ import annotations

import csv
import hashlib
import itertools
import os
import re
import tempfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts import storage
from components.contracts.storage import open_for_reading
from components.sources import synthetic

READ_BLOCK_BYTES = 4 << 20
PARQUET_BATCH_ROWS = 65_536
TFRECORD_BATCH_ROWS = 20_000
FORMATS = ("csv", "parquet", "tfrecord")
NULLS = set(names.NA_VALUES)  # the default missing-value spellings, for explaining a bad row


@dataclass
class SourceFile:
    uri: str
    size: int
    format: str
    stamp: str = ""  # what changes when the content does: mtime (local), generation (gs://)


def detect_format(uri: str, declared: str = "auto") -> str:
    if declared != "auto":
        return declared
    name = uri.lower().removesuffix(".gz").removesuffix(".gzip")
    for ext, fmt in ((".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet"), (".tfrecord", "tfrecord"),
                     (".tfrecords", "tfrecord")):
        if name.endswith(ext):
            return fmt
    raise GpupipeError(f"data.format: cannot tell the format of {uri} from its name; set data.format to "
                       "csv, parquet or tfrecord")


def _hidden(name: str) -> bool:
    return os.path.basename(name).startswith((".", "_"))


def fingerprint(files: List[SourceFile]) -> str:
    """A digest of the files' names, sizes and stamps: it changes when the data does, so a
    cached ingest is reused only for the same data."""
    text = "\n".join(f"{f.uri}\t{f.size}\t{f.stamp}" for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(source: str, declared_format: str = "auto") -> List[SourceFile]:
    """The files a source names, sorted; a source that names none is an error."""
    if synthetic.is_synthetic(source):
        synthetic.parse_source(source)
        return [SourceFile(source, 0, "synthetic")]
    one = None if storage.GLOB_CHARS.search(source) else storage.stat(source)
    if storage.GLOB_CHARS.search(source):
        entries = storage.glob(source)
        what = "matches no objects" if storage.is_remote(source) else "matches no files"
    elif one is not None:
        entries = [one]
        what = ""
    else:  # a directory or prefix: the files under it
        entries = storage.list_prefix(source)
        if not entries and not storage.is_remote(source) and not os.path.isdir(source):
            raise GpupipeError(f"data.source: file not found: {source}; fix the path (relative paths start at the "
                               "working directory)")
        what = "is an empty directory" if not storage.is_remote(source) else "does not exist"
    files = [SourceFile(e.uri, e.size, "", e.stamp) for e in entries if not _hidden(e.uri)]
    if not files:
        raise GpupipeError(f"data.source: {source} {what}; fix data.source (a file, directory, glob or "
                           "gs:// or s3://bucket/prefix)")
    for f in files:
        f.format = detect_format(f.uri, declared_format)
    formats = {f.format for f in files}
    if len(formats) > 1:
        raise GpupipeError(f"data.source: {source} mixes formats ({', '.join(sorted(formats))}); "
                           "point it at one format or set data.format")
    return files


# ----------------------------------------------------------------------------- columns
FLOAT32_MAX = float(np.finfo(np.float32).max)
_MAGIC = ((b"PAR1", "Parquet", "parquet"), (b"\x1f\x8b", "gzip-compressed", ""),
          (b"SQLite format 3", "an SQLite database", ""), (b"PK\x03\x04", "a ZIP archive (an .xlsx workbook?)", ""))


def _sniff_not_csv(uri: str, start: bytes) -> None:
    """A file read as CSV that starts like another format: say which, not 'not UTF-8'."""
    for magic, what, fmt in _MAGIC:
        if start.startswith(magic):
            if fmt:
                fix = f"set data.format: {fmt} (or auto, with a .{fmt} file name)"
            elif magic == b"\x1f\x8b":
                fix = "name it .csv.gz (data.format: auto or csv reads it then), or decompress it"
            else:
                fix = "export the table as CSV or Parquet"
            raise GpupipeError(f"data.source: {uri} looks like {what} (it starts with {magic!r}), not CSV text, "
                               f"but it is read as CSV; {fix}")


def csv_header(uri: str) -> List[str]:
    with _open_text_stream(uri) as f:
        try:
            first = f.readline()
        except (OSError, EOFError) as err:
            raise GpupipeError(f"data.source: {uri} is truncated or not gzip ({err}); re-export the file") from None
    _sniff_not_csv(uri, first[:16])
    if not first.strip():
        raise GpupipeError(f"data.source: {uri} is empty; point data.source at a CSV file with a header row")
    try:
        text = first.decode("utf-8-sig")  # a byte-order mark (Excel's UTF-8) is not part of the first name
    except UnicodeDecodeError:
        raise GpupipeError(f"data.source: {uri} line 1 is not UTF-8; re-encode the file as UTF-8") from None
    return unique_columns([c.strip() for c in next(csv.reader([text]))], uri)


def unique_columns(names: List[str], uri: str) -> List[str]:
    """The names, or a one-line error when one of them is there twice."""
    seen = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise GpupipeError(f"data.source: {uri} has two columns named '{name}' (columns {seen[name]} and {i}); "
                               "rename one in the data")
        seen[name] = i
    return names


def columns_of(f: SourceFile) -> List[str]:
    if f.format == "synthetic":
        return synthetic.columns()
    if f.format == "csv":
        return csv_header(f.uri)
    if f.format == "parquet":
        return unique_columns(list(_parquet_file(f.uri).schema_arrow.names), f.uri)
    # TFRecord: the features of the first example
    for batch in _tfrecord_batches(f.uri, max_records=1):
        return list(batch.schema.names)
    raise GpupipeError(f"data.source: {f.uri} holds no records; point data.source at non-empty files")


# ----------------------------------------------------------------------------- readers
def _is_gzip(uri: str) -> bool:
    return uri.lower().endswith((".gz", ".gzip"))


def _open_text_stream(uri: str):
    raw = open_for_reading(uri, "data.source")
    if _is_gzip(uri):
        import gzip

        return gzip.GzipFile(fileobj=raw)
    return raw


def read_batches(f: SourceFile, types: Dict[str, pa.DataType],
                 na_values: Sequence[str] = names.NA_VALUES) -> Iterator[pa.RecordBatch]:
    """Record batches holding exactly the columns of `types`, cast to those types; in a
    CSV, a cell spelt like one of `na_values` is missing."""
    if f.format == "synthetic":
        yield from _synthetic(f.uri, types)
    elif f.format == "csv":
        yield from _csv(f.uri, types, na_values)
    elif f.format == "parquet":
        yield from _parquet(f.uri, types)
    else:
        for batch in _tfrecord_batches(f.uri):
            yield _select_and_cast(batch, types, f.uri)


def _synthetic(uri: str, types):
    rows, seed = synthetic.parse_source(uri)
    for batch in synthetic.ctr_batches(rows, seed):
        yield _select_and_cast(batch, types, uri)


def _csv(uri: str, types, na_values: Sequence[str] = names.NA_VALUES):
    import pyarrow.csv as pacsv

    header = csv_header(uri)
    _check_later_file(SourceFile(uri, 0, "csv"), header, list(types), "one of data.source's files")
    stream = open_for_reading(uri, "data.source")
    try:
        source = pa.CompressedInputStream(stream, "gzip") if _is_gzip(uri) else stream
        # The header as csv_header read it (spaces around names and a byte-order mark gone).
        reader = pacsv.open_csv(
            source, read_options=pacsv.ReadOptions(block_size=READ_BLOCK_BYTES, column_names=header, skip_rows=1),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types),
                                                 strings_can_be_null=True, null_values=list(na_values)))
        floats = [name for name, t in types.items() if pa.types.is_floating(t)]
        for batch in reader:
            for name in floats:
                if pc.any(pc.is_inf(batch.column(batch.schema.get_field_index(name)))).as_py():
                    _explain_overflow(uri, header, name)  # a finite number too large for float32; or a real inf
            yield batch
    except (pa.ArrowInvalid, OSError) as err:
        raise GpupipeError(_explain_csv_error(uri, header, " ".join(str(err).split()), types)) from None
    finally:
        stream.close()


def _overflow_message(uri: str, where: str, name: str, value: object) -> str:
    return (f"data.source: {uri}{where}: column '{name}' holds {value}, outside float32's range (about "
            f"±{FLOAT32_MAX:.1e}, which numeric features are read as); rescale the column (e.g. its logarithm, or "
            f"other units), or move '{name}' to categorical_features if it is an identifier")


def _explain_overflow(uri: str, header: List[str], name: str) -> None:
    """Arrow read a finite number beyond float32's range as inf: find the first such cell
    and say so (a cell spelt inf is left to the step's inf check, which says that)."""
    index = header.index(name)
    with _open_text_stream(uri) as raw:
        next(raw, None)
        for line_no, raw_line in enumerate(raw, start=2):
            try:
                row = next(csv.reader([raw_line.decode("utf-8", "replace")]))
                value = float(row[index].strip())
            except (ValueError, IndexError, StopIteration):
                continue
            if np.isfinite(value) and abs(value) > FLOAT32_MAX:
                raise GpupipeError(_overflow_message(uri, f" line {line_no}", name, row[index].strip()))


def _explain_csv_error(uri: str, header: List[str], message: str, types) -> str:
    """Arrow names a column by position and no line; find both by rescanning the file."""
    if "gzip" in message.lower() or "zlib" in message.lower() or "compress" in message.lower():
        return f"data.source: {uri} is truncated or not valid gzip ({message}); re-export the file"
    m = re.search(r"In CSV column #(\d+): ", message)
    column = header[int(m.group(1))] if m and int(m.group(1)) < len(header) else None
    line, reason = _scan_csv(uri, header, types)
    where = f" line {line}" if line else ""
    if reason == "ragged":
        return (f"data.source: {uri}{where}: row has a different number of fields than the header's "
                f"{len(header)}; fix the row (quote fields that contain commas)")
    if reason == "utf8":
        return f"data.source: {uri}{where}: bytes that are not UTF-8; re-encode the file as UTF-8"
    if column and reason == "numeric":
        bad = message.split("invalid value ")[-1]
        return (f"data.source: {uri}{where}: column '{column}' is declared numeric but holds {bad}; fix the data "
                f"or move '{column}' to categorical_features")
    return f"data.source: {uri}{where}: {message}"


def _scan_csv(uri: str, header: List[str], types) -> tuple[Optional[int], str]:
    """(line number, what is wrong) of the first bad row: ragged, not UTF-8, or text in a
    numeric column. Reads line by line, so a large file is not held in memory."""
    numeric = [i for i, name in enumerate(header) if pa.types.is_floating(types.get(name, pa.string()))]
    with _open_text_stream(uri) as raw:
        try:
            next(raw, None)  # the header
            for line_no, raw_line in enumerate(raw, start=2):
                problem = _row_problem(raw_line, len(header), numeric)
                if problem:
                    return line_no, problem
        except (OSError, EOFError):
            return None, "gzip"
    return None, ""


def _row_problem(raw_line: bytes, width: int, numeric: List[int]) -> str:
    try:
        text = raw_line.decode("utf-8")
    except UnicodeDecodeError:
        return "utf8"
    if not text.strip():
        return ""
    row = next(csv.reader([text]))
    if len(row) != width:
        return "ragged"
    for i in numeric:
        value = row[i].strip()
        if value in NULLS:
            continue
        try:
            float(value)
        except ValueError:
            return "numeric"
    return ""


def _parquet_file(uri: str):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(open_for_reading(uri, "data.source"))
    except (pa.ArrowInvalid, OSError) as err:
        raise GpupipeError(f"data.source: {uri} is not a readable Parquet file, truncated or corrupt "
                           f"({' '.join(str(err).split())}); re-export it") from None


def _parquet(uri: str, types):
    pf = _parquet_file(uri)
    _check_later_file(SourceFile(uri, 0, "parquet"), list(pf.schema_arrow.names), list(types),
                      "one of data.source's files")
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(types)):
            yield _select_and_cast(batch, types, uri)
    except (pa.ArrowInvalid, OSError) as err:
        raise GpupipeError(f"data.source: {uri} is truncated or corrupt ({' '.join(str(err).split())}); "
                           "re-export it") from None


def _tfrecord_batches(uri: str, max_records: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """tf.Example records decoded by tfx_bsl; list columns with one value become scalars."""
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    local, tmp = uri, None
    if storage.is_remote(uri):  # a local copy: TF's own filesystems need their own credentials (and none does s3://)
        tmp = tempfile.NamedTemporaryFile(suffix=os.path.basename(uri), delete=False)
        with open_for_reading(uri, "data.source") as src:
            while chunk := src.read(8 << 20):
                tmp.write(chunk)
        tmp.close()
        local = tmp.name
    try:
        dataset = tf.data.TFRecordDataset(local, compression_type="GZIP" if _is_gzip(uri) else "")
        if max_records:
            dataset = dataset.take(max_records)
        decoder = example_coder.ExamplesToRecordBatchDecoder()
        first_record = 1
        for records in dataset.batch(TFRECORD_BATCH_ROWS):
            try:
                batch = decoder.DecodeBatch(list(records.numpy()))
            except RuntimeError as err:  # tfx_bsl: DATA_LOSS: Unable to parse example
                raise GpupipeError(f"data.source: {uri} holds TFRecords that are not tf.train.Example ({err}); "
                                   "write tf.train.Example records, or export the table as CSV or Parquet") from None
            for name, column in zip(batch.schema.names, batch.columns):
                _one_value_each(column, name, uri, first_record)
            first_record += batch.num_rows
            yield pa.RecordBatch.from_arrays([_first_values(c) for c in batch.columns], batch.schema.names)
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as err:
        raise GpupipeError(f"data.source: {uri} is truncated or not TFRecord{' (gzip)' if _is_gzip(uri) else ''} "
                           f"({err.message.splitlines()[0]}); re-export it") from None
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


def _select_and_cast(batch: pa.RecordBatch, types, uri: str) -> pa.RecordBatch:
    arrays = []
    for name, dtype in types.items():
        index = batch.schema.get_field_index(name)
        if index < 0:  # a TFRecord example may simply not have the feature: all missing
            arrays.append(pa.nulls(batch.num_rows, dtype))
            continue
        column = batch.column(index)
        if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            column = _utf8(column, uri, name)
        if dtype == pa.float32() and (pa.types.is_float64(column.type) or pa.types.is_integer(column.type)):
            _check_float32_range(column, uri, name)
        try:
            arrays.append(column if column.type == dtype else column.cast(dtype))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = next((i for i, v in enumerate(column.to_pylist()) if v is not None and not _castable(v, dtype)), None)
            row = f" row {bad + 1}" if bad is not None else ""
            value = f" '{column[bad].as_py()}'" if bad is not None else ""
            raise GpupipeError(f"data.source: {uri}{row}: column '{name}' is declared "
                               f"{'numeric' if pa.types.is_floating(dtype) else 'categorical'} but holds{value} "
                               f"of type {column.type}; fix the data or the feature's declared kind") from None
    return pa.RecordBatch.from_arrays(arrays, list(types))


def _check_float32_range(column: pa.Array, uri: str, name: str) -> None:
    """A finite float64 (or an integer) beyond float32's range would become inf in the cast."""
    if not len(column) or column.null_count == len(column):
        return
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    beyond = np.isfinite(values) & (np.abs(values) > FLOAT32_MAX)
    if beyond.any():
        at = int(np.argmax(beyond))
        raise GpupipeError(_overflow_message(uri, f" row {at + 1} of a batch", name, column[at].as_py()))


def _utf8(column: pa.Array, uri: str, name: str) -> pa.Array:
    try:
        return column.cast(pa.string())
    except pa.ArrowInvalid:
        bad = next(i for i, v in enumerate(column.to_pylist()) if v is not None and not _decodes(v))
        raise GpupipeError(f"data.source: {uri} row {bad + 1}: column '{name}' holds bytes that are not UTF-8; "
                           "re-encode the data as UTF-8") from None


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _castable(value, dtype) -> bool:
    try:
        pa.array([value]).cast(dtype)
        return True
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False


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
                _check_later_file(f, columns, [label, *features, *([split_key] if split_key else [])],
                                  f"file {i} of {len(files)} of data.source")
    return header


def _check_later_file(f: SourceFile, columns: List[str], needed: List[str], which: str) -> None:
    """A file after the first that lacks a column the first one has: the file and the column."""
    missing = [c for c in needed if c not in columns]
    if missing:
        names_ = ", ".join(f"'{c}'" for c in missing)
        raise GpupipeError(
            f"data.source: {f.uri} ({which}) has no column {names_} (its columns: {', '.join(columns)}); every file "
            "of a multi-file source needs the label, the features and the split key: add the column to that file, "
            "or leave the file out of data.source")


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
                "fix data.numeric_features / data.categorical_features")
    if split_key and split_key not in header:
        raise GpupipeError(f"data.split.key: column '{split_key}' not found in {where}; fix data.split.key")
    return header


def sample(f: SourceFile, rows: int, na_values: Sequence[str] = names.NA_VALUES) -> pa.Table:
    """Up to the first `rows` rows of one file, every column, with the types its format
    gives (CSV: Arrow's type inference on the first block; TFRecord: one value per feature;
    bytes as UTF-8 text): what `gpupipe init` proposes a config from."""
    batches: List[pa.RecordBatch] = []
    if f.format == "synthetic":
        total, seed = synthetic.parse_source(f.uri)
        batches = list(itertools.islice(synthetic.ctr_batches(min(rows, total), seed), 1))
    elif f.format == "csv":
        import pyarrow.csv as pacsv

        header = csv_header(f.uri)
        stream = open_for_reading(f.uri, "data.source")
        try:
            source = pa.CompressedInputStream(stream, "gzip") if _is_gzip(f.uri) else stream
            reader = pacsv.open_csv(
                source, read_options=pacsv.ReadOptions(block_size=READ_BLOCK_BYTES, column_names=header, skip_rows=1),
                convert_options=pacsv.ConvertOptions(strings_can_be_null=True, null_values=list(na_values)))
            while sum(b.num_rows for b in batches) < rows:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
        except (pa.ArrowInvalid, OSError) as err:
            if not batches:
                raise GpupipeError(_explain_csv_error(f.uri, header, " ".join(str(err).split()), {})) from None
            # else a later block does not fit the first one's types: the sample ends before it
        finally:
            stream.close()
    elif f.format == "parquet":
        pf = _parquet_file(f.uri)
        try:
            batches = list(itertools.islice(pf.iter_batches(batch_size=rows), 1))
        except (pa.ArrowInvalid, OSError) as err:
            raise GpupipeError(f"data.source: {f.uri} is truncated or corrupt ({' '.join(str(err).split())}); "
                               "re-export it") from None
    else:
        for batch in _tfrecord_batches(f.uri, max_records=rows):
            batches.append(pa.RecordBatch.from_arrays(
                [_utf8(c, f.uri, n) if pa.types.is_binary(c.type) else c for n, c in zip(batch.schema.names,
                                                                                       batch.columns)],
                batch.schema.names))
    if not batches:
        raise GpupipeError(f"data.source: {f.uri} has no data rows; point it at a file with data")
    return pa.Table.from_batches(batches).slice(0, rows)
