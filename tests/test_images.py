"""Dockerfiles: pinned bases, installs from the hash lock, non-root; compiled YAML uses
the images tagged with the package version. (No Docker engine runs here, so the
images are checked as files; `make images` builds them where Docker is.)"""
import re
from pathlib import Path

import pytest
import yaml

from pipelines.version import __version__

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "images").glob("*/Dockerfile"))


def instructions(path: Path):
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_there_is_a_cpu_and_a_gpu_image():
    assert {p.parent.name for p in DOCKERFILES} == {"cpu", "gpu"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_base_image_is_pinned(dockerfile):
    lines = instructions(dockerfile)
    args = dict(re.match(r"ARG (\w+)=(\S+)", line).groups() for line in lines if re.match(r"ARG \w+=", line))
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert len(froms) == 1
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], froms[0])
    name, _, tag = base.rpartition("@")[0].partition(":") if "@sha256:" in base else base.partition(":")
    assert tag and tag != "latest" and re.search(r"\d+\.\d+", tag), base


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_installs_from_the_lock_with_hashes_and_runs_as_non_root(dockerfile):
    lines = instructions(dockerfile)
    pip_lines = [line for line in lines if "pip install" in line]
    lock_install = [line for line in pip_lines if "-r requirements" in line]
    assert lock_install and all("--require-hashes" in line and "--no-deps" in line for line in lock_install)
    assert all("--no-deps" in line for line in pip_lines)  # nothing resolved outside the lock
    assert not any(re.search(r"pip install (-U|--upgrade)", line) for line in pip_lines)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any("TF_USE_LEGACY_KERAS=1" in line for line in lines if line.startswith("ENV"))


def test_gpu_lock_agrees_with_the_cpu_lock():
    def pins(name):
        return dict(re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)", (ROOT / name).read_text(), re.M))

    cpu, gpu = pins("requirements.lock"), pins("requirements-gpu.lock")
    assert {k: v for k, v in cpu.items() if gpu.get(k) != v} == {}
    assert gpu["nvidia-cudnn-cu12"].startswith("8.9")  # TF 2.16's cuDNN


@pytest.mark.parametrize("compiled", sorted((ROOT / "pipelines" / "compiled").glob("*.yaml")), ids=lambda p: p.name)
def test_compiled_images_match_the_package_version(compiled):
    spec = next(yaml.safe_load_all(compiled.read_text()))
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images
    for image in images:
        assert not image.endswith(":latest")
        if "@sha256:" not in image:
            assert re.search(r"/gpupipe-(cpu|gpu):" + re.escape(__version__) + "$", image), image


def test_image_build_tags_come_from_the_package_version():
    dev = (ROOT / "dev").read_text()
    assert "pipelines/version.py" in dev and "gpupipe-cpu:$VERSION" in dev and "gpupipe-gpu:$VERSION" in dev


def test_the_cpu_image_can_be_the_beam_workers_sdk_container():
    """data.engine: beam on a remote runner runs gpupipe's code in the workers: the CPU image
    carries Beam's boot program of the locked Beam version and the base image's Python."""
    lines = instructions(ROOT / "images" / "cpu" / "Dockerfile")
    beam = re.search(r"^apache-beam(?:\[[^\]]*\])?==(\S+)", (ROOT / "requirements.lock").read_text(), re.M).group(1)
    python = re.search(r"ARG BASE=python:(\d+\.\d+)\.", "\n".join(lines)).group(1)
    assert f"COPY --from=apache/beam_python{python}_sdk:{beam} /opt/apache/beam /opt/apache/beam" in lines
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in lines
