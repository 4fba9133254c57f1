"""`gpupipe queue`'s view: one row per Workload of the config, and the table of them."""
from __future__ import annotations

from typing import Iterable, List

from pipelines.pool.workloads import (GPU, admitted_flavors, admitted_gpus, condition, owner, requested_gpus,
                                     workload_state)

FINISHED_SHOWN = 3  # Kueue keeps a finished Workload while its job exists; the launcher leaves completed jobs


def queue_rows(workloads: Iterable[dict], positions: dict, resource: str = GPU) -> List[dict]:
    rows = []
    for wl in workloads:
        meta = wl.get("metadata") or {}
        ref = owner(wl)
        state, reason, message = workload_state(wl)
        pending = positions.get(meta.get("name"))
        rows.append({
            "workload": meta.get("name", ""), "namespace": meta.get("namespace", ""),
            "owner": f"{ref.get('kind', '?')}/{ref.get('name', '?')}", "created": meta.get("creationTimestamp", ""),
            "queue": (wl.get("spec") or {}).get("queueName", ""),
            "priority_class": priority_class(wl),
            "state": state, "reason": reason, "message": message,
            "finished": (condition(wl, "Finished") or {}).get("lastTransitionTime", "") if state == "finished" else "",
            "position_in_local_queue": pending.get("positionInLocalQueue") if pending else None,
            "position_in_cluster_queue": pending.get("positionInClusterQueue") if pending else None,
            "cluster_queue": ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""),
            "flavor": admitted_flavors(wl, resource),
            "gpus": admitted_gpus(wl, resource) if state in ("admitted", "reserved") else requested_gpus(wl, resource),
        })
    order = {"admitted": 0, "reserved": 1, "evicted": 2, "pending": 3, "inactive": 4, "finished": 5}
    return sorted(rows, key=lambda r: (order.get(r["state"], 9), r["position_in_local_queue"]
                                       if r["position_in_local_queue"] is not None else 1 << 30, r["created"]))


def priority_class(wl: dict) -> str:
    """The Workload's WorkloadPriorityClass: spec.priorityClassRef.name in v1beta2,
    spec.priorityClassName in v1beta1 (apis/kueue/v1beta1/workload_conversion.go)."""
    spec = wl.get("spec") or {}
    return spec.get("priorityClassName") or (spec.get("priorityClassRef") or {}).get("name", "")


def _gpus(value: float) -> str:
    return f"{value:g}"


def render_queue(rows: List[dict], namespace: str, queue: str, pipeline: str, note: str = "") -> str:
    if not rows:
        lines = [f"no workloads of {pipeline} in LocalQueue {queue} of namespace {namespace}: Kueue makes one for each "
                 "queued train pod, JobSet or TFJob once the run reaches train; check --namespace (the team's "
                 "namespace) and cluster.queue"]
        return "\n".join(lines + ([note] if note else []))
    total = len(rows)
    done = sorted((r for r in rows if r["state"] == "finished"), key=lambda r: r["finished"], reverse=True)
    rows = [r for r in rows if r["state"] != "finished"] + done[:FINISHED_SHOWN]
    width = max(len("workload"), *(len(r["workload"]) for r in rows))
    lines = [f"{pipeline}: {total} workload(s) in LocalQueue {queue} of namespace {namespace}",
             f"{'workload':<{width}}  {'state':<8}  {'GPUs':>4}  {'position':<18}  {'flavor':<18}  reason"]
    for r in rows:
        if r["position_in_local_queue"] is not None:
            position = f"{r['position_in_local_queue']} (cq {r['position_in_cluster_queue']})"
        else:
            position = "-"
        reason = ": ".join(p for p in (r["reason"], r["message"]) if p) or "-"
        lines.append(f"{r['workload']:<{width}}  {r['state']:<8}  {_gpus(r['gpus']):>4}  {position:<18}  "
                     f"{r['flavor'] or '-':<18}  {reason}")
    if len(done) > FINISHED_SHOWN:
        lines.append(f"... and {len(done) - FINISHED_SHOWN} earlier finished workload(s) (--json lists every one)")
    lines.append("position: the workloads ahead of it in the LocalQueue (in its ClusterQueue: cq), from Kueue's "
                 "visibility API; 0 is next")
    if note:
        lines.append(note)
    return "\n".join(lines)
