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
