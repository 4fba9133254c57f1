"""notify: tells a webhook how a run ended, in Slack's incoming-webhook JSON.

Three outcomes: `failed` (the run did not succeed: the failed task and its error),
`not_blessed` (it ran to the end and pushed nothing: the gate's figures and reasons), and
`pushed` (the version, its path and the gate's figures). On the cluster the pipeline's exit
handler runs `run_notify` with KFP's final status, and reads what push decided from the
serving store (components/store/served.py run_outcome); a local run calls `notify` with its
summary's figures.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import List, Optional

from components.contracts.errors import GpupipeError
from components.notify.settings import WEBHOOK_URL_ENV, NotifySettings
from components.store import served
from components.store.base import ServingStore

ATTEMPTS = 3
# KFP's driver fills PipelineTaskFinalStatus.state with the MLMD execution state of the exit
# handler's DAG (kubeflow/pipelines backend/src/v2/driver/resolve.go, the TaskFinalStatus case:
# `GetLastKnownState().String()`): COMPLETE (or CACHED), FAILED, CANCELED. SUCCEEDED is the
# SDK docstring's (Vertex) name, SUCCESS the local runner's.
_SUCCEEDED = ("COMPLETE", "CACHED", "SUCCEEDED", "SUCCESS")
# The same driver code sends `Error: &status.Status{}` (a TODO upstream): no message, ever.
NO_ERROR_FROM_KFP = "KFP sends no error message to the exit handler: the failed task and its log are on the run's page"


def outcome_of(state: str, decided: Optional[dict]) -> str:
    """The outcome from the run's final state and what its push decided (None: push never ran)."""
    if state.upper() not in _SUCCEEDED or decided is None:
        return "failed"
    return "pushed" if decided.get("pushed") else "not_blessed"


def gate_line(decided: dict) -> str:
    if decided.get("metric") is None:
        return ""
    return (f"eval {decided['metric']}: {decided['value']:.4f} (threshold {decided['threshold']:.4f}): "
            f"{'blessed' if decided.get('blessed') else 'not blessed'}")


def message(pipeline: str, outcome: str, decided: Optional[dict] = None, error: str = "",
            run_url: str = "") -> dict:
    """Slack-compatible JSON: `text` (what notifications and plain clients show) and one
    mrkdwn section with the same lines."""
    decided = decided or {}
    if outcome == "pushed":
        lines = [f"gpupipe {pipeline}: pushed version {decided.get('version')}"]
    elif outcome == "not_blessed":
        lines = [f"gpupipe {pipeline}: not blessed, nothing pushed"]
    else:
        lines = [f"gpupipe {pipeline}: run failed"]
    if error:
        lines.append(error.splitlines()[0][:500])
    if gate_line(decided):
        lines.append(gate_line(decided))
    lines += [f"- {reason}" for reason in decided.get("reasons", [])[:5]]
    if outcome == "not_blessed" and decided.get("reason"):
        lines.append(f"not pushed: {decided['reason']}")
    if run_url:
        lines.append(f"run: {run_url}")
    text = "\n".join(lines)
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]}


def send(url: str, payload: dict, timeout: float) -> int:
    """POSTs the JSON; a 5xx, a 429 or an unreachable endpoint is tried again (ATTEMPTS in
    all, 1 s then 2 s apart). Returns the attempts made; GpupipeError, one line, when all fail
    or the webhook refuses (4xx)."""
    body = json.dumps(payload).encode("utf-8")
    why = ""
    for attempt in range(1, ATTEMPTS + 1):
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                return attempt
        except urllib.error.HTTPError as err:
            why = f"HTTP {err.code}"
            if err.code < 500 and err.code != 429:
                break
        except (urllib.error.URLError, OSError) as err:
            why = str(getattr(err, "reason", err))
        if attempt < ATTEMPTS:
            time.sleep(2 ** (attempt - 1))
    host = url.split("/")[2] if "//" in url else url
    raise GpupipeError(f"notify: the webhook at {host} did not take the message ({why}); check notify.webhook_url, "
                       f"or on the cluster the Secret notify.webhook_secret names (key `url`)")


def notify(settings: NotifySettings, pipeline: str, outcome: str, decided: Optional[dict] = None,
           error: str = "", run_id: str = "", url: str = "") -> Optional[dict]:
    """Sends the message for `outcome` when the settings ask for it; returns what was sent."""
    url = url or settings.webhook_url or os.environ.get(WEBHOOK_URL_ENV, "")
    if not url or outcome not in settings.on:
        return None
    run_url = f"{settings.ui_url.rstrip('/')}/#/runs/details/{run_id}" if settings.ui_url and run_id else ""
    payload = message(pipeline, outcome, decided, error, run_url)
    send(url, payload, settings.timeout_seconds)
    return payload


def run_notify(*, settings: NotifySettings, state: str, error: str, pipeline: str, run_id: str,
               serving_base: str, model_name: str) -> List[str]:
    """The exit handler: KFP's final `state` (and its error message), what push recorded
    for `run_id` under the serving base. A webhook that fails is reported, not raised: the
    run's own status stands. Returns the lines it printed."""
    decided = None
    if state.upper() in _SUCCEEDED:
        decided = served.run_outcome(ServingStore(serving_base, model_name), run_id)
    outcome = outcome_of(state, decided)
    if outcome == "failed" and not error:
        error = (f"final state {state or 'unknown'}; " if state.upper() not in _SUCCEEDED else
                 "push recorded nothing for this run; ") + NO_ERROR_FROM_KFP
    try:
        sent = notify(settings, pipeline, outcome, decided, error=error, run_id=run_id)
        lines = [f"notify: {outcome}: " + ("sent" if sent else "nothing to send (no webhook, or not asked for)")]
    except GpupipeError as err:
        lines = [f"warning: {err}"]
    for line in lines:
        print(line, flush=True)
    return lines
