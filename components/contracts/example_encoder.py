"""Arrow list columns -> serialized tf.train.Example, vectorised with numpy.

tfx_bsl's RecordBatchToExamples builds one protobuf message per row: about 11 core-µs a row
on the 40-column click-through table, the largest part of ingest (docs/benchmarks.md,
"Feeding the GPU"). This writes the same wire format (tensorflow/core/example/example.proto:
Example{features: Features{map<string, Feature> feature}}, a Feature holding a BytesList or
a packed FloatList, a missing value an empty Feature) for the whole batch at once: every
row's length is computed from the columns' value lengths, then each column's bytes are
scattered into one buffer. Columns of one value per row (or none: missing), float32 or
bytes; anything else (int64, several values in a row) is left to tfx_bsl (`can_encode`).
The map entries come in column order, so a row's bytes depend on its values alone.
"""
from __future__ import annotations

from typing import List

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _varint_len(v: np.ndarray) -> np.ndarray:
    n, x = np.ones(len(v), np.int64), v.astype(np.uint64) >> np.uint64(7)
    while x.any():
        n += x > 0
        x = x >> np.uint64(7)
    return n


def _varints(v: np.ndarray):
    """(a [rows, width] matrix of each value's varint bytes, each one's length)."""
    length = _varint_len(v)
    width = int(length.max()) if len(length) else 1
    x, out = v.astype(np.uint64), np.empty((len(v), width), np.uint8)
    for k in range(width):
        more = (length > k + 1).astype(np.uint8) << 7
        out[:, k] = (x & np.uint64(0x7F)).astype(np.uint8) | more
        x = x >> np.uint64(7)
    return out, length


def _const(rows: int, data: bytes, where=None):
    matrix = np.broadcast_to(np.frombuffer(data, np.uint8), (rows, len(data)))
    return matrix, np.full(rows, len(data), np.int64) if where is None else np.where(where, len(data), 0)


def _is_bytes(t) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)


# A bytes column is padded to its longest value in the batch: past this many times its
# bytes, tfx_bsl encodes the batch instead (a few very long values among short ones).
_PADDING = 8


def can_encode(lists: pa.RecordBatch) -> bool:
    """Whether every column is a list of float32 or bytes with at most one value a row (and
    no bytes column holds a few values far longer than the rest)."""
    for column in lists.columns:
        if not pa.types.is_list(column.type):
            return False
        t = column.type.value_type
        if not (pa.types.is_float32(t) or _is_bytes(t)):
            return False
        if len(column) and np.diff(column.offsets.to_numpy()).max(initial=0) > 1:
            return False
        if _is_bytes(t) and len(column.values):
            lengths = pc.binary_length(column.values).to_numpy(zero_copy_only=False)
            if lengths.max() * len(column) > _PADDING * (lengths.sum() + len(column)) + (1 << 20):
                return False
    return True


def _pieces(name: str, column: pa.ListArray) -> list:
    """One column's map entry in each row, as (matrix, lengths) pieces in order."""
    rows = len(column)
    starts = column.offsets.to_numpy()
    present = (np.diff(starts) > 0) & pc.is_valid(column).to_numpy(zero_copy_only=False)
    values = column.values
    key = b"\x0a" + _varint(len(name.encode())) + name.encode() + b"\x12"
    index = np.where(present, starts[:-1], 0)
    if pa.types.is_float32(values.type):
        floats = values.to_numpy(zero_copy_only=False).astype("<f4") if len(values) else np.zeros(1, "<f4")
        data = floats[np.minimum(index, len(floats) - 1)].view(np.uint8).reshape(rows, 4)
        feature = np.where(present, 8, 0)  # 0x12 0x06 0x0a 0x04 + the float
        content = len(key) + 1 + feature
        return [_const(rows, b"\x0a"), _varints(content), _const(rows, key), _varints(feature),
                _const(rows, b"\x12\x06\x0a\x04", present), (data, np.where(present, 4, 0))]
    value = values.cast(pa.large_binary()) if len(values) else pa.array([b""], pa.large_binary())
    offsets = np.frombuffer(value.buffers()[1], np.int64)[value.offset:value.offset + len(value) + 1]
    raw = value.buffers()[2]
    raw = np.frombuffer(raw, np.uint8) if raw is not None and raw.size else np.zeros(1, np.uint8)
    src = offsets[np.minimum(index, len(value) - 1)]
    n = np.where(present, offsets[np.minimum(index, len(value) - 1) + 1] - src, 0)
    width = int(n.max()) if rows else 0
    data = raw[np.minimum(src[:, None] + np.arange(width), len(raw) - 1)] if width else np.zeros((rows, 0), np.uint8)
    n_bytes, n_len = _varints(n)
    bytes_list = 1 + n_len + n  # 0x0a varint(n) value
    bl_bytes, bl_len = _varints(bytes_list)
    feature = np.where(present, 1 + bl_len + bytes_list, 0)  # 0x0a varint(BytesList) BytesList
    f_bytes, f_len = _varints(feature)
    content = len(key) + f_len + feature
    tag = _const(rows, b"\x0a", present)
    return [_const(rows, b"\x0a"), _varints(content), _const(rows, key), (f_bytes, f_len), tag,
            (bl_bytes, np.where(present, bl_len, 0)), tag, (n_bytes, np.where(present, n_len, 0)), (data, n)]


def _merged(pieces: list) -> list:
    """Adjacent pieces joined into one wherever each row uses the first whole or the second
    not at all (a row's bytes are then a prefix of the joined piece): fewer, wider pieces
    to lay out."""
    out, matrices, length, full = [], [], None, None
    for m, n in pieces:
        if matrices and not np.all(full | (n == 0)):
            out.append((np.concatenate(matrices, axis=1), length))
            matrices = []
        if not matrices:
            matrices, length, full = [m], n.copy(), n == m.shape[1]
            continue
        matrices.append(m)
        length += n
        full &= n == m.shape[1]
    out.append((np.concatenate(matrices, axis=1), length))
    return out


def encode(lists: pa.RecordBatch) -> List[bytes]:
    """Each row of `lists` (can_encode's columns) as a serialized tf.train.Example: every
    piece of every row laid out in one [rows, width] matrix, then the bytes each row uses
    taken in row order (one boolean mask)."""
    rows = lists.num_rows
    if not rows:
        return []
    pieces = [p for name, column in zip(lists.schema.names, lists.columns) for p in _pieces(name, column)]
    body = np.zeros(rows, np.int64)
    for _, length in pieces:
        body += length
    head = [_const(rows, b"\x0a"), _varints(body)]  # Example: 0x0a varint(Features) Features
    pieces = _merged(head + pieces)
    width = sum(m.shape[1] for m, _ in pieces)
    matrix, used = np.empty((rows, width), np.uint8), np.empty((rows, width), bool)
    at = 0
    for m, length in pieces:
        w = m.shape[1]
        matrix[:, at:at + w] = m
        used[:, at:at + w] = _COLUMNS[:w] < length[:, None]
        at += w
    data = matrix[used].tobytes()
    ends = np.cumsum(body + 1 + _varint_len(body)).tolist()
    return [data[a:b] for a, b in zip([0, *ends[:-1]], ends)]


_COLUMNS = np.arange(1 << 16)
