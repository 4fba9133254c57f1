"""Gzip TFRecord files written by ISA-L (python-isal) instead of TensorFlow's writer.

The file is the one `tf.io.TFRecordWriter(path, TFRecordOptions("GZIP"))` writes: one gzip
stream of TFRecord frames (the data's length as 8 little-endian bytes, the masked CRC-32C of
those 8 bytes, the data, the masked CRC-32C of the data), so tf.data's GZIP reader, TFDV,
tfx_bsl and Beam read it as before. What changes is the CPU a row: ingest's row shards of
the click-through table cost 5.2 core-µs a row through TensorFlow's writer at zlib level 1,
and about 2 here (the frames laid out with Arrow, ISA-L's deflate at level 1, which also
gives the smaller file; docs/benchmarks.md, "Ingest's gzip by ISA-L, one lookup table,
uncompressed blocks"). ISA-L releases the GIL while it compresses, so a writer thread
overlaps the next batch's encoding. Without compression (`level` None) the frames are
written as they are: the column blocks (contracts/examples.py: block_shard_path).

Levels are ISA-L's, 0 to 3 (0: the fastest, 3: the smallest; gzip level 1 is in between).
"""
from __future__ import annotations

import struct
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ISAL_LEVELS = range(0, 4)
# Records framed (copied) at once: about 5 MB of the click-through table's rows
FRAMED_AT_ONCE = 8192
_MASK_DELTA = np.uint32(0xA282EAD8)


def masked_crc32c(values: Sequence[bytes]) -> np.ndarray:
    """Each value's CRC-32C, masked as TFRecord frames hold it (rotated right by 15 bits,
    plus 0xa282ead8), as little-endian uint32."""
    import google_crc32c

    crcs = np.fromiter(map(google_crc32c.value, values), np.uint32, len(values))
    return (((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + _MASK_DELTA).astype("<u4")


class _Stored:
    """The frames as they are (RecordWriter without compression)."""

    @staticmethod
    def compress(data) -> bytes:
        return data.to_pybytes()  # (GFile writes bytes)

    @staticmethod
    def flush() -> bytes:
        return b""


def _fixed_width(buffer: np.ndarray, width: int, rows: int) -> pa.Array:
    """`rows` values of `width` bytes each, laid end to end in `buffer`, as a binary array
    (no copy)."""
    offsets = np.arange(rows + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(buffer)])


def frame(records: Sequence[bytes]) -> pa.Buffer:
    """`records` as TFRecord frames, end to end in one buffer."""
    rows = len(records)
    if not rows:
        return pa.py_buffer(b"")
    data = pa.array(records, pa.large_binary())
    lengths = np.diff(np.frombuffer(data.buffers()[1], np.int64, rows + 1)).astype("<u8")
    # The length's CRC, once a distinct length (a table's rows take few)
    distinct, which = np.unique(lengths, return_inverse=True)
    length_crcs = masked_crc32c([struct.pack("<Q", int(n)) for n in distinct])
    head = np.empty((rows, 12), np.uint8)
    head[:, :8] = lengths.view(np.uint8).reshape(rows, 8)
    head[:, 8:] = length_crcs[which].view(np.uint8).reshape(rows, 4)
    tail = masked_crc32c(records).view(np.uint8)
    joined = pc.binary_join_element_wise(_fixed_width(head, 12, rows), data, _fixed_width(tail, 4, rows),
                                         pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(joined.buffers()[1], np.int64, rows + 1)
    return joined.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


class RecordWriter:
    """Writes records to one TFRecord file at `path` (a local path, or any scheme
    tf.io.gfile opens): gzip at ISA-L's `level`, or without compression when `level` is
    None. Used as tf.io.TFRecordWriter is: `write` one record, `write_many` a
    list (the fast path), `close`."""

    def __init__(self, path: str, level: Optional[int] = 1):
        import tensorflow as tf
        from isal import isal_zlib

        if level is not None and level not in ISAL_LEVELS:
            raise ValueError(f"gzip level {level}: ISA-L takes {ISAL_LEVELS.start} to {ISAL_LEVELS.stop - 1}")
        self._file = tf.io.gfile.GFile(path, "wb")
        self._deflate = isal_zlib.compressobj(level, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS) \
            if level is not None else _Stored()  # (16 +: a gzip header)

    def write(self, record: bytes) -> None:
        self.write_many([record])

    def write_many(self, records: Sequence[bytes]) -> None:
        for start in range(0, len(records), FRAMED_AT_ONCE):  # (the frames' copy stays small)
            out = self._deflate.compress(frame(records[start:start + FRAMED_AT_ONCE]))
            if out:
                self._file.write(out)

    def close(self) -> None:
        if self._file is None:
            return
        self._file.write(self._deflate.flush())
        self._file.close()
        self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()
