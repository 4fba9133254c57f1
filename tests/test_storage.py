"""The storage layer (components/contracts/storage/): the same cases against the local disk,
the GCS emulator (tests/fixtures/gcs.py) and an S3 protocol server (tests/fixtures/s3.py,
moto's server mode)."""
from __future__ import annotations

import concurrent.futures
import json
import os

import pytest

from components.contracts import storage
from components.contracts.errors import GpupipeError
from tests.fixtures.backends import base, upstreams  # noqa: F401  (the fixtures)


def test_small_objects_round_trip_and_absent_ones_read_as_none(base):
    uri = storage.join(base, "a", "models.config")
    assert storage.read_bytes(uri) is None and not storage.exists(uri)
    storage.write_text(uri, "hello")
    assert storage.read_text(uri) == "hello"
    assert storage.stat(uri).size == 5 and storage.exists(uri)
    storage.write_text(uri, "bye")
    assert storage.read_text(uri) == "bye"
    storage.delete(uri)
    storage.delete(uri)  # deleting what is gone is not an error
    assert storage.read_bytes(uri) is None


def test_conditional_writes_fail_on_a_changed_or_present_object(base):
    uri = storage.join(base, "record.json")
    assert storage.create(uri, b"1") is True
    assert storage.create(uri, b"2") is False  # create-only: the first claim wins
    data, token = storage.read_versioned(uri)
    assert data == b"1"
    storage.write_bytes(uri, b"3", if_match=token)
    with pytest.raises(storage.Conflict):
        storage.write_bytes(uri, b"4", if_match=token)  # stale token: someone wrote since
    with pytest.raises(storage.Conflict):
        storage.write_bytes(uri, b"5", if_match=storage.ABSENT)
    assert storage.read_bytes(uri) == b"3"
    _, absent = storage.read_versioned(storage.join(base, "none"))
    assert absent is storage.ABSENT


def test_listing_globbing_and_relative_names(base):
    for rel in ("x/part-0.csv", "x/part-1.csv", "x/sub/deep.txt", "y/other.csv"):
        storage.write_text(storage.join(base, *rel.split("/")), rel)
    under_x = storage.list_prefix(storage.join(base, "x"))
    assert [storage.relative(e, storage.join(base, "x")) for e in under_x] == ["part-0.csv", "part-1.csv",
                                                                                "sub/deep.txt"]
    assert all(e.stamp for e in under_x) and {e.size for e in under_x} == {len("x/part-0.csv"), len("x/sub/deep.txt")}
    matched = storage.glob(storage.join(base, "x", "part-*.csv"))
    assert [storage.basename(e.uri) for e in matched] == ["part-0.csv", "part-1.csv"]
    assert storage.list_prefix(storage.join(base, "nothing")) == []


def test_trees_upload_mirror_download_and_delete(base, tmp_path):
    src = tmp_path / "model"
    (src / "variables").mkdir(parents=True)
    (src / "saved_model.pb").write_bytes(b"pb")
    (src / "variables" / "variables.index").write_bytes(b"idx")
    target = storage.join(base, "m", "1")
    storage.put_tree(str(src), target, last="saved_model.pb")
    names = sorted(storage.relative(e, target) for e in storage.list_prefix(target))
    assert names == ["saved_model.pb", "variables/variables.index"]

    back = tmp_path / "back"
    assert storage.download_prefix(target, str(back)) == 2
    assert (back / "variables" / "variables.index").read_bytes() == b"idx"

    mirror = storage.join(base, "backup")
    storage.upload_tree(str(src), mirror, last="saved_model.pb")
    (src / "variables" / "variables.index").unlink()
    (src / "checkpoint").write_text("new")
    storage.upload_tree(str(src), mirror)  # a mirror: the gone file goes, the new one comes
    assert sorted(storage.relative(e, mirror) for e in storage.list_prefix(mirror)) == ["checkpoint", "saved_model.pb"]

    storage.delete_prefix(target, first="saved_model.pb")
    assert storage.list_prefix(target) == []


def test_reading_streams_and_seeks_and_a_missing_object_names_the_key(base):
    uri = storage.join(base, "data.bin")
    payload = bytes(range(256)) * 64
    storage.write_bytes(uri, payload)
    with storage.open_for_reading(uri, "data.source") as f:
        assert f.read(10) == payload[:10]
        f.seek(len(payload) - 4)
        assert f.read() == payload[-4:]
    with pytest.raises(GpupipeError, match=r"^data\.source: .*missing\.csv"):
        storage.open_for_reading(storage.join(base, "missing.csv"), "data.source")


