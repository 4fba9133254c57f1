"""What a serving base holds beyond the model files: the state record of the versions
(components/store/states.py) and models.config derived from it, the version now served
(the stable one, never a failed one), retention, rollback, canary promote/abort, and the
files stored with each version for the next run (statistics and schema: the drift
baseline; metrics; the lineage; TF Serving warmup requests).

Every change goes record first, then models.config: the record is changed by
read-change-write with a precondition, then models.config is rendered from the record as
it then is (also read-change-write), so two pushes at once leave both consistent. A
change that dies between the two is repaired by the next one, which renders again.
"""
from __future__ import annotations

import json
import re
import os
import time
from typing import Callable, List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.store import models_config, states
from components.contracts import storage
from components.store.base import ServingStore

# Inside each version directory (TF Serving reads only tf_serving_warmup_requests here).
EXTRA_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
GPUPIPE_DIR = "gpupipe"
METRICS_FILE = "metrics.json"
MODEL_FILE = "model.json"  # the version's lineage: model digest, the run that pushed it, ...


def gpupipe_file(version_dir: str, name: str) -> str:
    return os.path.join(version_dir, EXTRA_DIR, GPUPIPE_DIR, name)


def _stored_json(store: ServingStore, version: int, name: str) -> dict:
    """A JSON file stored with a version under assets.extra/gpupipe/ ({} when absent)."""
    return json.loads(store.read_text(f"{version}/{EXTRA_DIR}/{GPUPIPE_DIR}/{name}") or "{}")


# -- the record ----------------------------------------------------------------------
def _seed(store: ServingStore, now: float) -> dict:
    versions = store.versions()
    lineage = {}
    for v in versions:  # model.json of earlier pushes held {"digest", "run_id"}
        found = _stored_json(store, v, MODEL_FILE)
        found.setdefault("model_digest", found.pop("digest", ""))
        found.setdefault("metrics", _stored_json(store, v, METRICS_FILE))
        lineage[v] = found
    return states.seeded(versions, current_labels(store), lineage, now)


def read_record(store: ServingStore) -> dict:
    """The record (for a base pushed to before there were records: what its files and
    labels say)."""
    return states.load(store._read(store.record_path)) or _seed(store, time.time())


def update_record(store: ServingStore, change: Callable[[dict], None], now: Optional[float] = None) -> dict:
    """Applies `change` (which edits the record in place; it may run more than once, on
    a fresh copy each time) with a precondition, then renders models.config from it."""
    now = time.time() if now is None else now
    seed = [None]
    result = {}

    def apply(text: Optional[str]) -> str:
        record = states.load(text)
        if record is None:
            seed[0] = seed[0] or states.dump(_seed(store, now))
            record = states.load(seed[0])
        change(record)
        result["record"] = record
        return states.dump(record)

    store.update_small(store.record_path, apply, f"the state record of {store.model_name}")
    sync_models_config(store)
    return result["record"]


def _base_path(store: ServingStore) -> str:
    return store.model_root if storage.is_remote(store.model_root) else os.path.abspath(store.model_root)


def sync_models_config(store: ServingStore) -> str:
    """models.config with this model serving exactly the record's stable and canary
    versions (the record is read at each attempt, so the last writer renders the last
    record); other models in the file are kept."""
    def render(text: Optional[str]) -> str:
        record = read_record(store)
        return models_config.set_labels(text, store.model_name, _base_path(store), states.labels(record),
                                        states.loaded(record))

    return store.update_models_config(render) or ""


def set_labels(store: ServingStore, labels: dict) -> str:
    """Writes exactly these labels into models.config (for a base without a record: an
    operator's hand edit; pushes go through the record)."""
    return store.update_models_config(
        lambda text: models_config.set_labels(text, store.model_name, _base_path(store), labels)) or ""


def current_labels(store: ServingStore) -> dict:
    return models_config.labels(store.read_models_config(), store.model_name)


