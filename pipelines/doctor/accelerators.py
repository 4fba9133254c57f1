"""Doctor's accelerator check: for each kind of pod the config puts on GPUs (training.pods, and
serving.resources unless `--serving none`), some node carries the pod's node selector
labels, advertises enough of the accelerator (status.allocatable, which the device plugin
fills: e.g. nvidia.com/gpu from NVIDIA's k8s-device-plugin), and has no NoSchedule or
NoExecute taint the pod does not tolerate.

One request: `GET /api/v1/nodes?labelSelector=<the node selector>` (a NodeList). A taint is
tolerated as Kubernetes matches them (k8s.io/api core/v1 toleration.go ToleratesTaint: the
same key, the effect empty or equal, Exists or an equal value). A taint keyed by the
accelerator's own name is only a warning: the ExtendedResourceToleration admission plugin
(kubernetes plugin/pkg/admission/extendedresourcetoleration), which GKE enables, adds that
toleration to any pod asking for the resource.
"""
from __future__ import annotations

from typing import List, NamedTuple

from pipelines.doctor.cluster import Cluster, refused
from pipelines.doctor.line import Line

BLOCKING = ("NoSchedule", "NoExecute")  # PreferNoSchedule only steers
BACKSLASH = "\\"  # kubectl's custom-columns escape a dot in a key


class GpuPods(NamedTuple):
    key: str  # the config section that asks for them
    accelerator: str
    gpus: int
    node_selector: dict
    tolerations: list  # components.contracts.pods.Toleration


def gpu_pods(config, serving: str) -> List[GpuPods]:
    """The config's pods that ask for GPUs, with their placement."""
    from pipelines.pods import training_shape

    found = []
    if config.training.pods.gpus:
        shape = training_shape(config)
        found.append(GpuPods("training.pods", shape.accelerator, shape.gpus, shape.node_selector, shape.tolerations))
    r = config.serving.resources
    if r.gpus and serving != "none":
        found.append(GpuPods("serving.resources", r.accelerator, r.gpus, r.node_selector, r.tolerations))
    return found


def tolerates(tolerations: list, taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect or t.key != taint.key:
            continue
        if t.operator == "Exists" or t.value == (taint.value or ""):
            return True
    return False


def _allocatable(node, accelerator: str) -> int:
    value = ((node.status.allocatable if node.status else None) or {}).get(accelerator, "0")
    try:
        return int(value)
    except ValueError:
        return 0


def accelerator_line(cluster: Cluster, pods: GpuPods) -> Line:
    from kubernetes.client.exceptions import ApiException

    selector = ",".join(f"{k}={v}" for k, v in sorted(pods.node_selector.items()))
    shown = f" labelled {selector}" if selector else ""
    what = f"{pods.key}: {pods.gpus} {pods.accelerator} per pod"
    kubectl = f"kubectl get nodes{' -l ' + selector if selector else ''} -o custom-columns=NAME:.metadata.name," \
              f"GPUS:.status.allocatable.{pods.accelerator.replace('.', BACKSLASH + '.')}"
    try:
        listed = cluster._call(cluster.client.CoreV1Api(cluster.api).list_node, label_selector=selector or None)
    except ApiException as err:
        line = refused(f"{what}: the nodes", err, f"ask for list on nodes, or check with {kubectl}")
        return Line(True, line.text + " (not checked)", warning=True)
    nodes = list(listed.items if listed is not None else [])
    if not nodes:
        fix = (f"label the GPU pool's nodes (kubectl label nodes NODE {selector}) or fix {pods.key}.node_selector"
               if selector else "add a GPU node pool")
        return Line(False, f"{what}: no node{shown}: {fix}")
    enough = [n for n in nodes if _allocatable(n, pods.accelerator) >= pods.gpus]
    if not enough:
        most = max(_allocatable(n, pods.accelerator) for n in nodes)
        return Line(False, f"{what}: the {len(nodes)} node(s){shown} advertise at most {most} {pods.accelerator} "
                           f"(status.allocatable): install the GPU device plugin (NVIDIA's k8s-device-plugin or GPU "
                           f"operator) on them, or lower {pods.key}.gpus; check with {kubectl}")
    usable, untolerated = [], {}
    for n in enough:
        blocking = [t for t in (n.spec.taints if n.spec else None) or [] if t.effect in BLOCKING
                    and not tolerates(pods.tolerations, t)]
        if blocking:
            untolerated[n.metadata.name] = blocking
        else:
            usable.append(n)
    if usable:
        return Line(True, f"{what}: {len(usable)} node(s){shown} advertise {pods.accelerator} (allocatable up to "
                          f"{max(_allocatable(n, pods.accelerator) for n in usable)})")
    taints = sorted({f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for ts in untolerated.values()
                     for t in ts})
    fix = f"add them to {pods.key}.tolerations (key, operator, value, effect)"
    if all(t.key == pods.accelerator for ts in untolerated.values() for t in ts):
        return Line(True, f"{what}: the node(s){shown} with {pods.accelerator} are tainted {', '.join(taints)}, "
                          "which pods asking for the GPU tolerate only where the ExtendedResourceToleration admission "
                          f"plugin runs (GKE); elsewhere {fix}", warning=True)
    return Line(False, f"{what}: every node{shown} with {pods.accelerator} has a taint the pods do not tolerate "
                       f"({', '.join(taints)}): {fix}")


def accelerator_lines(cluster: Cluster, config, serving: str) -> List[Line]:
    """One line per kind of GPU pod the config asks for (none without GPUs)."""
    return [accelerator_line(cluster, pods) for pods in gpu_pods(config, serving)]
