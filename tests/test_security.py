"""Secrets reach tasks only by reference; no compiled pipeline carries anything that looks
like a key or a token; names cannot escape the serving base."""
import re
from pathlib import Path

import pytest
import yaml

from components.contracts.errors import GpupipeError
from pipelines.cli import compile_to_text
from pipelines.config import load_config, parse_config

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "GCP service-account key": re.compile(r'"private_key(_id)?"\s*:'),
    "AWS access key": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    "bearer token": re.compile(r"\b[Bb]earer\s+[A-Za-z0-9\-._~+/]{20,}"),
    "JWT": re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    "secret-ish assignment": re.compile(r"(?i)(password|passwd|secret|token|api_key)\s*[:=]\s*['\"]?[A-Za-z0-9/+]{16,}"),
}


def scan(text: str):
    return [name for name, pattern in SECRET_PATTERNS.items() if pattern.search(text)]


def test_the_scanner_catches_what_it_claims_to():
    assert scan('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMII"}') == ["private key", "GCP service-account key"]
    assert scan("token: abcdefghijklmnopqrstuvwxyz123456") == ["secret-ish assignment"]
    assert scan("AKIAABCDEFGHIJKLMNOP") == ["AWS access key"]


@pytest.mark.parametrize("config_path", CONFIGS, ids=lambda p: p.name)
def test_compiled_pipelines_hold_no_secrets(config_path):
    assert scan(compile_to_text(load_config(config_path))) == []
    assert scan(config_path.read_text()) == []


def test_secrets_are_kubernetes_references():
    config = load_config(ROOT / "configs" / "penguins.yaml")
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    executors = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in ("exec-ingest", "exec-validate", "exec-train", "exec-evaluate", "exec-push"):
        volumes = executors[name]["secretAsVolume"]
        assert volumes[0]["secretName"] == config.storage.gcs.credentials_secret
        assert executors[name]["imagePullSecret"][0]["secretName"] == "gpupipe-registry"
        env = docs[0]["deploymentSpec"]["executors"][name]["container"]["env"]
        assert {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/secrets/gcs/key.json"} in env


@pytest.mark.parametrize("section, key, value, message", [
    ("serving", "model_name", "../other", "is not a plain name"),
    ("serving", "model_name", "/etc/passwd", "is not a plain name"),
    ("serving", "model_name", "a/b", "is not a plain name"),
    (None, "name", "../x", "is not a plain name"),
    ("images", "cpu", "ghcr.io/x/gpupipe-cpu:latest", "is not pinned"),
    ("images", "cpu", "ghcr.io/x/gpupipe-cpu", "is not pinned"),
    ("storage.gcs", "credentials_secret", "-----BEGIN PRIVATE KEY-----", "is not a Kubernetes Secret name"),
])
def test_config_rejects_escaping_names_unpinned_images_and_inline_secrets(section, key, value, message):
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    node = raw
    for part in section.split(".") if section else ():
        node = node.setdefault(part, {})
    node[key] = value
    with pytest.raises(GpupipeError, match=message):
        parse_config(raw)


def test_digest_pinned_images_are_accepted():
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["images"] = {"cpu": "ghcr.io/x/gpupipe-cpu@sha256:" + "a" * 64}
    assert parse_config(raw).images.cpu_image.endswith("a" * 64)