# -- what is served ------------------------------------------------------------------
def served_version_number(base: str, model_name: str) -> Optional[int]:
    """The version now served: the stable one when it is whole, else the newest whole
    version that passed; never a failed or unfinished one. None when there is none."""
    store = ServingStore(base, model_name)
    versions = store.versions()
    if not versions:
        return None
    record = read_record(store)
    stable = states.stable(record)
    if stable in versions:
        return stable
    passed = [v for v in states.passed_versions(record) if v in versions
              and states.entry(record, v)["state"] != states.CANARY]
    return passed[-1] if passed else None


def served_version(base: str, model_name: str) -> Optional[Tuple[int, str]]:
    """(version, local directory) of the model now served (see served_version_number)."""
    version = served_version_number(base, model_name)
    if version is None:
        return None
    return version, ServingStore(base, model_name).download_version(version)


def releases(base: str, model_name: str) -> Tuple[Optional[int], Optional[int]]:
    """(stable, canary) a model server should serve: the stable version when whole, and
    the canary when it passed its smoke test and is whole (else None)."""
    store = ServingStore(base, model_name)
    record = read_record(store)
    whole = set(store.versions())
    stable, canary = states.stable(record), states.canary(record)
    return (stable if stable in whole else None,
            canary if canary in whole and states.passed(states.entry(record, canary)) else None)


def version_of(store: ServingStore, digest: str, run_id: str) -> Optional[int]:
    """The version that run `run_id` pushed, and that passed, of the model with this digest."""
    record = read_record(store)
    whole = set(store.versions())
    for v in reversed(states.passed_versions(record)):
        lineage = states.entry(record, v).get("lineage", {})
        if v in whole and lineage.get("model_digest") == digest and lineage.get("run_id") == run_id:
            return v
    return None


# -- a push's steps ------------------------------------------------------------------
def register_candidate(store: ServingStore, lineage: dict, deadline: float, now: Optional[float] = None) -> int:
    """Claims the next version number and records it as a candidate of this push."""
    version = store.claim_version()
    now = time.time() if now is None else now
    update_record(store, lambda r: states.add_candidate(r, version, lineage, deadline, now), now)
    return version


def begin_canary(store: ServingStore, version: int, now: Optional[float] = None) -> None:
    """Labels the candidate `canary` (TF Serving loads it) for its smoke test."""
    now = time.time() if now is None else now

    def change(record: dict) -> None:
        _still_alive(record, version)
        states.set_state(record, version, states.CANARY, now, "smoke test")

    update_record(store, change, now)


def pass_canary(store: ServingStore, version: int, reason: str, now: Optional[float] = None) -> None:
    """The canary passed; it keeps its label (and its traffic) until promote or abort."""
    now = time.time() if now is None else now

    def change(record: dict) -> None:
        _still_alive(record, version)
        states.set_state(record, version, states.CANARY, now, reason, passed=True, in_progress=False, deadline=None)
        states.supersede_canaries(record, version, now)

    update_record(store, change, now)


def _still_alive(record: dict, version: int) -> None:
    e = states.entry(record, version)
    if e is None or e["state"] == states.FAILED:
        why = f" ({e.get('reason')})" if e and e.get("reason") else ""
        raise GpupipeError(f"push: version {version} was failed while its push ran{why}; stable stays where it was")


def make_stable(store: ServingStore, version: int, reason: str, now: Optional[float] = None,
                newer_only: bool = False) -> Optional[int]:
    """`version` becomes stable (with `newer_only`, unless a newer version already is).
    Returns the version stable before."""
    now = time.time() if now is None else now
    before = {}

    def change(record: dict) -> None:
        _still_alive(record, version)
        before["v"] = states.make_stable(record, version, now, reason, newer_only)

    update_record(store, change, now)
    return before.get("v")


def fail_version(store: ServingStore, version: int, reason: str, now: Optional[float] = None) -> None:
    """Marks the version failed (its labels go with it), then removes its files so that no
    server taking the highest version, no baseline and no rollback can pick it."""
    now = time.time() if now is None else now
    update_record(store, lambda r: states.fail(r, version, now, reason), now)
    store.remove_version(version)


