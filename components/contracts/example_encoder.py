"""Arrow columns -> serialized tf.train.Example, vectorised: rows (`encode`) and column
blocks (`encode_blocks`).

tfx_bsl's RecordBatchToExamples builds one protobuf message per row: about 11 core-µs a row
on the 40-column click-through table. This writes the same wire format
(tensorflow/core/example/example.proto: Example{features: Features{map<string, Feature>
feature}}, a Feature holding a BytesList or a packed FloatList, a missing value an empty
Feature) for the whole batch at once, with Arrow's kernels: each column becomes two binary
arrays, a per-row prefix (its map entry's tags and lengths, taken from a small table by
the value's length) and the value itself (a view of the column's buffers, no copy), and one
`binary_join_element_wise` lays every row out, prefix and value after prefix and value.
Columns of one value per row (or none: missing), float32 or bytes; anything else (int64,
several values in a row) is left to tfx_bsl (`can_encode`). The map entries come in column
order, so a row's bytes depend on its values alone (and are the same as this module's
earlier numpy encoder's: the validation-slice buckets did not move).
"""
from __future__ import annotations

from typing import List, Sequence

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


def _is_bytes(t) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)


def can_encode(lists: pa.RecordBatch) -> bool:
    """Whether every column is a list of float32 or bytes with at most one value a row."""
    for column in lists.columns:
        if not pa.types.is_list(column.type):
            return False
        t = column.type.value_type
        if not (pa.types.is_float32(t) or _is_bytes(t)):
            return False
        if len(column) and np.diff(column.offsets.to_numpy()).max(initial=0) > 1:
            return False
    return True


def _binary(offsets: np.ndarray, data) -> pa.Array:
    """A large_binary array over `data` (an Arrow buffer) at `offsets` (int64, one more than rows)."""
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), data])


def _packed(pieces: Sequence[bytes], lengths: np.ndarray) -> pa.Array:
    """pieces[i] in the rows whose index is i: a table of a few byte strings taken per row."""
    table = pa.array(list(pieces), pa.large_binary())
    return table.take(pa.array(lengths))


def _bytes_values(values: pa.Array):
    """(offsets into the data buffer, the data buffer) of a string/binary array."""
    values = values.cast(pa.large_binary())
    offsets = np.frombuffer(values.buffers()[1], np.int64)[values.offset:values.offset + len(values) + 1]
    data = values.buffers()[2] if values.buffers()[2] is not None else pa.py_buffer(b"")
    return offsets, data


def _table_index(n: np.ndarray, present: np.ndarray):
    """(distinct lengths, each row's index among them; a missing row's: len(distinct))."""
    top = int(n.max(initial=0))
    if top < 4096:
        distinct = np.arange(top + 1)
        index = n.copy()
    else:  # a few long values: a table of the lengths there are
        distinct, index = np.unique(n, return_inverse=True)
    return distinct, np.where(present, index, len(distinct)).astype(np.int32)


def _key(name: str) -> bytes:
    k = name.encode()
    return b"\x0a" + _varint(len(k)) + k


def _row_parts(name: str, column: pa.ListArray):
    """One column's map entry in each row: ([prefix array, value array], bytes a row)."""
    if column.null_count:  # a null list holds no values (whatever its offsets say)
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(column) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        column = pa.ListArray.from_arrays(pa.array(offsets), column.flatten())
    starts = column.offsets.to_numpy().astype(np.int64)
    present = np.diff(starts) > 0
    values, key = column.values, _key(name)
    missing = b"\x0a" + _varint(len(key) + 2) + key + b"\x12\x00"  # key, empty Feature
    if pa.types.is_float32(values.type):
        # key, Feature{FloatList{packed: one float}}: 0x12 0x08 | 0x12 0x06 | 0x0a 0x04 | 4 bytes
        entry = b"\x0a" + _varint(len(key) + 10) + key + b"\x12\x08\x12\x06\x0a\x04"
        floats = values.buffers()[1] if len(values) else pa.py_buffer(b"")
        offsets = (starts + values.offset) * 4  # a view of the floats: row i's 4 bytes, or none
        return ([_packed([missing, entry], present.astype(np.int8)), _binary(offsets, floats)],
                np.where(present, len(entry) + 4, len(missing)))
    voffsets, data = _bytes_values(values)
    offsets = voffsets[starts]  # a view of the values: row i's, or none
    n = np.diff(offsets)
    distinct, which = _table_index(n, present)
    table = []
    for m in distinct.tolist():
        bytes_list = 1 + len(_varint(m)) + m  # 0x0a varint(m) value
        feature = 1 + len(_varint(bytes_list)) + bytes_list  # 0x0a varint(BytesList) BytesList
        content = len(key) + 1 + len(_varint(feature)) + feature
        table.append(b"\x0a" + _varint(content) + key + b"\x12" + _varint(feature) + b"\x0a" + _varint(bytes_list)
                     + b"\x0a" + _varint(m))
    table.append(missing)
    sizes = np.fromiter(map(len, table), np.int64, len(table))[which]
    return [_packed(table, which), _binary(offsets, data)], sizes + n


