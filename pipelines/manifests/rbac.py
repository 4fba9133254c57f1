"""The launcher's RBAC: the Role and RoleBinding a train task needs to create, follow and
delete its multi-worker JobSet or TFJob in a namespace.
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig


def launcher_rbac(config: PipelineConfig, namespace: str, service_account: str) -> list:
    """The Role and RoleBinding the train task needs to launch its multi-worker job in
    `namespace`: create, get (follow) and delete JobSets or TFJobs, the verbs the launcher
    calls (components/train/launch.py LAUNCHER_VERBS), and get the run's Argo Workflow
    (WORKFLOW_VERBS: was the run cancelled?), as the pipeline's runner
    (`service_account`: `pipeline-runner` on standalone Kubeflow Pipelines, `default-editor`
    in a Kubeflow profile namespace)."""
    from components.train.launch import API, LAUNCHER_VERBS, WORKFLOW_API, WORKFLOW_VERBS

    if config.training.pods.launcher == "pod":
        raise GpupipeError(f"training.pods.launcher: pod: {config.name}'s train task launches no job, so it needs no Role; "
                           "set training.pods.launcher: jobset (or tfjob) to launch one")
    group, _, plural, _ = API[config.training.pods.launcher]
    name = f"gpupipe-{config.name}-launcher"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/pipeline": config.name}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": [{"apiGroups": [group], "resources": [plural], "verbs": list(LAUNCHER_VERBS)},
                  # on SIGTERM, whether the run was cancelled (components/train/follow.py run_cancelled)
                  {"apiGroups": [WORKFLOW_API[0]], "resources": [WORKFLOW_API[2]], "verbs": list(WORKFLOW_VERBS)}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [role, binding]