def _increment(uri: str) -> int:
    """Read-change-write with the token, retried on Conflict, as the store does."""
    for attempts in range(1, 200):
        try:  # a read can also conflict: the object was replaced between its metadata and its bytes
            data, token = storage.read_versioned(uri)
            count = json.loads(data)["n"] if data else 0
            storage.write_bytes(uri, json.dumps({"n": count + 1}).encode(), if_match=token)
            return attempts
        except storage.Conflict:
            continue
    raise AssertionError("never won")


def test_concurrent_read_change_writes_lose_no_update(base):
    uri = storage.join(base, "counter.json")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        attempts = list(pool.map(lambda _: _increment(uri), range(24)))
    assert json.loads(storage.read_bytes(uri))["n"] == 24
    assert max(attempts) >= 1


def test_s3_without_conditional_writes_uses_the_lock_object(monkeypatch, upstreams):
    """A server without If-Match (older Ceph, some appliances): GPUPIPE_S3_CONDITIONAL_WRITES=0
    runs each conditional write under `<key>.lock`; no update is lost and no lock is left."""
    bucket, _ = upstreams.bucket("s3", monkeypatch)
    monkeypatch.setenv("GPUPIPE_S3_CONDITIONAL_WRITES", "0")
    monkeypatch.setenv("GPUPIPE_S3_LOCK_SETTLE", "0.05")
    uri = f"s3://{bucket}/base/counter.json"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: _increment(uri), range(8)))
    assert json.loads(storage.read_bytes(uri))["n"] == 8
    assert not storage.exists(uri + ".lock")
    # a writer killed while holding the lock: after its expiry the next one takes it over
    monkeypatch.setenv("GPUPIPE_S3_LOCK_SECONDS", "1")
    storage.write_text(uri + ".lock", json.dumps({"owner": "killed", "expires": 0}))
    _increment(uri)
    assert json.loads(storage.read_bytes(uri))["n"] == 9


def test_local_conditional_writes_hold_across_processes(tmp_path):
    """Two processes (not threads): the flock-guarded compare-and-rename loses nothing."""
    uri = str(tmp_path / "counter.json")
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        list(pool.map(_increment, [uri] * 20))
    assert json.loads(open(uri).read())["n"] == 20
    assert sorted(os.listdir(tmp_path)) == [".gpupipe.lock", "counter.json"]


def test_bucketless_uris_are_a_one_line_error():
    with pytest.raises(GpupipeError, match=r"s3://: not a s3://bucket/path URI"):
        storage.split("s3://")


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_missing_bucket_is_one_line_naming_it(kind, monkeypatch, upstreams):
    scheme = "gs" if kind == "gcs" else "s3"
    upstreams.bucket(kind, monkeypatch)  # the client pointed at a server that has buckets, none of that name
    for call in (storage.list_prefix, lambda uri: storage.write_text(uri, "x")):
        with pytest.raises(storage.StorageError) as err:
            call(f"{scheme}://no-such-bucket/serving/models.config")
        assert err.value.kind == "not found" and "\n" not in str(err.value)
        assert str(err.value).startswith(f"{scheme}://no-such-bucket/serving/models.config: bucket no-such-bucket "
                                         "does not exist"), str(err.value)
        assert str(err.value).endswith("or create the bucket")


def test_the_configs_retry_bounds_reach_the_clients(monkeypatch):
    """storage.retry renders the environment every task gets (nothing when unset, so the
    compiled pipelines of configs without it do not change); the clients take it."""
    from components.contracts.settings import StorageSettings
    from components.contracts.storage import retry, s3

    assert StorageSettings().environment() == {}
    env = StorageSettings.model_validate({"retry": {"attempts": 2, "read_timeout_seconds": 5}}).environment()
    assert env == {retry.ATTEMPTS_ENV: "2", retry.DEADLINE_ENV: "120", retry.CONNECT_TIMEOUT_ENV: "10",
                   retry.READ_TIMEOUT_ENV: "5"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert retry.policy() == retry.Policy(2, 120.0, 10.0, 5.0)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    config = s3.client().meta.config
    assert config.retries == {"total_max_attempts": 2, "mode": "standard"} and config.read_timeout == 5.0
    with pytest.raises(Exception, match="attempts"):
        StorageSettings.model_validate({"retry": {"attempts": 0}})
    monkeypatch.setenv(retry.ATTEMPTS_ENV, "many")
    with pytest.raises(GpupipeError, match=r"^GPUPIPE_STORAGE_ATTEMPTS: 'many' is not a number; fix storage.retry"):
        retry.policy()

