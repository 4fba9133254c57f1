"""Compiled KFP YAML: loads back with the kfp SDK, carries the cluster settings, and the
committed files under pipelines/compiled/ are not stale."""
import json
import re
from pathlib import Path

import pytest
import yaml

from pipelines import steps
from pipelines.cli import compile_to_text, compiled_path
from pipelines.config import load_config
from tests.fixtures.configs import with_pods

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
    # Pressing Run with the defaults reads and writes where every pod can: the cluster locations.
    assert loaded.component_spec.inputs["data_source"].default == "gs://gpupipe-example/data/penguins.csv"
    assert loaded.component_spec.inputs["serving_base"].default == "gs://gpupipe-example/serving"
    assert penguins_docs[1][0]["defaultPipelineRoot"] == "gs://gpupipe-example/pipeline-root"


@pytest.mark.parametrize("config_path", CONFIGS, ids=lambda p: p.name)
def test_no_executor_asks_kfp_for_a_gpu(config_path):
    """GPU training is a JobSet (1 to N workers) that a small CPU train task launches: no
    task of a committed pipeline asks KFP for a GPU or runs in the GPU image."""
    docs = list(yaml.safe_load_all((ROOT / compiled_path(load_config(config_path))).read_text()))
    for name, executor in docs[0]["deploymentSpec"]["executors"].items():
        assert "accelerator" not in executor["container"]["resources"], name
        assert executor["container"]["image"].split("/")[-1].startswith("gpupipe-cpu:"), name


def test_one_gpu_worker_is_a_jobset_of_one_with_the_gpu_placement_and_scratch(penguins_docs, penguins_config):
    from components.train.launch import Launch, job_manifest

    spec = penguins_docs[1][0]
    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert train["resources"]["resourceCpuLimit"] == "500m"  # the launcher
    launch = Launch.from_json(spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["launch"]["runtimeValue"]
                              ["constant"])
    assert (launch.kind, launch.workers, launch.image) == ("jobset", 1, penguins_config.images.gpu_image)
    job = job_manifest(launch, "gpupipe-train-x", "team-a", ["python", "-m", "components.train"])
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert pod["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    # /tmp on an emptyDir (the root filesystem is read-only), and node-local scratch for the
    # disk input cache, sized by training.disk_cache_budget_mb.
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "20Gi"}} in pod["volumes"]
    assert {"name": "gpupipe-scratch", "emptyDir": {"sizeLimit": "20480Mi"}} in pod["volumes"]
    assert {"name": "GPUPIPE_SCRATCH_DIR", "value": "/gpupipe-scratch"} in container["env"]
    # one worker: a single process, no TF_CONFIG host list, no headless service
    assert "network" not in job["spec"] and not any(e["name"] == "GPUPIPE_TF_WORKERS" for e in container["env"])


def test_launcher_pod_trains_in_the_kfp_task_and_asks_kfp_for_the_gpu(penguins_config):
    config = with_pods(penguins_config, launcher="pod")
    spec, platform = yaml.safe_load_all(compile_to_text(config))
    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert train["resources"]["accelerator"] == {"resourceType": "nvidia.com/gpu", "resourceCount": "1"} or \
        train["resources"]["accelerator"]["resourceCount"] == "1"
    assert train["image"].split("/")[-1].startswith("gpupipe-gpu:")
    assert spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["launch"]["runtimeValue"]["constant"] == ""
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"]
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert {"mountPath": "/gpupipe-scratch", "sizeLimit": "20480Mi", "volumeName": "gpupipe-scratch"} in \
        k8s["emptyDirMounts"]


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


def test_the_run_report_reads_the_other_steps_artifacts_after_push(penguins_docs):
    spec = penguins_docs[1][0]
    task = spec["root"]["dag"]["tasks"]["report"]
    assert task["taskInfo"]["name"] == "Run report" and task["cachingOptions"] == {}
    assert "push" in task["dependentTasks"]
    sources = {name: (a["taskOutputArtifact"]["producerTask"], a["taskOutputArtifact"]["outputArtifactKey"])
               for name, a in task["inputs"]["artifacts"].items()}
    assert sources == {"train_report": ("train", "report"), "blessing": ("evaluate", "blessing"),
                       "anomalies": ("validate", "anomalies"), "pushed": ("push", "pushed")}
    # The page is a KFP HTML artifact: the Kubeflow UI shows it on the task's page.
    outputs = spec["components"]["comp-report"]["outputDefinitions"]["artifacts"]
    assert outputs == {"page": {"artifactType": {"schemaTitle": "system.HTML", "schemaVersion": "0.0.1"}}}
    container = spec["deploymentSpec"]["executors"]["exec-report"]["container"]
    assert container["image"].split("/")[-1].startswith("gpupipe-cpu:") and "accelerator" not in container["resources"]


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