def recover(store: ServingStore, run_id: str = "", now: Optional[float] = None) -> List[int]:
    """Fails the versions of dead pushes (in progress past their deadline, or an earlier
    attempt of this run) so their canary label does not outlive them, and renders
    models.config from the record. Returns the failed versions."""
    now = time.time() if now is None else now
    if not store._read(store.record_path):
        return []
    dead: List[int] = []

    def change(record: dict) -> None:
        dead[:] = states.expired(record, now, run_id)
        for v in dead:
            states.fail(record, v, now, "its push ended before it was released")

    if states.expired(read_record(store), now, run_id):
        update_record(store, change, now)
        for v in dead:
            store.remove_version(v)
    else:  # a change that died between the record and models.config: render it again
        sync_models_config(store)
    return dead


def apply_retention(store: ServingStore, keep: int, now: Optional[float] = None) -> List[int]:
    """Keeps the newest `keep` versions that passed (failed ones do not count), and always
    the stable, the previous stable and the canary version; deletes the others that
    passed, and the files of failed versions and of whole versions nobody recorded. The
    record keeps the newest `keep` failed versions, for `gpupipe versions`. Returns the
    deleted versions."""
    now = time.time() if now is None else now
    doomed: List[int] = []

    def change(record: dict) -> None:
        passed = [v for v in states.passed_versions(record)]
        protected = {states.stable(record), states.canary(record), record.get("previous_stable")}
        doomed[:] = [v for v in passed[:-keep] if v not in protected] if keep < len(passed) else []
        failed = states.numbers(record, states.FAILED)
        for v in doomed + failed[:-keep]:
            record["versions"].pop(str(v), None)

    if keep:
        update_record(store, change, now)
    whole = store.versions()  # listed before the record is read: a version whole now is recorded by then
    record = read_record(store)
    recorded = {int(v) for v, e in record["versions"].items() if e["state"] != states.FAILED}
    leftovers = [v for v in whole if v not in recorded and v not in doomed]
    for v in doomed + leftovers:
        store.remove_version(v)
    return sorted(doomed + leftovers)


# -- an operator's moves ---------------------------------------------------------------
def _listed(versions) -> str:
    return ", ".join(map(str, versions)) or "none"


def rollback(base: str, model_name: str, to: Optional[int] = None) -> Tuple[Optional[int], int]:
    """Points `stable` at version `to` (default: the newest version older than the current
    stable one that passed). Returns (previous stable, new stable)."""
    store = ServingStore(base, model_name)
    whole = store.versions()
    if not whole:
        raise GpupipeError(f"serving.base: no versions of {model_name} under {base}; nothing to roll back to")
    record = read_record(store)
    current = states.stable(record)
    targets = [v for v in states.passed_versions(record) if v in whole and v != current]
    if to is None:
        to = states.rollback_target(record, current if current is not None else whole[-1] + 1)
        if to is None or to not in whole:
            raise GpupipeError(f"rollback: no version older than {current} of {model_name} passed; pass --to VERSION "
                               f"(versions that passed: {_listed(targets)})")
    elif to not in whole:
        raise GpupipeError(f"rollback --to {to}: no such version of {model_name} (versions: {_listed(whole)})")
    elif not states.passed(states.entry(record, to)):
        state = (states.entry(record, to) or {}).get("state", "unrecorded")
        raise GpupipeError(f"rollback --to {to}: version {to} of {model_name} is {state}, not one that passed; pick "
                           f"one of {_listed(targets)}")
    if to != current:
        make_stable(store, to, f"rolled back from version {current}")
    return current, to


