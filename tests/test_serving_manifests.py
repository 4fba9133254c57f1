"""What the two ways to serve on Kubernetes get from `gpupipe manifest`: KServe serving
the released version only (its release prefix, canaryTrafficPercent for a canary, replicas,
autoscaling, resources, batcher), and TF Serving reading models.config from the serving base
with a batching parameters file and a Prometheus monitoring config that parse as TF Serving
parses them. The objects' schemas are checked in tests/test_k8s_objects.py."""
from pathlib import Path

import pytest

from components.contracts.errors import GpupipeError
from pipelines.config import load_config
from pipelines.manifests import kserve_inference_service, tf_serving_manifests
from tests.fixtures.tf_serving_config import parse

pytestmark = pytest.mark.compile
MINIO = Path(__file__).resolve().parents[1] / "configs" / "penguins-minio.yaml"


def with_serving(config, **changes):
    return config.model_copy(update={"serving": config.serving.model_validate(
        {**config.serving.model_dump(), **changes})})


def test_kserve_serves_the_stable_release_then_a_canary_with_its_share(penguins_config):
    config = with_serving(penguins_config, canary_percent=15,
                          autoscaling={"min_replicas": 2, "max_replicas": 6, "metric": "concurrency", "target": 8},
                          resources={"cpu_request": "1", "cpu_limit": "2", "memory_request": "2Gi",
                                     "memory_limit": "3Gi"})
    stable = kserve_inference_service(config, "gs://b/serving", stable=3)
    predictor = stable["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "gs://b/serving/penguins/releases/3"
    assert "canaryTrafficPercent" not in predictor and "tensorflow" not in predictor
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 6)
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 8)
    assert predictor["model"]["resources"] == {"requests": {"cpu": "1", "memory": "2Gi"},
                                               "limits": {"cpu": "2", "memory": "3Gi"}}
    assert predictor["batcher"] == {"maxBatchSize": 32, "maxLatency": 2}
    assert stable["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Serverless"
    canary = kserve_inference_service(config, "gs://b/serving", stable=3, canary=4)["spec"]["predictor"]
    assert canary["model"]["storageUri"] == "gs://b/serving/penguins/releases/4"
    assert canary["canaryTrafficPercent"] == 15


@pytest.mark.parametrize("stable, canary, percent, message", [
    (None, None, 0, "serving.base: gs://b/serving has no stable version of penguins; push one first, or pass "
                    "--version N"),
    (None, 2, 10, "has no stable version of penguins; promote its canary first (gpupipe promote)"),
    (1, 2, 0, "serving.canary_percent: 0, yet version 2 of penguins is the canary; set serving.canary_percent"),
])
def test_kserve_refuses_what_it_cannot_serve_safely(penguins_config, stable, canary, percent, message):
    with pytest.raises(GpupipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kserve_inference_service(with_serving(penguins_config, canary_percent=percent), "gs://b/serving", stable,
                                 canary)


def test_tf_serving_reads_models_config_with_batching_and_prometheus(penguins_config):
    config = with_serving(penguins_config, autoscaling={"min_replicas": 2, "max_replicas": 5, "metric": "cpu",
                                                        "target": 70},
                          batching={"max_batch_size": 64, "batch_timeout_micros": 500})
    config_map, deployment, service, hpa = tf_serving_manifests(config, "gs://b/serving")
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    args = dict(a[2:].split("=", 1) for a in server["args"])
    assert args["model_config_file"] == "gs://b/serving/models.config"  # what push and promote write
    assert args["allow_version_labels_for_unavailable_models"] == "true"
    assert args["enable_batching"] == "true"
    # the ConfigMap is mounted where the flags point, and its files parse as TF Serving parses them
    (mount,) = [m for m in server["volumeMounts"] if m["name"] == "tfserving-config"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tfserving-config"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    for flag, kind in (("batching_parameters_file", "BatchingParameters"), ("monitoring_config_file",
                                                                          "MonitoringConfig")):
        directory, _, name = args[flag].rpartition("/")
        assert directory == mount["mountPath"] and name in config_map["data"]
        parse(kind, config_map["data"][name])
    batching = parse("BatchingParameters", config_map["data"]["batching.config"])
    assert (batching.max_batch_size.value, batching.batch_timeout_micros.value) == (64, 500)
    monitoring = parse("MonitoringConfig", config_map["data"]["monitoring.config"])
    assert monitoring.prometheus_config.enable and monitoring.prometheus_config.path == "/monitoring/prometheus/metrics"
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == \
        "/monitoring/prometheus/metrics"
    assert deployment["spec"]["replicas"] == 2 and (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    assert hpa["spec"]["metrics"][0]["resource"] == {"name": "cpu", "target": {"type": "Utilization",
                                                                                "averageUtilization": 70}}
    assert server["readinessProbe"]["httpGet"]["path"] == "/v1/models/penguins/labels/stable"
    assert [p["port"] for p in service["spec"]["ports"]] == [8500, 8501]
    # the serving base's credentials, as the pipeline's pods get them
    assert {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/secrets/gcs/key.json"} in server["env"]


def test_tf_serving_refuses_a_knative_metric_and_a_local_base(penguins_config):
    with pytest.raises(GpupipeError, match="serving.autoscaling.metric: rps is Knative's"):
        tf_serving_manifests(with_serving(penguins_config, autoscaling={"metric": "rps"}), "gs://b/serving")
    with pytest.raises(GpupipeError, match="serving.base: 'serving' is a local path"):
        tf_serving_manifests(penguins_config)


# -- an S3 serving base (MinIO, Ceph RGW, AWS S3) -----------------------------------------------
def minio_config():
    return load_config(MINIO)


def with_s3(config, **changes):
    from components.contracts.settings import StorageSettings

    s3 = {**config.storage.s3.model_dump(exclude_none=True), **changes}
    return config.model_copy(update={"storage": StorageSettings.model_validate({"s3": s3})})


def test_tf_serving_reads_an_s3_base_with_its_s3_environment_and_the_keys_by_reference():
    config = with_serving(minio_config(), tf_serving_image="registry.local/tfserving-s3:2.16.1")
    config_map, deployment, *_ = tf_serving_manifests(config, "s3://models/serving")
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert server["image"] == "registry.local/tfserving-s3:2.16.1"
    args = dict(a[2:].split("=", 1) for a in server["args"])
    assert args["model_config_file"] == "s3://models/serving/models.config"
    assert server["env"] == [
        {"name": "AWS_REGION", "value": "us-east-1"},
        {"name": "S3_ENDPOINT", "value": "minio.minio:9000"},  # host:port; the scheme is S3_USE_HTTPS's
        {"name": "S3_USE_HTTPS", "value": "0"},
        {"name": "S3_VERIFY_SSL", "value": "0"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "gpupipe-minio",
                                                                     "key": "AWS_ACCESS_KEY_ID"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "gpupipe-minio",
                                                                         "key": "AWS_SECRET_ACCESS_KEY"}}}]
    assert [v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]] == ["tfserving-config", "tmp"]
    # Ceph RGW behind TLS, KFP's own MinIO Secret's key names; and AWS S3 itself (no endpoint)
    ceph = with_s3(config, endpoint="https://rgw.ceph.internal:7480", region="eu-1",
                   credentials_secret="mlpipeline-minio-artifact", access_key_key="accesskey",
                   secret_key_key="secretkey")
    env = tf_serving_manifests(ceph, "s3://models/serving")[1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["name"]: e.get("value", e.get("valueFrom")) for e in env} == {
        "AWS_REGION": "eu-1", "S3_ENDPOINT": "rgw.ceph.internal:7480", "S3_USE_HTTPS": "1", "S3_VERIFY_SSL": "1",
        "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": "accesskey"}},
        "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": "secretkey"}}}
    aws = with_s3(config, endpoint=None, region="eu-west-1", credentials_secret=None)
    env = tf_serving_manifests(aws, "s3://models/serving")[1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "AWS_REGION", "value": "eu-west-1"}, {"name": "S3_USE_HTTPS", "value": "1"},
                   {"name": "S3_VERIFY_SSL", "value": "1"}]


