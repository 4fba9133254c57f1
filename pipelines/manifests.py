"""Kubernetes manifests derived from a config (pure functions: config in, dict out)."""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig


def kserve_inference_service(config: PipelineConfig, serving_base: str = "") -> dict:
    """A KServe InferenceService with the TensorFlow predictor reading the versioned model
    directory `<serving base>/<model name>/` (KServe's TF runtime serves its integer versions)."""
    srv = config.serving
    base = serving_base or srv.base
    if "://" not in base:
        raise GpupipeError(f"serving.base: '{base}' is a local path and KServe needs a URI it can read; "
                           "pass --serving-base gs://BUCKET/PATH (or s3://, pvc://)")
    predictor = {
        "tensorflow": {
            "storageUri": f"{base.rstrip('/')}/{srv.model_name}",
            "runtimeVersion": srv.tf_serving_version,
        }
    }
    if srv.service_account:
        predictor["serviceAccountName"] = srv.service_account
    metadata = {"name": srv.model_name, "labels": {"app.kubernetes.io/managed-by": "gpupipe",
                                                   "gpupipe/pipeline": config.name}}
    if srv.namespace:
        metadata["namespace"] = srv.namespace
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": metadata,
            "spec": {"predictor": predictor}}


def launcher_rbac(config: PipelineConfig, namespace: str, service_account: str) -> list:
    """The Role and RoleBinding the train task needs to launch its multi-worker job in
    `namespace`: create, follow and delete JobSets or TFJobs, as the pipeline's runner
    (`service_account`: `pipeline-runner` on standalone Kubeflow Pipelines, `default-editor`
    in a Kubeflow profile namespace)."""
    from components.train.launch import API

    group, _, plural, _ = API[config.training.launcher]
    name = f"gpupipe-{config.name}-launcher"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/pipeline": config.name}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": [{"apiGroups": [group], "resources": [plural], "verbs": ["create", "get", "list", "watch", "delete"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [role, binding]


ON_DEMAND_FLAVOR, SPOT_FLAVOR = "gpupipe-on-demand", "gpupipe-spot"


def _per_gpu(quantity: str, gpus_per_worker: int, gpu_quota: int, unit: str = "") -> str:
    """A worker's CPU or memory, scaled from its GPUs to `gpu_quota` GPUs (rounded up)."""
    import math

    from kubernetes.utils import parse_quantity

    total = parse_quantity(quantity) * gpu_quota / gpus_per_worker
    if unit == "Mi":
        return f"{math.ceil(total / 2 ** 20)}Mi"
    return str(math.ceil(total))


def tenant_manifests(config: PipelineConfig, team: str, gpu_quota: int, spot_gpu_quota: int = 0,
                     borrowing_limit: int = 0, cohort: str = "gpupipe-pool",
                     service_account: str = "default-editor") -> list:
    """What one team needs to share the GPU pool through Kueue: its Namespace, a
    ResourceQuota capping its GPU requests, a LimitRange giving unset containers requests,
    the pool's ResourceFlavors (on-demand and spot nodes), the team's ClusterQueue (its
    nominal GPU quota per flavor, what it may borrow from the cohort, preemption by
    priority), the LocalQueue its runs name in cluster.queue, and the launcher's RBAC."""
    from pipelines.pods import training_shape

    t = config.training
    if not t.gpus:
        raise GpupipeError("training.gpus: 0, so nothing of this pipeline uses the GPU quota; set training.gpus "
                           "and training.accelerator to share the GPU pool")
    shape = training_shape(config, queued=False)
    gpu = t.accelerator or "nvidia.com/gpu"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/tenant": team}
    queue = config.cluster.queue or "gpus"
    on_demand_nodes = {k: v for k, v in t.node_selector.items() if k not in config.cluster.spot_node_selector}

    def flavor(name: str, nodes: dict, tolerations: list) -> dict:
        spec: dict = {"nodeLabels": nodes} if nodes else {}
        if tolerations:
            spec["tolerations"] = [tol.model_dump(exclude_none=True) for tol in tolerations]
        return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpupipe"}}, "spec": spec}

    def quotas(gpus: int, borrow: int) -> list:
        resources = [{"name": "cpu", "nominalQuota": _per_gpu(shape.cpu_request, t.gpus, gpus)},
                     {"name": "memory", "nominalQuota": _per_gpu(shape.memory_request, t.gpus, gpus, "Mi")},
                     {"name": gpu, "nominalQuota": gpus}]
        if borrow:
            resources[0]["borrowingLimit"] = _per_gpu(shape.cpu_request, t.gpus, borrow)
            resources[1]["borrowingLimit"] = _per_gpu(shape.memory_request, t.gpus, borrow, "Mi")
            resources[2]["borrowingLimit"] = borrow
        return resources

    flavors = [{"name": ON_DEMAND_FLAVOR, "resources": quotas(gpu_quota, borrowing_limit)}]
    if spot_gpu_quota:
        flavors.append({"name": SPOT_FLAVOR, "resources": quotas(spot_gpu_quota, borrowing_limit)})
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": labels}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpupipe-gpus", "namespace": team,
                                                                     "labels": labels},
         "spec": {"hard": {f"requests.{gpu}": str(gpu_quota + spot_gpu_quota + borrowing_limit)}}},
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "gpupipe-defaults", "namespace": team,
                                                                  "labels": labels},
         "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "250m", "memory": "512Mi"},
                              "default": {"cpu": "1", "memory": "2Gi"}}]}},
        flavor(ON_DEMAND_FLAVOR, on_demand_nodes, []),
        *([flavor(SPOT_FLAVOR, {**on_demand_nodes, **config.cluster.spot_node_selector},
                  list(config.cluster.spot_tolerations))] if spot_gpu_quota else []),
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": team, "labels": labels},
         "spec": {"cohort": cohort,
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}},
                  "queueingStrategy": "BestEffortFIFO",
                  "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", gpu], "flavors": flavors}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": queue, "namespace": team, "labels": labels}, "spec": {"clusterQueue": team}},
        *launcher_rbac(config, team, service_account),
    ]
