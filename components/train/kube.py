"""The launcher's Kubernetes API calls: each request with a timeout (TimedApi), retried on
the answers that mean "busy or restarting" within attempts and a deadline (with_retries),
the client from the pod's ServiceAccount or the kube config, and the pod's namespace."""
from __future__ import annotations

import time
from typing import Optional

from components.contracts.errors import GpupipeError

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

TRANSIENT_STATUS = (429, 500, 502, 503, 504)  # the API server busy, restarting or behind a flaky proxy
API_ATTEMPTS = 8
API_TIMEOUT = (10.0, 30.0)  # each request: (connect, read) seconds (the kubernetes client's _request_timeout)
API_DEADLINE = 180.0  # all tries of one call: a retry starts only if it can end by then


class TimedApi:
    """A kubernetes client API object whose every call carries API_TIMEOUT (the client's
    own per-request `_request_timeout`; without it a request waits for ever on an API server
    that accepts and never answers), unless the caller gives one."""

    def __init__(self, api, timeout=None):
        self._api, self._timeout = api, timeout

    def __getattr__(self, name: str):
        attr = getattr(self._api, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args, **kwargs):
            kwargs.setdefault("_request_timeout", self._timeout or API_TIMEOUT)
            return attr(*args, **kwargs)

        return call


def with_retries(call, what: str, attempts: Optional[int] = None, first_wait: float = 0.5,
                 deadline: Optional[float] = None):
    """`call()`, tried again with jittered backoff (0.5 s doubling, at most 15 s) when the
    Kubernetes API answers 429/5xx or the connection breaks or times out, within `attempts`
    tries and `deadline` seconds (no retry starts that could end later: its wait and one
    whole request, API_TIMEOUT); GpupipeError in one line when every try failed. Other
    answers (404, 409, 403) are the caller's to read."""
    import random

    import urllib3
    from kubernetes.client.exceptions import ApiException

    attempts, deadline = attempts or API_ATTEMPTS, deadline or API_DEADLINE
    started, why, tried = time.monotonic(), "", 0
    for attempt in range(attempts):
        tried += 1
        try:
            return call()
        except ApiException as err:
            if err.status not in TRANSIENT_STATUS:
                raise
            why = f"HTTP {err.status} {err.reason or ''}".strip()
        except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError) as err:
            why = type(getattr(err, "reason", None) or err).__name__  # MaxRetryError: what the one try met
        wait = min(first_wait * 2 ** attempt, 15.0)
        if attempt + 1 >= attempts or time.monotonic() - started + wait + sum(API_TIMEOUT) > deadline:
            break
        time.sleep(random.uniform(0.5, 1.0) * wait)
    raise GpupipeError(f"training: the Kubernetes API failed {tried} times in {time.monotonic() - started:.0f} s "
                       f"while the launcher {what} ({why}); check the API server (kubectl get --raw /readyz) and "
                       "retry the run")



def kubernetes_api():
    """CustomObjectsApi from the pod's service account (in cluster) or the kube config."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    configuration = client.Configuration.get_default_copy()
    configuration.retries = 0  # urllib3 tries once: the retries are with_retries', within its deadline
    return TimedApi(client.CustomObjectsApi(client.ApiClient(configuration)))


def current_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "default"
