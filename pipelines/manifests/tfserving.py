"""TF Serving on plain Kubernetes: a ConfigMap, a Deployment reading `<serving base>/models.config`
(the stable and canary labels push writes), a Service and a HorizontalPodAutoscaler; its S3
file system environment and the batching and monitoring text protos.
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from components.contracts.storage import schemes
from components.contracts.pods import (TMP_MOUNT, TMP_VOLUME, restricted_container_security,
                                       restricted_pod_security)
from pipelines.config import PipelineConfig
from pipelines.manifests.common import (fixed_replicas, object_labels, object_metadata, s3_settings, served_base,
                                       server_batching, server_placement, server_resources)

GRPC_PORT, REST_PORT = 8500, 8501
PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
TFSERVING_CONFIG_DIR = "/etc/tfserving"
CONFIG_POLL_SECONDS = 30
TFSERVING_TMP_LIMIT = "1Gi"
TFSERVING_S3_SINCE = (2, 7)  # the stock tensorflow/serving images have no s3:// file system from 2.7 on


def tf_serving_s3_env(config: PipelineConfig) -> list:
    """TF Serving's S3 file system environment for an s3:// serving base: the region, the
    endpoint as host:port (no scheme: S3_USE_HTTPS says which), TLS verification, and the
    keys from storage.s3.credentials_secret by secretKeyRef."""
    srv, s3 = config.serving, s3_settings(config)
    if not srv.tf_serving_image:
        version = tuple(int(p) for p in srv.tf_serving_version.split(".")[:2] if p.isdigit())
        if version >= TFSERVING_S3_SINCE:
            raise GpupipeError(
                f"serving.tf_serving_image: the stock tensorflow/serving:{srv.tf_serving_version} image has no s3:// "
                "file system (gone since 2.7, tensorflow/serving#1963); set serving.tf_serving_image to a TF Serving "
                "build with S3 support, or serve with KServe (gpupipe manifest kserve)")
    env = [{"name": "AWS_REGION", "value": s3.region}]
    if s3.host_port:
        env.append({"name": "S3_ENDPOINT", "value": s3.host_port})
    env += [{"name": "S3_USE_HTTPS", "value": "1" if s3.uses_https else "0"},
            {"name": "S3_VERIFY_SSL", "value": "1" if s3.uses_https else "0"}]
    env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for var, (secret, key) in sorted(s3.secret_environment().items())]
    return env


def batching_parameters(config: PipelineConfig) -> str:
    """TF Serving's --batching_parameters_file (a BatchingParameters text proto,
    tensorflow_serving/servables/tensorflow/session_bundle_config.proto: each field a wrapped
    Int64Value), with serving.batching sized to the server (CPU or GPU)."""
    b = server_batching(config)
    return "".join(f"{name} {{ value: {b[name]} }}\n" for name in (
        "max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads"))


def tf_serving_image(config: PipelineConfig) -> str:
    """serving.tf_serving_image, else the stock image of the pinned version: its -gpu tag (TF
    Serving's CUDA build, tensorflow_serving/tools/docker/Dockerfile.gpu) on GPU pods."""
    srv = config.serving
    return srv.tf_serving_image or f"tensorflow/serving:{srv.tf_serving_version}" + (
        "-gpu" if srv.resources.gpus else "")


def monitoring_config() -> str:
    """TF Serving's --monitoring_config_file (a MonitoringConfig text proto): Prometheus
    metrics on the REST port."""
    return f'prometheus_config {{\n  enable: true\n  path: "{PROMETHEUS_PATH}"\n}}\n'


def tf_serving_manifests(config: PipelineConfig, serving_base: str = "") -> list:
    """TF Serving on plain Kubernetes: a ConfigMap (batching parameters, monitoring
    config), a Deployment whose server reads `<serving base>/models.config` (the labels
    `stable` and `canary`, polled every 30 s, so promote, abort and rollback reach it
    without a restart), a Service (gRPC 8500, REST 8501) and, when max_replicas >
    min_replicas, a HorizontalPodAutoscaler."""
    srv, cluster = config.serving, config.cluster
    base = served_base(config, serving_base, schemes.served_by("tfserving"),
                       f"pass --serving-base {schemes.examples(schemes.served_by('tfserving'))} (TF Serving reads "
                       "models.config and the versions from it)")
    scaling = srv.autoscaling
    replicas = fixed_replicas(config, "the TF Serving Deployment") if srv.resources.gpus else None
    if replicas is None and scaling.metric not in ("cpu", "memory"):
        raise GpupipeError(f"serving.autoscaling.metric: {scaling.metric} is Knative's (KServe only); the TF Serving "
                           "Deployment scales on cpu or memory: set serving.autoscaling.metric: cpu")
    name = f"{srv.model_name}-tfserving"
    args = [f"--port={GRPC_PORT}", f"--rest_api_port={REST_PORT}", f"--model_config_file={base}/models.config",
            f"--model_config_file_poll_wait_seconds={CONFIG_POLL_SECONDS}",
            # push labels a version canary in the same change that adds it
            "--allow_version_labels_for_unavailable_models=true",
            f"--monitoring_config_file={TFSERVING_CONFIG_DIR}/monitoring.config"]
    data = {"monitoring.config": monitoring_config()}
    if srv.batching.enabled:
        args += ["--enable_batching=true", f"--batching_parameters_file={TFSERVING_CONFIG_DIR}/batching.config"]
        data["batching.config"] = batching_parameters(config)
    env = []
    mounts = [{"name": "tfserving-config", "mountPath": TFSERVING_CONFIG_DIR, "readOnly": True},
              {"name": TMP_VOLUME, "mountPath": TMP_MOUNT}]
    volumes = [{"name": "tfserving-config", "configMap": {"name": name}},
               {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TFSERVING_TMP_LIMIT}}]
    if base.startswith("s3://"):
        env += tf_serving_s3_env(config)
    elif config.storage.gcs.credentials_secret:
        key_dir = "/var/secrets/gcs"
        gcs = config.storage.gcs
        env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{key_dir}/{gcs.credentials_key}"})
        mounts.append({"name": "gcs-key", "mountPath": key_dir, "readOnly": True})
        volumes.append({"name": "gcs-key", "secret": {"secretName": gcs.credentials_secret}})
    container = {
        "name": "tfserving", "image": tf_serving_image(config),
        "args": args,
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT}, {"name": "http", "containerPort": REST_PORT}],
        "resources": server_resources(config), "volumeMounts": mounts,
        # ready once the stable label resolves to a loaded version
        "readinessProbe": {"httpGet": {"path": f"/v1/models/{srv.model_name}/labels/stable", "port": REST_PORT},
                           "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {"tcpSocket": {"port": GRPC_PORT}, "periodSeconds": 20, "failureThreshold": 3},
        "startupProbe": {"tcpSocket": {"port": GRPC_PORT}, "periodSeconds": 10, "failureThreshold": 30},
        # the server reads models from the bucket and writes nothing but /tmp (an emptyDir)
        "securityContext": restricted_container_security(),
    }
    if env:
        container["env"] = env
    selector = {"app.kubernetes.io/name": srv.model_name, "app.kubernetes.io/component": "tfserving"}
    pod_spec = {"securityContext": restricted_pod_security(), "containers": [container], "volumes": volumes,
                **server_placement(config)}
    if srv.service_account:
        pod_spec["serviceAccountName"] = srv.service_account
    if cluster.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in cluster.image_pull_secrets]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_metadata(config, name),
        "spec": {"replicas": replicas or max(1, scaling.min_replicas), "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": {**object_labels(config), **selector},
                                           "annotations": {"prometheus.io/scrape": "true",
                                                           "prometheus.io/port": str(REST_PORT),
                                                           "prometheus.io/path": PROMETHEUS_PATH}},
                              "spec": pod_spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": object_metadata(config, name),
               "spec": {"selector": selector, "ports": [
                   {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc"},
                   {"name": "http", "port": REST_PORT, "targetPort": "http"}]}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_metadata(config, name), "data": data}
    docs = [config_map, deployment, service]
    if replicas is None and scaling.max_replicas > max(1, scaling.min_replicas):  # GPU pods: no CPU target
        docs.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": object_metadata(config, name),
                     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                              "minReplicas": max(1, scaling.min_replicas), "maxReplicas": scaling.max_replicas,
                              "metrics": [{"type": "Resource", "resource": {
                                  "name": scaling.metric,
                                  "target": {"type": "Utilization", "averageUtilization": scaling.target}}}]}})
    return docs
