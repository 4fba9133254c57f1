"""CSV files (optionally .gz): the header, typed batches, a sample, and what went wrong.

Arrow parses the text in blocks; when it fails it names a column by position and no line,
so the file is scanned again line by line to name the line, the column and the reason
(ragged row, bytes that are not UTF-8, text in a numeric column, a number beyond float32,
a file that is really Parquet, gzip, SQLite or a ZIP archive).
"""
from __future__ import annotations

import csv
import re
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.storage import open_for_reading
from components.sources.cells import FLOAT32_MAX, overflow_message
from components.sources.files import SourceFile, check_later_file, is_gzip, unique_columns

READ_BLOCK_BYTES = 4 << 20
NULLS = set(names.NA_VALUES)  # the default missing-value spellings, for explaining a bad row
_MAGIC = ((b"PAR1", "Parquet", "parquet"), (b"\x1f\x8b", "gzip-compressed", ""),
          (b"SQLite format 3", "an SQLite database", ""), (b"PK\x03\x04", "a ZIP archive (an .xlsx workbook?)", ""))


def _open_text_stream(uri: str):
    raw = open_for_reading(uri, "data.source")
    if is_gzip(uri):
        import gzip

        return gzip.GzipFile(fileobj=raw)
    return raw


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


def _open_csv(stream, uri: str, header: List[str], convert_options):
    import pyarrow.csv as pacsv

    source = pa.CompressedInputStream(stream, "gzip") if is_gzip(uri) else stream
    # The header as csv_header read it (spaces around names and a byte-order mark gone).
    return pacsv.open_csv(
        source, read_options=pacsv.ReadOptions(block_size=READ_BLOCK_BYTES, column_names=header, skip_rows=1),
        convert_options=convert_options)


def csv_batches(uri: str, types: Dict[str, pa.DataType],
                na_values: Sequence[str] = names.NA_VALUES) -> Iterator[pa.RecordBatch]:
    """The columns of `types`, parsed as those types; a cell spelt like one of `na_values` is missing."""
    import pyarrow.csv as pacsv

    header = csv_header(uri)
    check_later_file(SourceFile(uri, 0, "csv"), header, list(types), "one of data.source's files")
    stream = open_for_reading(uri, "data.source")
    try:
        reader = _open_csv(stream, uri, header, pacsv.ConvertOptions(
            column_types=types, include_columns=list(types), strings_can_be_null=True, null_values=list(na_values)))
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


def csv_sample(uri: str, rows: int, na_values: Sequence[str] = names.NA_VALUES) -> List[pa.RecordBatch]:
    """The first blocks, up to `rows` rows, every column with the types Arrow infers from the
    first block; a later block that does not fit those types ends the sample."""
    import pyarrow.csv as pacsv

    header = csv_header(uri)
    batches: List[pa.RecordBatch] = []
    stream = open_for_reading(uri, "data.source")
    try:
        reader = _open_csv(stream, uri, header,
                           pacsv.ConvertOptions(strings_can_be_null=True, null_values=list(na_values)))
        while sum(b.num_rows for b in batches) < rows:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                break
    except (pa.ArrowInvalid, OSError) as err:
        if not batches:
            raise GpupipeError(_explain_csv_error(uri, header, " ".join(str(err).split()), {})) from None
        # else a later block does not fit the first one's types: the sample ends before it
    finally:
        stream.close()
    return batches


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
                raise GpupipeError(overflow_message(uri, f" line {line_no}", name, row[index].strip()))


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
