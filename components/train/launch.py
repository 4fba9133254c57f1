"""Multi-worker training on the cluster: the train task launches a JobSet
(`jobset.x-k8s.io/v1alpha2`, the default: what Kueue queues and Kubeflow Trainer v2 builds
on) or a Kubeflow TFJob (`kubeflow.org/v1`, for clusters with the training-operator) whose
workers run `python -m components.train` in the same image, each in the pod shape the
config gives the training pods (components/contracts/pods.py). The task creates the job,
follows it to its end and deletes it when the job fails, when the task is stopped
(SIGTERM on cancel) or when it gives up; an ownerReference to the task's pod lets
Kubernetes collect it if the task's pod goes away first."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from typing import Dict, List, Literal, Optional, Tuple

from pydantic import Field

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.contracts.pods import PRIORITY_LABEL, PodShape
from components.contracts.settings import Strict

TF_PORT = 2222
WORKERS_ENV = "GPUPIPE_TF_WORKERS"  # JobSet: the workers' host:port list, TF_CONFIG is built from it
# The train task's Argo Workflow (the KFP run; its retries share it), by the downward API: the
# job's name comes from it, so a retried task finds the job its first attempt created.
WORKFLOW_ENV = "GPUPIPE_WORKFLOW"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
FINISHED_TTL_SECONDS = 24 * 3600  # a finished job, and its pods' logs, stay a day
INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in each pod of an Indexed Job
POD_NAME_ENV, POD_UID_ENV = "GPUPIPE_POD_NAME", "GPUPIPE_POD_UID"  # the task's own pod (downward API)
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
# What the launcher asks of the Kubernetes API about its job (follow_job): the launcher Role
# (pipelines/manifests.py launcher_rbac) grants these verbs and no others.
LAUNCHER_VERBS = ("create", "get", "delete")
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpupipe"}
_MANAGED_KEY = "app.kubernetes.io/managed-by"
# A tuning trial's JobSet and its pods: its trial id (and PRIORITY_LABEL: training.tune.priority_class).
TRIAL_LABEL = "gpupipe/trial"

# kind -> (group, version, plural, Kind)
API = {"jobset": ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
       "tfjob": ("kubeflow.org", "v1", "tfjobs", "TFJob")}


class Launch(Strict):
    """What the train task needs to launch the workers (pipelines/factory.py builds it)."""

    kind: Literal["jobset", "tfjob"] = "jobset"
    image: str
    workers: int = Field(ge=1)
    namespace: str = Field("", description="\"\": the train task's own namespace")
    shape: PodShape
    max_restarts: int = Field(3, ge=0, description="whole-job restarts (a preempted worker exits 143)")
    labels: Dict[str, str] = Field(default_factory=dict, description="the job's labels: Kueue queues it as one unit")
    pod_labels: Dict[str, str] = Field(default_factory=dict, description="more labels of the job's pod template")


def worker_command(*, examples: str, statistics: str, model_dir: str, home: str, columns, settings) -> List[str]:
    """The command every worker of a job runs (`python -m components.train`, its flags in
    components/train/__main__.py): the chief's model at `model_dir`, and the backup a retry
    finds, the TensorBoard logs and the report under `home`. The train task's job and each
    tuning trial's job (components/train/tune.py) both run it; `columns` and `settings` are
    the Columns and TrainSettings models, passed as JSON."""
    return ["python", "-m", "components.train", "--examples", examples, "--statistics", statistics,
            "--model-dir", model_dir, "--columns", columns.model_dump_json(),
            "--settings", settings.model_dump_json(), "--backup-dir", storage.join(home, "backup"),
            "--log-dir", storage.join(home, "tensorboard"), "--report-dir", storage.join(home, "report")]


def worker_hosts(name: str, workers: int) -> List[str]:
    """JobSet's stable DNS names for the pods of replicated job `worker` (one Indexed Job)."""
    return [f"{name}-worker-0-{i}.{name}:{TF_PORT}" for i in range(workers)]


