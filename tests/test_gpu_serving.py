"""GPU serving (issue #40, acceptance 1): `gpupipe manifest kserve` and `manifest tfserving` on a
config with serving.resources.gpus 1 write objects that request nvidia.com/gpu 1, name TF
Serving's GPU image, carry the node selector and tolerations, validate against the schemas
(tests/fixtures/k8s_schema.py, the KServe CRD) and pass the rules the CPU objects pass:
KServe's autoscaling webhook rule (tests/test_serving_manifests.py), KServe's TensorFlow GPU
rule and image choice (FIXTURE tests/fixtures/kserve_tensorflow.py, from KServe v0.15.2's
source) and the Pod Security "restricted" profile (tests/test_pod_security.py)."""
from pathlib import Path

import pytest
import yaml

from components.contracts.errors import GpupipeError
from pipelines.cli import main
from pipelines.config import load_config
from pipelines.manifests import kserve_inference_service, tf_serving_manifests
from tests.fixtures.k8s_schema import assert_valid
from tests.fixtures.kserve_tensorflow import EXCLUDES_GPU, INCLUDES_GPU, gpu_refusal, predictor_image
from tests.fixtures.tf_serving_config import parse
from tests.test_pod_security import predictor_pod, restricted_problems
from tests.test_serving_manifests import kserve_autoscaling_refusal

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
GPU_NODES = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_config_file(tmp_path, **autoscaling) -> str:
    """configs/penguins.yaml with one GPU per server pod on the L4 pool."""
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["serving"]["resources"] = {"cpu_request": "2", "cpu_limit": "4", "gpus": 1, "accelerator": "nvidia.com/gpu",
                                   "node_selector": GPU_NODES, "tolerations": [GPU_TAINT]}
    raw["serving"]["autoscaling"] = {"min_replicas": 1, "max_replicas": 4, "metric": "concurrency", "target": 8,
                                     **autoscaling}
    path = tmp_path / "penguins-gpu.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def manifests(capsys, *args) -> tuple:
    assert main(["manifest", *args]) == 0
    out, err = capsys.readouterr()
    return list(yaml.safe_load_all(out)), err


def assert_on_the_gpu(container: dict, pod: dict) -> None:
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == GPU_NODES and pod["tolerations"] == [GPU_TAINT]


def test_manifest_kserve_puts_the_predictor_on_a_gpu_with_tf_servings_gpu_image(capsys, tmp_path):
    docs, err = manifests(capsys, "kserve", gpu_config_file(tmp_path), "--serving-base", "gs://b/serving",
                          "--version", "3")
    isvc = docs[-1]
    predictor = isvc["spec"]["predictor"]
    assert_on_the_gpu(predictor["model"], predictor)
    assert predictor["model"]["runtimeVersion"] == "2.16.1-gpu"
    assert predictor_image(isvc) == "tensorflow/serving:2.16.1-gpu"  # what KServe's controller runs
    # Knative's autoscaler on in-flight requests, no CPU target
    assert (predictor["scaleMetric"], predictor["scaleTarget"]) == ("concurrency", 8)
    assert "autoscaling.knative.dev/class" not in isvc["metadata"]["annotations"]
    assert predictor["batcher"] == {"maxBatchSize": 128, "maxLatency": 5}
    for doc in docs:
        assert_valid(doc)
    assert kserve_autoscaling_refusal(isvc) == "" and gpu_refusal(isvc) == ""
    assert restricted_problems(predictor_pod(isvc)) == []
    # Knative takes the placement only with its two podspec feature flags: said on stderr
    (note,) = [line for line in err.splitlines() if "config-features" in line]
    assert "kubernetes.podspec-nodeselector" in note and "kubernetes.podspec-tolerations" in note


def test_kserve_raw_deployment_runs_a_fixed_count_of_gpu_predictors_without_an_hpa(tmp_path):
    config = load_config(gpu_config_file(tmp_path, min_replicas=2, max_replicas=2, metric="cpu"))
    isvc = kserve_inference_service(config, "gs://b/serving", 3, mode="RawDeployment")
    predictor = isvc["spec"]["predictor"]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/autoscalerClass"] == "none"
    assert "scaleMetric" not in predictor and "scaleTarget" not in predictor
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (2, 2)
    assert_on_the_gpu(predictor["model"], predictor)
    assert_valid(isvc)
    assert kserve_autoscaling_refusal(isvc) == "" and gpu_refusal(isvc) == ""
    assert restricted_problems(predictor_pod(isvc)) == []