def rollback_needs_loading(base: str, model_name: str, to: Optional[int]) -> Optional[int]:
    """The version a rollback to `to` (None: the default target) would move `stable` onto
    when models.config does not name it yet (TF Serving then has it unloaded and refuses
    the label move); None when it is already named."""
    store = ServingStore(base, model_name)
    record = read_record(store)
    current = states.stable(record)
    target = to if to is not None else states.rollback_target(
        record, current if current is not None else max(store.versions(), default=0) + 1)
    if target is None or target in states.loaded(record) or not states.passed(states.entry(record, target)):
        return None
    return target


def preload(base: str, model_name: str, version: int) -> None:
    """Names `version` in models.config without a label, so TF Serving loads it before a
    rollback moves `stable` onto it (cleared when it becomes stable)."""
    update_record(ServingStore(base, model_name), lambda r: r.__setitem__("preload", version))


def promote(base: str, model_name: str, keep: int = 0) -> Tuple[Optional[int], int]:
    """The canary becomes stable; the stable before stays as the previous stable. Returns
    (previous stable, new stable)."""
    store = ServingStore(base, model_name)
    recover(store)
    record = read_record(store)
    canary = states.canary(record)
    if canary is None:
        raise GpupipeError(f"promote: {model_name} has no canary version under {base}; push with "
                           "serving.canary_percent > 0 first")
    if not states.passed(states.entry(record, canary)):
        raise GpupipeError(f"promote: canary version {canary} of {model_name} is still being smoke-tested; wait for "
                           "its push to finish")
    before = make_stable(store, canary, "promoted from canary")
    if keep:
        apply_retention(store, keep)
    return before, canary


def abort(base: str, model_name: str) -> int:
    """The canary (or a push's dead candidate) fails: its label goes, its files go, stable
    stays. Returns its version."""
    store = ServingStore(base, model_name)
    recover(store)
    canary = states.canary(read_record(store))
    if canary is None:
        raise GpupipeError(f"abort: {model_name} has no canary version under {base}; nothing to abort")
    fail_version(store, canary, "aborted")
    return canary


def version_records(store: ServingStore) -> List[dict]:
    """Each recorded version, oldest first: state, labels, lineage, and whether its files
    are whole; plus any whole version nobody recorded."""
    record = read_record(store)
    whole = set(store.versions())
    by_version: dict = {}
    for label, version in current_labels(store).items():
        by_version.setdefault(version, []).append(label)
    out = []
    for v in sorted(set(states.numbers(record)) | whole):
        e = states.entry(record, v) or {"state": "unrecorded", "lineage": _stored_json(store, v, MODEL_FILE)}
        lineage = e.get("lineage") or {}
        out.append({"version": v, "state": e["state"], "labels": sorted(by_version.get(v, [])), "whole": v in whole,
                    "reason": e.get("reason", ""), "lineage": lineage, "metrics": lineage.get("metrics", {}),
                    "digest": lineage.get("model_digest") or lineage.get("digest", ""),
                    "run_id": lineage.get("run_id", ""),
                    "in_progress": bool(e.get("in_progress"))})
    return out


# -- what each run decided ------------------------------------------------------------
RUNS_DIR = "runs"  # <base>/<model>/runs/<run id>.json (TF Serving loads integer folders only)
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _run_file(store: ServingStore, run_id: str) -> str:
    if not _RUN_ID_RE.match(run_id):
        raise GpupipeError(f"run id '{run_id[:80]}' is not a plain name (letters, digits, '.', '_', '-')")
    return storage.join(store.model_root, RUNS_DIR, f"{run_id}.json")


def record_run(store: ServingStore, run_id: str, outcome: dict) -> None:
    """What run `run_id`'s push decided (pushed or not, why, the gate's figures), for whoever
    reports on the run after it (the pipeline's exit handler that notifies)."""
    store.update_small(_run_file(store, run_id), lambda _: json.dumps(outcome, indent=2, sort_keys=True),
                       "the run's outcome")


def run_outcome(store: ServingStore, run_id: str) -> Optional[dict]:
    text = store._read(_run_file(store, run_id))
    return json.loads(text) if text else None
