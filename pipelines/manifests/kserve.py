"""KServe: the InferenceService serving a released version (with a canary's traffic split),
its autoscaling annotations, and the ServiceAccount through which KServe's storage
initializer reads a private gs:// or s3:// release.
"""
from __future__ import annotations

from typing import Optional

from components.contracts.errors import GpupipeError
from components.contracts.pods import restricted_container_security
from components.contracts.settings import ACCESS_KEY_ENV, SECRET_KEY_ENV
from components.contracts.storage import schemes
from pipelines.config import PipelineConfig
from pipelines.manifests.common import (fixed_replicas, object_metadata, s3_settings, served_base, server_batching,
                                       server_placement, server_resources)

KSERVE_ANNOTATIONS = "serving.kserve.io/"  # KServe's annotations on the S3 Secret a ServiceAccount lists


def kserve_base(config: PipelineConfig, serving_base: str = "") -> str:
    """The serving base KServe's storage initializer reads (a URI, not a local path)."""
    served, downloaded = schemes.served_by("kserve"), schemes.downloaded_by("kserve")
    mounted = tuple(p for p in served if p not in downloaded)  # pvc://: KServe mounts it
    return served_base(config, serving_base, served,
                       f"pass --serving-base {schemes.examples(downloaded)} (or {schemes.named(mounted)})")


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
    installed); RawDeployment with cpu or memory, KServe's HPA. A GPU predictor scales only on
    concurrency or rps under Serverless (no CPU target on a GPU pod), and under RawDeployment
    runs a fixed count (KServe's autoscalerClass none: no HPA, the Deployment's replicas are
    minReplicas; kserve v0.15.2 reconcilers/deployment/deployment_reconciler.go, hpa_reconciler.go
    shouldDeleteHPA). Anything else is refused."""
    scaling = config.serving.autoscaling
    metric, target = scaling.metric, scaling.target
    gpu = config.serving.resources.gpus
    if mode not in (SERVERLESS, RAW_DEPLOYMENT):
        raise GpupipeError(f"KServe deploymentMode {mode!r}: gpupipe writes {SERVERLESS} or {RAW_DEPLOYMENT}")
    if gpu and mode == RAW_DEPLOYMENT:
        fixed_replicas(config, "KServe's RawDeployment")
        return {DEPLOYMENT_MODE: mode, KSERVE_AUTOSCALER_CLASS: "none"}
    if gpu and metric in HPA_METRICS:
        raise GpupipeError(f"serving.autoscaling.metric: {metric} on a GPU predictor (serving.resources.gpus 1), "
                           "whose CPU and memory say little of its load; set serving.autoscaling.metric: concurrency "
                           "(in-flight requests per pod) or rps")
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


# Knative takes a pod's nodeSelector and tolerations only with these features enabled in
# knative-serving's config-features (knative/serving pkg/apis/serving/fieldmask.go PodSpecMask;
# kserve v0.15.2 docs/samples/fluid/README.md enables both for KServe).
KNATIVE_PLACEMENT_FLAGS = {"nodeSelector": "kubernetes.podspec-nodeselector",
                           "tolerations": "kubernetes.podspec-tolerations"}


def kserve_cluster_notes(config: PipelineConfig, mode: str = SERVERLESS) -> list:
    """What the cluster needs for the autoscaling and placement the InferenceService asks
    for, as lines for the user: under Serverless, cpu or memory scale through Knative's HPA
    class, which only Knative Serving's HPA extension (serving-hpa.yaml) reconciles, and a node
    selector or tolerations need Knative's podspec feature flags."""
    metric = config.serving.autoscaling.metric
    notes = []
    if mode == SERVERLESS and metric in HPA_METRICS:
        notes.append(f"note: serving.autoscaling.metric {metric} under Serverless scales with Knative's HPA class "
                     f"({KNATIVE_CLASS}: {KNATIVE_HPA}): the cluster needs Knative Serving's HPA extension "
                     "(serving-hpa.yaml); else set serving.autoscaling.metric: concurrency or rps, or pass "
                     "--raw-deployment")
    flags = [flag for field, flag in KNATIVE_PLACEMENT_FLAGS.items() if field in server_placement(config)]
    if mode == SERVERLESS and flags:
        patch = ", ".join(f'"{flag}": "enabled"' for flag in flags)
        notes.append(f"note: Knative takes the predictor's serving.resources placement only with {' and '.join(flags)} "
                     f"enabled: kubectl -n knative-serving patch configmap config-features -p '{{\"data\": "
                     f"{{{patch}}}}}' (else the InferenceService is refused), or pass --raw-deployment")
    return notes