def _varint_array(v: np.ndarray, lead: bytes = b"") -> pa.Array:
    """`lead` + each value of `v` as a varint, a binary array."""
    width = int(_varint_len(np.array([v.max(initial=0)]))[0])
    length = _varint_len(v)
    x, matrix = v.astype(np.uint64), np.empty((len(v), len(lead) + width), np.uint8)
    matrix[:, :len(lead)] = np.frombuffer(lead, np.uint8)
    for k in range(width):
        matrix[:, len(lead) + k] = (x & np.uint64(0x7F)).astype(np.uint8) | ((length > k + 1).astype(np.uint8) << 7)
        x = x >> np.uint64(7)
    used = np.arange(matrix.shape[1]) < (length + len(lead))[:, None]
    offsets = np.zeros(len(v) + 1, np.int64)
    np.cumsum(length + len(lead), out=offsets[1:])
    return _binary(offsets, pa.py_buffer(matrix[used].tobytes()))


# Below this many bytes of output, the arrays are joined as `binary` (32-bit offsets): Arrow's
# join takes 1.43 core-µs a row of the click-through table so, against 1.76 as large_binary.
_BINARY_BELOW = 1 << 31


def _split(joined: pa.Array) -> List[bytes]:
    """Each value as a bytes object: Arrow's conversion to numpy makes them in C (0.1 core-µs a
    row of the click-through table, against 0.64 slicing one bytes object in Python)."""
    return joined.to_numpy(zero_copy_only=False).tolist()


def encode(lists: pa.RecordBatch) -> List[bytes]:
    """Each row of `lists` (can_encode's columns) as a serialized tf.train.Example."""
    rows = lists.num_rows
    if not rows:
        return []
    arrays, body = [], np.zeros(rows, np.int64)
    for name, column in zip(lists.schema.names, lists.columns):
        parts, size = _row_parts(name, column)
        arrays += parts
        body += size
    head = _varint_array(body, b"\x0a")  # Example: 0x0a varint(Features) Features
    arrays = [head, *arrays]
    kind = pa.large_binary()
    if int(body.sum()) + len(head.buffers()[2]) < _BINARY_BELOW:
        try:  # (a value array's offsets point into its column's buffer, which could be larger)
            arrays, kind = [a.cast(pa.binary()) for a in arrays], pa.binary()
        except pa.ArrowInvalid:
            pass
    return _split(pc.binary_join_element_wise(*arrays, pa.scalar(b"", kind)))


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _string_items(column: pa.Array, at: List[int]):
    """Each row's `0x0a varint(n) value` (a BytesList item; a missing value empty), laid out
    in one buffer: (its bytes, where the item of each row in `at` starts)."""
    voffsets, data = _bytes_values(pc.fill_null(column.cast(pa.large_binary()), b""))
    n = np.diff(voffsets)
    rows = len(n)
    if rows and n.max() < 128:  # one-byte lengths: row i's item is 2 * i bytes further on than its value
        base = voffsets[0]
        raw = np.frombuffer(data, np.uint8)[base:voffsets[-1]]
        out = np.empty(len(raw) + 2 * rows, np.uint8)
        starts = voffsets[:-1] - base + 2 * np.arange(rows)
        out[starts], out[starts + 1] = 0x0A, n
        out[np.arange(len(raw)) + np.repeat(2 * np.arange(1, rows + 1), n)] = raw
        return out.tobytes(), (np.append(starts, len(out))[at]).tolist()
    distinct, which = _table_index(n, np.ones(rows, bool))
    table = [b"\x0a" + _varint(m) for m in distinct.tolist()]
    items = pc.binary_join_element_wise(_packed(table, which), _binary(voffsets, data),
                                        pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(items.buffers()[1], np.int64)[items.offset:items.offset + len(items) + 1]
    return items.buffers()[2].to_pybytes(), (offsets - offsets[0])[at].tolist()


def encode_blocks(columns: pa.RecordBatch, int_columns: Sequence[str], rows: int) -> List[bytes]:
    """`columns` (scalar float32 and string/binary, plus `int_columns`: small non-negative
    integers, below 128) as column blocks of `rows` rows each (the last one shorter): one
    tf.train.Example a block, each feature the list of its rows' values, a missing number
    NaN and a missing string empty (contracts/examples.py: encode_blocks)."""
    count = columns.num_rows
    starts = list(range(0, count, rows)) + [count]
    per_column = []  # (entry key, feature tag, inner tag or None, a block's payload)
    for name, column in zip(columns.schema.names, columns.columns):
        key = _key(name)
        if name in int_columns:  # Feature{Int64List{packed varints}}, one byte each
            data = np.asarray(column.to_numpy(zero_copy_only=False), np.uint8).tobytes()
            per_column.append((key, b"\x1a", b"\x0a", data, None))
        elif pa.types.is_floating(column.type):  # Feature{FloatList{packed}}
            floats = pc.fill_null(column.cast(pa.float32()), float("nan")).to_numpy(zero_copy_only=False)
            per_column.append((key, b"\x12", b"\x0a", floats.astype("<f4").tobytes(), None))
        else:  # Feature{BytesList{items}}
            data, offsets = _string_items(column, starts)
            per_column.append((key, b"\x0a", None, data, offsets))
    blocks = []
    for b, (s, e) in enumerate(zip(starts[:-1], starts[1:])):
        entries = []
        for key, tag, inner, data, offsets in per_column:
            if offsets is not None:  # the items of rows s to e
                feature = _field(tag, data[offsets[b]:offsets[b + 1]])
            else:
                width = len(data) // count
                feature = _field(tag, _field(inner, data[s * width:e * width]))
            entries.append(_field(b"\x0a", key + _field(b"\x12", feature)))
        blocks.append(_field(b"\x0a", b"".join(entries)))
    return blocks
