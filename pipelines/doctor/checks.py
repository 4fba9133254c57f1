"""The checks of `gpupipe doctor`: KFP, then what the config needs of the cluster (CRDs, the
LocalQueue, the Secrets, the launcher's RBAC), each a `Line` saying what holds or the fix."""
from __future__ import annotations

from typing import List, Optional, Tuple

from components.contracts.errors import GpupipeError
from pipelines.doctor.accelerators import accelerator_lines
from pipelines.doctor.cluster import Cluster, Unreachable, api_status, refused
from pipelines.doctor.line import Line
from pipelines.pool.api import KUEUE_VERSIONS

DEFAULT_NAMESPACE = "kubeflow"  # where standalone KFP runs its pods (gpupipe manifest rbac's default)
DOCS = "docs/cluster.md#before-the-first-run-gpupipe-doctor"

# The custom resources gpupipe writes: (CRD name, version gpupipe writes, what installs it)
JOBSET = ("jobsets.jobset.x-k8s.io", "v1alpha2",
          "install JobSet: kubectl apply --server-side -f "
          "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml")
TFJOB = ("tfjobs.kubeflow.org", "v1",
         "install the training-operator: kubectl apply --server-side -k "
         "\"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.0\" "
         "(or set training.pods.launcher: jobset)")
KUEUE = "install Kueue: kubectl apply --server-side -f " \
        "https://github.com/kubernetes-sigs/kueue/releases/download/v0.19.2/manifests.yaml (or unset cluster.queue)"
# Kueue's objects are read in v1beta2 where the API server serves it (Kueue v0.15 on), else in
# v1beta1, which v0.19 still serves but marks deprecated (pipelines/pool/api.py KUEUE_VERSIONS).
KUEUE_CRDS = (("workloads.kueue.x-k8s.io", KUEUE_VERSIONS, KUEUE), ("localqueues.kueue.x-k8s.io", KUEUE_VERSIONS, KUEUE),
              ("clusterqueues.kueue.x-k8s.io", KUEUE_VERSIONS, KUEUE))
KSERVE = ("inferenceservices.serving.kserve.io", "v1beta1",
          "install KServe: helm install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version v0.15.2 -n "
          "kserve --create-namespace, then the kserve chart (or pass --serving tfserving)")


# ---------------------------------------------------------------- KFP

def kfp_lines(host: str, iap_client_id: Optional[str] = None, pipeline_texts=()) -> List[Line]:
    """KFP answers and is recent enough for what these compiled pipelines use: pipelines/remote/'s
    own checks, the same as upload and submit."""
    from pipelines import remote

    need = remote.needed_kfp(pipeline_texts)
    warnings: List[str] = []
    try:
        host = remote.check_host(host)
        healthz = remote.check_reachable(host, token=remote.auth_token(iap_client_id))
        remote.check_kfp_version(host, healthz, warn=warnings.append, need=need)
    except GpupipeError as err:
        return [Line(False, f"KFP: {err}")]
    if warnings:
        return [Line(True, warnings[0].removeprefix("warning: "), warning=True)]
    found = ".".join(map(str, remote.kfp_version(healthz)))
    return [Line(True, f"KFP at {host} answers, backend {found} ({need[1]} need{'' if need[0] == remote.MIN_KFP_VERSION else 's'} "
                       f"{'.'.join(map(str, need[0]))} or later)")]


# ---------------------------------------------------------------- what the config needs

def launcher_kind(config) -> Optional[str]:
    """"jobset" or "tfjob" when the train task launches a job for the workers; None when it
    trains in its own pod (CPU training, or training.pods.launcher pod): the compiled pipeline's own
    rule, pipelines/factory.py launched."""
    from pipelines.factory import launched

    return config.training.pods.launcher if launched(config) else None


def needed_crds(config, serving: str) -> List[Tuple[str, tuple, str]]:
    """(component, its CRDs, why) the config needs."""
    t = config.training.pods
    needed = []
    kind = launcher_kind(config)
    if kind == "jobset":
        needed.append(("JobSet", (JOBSET,), f"training.pods.workers {t.workers}, training.pods.launcher jobset"))
    elif kind == "tfjob":
        needed.append(("TFJob", (TFJOB,), f"training.pods.workers {t.workers}, training.pods.launcher tfjob"))
    # (one worker in the task's own pod, training.pods.launcher pod or CPU training: no CRD)
    if config.cluster.queue:
        needed.append(("Kueue", KUEUE_CRDS, f"cluster.queue {config.cluster.queue}"))
    if serving == "kserve":
        needed.append(("KServe", (KSERVE,), "gpupipe manifest kserve's InferenceService; --serving kserve"))
    return needed


