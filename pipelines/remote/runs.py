"""Runs on the backend: start one, follow it to its end, list the newest with what they pushed.

A run's page, its first failed task, its duration from the API's timestamps (the API sends
the epoch for "unset"), and the push task's state, which says whether the run pushed a model.
"""
from __future__ import annotations

import time
from typing import List, Optional

from components.contracts.errors import GpupipeError
from pipelines import steps
from pipelines.config import PipelineConfig
from pipelines.remote.versions import upload_version, version_name

DONE = ("SUCCEEDED", "FAILED", "SKIPPED", "CANCELED")
PUSH_TASK = steps.get(steps.PUSH).display_name  # the push task's name in the run's details
TRAIN_TASK = steps.TRAIN  # the train task's name in the compiled pipeline (and in its Argo node names)


def submit(client, config: PipelineConfig, package_text: str, sha: str, experiment: str,
           params: Optional[dict] = None):
    """Uploads a version and starts one run of it; returns (UploadedVersion, run)."""
    uploaded = upload_version(client, config, package_text, version_name(sha))
    exp = client.create_experiment(experiment)
    run = client.run_pipeline(experiment_id=exp.experiment_id, job_name=f"{config.name} {uploaded.version_name}",
                              params=params or {}, pipeline_id=uploaded.pipeline_id, version_id=uploaded.version_id)
    return uploaded, run


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
              report=print, lost_pod_retries: int = 0):
    """Follows a run to its end, reporting each change of state; returns the final run. A run
    that failed only because its train task's pod was deleted (an eviction, a drain, a lost
    node: Argo does not retry that, pipelines/remote/recover.py) is retried through KFP's
    Retry, up to `lost_pod_retries` times: the task starts again and re-attaches to its job."""
    from pipelines.remote.recover import retry_reason, retry_run

    deadline = time.monotonic() + timeout_seconds
    last, retried = None, 0
    while True:
        run = client.get_run(run_id)
        if run.state != last:
            report(f"run {run_id}: {run.state}")
            last = run.state
        if run.state == "FAILED" and retried < lost_pod_retries:
            why = retry_reason(client, run_id, TRAIN_TASK, report)
            if why:
                retried += 1
                report(f"run {run_id}: {why}; retrying the run (KFP Retry, {retried} of {lost_pod_retries}): "
                       "the task re-attaches to its job, which trained on")
                if retry_run(client, run_id, report):
                    last = None
                    continue
            retried = lost_pod_retries  # looked once: a run that cannot be retried is not looked at again
        if run.state in DONE:
            return run
        if time.monotonic() > deadline:
            raise GpupipeError(f"--watch: run {run_id} still {run.state} after {timeout_seconds:.0f}s; follow it "
                               "in the UI or raise --timeout")
        time.sleep(poll_seconds)


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
