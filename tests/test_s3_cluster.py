"""The cluster side of an S3-compatible store (MinIO, Ceph RGW, AWS S3): the config's
storage.s3 section becomes the same environment on every compiled task and on the
multi-worker job's workers, the access keys come from a Kubernetes Secret by reference
(kfp-kubernetes secretAsEnv, secretKeyRef), no key ever reaches the YAML, and bad values
are refused in one line naming the key."""
from pathlib import Path

import pytest
import yaml

from components.contracts.storage import s3
from pipelines import steps
from pipelines.cli import compile_to_text, compiled_path, main
from pipelines.config import load_config, parse_config
from tests.fixtures.k8s_schema import assert_valid
from tests.test_compile import compiled_pod_shape, job_pod_shape
from tests.fixtures.configs import with_pods

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
MINIO = ROOT / "configs" / "penguins-minio.yaml"


def committed(config):
    return list(yaml.safe_load_all((ROOT / compiled_path(config)).read_text()))


def test_every_executor_gets_the_storage_environment_and_the_keys_from_the_secret():
    config = load_config(MINIO)
    docs = committed(config)
    executors = docs[0]["deploymentSpec"]["executors"]
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert len(executors) == len(steps.names())
    for name, executor in executors.items():
        env = {e["name"]: e.get("value") for e in executor["container"]["env"]}
        assert {k: env.get(k) for k in (s3.ENDPOINT_ENV, s3.REGION_ENV, s3.ADDRESSING_ENV, s3.CONDITIONAL_ENV)} == {
            s3.ENDPOINT_ENV: "http://minio.minio:9000", s3.REGION_ENV: "us-east-1", s3.ADDRESSING_ENV: "path",
            s3.CONDITIONAL_ENV: "1"}, name
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env, name  # never as a value
        assert platform[name]["secretAsEnv"] == [{
            "keyToEnv": [{"envVar": "AWS_ACCESS_KEY_ID", "secretKey": "AWS_ACCESS_KEY_ID"},
                         {"envVar": "AWS_SECRET_ACCESS_KEY", "secretKey": "AWS_SECRET_ACCESS_KEY"}],
            "secretName": "gpupipe-minio",
            "secretNameParameter": {"runtimeValue": {"constant": "gpupipe-minio"}}}], name
    inputs = docs[0]["root"]["inputDefinitions"]["parameters"]
    assert inputs["data_source"]["defaultValue"] == "s3://gpupipe-example/data/penguins.csv"
    assert inputs["serving_base"]["defaultValue"] == "s3://gpupipe-example/serving"
    assert docs[0]["defaultPipelineRoot"] == "minio://mlpipeline/v2/artifacts/penguins-minio"


def test_without_a_storage_section_no_task_gets_s3_settings():
    docs = committed(load_config(ROOT / "configs" / "penguins.yaml"))
    for name, executor in docs[0]["deploymentSpec"]["executors"].items():
        names = {e["name"] for e in executor["container"].get("env", [])}
        assert not names & {s3.ENDPOINT_ENV, s3.REGION_ENV, s3.ADDRESSING_ENV, s3.CONDITIONAL_ENV}, name
        assert "secretAsEnv" not in docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][name]


def test_no_key_reaches_the_yaml_even_when_the_compiling_shell_has_them(monkeypatch):
    """KFP's own MinIO Secret (keys accesskey / secretkey), the lock-object fallback, and
    credentials in the environment of whoever compiles: the YAML names the Secret and its
    keys, never the values."""
    access, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    raw = yaml.safe_load(MINIO.read_text())
    raw["storage"]["s3"].update(credentials_secret="mlpipeline-minio-artifact", access_key_key="accesskey",
                                secret_key_key="secretkey", conditional_writes=False, lock_seconds=120)
    text = compile_to_text(parse_config(raw))
    assert access not in text and secret not in text
    docs = list(yaml.safe_load_all(text))
    for name, executor in docs[0]["deploymentSpec"]["executors"].items():
        env = {e["name"]: e["value"] for e in executor["container"]["env"]}
        assert (env[s3.CONDITIONAL_ENV], env[s3.LOCK_SECONDS_ENV]) == ("0", "120"), name
        (ref,) = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][name]["secretAsEnv"]
        assert ref["secretName"] == "mlpipeline-minio-artifact"
        assert {e["envVar"]: e["secretKey"] for e in ref["keyToEnv"]} == {"AWS_ACCESS_KEY_ID": "accesskey",
                                                                         "AWS_SECRET_ACCESS_KEY": "secretkey"}


