"""Recurring runs: a cron checked field by field, one schedule per config, paused,
resumed, deleted and listed.

KFP cannot update a recurring run in place, so `schedule` creates the new one first and
only then retires the earlier one of the same name: a refused create leaves the old
schedule running.
"""
from __future__ import annotations

from typing import List, Optional

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig
from pipelines.remote.versions import by_name, upload_version, version_name

# KFP's six cron fields: (name, lowest, highest, names allowed)
_CRON_FIELDS = (("second", 0, 59, ()), ("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
                ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
                ("day of week", 0, 6, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))


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


def _schedules_named(client, experiment_id: str, name: str) -> list:
    """The recurring runs called `name` in the experiment (the API's filter, then exactly)."""
    found = client.list_recurring_runs(experiment_id=experiment_id, page_size=100,
                                       filter=by_name(name)).recurring_runs or []
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