def kueue_version(cluster: Cluster) -> str:
    """The Kueue version doctor reads objects in: v1beta2 where API discovery lists it, else
    v1beta1 (also when discovery is refused: a Kueue that serves v1beta2 still serves it)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.served("kueue.x-k8s.io", KUEUE_VERSIONS) or KUEUE_VERSIONS[-1]
    except ApiException:
        return KUEUE_VERSIONS[-1]


def crd_line(cluster: Cluster, component: str, crds: tuple, why: str) -> Line:
    """Each CRD installed, established and serving its version (or one of its versions, a tuple)."""
    from kubernetes.client.exceptions import ApiException

    found = []
    for name, versions, fix in crds:
        versions = (versions,) if isinstance(versions, str) else tuple(versions)
        version = " or ".join(versions)
        try:
            crd = cluster.crd(name)
        except ApiException as err:
            if err.status != 403:
                return refused(f"{component} CRD {name}", err, f"try again, or check with kubectl get crd {name}")
            # Not allowed to read CRDs (a tenant rarely is): API discovery lists what the API
            # server serves, and it serves a CRD's resources once the CRD is established.
            plural, _, group = name.partition(".")
            try:
                listed = [cluster.discovery(group, v) for v in versions]
            except ApiException as err:
                return refused(f"{component} CRD {name}", err, "ask for get on customresourcedefinitions."
                                                              f"apiextensions.k8s.io, or check with kubectl get crd {name}")
            if not any(plural in [r.get("name") for r in (each or {}).get("resources") or []] for each in listed):
                return Line(False, f"{component} CRD {name} is not installed, or does not serve {version} ({why}; "
                                   f"API discovery of {group}/{'|'.join(versions)}, as CRDs may not be read): {fix}")
            found.append(name)
            continue
        if crd is None:
            return Line(False, f"{component} CRD {name} is not installed ({why}): {fix}")
        served = [v.name for v in crd.spec.versions if v.served]
        if not set(versions) & set(served):
            return Line(False, f"{component} CRD {name} does not serve {version}, the version gpupipe writes (it "
                               f"serves {', '.join(served) or 'none'}): {fix.replace('install', 'upgrade to', 1)}")
        established = [c for c in (crd.status.conditions if crd.status else None) or [] if c.type == "Established"]
        if not established or established[0].status != "True":
            reason = established[0].message if established else "no Established condition"
            return Line(False, f"{component} CRD {name} is not established ({reason}): check the API server's "
                               f"events (kubectl describe crd {name}), or reinstall: {fix}")
        found.append(name)
    names = ", ".join(found)
    return Line(True, f"{component} CRD{'s' if len(found) > 1 else ''} {names} ({why})")


def queue_lines(cluster: Cluster, config, namespace: str, config_path: str) -> List[Line]:
    from kubernetes.client.exceptions import ApiException

    name = config.cluster.queue
    tenant = (f"gpupipe manifest tenant {config_path} --team {namespace} --gpu-quota N | kubectl apply -f - "
              "(docs/gpu-pool.md)")
    try:
        lq = cluster.custom("kueue.x-k8s.io", kueue_version(cluster), "localqueues", name, namespace)
    except ApiException as err:
        return [refused(f"LocalQueue {namespace}/{name} (cluster.queue)", err,
                        f"ask for get on localqueues.kueue.x-k8s.io in {namespace}")]
    if lq is None:
        return [Line(False, f"LocalQueue {name} (cluster.queue) is not in namespace {namespace}: {tenant}, or set "
                            "cluster.queue to a LocalQueue of that namespace (kubectl -n "
                            f"{namespace} get localqueues)")]
    cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
    try:
        cq = cluster.custom("kueue.x-k8s.io", kueue_version(cluster), "clusterqueues", cq_name) if cq_name else None
    except ApiException as err:
        return [refused(f"ClusterQueue {cq_name} of LocalQueue {namespace}/{name}", err,
                        "ask for get on clusterqueues.kueue.x-k8s.io, or check with kubectl get clusterqueue "
                        f"{cq_name}")]
    if cq is None:
        return [Line(False, f"LocalQueue {namespace}/{name} points at ClusterQueue {cq_name or '(none)'}, which does "
                            f"not exist, so Kueue admits nothing from it: {tenant}")]
    return [Line(True, f"LocalQueue {namespace}/{name} (cluster.queue), ClusterQueue {cq_name}")]


# Kueue's own configuration (config/components/manager/controller_manager_config.yaml, as the
# release manifests install it): integrations.frameworks lists the job kinds Kueue manages; a
# job of another kind is never suspended nor counted against any quota. v0.19.2's default
# lists jobset.x-k8s.io/jobset and leaves kubeflow.org/tfjob commented out.
KUEUE_CONFIG = ("kueue-system", "kueue-manager-config", "controller_manager_config.yaml")
FRAMEWORKS = {"jobset": "jobset.x-k8s.io/jobset", "tfjob": "kubeflow.org/tfjob"}


def framework_line(cluster: Cluster, config) -> Line:
    """Whether Kueue manages the launcher's kind of job (its integrations.frameworks)."""
    import yaml
    from kubernetes.client.exceptions import ApiException

    namespace, name, key = KUEUE_CONFIG
    framework = FRAMEWORKS[launcher_kind(config)]
    what = f"Kueue integrations.frameworks ({namespace}/{name})"
    try:
        found = cluster.config_map(namespace, name)
    except ApiException as err:
        code, message = api_status(err)
        return Line(True, f"{what}: the Kubernetes API refused ({code}: {message}), so not checked that Kueue "
                          f"manages {framework}; ask an admin: kubectl -n {namespace} get configmap {name} -o yaml",
                    warning=True)
    if found is None:
        return Line(True, f"{what}: not found, so not checked that Kueue manages {framework} (a Kueue installed "
                          "otherwise keeps its configuration elsewhere)", warning=True)
    try:
        frameworks = (yaml.safe_load((found.get("data") or {}).get(key, "")) or {}).get("integrations", {}) \
            .get("frameworks") or []
    except yaml.YAMLError:
        frameworks = []
    if framework in frameworks:
        return Line(True, f"{what}: Kueue manages {framework}")
    fix = ("use training.pods.launcher: jobset" if framework != FRAMEWORKS["jobset"] else
           f"add {framework} to integrations.frameworks")
    return Line(False, f"{what} lacks {framework}: Kueue does not manage the launcher's jobs, so they bypass "
                       f"cluster.queue and the team's quota; add it there and restart kueue-controller-manager, or "
                       f"{fix}")


