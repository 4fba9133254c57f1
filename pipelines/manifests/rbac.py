"""The launcher's RBAC: the Role and RoleBinding a train task needs to create, follow and
delete its multi-worker JobSet or TFJob in a namespace.
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig


def launcher_rbac(config: PipelineConfig, namespace: str, service_account: str) -> list:
    """The RBAC the train task needs to launch its multi-worker job, as the pipeline's runner
    (`service_account` in the run's `namespace`: `pipeline-runner` on standalone Kubeflow
    Pipelines, `default-editor` in a Kubeflow profile namespace): create, get (follow) and
    delete JobSets or TFJobs (components/train/launch.py LAUNCHER_VERBS) in the job's
    namespace, and get the run's Argo Workflow (WORKFLOW_VERBS: was the run cancelled?) in
    the run's. With `training.pods.job_namespace` those are two namespaces: a RoleBinding
    grants only in its own namespace, so the jobs' Role and RoleBinding go in the job
    namespace with the subject in the run's, and the workers' ServiceAccount
    (WORKERS_SERVICE_ACCOUNT, no API token), unless `cluster.service_account` names one."""
    from components.train.launch import API, LAUNCHER_VERBS, WORKERS_SERVICE_ACCOUNT, WORKFLOW_API, WORKFLOW_VERBS

    if config.training.pods.launcher == "pod":
        raise GpupipeError(f"training.pods.launcher: pod: {config.name}'s train task launches no job, so it needs no Role; "
                           "set training.pods.launcher: jobset (or tfjob) to launch one")
    group, _, plural, _ = API[config.training.pods.launcher]
    job_namespace = config.training.pods.job_namespace or namespace
    name = f"gpupipe-{config.name}-launcher"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/pipeline": config.name}
    jobs = {"apiGroups": [group], "resources": [plural], "verbs": list(LAUNCHER_VERBS)}
    # on SIGTERM, whether the run was cancelled (components/train/follow.py run_cancelled)
    workflows = {"apiGroups": [WORKFLOW_API[0]], "resources": [WORKFLOW_API[2]], "verbs": list(WORKFLOW_VERBS)}
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}

    def role(ns: str, rules: list, role_name: str = name) -> list:
        return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": role_name, "namespace": ns, "labels": labels}, "rules": rules},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": role_name, "namespace": ns, "labels": labels},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
                 "subjects": [subject]}]

    if job_namespace == namespace:
        return role(namespace, [jobs, workflows])
    workers = [] if config.cluster.service_account else [
        {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
         "metadata": {"name": WORKERS_SERVICE_ACCOUNT, "namespace": job_namespace, "labels": labels}}]
    return [*role(job_namespace, [jobs]), *role(namespace, [workflows], f"{name}-run"), *workers]
