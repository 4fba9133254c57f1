"""Talking to a Kubeflow Pipelines v2 backend: upload a pipeline version, start a run,
replace a recurring run, list runs. Credentials come from the environment (KFP_TOKEN)
or the kube config that kfp.Client reads, never from the pipeline config."""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse
from dataclasses import dataclass
from typing import List, Optional

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig
from pipelines.version import __version__

TOKEN_ENV = "KFP_TOKEN"
TOKEN_FILE_ENV = "KFP_TOKEN_FILE"
# Inside a Kubeflow cluster: the projected token KFP gives pipeline pods, else the pod's own.
IN_CLUSTER_TOKENS = ("/var/run/secrets/kubeflow/pipelines/token", "/var/run/secrets/kubernetes.io/serviceaccount/token")


def kfp_token(in_cluster_paths=IN_CLUSTER_TOKENS) -> Optional[str]:
    """The bearer token for the KFP API: $KFP_TOKEN, else the file $KFP_TOKEN_FILE names,
    else an in-cluster service-account token; None (kfp.Client's kube config) otherwise."""
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV].strip()
    path = os.environ.get(TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as err:
            raise GpupipeError(f"{TOKEN_FILE_ENV}: cannot read {path} ({err.strerror}); fix the path") from None
    for candidate in in_cluster_paths:
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                return f.read().strip()
    return None


IAP_CLIENT_ID_ENV = "KFP_IAP_CLIENT_ID"


def iap_token(client_id: str) -> str:
    """A Google ID token for an IAP-protected endpoint: its OAuth client id is the audience.
    From a service-account key ($GOOGLE_APPLICATION_CREDENTIALS) or the GCP metadata
    server (GKE, Compute Engine, Cloud Run), as google-auth finds them."""
    import google.auth.exceptions
    import google.auth.transport.requests
    import google.oauth2.id_token

    where = f"--iap-client-id {client_id}"
    try:
        return google.oauth2.id_token.fetch_id_token(google.auth.transport.requests.Request(), client_id)
    except google.auth.exceptions.DefaultCredentialsError as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise GpupipeError(f"{where}: no Google credentials that give an ID token ({reason}); set "
                           "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where the GCP "
                           "metadata server answers") from None
    except (google.auth.exceptions.RefreshError, google.auth.exceptions.TransportError, ValueError) as err:
        reason = (str(err.args[0] if err.args else "").splitlines() or [type(err).__name__])[0][:200]
        raise GpupipeError(f"{where}: Google gave no ID token for this audience ({reason}); check the client id "
                           "(the IAP OAuth client of the Kubeflow endpoint) and that the service account may use "
                           "IAP") from None


def auth_token(iap_client_id: Optional[str] = None) -> Optional[str]:
    """The bearer token for the KFP API: an IAP ID token when an IAP client id is given (or
    in $KFP_IAP_CLIENT_ID), else kfp_token()."""
    client_id = iap_client_id or os.environ.get(IAP_CLIENT_ID_ENV)
    return iap_token(client_id) if client_id else kfp_token()


DONE = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
# KFP's six cron fields: (name, lowest, highest, names allowed)
_CRON_FIELDS = (("second", 0, 59, ()), ("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
                ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))


def git_sha(cwd: str = ".") -> str:
    """The commit being submitted: $GITHUB_SHA in CI, else `git rev-parse HEAD`, with
    `-dirty` when the work tree has uncommitted changes; "nogit" outside a checkout."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"][:12]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{sha}-dirty" if dirty else sha
    except (OSError, subprocess.CalledProcessError):
        return "nogit"


def version_name(sha: str) -> str:
    return f"v{__version__}-{sha}"


def _cron_field_problem(text: str, name: str, low: int, high: int, words: tuple) -> str:
    """Why one cron field is invalid ("" when it is valid): *, ?, values, ranges, steps, lists."""
    if text in ("*", "?") and (text == "*" or name.startswith("day")):
        return ""
    for part in text.split(","):
        body, _, step = part.partition("/")
        if step and (not step.isdigit() or int(step) == 0):
            return f"step '{step}' in the {name} field is not a positive number"
        if body == "*" and step:
            continue
        for value in body.split("-", 1):
            value = value.upper()
            number = low + words.index(value) if value in words else None
            if number is None:
                if not value.isdigit():
                    return f"'{value}' in the {name} field is not a number" + (
                        f" or one of {', '.join(words)}" if words else "")
                number = int(value)
            if not low <= number <= high:
                return f"{number} is outside {low}-{high} in the {name} field"
    return ""


def kfp_cron(expression: str) -> str:
    """KFP's cron has six fields (seconds first); a five-field Unix cron gets "0" seconds.
    Each field is checked against its range, and the reason is the error."""
    fields = expression.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise GpupipeError(f"--cron '{expression}': not a cron expression; use five fields like '0 3 * * *' "
                           "(03:00 daily) or six with seconds first")
    for text, (name, low, high, words) in zip(fields, _CRON_FIELDS):
        problem = _cron_field_problem(text, name, low, high, words)
        if problem:
            raise GpupipeError(f"--cron '{expression}': {problem}; e.g. '0 3 * * *' is 03:00 daily")
    return " ".join(fields)


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


# Every executor gpupipe compiles carries kfp-kubernetes 1.5's secretNameParameter, which KFP
# backends before 2.5.0 refuse (kubeflow/pipelines #11935).
MIN_KFP_VERSION = (2, 5, 0)
_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


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


def check_kfp_version(host: str, healthz: dict, warn=None) -> None:
    """Refuses, in one line, a KFP backend older than MIN_KFP_VERSION; a backend that does not
    say its version gets a warning line (on stderr) and goes on."""
    need = ".".join(map(str, MIN_KFP_VERSION))
    found = kfp_version(healthz)
    if found is None:
        tag = str(healthz.get("tag_name") or "")[:40] or "none"
        (warn or _stderr)(f"warning: --host {host}: the KFP API does not say its version (tag_name {tag!r}); "
                          f"gpupipe's pipelines need KFP {need} or later")
        return
    if found < MIN_KFP_VERSION:
        raise GpupipeError(f"--host {host}: KFP backend {'.'.join(map(str, found))} is older than {need}, which "
                           "gpupipe's pipelines need (kfp-kubernetes 1.5's secretNameParameter, kubeflow/pipelines "
                           f"#11935); upgrade Kubeflow Pipelines to {need} or later")


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr)


def connect(host: str, namespace: Optional[str] = None, iap_client_id: Optional[str] = None):
    import kfp

    host = check_host(host)
    token = auth_token(iap_client_id)
    check_kfp_version(host, check_reachable(host, token=token))
    return kfp.Client(host=host, namespace=namespace, existing_token=token)


@dataclass
class UploadedVersion:
    pipeline_id: str
    version_id: str
    version_name: str
    created: bool


def _by_name(name: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})


def upload_version(client, config: PipelineConfig, package_text: str, name: str) -> UploadedVersion:
    """Uploads the compiled pipeline as version `name` of the pipeline `config.name`
    (creating the pipeline on first upload); an existing version of that name is reused."""
    with tempfile.TemporaryDirectory() as tmp:
        package = os.path.join(tmp, f"{config.name}.yaml")
        with open(package, "w", encoding="utf-8") as f:
            f.write(package_text)
        pipeline_id = client.get_pipeline_id(config.name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package, pipeline_name=config.name,
                                              description=config.description or None)
            pipeline_id = pipeline.pipeline_id
        existing = client.list_pipeline_versions(pipeline_id, filter=_by_name(name)).pipeline_versions or []
        if existing:
            return UploadedVersion(pipeline_id, existing[0].pipeline_version_id, name, created=False)
        version = client.upload_pipeline_version(package, pipeline_version_name=name, pipeline_id=pipeline_id)
        return UploadedVersion(pipeline_id, version.pipeline_version_id, name, created=True)


def submit(client, config: PipelineConfig, package_text: str, sha: str, experiment: str,
           params: Optional[dict] = None):
    """Uploads a version and starts one run of it; returns (UploadedVersion, run)."""
    uploaded = upload_version(client, config, package_text, version_name(sha))
    exp = client.create_experiment(experiment)
    run = client.run_pipeline(experiment_id=exp.experiment_id, job_name=f"{config.name} {uploaded.version_name}",
                              params=params or {}, pipeline_id=uploaded.pipeline_id, version_id=uploaded.version_id)
    return uploaded, run


def _schedules_named(client, experiment_id: str, name: str) -> list:
    """The recurring runs called `name` in the experiment (the API's filter, then exactly)."""
    found = client.list_recurring_runs(experiment_id=experiment_id, page_size=100,
                                       filter=_by_name(name)).recurring_runs or []
    return [job for job in found if job.display_name == name]


def schedule_name(config: PipelineConfig) -> str:
    return f"{config.name}-schedule"


def schedule(client, config: PipelineConfig, package_text: str, sha: str, experiment: str, cron: str,
             max_concurrency: int = 1, catchup: bool = True):
    """Creates the recurring run, then retires any earlier one of the same name (KFP cannot
    update a recurring run in place): a failed create leaves the old schedule running.
    Returns (UploadedVersion, new recurring run, ids deleted)."""
    cron6 = kfp_cron(cron)
    uploaded = upload_version(client, config, package_text, version_name(sha))
    exp = client.create_experiment(experiment)
    name = schedule_name(config)
    existing = _schedules_named(client, exp.experiment_id, name)
    try:
        job = client.create_recurring_run(
            experiment_id=exp.experiment_id, job_name=name, description=f"gpupipe {uploaded.version_name}",
            cron_expression=cron6, max_concurrency=max_concurrency, no_catchup=not catchup,
            pipeline_id=uploaded.pipeline_id, version_id=uploaded.version_id, enabled=True)
    except Exception as err:  # the KFP client raises its ApiException; keep the old schedule
        reason = getattr(err, "reason", None) or str(err).splitlines()[0]
        kept = f"; {len(existing)} earlier schedule(s) left running" if existing else ""
        raise GpupipeError(f"schedule {name}: KFP refused to create it ({reason}){kept}") from None
    deleted: List[str] = []
    for old in existing:
        if old.recurring_run_id != job.recurring_run_id:
            client.delete_recurring_run(old.recurring_run_id)
            deleted.append(old.recurring_run_id)
    return uploaded, job, deleted


def change_schedules(client, config: PipelineConfig, experiment: str, action: str) -> List[str]:
    """Pauses, resumes or deletes the recurring run(s) of `config` in `experiment`; returns
    their ids."""
    exp = client.get_experiment(experiment_name=experiment)
    jobs = _schedules_named(client, exp.experiment_id, schedule_name(config))
    do = {"pause": client.disable_recurring_run, "resume": client.enable_recurring_run,
          "delete": client.delete_recurring_run}[action]
    for job in jobs:
        do(job.recurring_run_id)
    return [job.recurring_run_id for job in jobs]


def list_schedules(client, experiment: Optional[str] = None) -> List[dict]:
    experiment_id = client.get_experiment(experiment_name=experiment).experiment_id if experiment else None
    jobs = client.list_recurring_runs(experiment_id=experiment_id, page_size=100).recurring_runs or []
    return [{"id": j.recurring_run_id, "name": j.display_name, "status": j.status or "-",
             "cron": getattr(getattr(j.trigger, "cron_schedule", None), "cron", None) or "-"} for j in jobs]


def run_url(host: str, run_id: str) -> str:
    """The run's page in the Kubeflow Pipelines UI."""
    return f"{host.rstrip('/')}/#/runs/details/{run_id}"


def failed_task(run) -> str:
    """'<task>: <message>' of the first failed task of a run, else the run's own error."""
    for task in (getattr(run.run_details, "task_details", None) or []):
        if task.state == "FAILED":
            message = getattr(task.error, "message", "") if task.error else ""
            return f"{task.display_name}: {message}".rstrip(": ")
    return getattr(run.error, "message", "") if run.error else ""


def watch_run(client, run_id: str, poll_seconds: float = 10.0, timeout_seconds: float = 7 * 24 * 3600,
              report=print):
    """Follows a run to its end, reporting each change of state; returns the final run."""
    deadline = time.monotonic() + timeout_seconds
    last = None
    while True:
        run = client.get_run(run_id)
        if run.state != last:
            report(f"run {run_id}: {run.state}")
            last = run.state
        if run.state in DONE:
            return run
        if time.monotonic() > deadline:
            raise GpupipeError(f"--watch: run {run_id} still {run.state} after {timeout_seconds:.0f}s; follow it "
                               "in the UI or raise --timeout")
        time.sleep(poll_seconds)


PUSH_TASK = "Push to serving"  # the push task's display name (pipelines/factory.py)


def _when(value):
    """A timestamp of the API as a datetime; None when unset (the API sends the epoch)."""
    from datetime import datetime

    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return value if value is not None and value.year > 1970 else None


def run_seconds(run, now=None) -> Optional[float]:
    """From the run's start (scheduled, else created) to its end, or to now while it runs."""
    from datetime import datetime, timezone

    start = _when(run.scheduled_at) or _when(run.created_at)
    end = _when(run.finished_at) if run.state in DONE else (now or datetime.now(timezone.utc))
    return (end - start).total_seconds() if start and end else None


def push_task_state(run) -> Optional[str]:
    """The push task's state in the run details; None when it has not started."""
    for task in (getattr(run.run_details, "task_details", None) or []):
        if task.display_name == PUSH_TASK:
            return task.state
    return None


def recent_runs(client, limit: int = 10, experiment: Optional[str] = None,
                pushed_by_run: Optional[dict] = None) -> List[dict]:
    """The newest runs with their state and duration and, from each run's details (the push
    task's state) and the serving store (the run that pushed each version, when given as
    `pushed_by_run`: run id -> version), what the run pushed."""
    experiment_id = None
    if experiment:
        experiment_id = client.get_experiment(experiment_name=experiment).experiment_id
    response = client.list_runs(page_size=limit, sort_by="created_at desc", experiment_id=experiment_id)
    found = []
    for listed in response.runs or []:
        run = client.get_run(listed.run_id)  # the details (task states) come with GET of one run
        push = push_task_state(run)
        if pushed_by_run is not None and run.run_id in pushed_by_run:
            pushed = f"version {pushed_by_run[run.run_id]}"
        elif push == "SUCCEEDED":
            pushed = "not pushed" if pushed_by_run is not None else "push SUCCEEDED"
        else:
            pushed = f"push {push}" if push else "-"
        found.append({"id": run.run_id, "name": run.display_name, "state": run.state,
                      "created": str(run.created_at or ""), "seconds": run_seconds(run), "pushed": pushed})
    return found


def format_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
