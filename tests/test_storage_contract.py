"""The storage contract (components/contracts/storage/backend.py `Backend`): every backend
the scheme registry names implements it in full, and the same cases run against each one
through the storage layer's dispatch: a local directory, the GCS emulator
(tests/fixtures/gcs.py) and moto's S3 server (tests/fixtures/s3.py)."""
from __future__ import annotations

import importlib
import inspect

import pytest

from components.contracts import storage
from components.contracts.storage import schemes
from components.contracts.storage.backend import ABSENT, Backend, Conflict, Entry
from tests.fixtures.backends import base, upstreams  # noqa: F401  (the fixtures)


def _raw(uri: str) -> Backend:
    """The backend module's own object (the layer wraps it to classify faults)."""
    declared = schemes.of(uri)
    module = importlib.import_module(f"components.contracts.storage.{declared.backend if declared else 'local'}")
    return module.BACKEND


def test_every_declared_backend_implements_the_whole_contract():
    modules = {s.backend for s in schemes.SCHEMES if s.backend} | {"local"}
    assert modules == {"local", "gcs", "s3"}
    for name in sorted(modules):
        made = importlib.import_module(f"components.contracts.storage.{name}").BACKEND
        assert isinstance(made, Backend), name
        assert not getattr(type(made), "__abstractmethods__", ()), name  # nothing left abstract
        for method, declared in inspect.getmembers(Backend, inspect.isfunction):
            if not method.startswith("_"):
                assert list(inspect.signature(getattr(made, method)).parameters) == \
                    list(inspect.signature(declared).parameters)[1:], f"{name}.{method}"


def test_a_backend_missing_an_operation_cannot_be_made():
    class Partial(Backend):
        def stat(self, uri):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_write_stat_read_versioned_and_delete(base):
    b = storage.backend(base)
    uri = storage.join(base, "a", "small.txt")
    assert b.stat(uri) is None and b.read_versioned(uri) == (None, ABSENT)
    b.write(uri, b"hello")
    entry = b.stat(uri)
    assert isinstance(entry, Entry) and entry.uri == uri and entry.size == 5 and entry.stamp
    data, token = b.read_versioned(uri)
    assert data == b"hello"
    b.write(uri, b"again", if_match=token)
    with pytest.raises(Conflict):
        b.write(uri, b"stale", if_match=token)
    with pytest.raises(Conflict):
        b.write(uri, b"exists", if_match=ABSENT)
    assert b.read_versioned(uri)[0] == b"again" and b.stat(uri).stamp != entry.stamp
    b.delete(uri)
    b.delete(uri)
    assert b.stat(uri) is None


def test_scan_matches_a_name_prefix_and_list_a_directory(base):
    b = storage.backend(base)
    for rel in ("part-0.csv", "part-1.csv", "partial/x.csv", "other.csv"):
        b.write(storage.join(base, rel), rel.encode())
    scanned = sorted(storage.relative(e, base) for e in b.scan(storage.join(base, "part")))
    assert scanned == ["part-0.csv", "part-1.csv", "partial/x.csv"]
    assert sorted(storage.relative(e, base) for e in b.list(base)) == \
        ["other.csv", "part-0.csv", "part-1.csv", "partial/x.csv"]
    assert b.list(storage.join(base, "partial")) == [b.stat(storage.join(base, "partial", "x.csv"))]


def test_range_reads_and_a_seekable_stream_of_one_content(base):
    b = storage.backend(base)
    uri = storage.join(base, "blob.bin")
    data = bytes(range(256)) * 40
    b.write(uri, data)
    entry = b.stat(uri)
    assert b.read_range(entry, 10, 19) == data[10:20]
    assert b.read_range(entry, len(data) - 3, len(data) - 1) == data[-3:]
    stream = b.open_read(entry)
    stream.seek(5000)
    assert stream.read(100) == data[5000:5100]
    stream.seek(-10, 2)
    assert stream.read() == data[-10:]
    stream.close()
    b.write(uri, b"replaced since the listing")
    with pytest.raises(Conflict):  # a range of the named content, never a mix of two
        _raw(uri).read_range(entry, 0, 3)


def test_files_up_and_down(base, tmp_path):
    b = storage.backend(base)
    local = tmp_path / "up.txt"
    local.write_bytes(b"file body")
    uri = storage.join(base, "dir", "up.txt")
    b.upload_file(str(local), uri)
    (tmp_path / "down").mkdir()
    b.download_file(uri, str(tmp_path / "down" / "up.txt"))
    assert (tmp_path / "down" / "up.txt").read_bytes() == b"file body"


def test_put_tree_appears_whole_and_delete_tree_removes_it(base, tmp_path):
    b = storage.backend(base)
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    (model / "variables" / "variables.index").write_bytes(b"idx")
    target = storage.join(base, "models", "1")
    uploads = []
    raw = _raw(target)
    if hasattr(raw, "upload_file") and storage.is_remote(target):  # the order objects arrive in
        original = raw.upload_file

        def recording(local_path, uri):
            uploads.append(storage.basename(uri))
            original(local_path, uri)

        raw.upload_file = recording
    try:
        b.put_tree(str(model), target, "saved_model.pb")
    finally:
        raw.__dict__.pop("upload_file", None)
    if uploads:
        assert uploads[-1] == "saved_model.pb" and len(uploads) == 2
    assert sorted(storage.relative(e, target) for e in b.list(target)) == ["saved_model.pb",
                                                                          "variables/variables.index"]
    b.delete_tree(target, "saved_model.pb")
    assert b.list(target) == []
    b.delete_tree(target, "saved_model.pb")  # nothing there: nothing to do
