"""What the serving manifests share: the labels and metadata every object carries, the model
server's resources, and the serving base a server reads (a URI, never a local path).
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from components.contracts.settings import S3Settings
from pipelines.config import PipelineConfig


def object_labels(config: PipelineConfig) -> dict:
    return {"app.kubernetes.io/name": config.serving.model_name, "app.kubernetes.io/managed-by": "gpupipe",
            "gpupipe/pipeline": config.name}


def object_metadata(config: PipelineConfig, name: str) -> dict:
    metadata = {"name": name, "labels": object_labels(config)}
    if config.serving.namespace:
        metadata["namespace"] = config.serving.namespace
    return metadata


def server_resources(config: PipelineConfig) -> dict:
    """The model container's ResourceRequirements. A GPU is asked for as both request and
    limit (Kubernetes takes an extended resource's request only equal to its limit); KServe
    knows a GPU predictor by the limit (kserve v0.15.2 pkg/utils/utils.go IsGPUEnabled)."""
    r = config.serving.resources
    resources = {"requests": {"cpu": r.cpu_request, "memory": r.memory_request},
                 "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit}}
    if r.gpus:
        resources["requests"][r.accelerator] = resources["limits"][r.accelerator] = str(r.gpus)
    return resources


def server_placement(config: PipelineConfig) -> dict:
    """The PodSpec fields that put the server on its nodes: nodeSelector and tolerations."""
    r = config.serving.resources
    placement = {}
    if r.node_selector:
        placement["nodeSelector"] = dict(sorted(r.node_selector.items()))
    if r.tolerations:
        placement["tolerations"] = [t.model_dump(exclude_none=True) for t in r.tolerations]
    return placement


def server_batching(config: PipelineConfig) -> dict:
    """serving.batching's four parameters, each as set or sized to the server (CPU or GPU)."""
    return config.serving.batching.sized(config.serving.resources)


def served_base(config: PipelineConfig, serving_base: str, schemes: tuple, fix: str) -> str:
    base = (serving_base or config.serving.base).rstrip("/")
    if not base.startswith(schemes):
        raise GpupipeError(f"serving.base: '{base}' is a local path and the model server needs a URI it can read; "
                           f"{fix}")
    return base


def s3_settings(config: PipelineConfig) -> S3Settings:
    return config.storage.s3 or S3Settings()  # no storage.s3: AWS S3 with its defaults


def fixed_replicas(config: PipelineConfig, server: str) -> int:
    """The replica count of a GPU server no autoscaler gpupipe writes can scale: an HPA on CPU
    or memory says little of a GPU server's load, and concurrency and rps are Knative's.
    serving.autoscaling's min_replicas and max_replicas must then agree."""
    scaling = config.serving.autoscaling
    if scaling.min_replicas != scaling.max_replicas:
        raise GpupipeError(
            f"serving.autoscaling: {server} on GPU pods (serving.resources.gpus 1) has no autoscaler gpupipe writes "
            "(an HPA on CPU or memory says little of a GPU server's load; concurrency and rps are Knative's); set "
            f"min_replicas and max_replicas both to the replicas wanted (now {scaling.min_replicas} and "
            f"{scaling.max_replicas}), or serve with KServe Serverless and serving.autoscaling.metric concurrency or rps")
    return scaling.max_replicas
