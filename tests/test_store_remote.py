"""The serving store on object stores that honour write preconditions: the GCS emulator
(tests/fixtures/gcs.py: generations) and moto's S3 server (tests/fixtures/s3.py: ETags with
If-Match / If-None-Match). The GCS fixture itself refuses a stale generation with 412; two
pushes racing on the same serving base both land, on each store, with models.config and the
state record consistent."""
import threading

import pytest

from components.contracts import storage
from components.contracts.blessing import Blessing
from components.contracts.storage import Conflict
from components.push.logic import push_model
from components.push.settings import ServingSettings
from components.store import models_config, served, states
from components.store.base import ServingStore
from tests.fixtures.gcs import gcs_emulator
from tests.fixtures.s3 import s3_server

pytestmark = pytest.mark.unit


@pytest.fixture(params=["gs", "s3", "s3-lock"])
def remote_bucket(request, monkeypatch):
    """(scheme, bucket) on the GCS emulator, the S3 server, and the S3 server with conditional
    writes off (the documented lock object instead)."""
    if request.param == "gs":
        with gcs_emulator(monkeypatch) as bucket:
            yield "gs", bucket
    else:
        with s3_server(monkeypatch) as bucket:
            if request.param == "s3-lock":
                monkeypatch.setenv("GPUPIPE_S3_CONDITIONAL_WRITES", "0")
                monkeypatch.setenv("GPUPIPE_S3_LOCK_SETTLE", "0.05")
            yield "s3", bucket


def test_the_storage_fixture_refuses_a_stale_generation_with_412(monkeypatch):
    import requests
    from google.api_core.exceptions import PreconditionFailed

    from components.contracts.storage.gcs import client as gcs_client

    with gcs_emulator(monkeypatch) as bucket_name:
        bucket = gcs_client().bucket(bucket_name)
        blob = bucket.blob("models.config")
        blob.upload_from_string("one", if_generation_match=0)
        first = bucket.get_blob("models.config").generation
        blob.upload_from_string("two", if_generation_match=first)  # the generation we read: accepted
        second = bucket.get_blob("models.config").generation
        assert second != first
        with pytest.raises(PreconditionFailed):
            bucket.blob("models.config").upload_from_string("stale", if_generation_match=first)
        with pytest.raises(PreconditionFailed):
            bucket.blob("models.config").upload_from_string("create", if_generation_match=0)
        with pytest.raises(PreconditionFailed):
            bucket.blob("models.config").download_as_text(if_generation_match=first)
        assert bucket.blob("models.config").download_as_text() == "two"
        # On the wire: the status and reason GCS answers with.
        host = gcs_client()._connection.API_BASE_URL
        answer = requests.post(f"{host}/upload/storage/v1/b/{bucket_name}/o",
                               params={"uploadType": "media", "name": "models.config", "ifGenerationMatch": first},
                               data=b"stale", timeout=10)
        assert answer.status_code == 412 and answer.json()["error"]["errors"][0]["reason"] == "conditionNotMet"