def test_a_launched_train_task_has_no_kfp_retry(penguins_docs):
    """The JobSet restarts the workers and outlives its launcher, which a KFP retry could not
    follow past an hour (tests/test_launcher_semantics.py: launcher: pod keeps the retry)."""
    task = penguins_docs[1][0]["root"]["dag"]["tasks"]["train"]
    assert "retryPolicy" not in task


def test_multi_worker_config_requests_gpus_in_the_job_not_the_launcher(ctr_config):
    docs = list(yaml.safe_load_all(compile_to_text(ctr_config)))
    train = docs[0]["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert "accelerator" not in train["resources"] and train["resources"]["resourceCpuLimit"] == "500m"
    launch = docs[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["launch"]["runtimeValue"]["constant"]
    spec = json.loads(launch)
    assert spec["kind"] == "jobset" and spec["workers"] == 2 and spec["shape"]["gpus"] == 2
    assert spec["shape"]["accelerator"] == "nvidia.com/gpu"
    assert "retryPolicy" not in docs[0]["root"]["dag"]["tasks"]["train"]  # the JobSet restarts, not KFP
    # The launcher learns its own pod (name and uid) and its run's Argo Workflow: the job is
    # named for the run, so a retried launcher finds the job its first attempt created.
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"]
    assert {e["name"]: e["fieldPath"] for e in k8s["fieldPathAsEnv"]} == {
        "GPUPIPE_POD_NAME": "metadata.name", "GPUPIPE_POD_UID": "metadata.uid",
        "GPUPIPE_WORKFLOW": "metadata.labels['workflows.argoproj.io/workflow']"}


@pytest.mark.parametrize("config_path", CONFIGS, ids=lambda p: p.name)
def test_every_executor_has_cpu_memory_requests_and_limits_and_a_timeout(config_path):
    """The committed file, as a user uploads it: no task runs unbounded on the cluster."""
    config = load_config(config_path)
    docs = list(yaml.safe_load_all((ROOT / compiled_path(config)).read_text()))
    executors = docs[0]["deploymentSpec"]["executors"]
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert len(executors) == len(steps.names())  # one per step (pipelines/steps.py)
    for name, executor in executors.items():
        resources = executor["container"]["resources"]
        for key in ("resourceCpuRequest", "resourceCpuLimit", "resourceMemoryRequest", "resourceMemoryLimit"):
            assert resources.get(key), f"{config_path.name}: {name} has no {key}"
        assert int(platform[name]["activeDeadlineSeconds"]) > 0, f"{config_path.name}: {name} has no timeout"


def compiled_pod_shape(docs, executor: str) -> dict:
    """What the compiled KFP task asks of its pod, in core PodSpec terms."""
    container = docs[0]["deploymentSpec"]["executors"][executor]["container"]
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
    r = container["resources"]
    limits = {"cpu": r["resourceCpuLimit"], "memory": r["resourceMemoryLimit"]}
    if "accelerator" in r:
        limits[r["accelerator"]["resourceType"]] = r["accelerator"]["resourceCount"]
    return {
        "resources": {"requests": {"cpu": r["resourceCpuRequest"], "memory": r["resourceMemoryRequest"]},
                      "limits": limits},
        "env": {e["name"]: e["value"] for e in container.get("env", [])},
        "secretEnv": {(e["envVar"], s["secretName"], e["secretKey"]) for s in k8s.get("secretAsEnv", [])
                      for e in s["keyToEnv"]},
        "nodeSelector": k8s.get("nodeSelector", {}).get("labels", {}),
        "tolerations": k8s.get("tolerations", []),
        "secrets": {(v["secretName"], v["mountPath"]) for v in k8s.get("secretAsVolume", [])},
        "emptyDirs": {(v["volumeName"], v["mountPath"], v["sizeLimit"]) for v in k8s.get("emptyDirMounts", [])},
        "imagePullSecrets": [v["secretName"] for v in k8s.get("imagePullSecret", [])],
        "activeDeadlineSeconds": int(k8s["activeDeadlineSeconds"]),
    }


def job_pod_shape(pod: dict) -> dict:
    """The same terms, read from a multi-worker job's worker PodSpec."""
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = container.get("volumeMounts", [])
    return {
        "resources": container["resources"],
        "env": {e["name"]: e["value"] for e in container["env"]
                if "value" in e and not e["name"].startswith(("TF_", "GPUPIPE_TF_"))},
        "secretEnv": {(e["name"], e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
                      for e in container["env"] if "valueFrom" in e},
        "nodeSelector": pod.get("nodeSelector", {}),
        "tolerations": pod.get("tolerations", []),
        "secrets": {(volumes[m["name"]]["secret"]["secretName"], m["mountPath"]) for m in mounts
                    if "secret" in volumes[m["name"]]},
        "emptyDirs": {(m["name"], m["mountPath"], volumes[m["name"]]["emptyDir"]["sizeLimit"]) for m in mounts
                      if "emptyDir" in volumes[m["name"]]},
        "imagePullSecrets": [s["name"] for s in pod.get("imagePullSecrets", [])],
        "activeDeadlineSeconds": pod["activeDeadlineSeconds"],
    }


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_the_train_task_and_the_job_workers_come_from_one_pod_shape(ctr_config, kind):
    """The same config trains in the KFP task (launcher: pod) or in a JobSet/TFJob (two
    workers): the pods ask for the same resources, placement, secrets, volumes and deadline."""
    from components.train.launch import Launch, job_manifest
    from pipelines.factory import launch_json

    def with_training(**update):
        return with_pods(ctr_config, **update)

    single = list(yaml.safe_load_all(compile_to_text(with_training(workers=1, launcher="pod"))))
    launch = Launch.from_json(launch_json(with_training(launcher=kind)))
    manifest = job_manifest(launch, "gpupipe-train-x", "team-a", ["python", "-m", "components.train"])
    pod = (manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"] if kind == "tfjob" else
           manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"])
    task, worker = compiled_pod_shape(single, "exec-train"), job_pod_shape(pod)
    assert task == worker
    assert task["resources"]["limits"]["nvidia.com/gpu"] == "2" and task["emptyDirs"] and task["secrets"]


def test_step_resources_and_timeouts_are_overridable_per_step(penguins_config):
    from pipelines.config import parse_config

    raw = penguins_config.model_dump(exclude_none=True)
    raw["cluster"]["resources"] = {"validate": {"memory": "16Gi", "memory_limit": "24Gi", "timeout": "90m"}}
    docs = list(yaml.safe_load_all(compile_to_text(parse_config(raw))))
    validate = docs[0]["deploymentSpec"]["executors"]["exec-validate"]["container"]["resources"]
    assert (validate["resourceMemoryRequest"], validate["resourceMemoryLimit"]) == ("16Gi", "24Gi")
    assert (validate["resourceCpuRequest"], validate["resourceCpuLimit"]) == ("1", "2")  # the step's defaults
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-validate"]["activeDeadlineSeconds"] == str(90 * 60)
    assert k8s["exec-ingest"]["activeDeadlineSeconds"] == str(6 * 3600)


@pytest.mark.parametrize("key, value, message", [
    ("memory", "32GB", "'32GB' is not a Kubernetes quantity"),
    ("timeout", "2 hours", "String should match pattern"),
])
def test_a_bad_resource_value_is_refused_naming_the_key(penguins_config, key, value, message):
    from components.contracts.errors import GpupipeError
    from pipelines.config import parse_config

    raw = penguins_config.model_dump(exclude_none=True)
    raw["cluster"]["resources"] = {"train": {key: value}}
    with pytest.raises(GpupipeError, match=f"cluster.resources.train.{key}: .*{message}"):
        parse_config(raw)


def test_the_beam_engine_and_runner_arguments_reach_the_ingest_task(penguins_config):
    """data.engine: beam with Dataflow's arguments: the compiled ingest task gets them in its
    settings parameter, and runs in the CPU image, whose lock has apache-beam[gcp] (the
    DirectRunner, and the client that submits to Dataflow)."""
    from components.ingest.settings import DataSettings
    from pipelines.config import parse_config

    args = ["--runner=DataflowRunner", "--project=my-project", "--region=europe-west4",
            "--temp_location=gs://my-bucket/tmp", f"--sdk_container_image={penguins_config.images.cpu_image}"]
    raw = penguins_config.model_dump(exclude_none=True)
    raw["data"].update(engine="beam", beam_pipeline_args=args)
    spec = next(yaml.safe_load_all(compile_to_text(parse_config(raw))))
    settings = spec["root"]["dag"]["tasks"]["ingest"]["inputs"]["parameters"]["settings"]["runtimeValue"]["constant"]
    data = DataSettings.from_json(settings)
    assert (data.engine, data.beam_pipeline_args) == ("beam", args)
    assert spec["deploymentSpec"]["executors"]["exec-ingest"]["container"]["image"] == penguins_config.images.cpu_image
    assert re.search(r"^apache-beam\[gcp\]==", (ROOT / "requirements.in").read_text(), re.M)
    default = next(yaml.safe_load_all((ROOT / "pipelines" / "compiled" / "penguins.yaml").read_text()))
    assert DataSettings.from_json(default["root"]["dag"]["tasks"]["ingest"]["inputs"]["parameters"]["settings"]
                                  ["runtimeValue"]["constant"]).engine == "local"
