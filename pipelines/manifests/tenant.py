"""A team's share of the GPU pool through Kueue: its Namespace, ResourceQuota and LimitRange,
the pool's ResourceFlavors (on-demand and spot), the team's ClusterQueue and LocalQueue, and
the launcher's RBAC; quotas are the workers' CPU and memory scaled to the team's GPUs.
"""
from __future__ import annotations

import re
from typing import Optional

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig
from pipelines.manifests.rbac import launcher_rbac

ON_DEMAND_FLAVOR, SPOT_FLAVOR = "gpupipe-on-demand", "gpupipe-spot"
# The team namespace's LimitRange request for containers that set none (Argo's wait sidecar)
SIDECAR_REQUEST = {"cpu": "250m", "memory": "512Mi"}


def _added(a: str, b: str) -> str:
    from kubernetes.utils import parse_quantity

    return str(parse_quantity(a) + parse_quantity(b))


def _per_gpu(quantity: str, gpus_per_worker: int, gpu_quota: int, unit: str = "") -> str:
    """A worker's CPU or memory, scaled from its GPUs to `gpu_quota` GPUs: exact where it can
    be written exactly (bytes; millicores), else rounded up to the next byte or millicore."""
    import math

    from kubernetes.utils import parse_quantity

    total = parse_quantity(quantity) * gpu_quota / gpus_per_worker
    if unit == "Mi":
        whole = math.ceil(total)
        for suffix, size in (("Gi", 2 ** 30), ("G", 10 ** 9), ("Mi", 2 ** 20), ("M", 10 ** 6)):
            if whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    return str(int(total)) if total == int(total) else f"{math.ceil(total * 1000)}m"


# The Kueue API versions `manifest tenant` writes (--kueue-api): v1beta2, served since Kueue v0.15
# and stored since v0.16; v1beta1, which v0.19 still serves but marks deprecated ("Use v1beta2
# instead", the CRDs' deprecationWarning). Of the fields written here only the ClusterQueue's
# cohort is renamed: spec.cohort in v1beta1, spec.cohortName in v1beta2
# (apis/kueue/v1beta1/clusterqueue_conversion.go).
KUEUE_APIS = ("v1beta2", "v1beta1")
COHORT_FIELD = {"v1beta2": "cohortName", "v1beta1": "cohort"}

# The tuning trials' WorkloadPriorityClass value: below 0, Kueue's priority of a workload
# naming no class, so production runs with or without a class outrank trials.
TUNING_PRIORITY = -100


