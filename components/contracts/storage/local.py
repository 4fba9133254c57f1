"""The local disk as a storage backend. A write is a temporary file renamed over the target
(readers see the old or the new bytes); a conditional write compares the token (inode,
mtime, size) and renames under an exclusive `flock` of `<dir>/.gpupipe.lock`, so two
processes on one machine (or one NFS volume with working locks) never both win."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import uuid
from typing import BinaryIO, List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.storage.backend import ABSENT, ANY, Backend, Conflict, Entry
from components.contracts.storage.retry import PERMISSION_DENIED, StorageError

LOCK_FILE = ".gpupipe.lock"


def _token(st: os.stat_result) -> Tuple[int, int, int]:
    return st.st_ino, st.st_mtime_ns, st.st_size


@contextlib.contextmanager
def _locked(directory: str):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, LOCK_FILE), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class LocalBackend(Backend):
    def stat(self, uri: str) -> Optional[Entry]:
        try:
            st = os.stat(uri)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Entry(uri, st.st_size, str(st.st_mtime_ns)) if os.path.isfile(uri) else None

    def list(self, uri: str) -> List[Entry]:
        found = []
        for d, _, names in os.walk(uri):
            for n in names:
                if n != LOCK_FILE:
                    found.append(self.stat(os.path.join(d, n)))
        return [e for e in found if e is not None]

    def scan(self, uri_prefix: str) -> List[Entry]:
        """The files whose path starts with the prefix: those under its directory whose
        path (below it) begins with the rest."""
        head = uri_prefix if uri_prefix.endswith(os.sep) else os.path.dirname(uri_prefix)
        return [e for e in self.list(head or ".") if e.uri.startswith(uri_prefix)]

    def read_range(self, entry: Entry, start: int, end: int) -> bytes:
        with open(entry.uri, "rb") as f:
            if str(os.fstat(f.fileno()).st_mtime_ns) != entry.stamp:
                raise Conflict(entry.uri)
            f.seek(start)
            return f.read(end - start + 1)

    def open_read(self, entry: Entry) -> BinaryIO:
        return open(entry.uri, "rb")

    def read_versioned(self, uri: str):
        try:
            with open(uri, "rb") as f:
                token = _token(os.fstat(f.fileno()))
                return f.read(), token
        except (FileNotFoundError, NotADirectoryError):
            return None, ABSENT

    def _replace(self, uri: str, data: bytes) -> None:
        """`uri` holds the old bytes or the new ones, never part of them (no temporary left behind)."""
        tmp = os.path.join(os.path.dirname(uri), f".{os.path.basename(uri)}.tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, uri)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def write(self, uri: str, data: bytes, if_match: object = ANY) -> None:
        directory = os.path.dirname(os.path.abspath(uri))
        os.makedirs(directory, exist_ok=True)
        if if_match is ANY:
            self._replace(uri, data)
            return
        if if_match is ABSENT:  # whole content first, then a hard link that fails if the name is taken
            tmp = os.path.join(directory, f".{os.path.basename(uri)}.tmp-{uuid.uuid4().hex}")
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, uri)
            except FileExistsError:
                raise Conflict(uri) from None
            finally:
                os.remove(tmp)
            return
        with _locked(directory):
            try:
                current = _token(os.stat(uri))
            except FileNotFoundError:
                current = ABSENT
            if current != if_match:
                raise Conflict(uri)
            self._replace(uri, data)

    def delete(self, uri: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(uri)

    def upload_file(self, local_path: str, uri: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(uri)), exist_ok=True)
        tmp = os.path.join(os.path.dirname(os.path.abspath(uri)), f".{os.path.basename(uri)}.tmp-{uuid.uuid4().hex}")
        shutil.copyfile(local_path, tmp)
        os.replace(tmp, uri)

    def download_file(self, uri: str, local_path: str) -> None:
        shutil.copyfile(uri, local_path)

    def put_tree(self, local_dir: str, target: str, last: str = "") -> None:
        parent = os.path.dirname(os.path.abspath(target))
        os.makedirs(parent, exist_ok=True)
        staging = os.path.join(parent, f".staging-{uuid.uuid4().hex}")
        shutil.copytree(local_dir, staging)
        try:
            os.rename(staging, target)  # atomic; fails if the directory is there already
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise GpupipeError(f"{target} already exists; something else writes there, remove it") from None
            raise
        finally:
            if os.path.exists(staging):
                shutil.rmtree(staging, ignore_errors=True)

    def delete_tree(self, uri: str, first: str = "") -> None:
        if not os.path.exists(uri):
            return
        trash = os.path.join(os.path.dirname(os.path.abspath(uri)), f".deleting-{uuid.uuid4().hex}")
        os.rename(uri, trash)  # atomic: the directory disappears whole
        shutil.rmtree(trash, ignore_errors=True)


BACKEND = LocalBackend()


def classify(err: BaseException, uri: str) -> Optional[StorageError]:
    """A path this user may not read or write is one line; other OS errors stay as they are."""
    if isinstance(err, PermissionError):
        where = err.filename or uri
        return StorageError(PERMISSION_DENIED, uri, (
            f"{uri}: permission denied on {where}; give this user access to it (chmod/chown), or use another path"))
    return None
