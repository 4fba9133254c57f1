"""The multi-worker path: the TFJob manifest a config produces, and following a TFJob to
its end against a Kubernetes API FIXTURE (an in-memory CustomObjectsApi stand-in: no
cluster runs here)."""
import json
from pathlib import Path

import pytest

from components.errors import GpupipeError
from components.train.tfjob import job_state, run_tfjob, tfjob_manifest
from pipelines.config import load_config
from pipelines.factory import tfjob_json

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def ctr_manifest():
    spec = json.loads(tfjob_json(load_config(ROOT / "configs" / "ctr.yaml")))
    namespace = spec.pop("namespace") or "kubeflow-user"
    return tfjob_manifest(name="gpupipe-train-test", namespace=namespace,
                          command=["python", "-m", "components.train", "--examples", "gs://b/examples"], **spec)


def test_multi_worker_config_becomes_a_tfjob_manifest():
    manifest = ctr_manifest()
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "TFJob"
    worker = manifest["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "ExitCode"
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    assert container["name"] == "tensorflow"
    assert container["image"] == "ghcr.io/gpupipe/gpupipe-gpu:0.1.0"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "8", "memory": "32G"}
    assert container["command"][:3] == ["python", "-m", "components.train"]
    assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in container["env"]
    assert {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/secrets/gcs/key.json"} in container["env"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["volumes"][0]["secret"]["secretName"] == "gpupipe-gcs-key"
    # Each worker's disk input cache: an emptyDir the size of training.disk_cache_budget_mb.
    assert {"name": "gpupipe-scratch", "emptyDir": {"sizeLimit": "20480Mi"}} in pod["volumes"]
    assert {"name": "gpupipe-scratch", "mountPath": "/gpupipe-scratch"} in container["volumeMounts"]
    assert {"name": "GPUPIPE_SCRATCH_DIR", "value": "/gpupipe-scratch"} in container["env"]


def test_single_node_config_has_no_tfjob():
    assert tfjob_json(load_config(ROOT / "configs" / "penguins.yaml")) == ""


class FakeCustomObjectsApi:
    """FIXTURE: records the created TFJob and reports the given status conditions in turn."""

    def __init__(self, statuses):
        self.created, self.statuses = [], list(statuses)

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        self.created.append((group, version, namespace, plural, body))

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        conditions = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name}, "status": {"conditions": conditions}}


def test_following_a_tfjob_to_success():
    api = FakeCustomObjectsApi([
        [{"type": "Created", "status": "True"}],
        [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}],
        [{"type": "Running", "status": "False"},
         {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "TFJob ran"}],
    ])
    assert run_tfjob(ctr_manifest(), api, poll_seconds=0) == "TFJobSucceeded: TFJob ran"
    group, version, namespace, plural, body = api.created[0]
    assert (group, version, plural, namespace) == ("kubeflow.org", "v1", "tfjobs", "kubeflow-user")


def test_a_failed_tfjob_fails_the_task_with_the_operators_reason():
    api = FakeCustomObjectsApi([[{"type": "Failed", "status": "True", "reason": "TFJobFailed",
                                  "message": "TFJob gpupipe-train-test has failed because 1 Worker replica(s) failed."}]])
    with pytest.raises(GpupipeError, match="failed \\(TFJobFailed: TFJob gpupipe-train-test has failed because 1 "
                                           "Worker replica\\(s\\) failed.\\)"):
        run_tfjob(ctr_manifest(), api, poll_seconds=0)


def test_job_state_reads_conditions():
    assert job_state({}) == ("Pending", "")
    assert job_state({"status": {"conditions": [{"type": "Running", "status": "True", "message": "up"}]}}) == \
        ("Running", "up")
