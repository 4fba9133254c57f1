"""Every Kubernetes object gpupipe generates validates, strictly, against the real schema:
the JobSet and TFJob of a multi-worker run (their CRDs' published schemas, pod templates
included), the launcher's Role and RoleBinding (the Kubernetes API's own schemas) and the
KServe InferenceService. And the validation itself fails on a wrong object."""
import copy

import pytest

from components.train.launch import Launch, job_manifest
from pipelines.factory import launch_json
from pipelines.manifests import kserve_inference_service, launcher_rbac, tf_serving_manifests
from tests.fixtures.k8s_schema import assert_valid, validation_errors
from tests.fixtures.configs import with_pods

pytestmark = pytest.mark.compile
COMMAND = ["python", "-m", "components.train", "--examples", "gs://b/x"]
OWNER = [{"apiVersion": "v1", "kind": "Pod", "name": "ctr-train-x", "uid": "0f1e2d3c", "blockOwnerDeletion": False,
          "controller": False}]


def launched(config, kind: str) -> dict:
    config = with_pods(config, launcher=kind)
    return job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1a2b3c4d", "team-a", COMMAND, OWNER)


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_the_multi_worker_job_validates_against_its_crd(ctr_config, kind):
    assert_valid(launched(ctr_config, kind))


def test_the_launchers_rbac_validates(ctr_config):
    for obj in launcher_rbac(ctr_config, "team-a", "default-editor"):
        assert_valid(obj)


def with_serving(config, **changes):
    return config.model_copy(update={"serving": config.serving.model_validate(
        {**config.serving.model_dump(), **changes})})


@pytest.mark.parametrize("canary, mode", [(None, "Serverless"), (4, "Serverless"), (None, "RawDeployment")])
def test_the_kserve_inference_service_validates(penguins_config, canary, mode):
    config = with_serving(penguins_config, canary_percent=20, service_account="kserve-reader")
    assert_valid(kserve_inference_service(config, "gs://bucket/serving", 3, canary, mode=mode))


def test_the_tf_serving_objects_validate(penguins_config):
    docs = tf_serving_manifests(with_serving(penguins_config, service_account="tfserving"), "gs://bucket/serving")
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler"]
    for obj in docs:
        assert_valid(obj)


def test_the_gpu_serving_objects_validate(penguins_config):
    """serving.resources.gpus 1: the GPU request, node selector and tolerations in each object."""
    from tests.fixtures.configs import with_gpu_serving

    config = with_gpu_serving(penguins_config)
    docs = [*tf_serving_manifests(config, "gs://bucket/serving"),
            *(kserve_inference_service(config, "gs://bucket/serving", 3, mode=mode)
              for mode in ("Serverless", "RawDeployment"))]
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service", "InferenceService", "InferenceService"]
    for obj in docs:
        assert_valid(obj)
    broken = copy.deepcopy(docs[-1])
    broken["spec"]["predictor"]["tolerations"][0]["effect"] = 7
    assert validation_errors(broken)


def test_validation_fails_on_a_misspelt_field_a_wrong_type_and_a_missing_key(ctr_config):
    job = launched(ctr_config, "jobset")
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    misspelt = copy.deepcopy(job)
    misspelt["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelectr"] = pod["nodeSelector"]
    assert any("nodeSelectr" in e for e in validation_errors(misspelt))
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = "two"
    assert any("'two' is not of type 'integer'" in e for e in validation_errors(wrong_type))
    role = launcher_rbac(ctr_config, "team-a", "default-editor")[0]
    del role["rules"][0]["verbs"]
    assert validation_errors(role)


def test_the_s3_serving_objects_validate():
    """An s3:// serving base (configs/penguins-minio.yaml): the TF Serving Deployment with its
    S3 environment and secretKeyRefs, KServe's ServiceAccount listing the Secret, and the
    InferenceService running as it."""
    from pathlib import Path

    from pipelines.config import load_config
    from pipelines.manifests import kserve_s3_access

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "penguins-minio.yaml")
    tfserving = with_serving(config, tf_serving_image="registry.local/tfserving-s3:2.16.1")
    base = "s3://models/serving"
    docs = [*tf_serving_manifests(tfserving, base), *kserve_s3_access(config, base)[0],
            kserve_inference_service(config, base, 3)]
    assert [d["kind"] for d in docs] == ["ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
                                         "ServiceAccount", "InferenceService"]
    for obj in docs:
        assert_valid(obj)
    broken = copy.deepcopy(docs[1])
    broken["spec"]["template"]["spec"]["containers"][0]["env"][-1]["valueFrom"]["secretKeyRef"]["nam"] = "x"
    assert any("nam" in e for e in validation_errors(broken))
