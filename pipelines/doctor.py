"""`gpupipe doctor CONFIG --host URL`: what a platform engineer checks before a config's first
Run on a cluster, one line each: `ok: ...`, or `error: <what>: <the fix>` (a kubectl command,
a config key, an install step). Exit 1 when any check fails.

The checks, and what each asks of which API (the shapes as the Kubernetes API server answers
them, kubernetes/api and apiextensions-apiserver):

- KFP: `GET <host>/apis/v2beta1/healthz` and the backend's release against 2.5.0
  (pipelines/remote.py check_reachable and check_kfp_version, the same as upload and submit).
- Who the Kubernetes API takes us for: `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`
  (status.userInfo.username; Kubernetes 1.28 and later, else the kubeconfig's user is named).
- The CRDs the config needs: `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>`,
  with the version gpupipe writes among spec.versions[].served and the Established condition:
  JobSet (training.pods.workers > 1, training.pods.launcher jobset), TFJob (workers > 1, launcher tfjob),
  Kueue's Workload, LocalQueue and ClusterQueue (cluster.queue), KServe's InferenceService
  (`--serving kserve`, the default of `gpupipe manifest`).
- cluster.queue: the LocalQueue in the run's namespace and the ClusterQueue its spec.clusterQueue
  names (`kueue.x-k8s.io/v1beta1`).
- The Secrets the config names, in the run's namespace: cluster.gcs_credentials_secret,
  cluster.image_pull_secrets, storage.s3.credentials_secret, notify.webhook_secret. Asked for as
  PartialObjectMetadata (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`):
  the API server sends the metadata only, never the data.
- The launcher's verbs (components/train/launch.py LAUNCHER_VERBS) on its JobSets or TFJobs:
  `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` as the identity doctor runs as,
  and with `--service-account SA` a SubjectAccessReview for system:serviceaccount:<ns>:<SA>.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from components.contracts.errors import GpupipeError

DEFAULT_NAMESPACE = "kubeflow"  # where standalone KFP runs its pods (gpupipe manifest --rbac's default)
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TIMEOUT = (5, 30)  # seconds: to connect, to read
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
KUEUE_CRDS = (("workloads.kueue.x-k8s.io", "v1beta1", KUEUE), ("localqueues.kueue.x-k8s.io", "v1beta1", KUEUE),
              ("clusterqueues.kueue.x-k8s.io", "v1beta1", KUEUE))
KSERVE = ("inferenceservices.serving.kserve.io", "v1beta1",
          "install KServe: helm install kserve-crd oci://ghcr.io/kserve/charts/kserve-crd --version v0.15.2 -n "
          "kserve --create-namespace, then the kserve chart (or pass --serving tfserving)")


@dataclass
class Line:
    ok: bool
    text: str  # ok: what holds; error: "<what>: <the fix>"
    warning: bool = False

    def render(self) -> str:
        return f"{'warning' if self.warning else 'ok' if self.ok else 'error'}: {self.text}"


class _Unreachable(Exception):
    """The Kubernetes API did not answer, or refused the credentials: the line says which."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line


# ---------------------------------------------------------------- KFP

def kfp_lines(host: str, iap_client_id: Optional[str] = None) -> List[Line]:
    """KFP answers and is recent enough: pipelines/remote.py's own checks."""
    from pipelines import remote

    warnings: List[str] = []
    try:
        host = remote.check_host(host)
        healthz = remote.check_reachable(host, token=remote.auth_token(iap_client_id))
        remote.check_kfp_version(host, healthz, warn=warnings.append)
    except GpupipeError as err:
        return [Line(False, f"KFP: {err}")]
    if warnings:
        return [Line(True, warnings[0].removeprefix("warning: "), warning=True)]
    found = ".".join(map(str, remote.kfp_version(healthz)))
    need = ".".join(map(str, remote.MIN_KFP_VERSION))
    return [Line(True, f"KFP at {host} answers, backend {found} (gpupipe needs {need} or later)")]


