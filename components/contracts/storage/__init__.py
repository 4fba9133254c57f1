"""gpupipe's one storage layer: local paths, `gs://` and `s3://` (also `minio://`, KFP's own
name for its S3-compatible artifact store) behind the same functions, so no step branches
on a scheme. Everything gpupipe reads or writes outside KFP's artifact passing goes
through here: data sources, statistics baselines, the trainer's backups, the serving base
(versions, models.config, the state record) and the fingerprint.

Backends (docs/architecture.md, "Storage", says why the SDKs and not fsspec): the local
disk (`local.py`), google-cloud-storage (`gcs.py`) and boto3 (`s3.py`). Each implements
the one contract, `backend.Backend`, in full; what every object store builds the same way
is written once there (`backend.ObjectStore`), and what is built from the contract
(mirroring a directory, copying a model in whole) here. The schemes, their backends and
their credentials' config keys are declared once, in `schemes.py`.

Conditional writes: `read_versioned` returns the bytes and a token (GCS: the generation;
S3: the ETag; local: inode and mtime), and `write_bytes(..., if_match=token)` writes only
if the object is still at that token (`ABSENT`: only if it does not exist), else raises
`Conflict`. That is all the store needs for whole-or-nothing version numbers and
read-change-write of models.config and the state record.

Faults (docs/storage.md): every backend call goes through `_Classified`, which turns what
the client raises into a `StorageError`, one line naming the URI, what happened
(credentials missing or refused, permission denied, bucket or object not found, endpoint
unreachable, throttled) and the fix; transient faults are first retried by the clients'
own machinery, bounded by `storage.retry` (retry.py).
"""
from __future__ import annotations

import fnmatch
import functools
import glob as _glob
import io
import os
import re
from typing import BinaryIO, List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.storage import retry, schemes
from components.contracts.storage.backend import ABSENT, ANY, Backend, Conflict, Entry, local_files  # noqa: F401
from components.contracts.storage.retry import StorageError, retries  # noqa: F401 (the layer's API)

REMOTE_SCHEMES = schemes.REMOTE
GLOB_CHARS = re.compile(r"[*?\[]")


def is_remote(uri: str) -> bool:
    """An object store every pod can reach, as opposed to this machine's disk."""
    return uri.startswith(REMOTE_SCHEMES)


def scheme(uri: str) -> str:
    return uri.split("://", 1)[0] + "://" if is_remote(uri) else ""


def _classified(uri: str, classify, call, *args, **kwargs):
    """`call(*args, **kwargs)` as one storage operation on `uri` (its retries counted
    together): what the client raises becomes `classify(err, uri)`'s StorageError (its
    cause kept for a task's log), or is raised as it is when that is None; Conflict and
    GpupipeError pass through."""
    with retry.operation(uri):
        try:
            return call(*args, **kwargs)
        except (Conflict, GpupipeError):
            raise
        except Exception as err:
            classified = classify(err, getattr(err, "storage_uri", uri))
            if classified is None:
                raise
            raise classified from err


class _ClassifiedStream(io.RawIOBase):
    """A backend's read stream whose faults (a read that fails after its retries) are
    StorageErrors too."""

    def __init__(self, raw, uri: str, classify):
        self._raw, self._uri, self._classify = raw, uri, classify

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._raw.seekable()

    def readinto(self, buffer) -> int:
        data = _classified(self._uri, self._classify, self._raw.read, len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        return _classified(self._uri, self._classify, self._raw.read, size)

    def readline(self, size: int = -1) -> bytes:
        return _classified(self._uri, self._classify, self._raw.readline, size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return _classified(self._uri, self._classify, self._raw.seek, offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _Classified:
    """A backend whose every operation is `_classified` (`classify(err, uri)`: a
    StorageError, or None for what is not a storage fault); `open_read`'s stream too."""

    _URI_SECOND = ("upload_file", "put_tree")  # (local path, uri)

    def __init__(self, backend, classify):
        self._backend, self._classify = backend, classify

    def __getattr__(self, name: str):
        attr = getattr(self._backend, name)  # AttributeError: the backend lacks it (hasattr works)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args, **kwargs):
            target = args[1] if name in self._URI_SECOND else (args[0] if args else "")
            uri = target.uri if isinstance(target, Entry) else str(target)
            result = _classified(uri, self._classify, attr, *args, **kwargs)
            return _ClassifiedStream(result, uri, self._classify) if name == "open_read" else result

        return call


@functools.lru_cache(maxsize=None)
def _backend(module_name: str):
    import importlib

    module = importlib.import_module(f"components.contracts.storage.{module_name}")  # only the SDK a URI needs
    return _Classified(module.BACKEND, module.classify)


def backend(uri: str):
    """The backend for `uri`'s scheme (local for a path), its faults classified."""
    declared = schemes.of(uri)
    return _backend(declared.backend if declared is not None and declared.backend else "local")


def split(uri: str) -> Tuple[str, str]:
    """`scheme://bucket/a/b` -> ("bucket", "a/b")."""
    bucket, _, name = uri.split("://", 1)[1].partition("/")
    if not bucket:
        raise GpupipeError(f"{uri}: not a {scheme(uri)}bucket/path URI; add the bucket name")
    return bucket, name


def join(base: str, *parts: str) -> str:
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])
    return os.path.join(base, *parts)


def parent(uri: str) -> str:
    if is_remote(uri):
        return uri.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(uri))


def basename(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] if is_remote(uri) else os.path.basename(uri)


