"""The shared GPU pool: Kueue's queue and priority labels on the GPU workload only, a
team's share of the pool as manifests that validate against their schemas (core objects
and Kueue's CRDs), and spot training."""
import json

import pytest
import yaml

from components.train.launch import Launch, job_manifest
from pipelines.cli import compile_to_text
from pipelines.config import parse_config
from pipelines.factory import launch_json
from pipelines.manifests import tenant_manifests
from tests.fixtures.k8s_schema import assert_valid

pytestmark = pytest.mark.compile
QUEUED = {"kueue.x-k8s.io/queue-name": "gpus", "kueue.x-k8s.io/priority-class": "nightly"}


def with_cluster(config, **training):
    raw = config.model_dump(exclude_none=True)
    raw["cluster"].update(queue="gpus", priority="nightly")
    raw["training"].update(training)
    return parse_config(raw)


def pod_labels(docs, executor: str) -> dict:
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
    return k8s.get("podMetadata", {}).get("labels", {})


def test_a_single_worker_run_queues_the_train_pod_and_nothing_else(penguins_config):
    docs = list(yaml.safe_load_all(compile_to_text(with_cluster(penguins_config))))
    assert pod_labels(docs, "exec-train") == QUEUED
    others = sorted(set(docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]) - {"exec-train"})
    assert others == ["exec-evaluate", "exec-fingerprint", "exec-ingest", "exec-push", "exec-report", "exec-validate"]
    for other in others:
        assert not set(QUEUED) & set(pod_labels(docs, other)), other


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_a_multi_worker_run_queues_the_job_as_one_unit_not_its_pods_or_the_launcher(ctr_config, kind):
    config = with_cluster(ctr_config, launcher=kind)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    assert not set(QUEUED) & set(pod_labels(docs, "exec-train"))  # the launcher holds no GPU
    job = job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1", "team-a", ["python"])
    assert {k: job["metadata"]["labels"][k] for k in QUEUED} == QUEUED
    template = (job["spec"]["tfReplicaSpecs"]["Worker"]["template"] if kind == "tfjob" else
                job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    assert not set(QUEUED) & set(template["metadata"]["labels"])
    assert_valid(job)


def test_a_teams_share_of_the_pool_validates_against_the_kueue_and_core_schemas(ctr_config):
    docs = tenant_manifests(with_cluster(ctr_config), "team-a", gpu_quota=4, spot_gpu_quota=8, borrowing_limit=4)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "ResourceQuota", "LimitRange", "ResourceFlavor", "ResourceFlavor", "ClusterQueue",
                     "LocalQueue", "Role", "RoleBinding"]
    for doc in docs:
        assert_valid(doc)
    queue = docs[kinds.index("ClusterQueue")]["spec"]
    on_demand, spot = queue["resourceGroups"][0]["flavors"]
    # ctr's worker: 2 GPUs, 8 CPUs, 32G: per 4 GPUs 16 CPUs and 64G (61036Mi).
    assert on_demand["resources"] == [
        {"name": "cpu", "nominalQuota": "16", "borrowingLimit": "16"},
        {"name": "memory", "nominalQuota": "61036Mi", "borrowingLimit": "61036Mi"},
        {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4}]
    assert spot["name"] == "gpupipe-spot" and spot["resources"][2]["nominalQuota"] == 8
    assert queue["cohort"] == "gpupipe-pool" and queue["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert docs[kinds.index("LocalQueue")]["metadata"] == {
        "name": "gpus", "namespace": "team-a", "labels": {"app.kubernetes.io/managed-by": "gpupipe",
                                                          "gpupipe/tenant": "team-a"}}
    assert docs[1]["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
    spot_flavor = docs[4]["spec"]
    assert spot_flavor["nodeLabels"]["cloud.google.com/gke-spot"] == "true"


def test_two_teams_share_one_cohort_and_the_flavors(ctr_config):
    a = tenant_manifests(ctr_config, "team-a", gpu_quota=4, borrowing_limit=4)
    b = tenant_manifests(ctr_config, "team-b", gpu_quota=2, borrowing_limit=6)
    queues = [next(d for d in docs if d["kind"] == "ClusterQueue") for docs in (a, b)]
    assert {q["spec"]["cohort"] for q in queues} == {"gpupipe-pool"}
    flavors = [[d for d in docs if d["kind"] == "ResourceFlavor"] for docs in (a, b)]
    assert flavors[0] == flavors[1]  # cluster-scoped: the same objects, applied twice without change


def test_a_spot_config_compiles_with_the_spot_selector_toleration_and_more_retries(penguins_config):
    raw = penguins_config.model_dump(exclude_none=True)
    raw["training"].update(spot=True, retries=2, checkpoint_steps=200)
    config = parse_config(raw)
    assert (config.training.retries, config.training.checkpoint_steps) == (5, 50)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"]
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                             "cloud.google.com/gke-spot": "true"}
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"} in k8s["tolerations"]
    assert docs[0]["root"]["dag"]["tasks"]["train"]["retryPolicy"]["maxRetryCount"] == 5
    settings = json.loads(docs[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["settings"]
                          ["runtimeValue"]["constant"])
    assert settings["checkpoint_steps"] == 50 and settings["spot"] is True
