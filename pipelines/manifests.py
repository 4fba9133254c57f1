"""Kubernetes manifests derived from a config (pure functions: config in, dict out)."""
from __future__ import annotations

import re
from typing import Optional

from components.contracts.errors import GpupipeError
from components.contracts.pods import (TMP_MOUNT, TMP_VOLUME, restricted_container_security,
                                       restricted_pod_security)
from components.contracts.settings import ACCESS_KEY_ENV, SECRET_KEY_ENV, S3Settings
from pipelines.config import PipelineConfig


GRPC_PORT, REST_PORT = 8500, 8501
PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
TFSERVING_CONFIG_DIR = "/etc/tfserving"
CONFIG_POLL_SECONDS = 30
TFSERVING_TMP_LIMIT = "1Gi"
TFSERVING_S3_SINCE = (2, 7)  # the stock tensorflow/serving images have no s3:// file system from 2.7 on
KSERVE_ANNOTATIONS = "serving.kserve.io/"  # KServe's annotations on the S3 Secret a ServiceAccount lists


def _labels(config: PipelineConfig) -> dict:
    return {"app.kubernetes.io/name": config.serving.model_name, "app.kubernetes.io/managed-by": "gpupipe",
            "gpupipe/pipeline": config.name}


def _metadata(config: PipelineConfig, name: str) -> dict:
    metadata = {"name": name, "labels": _labels(config)}
    if config.serving.namespace:
        metadata["namespace"] = config.serving.namespace
    return metadata