def test_tf_serving_refuses_an_s3_base_with_the_stock_image_that_cannot_read_it():
    with pytest.raises(GpupipeError) as err:
        tf_serving_manifests(minio_config(), "s3://models/serving")
    assert str(err.value) == (
        "serving.tf_serving_image: the stock tensorflow/serving:2.16.1 image has no s3:// file system (gone since "
        "2.7, tensorflow/serving#1963); set serving.tf_serving_image to a TF Serving build with S3 support, or serve "
        "with KServe (gpupipe manifest kserve)")


def test_kserve_on_s3_gets_a_service_account_listing_the_secret_and_the_annotations_to_add():
    from pipelines.manifests import kserve_s3_access

    config = minio_config()
    (account,), lines = kserve_s3_access(config, "s3://models/serving")
    assert account == {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "penguins-s3", "labels": account["metadata"]["labels"],
                                    "namespace": "models"},
                       "secrets": [{"name": "gpupipe-minio"}]}
    assert lines == ["kubectl -n models annotate --overwrite secret gpupipe-minio "
                     "serving.kserve.io/s3-endpoint=minio.minio:9000 serving.kserve.io/s3-region=us-east-1 "
                     "serving.kserve.io/s3-usehttps=0 serving.kserve.io/s3-usevirtualbucket=false "
                     "serving.kserve.io/s3-verifyssl=0"]
    # KFP's MinIO Secret holds the keys as accesskey/secretkey: KServe must be told, or given another Secret
    kfp = with_s3(config, credentials_secret="mlpipeline-minio-artifact", access_key_key="accesskey",
                  secret_key_key="secretkey")
    note = kserve_s3_access(kfp, "s3://models/serving")[1][1]
    assert note.startswith("note: KServe reads the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY of Secret "
                           "mlpipeline-minio-artifact, which holds them as accesskey and secretkey")
    # nothing to add for a gs:// base, or when the pods' own identity reads the bucket
    assert kserve_s3_access(config, "gs://b/serving") == ([], [])
    assert kserve_s3_access(with_s3(config, credentials_secret=None), "s3://models/serving") == ([], [])


