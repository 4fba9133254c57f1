"""Compiled KFP YAML: loads back with the kfp SDK, carries the cluster settings, and the
committed files under pipelines/compiled/ are not stale."""
import json
from pathlib import Path

import pytest
import yaml

from pipelines.cli import compile_to_text, compiled_path
from pipelines.config import load_config

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def penguins_docs():
    text = compile_to_text(load_config(ROOT / "configs" / "penguins.yaml"))
    return text, list(yaml.safe_load_all(text))


@pytest.mark.parametrize("config_path", CONFIGS, ids=lambda p: p.name)
def test_committed_compiled_yaml_is_up_to_date(config_path):
    config = load_config(config_path)
    committed = ROOT / compiled_path(config)
    assert committed.is_file(), f"{committed} missing: run `gpupipe compile` and commit it"
    assert committed.read_text() == compile_to_text(config), f"{committed} is stale: run `gpupipe compile`"


def test_compiled_yaml_loads_back_with_the_kfp_sdk(tmp_path, penguins_docs):
    from kfp import components

    path = tmp_path / "penguins.yaml"
    path.write_text(penguins_docs[0])
    loaded = components.load_component_from_file(str(path))
    assert loaded.name == "penguins"
    assert set(loaded.component_spec.inputs) == {"data_source", "epochs", "eval_threshold", "serving_base",
                                                 "learning_rate"}
    assert loaded.component_spec.inputs["epochs"].default == 40


def test_trainer_requests_the_configured_accelerator(penguins_docs):
    spec, platform = penguins_docs[1][0], penguins_docs[1][1]
    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert train["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert train["resources"]["accelerator"]["resourceCount"] == "1"
    assert train["image"].split("/")[-1].startswith("gpupipe-gpu:")
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"]
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert k8s["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    # Node-local scratch for the disk input cache, sized by training.disk_cache_budget_mb.
    assert k8s["emptyDirMounts"] == [{"mountPath": "/gpupipe-scratch", "sizeLimit": "20480Mi",
                                      "volumeName": "gpupipe-scratch"}]
    assert {"name": "GPUPIPE_SCRATCH_DIR", "value": "/gpupipe-scratch"} in train["env"]
    for other in ("exec-ingest", "exec-validate", "exec-evaluate", "exec-push"):
        container = spec["deploymentSpec"]["executors"][other]["container"]
        assert "resources" not in container and container["image"].split("/")[-1].startswith("gpupipe-cpu:")


def test_every_task_is_a_lightweight_component_without_pip_installs(penguins_docs):
    # kfp.local runs only lightweight components; the image already holds kfp and gpupipe.
    for name, executor in penguins_docs[1][0]["deploymentSpec"]["executors"].items():
        command = " ".join(executor["container"]["command"])
        assert "kfp.dsl.executor_main" in command, name
        assert "pip install" not in command, name


def test_push_is_never_cached(penguins_docs):
    tasks = penguins_docs[1][0]["root"]["dag"]["tasks"]
    assert tasks["push"]["cachingOptions"] == {}
    assert tasks["ingest"]["cachingOptions"] == {"enableCache": True}


def test_cached_steps_are_keyed_on_the_uncached_fingerprint(penguins_docs):
    # New files at the same data source, or a push since, must not reuse a cached ingest/validate.
    tasks = penguins_docs[1][0]["root"]["dag"]["tasks"]
    assert tasks["fingerprint"]["cachingOptions"] == {}
    assert tasks["fingerprint"]["inputs"]["parameters"]["source"] == {"componentInputParameter": "data_source"}
    assert tasks["fingerprint"]["inputs"]["parameters"]["serving_base"] == {"componentInputParameter": "serving_base"}
    from_fingerprint = {"taskOutputParameter": {"producerTask": "fingerprint", "outputParameterKey": "data"}}
    assert tasks["ingest"]["inputs"]["parameters"]["source_fingerprint"] == from_fingerprint
    from_fingerprint["taskOutputParameter"]["outputParameterKey"] = "served"
    assert tasks["validate"]["inputs"]["parameters"]["served_version"] == from_fingerprint
    assert tasks["validate"]["cachingOptions"] == {"enableCache": True}


def test_gpu_config_sets_retries_with_backoff(penguins_docs):
    task = penguins_docs[1][0]["root"]["dag"]["tasks"]["train"]
    assert task["retryPolicy"]["maxRetryCount"] == 2
    assert task["retryPolicy"]["backoffDuration"] == "60s" and task["retryPolicy"]["backoffFactor"] == 2.0


def test_multi_worker_config_requests_gpus_in_the_tfjob_not_the_launcher():
    docs = list(yaml.safe_load_all(compile_to_text(load_config(ROOT / "configs" / "ctr.yaml"))))
    train = docs[0]["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert "accelerator" not in train.get("resources", {})
    tfjob = docs[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["tfjob"]["runtimeValue"]["constant"]
    spec = json.loads(tfjob)
    assert spec["workers"] == 2 and spec["gpus"] == 2 and spec["accelerator"] == "nvidia.com/gpu"
    assert docs[0]["root"]["dag"]["tasks"]["train"]["retryPolicy"]["maxRetryCount"] == 3
