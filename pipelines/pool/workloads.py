"""Reading a Kueue Workload: whose it is, the GPUs it asks for and holds, and its state from
its conditions (the shapes: pipelines/pool/__init__.py)."""
from __future__ import annotations

from datetime import datetime
from typing import Optional

GPU = "nvidia.com/gpu"
JOB_PREFIX = "gpupipe-train-"  # the launcher's JobSet/TFJob names (components/train/launch.py run_training_job)
JOB_KINDS = ("JobSet", "TFJob")
PIPELINE_LABEL = "gpupipe/pipeline"  # on a Workload only when Kueue's labelKeysToCopy lists it


def condition(wl: dict, type_: str) -> Optional[dict]:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def is_true(c: Optional[dict]) -> bool:
    return bool(c) and c.get("status") == "True"


def timestamp(value: Optional[str]) -> Optional[datetime]:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def owner(wl: dict) -> dict:
    """The Workload's controller ownerReference (the job Kueue made it for)."""
    refs = (wl.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else {})


def is_gpupipe_workload(wl: dict, queue: str, pipeline: str) -> bool:
    """A Workload of this config: in its LocalQueue, made for a launcher's JobSet or TFJob
    (named gpupipe-train-...) or for a pod (the single-worker train pod carries the queue
    label); one that carries another pipeline's gpupipe/pipeline label is not."""
    if (wl.get("spec") or {}).get("queueName") != queue:
        return False
    label = ((wl.get("metadata") or {}).get("labels") or {}).get(PIPELINE_LABEL)
    if label and label != pipeline:
        return False
    ref = owner(wl)
    if ref.get("kind") in JOB_KINDS:
        return str(ref.get("name", "")).startswith(JOB_PREFIX)
    return ref.get("kind") == "Pod"


def _pod_set_gpus(pod_set: dict, resource: str) -> float:
    """One pod's `resource` from the pod template (requests, else limits: for an extended
    resource the request defaults to the limit)."""
    from kubernetes.utils import parse_quantity

    spec = ((pod_set.get("template") or {}).get("spec") or {})
    total = 0.0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(resource) or (res.get("limits") or {}).get(resource)
        total += float(parse_quantity(value)) if value else 0.0
    return total


def admitted_gpus(wl: dict, resource: str = GPU) -> float:
    """The GPUs the admission holds: per admitted pod set, its resourceUsage of `resource`
    (what Kueue charged the ClusterQueue), else its count times one pod's request."""
    from kubernetes.utils import parse_quantity

    admission = (wl.get("status") or {}).get("admission") or {}
    pod_sets = {p.get("name"): p for p in (wl.get("spec") or {}).get("podSets") or []}
    total = 0.0
    for a in admission.get("podSetAssignments") or []:
        usage = (a.get("resourceUsage") or {}).get(resource)
        if usage is not None:
            total += float(parse_quantity(usage))
            continue
        pod_set = pod_sets.get(a.get("name"), {})
        count = a.get("count") if a.get("count") is not None else pod_set.get("count", 0)
        total += count * _pod_set_gpus(pod_set, resource)
    return total


def requested_gpus(wl: dict, resource: str = GPU) -> float:
    """The GPUs the workload asks for: each pod set's count times one pod's request."""
    return sum(p.get("count", 0) * _pod_set_gpus(p, resource) for p in (wl.get("spec") or {}).get("podSets") or [])


def admitted_flavors(wl: dict, resource: str = GPU) -> str:
    """The flavor of `resource` per admitted pod set (any resource's when none is a GPU)."""
    shown = []
    for a in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        flavors = a.get("flavors") or {}
        flavor = flavors.get(resource) or ",".join(sorted(set(flavors.values())))
        shown.append(flavor)
    unique = sorted(set(shown))
    return ",".join(unique) if unique else ""


def workload_state(wl: dict) -> tuple:
    """(state, reason, message) from the Workload's conditions, as Kueue sets them:
    finished, evicted (the Preempted condition's reason when preempted), admitted,
    reserved (quota reserved, admission checks pending), pending (QuotaReserved False)."""
    finished, evicted = condition(wl, "Finished"), condition(wl, "Evicted")
    admitted, reserved = condition(wl, "Admitted"), condition(wl, "QuotaReserved")
    if is_true(finished):
        return "finished", finished.get("reason", ""), finished.get("message", "")
    if is_true(evicted):
        reason, message = evicted.get("reason", ""), evicted.get("message", "")
        preempted = condition(wl, "Preempted")
        if reason == "Preempted" and is_true(preempted):
            reason, message = f"Preempted/{preempted.get('reason', '')}", preempted.get("message") or message
        return "evicted", reason, message
    if is_true(admitted):
        return "admitted", admitted.get("reason", ""), admitted.get("message", "")
    if is_true(reserved):
        why = admitted or {}
        return "reserved", why.get("reason", ""), why.get("message", "") or reserved.get("message", "")
    if reserved:
        return "pending", reserved.get("reason", ""), reserved.get("message", "")
    if (wl.get("spec") or {}).get("active") is False:
        return "inactive", "Deactivated", "spec.active is false"
    return "pending", "", "not yet considered by Kueue's scheduler"