def _resources(config: PipelineConfig) -> dict:
    r = config.serving.resources
    return {"requests": {"cpu": r.cpu_request, "memory": r.memory_request},
            "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit}}


def _remote_base(config: PipelineConfig, serving_base: str, schemes: tuple, fix: str) -> str:
    base = (serving_base or config.serving.base).rstrip("/")
    if not base.startswith(schemes):
        raise GpupipeError(f"serving.base: '{base}' is a local path and the model server needs a URI it can read; "
                           f"{fix}")
    return base


def kserve_base(config: PipelineConfig, serving_base: str = "") -> str:
    """The serving base KServe's storage initializer reads (a URI, not a local path)."""
    return _remote_base(config, serving_base, ("gs://", "s3://", "pvc://"),
                        "pass --serving-base gs://BUCKET/PATH or s3://BUCKET/PATH (or pvc://)")


# KServe's autoscaling rule (kserve/kserve v0.15.2, pkg/apis/serving/v1beta1/inference_service_validation.go,
# validateAutoScalingCompExtension): under Serverless the predictor's scaleMetric must be one Knative's
# autoscaler class takes: KPA (the default) concurrency or rps; cpu or memory only with Knative's HPA
# class annotation. Under RawDeployment the scaleMetric is checked against the HPA (cpu, memory) when
# KServe's own autoscalerClass annotation is hpa. The HPA's target is a utilisation percent, 1 to 100.
SERVERLESS, RAW_DEPLOYMENT = "Serverless", "RawDeployment"
DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
KSERVE_AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"  # RawDeployment: hpa | keda | external | none
KNATIVE_CLASS, KNATIVE_HPA = "autoscaling.knative.dev/class", "hpa.autoscaling.knative.dev"  # Serverless
HPA_METRICS, KPA_METRICS = ("cpu", "memory"), ("concurrency", "rps")


def kserve_autoscaling_annotations(config: PipelineConfig, mode: str = SERVERLESS) -> dict:
    """The InferenceService annotations that make serving.autoscaling.metric one the mode's
    autoscaler takes: Serverless with concurrency or rps, Knative's default (KPA); with cpu
    or memory, Knative's HPA class (Knative Serving's HPA extension, serving-hpa.yaml, must be
    installed); RawDeployment with cpu or memory, KServe's HPA. Anything else is refused."""
    scaling = config.serving.autoscaling
    metric, target = scaling.metric, scaling.target
    if mode not in (SERVERLESS, RAW_DEPLOYMENT):
        raise GpupipeError(f"KServe deploymentMode {mode!r}: gpupipe writes {SERVERLESS} or {RAW_DEPLOYMENT}")
    if metric in HPA_METRICS and not 1 <= target <= 100:
        raise GpupipeError(f"serving.autoscaling.target: {target} with metric {metric}, a utilisation percent KServe "
                           "takes from 1 to 100; set serving.autoscaling.target between 1 and 100")
    annotations = {DEPLOYMENT_MODE: mode}
    if mode == RAW_DEPLOYMENT:
        if metric not in HPA_METRICS:
            raise GpupipeError(f"serving.autoscaling.metric: {metric} is Knative's, and KServe's RawDeployment scales "
                               "with the HPA; set serving.autoscaling.metric: cpu or memory, or serve Serverless "
                               "(without --raw-deployment)")
        annotations[KSERVE_AUTOSCALER_CLASS] = "hpa"
    elif metric in HPA_METRICS:
        annotations[KNATIVE_CLASS] = KNATIVE_HPA
    return annotations


def kserve_cluster_notes(config: PipelineConfig, mode: str = SERVERLESS) -> list:
    """What the cluster needs for the autoscaling the InferenceService asks for, as lines for
    the user: under Serverless, cpu or memory scale through Knative's HPA class, which only
    Knative Serving's HPA extension (serving-hpa.yaml) reconciles."""
    metric = config.serving.autoscaling.metric
    if mode == SERVERLESS and metric in HPA_METRICS:
        return [f"note: serving.autoscaling.metric {metric} under Serverless scales with Knative's HPA class "
                f"({KNATIVE_CLASS}: {KNATIVE_HPA}): the cluster needs Knative Serving's HPA extension "
                "(serving-hpa.yaml); else set serving.autoscaling.metric: concurrency or rps, or pass --raw-deployment"]
    return []


def kserve_inference_service(config: PipelineConfig, serving_base: str, stable: Optional[int],
                             canary: Optional[int] = None, mode: str = SERVERLESS) -> dict:
    """A KServe InferenceService (`predictor.model`, modelFormat tensorflow) serving the
    released version only: KServe's TensorFlow runtime starts TF Serving without a model
    config file, so it serves the highest version under storageUri; storageUri is therefore
    the version's release prefix (`<model>/releases/<N>/`, which holds `<N>/` alone). With
    a canary, storageUri is the canary's and `canaryTrafficPercent` sends it
    serving.canary_percent of the traffic; the revision rolled out before (the stable one)
    keeps the rest (Knative: deploymentMode Serverless; RawDeployment has no traffic split,
    so a canary is refused there). The autoscaling annotations follow the mode and metric
    (kserve_autoscaling_annotations); the model container runs as the restricted Pod
    Security profile asks (restricted_container_security)."""
    from components.store.base import ServingStore

    srv = config.serving
    base = kserve_base(config, serving_base)
    annotations = kserve_autoscaling_annotations(config, mode)
    if stable is None:
        hint = "; promote its canary first (gpupipe promote)" if canary is not None else "; push one first"
        raise GpupipeError(f"serving.base: {base} has no stable version of {srv.model_name}{hint}, or pass "
                           "--version N")
    if canary is not None and mode == RAW_DEPLOYMENT:
        raise GpupipeError(f"serving: version {canary} of {srv.model_name} is a canary, and KServe's RawDeployment "
                           "has no traffic split (canaryTrafficPercent is Knative's); gpupipe promote or abort it, or "
                           "serve Serverless (without --raw-deployment)")
    store = ServingStore(base, srv.model_name)
    model = {"modelFormat": {"name": "tensorflow"}, "runtimeVersion": srv.tf_serving_version,
             "storageUri": store.release_path(canary if canary is not None else stable),
             "resources": _resources(config),
             # Knative takes these container fields without a feature flag, a pod-level
             # securityContext only with kubernetes.podspec-securitycontext (knative/serving
             # pkg/apis/serving/fieldmask.go: SecurityContextMask, PodSecurityContextMask).
             "securityContext": restricted_container_security(pod_level=False)}
    scaling = srv.autoscaling
    predictor = {"minReplicas": scaling.min_replicas, "maxReplicas": scaling.max_replicas,
                 "scaleMetric": scaling.metric, "scaleTarget": scaling.target, "model": model}
    if canary is not None:
        if not srv.canary_percent:
            raise GpupipeError(f"serving.canary_percent: 0, yet version {canary} of {srv.model_name} is the canary; "
                               "set serving.canary_percent to its share of the traffic, or gpupipe promote/abort it")
        predictor["canaryTrafficPercent"] = srv.canary_percent
    if srv.batching.enabled:
        predictor["batcher"] = {"maxBatchSize": srv.batching.max_batch_size,
                                "maxLatency": max(1, -(-srv.batching.batch_timeout_micros // 1000))}
    account = kserve_service_account_name(config, base)
    if account:
        predictor["serviceAccountName"] = account
    metadata = _metadata(config, srv.model_name)
    metadata["annotations"] = {**annotations, "gpupipe/stable-version": str(stable)}
    if canary is not None:
        metadata["annotations"]["gpupipe/canary-version"] = str(canary)
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": metadata,
            "spec": {"predictor": predictor}}


def _s3(config: PipelineConfig) -> S3Settings:
    return config.storage.s3 or S3Settings()  # no storage.s3: AWS S3 with its defaults


def kserve_service_account_name(config: PipelineConfig, base: str) -> Optional[str]:
    """The predictor's ServiceAccount: serving.service_account, or (an s3:// base with
    storage.s3.credentials_secret) `<model>-s3`, the one kserve_s3_access prints."""
    srv = config.serving
    if srv.service_account:
        return srv.service_account
    if base.startswith("s3://") and _s3(config).credentials_secret:
        return f"{srv.model_name}-s3"
    if base.startswith("gs://") and config.cluster.gcs_credentials_secret:
        return f"{srv.model_name}-gcs"
    return None


# KServe's storage initializer takes a GCS key from a Secret its ServiceAccount lists, by this
# key name (kserve pkg/credentials/gcs/gcs_secret.go GCSCredentialFileName, the default of
# inferenceservice-config's credentials.gcs.gcsCredentialFileName), mounted at /var/secrets/.
KSERVE_GCS_KEY = "gcloud-application-credentials.json"


def kserve_gcs_access(config: PipelineConfig, serving_base: str = "") -> tuple:
    """What KServe needs to download a private gs:// release with cluster.gcs_credentials_secret:
    ([the ServiceAccount listing that Secret], [lines for the user]). KServe reads the key file
    only under KSERVE_GCS_KEY; a Secret holding it under another name (gcs_credentials_key,
    key.json by default) gets the kubectl line that adds it. Nothing with serving.service_account
    (Workload Identity: bind that account to a Google service account that reads the bucket)."""
    base = kserve_base(config, serving_base)
    secret = config.cluster.gcs_credentials_secret
    if not base.startswith("gs://") or not secret or config.serving.service_account:
        return [], []
    name = kserve_service_account_name(config, base)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(config, name),
               "secrets": [{"name": secret}]}
    lines = []
    if config.cluster.gcs_credentials_key != KSERVE_GCS_KEY:
        where = f" -n {config.serving.namespace}" if config.serving.namespace else ""
        lines.append(f"note: KServe reads the key file {KSERVE_GCS_KEY} of Secret {secret}, which holds it as "
                     f"{config.cluster.gcs_credentials_key}: create it with both keys, e.g. kubectl{where} create "
                     f"secret generic {secret} --from-file={config.cluster.gcs_credentials_key}=sa-key.json "
                     f"--from-file={KSERVE_GCS_KEY}=sa-key.json (or serve with Workload Identity: "
                     "serving.service_account)")
    return [account], lines


def kserve_s3_access(config: PipelineConfig, serving_base: str = "") -> tuple:
    """What KServe's storage initializer needs to download an s3:// release: ([the
    ServiceAccount listing storage.s3.credentials_secret], [lines for the user]). KServe
    takes the keys from a Secret the predictor's ServiceAccount lists, and the endpoint,
    region and TLS from that Secret's serving.kserve.io/s3-* annotations. The Secret holds
    the keys, so gpupipe never writes it: the lines are the `kubectl annotate` command that
    adds the annotations to the Secret the user created (docs/storage.md, MinIO and S3).
    Nothing for a gs:// or pvc:// base, or without credentials_secret (the pods' own
    identity, e.g. IRSA, and KServe's inferenceservice-config defaults)."""
    base = kserve_base(config, serving_base)
    s3 = _s3(config)
    if not base.startswith("s3://") or not s3.credentials_secret:
        return [], []
    name = kserve_service_account_name(config, base)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(config, name),
               "secrets": [{"name": s3.credentials_secret}]}
    annotations = {"s3-usehttps": "1" if s3.uses_https else "0", "s3-verifyssl": "1" if s3.uses_https else "0",
                   "s3-region": s3.region}
    if s3.host_port:
        annotations["s3-endpoint"] = s3.host_port
    if s3.style != "auto":
        annotations["s3-usevirtualbucket"] = "true" if s3.style == "virtual" else "false"
    where = f" -n {config.serving.namespace}" if config.serving.namespace else ""
    lines = [f"kubectl{where} annotate --overwrite secret {s3.credentials_secret} "
             + " ".join(f"{KSERVE_ANNOTATIONS}{k}={v}" for k, v in sorted(annotations.items()))]
    if (s3.access_key_key, s3.secret_key_key) != (ACCESS_KEY_ENV, SECRET_KEY_ENV):
        lines.append(f"note: KServe reads the keys {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} of Secret "
                     f"{s3.credentials_secret}, which holds them as {s3.access_key_key} and {s3.secret_key_key}: set "
                     "credentials.s3.s3AccessKeyIDName and s3SecretAccessKeyName in KServe's inferenceservice-config, "
                     f"or create a Secret with the keys {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
    return [account], lines


def tf_serving_s3_env(config: PipelineConfig) -> list:
    """TF Serving's S3 file system environment for an s3:// serving base: the region, the
    endpoint as host:port (no scheme: S3_USE_HTTPS says which), TLS verification, and the
    keys from storage.s3.credentials_secret by secretKeyRef."""
    srv, s3 = config.serving, _s3(config)
    if not srv.tf_serving_image:
        version = tuple(int(p) for p in srv.tf_serving_version.split(".")[:2] if p.isdigit())
        if version >= TFSERVING_S3_SINCE:
            raise GpupipeError(
                f"serving.tf_serving_image: the stock tensorflow/serving:{srv.tf_serving_version} image has no s3:// "
                "file system (gone since 2.7, tensorflow/serving#1963); set serving.tf_serving_image to a TF Serving "
                "build with S3 support, or serve with KServe (gpupipe manifest without --tfserving)")
    env = [{"name": "AWS_REGION", "value": s3.region}]
    if s3.host_port:
        env.append({"name": "S3_ENDPOINT", "value": s3.host_port})
    env += [{"name": "S3_USE_HTTPS", "value": "1" if s3.uses_https else "0"},
            {"name": "S3_VERIFY_SSL", "value": "1" if s3.uses_https else "0"}]
    env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for var, (secret, key) in sorted(s3.secret_environment().items())]
    return env


def batching_parameters(config: PipelineConfig) -> str:
    """TF Serving's --batching_parameters_file (a BatchingParameters text proto)."""
    b = config.serving.batching
    return "".join(f"{name} {{ value: {value} }}\n" for name, value in (
        ("max_batch_size", b.max_batch_size), ("batch_timeout_micros", b.batch_timeout_micros),
        ("max_enqueued_batches", b.max_enqueued_batches), ("num_batch_threads", b.num_batch_threads)))


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
    base = _remote_base(config, serving_base, ("gs://", "s3://"),
                        "pass --serving-base gs://BUCKET/PATH or s3://BUCKET/PATH (TF Serving reads models.config and "
                        "the versions from it)")
    scaling = srv.autoscaling
    if scaling.metric not in ("cpu", "memory"):
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
    elif cluster.gcs_credentials_secret:
        key_dir = "/var/secrets/gcs"
        env.append({"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{key_dir}/{cluster.gcs_credentials_key}"})
        mounts.append({"name": "gcs-key", "mountPath": key_dir, "readOnly": True})
        volumes.append({"name": "gcs-key", "secret": {"secretName": cluster.gcs_credentials_secret}})
    container = {
        "name": "tfserving", "image": srv.tf_serving_image or f"tensorflow/serving:{srv.tf_serving_version}",
        "args": args,
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT}, {"name": "http", "containerPort": REST_PORT}],
        "resources": _resources(config), "volumeMounts": mounts,
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
    pod_spec = {"securityContext": restricted_pod_security(), "containers": [container], "volumes": volumes}
    if srv.service_account:
        pod_spec["serviceAccountName"] = srv.service_account
    if cluster.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in cluster.image_pull_secrets]
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _metadata(config, name),
        "spec": {"replicas": max(1, scaling.min_replicas), "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": {**_labels(config), **selector},
                                           "annotations": {"prometheus.io/scrape": "true",
                                                           "prometheus.io/port": str(REST_PORT),
                                                           "prometheus.io/path": PROMETHEUS_PATH}},
                              "spec": pod_spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": _metadata(config, name),
               "spec": {"selector": selector, "ports": [
                   {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc"},
                   {"name": "http", "port": REST_PORT, "targetPort": "http"}]}}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _metadata(config, name), "data": data}
    docs = [config_map, deployment, service]
    if scaling.max_replicas > max(1, scaling.min_replicas):
        docs.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": _metadata(config, name),
                     "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                              "minReplicas": max(1, scaling.min_replicas), "maxReplicas": scaling.max_replicas,
                              "metrics": [{"type": "Resource", "resource": {
                                  "name": scaling.metric,
                                  "target": {"type": "Utilization", "averageUtilization": scaling.target}}}]}})
    return docs