def priority_lines(cluster: Cluster, config, config_path: str) -> List[Line]:
    """The Kueue WorkloadPriorityClasses the config's jobs name: production's (cluster.priority)
    and training.tune's trials'. Kueue makes no Workload for a job whose class does not exist,
    so the job stays suspended; trials meant to fill idle GPUs must rank below production."""
    from kubernetes.client.exceptions import ApiException

    named = [(config.cluster.priority, "cluster.priority")]
    if config.training.tune is not None and launcher_kind(config):  # in the task's own pod, trials carry no class
        named.append((config.training.tune.priority_class, "training.tune.priority_class"))
    lines, values = [], {}
    for name, key in named:
        if not name:
            continue
        try:
            found = cluster.custom("kueue.x-k8s.io", kueue_version(cluster), "workloadpriorityclasses", name)
        except ApiException as err:
            lines.append(refused(f"WorkloadPriorityClass {name} ({key})", err,
                                 "ask for get on workloadpriorityclasses.kueue.x-k8s.io"))
            continue
        if found is None:
            fix = (f"gpupipe manifest tenant {config_path} --team T --gpu-quota N | kubectl apply -f -"
                   if key.startswith("training.tune") else "ask the cluster's administrator to create it, or unset "
                                                           "cluster.priority")
            lines.append(Line(False, f"WorkloadPriorityClass {name} ({key}) does not exist, so Kueue makes no "
                                     f"Workload for the job and it stays suspended: {fix}"))
            continue
        values[key] = found.get("value", 0)
        lines.append(Line(True, f"WorkloadPriorityClass {name} ({key}), value {values[key]}"))
    production = values.get("cluster.priority", 0)  # a workload naming no class: 0
    tuning = values.get("training.tune.priority_class")
    if tuning is not None and tuning >= production:
        lines.append(Line(False, f"training.tune.priority_class {config.training.tune.priority_class} has value "
                                 f"{tuning}, not below production's {production}, so trials are not preempted by "
                                 "production runs: give it a lower value (gpupipe manifest tenant writes -100)"))
    return lines


