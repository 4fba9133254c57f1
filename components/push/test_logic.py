"""Unit tests of push: whole versions, the blessing gate, retention, models.config labels,
rollback, gs:// through gcp-storage-emulator, the smoke test against a TF Serving fixture."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from components.contracts.blessing import Blessing, write_blessing
from components.contracts.errors import GpupipeError
from components.push.logic import eval_examples, model_digest, push_model, run_push
from components.push.settings import ServingSettings
from components.store import models_config, served, states
from components.store.base import ServingStore

pytestmark = pytest.mark.unit


def verdict(blessed: bool, reasons, metrics=None) -> Blessing:
    """Evaluate's verdict as push reads it."""
    return Blessing(blessed=blessed, metric="accuracy", value=1.0, threshold=0.0, reasons=list(reasons),
                    metrics=metrics or {})


BLESSED = verdict(True, ["ok"])


def serving(base, name: str = "m", **fields) -> ServingSettings:
    """The serving section these tests push with: the model `name` under `base`."""
    return ServingSettings(base=str(base), model_name=name, **fields)


def labels(base, name="m"):
    return models_config.labels(ServingStore(base, name).read_models_config(), name)


def leftovers(base, name="m"):
    """What the model's folder holds besides the state record (and its lock), the claims and the release copies."""
    return sorted(p for p in os.listdir(os.path.join(base, name)) if p not in ("versions.json", ".gpupipe.lock", ".claims", "releases"))