# ---------------------------------------------------------------- the Kubernetes API

def _status(err) -> Tuple[int, str]:
    """(HTTP status, the Status object's message) of an ApiException."""
    try:
        message = json.loads(err.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return err.status or 0, message or str(err.reason or "")


class Cluster:
    """The requests doctor sends, through the real kubernetes client."""

    def __init__(self, conn):
        from kubernetes import client

        self.conn = conn
        self.api = conn.api
        self.client = client

    def _call(self, fn: Callable, *args, **kwargs):
        """fn's answer; None on 404; an ApiException for other refusals; _Unreachable when the
        API server does not answer or refuses the credentials."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        from pipelines.pool import _reason

        try:
            return fn(*args, _request_timeout=TIMEOUT, **kwargs)
        except ApiException as err:
            code, message = _status(err)
            if code == 404:
                return None
            if code == 401:
                raise _Unreachable(f"Kubernetes API at {self.conn.server} ({self.conn.where}): refused the "
                                   f"credentials (401: {message}); refresh them (e.g. gcloud container clusters "
                                   "get-credentials) or pass --kubeconfig/--context") from None
            raise
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise _Unreachable(f"Kubernetes API at {self.conn.server} ({self.conn.where}): unreachable "
                               f"({_reason(err)}); check that the context names the cluster and that it answers "
                               "(kubectl cluster-info), or pass --kubeconfig/--context") from None

    def identity(self) -> Tuple[str, List[str]]:
        """(username, groups) the API server takes the credentials for; ("", []) before 1.28, or
        when it refuses to say."""
        from kubernetes.client.exceptions import ApiException

        c = self.client
        try:
            review = self._call(c.AuthenticationV1Api(self.api).create_self_subject_review, c.V1SelfSubjectReview())
        except ApiException:  # refused (403) or failed: the access reviews still name whom they checked
            return "", []
        info = review.status.user_info if review is not None and review.status else None
        return (info.username or "", list(info.groups or [])) if info else ("", [])

    def crd(self, name: str):
        return self._call(self.client.ApiextensionsV1Api(self.api).read_custom_resource_definition, name)

    def discovery(self, group: str, version: str) -> Optional[dict]:
        """The APIResourceList of `group/version` (every authenticated user may read discovery:
        system:discovery), None when the API server does not serve that version."""
        def get(_request_timeout):
            return self.api.call_api(
                "/apis/{group}/{version}", "GET", {"group": group, "version": version},
                header_params={"Accept": "application/json"}, response_type="object",
                auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=_request_timeout)
        return self._call(get)

    def custom(self, group: str, version: str, plural: str, name: str, namespace: Optional[str] = None):
        objects = self.client.CustomObjectsApi(self.api)
        if namespace:
            return self._call(objects.get_namespaced_custom_object, group, version, namespace, plural, name)
        return self._call(objects.get_cluster_custom_object, group, version, plural, name)

    def secret_metadata(self, namespace: str, name: str) -> Optional[dict]:
        """The Secret's metadata only (PartialObjectMetadata): its data is never asked for."""
        def get(_request_timeout):
            return self.api.call_api(
                "/api/v1/namespaces/{namespace}/secrets/{name}", "GET", {"namespace": namespace, "name": name},
                header_params={"Accept": METADATA_ONLY}, response_type="object", auth_settings=["BearerToken"],
                _return_http_data_only=True, _request_timeout=_request_timeout)
        return self._call(get)

    def may(self, attributes: dict, user: Optional[str] = None, groups: Optional[List[str]] = None):
        """(status, the review asked): a SelfSubjectAccessReview (user None), else a
        SubjectAccessReview for `user`, or, when the caller may not create those (cluster-scoped),
        a LocalSubjectAccessReview in the namespace, which a namespace's admin may create."""
        from kubernetes.client.exceptions import ApiException

        c = self.client
        resource = c.V1ResourceAttributes(**attributes)
        api = c.AuthorizationV1Api(self.api)
        if user is None:
            review = self._call(api.create_self_subject_access_review,
                                c.V1SelfSubjectAccessReview(spec=c.V1SelfSubjectAccessReviewSpec(
                                    resource_attributes=resource)))
            return (review.status if review is not None else None), "SelfSubjectAccessReview"
        spec = c.V1SubjectAccessReviewSpec(user=user, groups=groups, resource_attributes=resource)
        try:
            review = self._call(api.create_subject_access_review, c.V1SubjectAccessReview(spec=spec))
            return (review.status if review is not None else None), "SubjectAccessReview"
        except ApiException as err:
            if err.status != 403:
                raise
        review = self._call(api.create_namespaced_local_subject_access_review, attributes["namespace"],
                            c.V1LocalSubjectAccessReview(metadata=c.V1ObjectMeta(namespace=attributes["namespace"]),
                                                         spec=spec))
        return (review.status if review is not None else None), "LocalSubjectAccessReview"


def _refused(what: str, err, fix: str) -> Line:
    code, message = _status(err)
    return Line(False, f"{what}: the Kubernetes API refused ({code}: {message}); {fix}")


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
        needed.append(("KServe", (KSERVE,), "gpupipe manifest's InferenceService; --serving kserve"))
    return needed


def crd_line(cluster: Cluster, component: str, crds: tuple, why: str) -> Line:
    from kubernetes.client.exceptions import ApiException

    found = []
    for name, version, fix in crds:
        try:
            crd = cluster.crd(name)
        except ApiException as err:
            if err.status != 403:
                return _refused(f"{component} CRD {name}", err, f"try again, or check with kubectl get crd {name}")
            # Not allowed to read CRDs (a tenant rarely is): API discovery lists what the API
            # server serves, and it serves a CRD's resources once the CRD is established.
            plural, _, group = name.partition(".")
            try:
                listed = cluster.discovery(group, version)
            except ApiException as err:
                return _refused(f"{component} CRD {name}", err, "ask for get on customresourcedefinitions."
                                                               f"apiextensions.k8s.io, or check with kubectl get crd {name}")
            if not listed or plural not in [r.get("name") for r in listed.get("resources") or []]:
                return Line(False, f"{component} CRD {name} is not installed, or does not serve {version} ({why}; "
                                   f"API discovery of {group}/{version}, as CRDs may not be read): {fix}")
            found.append(name)
            continue
        if crd is None:
            return Line(False, f"{component} CRD {name} is not installed ({why}): {fix}")
        served = [v.name for v in crd.spec.versions if v.served]
        if version not in served:
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
    tenant = (f"gpupipe manifest {config_path} --tenant {namespace} --gpu-quota N | kubectl apply -f - "
              "(docs/gpu-pool.md)")
    try:
        lq = cluster.custom("kueue.x-k8s.io", "v1beta1", "localqueues", name, namespace)
    except ApiException as err:
        return [_refused(f"LocalQueue {namespace}/{name} (cluster.queue)", err,
                         f"ask for get on localqueues.kueue.x-k8s.io in {namespace}")]
    if lq is None:
        return [Line(False, f"LocalQueue {name} (cluster.queue) is not in namespace {namespace}: {tenant}, or set "
                            "cluster.queue to a LocalQueue of that namespace (kubectl -n "
                            f"{namespace} get localqueues)")]
    cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
    try:
        cq = cluster.custom("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq_name) if cq_name else None
    except ApiException as err:
        return [_refused(f"ClusterQueue {cq_name} of LocalQueue {namespace}/{name}", err,
                         "ask for get on clusterqueues.kueue.x-k8s.io, or check with kubectl get clusterqueue "
                         f"{cq_name}")]
    if cq is None:
        return [Line(False, f"LocalQueue {namespace}/{name} points at ClusterQueue {cq_name or '(none)'}, which does "
                            f"not exist, so Kueue admits nothing from it: {tenant}")]
    return [Line(True, f"LocalQueue {namespace}/{name} (cluster.queue), ClusterQueue {cq_name}")]


def named_secrets(config) -> List[Tuple[str, List[str]]]:
    """(Secret name, the config keys naming it), in the config's order."""
    pairs = []
    c = config.cluster
    if c.gcs_credentials_secret:
        pairs.append((c.gcs_credentials_secret, "cluster.gcs_credentials_secret"))
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

    if key == "cluster.gcs_credentials_secret":
        data = f"--from-file={config.cluster.gcs_credentials_key}=sa-key.json"
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
            lines.append(_refused(f"{what} in {namespace}", err, f"ask for get on secrets in {namespace}, or check "
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
            lines.append(_refused(f"RBAC {who} ({review})", err, f"ask for create on {asked}, or check with "
                                  f"kubectl auth can-i delete {resource} -n {job_ns}"
                                  + (f" --as {subject}" if subject else "")))
            continue
        if not denied:
            lines.append(Line(True, f"RBAC {who} ({review}): may {', '.join(LAUNCHER_VERBS)} {resource} in {job_ns}"))
            continue
        sa_ns, sa_name = account if account else (job_ns, "pipeline-runner")
        fix = (f"gpupipe manifest {config_path} --rbac --namespace {job_ns} --service-account {sa_name} | "
               "kubectl apply -f -")
        if not account:
            fix += (" (pipeline-runner on standalone KFP, default-editor in a Kubeflow profile); this checked your "
                    "own identity: pass --service-account SA to check the pipeline's")
        elif sa_ns != job_ns:
            fix += f" (the RoleBinding's subject: ServiceAccount {sa_name} of {sa_ns})"
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
        lines += secret_lines(cluster, config, namespace)
        if job_ns != namespace:
            lines += secret_lines(cluster, config, job_ns, workers_only=True)
        if launcher_kind(config):
            lines += rbac_lines(cluster, config, namespace, config_path, user, groups, service_account)
    except _Unreachable as down:
        return [Line(False, down.line)]
    return lines


# ---------------------------------------------------------------- the command

def cmd_doctor(args: argparse.Namespace) -> int:
    from pipelines.config import load_config

    config = load_config(args.config)
    lines = kfp_lines(args.host, args.iap_client_id)
    lines += cluster_lines(config, args.config, args.kubeconfig, args.context, args.namespace,
                           args.service_account, args.serving)
    for line in lines:
        print(line.render(), flush=True)
    return 0 if all(line.ok for line in lines) else 1


def add_command(sub) -> None:
    """`gpupipe doctor` on the command line (pipelines/cli.py build_parser)."""
    p = sub.add_parser("doctor", help="before the first run: check that KFP (2.5.0 or later), the CRDs, the "
                                      "LocalQueue, the Secrets and the launcher's RBAC the config needs are there; "
                                      "one line each, ok or the fix; exit 1 when any is missing")
    p.add_argument("config")
    p.add_argument("--host", required=True, help="KFP API URL, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--namespace", help="the run's namespace, where its pods, Secrets and LocalQueue are (a Kubeflow "
                                       f"profile's; default: the context's namespace, else {DEFAULT_NAMESPACE})")
    p.add_argument("--iap-client-id", help="behind Identity-Aware Proxy: the IAP OAuth client id (default: "
                                           "$KFP_IAP_CLIENT_ID)")
    p.add_argument("--kubeconfig", help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    p.add_argument("--service-account", help="also check the launcher's RBAC for this ServiceAccount of the run's "
                                             "namespace (pipeline-runner; default-editor in a Kubeflow profile) "
                                             "with a SubjectAccessReview")
    p.add_argument("--serving", choices=["kserve", "tfserving", "none"], default="kserve",
                   help="how the model is served: kserve (gpupipe manifest, the default) needs KServe's CRD; "
                        "tfserving (manifest --tfserving) and none need nothing more")
    p.epilog = f"the checks and their fixes: {DOCS}"
    p.set_defaults(func=cmd_doctor)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: gpupipe doctor CONFIG --host URL")
