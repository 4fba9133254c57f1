"""Multi-worker training on the cluster: the train task launches a JobSet
(`jobset.x-k8s.io/v1alpha2`, the default: what Kueue queues and Kubeflow Trainer v2 builds
on) or a Kubeflow TFJob (`kubeflow.org/v1`, for clusters with the training-operator) whose
workers run `python -m components.train` in the same image, each in the pod shape the
config gives the training pods (components/contracts/pods.py). The task creates the job
and follows it (components/train/follow.py: deleted when it fails, runs past its admitted
time or the run is cancelled; left running for the next attempt to re-attach otherwise).
A worker that fails for good (a config or data error: NON_RETRYABLE_EXIT_CODES) fails its
Job through the Job's podFailurePolicy, and the JobSet's failurePolicy rule fails the JobSet
at once instead of restarting it; a preempted or lost worker restarts the whole JobSet,
within its restart budget. Outside a KFP run an ownerReference to the task's pod lets
Kubernetes collect the job if the task's pod goes away first."""
from __future__ import annotations

import json
import os
import threading
import uuid
from typing import Dict, List, Literal, Optional, Tuple

from pydantic import Field

from components.contracts import storage
from components.contracts.errors import CONFIG_ERROR_EXIT
from components.contracts.pods import PRIORITY_LABEL, PodShape
from components.contracts.settings import Strict
from components.train.follow import (API, MANAGED_KEY, MANAGED_VALUE, WORKFLOW_API, create_or_adopt,  # noqa: F401
                                     follow_job, job_state)
from components.train.kube import (API_ATTEMPTS, API_TIMEOUT, SERVICE_ACCOUNT_TOKEN, TimedApi,  # noqa: F401
                                   current_namespace, kubernetes_api, with_retries)

TF_PORT = 2222
# A worker's exit codes that no restart can fix: components/train/__main__.py exits 2 on a
# GpupipeError (the config, the data). Its Job fails on the first (podFailurePolicy FailJob),
# and the JobSet's rule fails the JobSet on a Job failed that way (reason PodFailurePolicy).
NON_RETRYABLE_EXIT_CODES = (CONFIG_ERROR_EXIT,)
FAIL_FOR_GOOD_RULE = "non-retryable-exit"
WORKERS_ENV = "GPUPIPE_TF_WORKERS"  # JobSet: the workers' host:port list, TF_CONFIG is built from it
# The train task's Argo Workflow (the KFP run; its retries share it), by the downward API: the
# job's name comes from it, so a retried task finds the job its first attempt created.
WORKFLOW_ENV = "GPUPIPE_WORKFLOW"
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
FINISHED_TTL_SECONDS = 24 * 3600  # a finished job, and its pods' logs, stay a day
INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes in each pod of an Indexed Job
POD_NAME_ENV, POD_UID_ENV = "GPUPIPE_POD_NAME", "GPUPIPE_POD_UID"  # the task's own pod (downward API)
# What the launcher asks of the Kubernetes API about its job (follow_job): the launcher Role
# (pipelines/manifests.py launcher_rbac) grants these verbs and no others.
LAUNCHER_VERBS = ("create", "get", "delete")
MANAGED_BY = {MANAGED_KEY: MANAGED_VALUE}
# The workers' ServiceAccount in training.pods.job_namespace, when cluster.service_account names
# none (the task's own is in the run's namespace): `gpupipe manifest rbac` writes it, tokenless.
WORKERS_SERVICE_ACCOUNT = "gpupipe-workers"
# What it asks of the run's Argo Workflow: whether the run was cancelled (follow.run_cancelled).
WORKFLOW_VERBS = ("get",)
# A tuning trial's JobSet and its pods: its trial id (and PRIORITY_LABEL: training.tune.priority_class).
TRIAL_LABEL = "gpupipe/trial"



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
        # OnFailure: a failed worker restarts in place, and so do its MultiWorkerMirroredStrategy
        # peers, which fail when it does (under ExitCode only a replica exiting 128+ restarts, and
        # a peer's exit below 128 fails the TFJob). The operator's backoffLimit counts the
        # container restarts of running pods under OnFailure or Always only (training-operator
        # v1.9 pkg/core/job.go PastBackoffLimit): a whole restart is one per worker.
        spec = {
            "runPolicy": {"backoffLimit": launch.max_restarts * launch.workers, "cleanPodPolicy": "Running",
                          "activeDeadlineSeconds": launch.shape.timeout_seconds,
                          "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS},
            "tfReplicaSpecs": {"Worker": {"replicas": launch.workers, "restartPolicy": "OnFailure",
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
            "failurePolicy": {"maxRestarts": launch.max_restarts, "rules": [
                {"name": FAIL_FOR_GOOD_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": ["worker"]},
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "replicatedJobs": [{"name": "worker", "replicas": 1, "template": {"spec": {
                "parallelism": launch.workers, "completions": launch.workers, "completionMode": "Indexed",
                "backoffLimit": 0, "activeDeadlineSeconds": launch.shape.timeout_seconds,
                "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {
                    "containerName": "trainer", "operator": "In", "values": list(NON_RETRYABLE_EXIT_CODES)}}]},
                "template": template}}}],
        }
        if distributed:
            spec["network"] = {"enableDNSHostnames": True, "subdomain": name}
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": metadata, "spec": spec}


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
    Identity or IRSA binding reads the buckets) when the job runs in the task's namespace, and
    as WORKERS_SERVICE_ACCOUNT in another (training.pods.job_namespace: the task's account is
    not there, and a pod naming none would get that namespace's `default`), without an API
    token mounted: they never call the Kubernetes API, and the task's account may create jobs."""
    if launch.shape.service_account:
        return launch
    if namespace != current_namespace():
        account = WORKERS_SERVICE_ACCOUNT
    if not account:
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
    return follow_job(manifest, api or kubernetes_api(), poll_seconds, launch.shape.timeout_seconds, stopping,
                      workflow=os.environ.get(WORKFLOW_ENV, ""), workflow_namespace=current_namespace())