def tf_config_from_env(env: Optional[dict] = None) -> Optional[str]:
    """TF_CONFIG for a JobSet worker, from the host list and the pod's completion index;
    None outside a JobSet (TF_CONFIG given, or a single process)."""
    env = os.environ if env is None else env
    if env.get("TF_CONFIG") or not env.get(WORKERS_ENV):
        return None
    hosts = env[WORKERS_ENV].split(",")
    return json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": int(env.get(INDEX_ENV, 0))}})


def owner_references(namespace: str, env: Optional[dict] = None) -> list:
    """The task's pod as the job's owner, when it runs in the job's namespace."""
    env = os.environ if env is None else env
    if not (env.get(POD_NAME_ENV) and env.get(POD_UID_ENV)) or namespace != current_namespace():
        return []
    return [{"apiVersion": "v1", "kind": "Pod", "name": env[POD_NAME_ENV], "uid": env[POD_UID_ENV],
             "blockOwnerDeletion": False, "controller": False}]


def job_manifest(launch: Launch, name: str, namespace: str, command: List[str],
                 owners: Optional[list] = None) -> dict:
    """The JobSet or TFJob running `command` on `launch.workers` pods of `launch.shape`."""
    group, version, _, kind = API[launch.kind]
    metadata = {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **launch.labels}}
    if owners:
        metadata["ownerReferences"] = owners
    env = {"TF_USE_LEGACY_KERAS": "1"}
    distributed = launch.workers > 1
    if launch.kind == "tfjob":
        # The training-operator injects TF_CONFIG and looks for the container "tensorflow".
        template = launch.shape.pod_template("tensorflow", launch.image, command, env, labels={**MANAGED_BY, **launch.pod_labels})
        template["spec"]["containers"][0]["ports"] = [{"name": "tfjob-port", "containerPort": TF_PORT}]
        spec = {
            "runPolicy": {"backoffLimit": launch.max_restarts, "cleanPodPolicy": "Running",
                          "activeDeadlineSeconds": launch.shape.timeout_seconds,
                          "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS},
            "tfReplicaSpecs": {"Worker": {"replicas": launch.workers, "restartPolicy": "ExitCode",
                                          "template": template}},
        }
    else:
        if distributed:  # one worker is a single process: no TF_CONFIG, its local GPUs mirrored
            env[WORKERS_ENV] = ",".join(worker_hosts(name, launch.workers))
        template = launch.shape.pod_template("trainer", launch.image, command, env, restart_policy="Never",
                                             labels={**MANAGED_BY, **launch.pod_labels})
        if distributed:
            template["spec"]["containers"][0]["ports"] = [{"name": "tf", "containerPort": TF_PORT}]
        spec = {
            # Any failed worker (preempted, its node lost) fails its Job; the JobSet then restarts
            # every worker together (MultiWorkerMirroredStrategy needs all of them), up to the
            # restart budget, and they resume from the backup.
            "failurePolicy": {"maxRestarts": launch.max_restarts},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["worker"]},
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": {
                "parallelism": launch.workers, "completions": launch.workers, "completionMode": "Indexed",
                "backoffLimit": 0, "activeDeadlineSeconds": launch.shape.timeout_seconds,
                "template": template}}}],
        }
        if distributed:
            spec["network"] = {"enableDNSHostnames": True, "subdomain": name}
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": metadata, "spec": spec}


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


TRANSIENT_STATUS = (429, 500, 502, 503, 504)  # the API server busy, restarting or behind a flaky proxy
API_ATTEMPTS = 8
API_TIMEOUT = (10.0, 30.0)  # each request: (connect, read) seconds (the kubernetes client's _request_timeout)
API_DEADLINE = 180.0  # all tries of one call: a retry starts only if it can end by then


