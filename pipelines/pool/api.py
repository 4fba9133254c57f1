"""The Kubernetes API as `gpupipe queue` and `usage` read it: the connection from a kubeconfig,
Workloads listed page by page, and the positions from Kueue's visibility API (the shapes:
pipelines/pool/__init__.py)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from components.contracts.errors import GpupipeError

KUEUE_GROUP, KUEUE_VERSION, WORKLOADS = "kueue.x-k8s.io", "v1beta1", "workloads"
# The Kueue API versions read, the newest first: v1beta2 is served from Kueue v0.15 (and stored
# from v0.16); v0.19 still serves v1beta1, deprecated ("Use v1beta2 instead"). The same for
# Kueue's visibility API. KUEUE_VERSION, v1beta1, is what an older Kueue serves.
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_PATH = "/apis/visibility.kueue.x-k8s.io/{version}/namespaces/{namespace}/localqueues/{name}/pendingworkloads"
TIMEOUT = (5, 30)  # seconds: to connect, to read
PAGE = 500
DOCS = "docs/queue.md"


@dataclass
class Connection:
    api: object  # kubernetes.client.ApiClient
    kubeconfig: str  # what the user named (or the default), for messages
    context: str
    server: str
    namespace: str  # the context's namespace ("" when it names none)

    @property
    def where(self) -> str:
        return f"kubeconfig {self.kubeconfig}, context {self.context or '(in-cluster)'}"


def connect(kubeconfig: Optional[str] = None, context: Optional[str] = None) -> Connection:
    """An ApiClient from the kubeconfig (`--kubeconfig`, else $KUBECONFIG, else
    ~/.kube/config) and its context (`--context`, else current-context), as kubectl and the
    kubernetes client take them; in a pod without a kubeconfig, its service account."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    given = kubeconfig or os.environ.get("KUBECONFIG", "")
    shown = given or "~/.kube/config"
    paths = [os.path.expanduser(p) for p in (given or "~/.kube/config").split(os.pathsep) if p]
    configuration = client.Configuration()
    configuration.retries = 1
    if not any(os.path.isfile(p) for p in paths):
        if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
            return Connection(client.ApiClient(configuration), "(in-cluster service account)", "",
                              configuration.host, _pod_namespace())
        raise GpupipeError(f"kubeconfig {shown}: no such file; pass --kubeconfig PATH (or set KUBECONFIG) to the "
                           "cluster's kubeconfig, e.g. from `gcloud container clusters get-credentials`")
    try:
        contexts, active = config.list_kube_config_contexts(config_file=given or None)
        names = [c["name"] for c in contexts]
        chosen = context or (active or {}).get("name", "")
        if context and context not in names:
            raise GpupipeError(f"kubeconfig {shown}: no context {context!r} (it has {', '.join(names) or 'none'}); "
                               "pass --context with one of them (kubectl config get-contexts)")
        config.load_kube_config(config_file=given or None, context=context, client_configuration=configuration)
    except ConfigException as err:
        first = (str(err).splitlines() or ["invalid"])[0]
        raise GpupipeError(f"kubeconfig {shown}: {first}; pass --kubeconfig PATH and --context NAME naming a "
                           "cluster (kubectl config get-contexts)") from None
    namespace = next((c.get("context", {}).get("namespace", "") for c in contexts if c["name"] == chosen), "")
    return Connection(client.ApiClient(configuration), shown, chosen, configuration.host, namespace)


def served_version(api, group: str, versions=KUEUE_VERSIONS, timeout=TIMEOUT) -> Optional[str]:
    """The first of `versions` that the API server serves for `group`, by API discovery (GET
    /apis/<group>/<version>, which every authenticated user may read: system:discovery); None
    when it serves none of them. Other refusals and transport errors are the caller's."""
    from kubernetes.client.exceptions import ApiException

    for version in versions:
        try:
            api.call_api("/apis/{group}/{version}", "GET", {"group": group, "version": version},
                         header_params={"Accept": "application/json"}, response_type="object",
                         auth_settings=["BearerToken"], _return_http_data_only=True, _request_timeout=timeout)
            return version
        except ApiException as err:
            if err.status != 404:
                raise
    return None


def _pod_namespace() -> str:
    try:
        return Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
    except OSError:
        return ""