def tenant_manifests(config: PipelineConfig, team: str, gpu_quota: int, spot_gpu_quota: int = 0,
                     borrowing_limit: Optional[int] = None, cohort: str = "gpupipe-pool",
                     service_account: str = "default-editor", kueue_api: str = KUEUE_APIS[0]) -> list:
    """What one team needs to share the GPU pool through Kueue: its Namespace, a
    ResourceQuota capping its GPU requests, a LimitRange giving unset containers requests,
    the pool's ResourceFlavors (on-demand and spot nodes), the team's ClusterQueue (its
    nominal GPU quota per flavor, what it may borrow from the cohort, preemption by
    priority), the LocalQueue its runs name in cluster.queue, and the launcher's RBAC.
    `borrowing_limit` None leaves borrowingLimit out (Kueue: no limit within the cohort);
    0 writes borrowingLimit: 0 (the team never borrows). `kueue_api`: the Kueue objects'
    version (KUEUE_APIS)."""
    from pipelines.pods import training_shape

    if kueue_api not in KUEUE_APIS:
        raise GpupipeError(f"manifest tenant --kueue-api {kueue_api}: give {' or '.join(KUEUE_APIS)} (v1beta2 from Kueue "
                           "v0.15 on; kubectl api-versions | grep kueue lists what the cluster serves)")
    kueue = f"kueue.x-k8s.io/{kueue_api}"
    t = config.training.pods
    if not t.gpus:
        raise GpupipeError("training.pods.gpus: 0, so nothing of this pipeline uses the GPU quota; set training.pods.gpus "
                           "and training.pods.accelerator to share the GPU pool")
    # Kueue's ClusterQueue webhook (pkg/webhooks/clusterqueue_webhook.go) refuses a negative
    # nominalQuota or borrowingLimit, and a borrowingLimit without a cohort.
    for flag, value in (("--gpu-quota", gpu_quota), ("--spot-gpu-quota", spot_gpu_quota),
                        ("--borrowing-limit", borrowing_limit)):
        if value is not None and value < 0:
            raise GpupipeError(f"manifest tenant {flag} {value}: a GPU count is 0 or more (Kueue refuses a negative quota); "
                               f"give {flag} N with N >= 0")
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", cohort or "") \
            or len(cohort) > 253:
        raise GpupipeError(f"manifest tenant --cohort {cohort!r}: not a Kueue cohort name (lowercase letters, digits, '-' "
                           "and '.'); give e.g. --cohort gpupipe-pool")
    shape = training_shape(config, queued=False)
    cpu, memory = shape.cpu_request, shape.memory_request  # a JobSet or TFJob worker: its one container
    if t.launcher == "pod":  # the Argo pod: Kueue counts its wait sidecar too, at this LimitRange's request
        cpu, memory = _added(cpu, SIDECAR_REQUEST["cpu"]), _added(memory, SIDECAR_REQUEST["memory"])
    gpu = t.accelerator or "nvidia.com/gpu"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/tenant": team}
    queue = config.cluster.queue or "gpus"
    on_demand_nodes = {k: v for k, v in t.node_selector.items() if k not in config.cluster.spot_node_selector}

    def flavor(name: str, nodes: dict, tolerations: list) -> dict:
        spec: dict = {"nodeLabels": nodes} if nodes else {}
        if tolerations:
            spec["tolerations"] = [tol.model_dump(exclude_none=True) for tol in tolerations]
        return {"apiVersion": kueue, "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpupipe"}}, "spec": spec}

    def quotas(gpus: int, borrow: Optional[int]) -> list:
        resources = [{"name": "cpu", "nominalQuota": _per_gpu(cpu, t.gpus, gpus)},
                     {"name": "memory", "nominalQuota": _per_gpu(memory, t.gpus, gpus, "Mi")},
                     {"name": gpu, "nominalQuota": gpus}]
        if borrow is not None:
            resources[0]["borrowingLimit"] = _per_gpu(cpu, t.gpus, borrow)
            resources[1]["borrowingLimit"] = _per_gpu(memory, t.gpus, borrow, "Mi")
            resources[2]["borrowingLimit"] = borrow
        return resources

    # The launched jobs run in training.pods.job_namespace when set: their LocalQueue, their GPU
    # ResourceQuota and the ClusterQueue's namespaceSelector go there (Kueue looks the queue up
    # in the workload's namespace), beside the team's namespace, where the runs' pods are.
    jobs_ns = (t.job_namespace if t.launcher != "pod" else None) or team
    namespaces = sorted({team, jobs_ns})
    flavors = [{"name": ON_DEMAND_FLAVOR, "resources": quotas(gpu_quota, borrowing_limit)}]
    if spot_gpu_quota:
        flavors.append({"name": SPOT_FLAVOR, "resources": quotas(spot_gpu_quota, borrowing_limit)})
    selector = {"matchLabels": {"kubernetes.io/metadata.name": team}} if len(namespaces) == 1 else {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}
    return [
        *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}} for ns in
          [team, *([jobs_ns] if jobs_ns != team else [])]),
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpupipe-gpus", "namespace": jobs_ns,
                                                                     "labels": labels},
         "spec": {"hard": {f"requests.{gpu}": str(gpu_quota + spot_gpu_quota + (borrowing_limit or 0))}}},
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "gpupipe-defaults", "namespace": team,
                                                                  "labels": labels},
         "spec": {"limits": [{"type": "Container", "defaultRequest": dict(SIDECAR_REQUEST),
                              "default": {"cpu": "1", "memory": "2Gi"}}]}},
        flavor(ON_DEMAND_FLAVOR, on_demand_nodes, []),
        *([flavor(SPOT_FLAVOR, {**on_demand_nodes, **config.cluster.spot_node_selector},
                  list(config.cluster.spot_tolerations))] if spot_gpu_quota else []),
        {"apiVersion": kueue, "kind": "ClusterQueue", "metadata": {"name": team, "labels": labels},
         "spec": {COHORT_FIELD[kueue_api]: cohort,
                  "namespaceSelector": selector,
                  "queueingStrategy": "BestEffortFIFO",
                  "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", gpu], "flavors": flavors}]}},
        {"apiVersion": kueue, "kind": "LocalQueue",
         "metadata": {"name": queue, "namespace": jobs_ns, "labels": labels}, "spec": {"clusterQueue": team}},
        *(launcher_rbac(config, team, service_account) if t.launcher != "pod" else []),
        *tuning_priority_class(config, kueue_api),
    ]


def tuning_priority_class(config: PipelineConfig, kueue_api: str = KUEUE_APIS[0]) -> list:
    """With training.tune and trials launched as jobs: the WorkloadPriorityClass they name (cluster-scoped,
    the same object for every team). Its value, TUNING_PRIORITY, is below Kueue's 0 for a
    workload that names no class and below any production class of 0 or more, so the team's
    ClusterQueue (preemption withinClusterQueue: LowerPriority) gives a production run the
    GPUs trials hold, and trials are admitted on what production leaves idle. Production's
    own class (cluster.priority) is the administrator's: not written here."""
    from pipelines.factory import launched

    tune = config.training.tune
    if tune is None or not launched(config):  # trials in the train task's own pod name no class
        return []
    return [{"apiVersion": f"kueue.x-k8s.io/{kueue_api}", "kind": "WorkloadPriorityClass",
             "metadata": {"name": tune.priority_class, "labels": {"app.kubernetes.io/managed-by": "gpupipe"}},
             "value": TUNING_PRIORITY,
             "description": "gpupipe tuning trials (training.tune): below production runs, which preempt them"}]
