"""`gpupipe queue` and `gpupipe usage`: the shared GPU pool as Kueue sees it.

`queue CONFIG` lists the config's GPU workloads in its LocalQueue (`cluster.queue`) with
their Kueue status: the position from Kueue's visibility API, the pending or eviction
reason from the Workload's conditions, the admitted flavor. `usage` adds up GPU-hours
(and a cost) per team from the finished Workloads, and from local run reports.

What is read, and where its shape is defined (kubernetes-sigs/kueue v0.19.2, the version the
tenant manifests are checked against):

- Workloads, `kueue.x-k8s.io/v1beta1` (apis/kueue/v1beta1/workload_types.go; Kueue 0.19
  stores v1beta2 and still serves v1beta1): `spec.queueName` (the job's
  kueue.x-k8s.io/queue-name label), `spec.podSets[].{name,count,template}`,
  `status.conditions[]` (metav1.Condition: type, status, reason, message,
  lastTransitionTime) of the types QuotaReserved, Admitted, Evicted, Preempted, Finished,
  `status.admission.{clusterQueue,podSetAssignments[].{name,flavors,resourceUsage,count}}`
  and `status.accumulatedPastExexcutionTimeSeconds` (so spelled in v1beta1: the admitted
  time of earlier admit-evict cycles, pkg/workload/admissionchecks.go SyncAdmittedCondition).
  The job framework names a Workload `<kind>-<job>-<hash>` and makes the job its controller
  owner (pkg/controller/jobframework/reconciler.go ConstructWorkload); it copies no job
  labels unless the Kueue configuration lists them (labelKeysToCopy).
- The visibility API, `visibility.kueue.x-k8s.io/v1beta1` (apis/visibility/v1beta1/types.go):
  `GET .../namespaces/<ns>/localqueues/<lq>/pendingworkloads` answers a
  PendingWorkloadsSummary whose items (PendingWorkload) carry metadata.name,
  positionInClusterQueue and positionInLocalQueue, both counted from 0
  (pkg/visibility/storage/pending_workloads_lq.go).
- Condition reasons: a workload that does not fit has QuotaReserved False with reason
  Pending and the flavor assigner's message ("couldn't assign flavors to pod set main:
  insufficient unused quota for nvidia.com/gpu in flavor gpupipe-spot, 1 more needed";
  pkg/scheduler/scheduler.go requeueAndUpdate, pkg/scheduler/flavorassigner); a preempted
  one has Evicted True with reason Preempted and a Preempted condition whose reason is
  InClusterQueue, InCohortReclamation, InCohortFairSharing or InCohortReclaimWhileBorrowing
  (pkg/scheduler/preemption/preemption.go); a finished one Finished True, reason Succeeded
  or Failed (pkg/workload/finish/finish.go). Readmission sets Evicted and Preempted back to
  False (pkg/workload/workload.go SetQuotaReservation).
"""
from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, List, Optional

from components.contracts.errors import GpupipeError

KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta1", "workloads"
VISIBILITY_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues/{name}/pendingworkloads"
GPU = "nvidia.com/gpu"
JOB_PREFIX = "gpupipe-train-"  # the launcher's JobSet/TFJob names (components/train/launch.py run_training_job)
JOB_KINDS = ("JobSet", "TFJob")
PIPELINE_LABEL = "gpupipe/pipeline"  # on a Workload only when Kueue's labelKeysToCopy lists it
TIMEOUT = (5, 30)  # seconds: to connect, to read
PAGE = 500
FINISHED_SHOWN = 3  # Kueue keeps a finished Workload while its job exists; the launcher leaves completed jobs
DOCS = "docs/queue.md"


# ---------------------------------------------------------------- the connection

@dataclass
class Connection:
    api: object  # kubernetes.client.ApiClient
    kubeconfig: str  # what the user named (or the default), for messages
    context: str
    server: str
    namespace: str  # the context's namespace ("" when it names none)

    @property
    def where(self) -> str:
        return f"kubeconfig {self.kubeconfig}, context {self.context or '(in-cluster)'}"


