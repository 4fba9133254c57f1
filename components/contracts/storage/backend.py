"""The storage contract: what every backend (the local disk, GCS, S3) implements in full,
and the parts written once for all of them. tests/test_storage_contract.py runs the same
cases on each backend (a local directory, gcp-storage-emulator, moto's S3 server).

A backend is a `Backend`: abstract methods for what differs per store (stat, scan, ranged
and versioned reads, conditional writes, deletes, file transfers, a directory that appears
whole); `ObjectStore` adds what every object store builds the same way from those (listing
a prefix, a seekable read stream of ranged reads, putting and deleting a tree in an order
that readers going by one file never see a part). Faults are classified by the storage
layer (components/contracts/storage/__init__.py) around every call, so a backend raises
what its client raises.
"""
from __future__ import annotations

import abc
import io
import os
from dataclasses import dataclass
from typing import BinaryIO, List, Optional, Tuple

from components.contracts.storage import retry


class Conflict(Exception):
    """The object changed (or appeared) between this read and this conditional write."""


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()  # the token of an object that does not exist: a write with it is create-only
ANY = None  # no precondition


@dataclass(frozen=True)
class Entry:
    """One file or object: its full URI, size in bytes and a stamp that changes when its
    content does (mtime locally, the generation on GCS, the ETag on S3)."""
    uri: str
    size: int
    stamp: str


class Backend(abc.ABC):
    """One kind of store. URIs are full (`gs://bucket/a/b`, `s3://...`, a local path)."""

    @abc.abstractmethod
    def stat(self, uri: str) -> Optional[Entry]:
        """The file or object, None when absent (a directory is not an object)."""

    @abc.abstractmethod
    def scan(self, uri_prefix: str) -> List[Entry]:
        """Every file or object whose URI starts with `uri_prefix` (not only at a `/`)."""

    def list(self, uri: str) -> List[Entry]:
        """Every file or object under the directory (prefix) `uri`, recursively."""
        return self.scan(uri.rstrip("/") + "/")

    @abc.abstractmethod
    def read_range(self, entry: Entry, start: int, end: int) -> bytes:
        """Bytes `start`..`end` (inclusive) of exactly the content `entry` names (its stamp)."""

    @abc.abstractmethod
    def open_read(self, entry: Entry) -> BinaryIO:
        """A seekable stream of the content `entry` names."""

    @abc.abstractmethod
    def read_versioned(self, uri: str) -> Tuple[Optional[bytes], object]:
        """(bytes or None, token): ABSENT when absent; Conflict if replaced while read."""

    @abc.abstractmethod
    def write(self, uri: str, data: bytes, if_match: object = ANY) -> None:
        """The whole object in one step; with `if_match` (a token, or ABSENT) only if the
        object is still at it, else Conflict."""

    @abc.abstractmethod
    def delete(self, uri: str) -> None:
        """One file or object; nothing when absent."""

    @abc.abstractmethod
    def upload_file(self, local_path: str, uri: str) -> None:
        """A local file to `uri`, readers seeing the old or the new content."""

    @abc.abstractmethod
    def download_file(self, uri: str, local_path: str) -> None:
        """`uri` into a local file (its directory exists)."""

    @abc.abstractmethod
    def put_tree(self, local_dir: str, target: str, last: str) -> None:
        """`local_dir` to the new directory `target`, appearing whole to a reader that goes
        by the file named `last` (a disk: staged and renamed; an object store: `last`
        uploaded after every other file)."""

    @abc.abstractmethod
    def delete_tree(self, uri: str, first: str) -> None:
        """Everything under `uri`, the file named `first` going before any other (a disk:
        the directory renamed away at once)."""


def local_files(local_dir: str, last: str = "") -> List[str]:
    """The files under `local_dir` (relative, `/`-separated), the one named `last` at the end."""
    files = [os.path.relpath(os.path.join(d, n), local_dir).replace(os.sep, "/")
             for d, _, names in os.walk(local_dir) for n in names]
    return sorted(files, key=lambda rel: (os.path.basename(rel) == last, rel))


class RangeReader(io.RawIOBase):
    """A seekable read-only view of one entry by its backend's ranged reads (Parquet seeks;
    a broken read resumes where it broke, each range retried on its own)."""

    def __init__(self, backend: Backend, entry: Entry):
        self.backend, self.entry, self.pos = backend, entry, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.entry.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        if self.pos >= self.entry.size or not len(buffer):
            return 0
        end = min(self.pos + len(buffer), self.entry.size) - 1
        data = self.backend.read_range(self.entry, self.pos, end)
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


class ObjectStore(Backend):
    """What every object store (no directories, no rename) builds the same way."""

    READ_CHUNK = 8 << 20  # a read stream's request size

    def open_read(self, entry: Entry) -> BinaryIO:
        return io.BufferedReader(RangeReader(self, entry), buffer_size=self.READ_CHUNK)

    @staticmethod
    def _join(prefix: str, rel: str) -> str:
        return prefix.rstrip("/") + "/" + rel

    def put_tree(self, local_dir: str, target: str, last: str) -> None:
        for rel in local_files(local_dir, last):
            with retry.operation(self._join(target, rel)):  # a failure names this file
                self.upload_file(os.path.join(local_dir, *rel.split("/")), self._join(target, rel))

    def delete_tree(self, uri: str, first: str) -> None:
        for entry in sorted(self.list(uri), key=lambda e: (e.uri.rsplit("/", 1)[-1] != first, e.uri)):
            with retry.operation(entry.uri):
                self.delete(entry.uri)
