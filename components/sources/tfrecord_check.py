"""What is wrong with a TFRecord file TensorFlow could not read, in the user's terms.

TensorFlow's reader says "corrupted record at 52461" or "truncated record at 41975" wrapped in
its op's internals ({{function_node ...}}, [Op:IteratorGetNext]), a byte offset and no record
number; and it takes a file that ends inside a record's length header for a whole one, its last
records silently lost. This module walks the file's framing itself, as TensorFlow writes it:
each record is an 8-byte little-endian length, the masked CRC-32C of those 8 bytes, the data,
and the masked CRC-32C of the data (a .gz file: the same inside one gzip stream), and names the
first record that is cut short or fails its CRC, or says the file is no TFRecord at all.
"""
from __future__ import annotations

import gzip
import os
import re
import struct
import zlib
from typing import BinaryIO, Optional, Tuple

import google_crc32c

HEADER = 12  # uint64 length + uint32 masked CRC of the length
FOOTER = 4  # uint32 masked CRC of the data
_MASK_DELTA = 0xA282EAD8
_CHUNK = 8 << 20


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def ends_early(local: str, gz: bool, data_bytes: int, records: int) -> bool:
    """Whether TensorFlow, having read `records` records of `data_bytes` in all, stopped
    before the file's end (as it does, without a word, at a record cut short inside its
    length header). A gzip file: its trailer's size (modulo 2**32, of its last member only)
    says; a mismatch is checked by walking the records."""
    framed = data_bytes + records * (HEADER + FOOTER)
    if not gz or os.path.getsize(local) < 4:  # an empty file is no gzip stream: TensorFlow reads no record
        return framed < os.path.getsize(local)
    with open(local, "rb") as f:
        f.seek(-4, os.SEEK_END)
        size_mod = struct.unpack("<I", f.read(4))[0]
    return size_mod != framed & 0xFFFFFFFF and _walk(local, gz) is not None


class _NotTFRecord(Exception):
    """The first bytes are no record header."""


def _read(stream: BinaryIO, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = stream.read(min(left, _CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def first_damage(stream: BinaryIO) -> Optional[str]:
    """'record N: ...' for the first record cut short or failing its CRC (a gzip stream: or
    that stops decompressing); None when every record is whole. _NotTFRecord when the first
    header is not one; gzip.BadGzipFile when a gzip stream is none."""
    number = 0
    try:
        while True:
            number += 1
            header = stream.read(HEADER)
            if not header:
                return None
            if len(header) < HEADER:
                if number == 1:
                    raise _NotTFRecord
                return f"record {number}: truncated, the file ends inside its length header"
            length, crc = struct.unpack("<QI", header)
            if masked_crc(header[:8]) != crc:
                if number == 1:
                    raise _NotTFRecord
                return f"record {number}: corrupted — CRC mismatch in its length header"
            data = _read(stream, length)
            footer = stream.read(FOOTER)
            if len(data) < length or len(footer) < FOOTER:
                return f"record {number}: truncated, the file ends inside it"
            if masked_crc(data) != struct.unpack("<I", footer)[0]:
                return f"record {number}: corrupted — CRC mismatch"
    except EOFError:  # gzip: the stream stops before its end marker
        return f"record {number}: truncated, the gzip stream ends inside it"
    except zlib.error:
        return f"record {number}: corrupted — its gzip data does not decompress"


def _walk(local: str, gz: bool) -> Optional[str]:
    with (gzip.open(local, "rb") if gz else open(local, "rb")) as stream:
        return first_damage(stream)


def _starts_with(local: str, gz: bool = False) -> bytes:
    """The first bytes of the file (a .gz file: of its content), as shown in an error."""
    with (gzip.open(local, "rb") if gz else open(local, "rb")) as f:
        return f.read(8)


def _is_plain_tfrecord(local: str) -> bool:
    try:
        _walk(local, gz=False)
        return True
    except _NotTFRecord:
        return False


def _what_it_is(head: bytes) -> Tuple[str, str]:
    """What a file that is no TFRecord looks like, and the fix."""
    if head.startswith(b"PAR1"):
        return "; it looks like Parquet", "set data.format: parquet, or leave it out of data.source"
    if head.startswith(b"\x1f\x8b"):
        return "; it is gzip-compressed", "name it .tfrecord.gz"
    return "", "export it as TFRecord of tf.train.Example, or leave it out of data.source"


def damage(local: str, uri: str, gz: bool, tf_message: str = "") -> str:
    """The one-line error for the TFRecord file `uri` (read from `local`) that TensorFlow
    could not read (its message `tf_message`), or whose last record is cut short."""
    fix = "re-export it, or leave it out of data.source"
    try:
        found = _walk(local, gz)
    except gzip.BadGzipFile as err:
        with open(local, "rb") as f:
            magic = f.read(2)
        if magic == b"\x1f\x8b":  # gzip, its stream damaged (a CRC or length in its trailer, or cut short)
            return f"data.source: {uri}: a corrupted gzip stream ({err}); {fix}"
        if _is_plain_tfrecord(local):
            return (f"data.source: {uri}: not gzip-compressed, though its name ends in .gz (it is a plain TFRecord "
                    "file); rename it without .gz, or compress it")
        head = _starts_with(local)
        return f"data.source: {uri}: not a gzip-compressed TFRecord file (it starts with {head!r}); {fix}"
    except _NotTFRecord:
        head = _starts_with(local, gz)
        what, how = _what_it_is(b"" if gz else head)
        return f"data.source: {uri}: not a TFRecord file (it starts with {head!r}, not a record header{what}); {how}"
    if found is None:  # not the framing: what TensorFlow said, without its op's internals
        found = plain(tf_message) or "unreadable"
    return f"data.source: {uri}: not a readable TFRecord file ({found}); {fix}"


def plain(message: str) -> str:
    """A TensorFlow error message's first line without {{function_node ...}}, [[{{node ...}}]]
    and [Op:...]."""
    line = (message.strip().splitlines() or [""])[0]
    line = re.sub(r"\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\](\s*name:\s*\S*)?", " ", line)
    return " ".join(line.split()).rstrip(" .:")
