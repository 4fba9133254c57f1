"""The shape of a pod that runs a gpupipe step: resources, GPUs, node placement, secrets,
volumes and a deadline. One shape is built from the config (pipelines/pods.py) and rendered
two ways: onto a KFP task through kfp-kubernetes (pipelines/factory.py) and as the core
PodSpec of the multi-worker training job's workers (components/train/launch.py), so the
two cannot drift apart."""
from __future__ import annotations

import re
from typing import Dict, List, Literal, Optional

from pydantic import Field, model_validator

from components.contracts.settings import Strict


class Toleration(Strict):
    key: str
    operator: Literal["Equal", "Exists"] = "Exists"
    value: Optional[str] = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    @model_validator(mode="after")
    def _value_only_with_equal(self) -> "Toleration":
        if self.operator == "Exists" and self.value is not None:
            raise ValueError(f"toleration '{self.key}': operator Exists takes no value; remove value, or use "
                             "operator: Equal")
        if self.operator == "Equal" and self.value is None:
            raise ValueError(f"toleration '{self.key}': operator Equal needs a value")
        return self


# Kubernetes label keys ([prefix/]name) and values.
# Kueue's labels on what it queues: the LocalQueue, and the WorkloadPriorityClass (production's
# cluster.priority, a tuning trial's training.tune.priority_class).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
_LABEL_NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
LABEL_KEY_RE = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
LABEL_VALUE_RE = re.compile(rf"^{_LABEL_NAME}?$")


def check_labels(labels: Dict[str, str], key: str) -> Dict[str, str]:
    """A pydantic validator body: `labels` unchanged when every key and value is a valid
    Kubernetes label key and value."""
    for name, value in labels.items():
        if not LABEL_KEY_RE.match(name):
            raise ValueError(f"'{name}' is not a Kubernetes label key ({key})")
        if not LABEL_VALUE_RE.match(value):
            raise ValueError(f"'{value}' (for {name}) is not a Kubernetes label value: at most 63 letters, digits, "
                             f"'-', '_' or '.', starting and ending with a letter or digit ({key})")
    return labels


class SecretVolume(Strict):
    secret: str
    mount_path: str


class SecretEnv(Strict):
    """An environment variable taken from one key of a Kubernetes Secret (by name)."""
    secret: str
    key: str


class EmptyDir(Strict):
    name: str
    mount_path: str
    size_limit: str


# The images run as uid 10001 (images/cpu/Dockerfile, images/gpu/Dockerfile: USER 10001); the
# pods gpupipe writes run as it, as the Pod Security Standards' "restricted" profile asks
# (tests/test_pod_security.py checks every pod template against that profile's rules).
IMAGE_UID = 10001
TMP_VOLUME, TMP_MOUNT = "tmp", "/tmp"  # the one writable place under a read-only root filesystem


def restricted_pod_security(uid: int = IMAGE_UID) -> dict:
    """A PodSecurityContext the "restricted" profile accepts: non-root as `uid`, seccomp
    RuntimeDefault."""
    return {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "seccompProfile": {"type": "RuntimeDefault"}}


def restricted_container_security(pod_level: bool = True, uid: int = IMAGE_UID,
                                  read_only_root: bool = True) -> dict:
    """A container SecurityContext the "restricted" profile accepts: no privilege escalation,
    every capability dropped, a read-only root filesystem (scratch and /tmp on emptyDirs).
    `pod_level` False: the pod has no securityContext of its own (KServe under Knative), so the
    container also carries the non-root user and the seccomp profile."""
    security: dict = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                      "readOnlyRootFilesystem": read_only_root}
    if not pod_level:
        security.update(restricted_pod_security(uid))
    return security


