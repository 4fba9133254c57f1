"""Every pod template gpupipe writes passes the Pod Security Standards' "restricted" profile:
the JobSet and TFJob workers of a multi-worker run, the TF Serving Deployment and the KServe
predictor. The profile's checks are read from Kubernetes' pod-security-admission
(kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/, one check_*.go
per control; "restricted" is every baseline check and the restricted ones), and applied
here as that code states them. The objects' schemas are checked in tests/test_k8s_objects.py.

Not covered here: the KFP tasks' own pods (Argo builds them; kfp-kubernetes 1.5 has no setter
for a securityContext) and Knative's queue-proxy. KServe v0.15.2's storage-initializer has no
securityContext of its own (pkg/webhook/admission/pod/storage_initializer_injector.go);
`gpupipe manifest kserve --restricted` gives it one through a ClusterStorageContainer, and
tests/test_storage_container.py checks the pod KServe builds with it against these rules."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from components.contracts.pods import IMAGE_UID, TMP_MOUNT
from components.train.launch import Launch, job_manifest
from pipelines.config import load_config
from pipelines.factory import launch_json
from pipelines.manifests import kserve_inference_service, tf_serving_manifests
from tests.fixtures.configs import with_gpu_serving, with_pods

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
POLICY = "kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/"
COMMAND = ["python", "-m", "components.train"]


def _containers(pod: dict) -> list:
    """visitor.go visitContainers: init containers, containers and ephemeral containers."""
    return [*pod.get("initContainers", []), *pod.get("containers", []), *pod.get("ephemeralContainers", [])]


def _security(container: dict) -> dict:
    return container.get("securityContext") or {}


def _pod_and_containers(pod: dict, field: str, allowed) -> list:
    """The pod-level-or-every-container rule of check_runAsNonRoot.go and
    check_seccompProfile_restricted.go: a container may leave `field` unset when the pod sets
    an allowed value; no one may set a disallowed one."""
    problems = []
    pod_value = (pod.get("securityContext") or {}).get(field)
    if pod_value is not None and not allowed(pod_value):
        problems.append(f"pod must not set securityContext.{field}={pod_value}")
    for c in _containers(pod):
        value = _security(c).get(field)
        if value is not None and not allowed(value):
            problems.append(f"container {c['name']} must not set securityContext.{field}={value}")
        elif value is None and (pod_value is None or not allowed(pod_value)):
            problems.append(f"pod or container {c['name']} must set securityContext.{field}")
    return problems


def baseline_problems(pod: dict) -> list:
    """The baseline checks (each ... check_<ID>.go under POLICY):
    - privileged: no container with securityContext.privileged true;
    - hostNamespaces: hostNetwork, hostPID, hostIPC false;
    - hostPorts: no container port with a hostPort other than 0;
    - windowsHostProcess: no windowsOptions.hostProcess true;
    - hostProbesAndHostLifecycle (1.34+): no host in a probe's or lifecycle handler's
      httpGet/tcpSocket;
    - procMount, seLinuxOptions, sysctls, appArmorProfile: checked here as unset, stricter than
      the standard (which allows Default, some SELinux types, the safe sysctls, RuntimeDefault
      or Localhost AppArmor): gpupipe sets none of them.
    hostPath volumes (check_hostPathVolumes.go) fall under restrictedVolumes; the baseline
    capability and seccomp checks under their stricter restricted forms."""
    problems = []
    pod_security = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            problems.append(f"host namespaces: {key}")
    for key in ("seLinuxOptions", "sysctls", "appArmorProfile"):
        if key in pod_security:
            problems.append(f"pod securityContext.{key} set")
    if (pod_security.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("pod windowsOptions.hostProcess")
    for c in _containers(pod):
        sc = _security(c)
        if sc.get("privileged"):
            problems.append(f"container {c['name']}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"container {c['name']}: windowsOptions.hostProcess")
        for key in ("procMount", "seLinuxOptions", "appArmorProfile"):
            if key in sc:
                problems.append(f"container {c['name']}: securityContext.{key} set")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                problems.append(f"container {c['name']}: hostPort {port['hostPort']}")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            for handler in ("httpGet", "tcpSocket"):
                if ((c.get(probe) or {}).get(handler) or {}).get("host"):
                    problems.append(f"container {c['name']}: {probe}.{handler}.host")
        for hook in ("postStart", "preStop"):
            for handler in ("httpGet", "tcpSocket"):
                if (((c.get("lifecycle") or {}).get(hook) or {}).get(handler) or {}).get("host"):
                    problems.append(f"container {c['name']}: lifecycle.{hook}.{handler}.host")
    return problems


RESTRICTED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret")


def restricted_problems(pod: dict) -> list:
    """The "restricted" profile: the baseline checks, and (under POLICY)
    - check_restrictedVolumes.go: every volume one of RESTRICTED_VOLUMES;
    - check_allowPrivilegeEscalation.go: every container sets allowPrivilegeEscalation false;
    - check_runAsNonRoot.go: runAsNonRoot true on the pod or on every container, false nowhere
      (the user-namespace relaxation, hostUsers false, is not used by gpupipe);
    - check_runAsUser.go: runAsUser 0 nowhere;
    - check_seccompProfile_restricted.go: seccompProfile.type RuntimeDefault or Localhost on
      the pod or on every container;
    - check_capabilities_restricted.go: every container drops ALL and adds nothing but
      NET_BIND_SERVICE."""
    problems = baseline_problems(pod)
    for volume in pod.get("volumes", []):
        if not set(volume) - {"name"} <= set(RESTRICTED_VOLUMES):
            problems.append(f"volume {volume['name']} has a restricted type")
    for c in _containers(pod):
        sc = _security(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"container {c['name']} must set securityContext.allowPrivilegeEscalation=false")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f'container {c["name"]} must set securityContext.capabilities.drop=["ALL"]')
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(f"container {c['name']} must not add {sorted(added)}")
    problems += _pod_and_containers(pod, "runAsNonRoot", lambda v: v is True)
    problems += _pod_and_containers(pod, "seccompProfile", lambda v: v.get("type") in ("RuntimeDefault", "Localhost"))
    if (pod.get("securityContext") or {}).get("runAsUser") == 0:
        problems.append("pod must not set runAsUser=0")
    problems += [f"container {c['name']} must not set runAsUser=0" for c in _containers(pod)
                 if _security(c).get("runAsUser") == 0]
    return problems


def effective(pod: dict, container: dict, field: str):
    """A container's field, else the pod's (the kubelet's precedence)."""
    value = _security(container).get(field)
    return (pod.get("securityContext") or {}).get(field) if value is None else value


def with_training(config, **update):
    return with_pods(config, **update)


def worker_pod(manifest: dict) -> dict:
    if manifest["kind"] == "TFJob":
        return manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def predictor_pod(isvc: dict) -> dict:
    """The predictor's PodSpec as gpupipe writes it: the PodSpec fields KServe inlines in
    predictor, and the model container (KServe names it kserve-container)."""
    predictor = isvc["spec"]["predictor"]
    own = {"minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "canaryTrafficPercent", "batcher", "model",
           "logger", "timeout", "containerConcurrency"}
    model = {k: v for k, v in predictor["model"].items() if k not in ("modelFormat", "runtimeVersion", "storageUri",
                                                                     "runtime", "protocolVersion")}
    return {**{k: v for k, v in predictor.items() if k not in own}, "containers": [{"name": "kserve-container",
                                                                                    **model}]}


def every_pod_template(penguins_config, ctr_config) -> dict:
    """Each pod template gpupipe writes, for the example configs (gs:// and s3:// bases)."""
    minio = load_config(ROOT / "configs" / "penguins-minio.yaml")
    pods = {}
    for name, config in (("ctr", ctr_config), ("penguins", with_training(penguins_config, workers=2)),
                         ("penguins-minio", with_training(minio, workers=2)),
                         ("ctr-no-disk-cache", with_training(ctr_config, disk_cache_budget_mb=0))):
        for kind in ("jobset", "tfjob"):
            launch = Launch.from_json(launch_json(with_training(config, launcher=kind)))
            pods[f"{name} {kind} worker"] = worker_pod(job_manifest(launch, "gpupipe-train-1", "team-a", COMMAND))
    s3_tfserving = minio.model_copy(update={"serving": minio.serving.model_copy(
        update={"tf_serving_image": "registry.local/tfserving-s3:2.16.1"})})
    for name, config, base in (("penguins", penguins_config, "gs://b/serving"),
                               ("penguins-minio", s3_tfserving, "s3://models/serving")):
        deployment = next(d for d in tf_serving_manifests(config, base) if d["kind"] == "Deployment")
        pods[f"{name} tfserving"] = deployment["spec"]["template"]["spec"]
    for name, config, base in (("penguins", penguins_config, "gs://b/serving"),
                               ("penguins-minio", minio, "s3://models/serving")):
        for mode in ("Serverless", "RawDeployment"):
            pods[f"{name} kserve {mode}"] = predictor_pod(kserve_inference_service(config, base, 3, mode=mode))
    gpu = with_gpu_serving(penguins_config)  # serving.resources.gpus 1: the same profile on the GPU pool
    pods["penguins-gpu tfserving"] = next(d for d in tf_serving_manifests(gpu, "gs://b/serving")
                                          if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    for mode in ("Serverless", "RawDeployment"):
        pods[f"penguins-gpu kserve {mode}"] = predictor_pod(kserve_inference_service(gpu, "gs://b/serving", 3,
                                                                                     mode=mode))
    return pods


def test_every_pod_template_passes_the_restricted_profile(penguins_config, ctr_config):
    pods = every_pod_template(penguins_config, ctr_config)
    assert len(pods) == 17
    for name, pod in pods.items():
        assert restricted_problems(pod) == [], name
        for c in pod["containers"]:
            # the images' uid (images/*/Dockerfile USER 10001), never root
            assert effective(pod, c, "runAsUser") == IMAGE_UID and effective(pod, c, "runAsNonRoot") is True, name
            # a read-only root wherever a writable /tmp (an emptyDir) is mounted: every pod but KServe's,
            # whose TF Serving writes nothing (it reads the model KServe downloaded)
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            tmp = [m for m in c.get("volumeMounts", []) if m["mountPath"] == TMP_MOUNT]
            assert _security(c)["readOnlyRootFilesystem"] is True, name
            if "kserve" not in name:
                assert tmp and "emptyDir" in volumes[tmp[0]["name"]], name


def test_the_restricted_checks_refuse_what_the_profile_refuses(penguins_config, ctr_config):
    """Each check fails on a pod that breaks its control: the test can fail."""
    pod = every_pod_template(penguins_config, ctr_config)["ctr jobset worker"]
    assert restricted_problems(pod) == []

    def broken(change) -> list:
        bad = copy.deepcopy(pod)
        change(bad, bad["containers"][0])
        return restricted_problems(bad)

    assert broken(lambda p, c: c.pop("securityContext")) == [
        "container trainer must set securityContext.allowPrivilegeEscalation=false",
        'container trainer must set securityContext.capabilities.drop=["ALL"]']
    assert broken(lambda p, c: p.pop("securityContext")) == [
        "pod or container trainer must set securityContext.runAsNonRoot",
        "pod or container trainer must set securityContext.seccompProfile"]
    assert broken(lambda p, c: c["securityContext"].update(runAsNonRoot=False)) == [
        "container trainer must not set securityContext.runAsNonRoot=False"]
    assert broken(lambda p, c: p["securityContext"].update(runAsUser=0)) == ["pod must not set runAsUser=0"]
    assert broken(lambda p, c: p["securityContext"].update(seccompProfile={"type": "Unconfined"})) == [
        "pod must not set securityContext.seccompProfile={'type': 'Unconfined'}",
        "pod or container trainer must set securityContext.seccompProfile"]
    assert broken(lambda p, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"])) == [
        "container trainer must not add ['SYS_ADMIN']"]
    assert broken(lambda p, c: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}})) == [
        "volume host has a restricted type"]
    assert broken(lambda p, c: c["securityContext"].update(privileged=True)) == ["container trainer: privileged"]
    assert broken(lambda p, c: p.update(hostNetwork=True)) == ["host namespaces: hostNetwork"]
    assert broken(lambda p, c: c["ports"][0].update(hostPort=2222)) == ["container trainer: hostPort 2222"]
    assert broken(lambda p, c: c.update(livenessProbe={"tcpSocket": {"port": 2222, "host": "10.0.0.1"}})) == [
        "container trainer: livenessProbe.tcpSocket.host"]
    assert broken(lambda p, c: p.setdefault("initContainers", []).append({"name": "init", "image": "x"})) == [
        "container init must set securityContext.allowPrivilegeEscalation=false",
        'container init must set securityContext.capabilities.drop=["ALL"]']