class TimedApi:
    """A kubernetes client API object whose every call carries API_TIMEOUT (the client's
    own per-request `_request_timeout`; without it a request waits for ever on an API server
    that accepts and never answers), unless the caller gives one."""

    def __init__(self, api, timeout=None):
        self._api, self._timeout = api, timeout

    def __getattr__(self, name: str):
        attr = getattr(self._api, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            kwargs.setdefault("_request_timeout", self._timeout or API_TIMEOUT)
            return attr(*args, **kwargs)

        return call


def with_retries(call, what: str, attempts: Optional[int] = None, first_wait: float = 0.5,
                 deadline: Optional[float] = None):
    """`call()`, tried again with jittered backoff (0.5 s doubling, at most 15 s) when the
    Kubernetes API answers 429/5xx or the connection breaks or times out, within `attempts`
    tries and `deadline` seconds (no retry starts that could end later: its wait and one
    whole request, API_TIMEOUT); GpupipeError in one line when every try failed. Other
    answers (404, 409, 403) are the caller's to read."""
    import random

    import urllib3
    from kubernetes.client.exceptions import ApiException

    attempts, deadline = attempts or API_ATTEMPTS, deadline or API_DEADLINE
    started, why, tried = time.monotonic(), "", 0
    for attempt in range(attempts):
        tried += 1
        try:
            return call()
        except ApiException as err:
            if err.status not in TRANSIENT_STATUS:
                raise
            why = f"HTTP {err.status} {err.reason or ''}".strip()
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as err:
            why = type(getattr(err, "reason", None) or err).__name__  # MaxRetryError: what the one try met
        wait = min(first_wait * 2 ** attempt, 15.0)
        if attempt + 1 >= attempts or time.monotonic() - started + wait + sum(API_TIMEOUT) > deadline:
            break
        time.sleep(random.uniform(0.5, 1.0) * wait)
    raise GpupipeError(f"training: the Kubernetes API failed {tried} times in {time.monotonic() - started:.0f} s "
                       f"while the launcher {what} ({why}); check the API server (kubectl get --raw /readyz) and "
                       "retry the run")


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
        if existing.get("metadata", {}).get("labels", {}).get(_MANAGED_KEY) != MANAGED_BY[_MANAGED_KEY]:
            raise GpupipeError(f"training: {manifest['kind']} {namespace}/{name} exists and is not gpupipe's; "
                               f"delete it (kubectl -n {namespace} delete {plural} {name}) or rename the run")
        if job_state(existing)[0] != "Failed":
            return False
        api.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                            body={"propagationPolicy": "Foreground"})
        time.sleep(1.0)
    raise GpupipeError(f"training: {manifest['kind']} {namespace}/{name} could not be created anew; "
                       f"delete it (kubectl -n {namespace} delete {plural} {name}) and retry the run")


class _Stopped(Exception):
    """SIGTERM reached the task (the run was cancelled or the pod is being deleted)."""


def follow_job(manifest: dict, api, poll_seconds: float = 15.0, timeout_seconds: Optional[float] = None,
               stopping: Optional[threading.Event] = None) -> str:
    """Creates the job through `api` (kubernetes.client.CustomObjectsApi), follows it and
    returns the success reason. Deletes it, then raises GpupipeError, when it fails or
    runs past the deadline; deletes it and exits 143 on SIGTERM (in another thread than the
    main one: when `stopping` is set, by the main thread's SIGTERM handler)."""
    group, version = manifest["apiVersion"].split("/")
    plural = next(p for g, v, p, k in API.values() if k == manifest["kind"])
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    kind = manifest["kind"]
    api = api if isinstance(api, TimedApi) else TimedApi(api)
    if create_or_adopt(api, manifest, group, version, plural):
        print(f"created {kind} {namespace}/{name}", flush=True)
    else:
        print(f"re-attached to {kind} {namespace}/{name}: created by an earlier attempt of this task", flush=True)

    def stop(signum, frame):
        raise _Stopped()

    previous = signal.signal(signal.SIGTERM, stop) if threading.current_thread() is threading.main_thread() else None
    deadline = time.monotonic() + (timeout_seconds or 7 * 24 * 3600)
    finished = False
    try:
        last = None
        while time.monotonic() < deadline:
            state, reason = job_state(with_retries(
                lambda: api.get_namespaced_custom_object(group, version, namespace, plural, name),
                f"followed {kind} {namespace}/{name}"))
            if state != last:
                print(f"{kind} {name}: {state} {reason}".rstrip(), flush=True)
                last = state
            if state == "Succeeded":
                finished = True
                return reason
            if state == "Failed":
                raise GpupipeError(f"training.pods.workers: {kind} {namespace}/{name} failed ({reason}); see `kubectl -n "
                                   f"{namespace} logs -l app.kubernetes.io/managed-by=gpupipe --prefix`")
            if stopping is None:
                time.sleep(poll_seconds)
            elif stopping.wait(poll_seconds):
                raise _Stopped()
        raise GpupipeError(f"training.pods.workers: {kind} {namespace}/{name} did not finish within the train task's "
                           "timeout; raise cluster.resources.train.timeout")
    except _Stopped:
        print(f"SIGTERM: deleting {kind} {namespace}/{name}", flush=True)
        raise SystemExit(143) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not finished:
            with_retries(lambda: api.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                                                     body={"propagationPolicy": "Foreground"}),
                         f"deleted {kind} {namespace}/{name}")
            print(f"deleted {kind} {namespace}/{name}", flush=True)