def named_secrets(config) -> List[Tuple[str, List[str]]]:
    """(Secret name, the config keys naming it), in the config's order."""
    pairs = []
    c = config.cluster
    if config.storage.gcs.credentials_secret:
        pairs.append((config.storage.gcs.credentials_secret, "storage.gcs.credentials_secret"))
    pairs += [(name, "cluster.image_pull_secrets") for name in c.image_pull_secrets]
    if config.storage.s3 and config.storage.s3.credentials_secret:
        pairs.append((config.storage.s3.credentials_secret, "storage.s3.credentials_secret"))
    if config.notify.webhook_secret:
        pairs.append((config.notify.webhook_secret, "notify.webhook_secret"))
    named: dict = {}
    for name, key in pairs:
        named.setdefault(name, []).append(key)
    return list(named.items())


def _create_secret(config, name: str, key: str, namespace: str) -> str:
    """The kubectl command that creates the Secret `key` names, with placeholders for the values."""
    from components.notify.settings import WEBHOOK_SECRET_KEY

    if key == "storage.gcs.credentials_secret":
        data = f"--from-file={config.storage.gcs.credentials_key}=sa-key.json"
    elif key == "cluster.image_pull_secrets":
        server = config.images.registry.split("/")[0] if config.images.registry else "REGISTRY"
        return (f"kubectl -n {namespace} create secret docker-registry {name} --docker-server={server} "
                "--docker-username=USER --docker-password=TOKEN")
    elif key == "storage.s3.credentials_secret":
        s3 = config.storage.s3
        data = f"--from-literal={s3.access_key_key}=ACCESS_KEY --from-literal={s3.secret_key_key}=SECRET_KEY"
    else:
        data = f"--from-literal={WEBHOOK_SECRET_KEY}=https://hooks.slack.com/services/..."
    return f"kubectl -n {namespace} create secret generic {name} {data}"


def secret_lines(cluster: Cluster, config, namespace: str, workers_only: bool = False) -> List[Line]:
    """The config's Secrets in `namespace`; `workers_only`: those the training workers mount
    (not notify.webhook_secret, which only the pipeline's exit handler reads)."""
    from kubernetes.client.exceptions import ApiException

    lines = []
    for name, keys in named_secrets(config):
        if workers_only:
            keys = [k for k in keys if k != "notify.webhook_secret"]
            if not keys:
                continue
        pull = "cluster.image_pull_secrets" in keys
        what = f"{'image pull ' if pull else ''}Secret {name} ({', '.join(keys)})"
        try:
            found = cluster.secret_metadata(namespace, name)
        except ApiException as err:
            lines.append(refused(f"{what} in {namespace}", err, f"ask for get on secrets in {namespace}, or check "
                                                                f"with kubectl -n {namespace} get secret {name}"))
            continue
        if found is None:
            lines.append(Line(False, f"{what} is not in namespace {namespace}: "
                                     f"{_create_secret(config, name, keys[0], namespace)}"))
        else:
            lines.append(Line(True, f"{what} in {namespace}"))
    return lines


def _service_account(user: str) -> Optional[Tuple[str, str]]:
    parts = user.split(":")
    return (parts[2], parts[3]) if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None