# KServe's TensorFlow runtime (kserve v0.15.2 config/runtimes/kserve-tensorflow-serving.yaml, the
# ClusterServingRuntime kserve-tensorflow-serving: image tensorflow/serving) runs the image tag
# the predictor's runtimeVersion names (pkg/controller/v1beta1/inferenceservice/utils/utils.go
# UpdateImageTag replaces the tag with it); TF Serving's GPU builds are tagged <version>-gpu,
# and KServe's TensorFlow predictor refuses a -gpu runtimeVersion without a GPU limit and a GPU
# limit without one (pkg/apis/serving/v1beta1/predictor_tfserving.go validateGPU,
# TensorflowServingGPUSuffix).
TF_SERVING_GPU_SUFFIX = "-gpu"


def kserve_runtime_version(config: PipelineConfig) -> str:
    """The predictor's runtimeVersion: TF Serving's version, with -gpu on a GPU predictor."""
    srv = config.serving
    return srv.tf_serving_version + (TF_SERVING_GPU_SUFFIX if srv.resources.gpus else "")


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
    model = {"modelFormat": {"name": "tensorflow"}, "runtimeVersion": kserve_runtime_version(config),
             "storageUri": store.release_path(canary if canary is not None else stable),
             "resources": server_resources(config),
             # Knative takes these container fields without a feature flag, a pod-level
             # securityContext only with kubernetes.podspec-securitycontext (knative/serving
             # pkg/apis/serving/fieldmask.go: SecurityContextMask, PodSecurityContextMask).
             "securityContext": restricted_container_security(pod_level=False)}
    scaling = srv.autoscaling
    predictor = {"minReplicas": scaling.min_replicas, "maxReplicas": scaling.max_replicas, "model": model,
                 **server_placement(config)}
    if annotations.get(KSERVE_AUTOSCALER_CLASS) != "none":  # none: a fixed count, nothing to scale on
        predictor.update(scaleMetric=scaling.metric, scaleTarget=scaling.target)
    if canary is not None:
        if not srv.canary_percent:
            raise GpupipeError(f"serving.canary_percent: 0, yet version {canary} of {srv.model_name} is the canary; "
                               "set serving.canary_percent to its share of the traffic, or gpupipe promote/abort it")
        predictor["canaryTrafficPercent"] = srv.canary_percent
    if srv.batching.enabled:
        batching = server_batching(config)
        predictor["batcher"] = {"maxBatchSize": batching["max_batch_size"],
                                "maxLatency": max(1, -(-batching["batch_timeout_micros"] // 1000))}
    account = kserve_service_account_name(config, base)
    if account:
        predictor["serviceAccountName"] = account
    metadata = object_metadata(config, srv.model_name)
    metadata["annotations"] = {**annotations, "gpupipe/stable-version": str(stable)}
    if canary is not None:
        metadata["annotations"]["gpupipe/canary-version"] = str(canary)
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": metadata,
            "spec": {"predictor": predictor}}


def kserve_service_account_name(config: PipelineConfig, base: str) -> Optional[str]:
    """The predictor's ServiceAccount: serving.service_account, or (an s3:// base with
    storage.s3.credentials_secret) `<model>-s3`, the one kserve_s3_access prints."""
    srv = config.serving
    if srv.service_account:
        return srv.service_account
    if base.startswith("s3://") and s3_settings(config).credentials_secret:
        return f"{srv.model_name}-s3"
    if base.startswith("gs://") and config.storage.gcs.credentials_secret:
        return f"{srv.model_name}-gcs"
    return None


# KServe's storage initializer takes a GCS key from a Secret its ServiceAccount lists, by this
# key name (kserve pkg/credentials/gcs/gcs_secret.go GCSCredentialFileName, the default of
# inferenceservice-config's credentials.gcs.gcsCredentialFileName), mounted at /var/secrets/.
KSERVE_GCS_KEY = "gcloud-application-credentials.json"


def kserve_gcs_access(config: PipelineConfig, serving_base: str = "") -> tuple:
    """What KServe needs to download a private gs:// release with storage.gcs.credentials_secret:
    ([the ServiceAccount listing that Secret], [lines for the user]). KServe reads the key file
    only under KSERVE_GCS_KEY; a Secret holding it under another name (storage.gcs.credentials_key,
    key.json by default) gets the kubectl line that adds it. Nothing with serving.service_account
    (Workload Identity: bind that account to a Google service account that reads the bucket)."""
    base = kserve_base(config, serving_base)
    secret = config.storage.gcs.credentials_secret
    if not base.startswith("gs://") or not secret or config.serving.service_account:
        return [], []
    name = kserve_service_account_name(config, base)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_metadata(config, name),
               "secrets": [{"name": secret}]}
    lines = []
    if config.storage.gcs.credentials_key != KSERVE_GCS_KEY:
        where = f" -n {config.serving.namespace}" if config.serving.namespace else ""
        lines.append(f"note: KServe reads the key file {KSERVE_GCS_KEY} of Secret {secret}, which holds it as "
                     f"{config.storage.gcs.credentials_key}: create it with both keys, e.g. kubectl{where} create "
                     f"secret generic {secret} --from-file={config.storage.gcs.credentials_key}=sa-key.json "
                     f"--from-file={KSERVE_GCS_KEY}=sa-key.json (or serve with Workload Identity: "
                     "serving.service_account)")
    return [account], lines


def kserve_s3_annotations(config: PipelineConfig) -> dict:
    """The serving.kserve.io/s3-* annotations (without the prefix) that tell KServe's storage
    initializer where storage.s3 is: TLS, region, the endpoint (host:port) and, unless auto,
    the addressing style."""
    s3 = s3_settings(config)
    annotations = {"s3-usehttps": "1" if s3.uses_https else "0", "s3-verifyssl": "1" if s3.uses_https else "0",
                   "s3-region": s3.region}
    if s3.host_port:
        annotations["s3-endpoint"] = s3.host_port
    if s3.style != "auto":
        annotations["s3-usevirtualbucket"] = "true" if s3.style == "virtual" else "false"
    return annotations


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
    s3 = s3_settings(config)
    if not base.startswith("s3://") or not s3.credentials_secret:
        return [], []
    name = kserve_service_account_name(config, base)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_metadata(config, name),
               "secrets": [{"name": s3.credentials_secret}]}
    annotations = kserve_s3_annotations(config)
    where = f" -n {config.serving.namespace}" if config.serving.namespace else ""
    lines = [f"kubectl{where} annotate --overwrite secret {s3.credentials_secret} "
             + " ".join(f"{KSERVE_ANNOTATIONS}{k}={v}" for k, v in sorted(annotations.items()))]
    if (s3.access_key_key, s3.secret_key_key) != (ACCESS_KEY_ENV, SECRET_KEY_ENV):
        lines.append(f"note: KServe reads the keys {ACCESS_KEY_ENV} and {SECRET_KEY_ENV} of Secret "
                     f"{s3.credentials_secret}, which holds them as {s3.access_key_key} and {s3.secret_key_key}: set "
                     "credentials.s3.s3AccessKeyIDName and s3SecretAccessKeyName in KServe's inferenceservice-config, "
                     f"or create a Secret with the keys {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}")
    return [account], lines
