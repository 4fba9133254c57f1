"""The storage layer under injected faults (tests/fixtures/faults.py: a loopback proxy in
front of the GCS emulator and moto's S3 server): transient faults are retried by the
clients' own machinery and counted in the log, the bytes come out the same; a fault no
retry mends (a 403 in the middle of a multi-file write, an endpoint that is down) ends
in one line, within a bounded time."""
from __future__ import annotations

import contextlib
import logging
import time

import pytest

from components.contracts import storage
from components.contracts.storage import retry
from tests.fixtures.backends import upstreams  # noqa: F401  (the fixture)
from tests.fixtures.faults import Blackhole, FaultProxy
from tests.fixtures.gcs import free_port

pytestmark = pytest.mark.unit
FAST = {retry.ATTEMPTS_ENV: "6", retry.CONNECT_TIMEOUT_ENV: "2", retry.READ_TIMEOUT_ENV: "1.5"}


@pytest.fixture(autouse=True)
def short_backoff(monkeypatch):
    """GCS retries (and s3.py's own re-fetch of a broken body) wait 0.05 s doubling instead of
    0.5 s (our bound, read per call); botocore's standard mode waits rand(0, 1) x 0.05 s
    doubling after a throttling answer (its 503 SlowDown, 429) as it already does after any
    other fault, instead of x 1 s (its base scale, which storage.retry has no key for). What
    is tried again, and how often, stays the same."""
    from botocore.retries.standard import ExponentialBackoff

    monkeypatch.setattr(retry, "INITIAL_BACKOFF", 0.05)
    monkeypatch.setitem(ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, "throttling_base_scale", 0.05)


@pytest.fixture
def store_behind_proxy(upstreams, monkeypatch):
    """store_behind_proxy(kind, **proxy_args): a context of (bucket URI, proxy): a fresh bucket
    on the real server of `kind`, the client pointed at a FaultProxy in front of it."""
    @contextlib.contextmanager
    def behind_proxy(kind: str, **proxy_args):
        for name, value in FAST.items():
            monkeypatch.setenv(name, value)
        bucket, upstream = upstreams.bucket(kind, monkeypatch)
        with FaultProxy(upstream, kind, **proxy_args) as proxy:
            monkeypatch.setenv("STORAGE_EMULATOR_HOST" if kind == "gcs" else "AWS_ENDPOINT_URL_S3", proxy.url)
            yield f"{'gs' if kind == 'gcs' else 's3'}://{bucket}", proxy

    return behind_proxy


def a_tree(root, files: int = 24, seed: int = 0) -> dict:
    """`files` files of 1 byte to 600 kB (a model's variables, shards of a table)."""
    import random

    rng = random.Random(seed)
    made = {}
    for i in range(files):
        rel = f"part-{i:02d}.bin" if i % 3 else f"variables/v-{i:02d}.data"
        size = rng.choice([1, 700, 50_000, 600_000])
        data = rng.randbytes(size)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        made[rel] = data
    (root / "saved_model.pb").write_bytes(b"the model, last")
    made["saved_model.pb"] = b"the model, last"
    return made


