"""The requests `gpupipe doctor` sends to the Kubernetes API, through the real kubernetes client
(the shapes: pipelines/doctor/__init__.py)."""
from __future__ import annotations

import json
from typing import Callable, List, Optional, Tuple

from pipelines.doctor.line import Line

METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TIMEOUT = (5, 30)  # seconds: to connect, to read


class Unreachable(Exception):
    """The Kubernetes API did not answer, or refused the credentials: the line says which."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line


def api_status(err) -> Tuple[int, str]:
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
        self.versions: dict = {}  # (group, versions) -> the first served (Cluster.served)

    def _call(self, fn: Callable, *args, **kwargs):
        """fn's answer; None on 404; an ApiException for other refusals; Unreachable when the
        API server does not answer or refuses the credentials."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        from pipelines.pool import transport_reason

        try:
            return fn(*args, _request_timeout=TIMEOUT, **kwargs)
        except ApiException as err:
            code, message = api_status(err)
            if code == 404:
                return None
            if code == 401:
                raise Unreachable(f"Kubernetes API at {self.conn.server} ({self.conn.where}): refused the "
                                  f"credentials (401: {message}); refresh them (e.g. gcloud container clusters "
                                  "get-credentials) or pass --kubeconfig/--context") from None
            raise
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise Unreachable(f"Kubernetes API at {self.conn.server} ({self.conn.where}): unreachable "
                              f"({transport_reason(err)}); check that the context names the cluster and that it "
                              "answers (kubectl cluster-info), or pass --kubeconfig/--context") from None

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

    def served(self, group: str, versions: Tuple[str, ...]) -> Optional[str]:
        """The first of `versions` that API discovery lists for `group` (asked once), None when
        none is served; an ApiException when discovery is refused."""
        if (group, versions) not in self.versions:
            self.versions[(group, versions)] = next((v for v in versions if self.discovery(group, v) is not None),
                                                    None)
        return self.versions[(group, versions)]

    def custom(self, group: str, version: str, plural: str, name: str, namespace: Optional[str] = None):
        objects = self.client.CustomObjectsApi(self.api)
        if namespace:
            return self._call(objects.get_namespaced_custom_object, group, version, namespace, plural, name)
        return self._call(objects.get_cluster_custom_object, group, version, plural, name)

    def config_map(self, namespace: str, name: str) -> Optional[dict]:
        found = self._call(self.client.CoreV1Api(self.api).read_namespaced_config_map, name, namespace)
        return None if found is None else {"data": found.data or {}}

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


def refused(what: str, err, fix: str) -> Line:
    code, message = api_status(err)
    return Line(False, f"{what}: the Kubernetes API refused ({code}: {message}); {fix}")
