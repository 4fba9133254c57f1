"""`gpupipe usage`'s accounting: GPU-hours per team from the finished Workloads over a period,
and from the local runs' training reports."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, List, Optional

from components.contracts.errors import GpupipeError
from pipelines.pool.workloads import GPU, admitted_flavors, admitted_gpus, condition, is_true, owner, timestamp


def workload_usage(wl: dict, resource: str = GPU) -> Optional[dict]:
    """A finished Workload's GPU time: its admitted seconds (the earlier admit-evict cycles'
    accumulatedPastExexcutionTimeSeconds, plus the last admission's, from the Admitted
    condition's lastTransitionTime to the Finished condition's) times the GPUs its admitted
    pod sets hold. None for a workload not finished."""
    finished = condition(wl, "Finished")
    if not is_true(finished):
        return None
    status = wl.get("status") or {}
    end = timestamp(finished.get("lastTransitionTime"))
    seconds = float(status.get("accumulatedPastExexcutionTimeSeconds")
                    or status.get("accumulatedPastExecutionTimeSeconds") or 0)  # the v1beta2 spelling
    admitted = condition(wl, "Admitted")
    start = timestamp(admitted.get("lastTransitionTime")) if is_true(admitted) else None
    if start and end and end > start:
        seconds += (end - start).total_seconds()
    gpus = admitted_gpus(wl, resource)
    meta = wl.get("metadata") or {}
    return {"namespace": meta.get("namespace", ""), "workload": meta.get("name", ""),
            "owner": "{kind}/{name}".format(**{"kind": "?", "name": "?", **owner(wl)}),
            "finished": finished.get("lastTransitionTime", ""), "outcome": finished.get("reason", ""),
            "cluster_queue": (status.get("admission") or {}).get("clusterQueue", ""),
            "flavor": admitted_flavors(wl, resource), "seconds": seconds, "gpus": gpus,
            "gpu_hours": seconds * gpus / 3600.0}


_PERIOD = re.compile(r"^(\d+(?:\.\d+)?)([mhdw])$")


def parse_when(value: str, now: datetime, flag: str) -> datetime:
    """`7d`, `12h`, `30m`, `2w` before `now`, or a date / ISO time (UTC unless it says)."""
    m = _PERIOD.match(value.strip())
    if m:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m[2]]
        return now - timedelta(**{unit: float(m[1])})
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise GpupipeError(f"usage {flag} {value}: neither a period nor a date; give e.g. 7d, 12h, 2w or "
                           "2026-11-01 (UTC)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def local_usage(pipeline: str, runs_dir: Path, since: datetime, until: datetime) -> dict:
    """The GPU-hours the local runs of `pipeline` under `runs_dir` recorded in their training
    reports (gpu_hours), for the runs started in [since, until) (by their directory name)."""
    from pipelines.reports import pool_runs

    runs, hours = 0, 0.0
    for r in pool_runs(pipeline, runs_dir, limit=1 << 30):
        stamp = r["run"][len(pipeline) + 1:]  # kfp.local: <pipeline>-YYYY-MM-DD-HH-MM-SS-ffffff
        try:
            started = datetime.strptime(stamp, "%Y-%m-%d-%H-%M-%S-%f").replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        if since <= started < until and r["train"]:
            runs += 1
            hours += r["train"].get("gpu_hours") or 0.0
    return {"pipeline": pipeline, "runs_dir": str(runs_dir), "runs": runs, "gpu_hours": hours}


def usage_by_team(workloads: Iterable[dict], since: datetime, until: datetime, resource: str = GPU) -> tuple:
    """([one record per team (namespace) with finished workloads in the period], [the
    workloads' records]): a workload counts, whole, in the period its Finished time falls in."""
    records = []
    for wl in workloads:
        u = workload_usage(wl, resource)
        if u is None:
            continue
        end = timestamp(u["finished"])
        if end is not None and since <= end < until:
            records.append(u)
    teams = {}
    for u in records:
        t = teams.setdefault(u["namespace"], {"team": u["namespace"], "workloads": 0, "gpu_hours": 0.0,
                                              "by_flavor": {}})
        t["workloads"] += 1
        t["gpu_hours"] += u["gpu_hours"]
        t["by_flavor"][u["flavor"] or "-"] = t["by_flavor"].get(u["flavor"] or "-", 0.0) + u["gpu_hours"]
    return sorted(teams.values(), key=lambda t: t["team"]), sorted(records, key=lambda u: (u["namespace"],
                                                                                          u["finished"]))


def iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_usage(teams: List[dict], since: datetime, until: datetime, price: Optional[float],
                 local: Optional[dict], asked: List[str]) -> str:
    period = f"{iso(since)} to {iso(until)}"
    priced = f", at {price:g} per GPU-hour" if price else ""
    lines = [f"GPU-hours from the finished Kueue workloads, {period}{priced}"]
    width = max([len("team"), *(len(t["team"]) for t in teams), *(len(n) for n in asked)])
    lines.append(f"{'team':<{width}}  {'workloads':>9}  {'GPU-hours':>10}" + (f"  {'cost':>10}" if price else "")
                 + "  by flavor")
    for t in teams:
        flavors = ", ".join(f"{f} {h:.4f}" for f, h in sorted(t["by_flavor"].items()))
        lines.append(f"{t['team']:<{width}}  {t['workloads']:>9}  {t['gpu_hours']:>10.4f}"
                     + (f"  {t['gpu_hours'] * price:>10.4f}" if price else "") + f"  {flavors}")
    for name in asked:
        if name not in {t["team"] for t in teams}:
            lines.append(f"{name:<{width}}  {0:>9}  {0:>10.4f}" + (f"  {0:>10.4f}" if price else "")
                         + "  (no finished workloads in the period)")
    if not teams and not asked:
        lines.append("(no finished workloads in any namespace in the period)")
    if teams:
        hours = sum(t["gpu_hours"] for t in teams)
        lines.append(f"{'total':<{width}}  {sum(t['workloads'] for t in teams):>9}  {hours:>10.4f}"
                     + (f"  {hours * price:>10.4f}" if price else ""))
    if local is not None:
        cost = f", cost {local['gpu_hours'] * price:.4f}" if price else ""
        lines.append(f"local runs of {local['pipeline']} under {local['runs_dir']}: {local['runs']} run(s), "
                     f"{local['gpu_hours']:.4f} GPU-hours{cost} (from their training reports)")
    return "\n".join(lines)
