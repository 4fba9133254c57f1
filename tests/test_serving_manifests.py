"""What the two ways to serve on Kubernetes get from `gpupipe manifest`: KServe serving
the released version only (its release prefix, canaryTrafficPercent for a canary, replicas,
autoscaling, resources, batcher), and TF Serving reading models.config from the serving base
with a batching parameters file and a Prometheus monitoring config that parse as TF Serving
parses them. The objects' schemas are checked in tests/test_k8s_objects.py."""
import pytest

from components.contracts.errors import GpupipeError
from pipelines.manifests import kserve_inference_service, tf_serving_manifests
from tests.fixtures.tf_serving_config import parse

pytestmark = pytest.mark.compile


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
