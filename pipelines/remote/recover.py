"""A run whose train task lost its pod, retried through KFP's Retry API.

No KFP backend release (2.5.0 to 2.17.0, nor master) lets a task retry a deleted pod: the
argo compiler (backend/src/v2/compiler/argocompiler/container.go getTaskRetryStrategyFromInput)
writes a retryStrategy with `limit` and `backoff` only, from the IR's RetryPolicy, which has
no other fields (api/v2alpha1/pipeline_spec.proto: max_retry_count, backoff_duration,
backoff_factor, backoff_max_duration). Argo then takes retryPolicy OnFailure, and marks the
node of a pod that is gone `Error` with the message "pod deleted" (workflow/controller/
operator.go, v3.5 to v4.0), which OnFailure does not retry. So the run fails, while its
JobSet trains on (the launcher leaves it: components/train/follow.py).

KFP's Retry (`POST /apis/v2beta1/runs/{id}:retry`, backend resource_manager.go RetryRun,
util/workflow.go GenerateRetryExecution) resubmits the same Workflow with its succeeded nodes
kept and its failed ones reset: the train task starts again in a new pod of the same
Workflow, so its job has the same name and the launcher re-attaches to it. The follower
(`gpupipe submit --watch`) asks for it when the run failed only because the train task's pod
was deleted, read from the run's Workflow as KFP keeps it (the v1beta1 run's
pipeline_runtime.workflow_manifest; the v2beta1 run's task details carry no node message).
"""
from __future__ import annotations

import base64
import gzip
import json
import re
from typing import List, Optional, Tuple

POD_DELETED = "pod deleted"  # Argo's message on the node of a pod that is gone (operator.go, podReconciliation)
FAILED_PHASES = ("Failed", "Error")


def run_workflow(client, run_id: str) -> dict:
    """The run's Argo Workflow as KFP keeps it (GET /apis/v1beta1/runs/{id}: RunDetail's
    pipeline_runtime.workflow_manifest, backend api_converter.go toApiRunDetailV1); {} when
    KFP has none for it."""
    from components.contracts.compat.kfp import kfp_run_api

    api = kfp_run_api(client)
    detail = api.api_client.call_api("/apis/v1beta1/runs/{run_id}", "GET", {"run_id": run_id},
                                     header_params={"Accept": "application/json"}, response_type="object",
                                     auth_settings=["Bearer"], _return_http_data_only=True)
    manifest = ((detail or {}).get("pipeline_runtime") or {}).get("workflow_manifest") or ""
    return json.loads(manifest) if manifest else {}


def workflow_nodes(workflow: dict) -> dict:
    """status.nodes, or Argo's status.compressedNodes (gzip, then base64: util/file
    CompressEncodeString) when the controller compressed them."""
    status = workflow.get("status") or {}
    if status.get("nodes"):
        return status["nodes"]
    packed = status.get("compressedNodes")
    return json.loads(gzip.decompress(base64.b64decode(packed))) if packed else {}


def lost_pods(workflow: dict, task: str) -> Tuple[List[str], List[str]]:
    """(the failed pods of `task` that were deleted, every other failed pod) of a failed
    Workflow. KFP's argo compiler runs a task's container in the DAG task `executor` of the
    task's own DAG task: its pod node is `<...>.<task>.executor`, or `<...>.executor(N)` under
    an Argo retry node."""
    mine = re.compile(rf"(^|\.){re.escape(task)}\.executor(\(\d+\))?$")
    lost, other = [], []
    for node in workflow_nodes(workflow).values():
        if node.get("type") != "Pod" or node.get("phase") not in FAILED_PHASES:
            continue
        name = node.get("name", "")
        if mine.search(name) and node.get("phase") == "Error" and node.get("message") == POD_DELETED:
            lost.append(name)
        else:
            other.append(f"{name}: {node.get('phase')} {node.get('message', '')}".rstrip())
    return lost, other


def retry_reason(client, run_id: str, task: str, report=print) -> Optional[str]:
    """Why the failed run should be retried ("the <task> task's pod was deleted ..."), or None
    when it failed for another reason too (a step that failed on its own is not retried) or
    its Workflow cannot be read (a line through `report` says so)."""
    from kfp_server_api.exceptions import ApiException

    try:
        workflow = run_workflow(client, run_id)
    except (ApiException, ValueError) as err:
        report(f"run {run_id}: cannot read its Workflow to see why it failed ({_why(err)}); not retried")
        return None
    if (workflow.get("status") or {}).get("offloadNodeStatusVersion"):  # util/workflow.go CanRetry
        report(f"run {run_id}: its node status is offloaded to Argo's database, which KFP's Retry refuses; not retried")
        return None
    lost, other = lost_pods(workflow, task)
    if lost and not other:
        return f"the {task} task's pod was deleted (Argo node {lost[-1]}: '{POD_DELETED}')"
    return None


def retry_run(client, run_id: str, report=print) -> bool:
    """KFP's Retry of a failed run (the same call as the UI's Retry button); False, with a
    line through `report`, when KFP refuses it."""
    from kfp_server_api.exceptions import ApiException

    from components.contracts.compat.kfp import kfp_run_api

    try:
        kfp_run_api(client).run_service_retry_run(run_id=run_id)
    except ApiException as err:
        report(f"run {run_id}: KFP refused the Retry ({_why(err)}); retry it in the UI once the cause is gone")
        return False
    return True


def _why(err) -> str:
    status = getattr(err, "status", None)
    body = str(getattr(err, "body", "") or err).strip().splitlines()
    return (f"HTTP {status}: " if status else "") + (body[0][:200] if body else type(err).__name__)
