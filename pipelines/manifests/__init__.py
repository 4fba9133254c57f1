"""Kubernetes manifests derived from a config (pure functions: config in, dict out).

One module per `gpupipe manifest` sub-command: kserve (the InferenceService and the storage
initializer's access), tfserving (TF Serving on plain Kubernetes), rbac (the launcher's Role),
tenant (a team's share of the GPU pool through Kueue); common holds what the serving
manifests share. The names below are importable from `pipelines.manifests` itself, as the
CLI and the tests use them.
"""
from pipelines.manifests.kserve import (kserve_autoscaling_annotations, kserve_base, kserve_cluster_notes,
                                        kserve_gcs_access, kserve_inference_service, kserve_s3_access,
                                        kserve_service_account_name)
from pipelines.manifests.rbac import launcher_rbac
from pipelines.manifests.tenant import tenant_manifests
from pipelines.manifests.tfserving import (batching_parameters, monitoring_config, tf_serving_manifests,
                                           tf_serving_s3_env)

__all__ = ["batching_parameters", "kserve_autoscaling_annotations", "kserve_base", "kserve_cluster_notes",
           "kserve_gcs_access", "kserve_inference_service", "kserve_s3_access", "kserve_service_account_name",
           "launcher_rbac", "monitoring_config", "tenant_manifests", "tf_serving_manifests", "tf_serving_s3_env"]