class PodShape(Strict):
    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    accelerator: Optional[str] = None
    gpus: int = 0
    node_selector: Dict[str, str] = Field(default_factory=dict)
    tolerations: List[Toleration] = Field(default_factory=list)
    env: Dict[str, str] = Field(default_factory=dict)
    secret_env: Dict[str, SecretEnv] = Field(default_factory=dict, description="variable -> Secret key (secretKeyRef)")
    secret_volumes: List[SecretVolume] = Field(default_factory=list)
    empty_dirs: List[EmptyDir] = Field(default_factory=list)
    image_pull_secrets: List[str] = Field(default_factory=list)
    service_account: Optional[str] = None
    automount_token: Optional[bool] = Field(None, description="False: no API token in the pod (unset: Kubernetes' "
                                                              "default)")
    labels: Dict[str, str] = Field(default_factory=dict, description="pod labels (e.g. Kueue's queue name)")
    timeout_seconds: int = Field(gt=0)

    def resources(self) -> dict:
        """A core ResourceRequirements: GPUs are a limit (Kubernetes sets the request to it)."""
        limits = {"cpu": self.cpu_limit, "memory": self.memory_limit}
        if self.gpus:
            limits[self.accelerator or "nvidia.com/gpu"] = str(self.gpus)
        return {"requests": {"cpu": self.cpu_request, "memory": self.memory_request}, "limits": limits}

    def volumes(self) -> tuple[list, list]:
        """(pod volumes, container volumeMounts)."""
        volumes, mounts = [], []
        for i, sv in enumerate(self.secret_volumes):
            name = f"secret-{i}"
            volumes.append({"name": name, "secret": {"secretName": sv.secret}})
            mounts.append({"name": name, "mountPath": sv.mount_path, "readOnly": True})
        for ed in self.empty_dirs:
            volumes.append({"name": ed.name, "emptyDir": {"sizeLimit": ed.size_limit}})
            mounts.append({"name": ed.name, "mountPath": ed.mount_path})
        return volumes, mounts

    def pod_spec(self, container_name: str, image: str, command: List[str],
                 extra_env: Optional[Dict[str, str]] = None, restart_policy: Optional[str] = None) -> dict:
        """A core/v1 PodSpec with one container of this shape."""
        env = {**self.env, **(extra_env or {})}
        container: dict = {"name": container_name, "image": image, "command": list(command),
                           "env": [{"name": k, "value": v} for k, v in sorted(env.items())]
                           + [{"name": k, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
                              for k, ref in sorted(self.secret_env.items())],
                           "resources": self.resources(),
                           # read-only root only when the pod has a writable /tmp
                           "securityContext": restricted_container_security(
                               read_only_root=any(ed.mount_path == TMP_MOUNT for ed in self.empty_dirs))}
        volumes, mounts = self.volumes()
        spec: dict = {"containers": [container], "activeDeadlineSeconds": self.timeout_seconds,
                      "securityContext": restricted_pod_security()}
        if mounts:
            container["volumeMounts"] = mounts
            spec["volumes"] = volumes
        if self.node_selector:
            spec["nodeSelector"] = dict(sorted(self.node_selector.items()))
        if self.tolerations:
            spec["tolerations"] = [t.model_dump(exclude_none=True) for t in self.tolerations]
        if self.image_pull_secrets:
            spec["imagePullSecrets"] = [{"name": s} for s in self.image_pull_secrets]
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        if self.automount_token is not None:
            spec["automountServiceAccountToken"] = self.automount_token
        if restart_policy:
            spec["restartPolicy"] = restart_policy
        return spec

    def pod_template(self, container_name: str, image: str, command: List[str],
                     extra_env: Optional[Dict[str, str]] = None, restart_policy: Optional[str] = None,
                     labels: Optional[Dict[str, str]] = None) -> dict:
        """A core/v1 PodTemplateSpec: the pod spec and this shape's labels (with `labels`)."""
        return {"metadata": {"labels": {**self.labels, **(labels or {})}},
                "spec": self.pod_spec(container_name, image, command, extra_env, restart_policy)}


# Kubernetes resource quantities (apimachinery's resource.Quantity): a number, then a binary
# (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent, e.g. 500m, 2, 1.5, 4Gi, 8G, 1e9.
_QUANTITY_RE = re.compile(r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?")
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# What kfp 2.13's resource setters take (kfp/dsl/pipeline_task.py: _validate_cpu_request_limit
# and _validate_memory_request_limit, each a re.match ending in $), a subset of the quantities.
_KFP_CPU_RE = re.compile(r"([0-9]*[.])?[0-9]+m?")
_KFP_MEMORY_RE = re.compile(r"[0-9]+(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)?")


def quantity_value(value: str):
    """The Decimal a Kubernetes quantity stands for; None when `value` is not one."""
    from decimal import Decimal

    match = _QUANTITY_RE.fullmatch(value)
    if not match:
        return None
    sign, number, suffix = match.groups()
    amount = Decimal(number) * (-1 if sign == "-" else 1)
    suffix = suffix or ""
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount.scaleb(_DECIMAL[suffix])
    return amount.scaleb(int(suffix[1:]))


def _kfp_memory(amount) -> str:
    """A whole number of bytes in the shortest form kfp's memory setter takes (and Kubernetes)."""
    number = int(amount)
    for suffix, factor in (*sorted(_BINARY.items(), key=lambda kv: -kv[1]),
                           *((s, 10 ** e) for s, e in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6)))):
        if number and number % factor == 0:
            return f"{number // factor}{suffix}"
    return str(number)


def check_quantity(value: Optional[str], key: str, kind: Optional[str] = None) -> Optional[str]:
    """A pydantic validator body: `value` as a Kubernetes quantity that kfp 2.13's resource
    setters also take (a compiled pipeline and a multi-worker job get the same string). Written
    as kfp takes it, it is kept; an equal quantity kfp does not take (1e9, 1.5Gi, 2k CPUs) is
    rewritten in a form it does (1000000000, 1536Mi, 2000); CPU below a millicore is rounded up
    to one, as Kubernetes does. `kind` is cpu or memory (default: memory when `key` says so)."""
    import math

    if value is None:
        return value
    kind = kind or ("memory" if "memory" in key else "cpu")
    amount = quantity_value(value)
    example = "500m or 2 (CPU)" if kind == "cpu" else "4Gi or 8G (memory)"
    if amount is None:
        raise ValueError(f"'{value}' is not a Kubernetes quantity; write e.g. {example} for {key}")
    if amount < 0:
        raise ValueError(f"'{value}' is negative; a {kind} request or limit is 0 or more, e.g. {example} ({key})")
    if kind == "cpu":
        if _KFP_CPU_RE.fullmatch(value):
            return value
        millicores = math.ceil(amount * 1000)
        return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"
    if _KFP_MEMORY_RE.fullmatch(value):
        return value
    if amount != amount.to_integral_value():
        hint = " ('m' is milli: a thousandth of a byte; Mi is mebibytes)" if value.endswith("m") else ""
        raise ValueError(f"'{value}' is not a whole number of bytes{hint}; write e.g. {example} for {key}")
    return _kfp_memory(amount)
