"""Following the workers' job (the train task's launcher): create it or re-attach to the one
an earlier attempt of this task created, follow it to its end, and delete it only when that
is right on the cluster:
- the job failed (its own restart budget is spent, or a worker failed for good: a
  non-retryable exit code, which its podFailurePolicy turns into one failure);
- it ran past the train task's timeout, counted in admitted time only: a JobSet waiting in
  Kueue is suspended (spec.suspend), and that time does not count, as the Job controller
  resets a resumed Job's startTime for its own activeDeadlineSeconds;
- the run was cancelled, read from the run's Argo Workflow: KFP's terminate sets
  spec.activeDeadlineSeconds to 0 (backend resource_manager.go TerminateWorkflow,
  util.GetTerminatePatch), Argo's stop and terminate set spec.shutdown, a deleted run
  deletes the Workflow.
A SIGTERM that is not a cancel (an eviction, a node drain: Argo's emissary forwards SIGTERM
either way) and an API that stays down leave the job running: the next attempt of the task
re-attaches to it by its name (launch.job_name)."""
from __future__ import annotations

import signal
import threading
import time
from typing import Optional

from components.contracts.errors import GpupipeError
from components.train.kube import TimedApi, with_retries

MANAGED_KEY, MANAGED_VALUE = "app.kubernetes.io/managed-by", "gpupipe"
WORKFLOW_API = ("argoproj.io", "v1alpha1", "workflows")
FOLLOW_API_DEADLINE = 900.0  # the API down this long while following: the launcher stops, the job runs on
# kind -> (group, version, plural, Kind): the jobs the launcher makes
API = {"jobset": ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
       "tfjob": ("kubeflow.org", "v1", "tfjobs", "TFJob")}


def job_state(job: dict) -> tuple[str, str]:
    """(Succeeded | Failed | the latest condition | Pending, reason) from a JobSet's or a
    TFJob's status conditions."""
    conditions = job.get("status", {}).get("conditions") or []
    for state, types in (("Succeeded", ("Succeeded", "Completed")), ("Failed", ("Failed",))):
        for c in conditions:
            if c.get("type") in types and c.get("status") == "True":
                return state, f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
    latest = [c for c in conditions if c.get("status") == "True"] or conditions
    return (latest[-1].get("type", "Pending"), latest[-1].get("message", "")) if latest else ("Pending", "")


def suspended(job: dict) -> bool:
    """Whether the job waits (Kueue holds a queued JobSet or TFJob suspended until it admits it)."""
    spec = job.get("spec", {})
    return bool(spec.get("suspend") or spec.get("runPolicy", {}).get("suspend"))


def create_or_adopt(api, manifest: dict, group: str, version: str, plural: str, attempts: int = 30) -> bool:
    """Creates the job; True. When it exists (409: an earlier attempt of this task made it,
    then lost its pod), follows that one instead; False. One that already failed is
    deleted and created anew."""
    from kubernetes.client.exceptions import ApiException

    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    for _ in range(attempts):
        try:
            with_retries(lambda: api.create_namespaced_custom_object(group, version, namespace, plural, manifest),
                         f"created {manifest['kind']} {namespace}/{name}")
            return True
        except ApiException as err:
            if err.status != 409:
                raise
        try:
            existing = with_retries(lambda: api.get_namespaced_custom_object(group, version, namespace, plural, name),
                                    f"read {manifest['kind']} {namespace}/{name}")
        except ApiException as err:
            if err.status == 404:  # deleted meanwhile: create again
                continue
            raise
        if existing.get("metadata", {}).get("labels", {}).get(MANAGED_KEY) != MANAGED_VALUE:
            raise GpupipeError(f"training: {manifest['kind']} {namespace}/{name} exists and is not gpupipe's; "
                               f"delete it (kubectl -n {namespace} delete {plural} {name}) or rename the run")
        if job_state(existing)[0] != "Failed":
            return False
        api.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                            body={"propagationPolicy": "Foreground"})
        time.sleep(1.0)
    raise GpupipeError(f"training: {manifest['kind']} {namespace}/{name} could not be created anew; "
                       f"delete it (kubectl -n {namespace} delete {plural} {name}) and retry the run")


