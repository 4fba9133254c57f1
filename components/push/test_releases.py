"""Releases that survive anything: a push killed at each of its writes in turn leaves a
serving base whose models.config parses and names only whole versions that passed, and
no canary label outlives a failed or killed push; canary pushes, promote and abort."""
import os
import time

import pytest

from components.contracts.errors import GpupipeError
from components.push import smoke
from components.push.logic import push_model
from components.push.test_logic import BLESSED, serving
from components.store import models_config, served, states
from components.store.base import ServingStore

pytestmark = pytest.mark.unit


class Killed(BaseException):
    """Stands in for SIGKILL at a write: no `except Exception` clean-up runs."""


WRITES = ("claim_version", "_write_small", "_copy_in", "remove_version")


@pytest.fixture
def smoke_passes(monkeypatch):
    monkeypatch.setattr(smoke, "smoke_test", lambda *args, **kwargs: 0.0)


def kill_at(monkeypatch, n: int) -> list:
    """Patches the store's writes so that the n-th one (1-based) raises Killed; returns
    the list of writes made (method names)."""
    made = []
    for name in WRITES:
        original = getattr(ServingStore, name)

        def write(self, *args, _original=original, _name=name, **kwargs):
            made.append(_name)
            if len(made) == n:
                raise Killed(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ServingStore, name, write)
    return made


def check_serving_base(base: str, allow_unfinished_canary: bool = False) -> dict:
    """What a server could pick after a crash: models.config parses; every version it
    names is whole and passed (only the canary of an unfinished push may not have passed
    yet, and only with `allow_unfinished_canary`); stable is a passed version."""
    store = ServingStore(base, "m")
    record = served.read_record(store)
    config = models_config.parse(store.read_models_config())
    whole = store.versions()
    for entry in config.model_config_list.config:
        assert entry.name == "m"
        named = set(entry.model_version_policy.specific.versions)
        for version in named - set(entry.version_labels.values()):  # the previous stable, or a smoke test's
            e = states.entry(record, version)
            assert version in whole and (states.passed(e) or (allow_unfinished_canary and e.get("in_progress")))
        for label, version in entry.version_labels.items():
            assert version in whole, f"{label} -> {version}: not a whole version"
            e = states.entry(record, version)
            if label == "canary" and allow_unfinished_canary and e.get("in_progress"):
                continue
            assert states.passed(e), f"{label} -> {version}: {e['state']}, did not pass"
    return record


@pytest.mark.parametrize("canary_percent", [0, 25])
def test_a_push_killed_at_each_write_in_turn_leaves_a_consistent_serving_base(tmp_path, model_dir, monkeypatch,
                                                                              smoke_passes, canary_percent):
    n, writes_of_a_whole_push = 0, None
    while writes_of_a_whole_push is None:
        n += 1
        base = str(tmp_path / f"serving-{n}")
        push_model(serving(base, keep_versions=2), model_dir, BLESSED)  # 1: stable
        push_model(serving(base, keep_versions=2), model_dir, BLESSED)  # 2: stable, 1 previous stable
        with monkeypatch.context() as patch:
            made = kill_at(patch, n)
            try:
                push_model(serving(base, keep_versions=2, endpoint="localhost:1", canary_percent=canary_percent),
                           model_dir, BLESSED, run_id="run-3")
                writes_of_a_whole_push = len(made)  # n is past the last write: the push went through
            except Killed:
                pass
        # Right after the kill: what a server could pick is whole, stable passed.
        check_serving_base(base, allow_unfinished_canary=True)
        assert states.stable(served.read_record(ServingStore(base, "m"))) in (2, 3)
        # KFP retries the push task (same run): it repairs what the killed attempt left.
        retry = push_model(serving(base, keep_versions=2, endpoint="localhost:1", canary_percent=canary_percent),
                           model_dir, BLESSED, run_id="run-3")
        record = check_serving_base(base)
        store = ServingStore(base, "m")
        released = {v for v in states.numbers(record) if states.passed(states.entry(record, v))}
        assert set(store.versions()) <= released, f"kill at write {n}: unreleased files left"
        assert not [v for v in states.numbers(record) if states.entry(record, v).get("in_progress")]
        labels = served.current_labels(store)
        if canary_percent:
            assert labels == {"stable": 2, "canary": retry.version}
        else:
            assert labels == {"stable": retry.version}
        assert [v for v in released if states.entry(record, v)["lineage"].get("run_id") == "run-3"] == [retry.version]
        assert not [p for p in os.listdir(os.path.join(base, "m")) if p.startswith((".staging", ".deleting"))]
    print(f"a whole push made {writes_of_a_whole_push} writes; each was killed once")
    assert writes_of_a_whole_push >= 7