def test_two_pushes_racing_on_an_object_store_both_land_and_models_config_stays_consistent(
        monkeypatch, model_dir, remote_bucket):
    scheme, bucket = remote_bucket
    if True:
        base = f"{scheme}://{bucket}/serving"
        push_model(ServingSettings(base=base, model_name="m"), model_dir,
                   Blessing(True, "accuracy", 1.0, 0.0, ["ok"]), run_id="run-0")  # version 1, stable
        start, both_read = threading.Barrier(2), threading.Barrier(2)
        results, errors, conflicts, waited = {}, [], [], set()
        write = ServingStore._write_small

        def write_in_step(self, location, text, generation):
            # Each push's first write of the state record waits until the other has read
            # it too, so both write over the same generation and one must be refused.
            me = threading.current_thread().name
            if location.endswith("/versions.json") and me.startswith("push-") and me not in waited:
                waited.add(me)
                both_read.wait(timeout=10)
            try:
                return write(self, location, text, generation)
            except Conflict:
                conflicts.append(location)
                raise

        monkeypatch.setattr(ServingStore, "_write_small", write_in_step)

        def push(run_id):
            try:
                start.wait()
                results[run_id] = push_model(ServingSettings(base=base, model_name="m", keep_versions=5), model_dir,
                                             Blessing(True, "accuracy", 1.0, 0.0, ["ok"]),
                                             run_id=run_id)
            except Exception as err:  # noqa: BLE001 (reported below)
                errors.append(err)

        threads = [threading.Thread(target=push, args=(f"run-{i}",), name=f"push-{i}") for i in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert any(c.endswith("/versions.json") for c in conflicts)  # a write over a stale generation was refused
        store = ServingStore(base, "m")
        assert sorted(r.version for r in results.values()) == [2, 3]
        assert store.versions() == [1, 2, 3]
        record = served.read_record(store)
        assert {v: e["state"] for v, e in record["versions"].items()} == {"1": "retired", "2": "retired",
                                                                          "3": "stable"}
        assert {v: e["lineage"]["run_id"] for v, e in record["versions"].items()} == {
            "1": "run-0", str(results["run-1"].version): "run-1", str(results["run-2"].version): "run-2"}
        config = models_config.parse(store.read_models_config())  # parses
        (entry,) = config.model_config_list.config
        assert entry.base_path == f"{scheme}://{bucket}/serving/m"
        assert not [e.uri for e in storage.list_prefix(base) if e.uri.endswith(".lock")]  # no lock left behind
        assert dict(entry.version_labels) == {"stable": 3} == states.labels(record)
        # The newer version is stable whichever push ended last; the older one passed and retired.
        assert record["previous_stable"] in (1, 2)
        # loaded: the stable version and the previous stable one (a rollback's target)
        assert list(entry.model_version_policy.specific.versions) == sorted({3, record["previous_stable"]})


def test_the_kserve_manifest_points_at_a_prefix_holding_the_released_version_alone(monkeypatch, model_dir, capsys,
                                                                                   tmp_path):
    from pathlib import Path

    import yaml

    from pipelines.cli import main

    raw = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "penguins.yaml").read_text())
    raw["serving"]["canary_percent"] = 10
    (tmp_path / "penguins.yaml").write_text(yaml.safe_dump(raw))
    CONFIG = str(tmp_path / "penguins.yaml")
    with gcs_emulator(monkeypatch) as bucket:
        base = f"gs://{bucket}/serving"
        for _ in range(2):
            push_model(ServingSettings(base=base, model_name="penguins"), model_dir,
                       Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))
        push_model(ServingSettings(base=base, model_name="penguins", canary_percent=10), model_dir,
                   Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))  # 3: the canary
        assert main(["manifest", "kserve", CONFIG, "--serving-base", base]) == 0
        *_, service = yaml.safe_load_all(capsys.readouterr().out)  # a ServiceAccount first for a private base
        predictor = service["spec"]["predictor"]
        assert predictor["model"]["storageUri"] == f"{base}/penguins/releases/3"
        assert predictor["canaryTrafficPercent"] == 10  # the config's canary_percent: 10
        # What KServe's storage initializer downloads: version 3 alone (it serves the highest it finds)
        names = {e.uri.split("/", 3)[3] for e in storage.list_prefix(f"{base}/penguins/releases/3")}
        assert names and {n.split("/")[4] for n in names} == {"3"}
        assert "serving/penguins/releases/3/3/saved_model.pb" in names
        assert main(["promote", CONFIG, "--serving-base", base]) == 0
        capsys.readouterr()
        assert main(["manifest", "kserve", CONFIG, "--serving-base", base]) == 0
        *_, service = yaml.safe_load_all(capsys.readouterr().out)  # a ServiceAccount first for a private base
        predictor = service["spec"]["predictor"]
        assert predictor["model"]["storageUri"] == f"{base}/penguins/releases/3"
        assert "canaryTrafficPercent" not in predictor  # promoted: all the traffic
