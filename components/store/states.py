"""The state record of one model's versions (`<base>/<model>/versions.json`): each
version's state and lineage, and the previous stable version. Pure functions on the
record (a dict); components/store/served.py reads and writes it with preconditions.

States:
- candidate: its number is claimed and its files are being written; not served.
- canary:    labelled `canary` in models.config: being smoke-tested (`in_progress`, with a
             deadline), or passed and taking `serving.canary_percent` of the traffic until
             `gpupipe promote` / `gpupipe abort`.
- stable:    labelled `stable`: what clients, the next run's gate and drift check use.
- retired:   was stable (or a passed canary, promoted past); a rollback target.
- failed:    its smoke test failed, its push died before its deadline, or it was aborted;
             its files are removed, it is never served, a baseline or a rollback target.

A version *passed* when it is stable or retired, or a canary whose smoke test passed.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Dict, List, Optional

CANDIDATE, CANARY, STABLE, RETIRED, FAILED = "candidate", "canary", "stable", "retired", "failed"
STATES = (CANDIDATE, CANARY, STABLE, RETIRED, FAILED)
FORMAT = 1


def now_iso(now: float) -> str:
    return datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def empty() -> dict:
    return {"format": FORMAT, "previous_stable": None, "versions": {}}


def load(text: Optional[str]) -> Optional[dict]:
    if not text:
        return None
    record = json.loads(text)
    record.setdefault("versions", {})
    record.setdefault("previous_stable", None)
    return record


def dump(record: dict) -> str:
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def seeded(versions: List[int], labels: Dict[str, int], lineage: Dict[int, dict], now: float) -> dict:
    """The record of a serving base written before there were records: its whole versions,
    the `stable` label's stable, the `canary` label's a passed canary, the others retired."""
    record = empty()
    for v in versions:
        state = STABLE if labels.get("stable") == v else CANARY if labels.get("canary") == v else RETIRED
        record["versions"][str(v)] = {"state": state, "passed": True, "lineage": lineage.get(v, {}),
                                      "history": [{"state": state, "at": now_iso(now), "reason": "found on disk"}]}
    if "stable" not in labels and versions:  # no label: the newest was served
        record["versions"][str(versions[-1])]["state"] = STABLE
    return record


def entry(record: dict, version: int) -> Optional[dict]:
    return record["versions"].get(str(version))


def numbers(record: dict, *states: str) -> List[int]:
    """The versions in one of `states` (all when none given), ascending."""
    return sorted(int(v) for v, e in record["versions"].items() if not states or e["state"] in states)


def passed(e: Optional[dict]) -> bool:
    return bool(e) and (e["state"] in (STABLE, RETIRED) or (e["state"] == CANARY and e.get("passed", False)))


def passed_versions(record: dict) -> List[int]:
    return [v for v in numbers(record) if passed(entry(record, v))]


def stable(record: dict) -> Optional[int]:
    found = numbers(record, STABLE)
    return found[-1] if found else None


def canary(record: dict) -> Optional[int]:
    found = numbers(record, CANARY)
    return found[-1] if found else None


def labels(record: dict) -> Dict[str, int]:
    """The models.config labels the record implies."""
    out = {}
    if stable(record) is not None:
        out["stable"] = stable(record)
    if canary(record) is not None:
        out["canary"] = canary(record)
    return out


def loaded(record: dict) -> List[int]:
    """The versions models.config names: the labelled ones, every canary still being
    smoke-tested (two pushes at once each need theirs loaded; the label goes to the
    newest) and the previous stable one, so that TF Serving has it loaded when a rollback
    moves `stable` back (it refuses to move an existing label onto a version not loaded)."""
    in_test = [v for v in numbers(record, CANARY) if entry(record, v).get("in_progress")]
    kept = [v for v in (record.get("previous_stable"), record.get("preload"))
            if v is not None and passed(entry(record, v))]
    return sorted(set(labels(record).values()) | set(in_test) | set(kept))


def supersede_canaries(record: dict, version: int, now: float) -> None:
    """Passed canaries older than `version` retire: `version` is the release now."""
    for v in numbers(record, CANARY):
        e = entry(record, v)
        if v < version and e.get("passed") and not e.get("in_progress"):
            set_state(record, v, RETIRED, now, f"superseded by version {version}")


def set_state(record: dict, version: int, state: str, now: float, reason: str = "", **fields) -> None:
    e = record["versions"][str(version)]
    e["state"] = state
    e.update(fields)
    e.setdefault("history", []).append({"state": state, "at": now_iso(now), "reason": reason})
    if reason:
        e["reason"] = reason


def add_candidate(record: dict, version: int, lineage: dict, deadline: float, now: float) -> None:
    record["versions"][str(version)] = {"state": CANDIDATE, "passed": False, "lineage": lineage,
                                        "in_progress": True, "deadline": deadline, "history": []}
    set_state(record, version, CANDIDATE, now, "files being written")


def make_stable(record: dict, version: int, now: float, reason: str, newer_only: bool = False) -> Optional[int]:
    """`version` becomes stable; the stable before it retires and is kept as the previous
    stable. With `newer_only` (a push), a newer stable that a concurrent push made stays,
    and `version` retires as passed. Returns the stable before (None when there was none)."""
    before = stable(record)
    supersede_canaries(record, version, now)
    if newer_only and before is not None and before > version:
        set_state(record, version, RETIRED, now, f"passed, but version {before} was made stable meanwhile",
                  passed=True, in_progress=False, deadline=None)
        return before
    if before is not None and before != version:
        set_state(record, before, RETIRED, now, f"stable moved to version {version}")
        record["previous_stable"] = before
    set_state(record, version, STABLE, now, reason, passed=True, in_progress=False, deadline=None)
    if record.get("preload") == version:
        record["preload"] = None
    return before


def fail(record: dict, version: int, now: float, reason: str) -> None:
    set_state(record, version, FAILED, now, reason, passed=False, in_progress=False, deadline=None)
    if record.get("previous_stable") == version:
        record["previous_stable"] = None


def expired(record: dict, now: float, run_id: str = "") -> List[int]:
    """Versions whose push is dead: still in progress after their deadline, or left by an
    earlier attempt of the run `run_id` (KFP retries a task only after it ended)."""
    dead = []
    for v in numbers(record, CANDIDATE, CANARY):
        e = entry(record, v)
        if not e.get("in_progress"):
            continue
        if (e.get("deadline") or 0) < now or (run_id and e.get("lineage", {}).get("run_id") == run_id):
            dead.append(v)
    return dead


def rollback_target(record: dict, current: int) -> Optional[int]:
    """The newest version older than `current` that passed (never a failed one)."""
    older = [v for v in passed_versions(record) if v < current and entry(record, v)["state"] != CANARY]
    return older[-1] if older else None
