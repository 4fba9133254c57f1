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
    assert [v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]] == ["tfserving-config"]
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
        "with KServe (gpupipe manifest without --tfserving)")


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

    assert main(["manifest", str(MINIO), "--serving-base", "s3://models/serving", "--version", "2"]) == 0
    out, err = capsys.readouterr()
    account, isvc = yaml.safe_load_all(out)
    assert (account["kind"], isvc["kind"]) == ("ServiceAccount", "InferenceService")
    assert isvc["spec"]["predictor"]["serviceAccountName"] == account["metadata"]["name"] == "penguins-s3"
    assert err.startswith("kubectl -n models annotate --overwrite secret gpupipe-minio serving.kserve.io/s3-endpoint=")
    assert err.count("\n") == 1