def test_a_canary_label_never_outlives_a_killed_push_of_another_run(tmp_path, model_dir, monkeypatch, smoke_passes):
    base = str(tmp_path / "serving")
    push_model(serving(base), model_dir, BLESSED)  # 1: stable

    def killed(*args, **kwargs):
        raise Killed("smoke test")

    with monkeypatch.context() as patch:
        patch.setattr(smoke, "smoke_test", killed)
        with pytest.raises(Killed):
            push_model(serving(base, endpoint="localhost:1", push_timeout_seconds=0.01), model_dir, BLESSED,
                       run_id="run-a")
    assert served.current_labels(ServingStore(base, "m")) == {"stable": 1, "canary": 2}  # killed mid smoke test
    time.sleep(0.02)  # its deadline passes
    result = push_model(serving(base), model_dir, BLESSED, run_id="run-b")
    assert result.version == 3 and served.current_labels(ServingStore(base, "m")) == {"stable": 3}
    record = served.read_record(ServingStore(base, "m"))
    assert states.entry(record, 2)["state"] == "failed" and ServingStore(base, "m").versions() == [1, 3]
    assert states.entry(record, 2)["reason"] == "its push ended before it was released"


def test_a_live_push_of_another_run_is_left_alone(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    push_model(serving(base), model_dir, BLESSED)
    other = served.register_candidate(store, {"run_id": "run-a"}, deadline=time.time() + 600)
    push_model(serving(base, keep_versions=1), model_dir, BLESSED, run_id="run-b")
    assert states.entry(served.read_record(store), other)["state"] == "candidate"  # not failed, not removed


# -- canary releases -------------------------------------------------------------------------
def test_a_canary_push_keeps_stable_then_promote_moves_it_and_keeps_the_previous(tmp_path, model_dir, smoke_passes):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    push_model(serving(base), model_dir, BLESSED)  # 1: stable
    result = push_model(serving(base, endpoint="localhost:1", canary_percent=10), model_dir, BLESSED)
    assert (result.version, result.canary, result.stable) == (2, 2, 1)
    assert "canary for 10% of the traffic, stable stays version 1" in result.reason
    assert served.current_labels(store) == {"stable": 1, "canary": 2}
    assert served.served_version_number(base, "m") == 1  # the next run's baseline: still stable
    assert served.promote(base, "m", keep=1) == (1, 2)
    assert served.current_labels(store) == {"stable": 2}
    record = served.read_record(store)
    assert record["previous_stable"] == 1 and store.versions() == [1, 2]  # kept for a rollback
    assert [h["state"] for h in states.entry(record, 2)["history"]] == ["candidate", "canary", "canary", "stable"]
    assert served.rollback(base, "m") == (2, 1)


def test_abort_drops_the_canary_label_and_the_version(tmp_path, model_dir, smoke_passes):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    push_model(serving(base), model_dir, BLESSED)
    push_model(serving(base, canary_percent=25), model_dir, BLESSED)
    assert served.abort(base, "m") == 2
    assert served.current_labels(store) == {"stable": 1} and store.versions() == [1]
    assert states.entry(served.read_record(store), 2)["state"] == "failed"
    assert not os.path.exists(store.release_path(2))
    with pytest.raises(GpupipeError, match="abort: m has no canary version under .*; nothing to abort"):
        served.abort(base, "m")
    with pytest.raises(GpupipeError, match=r"promote: m has no canary version under .*; push with "
                                           r"serving.canary_percent > 0 first"):
        served.promote(base, "m")


def test_a_canary_still_in_its_smoke_test_is_not_promoted(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    push_model(serving(base), model_dir, BLESSED)
    version = served.register_candidate(store, {"run_id": "run-a"}, deadline=time.time() + 600)
    store.add_version(model_dir, version)
    served.begin_canary(store, version)
    with pytest.raises(GpupipeError, match="promote: canary version 2 of m is still being smoke-tested"):
        served.promote(base, "m")


def test_a_newer_canary_supersedes_an_older_one(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    store = ServingStore(base, "m")
    push_model(serving(base), model_dir, BLESSED)
    push_model(serving(base, canary_percent=10), model_dir, BLESSED)
    push_model(serving(base, canary_percent=10), model_dir, BLESSED)
    assert served.current_labels(store) == {"stable": 1, "canary": 3}
    assert states.entry(served.read_record(store), 2)["state"] == "retired"
