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
    (lambda c: c["training"].update(gpus=0), "training: accelerator is set but gpus is 0"),
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
