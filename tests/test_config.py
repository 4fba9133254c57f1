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


def test_image_tags_follow_the_package_version():
    from pipelines.version import __version__

    config = parse_config(penguins())
    assert config.images.cpu_image.endswith(f"/gpupipe-cpu:{__version__}")
    assert config.train_image.endswith(f"/gpupipe-gpu:{__version__}")  # penguins asks for a GPU
