"""The pod shape of each task, from the config: resources, a deadline, secrets, and for the
pods that train, GPUs, node placement and scratch. The KFP tasks (pipelines/factory.py)
and the multi-worker job's workers (components/train/launch.py) both take their shape from
here, so they cannot drift apart."""
from __future__ import annotations

from components.contracts import names
from components.contracts.pods import (PRIORITY_LABEL, QUEUE_LABEL, TMP_MOUNT, TMP_VOLUME, EmptyDir, PodShape, SecretEnv,
                                       SecretVolume, quantity_value)
from pipelines import steps
from pipelines.config import PipelineConfig
from pipelines.resources import StepResources

GCS_KEY_MOUNT = "/var/secrets/gcs"

# /tmp of the pods that train: an emptyDir, so the workers' root filesystem can be read-only
# (Pod Security "restricted"); staging and the local backup go there without a disk cache.
# A cap past which the kubelet evicts the pod, not a reservation.
TMP_SIZE_LIMIT = "20Gi"
LAUNCHER = StepResources(cpu="250m", cpu_limit="500m", memory="512Mi", memory_limit="1Gi")


def step_resources(config: PipelineConfig, step: str) -> StepResources:
    """The step's defaults (its registry entry, pipelines/steps.py) with the config's
    cluster.resources.<step> keys over them. A request raised above the default limit, the
    limit not given, lifts the limit to it (Kubernetes refuses a limit below the request; the
    config model refuses one given so)."""
    base = steps.get(step).resources
    override = config.cluster.resources.get(step)
    if not override:
        return base
    given = override.model_dump(exclude_unset=True, exclude_none=True)
    merged = base.model_copy(update=given)
    for request, limit in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
        wanted, cap = getattr(merged, request), getattr(merged, limit)
        if limit not in given and cap and quantity_value(cap) < quantity_value(wanted):
            merged = merged.model_copy(update={limit: wanted})
    return merged


def _common(config: PipelineConfig) -> dict:
    """What every pod carries: the storage layer's environment (storage.s3, storage.gcs) and secrets by
    reference, never their values."""
    cluster = config.cluster
    common: dict = {"image_pull_secrets": list(cluster.image_pull_secrets),
                    "service_account": cluster.service_account,
                    "env": config.storage.environment(),
                    "secret_env": {name: SecretEnv(secret=secret, key=key)
                                   for name, (secret, key) in config.storage.secret_environment().items()}}
    gcs = config.storage.gcs
    if gcs.credentials_secret:
        common["secret_volumes"] = [SecretVolume(secret=gcs.credentials_secret, mount_path=GCS_KEY_MOUNT)]
        common["env"]["GOOGLE_APPLICATION_CREDENTIALS"] = f"{GCS_KEY_MOUNT}/{gcs.credentials_key}"
    return common


def _shape(resources: StepResources, **extra) -> PodShape:
    return PodShape(cpu_request=resources.cpu, cpu_limit=resources.cpu_limit or resources.cpu,
                    memory_request=resources.memory, memory_limit=resources.memory_limit or resources.memory,
                    timeout_seconds=resources.timeout_seconds, **extra)


def step_shape(config: PipelineConfig, step: str) -> PodShape:
    """The pod of a step that neither trains nor launches training."""
    return _shape(step_resources(config, step), **_common(config))


def queue_labels(config: PipelineConfig) -> dict:
    """Kueue's labels for the GPU workload: the LocalQueue and the WorkloadPriorityClass."""
    labels = {}
    if config.cluster.queue:
        labels[QUEUE_LABEL] = config.cluster.queue
    if config.cluster.priority:
        labels[PRIORITY_LABEL] = config.cluster.priority
    return labels


def training_shape(config: PipelineConfig, queued: bool = True) -> PodShape:
    """The pod (or each worker's pod) that trains: cluster.resources.train's CPU and memory, GPUs, node selector, tolerations (the spot pool's too with training.pods.spot),
    an emptyDir for /tmp and one for the disk input cache, and (`queued`: a pod Kueue admits by itself)
    the queue labels."""
    t = config.training.pods
    resources = step_resources(config, steps.TRAIN)
    common = _common(config)
    empty_dirs = [EmptyDir(name=TMP_VOLUME, mount_path=TMP_MOUNT, size_limit=TMP_SIZE_LIMIT)]
    env = dict(common.pop("env", {}))
    if config.training.disk_cache_budget_mb:
        empty_dirs.append(EmptyDir(name=names.SCRATCH_VOLUME, mount_path=names.SCRATCH_MOUNT,
                                   size_limit=f"{config.training.disk_cache_budget_mb}Mi"))
        env[names.SCRATCH_ENV] = names.SCRATCH_MOUNT
    node_selector, tolerations = dict(t.node_selector), list(t.tolerations)
    if t.spot:
        node_selector.update(config.cluster.spot_node_selector)
        tolerations += [tol for tol in config.cluster.spot_tolerations if tol not in tolerations]
    return _shape(resources, accelerator=t.accelerator, gpus=t.gpus, node_selector=node_selector,
                  tolerations=tolerations, empty_dirs=empty_dirs, env=env,
                  labels=queue_labels(config) if queued else {}, **common)


def launcher_shape(config: PipelineConfig) -> PodShape:
    """The train task that launches the workers' job (GPU training, or workers > 1): it creates
    and follows the job, holds no GPU."""
    timeout = step_resources(config, steps.TRAIN).timeout
    return _shape(LAUNCHER.model_copy(update={"timeout": timeout}), **_common(config))
