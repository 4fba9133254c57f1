"""The config schema: defaults, and one-line errors that name the YAML key."""
from pathlib import Path

import pytest
import yaml

from components.contracts.errors import GpupipeError
from pipelines.config import load_config, parse_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def penguins() -> dict:
    return yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())


def test_every_config_in_configs_is_valid():
    configs = sorted((ROOT / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        assert load_config(path).name


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["training"].update(epocs=3), "training.epocs: unknown key"),
    (lambda c: c.update(serving_base="x"), "serving_base: unknown key"),
    (lambda c: c["data"].pop("label"), "data.label: required key is missing"),
    (lambda c: c["training"].update(epochs=0), "training.epochs: Input should be greater than or equal to 1"),
    (lambda c: c["serving"].update(model_name="../escape"), "serving.model_name: '../escape' is not a plain name"),
    (lambda c: c["serving"].update(model_name="/abs"), "serving.model_name: '/abs' is not a plain name"),
    (lambda c: c["training"]["pods"].update(gpus=0), "training.pods: accelerator is set but gpus is 0"),
    (lambda c: c["data"].update(categorical_features=["island", "sex", "species"]), "label 'species' is also listed"),
])
def test_bad_config_is_one_line_naming_the_key(edit, message):
    raw = penguins()
    edit(raw)
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("configs/penguins.yaml: ")


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(GpupipeError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(GpupipeError, match="not valid YAML at line"):
        load_config(bad)


def test_image_tags_carry_the_package_version_and_the_commit():
    from pipelines.version import __version__, image_tag

    config = parse_config(penguins())
    assert image_tag().startswith(f"{__version__}-")
    assert config.images.cpu_image.endswith(f"/gpupipe-cpu:{image_tag()}")
    assert config.train_image.endswith(f"/gpupipe-gpu:{image_tag()}")  # penguins asks for a GPU


def test_storage_s3_defaults_and_the_environment_it_renders():
    """The one call the compiled tasks and the local run take their S3 environment from;
    the variable names are the storage layer's own constants."""
    from components.contracts.storage import s3

    assert parse_config(penguins()).storage.environment() == {}  # no storage section: nothing set
    raw = penguins()
    raw["storage"] = {"s3": {}}
    assert parse_config(raw).storage.environment() == {s3.REGION_ENV: "us-east-1", s3.ADDRESSING_ENV: "auto",
                                                       s3.CONDITIONAL_ENV: "1"}  # AWS S3
    raw["storage"] = {"s3": {"endpoint": "http://minio.minio:9000/", "conditional_writes": False}}
    storage = parse_config(raw).storage
    assert storage.environment() == {s3.ENDPOINT_ENV: "http://minio.minio:9000", s3.REGION_ENV: "us-east-1",
                                     s3.ADDRESSING_ENV: "path", s3.CONDITIONAL_ENV: "0", s3.LOCK_SECONDS_ENV: "60"}
    assert storage.secret_environment() == {}
    raw["storage"]["s3"].update(credentials_secret="mlpipeline-minio-artifact", access_key_key="accesskey",
                                secret_key_key="secretkey", addressing_style="virtual")
    storage = parse_config(raw).storage
    assert storage.environment()[s3.ADDRESSING_ENV] == "virtual"
    assert storage.secret_environment() == {"AWS_ACCESS_KEY_ID": ("mlpipeline-minio-artifact", "accesskey"),
                                            "AWS_SECRET_ACCESS_KEY": ("mlpipeline-minio-artifact", "secretkey")}


def test_the_s3_backend_reads_what_the_settings_render(monkeypatch):
    """Round trip: the environment from storage.s3 is what components/contracts/storage/s3.py
    resolves its client settings from."""
    from components.contracts.settings import S3Settings
    from components.contracts.storage import s3

    for name in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in S3Settings(endpoint="https://rgw.ceph.internal:7480", region="eu-1").environment().items():
        monkeypatch.setenv(name, value)
    assert s3._settings()[:3] == ("https://rgw.ceph.internal:7480", "eu-1", "path")


# -- every quantity the check accepts compiles (issue #30, 5) -------------------------------------
CPU_OK = {"500m": "500m", "2": "2", "1.5": "1.5", ".5": ".5", "0": "0", "1e3": "1000", "2k": "2000", "+1": "1",
          "1.": "1", "500u": "1m", "3e-4": "1m", "1500m": "1500m", "0.25e1": "2500m"}
MEMORY_OK = {"4Gi": "4Gi", "8G": "8G", "512Mi": "512Mi", "1e9": "1G", "1.5Gi": "1536Mi", "0.5Gi": "512Mi",
             "1000k": "1M", "123456789": "123456789", "2E": "2E", "1.5e3": "1500", "64Ki": "64Ki"}
MEMORY_BAD = {"512m": "is not a whole number of bytes ('m' is milli", "1K": "is not a Kubernetes quantity",
              "1.3": "is not a whole number of bytes", "-1Gi": "is negative", "32GB": "is not a Kubernetes quantity",
              "1e3Ki": "is not a Kubernetes quantity", "1Gi\n": "is not a Kubernetes quantity"}


def test_quantities_the_check_accepts_compile_and_keep_their_value():
    """Values kfp 2.13's setters refuse as written (1e9, 1.5Gi, 2k CPUs) are rewritten as the
    same quantity in a form they take; the pipeline compiles with all of them at once."""
    from kubernetes.utils import parse_quantity

    from pipelines.cli import compile_to_text
    from pipelines.pods import step_resources

    from pipelines.steps import names

    steps = names()
    slots = [(step, field) for step in steps for field in ("cpu", "cpu_limit", "memory", "memory_limit")]
    cases = [(v, CPU_OK[v]) for v in CPU_OK] + [(v, MEMORY_OK[v]) for v in MEMORY_OK]
    raw, expected = penguins(), {}
    cpu_slots = [s for s in slots if s[1].startswith("cpu")]
    memory_slots = [s for s in slots if s[1].startswith("memory")]
    for (step, field), (given, want) in [*zip(cpu_slots, cases[:len(CPU_OK)]),
                                         *zip(memory_slots, cases[len(CPU_OK):])]:
        raw.setdefault("cluster", {}).setdefault("resources", {}).setdefault(step, {})[field] = given
        expected[(step, field)] = (given, want)
    assert len(expected) == len(CPU_OK) + len(MEMORY_OK)
    for step in steps:  # Kubernetes refuses a limit below its request (so does the config): order each pair
        for request, limit in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            if (step, request) in expected and (step, limit) in expected and \
                    parse_quantity(expected[(step, limit)][0]) < parse_quantity(expected[(step, request)][0]):
                expected[(step, request)], expected[(step, limit)] = expected[(step, limit)], expected[(step, request)]
                section = raw["cluster"]["resources"][step]
                section[request], section[limit] = expected[(step, request)][0], expected[(step, limit)][0]
    config = parse_config(raw)
    for (step, field), (given, want) in expected.items():
        got = getattr(step_resources(config, step), field)
        assert got == want, (step, field, given)
        if field.startswith("memory"):
            assert parse_quantity(got) == parse_quantity(given)  # the same number of bytes
        else:  # Kubernetes keeps CPU to the millicore, rounding up
            assert parse_quantity(got) == max(parse_quantity(given), parse_quantity("1m")) or given in ("0",)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    ingest = docs[0]["deploymentSpec"]["executors"]["exec-ingest"]["container"]["resources"]
    assert (ingest["resourceCpuRequest"], ingest["resourceMemoryRequest"]) == (
        expected[("ingest", "cpu")][1], expected[("ingest", "memory")][1])


def test_a_sweep_of_quantities_each_accepted_one_passes_kfps_setters():
    """Quantities drawn from Kubernetes' grammar and near misses: whatever gpupipe's check
    accepts, kfp's own setter validation (kfp/dsl/pipeline_task.py) takes; whatever it refuses
    is one line."""
    import random

    from kfp.dsl.pipeline_task import PipelineTask

    from components.contracts.pods import check_quantity

    rng = random.Random(30)
    numbers = ["0", "1", "2", "12", "0.5", ".25", "1.", "3.75", "1000", "+4", "-1", "007"]
    suffixes = ["", "m", "k", "K", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "e3", "E2", "e-2", "e", "u", "n", "GB", " "]
    accepted = refused = 0
    for _ in range(600):
        value = rng.choice(numbers) + rng.choice(suffixes)
        for kind, setter in (("cpu", PipelineTask._validate_cpu_request_limit),
                             ("memory", PipelineTask._validate_memory_request_limit)):
            try:
                canonical = check_quantity(value, f"cluster.resources.train.{kind}", kind)
            except ValueError as err:
                refused += 1
                assert "\n" not in str(err)
                continue
            accepted += 1
            setter(None, canonical)  # raises ValueError when kfp would refuse it at compile
    assert accepted > 300 and refused > 300


def test_a_gpu_count_kfp_cannot_give_one_task_is_refused_in_one_line():
    raw = penguins()
    raw["training"]["pods"].update(gpus=3, launcher="pod")
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert str(err.value) == ("configs/penguins.yaml: training.pods.gpus: 3 with launcher: pod, and Kubeflow Pipelines "
                              "gives a task 1, 2, 4, 8 or 16 GPUs; set training.pods.gpus to one of them, or "
                              "training.pods.launcher: jobset")
    raw["training"]["pods"]["launcher"] = "jobset"  # a JobSet's pods take any count
    assert parse_config(raw).training.pods.gpus == 3
    raw["training"]["pods"].update(launcher="pod", gpus=1, workers=2)
    with pytest.raises(GpupipeError, match="training.pods.launcher: pod trains on one worker"):
        parse_config(raw, "configs/penguins.yaml")


@pytest.mark.parametrize("value, message", list(MEMORY_BAD.items()))
def test_a_memory_value_kfp_or_kubernetes_would_refuse_is_one_line(value, message):
    raw = penguins()
    raw["cluster"] = {"resources": {"train": {"memory": value}}}
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("configs/penguins.yaml: cluster.resources.train.memory: ")


# -- every error quotes the value in one line, escaped and shortened -----------------------------
LONG = "x" * 500


@pytest.mark.parametrize("edit, start", [
    (lambda c: c["serving"].update(model_name="bad\nname"), "serving.model_name: 'bad\\nname' is not a plain name"),
    (lambda c: c.update(name=LONG), "name: '" + "x" * 60 + "... (500 characters)' is not a plain name"),
    (lambda c: c.setdefault("cluster", {}).update(resources={"train": {"memory": "4Gi\n" + LONG}}),
     "cluster.resources.train.memory: '4Gi\\n" + "x" * 55 + "... (504 characters)'"),
    (lambda c: c.setdefault("cluster", {}).update(queue="q\r\n" + LONG), "cluster.queue: 'q\\r\\n"),
    (lambda c: c["training"].update({"epo\nchs": 3}), "training.epo\\nchs: unknown key"),
    (lambda c: c["training"].update({LONG: 3}), "training." + "x" * 60 + "... (500 characters): unknown key"),
    (lambda c: c.setdefault("images", {}).update(cpu="ghcr.io/x/y:\tlatest\n" + LONG),
     "images.cpu: 'ghcr.io/x/y:\\tlatest\\n" + "x" * 38 + "... (520 characters)' is not an image reference"),
])
def test_a_config_error_quoting_a_newline_or_500_characters_stays_one_line(edit, start):
    raw = penguins()
    edit(raw)
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    text = str(err.value)
    assert text.startswith("configs/penguins.yaml: " + start), text
    assert "\n" not in text and "\r" not in text and "\t" not in text
    assert len(text) < 400, len(text)


@pytest.mark.parametrize("key, where", [("cpu", "cluster.resources.train.cpu"),
                                        ("memory", "cluster.resources.train.memory"),
                                        ("gpus", "training.pods.gpus"), ("launcher", "training.pods.launcher")])
def test_each_training_pod_setting_has_one_key_and_the_other_place_names_it(key, where):
    """The training pods' CPU and memory are cluster.resources.train's, like every step's; their
    launcher, GPUs and placement are training.pods'. Set in a second place (a config
    written for the flat keys), the config is refused in one line naming the one key."""
    raw = penguins()
    raw["training"][key] = "4" if key in ("cpu", "memory") else raw["training"]["pods"].get(key, "jobset")
    raw.setdefault("cluster", {})["resources"] = {"train": {"cpu": "8"}}
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert str(err.value).startswith(f"configs/penguins.yaml: training: training.{key} is not a key; ")
    assert where in str(err.value) and "\n" not in str(err.value)
    del raw["training"][key]  # one key: fine
    assert parse_config(raw).cluster.resources["train"].model_dump(exclude_unset=True) == {"cpu": "8"}


def test_a_limit_below_its_request_is_refused_and_a_raised_request_lifts_the_default_limit():
    from pipelines import steps
    from pipelines.pods import training_shape

    raw = penguins()
    raw["cluster"]["resources"] = {"train": {"cpu": "8", "cpu_limit": "2"}}
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert str(err.value) == ("configs/penguins.yaml: cluster.resources.train: cpu_limit 2 is below cpu 8, and "
                              "Kubernetes refuses a limit below its request; raise cpu_limit, or leave it out (it "
                              "follows cpu)")
    raw["cluster"]["resources"] = {"train": {"cpu": "8", "memory": "32Gi"}}
    shape = training_shape(parse_config(raw))
    defaults = steps.get("train").resources
    assert defaults.cpu_limit == "4" and defaults.memory_limit == "8Gi"
    assert (shape.cpu_request, shape.cpu_limit, shape.memory_request, shape.memory_limit) == ("8", "8", "32Gi", "32Gi")
    raw["cluster"]["resources"] = {"train": {"cpu": "1"}}  # below the default limit: the limit stays
    assert training_shape(parse_config(raw)).cpu_limit == "4"


def _with_old_gcs_key(raw: dict) -> dict:
    """penguins as it was written before storage.gcs: the Secret under cluster."""
    raw["cluster"]["gcs_credentials_secret"] = raw["storage"].pop("gcs")["credentials_secret"]
    raw["cluster"]["gcs_credentials_key"] = "sa.json"
    return raw


def test_the_old_gcs_credentials_keys_still_work_with_one_line_naming_the_new_ones():
    from pipelines.config import ConfigDeprecation

    raw = _with_old_gcs_key(penguins())
    before = yaml.safe_dump(raw)
    with pytest.warns(ConfigDeprecation) as caught:
        config = parse_config(raw)
    assert [str(w.message) for w in caught] == [
        "cluster.gcs_credentials_secret is deprecated; move it to storage.gcs.credentials_secret (same value)",
        "cluster.gcs_credentials_key is deprecated; move it to storage.gcs.credentials_key (same value)"]
    assert (config.storage.gcs.credentials_secret, config.storage.gcs.credentials_key) == ("gpupipe-gcs-key", "sa.json")
    assert yaml.safe_dump(raw) == before  # the caller's mapping is left as it was
    assert parse_config(penguins()).storage.gcs.credentials_secret == "gpupipe-gcs-key"


def test_the_old_and_the_new_gcs_key_disagreeing_is_one_line():
    raw = _with_old_gcs_key(penguins())
    raw["storage"]["gcs"] = {"credentials_secret": "another-key"}
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert str(err.value) == ("configs/penguins.yaml: cluster.gcs_credentials_secret (deprecated) and "
                              "storage.gcs.credentials_secret are both set, to different values; keep "
                              "storage.gcs.credentials_secret alone")


def test_the_command_line_prints_the_deprecation_as_one_warning_line(tmp_path, capsys):
    from pipelines.cli import main

    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(_with_old_gcs_key(penguins())))
    assert main(["compile", str(old), "--output-dir", str(tmp_path / "out")]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "deprecated" in line]
    assert warned == [
        "warning: cluster.gcs_credentials_secret is deprecated; move it to storage.gcs.credentials_secret (same value)",
        "warning: cluster.gcs_credentials_key is deprecated; move it to storage.gcs.credentials_key (same value)"]
