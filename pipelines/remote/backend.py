"""Reaching a KFP backend: its URL, that it answers, that it is recent enough, the client.

Each check fails fast in one line (kfp.Client itself retries for about 25 s): a URL without
a scheme, a token that would travel in clear text, an API that does not answer or refuses
the credentials, a backend older than what the compiled pipeline uses needs (needed_kfp). `gpupipe doctor` runs the same checks.
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Optional
from urllib.parse import urlparse

from components.contracts.compat.kfp import kfp_client_with_deadlines
from components.contracts.errors import GpupipeError
from pipelines.remote.auth import TOKEN_ENV, TOKEN_FILE_ENV, auth_token, kfp_token

# Every executor gpupipe compiles carries kfp-kubernetes 1.5's secretNameParameter, which KFP
# backends before 2.5.0 refuse (kubeflow/pipelines #11935).
MIN_KFP_VERSION = (2, 5, 0)
# What a compiled pipeline may use beyond that, the backend it needs, and how the compiled spec
# shows it. The exit handler's `taskFinalStatus` input: KFP 2.5.0's argocompiler/dag.go returns
# "task final status not supported yet"; kubeflow/pipelines #11953 added it, first released in 2.14.0.
FEATURE_MINIMUMS = (
    ((2, 14, 0), "notify.webhook_secret", "the exit handler's final status, kubeflow/pipelines #11953",
     "taskFinalStatus"),
)
_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def check_host(host: str) -> str:
    """The KFP API URL with its scheme, or a one-line error."""
    if not re.match(r"^https?://[^/\s]+", host):
        raise GpupipeError(f"--host '{host}': give the KFP API's URL with its scheme, e.g. "
                           "https://kubeflow.example.com/pipeline")
    return host.rstrip("/")


def check_token_transport(host: str, token: Optional[str] = None) -> None:
    """The KFP token travels only over https, or to this machine."""
    parsed = urlparse(host)
    loopback = parsed.hostname in ("localhost", "::1") or (parsed.hostname or "").startswith("127.")
    if (token or kfp_token()) and parsed.scheme != "https" and not loopback:
        raise GpupipeError(f"--host {host}: a KFP token is set and would travel in clear text; use the https:// URL "
                           f"of the KFP API (or unset {TOKEN_ENV} / {TOKEN_FILE_ENV})")


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects, but the Authorization header only to the host it was meant for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlparse(newurl).netloc != urlparse(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def check_reachable(host: str, timeout: float = 10.0, token: Optional[str] = None) -> dict:
    """Fails fast, in one line, when the KFP API does not answer (kfp.Client retries for ~25 s).
    Returns what its healthz endpoint answered: the KFP API server writes commit_sha,
    tag_name (the release, e.g. 2.5.0) and multi_user (backend/src/apiserver/main.go)."""
    token = token or kfp_token()
    check_token_transport(host, token)
    url = host.rstrip("/") + "/apis/v2beta1/healthz"
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.build_opener(_SameHostRedirects).open(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise GpupipeError(f"--host {host}: the KFP API refused the credentials (HTTP {err.code}); "
                               f"set {TOKEN_ENV} (or {TOKEN_FILE_ENV}, or --iap-client-id behind IAP) or refresh "
                               "your kube config") from None
        raise GpupipeError(f"--host {host}: the KFP API answered HTTP {err.code} at {url}; "
                           "check the URL (it should end at the ml-pipeline service or the Kubeflow gateway)") from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise GpupipeError(f"--host {host}: cannot reach the KFP API ({reason}); check the URL and your network") from None
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = {}
    return answer if isinstance(answer, dict) else {}


def kfp_version(healthz: dict) -> Optional[tuple]:
    """The KFP backend's release from its healthz answer (tag_name), None when it does not
    say (a build without TAG_NAME reports "unknown")."""
    match = _VERSION_RE.match(str(healthz.get("tag_name") or "").strip())
    return tuple(int(p) for p in match.groups()) if match else None


BASE_NEED = (MIN_KFP_VERSION, "gpupipe's pipelines", "kfp-kubernetes 1.5's secretNameParameter, kubeflow/pipelines "
                                                      "#11935")


def needed_kfp(pipeline_texts) -> tuple:
    """(the oldest KFP backend, what needs it, why) for these compiled pipelines (their YAML
    text): MIN_KFP_VERSION, or a FEATURE_MINIMUMS row whose mark is in the compiled spec."""
    need = BASE_NEED
    for text in pipeline_texts:
        for version, feature, why, mark in FEATURE_MINIMUMS:
            if mark in text and version > need[0]:
                need = (version, feature, why)
    return need


def check_kfp_version(host: str, healthz: dict, warn=None, need: tuple = BASE_NEED) -> None:
    """Refuses, in one line, a KFP backend older than `need` (needed_kfp of what will run); a
    backend that does not say its version gets a warning line (on stderr) and goes on."""
    least = ".".join(map(str, need[0]))
    found = kfp_version(healthz)
    if found is None:
        tag = str(healthz.get("tag_name") or "")[:40] or "none"
        (warn or _stderr)(f"warning: --host {host}: the KFP API does not say its version (tag_name {tag!r}); "
                          f"{need[1]} need{'' if need is BASE_NEED else 's'} KFP {least} or later")
        return
    if found < need[0]:
        drop = "" if need is BASE_NEED else f", or drop {need[1]}"
        verb = "need" if need is BASE_NEED else "needs"
        raise GpupipeError(f"--host {host}: KFP backend {'.'.join(map(str, found))} is older than {least}, which "
                           f"{need[1]} {verb} ({need[2]}); upgrade Kubeflow Pipelines to {least} or later{drop}")


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def connect(host: str, namespace: Optional[str] = None, iap_client_id: Optional[str] = None,
            need: tuple = BASE_NEED):
    """kfp.Client for `host` once it answers and is at least `need` (needed_kfp)."""
    import kfp

    host = check_host(host)
    token = auth_token(iap_client_id)
    check_kfp_version(host, check_reachable(host, token=token), need=need)
    return kfp_client_with_deadlines(kfp.Client(host=host, namespace=namespace, existing_token=token))