def run_cancelled(api, namespace: str, workflow: str) -> Optional[bool]:
    """True when the run's Argo Workflow is being stopped (see the module's docstring) or is
    gone; False when it runs on; None when it cannot be read (no workflow: not a KFP run)."""
    from kubernetes.client.exceptions import ApiException

    if not workflow:
        return None
    try:
        found = with_retries(lambda: api.get_namespaced_custom_object(*WORKFLOW_API[:2], namespace, WORKFLOW_API[2],
                                                                       workflow),
                             f"read the run's Workflow {namespace}/{workflow}", deadline=60.0)
    except ApiException as err:
        return True if err.status == 404 else None
    except GpupipeError:
        return None
    spec, metadata = found.get("spec", {}), found.get("metadata", {})
    return bool(spec.get("shutdown") or spec.get("activeDeadlineSeconds") == 0 or metadata.get("deletionTimestamp"))


class _Stopped(Exception):
    """SIGTERM reached the task (the run was cancelled, or the pod is being evicted or deleted)."""


def follow_job(manifest: dict, api, poll_seconds: float = 15.0, timeout_seconds: Optional[float] = None,
               stopping: Optional[threading.Event] = None, workflow: str = "", workflow_namespace: str = "") -> str:
    """Creates the job through `api` (kubernetes.client.CustomObjectsApi), or re-attaches to
    it, follows it and returns the success reason; GpupipeError when it fails or runs past
    `timeout_seconds` of admitted time (then it is deleted). SIGTERM (in another thread than
    the main one: when `stopping` is set) exits 143, deleting the job only when the run's
    Workflow (`workflow` in `workflow_namespace`) says the run was cancelled, or when there
    is no Workflow to ask (not a KFP run: the job is the task's pod's, and goes with it)."""
    group, version = manifest["apiVersion"].split("/")
    kind = manifest["kind"]
    plural = next(p for _, _, p, k in API.values() if k == kind)
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    api = api if isinstance(api, TimedApi) else TimedApi(api)
    if create_or_adopt(api, manifest, group, version, plural):
        print(f"created {kind} {namespace}/{name}", flush=True)
    else:
        print(f"re-attached to {kind} {namespace}/{name}: created by an earlier attempt of this task", flush=True)

    def stop(signum, frame):
        raise _Stopped()

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    budget = timeout_seconds or 7 * 24 * 3600
    delete = not workflow  # on an unexpected error: a KFP run's retry re-attaches, so the job stays
    try:
        last, admitted, tick = None, 0.0, time.monotonic()
        while True:
            try:
                job = with_retries(lambda: api.get_namespaced_custom_object(group, version, namespace, plural, name),
                                   f"followed {kind} {namespace}/{name} (it runs on: retry the run to re-attach)",
                                   attempts=10 ** 6, deadline=FOLLOW_API_DEADLINE)
            except GpupipeError:
                delete = False  # the API is down, not the job: nothing to delete it through, nor a reason to
                raise
            now = time.monotonic()
            if not suspended(job):
                admitted += now - tick
            tick = now
            state, reason = job_state(job)
            if state != last:
                print(f"{kind} {name}: {state} {reason}".rstrip(), flush=True)
                last = state
            if state == "Succeeded":
                delete = False
                return reason
            if state == "Failed":
                delete = True
                raise GpupipeError(f"training.pods.workers: {kind} {namespace}/{name} failed ({reason}); see `kubectl -n "
                                   f"{namespace} logs -l app.kubernetes.io/managed-by=gpupipe --prefix`")
            if admitted >= budget:
                delete = True
                raise GpupipeError(f"training.pods.workers: {kind} {namespace}/{name} did not finish within the train "
                                   f"task's timeout ({budget:.0f} s admitted, time queued not counted); raise "
                                   "cluster.resources.train.timeout")
            if stopping is None:
                time.sleep(poll_seconds)
            elif stopping.wait(poll_seconds):
                raise _Stopped()
    except _Stopped:
        cancelled = run_cancelled(api, workflow_namespace or namespace, workflow)
        delete = cancelled is not False
        if delete:
            print(f"SIGTERM: the run was cancelled{'' if cancelled else ' (or is not a KFP run)'}: deleting {kind} "
                  f"{namespace}/{name}", flush=True)
        else:
            print(f"SIGTERM, the run not cancelled (an eviction or a drain): leaving {kind} {namespace}/{name} "
                  "running for the task's next attempt to re-attach", flush=True)
        raise SystemExit(143) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if delete:
            with_retries(lambda: api.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                                                     body={"propagationPolicy": "Foreground"}),
                         f"deleted {kind} {namespace}/{name}")
            print(f"deleted {kind} {namespace}/{name}", flush=True)
