"""Talking to a Kubeflow Pipelines v2 backend: upload a pipeline version, start a run,
replace a recurring run, list runs. Credentials come from the environment (KFP_TOKEN)
or the kube config that kfp.Client reads, never from the pipeline config.

One module per concern: auth (the bearer token), backend (the URL, reachability, the KFP
version, the client), versions (naming and uploading a pipeline version), runs (submit,
watch, list) and schedules (recurring runs). The names below are importable from
`pipelines.remote` itself, as the CLI and `gpupipe doctor` use them.
"""
from pipelines.remote.auth import (IAP_CLIENT_ID_ENV, IN_CLUSTER_TOKENS, TOKEN_ENV, TOKEN_FILE_ENV, auth_token,
                                   iap_token, kfp_token)
from pipelines.remote.backend import (FEATURE_MINIMUMS, MIN_KFP_VERSION, check_host, check_kfp_version, check_reachable,
                                      check_token_transport, connect, kfp_version, needed_kfp)
from pipelines.remote.runs import (DONE, PUSH_TASK, failed_task, format_duration, push_task_state, recent_runs,
                                   run_seconds, run_url, submit, watch_run)
from pipelines.remote.schedules import change_schedules, kfp_cron, list_schedules, schedule, schedule_name
from pipelines.remote.versions import UploadedVersion, git_sha, upload_version, version_name

__all__ = ["DONE", "FEATURE_MINIMUMS", "IAP_CLIENT_ID_ENV", "IN_CLUSTER_TOKENS", "MIN_KFP_VERSION", "PUSH_TASK", "TOKEN_ENV",
           "TOKEN_FILE_ENV", "UploadedVersion", "auth_token", "change_schedules", "check_host", "check_kfp_version",
           "check_reachable", "check_token_transport", "connect", "failed_task", "format_duration", "git_sha",
           "iap_token", "kfp_cron", "kfp_token", "kfp_version", "list_schedules", "needed_kfp", "push_task_state", "recent_runs",
           "run_seconds", "run_url", "schedule", "schedule_name", "submit", "upload_version", "version_name",
           "watch_run"]