def connect(kubeconfig: Optional[str] = None, context: Optional[str] = None) -> Connection:
    """An ApiClient from the kubeconfig (`--kubeconfig`, else $KUBECONFIG, else
    ~/.kube/config) and its context (`--context`, else current-context), as kubectl and the
    kubernetes client take them; in a pod without a kubeconfig, its service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    given = kubeconfig or os.environ.get("KUBECONFIG", "")
    shown = given or "~/.kube/config"
    paths = [os.path.expanduser(p) for p in (given or "~/.kube/config").split(os.pathsep) if p]
    configuration = client.Configuration()
    configuration.retries = 1
    if not any(os.path.isfile(p) for p in paths):
        if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
            return Connection(client.ApiClient(configuration), "(in-cluster service account)", "",
                              configuration.host, _pod_namespace())
        raise GpupipeError(f"kubeconfig {shown}: no such file; pass --kubeconfig PATH (or set KUBECONFIG) to the "
                           "cluster's kubeconfig, e.g. from `gcloud container clusters get-credentials`")
    try:
        contexts, active = config.list_kube_config_contexts(config_file=given or None)
        names = [c["name"] for c in contexts]
        chosen = context or (active or {}).get("name", "")
        if context and context not in names:
            raise GpupipeError(f"kubeconfig {shown}: no context {context!r} (it has {', '.join(names) or 'none'}); "
                               "pass --context with one of them (kubectl config get-contexts)")
        config.load_kube_config(config_file=given or None, context=context, client_configuration=configuration)
    except ConfigException as err:
        first = (str(err).splitlines() or ["invalid"])[0]
        raise GpupipeError(f"kubeconfig {shown}: {first}; pass --kubeconfig PATH and --context NAME naming a "
                           "cluster (kubectl config get-contexts)") from None
    namespace = next((c.get("context", {}).get("namespace", "") for c in contexts if c["name"] == chosen), "")
    return Connection(client.ApiClient(configuration), shown, chosen, configuration.host, namespace)


def _pod_namespace() -> str:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
    except OSError:
        return ""


def _api_error(conn: Connection, what: str, err: Exception, scope: str = "in that namespace (a Role)") -> GpupipeError:
    """One line for a failed request: unreachable, refused (RBAC), not served (no Kueue)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(err, ApiException):
        status = err.status
        try:
            message = json.loads(err.body or "{}").get("message", "") or err.reason
        except ValueError:
            message = err.reason or ""
        if status in (401, 403):
            return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} refused to {what} ({status}: "
                                f"{message}); ask the cluster's administrator for list on "
                                f"workloads.kueue.x-k8s.io {scope} ({DOCS}), or use a context that has it")
        if status == 404:
            return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} does not serve "
                                f"{KUEUE_GROUP}/{KUEUE_VERSION} workloads (404: {message}); install Kueue on that "
                                "cluster, or pass --context for the cluster that runs it")
        return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} failed to {what} ({status}: "
                            f"{message}); try again, or check the API server's health (kubectl get --raw /readyz)")
    reason = _reason(err)
    return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} is unreachable ({reason}); check that "
                        "the context names the right cluster and that it is reachable from here (kubectl "
                        "--context ... get namespaces), or pass --kubeconfig/--context for another one")


def _reason(err: Exception) -> str:
    inner = getattr(err, "reason", None) or err
    text = str(inner)
    for known in ("Connection refused", "Name or service not known", "timed out", "No route to host",
                  "certificate verify failed"):
        if known.lower() in text.lower():
            return known.lower()
    return (text.splitlines() or [type(err).__name__])[0][-160:]


def _transport_errors() -> tuple:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    return ApiException, urllib3.exceptions.HTTPError, OSError


def list_workloads(conn: Connection, namespace: Optional[str]) -> List[dict]:
    """Every Workload in `namespace` (None: in every namespace), through CustomObjectsApi,
    page by page (limit and continue)."""
    from kubernetes import client

    api = client.CustomObjectsApi(conn.api)
    items, token = [], None
    where = f"namespace {namespace}" if namespace else "all namespaces"
    while True:
        kwargs = {"limit": PAGE, "_request_timeout": TIMEOUT, **({"_continue": token} if token else {})}
        try:
            if namespace:
                page = api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS, **kwargs)
            else:
                page = api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, WORKLOADS, **kwargs)
        except _transport_errors() as err:
            raise _api_error(conn, f"list workloads in {where}", err,
                             "in that namespace (a Role)" if namespace else "cluster-wide (a ClusterRole)") from None
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def pending_positions(conn: Connection, namespace: str, queue: str):
    """({workload name: PendingWorkload}, note): Kueue's visibility API for the LocalQueue;
    without it (not served, refused, unknown queue) no positions and a note saying why."""
    try:
        summary = conn.api.call_api(VISIBILITY_PATH, "GET", path_params={"namespace": namespace, "name": queue},
                                    query_params=[("limit", 1000)], header_params={"Accept": "application/json"},
                                    response_type="object", auth_settings=["BearerToken"],
                                    _return_http_data_only=True, _request_timeout=TIMEOUT)
    except _transport_errors() as err:
        status = getattr(err, "status", None)
        if status in (401, 403):
            why = (f"the visibility API refused ({status}): positions need get on "
                   "localqueues/pendingworkloads in visibility.kueue.x-k8s.io")
        elif status == 404:
            why = (f"the visibility API knows no LocalQueue {queue} in {namespace} (404), or is not served "
                   "(APIService v1beta1.visibility.kueue.x-k8s.io)")
        elif status:
            why = f"the visibility API failed ({status}: {getattr(err, 'reason', '')})"
        else:
            why = f"the visibility API is unreachable ({_reason(err)})"
        return {}, f"note: positions unknown: {why}; see {DOCS}"
    return {(item.get("metadata") or {}).get("name"): item for item in (summary or {}).get("items") or []}, ""