def launcher_rbac(config: PipelineConfig, namespace: str, service_account: str) -> list:
    """The Role and RoleBinding the train task needs to launch its multi-worker job in
    `namespace`: create, get (follow) and delete JobSets or TFJobs, the verbs the launcher
    calls (components/train/launch.py LAUNCHER_VERBS), as the pipeline's runner
    (`service_account`: `pipeline-runner` on standalone Kubeflow Pipelines, `default-editor`
    in a Kubeflow profile namespace)."""
    from components.train.launch import API, LAUNCHER_VERBS

    if config.training.pods.launcher == "pod":
        raise GpupipeError(f"training.pods.launcher: pod: {config.name}'s train task launches no job, so it needs no Role; "
                           "set training.pods.launcher: jobset (or tfjob) to launch one")
    group, _, plural, _ = API[config.training.pods.launcher]
    name = f"gpupipe-{config.name}-launcher"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/pipeline": config.name}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": [{"apiGroups": [group], "resources": [plural], "verbs": list(LAUNCHER_VERBS)}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
    return [role, binding]


ON_DEMAND_FLAVOR, SPOT_FLAVOR = "gpupipe-on-demand", "gpupipe-spot"
# The team namespace's LimitRange request for containers that set none (Argo's wait sidecar)
SIDECAR_REQUEST = {"cpu": "250m", "memory": "512Mi"}


def _added(a: str, b: str) -> str:
    from kubernetes.utils import parse_quantity

    return str(parse_quantity(a) + parse_quantity(b))


def _per_gpu(quantity: str, gpus_per_worker: int, gpu_quota: int, unit: str = "") -> str:
    """A worker's CPU or memory, scaled from its GPUs to `gpu_quota` GPUs: exact where it can
    be written exactly (bytes; millicores), else rounded up to the next byte or millicore."""
    import math

    from kubernetes.utils import parse_quantity

    total = parse_quantity(quantity) * gpu_quota / gpus_per_worker
    if unit == "Mi":
        whole = math.ceil(total)
        for suffix, size in (("Gi", 2 ** 30), ("G", 10 ** 9), ("Mi", 2 ** 20), ("M", 10 ** 6)):
            if whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    return str(int(total)) if total == int(total) else f"{math.ceil(total * 1000)}m"


def tenant_manifests(config: PipelineConfig, team: str, gpu_quota: int, spot_gpu_quota: int = 0,
                     borrowing_limit: Optional[int] = None, cohort: str = "gpupipe-pool",
                     service_account: str = "default-editor") -> list:
    """What one team needs to share the GPU pool through Kueue: its Namespace, a
    ResourceQuota capping its GPU requests, a LimitRange giving unset containers requests,
    the pool's ResourceFlavors (on-demand and spot nodes), the team's ClusterQueue (its
    nominal GPU quota per flavor, what it may borrow from the cohort, preemption by
    priority), the LocalQueue its runs name in cluster.queue, and the launcher's RBAC.
    `borrowing_limit` None leaves borrowingLimit out (Kueue: no limit within the cohort);
    0 writes borrowingLimit: 0 (the team never borrows)."""
    from pipelines.pods import training_shape

    t = config.training.pods
    if not t.gpus:
        raise GpupipeError("training.pods.gpus: 0, so nothing of this pipeline uses the GPU quota; set training.pods.gpus "
                           "and training.pods.accelerator to share the GPU pool")
    # Kueue's ClusterQueue webhook (pkg/webhooks/clusterqueue_webhook.go) refuses a negative
    # nominalQuota or borrowingLimit, and a borrowingLimit without a cohort.
    for flag, value in (("--gpu-quota", gpu_quota), ("--spot-gpu-quota", spot_gpu_quota),
                        ("--borrowing-limit", borrowing_limit)):
        if value is not None and value < 0:
            raise GpupipeError(f"manifest {flag} {value}: a GPU count is 0 or more (Kueue refuses a negative quota); "
                               f"give {flag} N with N >= 0")
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", cohort or "") \
            or len(cohort) > 253:
        raise GpupipeError(f"manifest --cohort {cohort!r}: not a Kueue cohort name (lowercase letters, digits, '-' "
                           "and '.'); give e.g. --cohort gpupipe-pool")
    shape = training_shape(config, queued=False)
    cpu, memory = shape.cpu_request, shape.memory_request  # a JobSet or TFJob worker: its one container
    if t.launcher == "pod":  # the Argo pod: Kueue counts its wait sidecar too, at this LimitRange's request
        cpu, memory = _added(cpu, SIDECAR_REQUEST["cpu"]), _added(memory, SIDECAR_REQUEST["memory"])
    gpu = t.accelerator or "nvidia.com/gpu"
    labels = {"app.kubernetes.io/managed-by": "gpupipe", "gpupipe/tenant": team}
    queue = config.cluster.queue or "gpus"
    on_demand_nodes = {k: v for k, v in t.node_selector.items() if k not in config.cluster.spot_node_selector}

    def flavor(name: str, nodes: dict, tolerations: list) -> dict:
        spec: dict = {"nodeLabels": nodes} if nodes else {}
        if tolerations:
            spec["tolerations"] = [tol.model_dump(exclude_none=True) for tol in tolerations]
        return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpupipe"}}, "spec": spec}

    def quotas(gpus: int, borrow: Optional[int]) -> list:
        resources = [{"name": "cpu", "nominalQuota": _per_gpu(cpu, t.gpus, gpus)},
                     {"name": "memory", "nominalQuota": _per_gpu(memory, t.gpus, gpus, "Mi")},
                     {"name": gpu, "nominalQuota": gpus}]
        if borrow is not None:
            resources[0]["borrowingLimit"] = _per_gpu(cpu, t.gpus, borrow)
            resources[1]["borrowingLimit"] = _per_gpu(memory, t.gpus, borrow, "Mi")
            resources[2]["borrowingLimit"] = borrow
        return resources

    flavors = [{"name": ON_DEMAND_FLAVOR, "resources": quotas(gpu_quota, borrowing_limit)}]
    if spot_gpu_quota:
        flavors.append({"name": SPOT_FLAVOR, "resources": quotas(spot_gpu_quota, borrowing_limit)})
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": labels}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpupipe-gpus", "namespace": team,
                                                                     "labels": labels},
         "spec": {"hard": {f"requests.{gpu}": str(gpu_quota + spot_gpu_quota + (borrowing_limit or 0))}}},
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "gpupipe-defaults", "namespace": team,
                                                                  "labels": labels},
         "spec": {"limits": [{"type": "Container", "defaultRequest": dict(SIDECAR_REQUEST),
                              "default": {"cpu": "1", "memory": "2Gi"}}]}},
        flavor(ON_DEMAND_FLAVOR, on_demand_nodes, []),
        *([flavor(SPOT_FLAVOR, {**on_demand_nodes, **config.cluster.spot_node_selector},
                  list(config.cluster.spot_tolerations))] if spot_gpu_quota else []),
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": team, "labels": labels},
         "spec": {"cohort": cohort,
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}},
                  "queueingStrategy": "BestEffortFIFO",
                  "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
                  "resourceGroups": [{"coveredResources": ["cpu", "memory", gpu], "flavors": flavors}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
         "metadata": {"name": queue, "namespace": team, "labels": labels}, "spec": {"clusterQueue": team}},
        *(launcher_rbac(config, team, service_account) if t.launcher != "pod" else []),
    ]