def rbac_lines(cluster: Cluster, config, namespace: str, config_path: str, user: str, groups: List[str],
               service_account: Optional[str]) -> List[Line]:
    """The launcher's verbs on its jobs, as doctor's own identity and (--service-account) as the SA."""
    from kubernetes.client.exceptions import ApiException

    from components.train.launch import API, LAUNCHER_VERBS

    group, _, plural, _ = API[launcher_kind(config)]
    job_ns = config.training.pods.job_namespace or namespace
    resource = f"{plural}.{group}"
    checks = [(None, None, f"as {user or 'the user of context ' + (cluster.conn.context or '(in-cluster)')}",
               "SelfSubjectAccessReview", _service_account(user))]
    if service_account:
        sa_user = f"system:serviceaccount:{namespace}:{service_account}"
        checks.append((sa_user, ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                                 "system:authenticated"], f"as {sa_user}", "SubjectAccessReview",
                       (namespace, service_account)))
    lines = []
    for subject, subject_groups, who, review, account in checks:
        denied = []
        try:
            for verb in LAUNCHER_VERBS:
                status, review = cluster.may({"namespace": job_ns, "verb": verb, "group": group,
                                              "resource": plural}, subject, subject_groups)
                if status is None or not status.allowed:
                    denied.append(verb)
        except ApiException as err:
            asked = ("subjectaccessreviews.authorization.k8s.io (cluster-wide) or localsubjectaccessreviews in "
                     f"{job_ns}" if subject else "selfsubjectaccessreviews.authorization.k8s.io")
            lines.append(refused(f"RBAC {who} ({review})", err, f"ask for create on {asked}, or check with "
                                 f"kubectl auth can-i delete {resource} -n {job_ns}"
                                 + (f" --as {subject}" if subject else "")))
            continue
        if not denied:
            lines.append(Line(True, f"RBAC {who} ({review}): may {', '.join(LAUNCHER_VERBS)} {resource} in {job_ns}"))
            continue
        # manifest rbac's --namespace is the run's (the subject's); it writes the jobs' Role in job_ns
        sa_ns, sa_name = account if account else (namespace, "pipeline-runner")
        fix = (f"gpupipe manifest rbac {config_path} --namespace {sa_ns} --service-account {sa_name} | "
               "kubectl apply -f -")
        if job_ns != sa_ns:
            fix += f" (it writes the Role in {job_ns}, the RoleBinding's subject ServiceAccount {sa_name} of {sa_ns})"
        if not account:
            fix += (" (pipeline-runner on standalone KFP, default-editor in a Kubeflow profile); this checked your "
                    "own identity: pass --service-account SA to check the pipeline's")
        lines.append(Line(False, f"RBAC {who} ({review}): may not {', '.join(denied)} {resource} in {job_ns}, "
                                 f"which the train task's launcher does: {fix}"))
    return lines


def cluster_lines(config, config_path: str, kubeconfig: Optional[str], context: Optional[str],
                  namespace: Optional[str], service_account: Optional[str], serving: str) -> List[Line]:
    from pipelines.pool import connect

    try:
        conn = connect(kubeconfig, context)
    except GpupipeError as err:
        return [Line(False, f"Kubernetes: {err}")]
    namespace = namespace or conn.namespace or DEFAULT_NAMESPACE
    cluster = Cluster(conn)
    try:
        user, groups = cluster.identity()
        who = user or (f"the kubeconfig's user (context {conn.context}; the API server does not say who: before "
                       "1.28, or SelfSubjectReviews refused)")
        lines = [Line(True, f"Kubernetes API at {conn.server} answers ({conn.where}), as {who}; the run's namespace "
                            f"{namespace}")]
        installed = {}
        for component, crds, why in needed_crds(config, serving):
            lines.append(crd_line(cluster, component, crds, why))
            installed[component] = lines[-1].ok
        # The launched job runs in training.pods.job_namespace when set: Kueue looks for its
        # LocalQueue there, and its workers mount the storage and image pull Secrets there.
        job_ns = (config.training.pods.job_namespace if launcher_kind(config) else None) or namespace
        if installed.get("Kueue"):  # without Kueue's CRDs, no LocalQueue to look for
            lines += queue_lines(cluster, config, job_ns, config_path)
            if launcher_kind(config) and config.cluster.queue:
                lines.append(framework_line(cluster, config))
            lines += priority_lines(cluster, config, config_path)
        lines += secret_lines(cluster, config, namespace)
        if job_ns != namespace:
            lines += secret_lines(cluster, config, job_ns, workers_only=True)
        lines += accelerator_lines(cluster, config, serving)
        if launcher_kind(config):
            lines += rbac_lines(cluster, config, namespace, config_path, user, groups, service_account)
    except Unreachable as down:
        return [Line(False, down.line)]
    return lines