# ---------------------------------------------------------------- reading a Workload

def _condition(wl: dict, type_: str) -> Optional[dict]:
    return next((c for c in (wl.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def _true(c: Optional[dict]) -> bool:
    return bool(c) and c.get("status") == "True"


def _time(value: Optional[str]) -> Optional[datetime]:
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
    finished, evicted = _condition(wl, "Finished"), _condition(wl, "Evicted")
    admitted, reserved = _condition(wl, "Admitted"), _condition(wl, "QuotaReserved")
    if _true(finished):
        return "finished", finished.get("reason", ""), finished.get("message", "")
    if _true(evicted):
        reason, message = evicted.get("reason", ""), evicted.get("message", "")
        preempted = _condition(wl, "Preempted")
        if reason == "Preempted" and _true(preempted):
            reason, message = f"Preempted/{preempted.get('reason', '')}", preempted.get("message") or message
        return "evicted", reason, message
    if _true(admitted):
        return "admitted", admitted.get("reason", ""), admitted.get("message", "")
    if _true(reserved):
        why = admitted or {}
        return "reserved", why.get("reason", ""), why.get("message", "") or reserved.get("message", "")
    if reserved:
        return "pending", reserved.get("reason", ""), reserved.get("message", "")
    if (wl.get("spec") or {}).get("active") is False:
        return "inactive", "Deactivated", "spec.active is false"
    return "pending", "", "not yet considered by Kueue's scheduler"


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
            "priority_class": (wl.get("spec") or {}).get("priorityClassName", ""),
            "state": state, "reason": reason, "message": message,
            "finished": (_condition(wl, "Finished") or {}).get("lastTransitionTime", "") if state == "finished" else "",
            "position_in_local_queue": pending.get("positionInLocalQueue") if pending else None,
            "position_in_cluster_queue": pending.get("positionInClusterQueue") if pending else None,
            "cluster_queue": ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue", ""),
            "flavor": admitted_flavors(wl, resource),
            "gpus": admitted_gpus(wl, resource) if state in ("admitted", "reserved") else requested_gpus(wl, resource),
        })
    order = {"admitted": 0, "reserved": 1, "evicted": 2, "pending": 3, "inactive": 4, "finished": 5}
    return sorted(rows, key=lambda r: (order.get(r["state"], 9), r["position_in_local_queue"]
                                       if r["position_in_local_queue"] is not None else 1 << 30, r["created"]))


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


# ---------------------------------------------------------------- usage

def workload_usage(wl: dict, resource: str = GPU) -> Optional[dict]:
    """A finished Workload's GPU time: its admitted seconds (the earlier admit-evict cycles'
    accumulatedPastExexcutionTimeSeconds, plus the last admission's, from the Admitted
    condition's lastTransitionTime to the Finished condition's) times the GPUs its admitted
    pod sets hold. None for a workload not finished."""
    finished = _condition(wl, "Finished")
    if not _true(finished):
        return None
    status = wl.get("status") or {}
    end = _time(finished.get("lastTransitionTime"))
    seconds = float(status.get("accumulatedPastExexcutionTimeSeconds")
                    or status.get("accumulatedPastExecutionTimeSeconds") or 0)  # the v1beta2 spelling
    admitted = _condition(wl, "Admitted")
    start = _time(admitted.get("lastTransitionTime")) if _true(admitted) else None
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
        end = _time(u["finished"])
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


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_usage(teams: List[dict], since: datetime, until: datetime, price: Optional[float],
                 local: Optional[dict], asked: List[str]) -> str:
    period = f"{_iso(since)} to {_iso(until)}"
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


# ---------------------------------------------------------------- the commands

def cmd_queue(args: argparse.Namespace) -> int:
    from pipelines.config import load_config

    config = load_config(args.config)
    queue = config.cluster.queue
    if not queue:
        raise GpupipeError(f"{args.config}: cluster.queue is unset, so its train pods and jobs carry no "
                           "kueue.x-k8s.io/queue-name label and Kueue queues none of them; set cluster.queue to the "
                           "team's LocalQueue (gpupipe manifest --tenant makes one named gpus)")
    resource = config.training.pods.accelerator or GPU
    conn = connect(args.kubeconfig, args.context)
    namespace = args.namespace or conn.namespace or "default"
    workloads = [w for w in list_workloads(conn, namespace) if is_gpupipe_workload(w, queue, config.name)]
    waiting = [w for w in workloads if workload_state(w)[0] in ("pending", "evicted")]
    positions, note = pending_positions(conn, namespace, queue) if waiting else ({}, "")
    rows = queue_rows(workloads, positions, resource)
    if args.json:
        print(json.dumps({"pipeline": config.name, "namespace": namespace, "queue": queue, "workloads": rows,
                          **({"note": note} if note else {})}, indent=2))
    else:
        print(render_queue(rows, namespace, queue, config.name, note))
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    now = datetime.now(timezone.utc)
    until = parse_when(args.until, now, "--until") if args.until else now
    since = parse_when(args.since, until, "--since")
    if since >= until:
        raise GpupipeError(f"usage --since {args.since}: the period starts at {_iso(since)}, not before its end "
                           f"{_iso(until)}; give an earlier --since or a later --until")
    if args.price_per_gpu_hour is not None and args.price_per_gpu_hour < 0:
        raise GpupipeError(f"usage --price-per-gpu-hour {args.price_per_gpu_hour}: a price is 0 or more; give e.g. "
                           "--price-per-gpu-hour 0.35")
    config = None
    if args.config:
        from pipelines.config import load_config

        config = load_config(args.config)
    price = args.price_per_gpu_hour
    if price is None and config is not None:
        price = config.training.gpu_hour_price or None
    resource = (config.training.pods.accelerator if config else None) or GPU
    asked = list(dict.fromkeys((args.namespace or []) + (args.team or [])))
    conn = connect(args.kubeconfig, args.context)
    workloads = []
    if asked:
        for namespace in asked:
            workloads += list_workloads(conn, namespace)
    else:
        workloads = list_workloads(conn, None)
    teams, records = usage_by_team(workloads, since, until, resource)
    local = local_usage(config.name, Path(args.runs_dir), since, until) if config is not None else None
    if args.json:
        print(json.dumps({"since": _iso(since), "until": _iso(until), "price_per_gpu_hour": price,
                          "teams": [{**t, **({"cost": t["gpu_hours"] * price} if price else {})} for t in teams],
                          "workloads": records, **({"local": local} if local is not None else {})}, indent=2))
    else:
        print(render_usage(teams, since, until, price, local, asked))
    return 0


def _kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")


def add_commands(sub) -> None:
    """`queue` and `usage` on the gpupipe command line (pipelines/cli.py build_parser)."""
    p = sub.add_parser("queue", help="the config's GPU workloads in its Kueue LocalQueue: state, position (Kueue's "
                                     "visibility API), pending or eviction reason, admitted flavor")
    p.add_argument("config")
    p.add_argument("--namespace", help="the LocalQueue's namespace, the team's (default: the context's namespace, "
                                       "else default)")
    _kube_args(p)
    p.set_defaults(func=cmd_queue)

    p = sub.add_parser("usage", help="GPU-hours (and cost) per team from the finished Kueue workloads over a period, "
                                     "and from the local run reports")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--namespace", action="append", help="a team's namespace; repeat for more")
    which.add_argument("--team", action="append", help="a team (its namespace, as gpupipe manifest --tenant makes "
                                                       "it); repeat for more")
    which.add_argument("-A", "--all-namespaces", action="store_true", help="every team: each namespace with "
                                                                           "finished workloads")
    p.add_argument("--since", default="7d", help="the period's start: 7d, 12h, 2w, or a date (default: 7d)")
    p.add_argument("--until", help="the period's end: a date or ISO time (default: now)")
    p.add_argument("--price-per-gpu-hour", type=float, help="the cost of one GPU-hour (default: the config's "
                                                            "training.gpu_hour_price)")
    p.add_argument("--config", help="a config: its training.gpu_hour_price and accelerator, and its local runs")
    p.add_argument("--runs-dir", default="runs", help="with --config: where its local runs are (default: runs/)")
    _kube_args(p)
    p.set_defaults(func=cmd_usage)