def read_back(uri: str, into) -> dict:
    storage.download_prefix(uri, str(into))
    return {str(p.relative_to(into)): p.read_bytes() for p in sorted(into.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_at_a_ten_percent_fault_rate_a_tree_comes_back_byte_for_byte(kind, tmp_path, caplog, store_behind_proxy):
    made = a_tree(tmp_path / "model")
    caplog.set_level(logging.WARNING, logger="gpupipe.storage")
    with store_behind_proxy(kind, rate=0.10, seed=7) as (bucket, proxy):
        # the reference is the tree on disk itself (`made`), so no pass without faults first
        retry.reset_counts()
        caplog.clear()
        storage.put_tree(str(tmp_path / "model"), f"{bucket}/faulty/1", last="saved_model.pb")
        faulty = read_back(f"{bucket}/faulty/1", tmp_path / "faulty")
        with storage.open_for_reading(f"{bucket}/faulty/1/part-01.bin", "data.source") as f:
            streamed = f.read()
        small = storage.read_bytes(f"{bucket}/faulty/1/saved_model.pb")
        storage.write_bytes(f"{bucket}/faulty/record.json", b"{}", if_match=storage.ABSENT)
        summary = proxy.summary()
    assert faulty == made and streamed == made["part-01.bin"] and small == made["saved_model.pb"]
    failing = sum(n for k, n in proxy.injected.items() if k != "delay")
    logged = [r.getMessage() for r in caplog.records if r.name == "gpupipe.storage"]
    print(f"{kind}: {summary}; retries counted {retry.retries()}, logged {len(logged)}")
    assert failing >= 3, summary  # the rate did inject faults that fail a request
    assert retry.retries() == len(logged) >= 1
    assert all(" try " in line and line.startswith(f"storage: {bucket}") or "127.0.0.1" in line for line in logged)
    if kind == "gcs":  # every fault that failed a request was retried once by the client, and counted
        assert retry.retries() == failing, (summary, logged)
    else:  # s3transfer's downloads fetch a broken body again on their own, uncounted
        assert failing - proxy.injected["cut"] <= retry.retries() <= failing, (summary, logged)


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_403_in_the_middle_of_a_multi_file_write_is_one_line(kind, tmp_path, store_behind_proxy):
    a_tree(tmp_path / "model", files=10)
    with store_behind_proxy(kind) as (bucket, proxy):
        proxy.schedule("403", nth=5, sticky=True)  # the permission is withdrawn at the fifth upload
        target = f"{bucket}/models/1"
        with pytest.raises(storage.StorageError) as err:
            storage.put_tree(str(tmp_path / "model"), target, last="saved_model.pb")
        proxy.rate = 0.0
        proxy._scheduled.clear()
        left = [storage.relative(e, target) for e in storage.list_prefix(target)]
    message = str(err.value)
    assert err.value.kind == retry.PERMISSION_DENIED and "\n" not in message
    assert message.startswith(f"{target}/") and ": access denied (" in message or ": permission denied (" in message
    fix = "roles/storage.objectAdmin on bucket" if kind == "gcs" else "s3:PutObject, s3:DeleteObject and s3:ListBucket"
    assert fix in message, message
    assert len(left) == 4 and "saved_model.pb" not in left  # a reader that goes by saved_model.pb sees nothing


@pytest.mark.parametrize("kind", ["gcs", "s3"])
@pytest.mark.parametrize("how", ["refused", "hangs"])
def test_an_endpoint_that_is_down_is_one_line_within_a_bounded_time(kind, how, monkeypatch, tmp_path):
    monkeypatch.setenv(retry.ATTEMPTS_ENV, "3")
    monkeypatch.setenv(retry.CONNECT_TIMEOUT_ENV, "1")
    monkeypatch.setenv(retry.READ_TIMEOUT_ENV, "0.5")
    monkeypatch.setenv(retry.DEADLINE_ENV, "30")
    with contextlib.ExitStack() as stack:
        url = f"http://127.0.0.1:{free_port()}" if how == "refused" else stack.enter_context(Blackhole()).url
        if kind == "gcs":
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        else:
            from tests.fixtures.s3 import CREDENTIALS

            monkeypatch.setenv("AWS_ENDPOINT_URL_S3", url)
            for name, value in CREDENTIALS.items():
                monkeypatch.setenv(name, value)
        uri = f"{'gs' if kind == 'gcs' else 's3'}://gpupipe-test/serving/versions.json"
        started = time.monotonic()
        with pytest.raises(storage.StorageError) as err:
            storage.read_bytes(uri)
        seconds = time.monotonic() - started
    message = str(err.value)
    print(f"{kind} {how}: {seconds:.2f} s: {message}")
    assert err.value.kind == retry.UNREACHABLE and "\n" not in message
    assert message.startswith(f"{uri}: cannot reach {url} after 3 tries in "), message
    # a hung answer timed out: the keys that give it more time; a refused connection: more tries
    assert message.endswith("or raise storage.retry.attempts" if how == "refused" else
                            "or raise storage.retry.read_timeout_seconds and storage.retry.deadline_seconds"), message
    # 3 tries: at most 3 timeouts (a refused connect: at once; a hung answer: the read timeout, 0.5 s) and two
    # waits (short_backoff: GCS 0.05 s, 0.1 s with jitter; botocore up to 0.05 s, 0.1 s); the client's start included
    assert seconds < 8, seconds


@pytest.mark.parametrize("attempts", ["", "2"])
def test_gpupipe_versions_against_an_s3_endpoint_that_is_down_is_one_line(attempts, tmp_path):
    """The real command, in the scrubbed environment of tests/test_credentials.py, with keys
    and an endpoint where nothing listens: one line, exit 1, within the bound (the default
    5 tries: at most 1 + 2 + 4 + 8 s of botocore's backoff; 2 tries: at most 1 s)."""
    from tests.test_credentials import gpupipe, one_error_line, scrubbed_env, CONFIG
    from tests.fixtures.s3 import CREDENTIALS

    endpoint = f"http://127.0.0.1:{free_port()}"
    env = scrubbed_env(tmp_path / "home", AWS_ENDPOINT_URL_S3=endpoint, GPUPIPE_S3_ADDRESSING_STYLE="path",
                       **CREDENTIALS, **({retry.ATTEMPTS_ENV: attempts} if attempts else {}))
    started = time.monotonic()
    out = gpupipe(env, "versions", str(CONFIG), "--serving-base", "s3://gpupipe-models/serving")
    seconds = time.monotonic() - started
    line = one_error_line(out)
    tries = int(attempts or retry.DEFAULT_ATTEMPTS)
    print(f"{tries} tries: {seconds:.1f} s: {line}")
    assert line.startswith(f"error: s3://gpupipe-models/serving/penguins/") and \
        f": cannot reach {endpoint} after {tries} tries in " in line, line
    assert line.endswith("(no connection); check storage.s3.endpoint (AWS_ENDPOINT_URL_S3) and the network, or raise "
                         "storage.retry.attempts"), line
    assert seconds < (30 if tries == 5 else 12), seconds  # the process's own start-up included


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_create_only_write_whose_answer_is_lost_still_wins(kind, store_behind_proxy):
    """The claim reaches the server, its answer is lost, the client replays it and meets a
    412: its own first try (the write's id in the object's metadata), so the claim is ours;
    another writer's claim of the same bytes stays a Conflict."""
    with store_behind_proxy(kind) as (bucket, proxy):
        proxy.schedule("lose", nth=1)
        retry.reset_counts()
        claim = f"{bucket}/serving/m/claims/7"
        assert storage.create(claim, b"") is True
        assert proxy.injected["lose"] == 1 and retry.retries() == 1
        assert storage.create(claim, b"") is False  # a second writer with the same (empty) bytes: not its claim
        data, token = storage.read_versioned(f"{bucket}/serving/m/claims/7")
        proxy.schedule("lose", nth=1)  # the next conditional replace: landed, answer lost
        storage.write_bytes(claim, b"mine", if_match=token)
        assert storage.read_bytes(claim) == b"mine" and retry.retries() == 2


def _store_state(base: str, into) -> tuple:
    """What a push leaves that matters: whole versions and their files, states, labels."""
    from components.store import served, states
    from components.store.base import ServingStore

    import json

    store = ServingStore(base, "m")
    record = served.read_record(store)
    files = {v: read_back(store.version_path(v), into / str(v)) for v in store.versions()}
    for version in files.values():  # the push's time is not the same twice
        lineage = json.loads(version["assets.extra/gpupipe/model.json"])
        version["assets.extra/gpupipe/model.json"] = {k: v for k, v in lineage.items() if k != "pushed_at"}
    return (store.versions(), {v: e["state"] for v, e in record["versions"].items()}, states.labels(record),
            files, sorted(storage.relative(e, base) for e in storage.list_prefix(base)
                          if "/claims/" not in e.uri))


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_pushes_through_a_ten_percent_fault_rate_end_as_without_faults(kind, tmp_path, store_behind_proxy):
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings

    a_tree(tmp_path / "model", files=6)
    with store_behind_proxy(kind, rate=0.0, seed=3) as (bucket, proxy):
        for rate, name in ((0.0, "clean"), (0.10, "faulty")):
            proxy.rate = rate
            retry.reset_counts()
            for i in range(2):
                push_model(ServingSettings(base=f"{bucket}/{name}", model_name="m", keep_versions=1),
                           str(tmp_path / "model"),
                           Blessing(True, "accuracy", 1.0, 0.0, ["ok"]),
                           run_id=f"run-{i}")
            pushed_retries = retry.retries()
            proxy.rate = 0.0
            state = _store_state(f"{bucket}/{name}", tmp_path / name)
            if name == "clean":
                clean = state
                assert not proxy.injected
    print(f"{kind}: {proxy.summary()}; retries {pushed_retries}")
    assert state == clean
    assert clean[0] == [1, 2] and clean[2] == {"stable": 2}  # retention keeps the previous stable too
    assert sum(n for k, n in proxy.injected.items() if k != "delay") >= 3 and pushed_retries >= 3


def _push_with_a_403_in_the_middle(kind, tmp_path, store_behind_proxy):
    """Version 1 pushed; version 2's push meets one refused upload in the middle of its
    files. (the error, the store, version 2's objects left)"""
    from components.contracts.blessing import Blessing
    from components.contracts.errors import GpupipeError
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    from components.store.base import ServingStore

    a_tree(tmp_path / "model", files=10)
    with store_behind_proxy(kind) as (bucket, proxy):
        base = f"{bucket}/serving"
        push_model(ServingSettings(base=base, model_name="m"), str(tmp_path / "model"),
                   Blessing(True, "accuracy", 1.0, 0.0, ["ok"]), run_id="run-1")
        writes = sum(1 for m, _, _ in proxy.log if m in ("PUT", "POST"))
        proxy.schedule("403", nth=writes // 2)
        with pytest.raises(GpupipeError) as err:
            push_model(ServingSettings(base=base, model_name="m"), str(tmp_path / "model"),
                       Blessing(True, "accuracy", 1.0, 0.0, ["ok"]),
                       run_id="run-2")
        assert proxy.injected["403"] == 1
        store = ServingStore(base, "m")
        left = [e.uri for e in storage.list_prefix(f"{base}/m") if "/2/" in e.uri]
        from components.store import served

        record = served.read_record(store)
        versions = store.versions()
    return err.value, versions, record, left


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_403_in_the_middle_of_a_push_leaves_no_partial_version_and_says_access_was_denied(kind, tmp_path,
                                                                                             store_behind_proxy):
    """The push fails in one line that says access was denied, version 2 is recorded failed
    and its files are gone (release copy included); version 1 stays stable."""
    from components.store import states

    err, versions, record, left = _push_with_a_403_in_the_middle(kind, tmp_path, store_behind_proxy)
    assert "\n" not in str(err)
    assert isinstance(err, storage.StorageError) and err.kind == retry.PERMISSION_DENIED, str(err)
    assert versions == [1] and not left, left
    assert record["versions"]["2"]["state"] == "failed" and states.labels(record) == {"stable": 1}


def _examples(out) -> dict:
    """Each split's examples as sorted tuples of (feature, values): a tf.Example's features
    are a protobuf map, whose serialised order is not fixed."""
    import tensorflow as tf

    splits = {}
    for split in ("train", "eval"):
        files = sorted(str(p) for p in out.glob(f"{split}/*.tfrecord.gz"))
        rows = []
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
            example = tf.train.Example.FromString(record.numpy())
            rows.append(tuple(sorted((k, tuple(getattr(v, v.WhichOneof("kind")).value) if v.WhichOneof("kind") else ())
                                     for k, v in example.features.feature.items())))
        splits[split] = sorted(rows)
    return splits


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_ingest_through_a_ten_percent_fault_rate_writes_the_same_examples(kind, tmp_path, ingest, store_behind_proxy):
    """penguins as four CSV shards and a Parquet copy on the store: the ingest step reads
    them through the faults and writes the examples (row for row, value for value) it
    writes without faults, the same split and the same fingerprint."""
    import pyarrow.csv as pacsv

    from tests.test_bad_input import PENGUINS

    table = pacsv.read_csv(PENGUINS, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(12):
        pacsv.write_csv(table.slice(i * 29, 29), shards / f"part-{i:02d}.csv")
    args = ("species", ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"], ["island", "sex"])
    with store_behind_proxy(kind, seed=11) as (bucket, proxy):
        storage.upload_tree(str(shards), f"{bucket}/penguins")
        outputs = {}
        for rate in (0.0, 0.10):
            proxy.rate = rate
            retry.reset_counts()
            out = tmp_path / f"examples-{rate}"
            manifest = ingest(f"{bucket}/penguins", str(out), *args, shard_rows=100)
            outputs[rate] = (_examples(out), manifest["rows"], manifest["source_fingerprint"])
        print(f"{kind}: {proxy.summary()}; retries {retry.retries()}")
    assert outputs[0.10] == outputs[0.0] and sum(outputs[0.0][1].values()) == 344
    failing = sum(n for k, n in proxy.injected.items() if k != "delay")
    assert failing >= 2 and retry.retries() >= failing - proxy.injected["cut"]


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_backups_mirrored_through_a_ten_percent_fault_rate_restore_whole(kind, tmp_path, store_behind_proxy):
    """The trainer's backup is upload_tree(backup_dir, home, last=index) after each
    checkpoint (components/train/runtime.py), its restore download_prefix: three
    checkpoints, each replacing and dropping files, mirrored through the faults; the
    restore holds exactly the last checkpoint, as without faults."""
    import random
    import shutil

    rng = random.Random(5)
    with store_behind_proxy(kind, seed=5) as (bucket, proxy):
        restored = {}
        for rate in (0.0, 0.10):
            proxy.rate = rate
            retry.reset_counts()
            local = tmp_path / f"backup-{rate}"
            home = f"{bucket}/backup-{rate}"
            rng.seed(5)
            for step in range(3):
                shutil.rmtree(local, ignore_errors=True)
                local.mkdir()
                for i in range(step, step + 8):  # each checkpoint drops the oldest shard, adds one
                    (local / f"ckpt-{step}.data-{i:05d}").write_bytes(rng.randbytes(rng.choice([10, 40_000, 300_000])))
                (local / "checkpoint").write_text(f"model_checkpoint_path: ckpt-{step}")
                storage.upload_tree(str(local), home, last="checkpoint")
            proxy.rate = 0.0
            restored[rate] = read_back(home, tmp_path / f"restored-{rate}")
            assert restored[rate] == {p.name: p.read_bytes() for p in local.iterdir()}
        print(f"{kind}: {proxy.summary()}; retries {retry.retries()}")
    assert restored[0.10] == restored[0.0]
    failing = sum(n for k, n in proxy.injected.items() if k != "delay")
    assert failing >= 2 and retry.retries() >= failing - proxy.injected["cut"]


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_a_read_refused_in_the_middle_of_a_file_is_one_line_from_the_reader(kind, tmp_path, store_behind_proxy):
    """The data source's reader (Arrow reading through the storage layer's stream) meets a
    403 on its third range: the StorageError comes through Arrow, one line, the file named."""
    import pyarrow as pa

    from components.sources import readers

    big = tmp_path / "big.csv"
    big.write_text("a,b\n" + "".join(f"{i},x{i}\n" for i in range(400_000)))  # 6 MB: several ranges
    with store_behind_proxy(kind) as (bucket, proxy):
        storage.upload_file(str(big), f"{bucket}/data/big.csv")
        (source,) = readers.resolve(f"{bucket}/data/big.csv")
        proxy.schedule("403", nth=3, methods=("GET",), sticky=True)
        with pytest.raises(storage.StorageError) as err:
            sum(b.num_rows for b in readers.read_batches(source, {"a": pa.float32(), "b": pa.string()}))
    message = str(err.value)
    assert err.value.kind == retry.PERMISSION_DENIED and "\n" not in message
    assert message.startswith(f"{bucket}/data/big.csv: "), message
    if kind == "gcs":
        assert message == (f"{bucket}/data/big.csv: permission denied (gpupipe-test@example.iam.gserviceaccount.com "
                           "does not have storage.objects.get access to the Google Cloud Storage object.); grant the "
                           f"credentials' service account roles/storage.objectAdmin on bucket {storage.split(bucket)[0]} "
                           "(roles/storage.objectViewer where it only reads)")


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_credentials_the_server_refuses_are_one_line_naming_the_keys(kind, store_behind_proxy):
    with store_behind_proxy(kind) as (bucket, proxy):
        proxy.schedule("refused", nth=1, methods=("GET",), sticky=True)
        with pytest.raises(storage.StorageError) as err:
            storage.read_bytes(f"{bucket}/serving/m/versions.json")
    message = str(err.value)
    assert err.value.kind == retry.CREDENTIALS_REFUSED and "\n" not in message, message
    if kind == "gcs":  # the emulator's client is anonymous (a key file refused: tests/test_credentials.py)
        assert message.startswith(f"{bucket}/serving/m/versions.json: the Google credentials were refused ("), message
    else:
        assert message.startswith(f"{bucket}/serving/m/versions.json: {proxy.url} refused the S3 credentials "
                                  "(InvalidAccessKeyId: The AWS Access Key Id you provided does not exist in our "
                                  "records.); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), message


def test_a_steps_log_shows_each_retry(capfd, store_behind_proxy):
    """A step (an entry point under reports_errors) logs every retry on stderr, its task's
    run.log; the one-line contract of the CLI's terminal is held by the CLI tests above."""
    from components.contracts.errors import reports_errors

    with store_behind_proxy("s3") as (bucket, proxy):
        @reports_errors("push")
        def step():
            proxy.schedule("503", nth=1, methods=("PUT",))
            storage.write_text(f"{bucket}/serving/models.config", "x")
            return storage.read_text(f"{bucket}/serving/models.config")

        try:
            assert step() == "x"
        finally:  # this test process goes on to other tests: the handler a step's process keeps goes
            import logging as _logging

            from components.contracts.errors import _Stderr

            logger = _logging.getLogger("gpupipe.storage")
            for handler in [h for h in logger.handlers if isinstance(h, _Stderr)]:
                logger.removeHandler(handler)
    err = capfd.readouterr().err
    assert f"storage: {bucket}/serving/models.config: HTTP 503 SlowDown; try 2 of 6" in err.splitlines(), err