def test_versions_increase_and_are_whole(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    first = push_model(serving(base), model_dir, BLESSED)
    second = push_model(serving(base), model_dir, BLESSED)
    assert (first.version, second.version) == (1, 2)
    assert ServingStore(base, "m").versions() == [1, 2]
    assert os.path.isfile(os.path.join(base, "m", "2", "saved_model.pb"))
    assert os.path.isfile(os.path.join(base, "m", "2", "variables", "variables.index"))
    assert os.path.isfile(os.path.join(base, "m", "2", "assets.extra", "gpupipe", "metrics.json"))
    assert leftovers(base) == ["1", "2"]  # no staging left behind
    assert labels(base) == {"stable": 2}


def test_unblessed_model_is_not_pushed(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    result = push_model(serving(base), model_dir, verdict(False, ["accuracy 0.5000 is below threshold 0.9000"]))
    assert not result.pushed and result.version is None
    assert result.reason == "not blessed: accuracy 0.5000 is below threshold 0.9000"
    assert not os.path.exists(base)


def test_run_push_of_an_unblessed_model_records_not_pushed_and_why(tmp_path, model_dir):
    write_blessing(Blessing(False, "accuracy", 0.5, 0.9, ["accuracy 0.5000 is below threshold 0.9000"]),
                   str(tmp_path / "b"))
    result = run_push(model_dir=model_dir, blessing_dir=str(tmp_path / "b"), examples_dir="",
                      statistics_dir=str(tmp_path / "s"), schema_dir=str(tmp_path / "c"),
                      output_dir=str(tmp_path / "out"), settings=ServingSettings(base=str(tmp_path / "serving"),
                                                                                 model_name="m"))
    assert '"pushed": false' in (tmp_path / "out" / "push.json").read_text()
    assert result.markdown() == "# Not pushed\n\nnot pushed: not blessed: accuracy 0.5000 is below threshold 0.9000\n"
    assert not (tmp_path / "serving").exists()


def test_concurrent_pushes_get_distinct_whole_versions(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    results = []
    settings = serving(base, keep_versions=6)  # all six stay: this is about the pushes, not retention
    threads = [threading.Thread(target=lambda: results.append(push_model(settings, model_dir, BLESSED)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.version for r in results) == [1, 2, 3, 4, 5, 6]
    assert ServingStore(base, "m").versions() == [1, 2, 3, 4, 5, 6]
    # every push recorded (none lost to another's write), the newest stable whichever ended last
    assert record_states(base) == {1: "retired", 2: "retired", 3: "retired", 4: "retired", 5: "retired", 6: "stable"}
    assert labels(base) == {"stable": 6}


_SLOW_PUSH = textwrap.dedent("""
    import shutil, sys, time
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    copy = shutil.copy2
    def slow_copy(src, dst, **kw):  # slow the copy down so the test can kill it midway
        time.sleep(0.02)
        return copy(src, dst, **kw)
    shutil.copy2 = slow_copy
    push_model(ServingSettings(base=sys.argv[2], model_name="m"), sys.argv[1],
               Blessing(blessed=True, metric="accuracy", value=1.0, threshold=0.0, reasons=["ok"]))
""")


def test_push_killed_midway_leaves_no_partial_version(tmp_path, model_dir):
    for i in range(300):
        (tmp_path / "model" / "variables" / f"shard-{i:04d}").write_bytes(b"x" * 100)
    base = tmp_path / "serving"
    push_model(serving(str(base)), model_dir, BLESSED)  # version 1, whole
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_PUSH, model_dir, str(base)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the copy is under way
        staging = [p for p in (base / "m").iterdir() if p.name.startswith(".staging-")]
        if staging and len(list(staging[0].rglob("shard-*"))) > 20:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    integer_dirs = [p for p in (base / "m").iterdir() if p.name.isdigit()]
    assert [p.name for p in integer_dirs] == ["1"]
    for d in integer_dirs:
        assert (d / "saved_model.pb").is_file() and (d / "variables").is_dir()
    assert ServingStore(str(base), "m").versions() == [1]
    # The next push is unaffected; the killed one's number stays claimed by its candidate,
    # which nothing serves and which fails once its push's deadline has passed.
    assert push_model(serving(str(base)), model_dir, BLESSED).version == 3
    record = served.read_record(ServingStore(str(base), "m"))
    assert record["versions"]["2"]["state"] == "candidate" and labels(str(base)) == {"stable": 3}


def test_retention_keeps_the_newest_k(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    removed = [push_model(serving(base, keep_versions=2), model_dir, BLESSED).removed_versions for _ in range(4)]
    assert removed == [[], [], [1], [2]]
    assert ServingStore(base, "m").versions() == [3, 4]
    assert leftovers(base) == ["3", "4"]


def test_retention_never_deletes_a_labelled_version(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    for _ in range(3):
        store.add_version(model_dir)
    served.set_labels(store, {"stable": 1, "canary": 3})
    assert served.apply_retention(store, 1) == [2]
    assert store.versions() == [1, 3]


def test_rollback_changes_what_models_config_serves(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    for _ in range(3):
        push_model(serving(base), model_dir, BLESSED)
    assert labels(base) == {"stable": 3}
    assert served.rollback(base, "m") == (3, 2)
    text = (tmp_path / "serving" / "models.config").read_text()
    assert "versions: 2" in text and 'key: "stable"' in text and "value: 2" in text
    assert served.served_version(base, "m")[0] == 2  # the next run's baseline follows the label
    assert served.rollback(base, "m", to=1) == (2, 1)
    with pytest.raises(GpupipeError, match="rollback --to 7: no such version of m"):
        served.rollback(base, "m", to=7)


def test_models_config_keeps_other_models(tmp_path, model_dir):
    base = tmp_path / "serving"
    base.mkdir()
    (base / "models.config").write_text(
        'model_config_list { config { name: "other" base_path: "/x/other" model_platform: "tensorflow" } }')
    push_model(serving(str(base)), model_dir, BLESSED)
    text = (base / "models.config").read_text()
    assert 'name: "other"' in text and 'name: "m"' in text


def test_push_to_gcs_through_the_emulator(tmp_path, model_dir, monkeypatch):
    from tests.fixtures.gcs import gcs_emulator

    with gcs_emulator(monkeypatch) as bucket:
        base = f"gs://{bucket}/models"
        first = push_model(serving(base), model_dir, BLESSED)
        second = push_model(serving(base, keep_versions=1), model_dir, BLESSED)
        assert (first.version, second.version) == (1, 2)
        assert first.path == f"gs://{bucket}/models/m/1"
        store = ServingStore(base, "m")
        assert store.versions() == [1, 2]  # the previous stable version survives retention
        third = push_model(serving(base, keep_versions=1), model_dir, BLESSED)
        assert third.removed_versions == [1] and store.versions() == [2, 3]
        assert labels(base) == {"stable": 3}
        local = store.download_version(2, str(tmp_path / "dl"))
        assert (tmp_path / "dl" / "saved_model.pb").read_bytes() == b"pb"
        assert os.path.isfile(os.path.join(local, "variables", "variables.index"))


def test_warmup_requests_are_predict_logs_of_eval_rows(tmp_path, penguin_model, penguin_examples):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    base = str(tmp_path / "serving")
    rows = eval_examples(penguin_examples, 3)
    result = push_model(serving(base, "penguins"), penguin_model, BLESSED, examples=rows)
    warmup = os.path.join(result.path, "assets.extra", "tf_serving_warmup_requests")
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(warmup)]
    assert len(logs) == 3
    request = logs[0].predict_log.request
    assert request.model_spec.name == "penguins" and request.model_spec.signature_name == "serving_examples"
    assert list(tf.make_ndarray(request.inputs["examples"])) == [rows[0]]


def test_smoke_test_passes_against_the_tf_serving_fixture(tmp_path, penguin_model, penguin_examples):
    from tests.fixtures.tf_serving import FakeTFServing, FixtureServer

    base = str(tmp_path / "serving")
    rows = eval_examples(penguin_examples, 4)
    push_model(serving(base, "penguins"), penguin_model, BLESSED)  # version 1, stable
    with FixtureServer(FakeTFServing(base, "penguins")) as server:
        result = push_model(serving(base, "penguins", endpoint=server.endpoint, smoke_timeout_seconds=30),
                            penguin_model, BLESSED, examples=rows)
    assert result.version == 2 and result.smoke_test.startswith(f"passed on {server.endpoint}")
    assert labels(base, "penguins") == {"stable": 2}
    calls = [name for name, _ in server.servicer.requests]
    assert calls[0] == "GetModelStatus" and "Predict" in calls
    predict = next(req for name, req in server.servicer.requests if name == "Predict")
    assert predict.model_spec.version.value == 2


@pytest.mark.parametrize("servicer_args, message", [
    ({"perturb": 0.01}, "predictions differ from the pushed model's by up to 0.01"),
    ({"unavailable": True}, r"version 2 of penguins not AVAILABLE within 2s \(state LOADING\)"),
])
def test_smoke_test_failure_leaves_stable_where_it_was(tmp_path, penguin_model, penguin_examples, servicer_args,
                                                        message):
    from tests.fixtures.tf_serving import FakeTFServing, FixtureServer

    base = str(tmp_path / "serving")
    push_model(serving(base, "penguins"), penguin_model, BLESSED)
    before = (tmp_path / "serving" / "models.config").read_text()
    with FixtureServer(FakeTFServing(base, "penguins", **servicer_args)) as server:
        with pytest.raises(GpupipeError, match=message):
            push_model(serving(base, "penguins", endpoint=server.endpoint, smoke_timeout_seconds=2), penguin_model,
                       BLESSED, examples=eval_examples(penguin_examples, 4))
    assert labels(base, "penguins") == {"stable": 1}
    assert (tmp_path / "serving" / "models.config").read_text() == before


def test_directory_without_saved_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(GpupipeError, match="has no saved_model.pb"):
        push_model(serving(str(tmp_path / "serving")), str(tmp_path / "empty"), BLESSED)
    assert not (tmp_path / "serving").exists()  # nothing recorded, nothing claimed


def test_a_retried_push_of_the_same_run_adds_no_version(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    first = push_model(serving(base), model_dir, BLESSED, run_id="run-1")
    retry = push_model(serving(base), model_dir, BLESSED, run_id="run-1")  # KFP retried the push task
    assert (first.version, retry.version) == (1, 1) and "already pushed as version 1 by this run" in retry.reason
    other_run = push_model(serving(base), model_dir, BLESSED, run_id="run-2")
    assert other_run.version == 2 and ServingStore(base, "m").versions() == [1, 2]


def test_a_version_that_fails_its_smoke_test_leaves_the_serving_directory(tmp_path, model_dir, monkeypatch):
    from components.push import smoke

    def fails(*args, **kwargs):
        raise GpupipeError("smoke test: predictions differ")

    monkeypatch.setattr(smoke, "smoke_test", fails)
    base = str(tmp_path / "serving")
    push_model(serving(base), model_dir, BLESSED)
    with pytest.raises(GpupipeError, match="predictions differ"):
        push_model(serving(base, endpoint="localhost:1"), model_dir, BLESSED)
    store = ServingStore(base, "m")
    assert store.versions() == [1]  # not served as the highest version, not a baseline, not a rollback target
    assert labels(base) == {"stable": 1}
    assert served.served_version_number(base, "m") == 1


def test_a_serving_base_outside_the_allowed_ones_is_refused(tmp_path, model_dir):
    write_blessing(Blessing(True, "accuracy", 0.95, 0.9, ["ok"]), str(tmp_path / "b"))
    settings = ServingSettings(base="gs://someone-elses/models", model_name="m", allowed_bases=["gs://ours/models"])
    with pytest.raises(GpupipeError) as err:
        run_push(model_dir=model_dir, blessing_dir=str(tmp_path / "b"), examples_dir="", statistics_dir="",
                 schema_dir="", output_dir=str(tmp_path / "out"), settings=settings)
    assert str(err.value) == ("serving_base: gs://someone-elses/models is not under serving.allowed_bases "
                              "(gs://ours/models); run with one of them or add it to the config")


# -- version states, lineage, baselines, rollback targets and retention ---------------------
def fail_leaving_files(base, version, reason="smoke test failed"):
    """A version marked failed whose files are still there (a push killed between the two)."""
    store = ServingStore(base, "m")
    served.update_record(store, lambda r: states.fail(r, version, time.time(), reason))


def record_states(base, name="m"):
    return {int(v): e["state"] for v, e in served.read_record(ServingStore(base, name))["versions"].items()}


def test_each_version_records_its_state_and_lineage(tmp_path, model_dir, monkeypatch):
    from components.push import logic

    monkeypatch.setattr(logic, "eval_examples", lambda examples_dir, count: [])  # no eval split here
    write_blessing(Blessing(True, "accuracy", 0.95, 0.9, ["accuracy 0.9500 meets threshold (>= 0.9000)"],
                            metrics={"accuracy": 0.95}), str(tmp_path / "b"))
    lineage = {"run_name": "nightly", "pipeline": "penguins", "gpupipe_version": "0.1.0", "image": "img@sha256:ab",
               "data_fingerprint": "f00d", "config_digest": "c0de"}
    base = str(tmp_path / "serving")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "stats.pb").write_bytes(b"")
    (tmp_path / "s" / "schema.pbtxt").write_text("")
    result = run_push(model_dir=model_dir, blessing_dir=str(tmp_path / "b"), examples_dir="",
                      statistics_dir=str(tmp_path / "s"), schema_dir=str(tmp_path / "s"),
                      output_dir=str(tmp_path / "out"), run_id="run-7", lineage=lineage,
                      settings=ServingSettings(base=base, model_name="m"))
    entry = served.read_record(ServingStore(base, "m"))["versions"]["1"]
    assert entry["state"] == "stable" and [h["state"] for h in entry["history"]] == ["candidate", "stable"]
    expected = {**lineage, "run_id": "run-7", "model_digest": model_digest(model_dir), "metrics": {"accuracy": 0.95},
                "blessing": {"blessed": True, "metric": "accuracy", "value": 0.95, "threshold": 0.9,
                             "reasons": ["accuracy 0.9500 meets threshold (>= 0.9000)"], "baseline_version": None,
                             "baseline_value": None}}
    assert {k: v for k, v in entry["lineage"].items() if k != "pushed_at"} == expected
    stored = json.loads((tmp_path / "serving" / "m" / "1" / "assets.extra" / "gpupipe" / "model.json").read_text())
    assert stored == entry["lineage"] and result.version == 1


def test_a_first_push_that_fails_its_smoke_test_is_never_served_nor_a_baseline(tmp_path, model_dir, monkeypatch):
    from components.push import smoke

    monkeypatch.setattr(smoke, "smoke_test", _fails)
    base = str(tmp_path / "serving")
    with pytest.raises(GpupipeError, match="predictions differ"):
        push_model(serving(base, endpoint="localhost:1"), model_dir, BLESSED, run_id="run-1")
    assert record_states(base) == {1: "failed"}
    assert served.served_version_number(base, "m") is None  # the next run's gate and drift check: no baseline
    assert ServingStore(base, "m").versions() == [] and labels(base) == {}
    models_config.parse((tmp_path / "serving" / "models.config").read_text())  # parses, serves nothing of m
    with pytest.raises(GpupipeError, match="no versions of m"):
        served.rollback(base, "m")
    monkeypatch.setattr(smoke, "smoke_test", lambda *a, **k: 0.0)
    assert push_model(serving(base, endpoint="localhost:1"), model_dir, BLESSED, run_id="run-2").version == 2
    assert served.served_version_number(base, "m") == 2 and record_states(base) == {1: "failed", 2: "stable"}


def _fails(*args, **kwargs):
    raise GpupipeError("smoke test: predictions differ")


def test_rollback_goes_to_the_newest_earlier_version_that_passed(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    for _ in range(4):
        push_model(serving(base), model_dir, BLESSED)
    fail_leaving_files(base, 3)  # whole on disk, but it failed
    assert served.rollback(base, "m") == (4, 2)  # not 3
    with pytest.raises(GpupipeError, match=r"rollback --to 3: version 3 of m is failed, not one that passed; pick one "
                                           r"of 1, 4"):
        served.rollback(base, "m", to=3)
    assert served.served_version_number(base, "m") == 2 and labels(base) == {"stable": 2}
    assert record_states(base) == {1: "retired", 2: "stable", 3: "failed", 4: "retired"}


def test_the_baseline_is_never_a_failed_version(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    push_model(serving(base), model_dir, BLESSED)
    push_model(serving(base), model_dir, BLESSED)
    fail_leaving_files(base, 2)  # the stable one failed afterwards (e.g. aborted); no stable left
    assert served.served_version_number(base, "m") == 1  # the newest that passed, not the newest on disk


def test_retention_keeps_stable_and_previous_stable_and_does_not_count_failed(tmp_path, model_dir, monkeypatch):
    from components.push import smoke

    base = str(tmp_path / "serving")
    for _ in range(3):
        push_model(serving(base, keep_versions=3), model_dir, BLESSED)  # 1, 2, 3: stable 3
    monkeypatch.setattr(smoke, "smoke_test", _fails)
    with pytest.raises(GpupipeError):
        push_model(serving(base, keep_versions=3, endpoint="localhost:1"), model_dir, BLESSED)  # 4 failed, removed
    push_model(serving(base, keep_versions=3), model_dir, BLESSED)  # 5
    fail_leaving_files(base, 5)  # 5 failed after the fact, its files still there
    result = push_model(serving(base, keep_versions=3), model_dir, BLESSED)  # 6
    # The newest 3 that passed stay (2, 3, 6; 1 went with 5): the failed 4 and 5 do not count, 5's files go.
    assert result.removed_versions == [5] and ServingStore(base, "m").versions() == [2, 3, 6]
    assert record_states(base) == {2: "retired", 3: "retired", 4: "failed", 5: "failed", 6: "stable"}
    push_model(serving(base, keep_versions=1), model_dir, BLESSED)  # 7: keep 1, yet the previous stable 6 stays
    assert ServingStore(base, "m").versions() == [6, 7]
    assert served.read_record(ServingStore(base, "m"))["previous_stable"] == 6
