"""Casting a decoded record batch to the declared column types, cell by cell.

Every reader ends here (CSV checks its own floats while Arrow parses them): the batch keeps
exactly the declared columns, a feature a TFRecord example leaves out is all missing, bytes
become UTF-8 text, and a value that does not fit (text in a numeric column, a number beyond
float32's range, bytes that are not UTF-8) is a one-line GpupipeError naming the file, the
column and the row.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from components.contracts.errors import GpupipeError

FLOAT32_MAX = float(np.finfo(np.float32).max)


def overflow_message(uri: str, where: str, name: str, value: object) -> str:
    return (f"data.source: {uri}{where}: column '{name}' holds {value}, outside float32's range (about "
            f"±{FLOAT32_MAX:.1e}, which numeric features are read as); rescale the column (e.g. its logarithm, or "
            f"other units), or move '{name}' to categorical_features if it is an identifier")


def select_and_cast(batch: pa.RecordBatch, types, uri: str) -> pa.RecordBatch:
    arrays = []
    for name, dtype in types.items():
        index = batch.schema.get_field_index(name)
        if index < 0:  # a TFRecord example may simply not have the feature: all missing
            arrays.append(pa.nulls(batch.num_rows, dtype))
            continue
        column = batch.column(index)
        if (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)) and not pa.types.is_binary(dtype):
            column = to_utf8(column, uri, name)
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
        raise GpupipeError(overflow_message(uri, f" row {at + 1} of a batch", name, column[at].as_py()))


def to_utf8(column: pa.Array, uri: str, name: str) -> pa.Array:
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
