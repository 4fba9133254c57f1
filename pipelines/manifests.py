"""Kubernetes manifests derived from a config (pure functions: config in, dict out)."""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig


def kserve_inference_service(config: PipelineConfig, serving_base: str = "") -> dict:
    """A KServe InferenceService with the TensorFlow predictor reading the versioned model
    directory `<serving base>/<model name>/` (KServe's TF runtime serves its integer versions)."""
    srv = config.serving
    base = serving_base or srv.base
    if "://" not in base:
        raise GpupipeError(f"serving.base: '{base}' is a local path and KServe needs a URI it can read; "
                           "pass --serving-base gs://BUCKET/PATH (or s3://, pvc://)")
    predictor = {
        "tensorflow": {
            "storageUri": f"{base.rstrip('/')}/{srv.model_name}",
            "runtimeVersion": srv.tf_serving_version,
        }
    }
    if srv.service_account:
        predictor["serviceAccountName"] = srv.service_account
    metadata = {"name": srv.model_name, "labels": {"app.kubernetes.io/managed-by": "gpupipe",
                                                   "gpupipe/pipeline": config.name}}
    if srv.namespace:
        metadata["namespace"] = srv.namespace
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": metadata,
            "spec": {"predictor": predictor}}


def launcher_rbac(config: PipelineConfig, namespace: str, service_account: str) -> list:
    """The Role and RoleBinding the train task needs to launch its multi-worker job in
    `namespace`: create, follow and delete JobSets or TFJobs, as the pipeline's runner
    (`service_account`: `pipeline-runner` on standalone Kubeflow Pipelines, `default-editor`
    in a Kubeflow profile namespace)."""
    from components.train.launch import API

    group, _, plural, _ = API[config.training.launcher]
    name = f"gpupipe-{config.name}-launcher"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/pipeline": config.name}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": [{"apiGroups": [group], "resources": [plural], "verbs": ["create", "get", "list", "watch", "delete"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [role, binding]