def test_kserve_serves_an_s3_release_as_the_service_account_that_lists_the_secret():
    config = with_serving(minio_config(), service_account=None)
    isvc = kserve_inference_service(config, "s3://models/serving", stable=3)
    predictor = isvc["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "s3://models/serving/penguins/releases/3"
    assert predictor["serviceAccountName"] == "penguins-s3"


def test_gpupipe_manifest_prints_the_objects_and_the_annotate_command_apart(capsys):
    """stdout is the YAML for `kubectl apply -f -`; what the user does to the Secret is on stderr."""
    import yaml

    from pipelines.cli import main

    assert main(["manifest", "kserve", str(MINIO), "--serving-base", "s3://models/serving", "--version", "2"]) == 0
    out, err = capsys.readouterr()
    account, isvc = yaml.safe_load_all(out)
    assert (account["kind"], isvc["kind"]) == ("ServiceAccount", "InferenceService")
    assert isvc["spec"]["predictor"]["serviceAccountName"] == account["metadata"]["name"] == "penguins-s3"
    annotate, note = err.splitlines()
    assert annotate.startswith("kubectl -n models annotate --overwrite secret gpupipe-minio "
                               "serving.kserve.io/s3-endpoint=")
    assert note.startswith("note: serving.autoscaling.metric cpu under Serverless scales with Knative's HPA class")


# -- KServe's autoscaling rule, as its admission webhook applies it -------------------------------
KSERVE_VALIDATION = "kserve/kserve v0.15.2, pkg/apis/serving/v1beta1/inference_service_validation.go"


def kserve_autoscaling_refusal(isvc: dict) -> str:
    """Why KServe's webhook refuses `isvc`'s predictor autoscaling ("" when it accepts), the
    rule as KServe states it (KSERVE_VALIDATION, the version of the CRD in tests/fixtures/crds):
    - validateInferenceServiceAutoscaler: a serving.kserve.io/autoscalerClass annotation, when
      present, is one of constants.AutoscalerAllowedClassList (hpa, external, keda, none);
    - validateAutoScalingCompExtension: under deploymentMode RawDeployment the predictor is
      checked by validateScalingHPACompExtension when that class is hpa (and by the KEDA check,
      which refuses any scaleMetric, when it is keda; otherwise not at all); under any other
      mode (Serverless, the default) by validateScalingHPACompExtension when Knative's
      autoscaling.knative.dev/class is hpa.autoscaling.knative.dev, else by
      validateScalingKPACompExtension;
    - validateScalingHPACompExtension: scaleMetric (default cpu) in
      constants.AutoscalerAllowedHPAMetricsList (cpu, memory), and a scaleTarget over 100
      refused, as is below 1 for cpu or memory;
    - validateScalingKPACompExtension: no deploymentStrategy, scaleMetric (default concurrency)
      in constants.AutoscalerAllowedKPAMetricsList (concurrency, rps), an rps target below 1
      refused."""
    annotations = isvc["metadata"].get("annotations", {})
    predictor = isvc["spec"]["predictor"]
    metric, target = predictor.get("scaleMetric"), predictor.get("scaleTarget")
    kserve_class = annotations.get("serving.kserve.io/autoscalerClass")
    if kserve_class is not None and kserve_class not in ("hpa", "external", "keda", "none"):
        return f"[{kserve_class}] is not a supported autoscaler class type"

    def hpa() -> str:
        if (metric or "cpu") not in ("cpu", "memory"):
            return f"[{metric}] is not a supported metric"
        if target is not None and ((metric or "cpu") == "cpu" and target < 1 or target > 100):
            return "the target utilization percentage should be a [1-100] integer"
        if target is not None and metric == "memory" and target < 1:
            return "the target memory should be greater than 1 MiB"
        return ""

    def kpa() -> str:
        if "deploymentStrategy" in predictor:
            return "customizing deploymentStrategy is only supported for raw deployment mode"
        if (metric or "concurrency") not in ("concurrency", "rps"):
            return f"[{metric}] is not a supported metric"
        if target is not None and metric == "rps" and target < 1:
            return "the target for rps should be greater than 1"
        return ""

    if annotations.get("serving.kserve.io/deploymentMode") == "RawDeployment":
        if kserve_class == "hpa":
            return hpa()
        if kserve_class == "keda":
            return "ScaleMetric is not supported for KEDA" if metric is not None else ""
        return ""
    return hpa() if annotations.get("autoscaling.knative.dev/class") == "hpa.autoscaling.knative.dev" else kpa()


def test_the_kserve_rule_refuses_what_its_webhook_refuses(penguins_config):
    """The rule itself: today's Serverless output with scaleMetric cpu (issue #26), and KServe's
    own hpa class under Serverless (that annotation is read only under RawDeployment), are
    refused; so are a Knative metric under RawDeployment's HPA and a cpu target over 100."""
    def isvc(annotations: dict, metric: str, target: int = 80) -> dict:
        return {"metadata": {"annotations": annotations},
                "spec": {"predictor": {"scaleMetric": metric, "scaleTarget": target}}}

    serverless, raw = {"serving.kserve.io/deploymentMode": "Serverless"}, {
        "serving.kserve.io/deploymentMode": "RawDeployment", "serving.kserve.io/autoscalerClass": "hpa"}
    assert kserve_autoscaling_refusal(isvc(serverless, "cpu")) == "[cpu] is not a supported metric"
    assert kserve_autoscaling_refusal(isvc({**serverless, "serving.kserve.io/autoscalerClass": "hpa"}, "memory")) \
        == "[memory] is not a supported metric"
    assert kserve_autoscaling_refusal(isvc(raw, "concurrency")) == "[concurrency] is not a supported metric"
    assert kserve_autoscaling_refusal(isvc(raw, "memory", 150)) == \
        "the target utilization percentage should be a [1-100] integer"
    assert kserve_autoscaling_refusal(isvc({**serverless, "serving.kserve.io/autoscalerClass": "kpa"}, "rps")) == \
        "[kpa] is not a supported autoscaler class type"
    assert kserve_autoscaling_refusal(isvc(serverless, "rps", 0)) == "the target for rps should be greater than 1"
    assert kserve_autoscaling_refusal(isvc(serverless, "concurrency", 500)) == ""  # KPA: no percent


@pytest.mark.parametrize("metric", ["cpu", "memory", "concurrency", "rps"])
@pytest.mark.parametrize("mode", ["Serverless", "RawDeployment"])
def test_gpupipe_manifest_passes_kserves_autoscaling_rule_for_each_mode_and_metric(penguins_config, mode, metric):
    """Every metric serving.autoscaling.metric allows: under Serverless each passes (cpu and
    memory through Knative's HPA class, with a canary too); under RawDeployment (`manifest
    --raw-deployment`) cpu and memory pass and Knative's metrics are refused in one line."""
    from pipelines.manifests import kserve_autoscaling_annotations

    config = with_serving(penguins_config, canary_percent=10,
                          autoscaling={"min_replicas": 1, "max_replicas": 4, "metric": metric, "target": 70})
    if mode == "RawDeployment" and metric in ("concurrency", "rps"):
        with pytest.raises(GpupipeError) as err:
            kserve_inference_service(config, "gs://b/serving", 3, mode=mode)
        assert str(err.value).startswith(f"serving.autoscaling.metric: {metric} is Knative's") and \
            "\n" not in str(err.value)
        return
    for canary in ([None, 4] if mode == "Serverless" else [None]):
        isvc = kserve_inference_service(config, "gs://b/serving", 3, canary, mode=mode)
        assert kserve_autoscaling_refusal(isvc) == "", (mode, metric, isvc["metadata"]["annotations"])
        assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
        assert isvc["spec"]["predictor"]["scaleMetric"] == metric
    assert kserve_autoscaling_annotations(config, mode) == {k: v for k, v in isvc["metadata"]["annotations"].items()
                                                           if not k.startswith("gpupipe/")}


def test_kserve_refuses_in_one_line_what_its_webhook_or_raw_mode_would_refuse(penguins_config):
    over = with_serving(penguins_config, autoscaling={"metric": "cpu", "target": 150})
    with pytest.raises(GpupipeError, match=r"^serving.autoscaling.target: 150 with metric cpu, a utilisation percent"):
        kserve_inference_service(over, "gs://b/serving", 3)
    assert kserve_inference_service(with_serving(penguins_config, autoscaling={"metric": "rps", "target": 150}),
                                    "gs://b/serving", 3)  # rps is not a percent
    canary = with_serving(penguins_config, canary_percent=10)
    with pytest.raises(GpupipeError, match="KServe's RawDeployment has no traffic split"):
        kserve_inference_service(canary, "gs://b/serving", 3, 4, mode="RawDeployment")


@pytest.mark.parametrize("flags, mode", [([], "Serverless"), (["--raw-deployment"], "RawDeployment")])
def test_gpupipe_manifest_prints_a_kserve_service_its_webhook_accepts(capsys, flags, mode):
    """configs/penguins.yaml as shipped (serving.autoscaling.metric cpu): `gpupipe manifest kserve`."""
    import yaml

    from pipelines.cli import main
    from pipelines.config import load_config

    path = Path(__file__).resolve().parents[1] / "configs" / "penguins.yaml"
    assert load_config(path).serving.autoscaling.metric == "cpu"
    assert main(["manifest", "kserve", str(path), "--serving-base", "gs://b/serving", "--version", "2", *flags]) == 0
    out, err = capsys.readouterr()
    account, isvc = yaml.safe_load_all(out)  # the predictor's ServiceAccount lists the GCS key's Secret
    assert account["kind"] == "ServiceAccount"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
    assert kserve_autoscaling_refusal(isvc) == ""
    # under Serverless, one line says what Knative needs for cpu; RawDeployment needs nothing more;
    # and one how to add the key name KServe reads to the GCS Secret
    serverless = mode == "Serverless"
    notes = [line for line in err.splitlines() if "gcloud-application-credentials.json" not in line]
    assert len(notes) == (1 if serverless else 0) and ("serving-hpa.yaml" in err) == serverless


def kserve_gcs_credentials(account: dict, secrets: dict) -> str:
    """The GCS key KServe's storage initializer would mount for a predictor running as
    `account` (kserve v0.15.2 pkg/credentials/service_account_credentials.go,
    CreateSecretVolumeAndEnv: of the Secrets the ServiceAccount lists, one holding the key
    gcsCredentialFileName, default gcloud-application-credentials.json, pkg/credentials/gcs/
    gcs_secret.go) as GOOGLE_APPLICATION_CREDENTIALS under /var/secrets/; "" when none does."""
    for ref in account.get("secrets", []):
        if "gcloud-application-credentials.json" in secrets.get(ref["name"], {}):
            return "/var/secrets/gcloud-application-credentials.json"
    return ""


def test_kserve_reads_a_private_gs_base_as_a_service_account_listing_the_key_secret(capsys):
    """The documented Secret holds key.json: KServe would find no credentials in it. The
    manifest lists it on the predictor's ServiceAccount and says how to add the key KServe reads."""
    import yaml

    from pipelines.cli import main

    assert main(["manifest", "kserve", "configs/penguins.yaml", "--version", "1", "--serving-base",
                 "gs://team-a-models/serving"]) == 0
    out = capsys.readouterr()
    account, service = list(yaml.safe_load_all(out.out))
    assert account["kind"] == "ServiceAccount" and account["secrets"] == [{"name": "gpupipe-gcs-key"}]
    assert service["spec"]["predictor"]["serviceAccountName"] == account["metadata"]["name"] == "penguins-gcs"
    documented = {"gpupipe-gcs-key": {"key.json": "..."}}
    assert kserve_gcs_credentials(account, documented) == ""  # why the note is needed
    (note,) = [line for line in out.err.splitlines() if "gcloud-application-credentials.json" in line]
    assert "--from-file=key.json=sa-key.json --from-file=gcloud-application-credentials.json=sa-key.json" in note
    created_as_told = {"gpupipe-gcs-key": {"key.json": "...", "gcloud-application-credentials.json": "..."}}
    assert kserve_gcs_credentials(account, created_as_told) == "/var/secrets/gcloud-application-credentials.json"


def test_with_workload_identity_the_predictor_runs_as_the_named_account_and_no_secret_is_listed(penguins_config):
    from pipelines.manifests import kserve_gcs_access

    config = penguins_config.model_copy(update={"serving": penguins_config.serving.model_copy(
        update={"service_account": "models-reader"})})
    assert kserve_gcs_access(config, "gs://team-a-models/serving") == ([], [])
    service = kserve_inference_service(config, "gs://team-a-models/serving", 1, None)
    assert service["spec"]["predictor"]["serviceAccountName"] == "models-reader"