@pytest.mark.parametrize("autoscaling, mode, message", [
    ({"metric": "cpu", "target": 70}, "Serverless",
     "serving.autoscaling.metric: cpu on a GPU predictor (serving.resources.gpus 1), whose CPU and memory say little "
     "of its load; set serving.autoscaling.metric: concurrency (in-flight requests per pod) or rps"),
    ({"min_replicas": 1, "max_replicas": 3}, "RawDeployment",
     "serving.autoscaling: KServe's RawDeployment on GPU pods (serving.resources.gpus 1) has no autoscaler gpupipe "
     "writes"),
])
def test_kserve_refuses_a_cpu_target_on_a_gpu_predictor_in_one_line(tmp_path, autoscaling, mode, message):
    config = load_config(gpu_config_file(tmp_path, **autoscaling))
    with pytest.raises(GpupipeError) as err:
        kserve_inference_service(config, "gs://b/serving", 3, mode=mode)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_manifest_tfserving_runs_the_gpu_tag_with_batching_sized_to_the_gpu(capsys, tmp_path):
    docs, _ = manifests(capsys, "tfserving", gpu_config_file(tmp_path, min_replicas=3, max_replicas=3),
                        "--serving-base", "gs://b/serving")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service"]  # no HPA: no CPU target on GPUs
    config_map, deployment, _ = docs
    pod = deployment["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    assert server["image"] == "tensorflow/serving:2.16.1-gpu"
    assert deployment["spec"]["replicas"] == 3
    assert_on_the_gpu(server, pod)
    batching = parse("BatchingParameters", config_map["data"]["batching.config"])
    # TF Serving's GPU advice: hundreds per batch, a few ms, one batch thread per CPU core (cpu_limit 4)
    assert (batching.max_batch_size.value, batching.batch_timeout_micros.value, batching.num_batch_threads.value,
            batching.max_enqueued_batches.value) == (128, 5000, 4, 4)
    for doc in docs:
        assert_valid(doc)
    assert restricted_problems(pod) == []


def test_tf_serving_on_gpus_refuses_autoscaling_it_cannot_do_and_keeps_batching_as_set(tmp_path):
    config = load_config(gpu_config_file(tmp_path, min_replicas=1, max_replicas=4, metric="cpu"))
    with pytest.raises(GpupipeError, match=r"^serving.autoscaling: the TF Serving Deployment on GPU pods .* set "
                                           r"min_replicas and max_replicas both to the replicas wanted \(now 1 and 4\)"):
        tf_serving_manifests(config, "gs://b/serving")
    fixed = config.model_copy(update={"serving": config.serving.model_validate({
        **config.serving.model_dump(), "autoscaling": {"min_replicas": 2, "max_replicas": 2},
        "batching": {"max_batch_size": 512, "num_batch_threads": 8}})})
    config_map = tf_serving_manifests(fixed, "gs://b/serving")[0]
    batching = parse("BatchingParameters", config_map["data"]["batching.config"])
    assert (batching.max_batch_size.value, batching.batch_timeout_micros.value, batching.num_batch_threads.value,
            batching.max_enqueued_batches.value) == (512, 5000, 8, 8)


def test_the_cpu_objects_keep_their_image_batching_and_hpa(penguins_config):
    config_map, deployment, _, hpa = tf_serving_manifests(penguins_config, "gs://b/serving")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "tensorflow/serving:2.16.1"
    assert "nodeSelector" not in deployment["spec"]["template"]["spec"]
    batching = parse("BatchingParameters", config_map["data"]["batching.config"])
    assert (batching.max_batch_size.value, batching.num_batch_threads.value) == (32, 4)
    isvc = kserve_inference_service(penguins_config, "gs://b/serving", 3)
    assert predictor_image(isvc) == "tensorflow/serving:2.16.1" and gpu_refusal(isvc) == ""
    assert "nvidia.com/gpu" not in isvc["spec"]["predictor"]["model"]["resources"]["limits"]


def test_the_gpu_rule_refuses_what_kserve_refuses(tmp_path):
    """KServe's validateGPU on hand-broken objects: the fixture can fail."""
    isvc = kserve_inference_service(load_config(gpu_config_file(tmp_path)), "gs://b/serving", 3)
    model = isvc["spec"]["predictor"]["model"]
    model["runtimeVersion"] = "2.16.1"
    assert gpu_refusal(isvc) == INCLUDES_GPU
    del model["resources"]["limits"]["nvidia.com/gpu"]
    model["runtimeVersion"] = "2.16.1-gpu"
    assert gpu_refusal(isvc) == EXCLUDES_GPU
    # without a runtimeVersion, KServe appends -gpu only when the predictor names its TensorFlow runtime
    model["resources"]["limits"]["nvidia.com/gpu"] = "1"
    del model["runtimeVersion"]
    assert predictor_image(isvc) == "tensorflow/serving:2.6.2"
    model["runtime"] = "kserve-tensorflow-serving"
    assert predictor_image(isvc) == "tensorflow/serving:2.6.2-gpu"


@pytest.mark.parametrize("resources, message", [
    ({"gpus": 1}, "gpus is set but accelerator is not; add accelerator: nvidia.com/gpu"),
    ({"gpus": 1, "accelerator": "amd.com/gpu"}, "accelerator amd.com/gpu: the TF Serving GPU images are CUDA builds"),
    ({"gpus": 2, "accelerator": "nvidia.com/gpu"}, "less than or equal to 1"),
    ({"node_selector": {"bad key!": "x"}}, "'bad key!' is not a Kubernetes label key (serving.resources.node_selector)"),
])
def test_serving_resources_refuse_what_no_gpu_server_takes(tmp_path, resources, message):
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["serving"]["resources"] = resources
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(GpupipeError) as err:
        load_config(path)
    assert message in str(err.value) and "serving.resources" in str(err.value)