def _api_error(conn: Connection, what: str, err: Exception, scope: str = "in that namespace (a Role)") -> GpupipeError:
    """One line for a failed request: unreachable, refused (RBAC), not served (no Kueue)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(err, ApiException):
        status = err.status
        try:
            message = json.loads(err.body or "{}").get("message", "") or err.reason
        except ValueError:
            message = err.reason or ""
        if status in (401, 403):
            return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} refused to {what} ({status}: "
                                f"{message}); ask the cluster's administrator for list on "
                                f"workloads.kueue.x-k8s.io {scope} ({DOCS}), or use a context that has it")
        if status == 404:
            return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} does not serve "
                                f"{KUEUE_GROUP} workloads ({' or '.join(KUEUE_VERSIONS)}; 404: {message}); install "
                                "Kueue on that "
                                "cluster, or pass --context for the cluster that runs it")
        return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} failed to {what} ({status}: "
                            f"{message}); try again, or check the API server's health (kubectl get --raw /readyz)")
    reason = transport_reason(err)
    return GpupipeError(f"{conn.where}: the Kubernetes API at {conn.server} is unreachable ({reason}); check that "
                        "the context names the right cluster and that it is reachable from here (kubectl "
                        "--context ... get namespaces), or pass --kubeconfig/--context for another one")


def transport_reason(err: Exception) -> str:
    inner = getattr(err, "reason", None) or err
    text = str(inner)
    for known in ("Connection refused", "Name or service not known", "timed out", "No route to host",
                  "certificate verify failed"):
        if known.lower() in text.lower():
            return known.lower()
    return (text.splitlines() or [type(err).__name__])[0][-160:]


def _transport_errors() -> tuple:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    return ApiException, urllib3.exceptions.HTTPError, OSError


def list_workloads(conn: Connection, namespace: Optional[str]) -> List[dict]:
    """Every Workload in `namespace` (None: in every namespace), through CustomObjectsApi,
    page by page (limit and continue)."""
    from kubernetes import client

    api = client.CustomObjectsApi(conn.api)
    items, token = [], None
    where = f"namespace {namespace}" if namespace else "all namespaces"
    try:
        version = served_version(conn.api, KUEUE_GROUP) or KUEUE_VERSION  # none: the list's 404 says so
    except _transport_errors() as err:
        raise _api_error(conn, f"discover the {KUEUE_GROUP} versions", err) from None
    while True:
        kwargs = {"limit": PAGE, "_request_timeout": TIMEOUT, **({"_continue": token} if token else {})}
        try:
            if namespace:
                page = api.list_namespaced_custom_object(KUEUE_GROUP, version, namespace, WORKLOADS, **kwargs)
            else:
                page = api.list_cluster_custom_object(KUEUE_GROUP, version, WORKLOADS, **kwargs)
        except _transport_errors() as err:
            raise _api_error(conn, f"list workloads in {where}", err,
                             "in that namespace (a Role)" if namespace else "cluster-wide (a ClusterRole)") from None
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def pending_positions(conn: Connection, namespace: str, queue: str):
    """({workload name: PendingWorkload}, note): Kueue's visibility API for the LocalQueue;
    without it (not served, refused, unknown queue) no positions and a note saying why."""
    try:
        version = served_version(conn.api, VISIBILITY_GROUP) or KUEUE_VERSION
        summary = conn.api.call_api(VISIBILITY_PATH, "GET",
                                    path_params={"version": version, "namespace": namespace, "name": queue},
                                    query_params=[("limit", 1000)], header_params={"Accept": "application/json"},
                                    response_type="object", auth_settings=["BearerToken"],
                                    _return_http_data_only=True, _request_timeout=TIMEOUT)
    except _transport_errors() as err:
        status = getattr(err, "status", None)
        if status in (401, 403):
            why = (f"the visibility API refused ({status}): positions need get on "
                   "localqueues/pendingworkloads in visibility.kueue.x-k8s.io")
        elif status == 404:
            why = (f"the visibility API knows no LocalQueue {queue} in {namespace} (404), or is not served "
                   "(APIService v1beta2 or v1beta1.visibility.kueue.x-k8s.io)")
        elif status:
            why = f"the visibility API failed ({status}: {getattr(err, 'reason', '')})"
        else:
            why = f"the visibility API is unreachable ({transport_reason(err)})"
        return {}, f"note: positions unknown: {why}; see {DOCS}"
    return {(item.get("metadata") or {}).get("name"): item for item in (summary or {}).get("items") or []}, ""
