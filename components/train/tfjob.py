"""Multi-node training: a Kubeflow TFJob running the same image and entry point
(`python -m components.train`) on W workers, each with G GPUs. The Training Operator
injects TF_CONFIG; worker 0 is the chief and alone keeps the model. The train task
creates the TFJob, follows it to the end, and fails with the operator's reason."""
from __future__ import annotations

import time
from typing import Dict, List, Optional

from components import names
from components.errors import GpupipeError

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"


def tfjob_manifest(name: str, namespace: str, image: str, workers: int, command: List[str], gpus: int = 0,
                   accelerator: str = "nvidia.com/gpu", node_selector: Optional[Dict[str, str]] = None,
                   tolerations: Optional[List[dict]] = None, cpu: Optional[str] = None,
                   memory: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                   backoff_limit: int = 3, service_account: Optional[str] = None,
                   secret_volume: Optional[Dict[str, str]] = None, scratch_mb: int = 0) -> dict:
    """A kubeflow.org/v1 TFJob with `workers` Worker replicas (restartPolicy ExitCode: exit
    143 after a preemption checkpoint is retried; other failures are not). `scratch_mb`: an
    emptyDir of that size per worker for the disk input cache."""
    limits: Dict[str, str] = {}
    if gpus:
        limits[accelerator] = str(gpus)
    if cpu:
        limits["cpu"] = cpu
    if memory:
        limits["memory"] = memory
    container = {
        "name": "tensorflow",  # the Training Operator looks for this container name
        "image": image,
        "command": command,
        "env": [{"name": "TF_USE_LEGACY_KERAS", "value": "1"},
                *({"name": k, "value": v} for k, v in sorted((env or {}).items()))],
        "resources": {"limits": limits},
    }
    pod_spec: dict = {"containers": [container]}
    volumes, mounts = [], []
    if secret_volume:  # e.g. the GCS service-account key, by Secret name
        volumes.append({"name": "gpupipe-secret", "secret": {"secretName": secret_volume["secret"]}})
        mounts.append({"name": "gpupipe-secret", "mountPath": secret_volume["mount"], "readOnly": True})
    if scratch_mb:
        volumes.append({"name": names.SCRATCH_VOLUME, "emptyDir": {"sizeLimit": f"{scratch_mb}Mi"}})
        mounts.append({"name": names.SCRATCH_VOLUME, "mountPath": names.SCRATCH_MOUNT})
        container["env"].append({"name": names.SCRATCH_ENV, "value": names.SCRATCH_MOUNT})
    if volumes:
        pod_spec["volumes"], container["volumeMounts"] = volumes, mounts
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tolerations]
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "gpupipe"}},
        "spec": {
            "runPolicy": {"backoffLimit": backoff_limit, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Worker": {"replicas": workers, "restartPolicy": "ExitCode", "template": {"spec": pod_spec}},
            },
        },
    }


def job_state(tfjob: dict) -> tuple[str, str]:
    """(state, reason) from a TFJob's status conditions: Succeeded, Failed or Running."""
    conditions = tfjob.get("status", {}).get("conditions") or []
    for state in ("Succeeded", "Failed"):
        for c in conditions:
            if c.get("type") == state and c.get("status") == "True":
                return state, f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
    latest = conditions[-1] if conditions else {}
    return latest.get("type", "Pending"), latest.get("message", "")


def run_tfjob(manifest: dict, api, poll_seconds: float = 15.0, timeout_seconds: float = 7 * 24 * 3600) -> str:
    """Creates the TFJob through `api` (kubernetes.client.CustomObjectsApi or anything with
    its create/get methods), follows it, returns the success reason or raises GpupipeError
    with the operator's reason."""
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
    print(f"created TFJob {namespace}/{name} with {manifest['spec']['tfReplicaSpecs']['Worker']['replicas']} workers",
          flush=True)
    deadline = time.monotonic() + timeout_seconds
    last = None
    while time.monotonic() < deadline:
        state, reason = job_state(api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
        if state != last:
            print(f"TFJob {name}: {state} {reason}".rstrip(), flush=True)
            last = state
        if state == "Succeeded":
            return reason
        if state == "Failed":
            raise GpupipeError(f"training.workers: TFJob {namespace}/{name} failed ({reason}); "
                               f"see `kubectl -n {namespace} logs -l training.kubeflow.org/job-name={name}`")
        time.sleep(poll_seconds)
    raise GpupipeError(f"training.workers: TFJob {namespace}/{name} did not finish within {timeout_seconds:.0f}s")


def kubernetes_api():
    """CustomObjectsApi from the pod's service account (in cluster) or the kube config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


def current_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"