@pytest.fixture(scope="module")
def ceph_ctr(ctr_config):
    """The multi-worker example on Ceph RGW behind TLS, and its train task compiled to train in
    its own pod (one worker, launcher: pod; compiled once for both launchers)."""
    raw = ctr_config.model_dump(exclude_none=True)
    raw["storage"] = {"s3": {"endpoint": "https://rgw.ceph.internal:7480", "region": "eu-1",
                             "credentials_secret": "ceph-keys"}}
    raw["cluster"]["serving_base"] = "s3://models/serving"
    config = parse_config(raw)
    single = with_pods(config, workers=1, launcher="pod")
    return config, list(yaml.safe_load_all(compile_to_text(single)))


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_the_multi_worker_jobs_workers_get_the_same_environment_and_secret_refs(ceph_ctr, kind):
    from components.train.launch import Launch, job_manifest
    from pipelines.factory import launch_json

    config, single = ceph_ctr
    launch = Launch.from_json(launch_json(with_pods(config, launcher=kind)))
    manifest = job_manifest(launch, "gpupipe-train-x", "team-a", ["python", "-m", "components.train"])
    pod = (manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"] if kind == "tfjob" else
           manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"])
    assert_valid(manifest)  # secretKeyRef env against the JobSet / TFJob CRD's pod template schema
    task, worker = compiled_pod_shape(single, "exec-train"), job_pod_shape(pod)
    assert task == worker
    assert task["env"][s3.ENDPOINT_ENV] == "https://rgw.ceph.internal:7480" and task["env"][s3.REGION_ENV] == "eu-1"
    assert task["secretEnv"] == {("AWS_ACCESS_KEY_ID", "ceph-keys", "AWS_ACCESS_KEY_ID"),
                                 ("AWS_SECRET_ACCESS_KEY", "ceph-keys", "AWS_SECRET_ACCESS_KEY")}


@pytest.mark.parametrize("s3_section, message", [
    ({"endpoint": "minio.minio:9000"}, "storage.s3.endpoint: 'minio.minio:9000' is not an http:// or https:// URL"),
    ({"addressing_style": "host"}, "storage.s3.addressing_style: Input should be 'path', 'virtual' or 'auto'"),
    ({"credentials_secret": "AKIAIOSFODNN7EXAMPLE"},
     "storage.s3.credentials_secret: 'AKIAIOSFODNN7EXAMPLE' is not a Kubernetes Secret name"),
    ({"access_key_key": "access key"}, "storage.s3.access_key_key: 'access key' is not a key of a Kubernetes Secret"),
    ({"access_key_key": "k", "secret_key_key": "k"}, "storage.s3: access_key_key and secret_key_key are both 'k'"),
    ({"conditional_writes": "maybe"}, "storage.s3.conditional_writes: Input should be a valid boolean"),
    ({"endpont": "http://minio:9000"}, "storage.s3.endpont: unknown key"),
])
def test_compile_refuses_a_bad_s3_setting_in_one_line_naming_the_key(tmp_path, capsys, s3_section, message):
    raw = yaml.safe_load(MINIO.read_text())
    raw["storage"]["s3"] = s3_section
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["compile", str(path), "--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_minio_scheme_is_for_the_pipeline_root_only(tmp_path, capsys):
    raw = yaml.safe_load(MINIO.read_text())
    raw["cluster"]["serving_base"] = "minio://models/serving"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["compile", str(path), "--output-dir", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (
        "error: cluster.serving_base: 'minio://models/serving': minio:// is KFP's name for its artifact store only; "
        "write the same objects as s3://models/serving (set storage.s3.endpoint to the MinIO URL)\n")


def test_the_local_environment_is_the_tasks_environment():
    """What `gpupipe run` sets for kfp.local tasks is what the compiled tasks carry."""
    config = load_config(MINIO)
    env = {e["name"]: e["value"] for e in committed(config)[0]["deploymentSpec"]["executors"]["exec-push"]
           ["container"]["env"]}
    assert config.storage.environment() == {k: env[k] for k in config.storage.environment()}
    assert set(config.storage.environment()) == {s3.ENDPOINT_ENV, s3.REGION_ENV, s3.ADDRESSING_ENV,
                                                 s3.CONDITIONAL_ENV}