# -- objects ------------------------------------------------------------------------------
def stat(uri: str) -> Optional[Entry]:
    """The file or object `uri`, None when absent."""
    return backend(uri).stat(uri)


def exists(uri: str) -> bool:
    return stat(uri) is not None


def list_prefix(uri: str) -> List[Entry]:
    """Every file or object under the directory (prefix) `uri`, recursively, sorted by URI."""
    return sorted(backend(uri).list(uri), key=lambda e: e.uri)


def glob(pattern: str) -> List[Entry]:
    """The files or objects a glob matches (`*` also crosses `/` on object stores), sorted."""
    if not is_remote(pattern):
        return [e for e in (stat(p) for p in sorted(_glob.glob(pattern))) if e is not None]
    literal = GLOB_CHARS.split(pattern, 1)[0]
    return sorted((e for e in backend(pattern).scan(literal) if fnmatch.fnmatchcase(e.uri, pattern)),
                  key=lambda e: e.uri)


def relative(entry: Entry, prefix: str) -> str:
    """`entry`'s path below `prefix`, with `/` separators."""
    rel = entry.uri[len(prefix.rstrip("/" if is_remote(prefix) else os.sep)) + 1:]
    return rel.replace(os.sep, "/")


def open_for_reading(uri: str, what: str) -> BinaryIO:
    """A stream of the file or object; a missing one is a GpupipeError naming `what` (the
    config key) and the path."""
    entry = stat(uri)
    if entry is None:
        if is_remote(uri):
            raise GpupipeError(f"{what}: {uri} does not exist; check the bucket and object name")
        raise GpupipeError(f"{what}: file not found: {uri}; fix the path (relative paths start at the working "
                           "directory)")
    return io.BufferedReader(backend(uri).open_read(entry), buffer_size=1 << 20)


def read_bytes(uri: str) -> Optional[bytes]:
    """The whole (small) object, None when absent."""
    return read_versioned(uri)[0]


def read_text(uri: str) -> Optional[str]:
    data = read_bytes(uri)
    return None if data is None else data.decode("utf-8")


def read_versioned(uri: str) -> Tuple[Optional[bytes], object]:
    """(bytes or None, token): the token names exactly the content read (ABSENT when
    absent); `write_bytes(uri, ..., if_match=token)` succeeds only if nothing changed since.
    Raises Conflict if the object was replaced while being read."""
    return backend(uri).read_versioned(uri)


def write_bytes(uri: str, data: bytes, if_match: object = ANY) -> None:
    """Writes the whole object in one step (readers see the old or the new bytes, never a
    part). With `if_match` (a token from read_versioned, or ABSENT): only if the object is
    still at that token, else Conflict."""
    backend(uri).write(uri, data, if_match)


def write_text(uri: str, text: str, if_match: object = ANY) -> None:
    write_bytes(uri, text.encode("utf-8"), if_match)


def create(uri: str, data: bytes = b"") -> bool:
    """Creates the object only if it does not exist; False when it already does."""
    try:
        write_bytes(uri, data, ABSENT)
        return True
    except Conflict:
        return False


def delete(uri: str) -> None:
    """Deletes one file or object (nothing when absent)."""
    backend(uri).delete(uri)


def upload_file(local_path: str, uri: str) -> None:
    backend(uri).upload_file(local_path, uri)


def download_file(uri: str, local_path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
    backend(uri).download_file(uri, local_path)


# -- directories --------------------------------------------------------------------------
def download_prefix(uri: str, into: str) -> int:
    """Every object under the prefix `uri`, into the local directory `into` (same relative
    paths). Returns how many."""
    entries = list_prefix(uri)
    for entry in entries:
        download_file(entry.uri, os.path.join(into, *relative(entry, uri).split("/")))
    return len(entries)


def upload_tree(local_dir: str, uri: str, last: str = "") -> None:
    """Makes the prefix `uri` hold exactly the files of `local_dir`: uploads every file (the
    one named `last` after all others, so a reader that goes by it never sees it before what
    it names), then deletes the objects that are no longer there."""
    before = list_prefix(uri)
    files = local_files(local_dir, last)
    for rel in files:
        upload_file(os.path.join(local_dir, *rel.split("/")), join(uri, rel))
    kept = {join(uri, rel) for rel in files}
    for entry in before:
        if entry.uri not in kept:
            delete(entry.uri)


def put_tree(local_dir: str, target: str, last: str) -> None:
    """Copies `local_dir` to the new directory `target` so that it appears whole: on a disk
    it is staged beside and renamed; on an object store every file is uploaded before the
    one named `last` (a reader that goes by `last`, as TF Serving goes by saved_model.pb,
    never sees a part)."""
    backend(target).put_tree(local_dir, target, last)


def delete_prefix(uri: str, first: str = "") -> None:
    """Deletes everything under `uri`: the file named `first` before the others (so it stops
    counting at once); on a disk the directory is renamed away first, so it goes whole."""
    backend(uri).delete_tree(uri, first)


def makedirs(uri: str) -> None:
    """A directory for files to come (object stores have none: nothing to do)."""
    if not is_remote(uri):
        os.makedirs(uri, exist_ok=True)


def local_dir(uri: str, into: str) -> str:
    """A local directory holding what is under `uri`: `uri` itself on this disk, otherwise
    a copy downloaded into `into`."""
    if not is_remote(uri):
        return uri
    download_prefix(uri, into)
    return into