def task_service_account(token_path: str = SERVICE_ACCOUNT_TOKEN) -> Optional[str]:
    """The ServiceAccount the train task runs as, from its token's subject
    (`system:serviceaccount:<namespace>:<name>`); None outside a pod."""
    import base64

    try:
        with open(token_path, encoding="utf-8") as f:
            payload = f.read().strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    parts = str(claims.get("sub", "")).split(":")
    return parts[3] if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None


def with_task_service_account(launch: Launch, namespace: str, account: Optional[str]) -> Launch:
    """Workers without cluster.service_account run as the task's ServiceAccount (its Workload
    Identity or IRSA binding reads the buckets) when the job runs in the task's namespace,
    without its API token mounted: they never call the Kubernetes API, and that account may
    create jobs."""
    if launch.shape.service_account or not account or namespace != current_namespace():
        return launch
    shape = launch.shape.model_copy(update={"service_account": account, "automount_token": False})
    return launch.model_copy(update={"shape": shape})


def job_name(env: Optional[dict] = None) -> str:
    """The job's name: from the run (its Argo Workflow), so every attempt of this task names
    the same job; a new one where the run is not known (no Argo workflow label)."""
    import hashlib

    env = os.environ if env is None else env
    workflow = env.get(WORKFLOW_ENV, "")
    return "gpupipe-train-" + (hashlib.sha256(workflow.encode()).hexdigest()[:12] if workflow else uuid.uuid4().hex[:8])


def trial_launch(launch: Launch, trial_id: str, priority_class: str) -> Launch:
    """A tuning trial's job: production's, at the tuning WorkloadPriorityClass (on the job,
    which Kueue reads, and on its pods), labelled with the trial's id."""
    labels = {PRIORITY_LABEL: priority_class, TRIAL_LABEL: trial_id}
    return launch.model_copy(update={"labels": {**launch.labels, **labels},
                                     "pod_labels": {**launch.pod_labels, **labels}})


def run_training_job(launch: Launch, command: List[str], api=None, poll_seconds: float = 15.0,
                     trial: Optional[Tuple[str, str]] = None, stopping: Optional[threading.Event] = None) -> str:
    """The train task's GPU path: a job named for this run's train task, in `launch.namespace`
    or the task's own, followed to its end. Its owner is not the task's pod, so a retry of the
    task (its pod lost with its node) re-attaches to it; without a run's name it is owned by
    the pod (Kubernetes collects it with the pod), and a finished job goes after a day.
    `trial` (id, priority class): a tuning trial's job, `<the job's name>-t<id>`
    (components/train/tune.py); `stopping`: follow_job's."""
    namespace = launch.namespace or current_namespace()
    name = job_name()
    if trial:
        launch, name = trial_launch(launch, *trial), f"{name}-t{trial[0]}"
    launch = with_task_service_account(launch, namespace, task_service_account())
    owners = [] if os.environ.get(WORKFLOW_ENV) else owner_references(namespace)
    manifest = job_manifest(launch, name, namespace, command, owners)
    return follow_job(manifest, api or kubernetes_api(), poll_seconds, launch.shape.timeout_seconds, stopping)


def kubernetes_api():
    """CustomObjectsApi from the pod's service account (in cluster) or the kube config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.retries = 0  # urllib3 tries once: the retries are with_retries', within its deadline
    return TimedApi(client.CustomObjectsApi(client.ApiClient(configuration)))


def current_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"
