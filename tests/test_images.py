"""The Dockerfiles, their locks and the image tags, read as files. `./dev image-test` builds the
images and runs the compiled pipeline in them (images/image_test.py); these are the rules that
hold between builds: pinned bases, a hash-checked lock, the compiler only in the builder stage,
one Python for both images, and tags that carry the commit."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.version import image_tag

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((ROOT / "images").glob("*/Dockerfile"))


def instructions(path: Path):
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def stages(path: Path):
    """[(FROM line, [its instructions])], in order; the last is the image."""
    found = []
    for line in instructions(path):
        if line.startswith("FROM "):
            found.append((line, []))
        elif found:
            found[-1][1].append(line)
    return found


def global_args(path: Path):
    lines = instructions(path)
    first_from = next(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return dict(re.match(r"ARG (\w+)=(\S+)", line).groups() for line in lines[:first_from] if re.match(r"ARG \w+=", line))


def test_there_is_a_cpu_and_a_gpu_image():
    assert {p.parent.name for p in DOCKERFILES} == {"cpu", "gpu"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_base_is_pinned_and_given_by_a_build_arg(dockerfile):
    """Nothing depends on the local base but the build args' values (`--local-base` sets them)."""
    args = global_args(dockerfile)
    names = set()
    for line, _ in stages(dockerfile):
        ref, *alias = line.split()[1:]
        if alias:
            names.add(alias[-1])
        assert re.fullmatch(r"\$\{\w+\}", ref), f"{line}: a base is a build arg, so a local one can stand in"
        base = args[ref[2:-1]]
        tag = base.split("@")[0].rpartition(":")[2]
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), base
    assert args["BASE"] == "python:3.11.7-slim-bookworm"


def test_both_images_share_one_base_and_so_one_python():
    assert {global_args(p)["BASE"] for p in DOCKERFILES} == {"python:3.11.7-slim-bookworm"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_the_builder_installs_the_lock_hash_checked_and_the_image_has_no_compiler(dockerfile):
    (_, builder), (final_from, final) = [s for s in stages(dockerfile) if " AS beam-sdk" not in s[0]]
    lock = {"cpu": "requirements-cpu.lock", "gpu": "requirements-gpu.lock"}[dockerfile.parent.name]
    assert f"COPY {lock} /tmp/requirements.lock" in builder
    pips = [line for line in builder if "pip install" in line]
    assert any("--require-hashes --no-deps -r /tmp/requirements.lock" in line for line in pips)
    assert all("--no-deps" in line for line in pips) and not any(re.search(r"(-U|--upgrade)\b", line) for line in pips)
    assert any("apt-get install" in line and "g++" in line for line in builder)
    assert final_from == "FROM ${BASE}"
    assert not any("apt-get" in line or "pip install" in line for line in final), "the image installs nothing itself"
    assert "COPY --from=builder /opt/venv /opt/venv" in final
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users == ["10001"] and any("useradd --create-home --uid 10001" in line for line in final)
    env = " ".join(line for line in final if line.startswith("ENV"))
    assert "TF_USE_LEGACY_KERAS=1" in env and "PATH=/opt/venv/bin:" in env
    # the tag, last: a new commit rebuilds no layer above it
    assert final[-2:] == ["ARG IMAGE_TAG=unknown", "ENV GPUPIPE_IMAGE_TAG=${IMAGE_TAG}"]


def test_the_gpu_image_puts_the_cuda_wheels_on_the_loader_path():
    final = stages(ROOT / "images" / "gpu" / "Dockerfile")[-1][1]
    env = " ".join(line for line in final if line.startswith("ENV"))
    lock = (ROOT / "requirements-gpu.lock").read_text()
    # each NVIDIA library wheel of the lock (but nvcc's, which brings ptxas) has its folder on the path
    wheels = re.findall(r"^nvidia-([a-z\-]+?)-cu12==", lock, re.M)
    folders = set(re.findall(r"\$\{NV\}/(\w+)/lib", env))
    assert {w.replace("-", "_") for w in wheels} - {"cuda_nvcc"} == folders
    assert "${NV}/cuda_nvcc/bin" in env and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it; "all" would expose every GPU


def test_the_cpu_image_lock_is_the_lock_with_tensorflow_cpu_and_without_the_test_tools():
    spec = importlib.util.spec_from_file_location("cpu_lock", ROOT / "images" / "cpu_lock.py")
    cpu_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu_lock)
    lock = (ROOT / "requirements-hashed.lock").read_text()
    committed = (ROOT / "requirements-cpu.lock").read_text()
    tf_cpu = cpu_lock.entries(committed)["tensorflow-cpu"].group(0)
    hashes = re.findall(r"sha256:([0-9a-f]{64})", tf_cpu)
    assert hashes and committed == cpu_lock.cpu_lock(lock, hashes), "stale: run python images/cpu_lock.py"
    pins = lambda text: dict(re.findall(r"^([a-z0-9][a-z0-9._\-]*)==(\S+) ", text, re.M))  # noqa: E731
    full, cpu = pins(lock), pins(committed)
    assert cpu["tensorflow-cpu"] == full["tensorflow"] and "tensorflow" not in cpu
    assert {"pytest", "moto", "kubernetes-validate", "gcp-storage-emulator"}.isdisjoint(cpu)
    assert {"tensorflow-data-validation", "apache-beam", "kfp", "boto3", "google-cloud-storage"} <= set(cpu)
    assert all(full[name] == version for name, version in cpu.items() if name != "tensorflow-cpu")


def test_the_constraints_lock_is_the_hashed_lock_without_its_hashes():
    """requirements.lock (`pip install -c requirements.lock .`) pins what requirements-hashed.lock
    (./dev setup, the CI) pins, name for name and version for version, and carries no hash."""
    spec = importlib.util.spec_from_file_location("cpu_lock", ROOT / "images" / "cpu_lock.py")
    cpu_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu_lock)
    hashed, plain = (ROOT / "requirements-hashed.lock").read_text(), (ROOT / "requirements.lock").read_text()
    assert plain == cpu_lock.unhashed(hashed), "stale: run python images/cpu_lock.py"
    pins = lambda text: set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._\-]*==\S+)", text, re.M))  # noqa: E731
    assert len(pins(hashed)) > 200 and pins(plain) == pins(hashed)
    assert "--hash" not in plain and hashed.count("--hash=sha256:") >= len(pins(hashed))


def test_gpu_lock_agrees_with_the_cpu_lock():
    def pins(name):
        return dict(re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)", (ROOT / name).read_text(), re.M))

    full, cpu_image, gpu = pins("requirements-hashed.lock"), pins("requirements-cpu.lock"), pins("requirements-gpu.lock")
    # the GPU image holds what the CPU image holds (tensorflow for tensorflow-cpu), at the same pins
    assert {k: v for k, v in cpu_image.items() if k != "tensorflow-cpu" and gpu.get(k) != v} == {}
    assert gpu["tensorflow"] == cpu_image["tensorflow-cpu"] == full["tensorflow"]
    assert gpu["nvidia-cudnn-cu12"].startswith("8.9")  # TF 2.16's cuDNN


def test_the_gpu_image_lock_has_no_test_tools():
    spec = importlib.util.spec_from_file_location("cpu_lock", ROOT / "images" / "cpu_lock.py")
    cpu_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu_lock)
    gpu = (ROOT / "requirements-gpu.lock").read_text()
    assert cpu_lock.dropped(gpu) == set(), "run python images/cpu_lock.py"
    assert {"pytest", "moto", "mkdocs", "lightgbm", "statsmodels"}.isdisjoint(cpu_lock.entries(gpu))


@pytest.mark.parametrize("compiled", sorted((ROOT / "pipelines" / "compiled").glob("*.yaml")), ids=lambda p: p.name)
def test_compiled_images_carry_the_commit_of_what_the_images_hold(compiled):
    spec = next(yaml.safe_load_all(compiled.read_text()))
    images = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()}
    assert images
    for image in images:
        assert re.search(r"/gpupipe-(cpu|gpu):" + re.escape(image_tag()) + "$", image), image
    assert re.fullmatch(r"\d+\.\d+\.\d+-[0-9a-f]{12}", image_tag())


def test_the_cpu_image_can_be_the_beam_workers_sdk_container():
    """data.engine: beam on a remote runner runs gpupipe's code in the workers: the CPU image
    carries Beam's boot program of the locked Beam version and the base image's Python."""
    dockerfile = ROOT / "images" / "cpu" / "Dockerfile"
    beam = re.search(r"^apache-beam(?:\[[^\]]*\])?==(\S+)", (ROOT / "requirements-hashed.lock").read_text(), re.M).group(1)
    args = global_args(dockerfile)
    python = re.match(r"python:(\d+\.\d+)\.", args["BASE"]).group(1)
    assert args["BEAM_SDK"] == f"apache/beam_python{python}_sdk:{beam}"
    assert "FROM ${BEAM_SDK} AS beam-sdk" in instructions(dockerfile)
    final = stages(dockerfile)[-1][1]
    assert "COPY --from=beam-sdk /opt/apache/beam /opt/apache/beam" in final
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in final


def test_dev_images_builds_with_the_tag_from_pipelines_version():
    dev, build = (ROOT / "dev").read_text(), (ROOT / "images" / "build.sh").read_text()
    assert "images/build.sh" in dev
    assert '-m pipelines.version)' in build and 'gpupipe-$target:$TAG' in build
    for engine in ("docker", "podman", "buildah"):
        assert f"ENGINE={engine}" in build


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_tag_moves_with_what_the_images_hold_and_compile_names_it_on_a_dirty_tree(tmp_path):
    """A clone: a commit to docs keeps the tag, one to a step moves it; compiled from a tree with
    uncommitted changes to a step, the pipeline names the last commit's tag and says so."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    _git(clone, "config", "user.email", "t@example.com")
    _git(clone, "config", "user.name", "t")
    env = {k: v for k, v in os.environ.items() if k != "GPUPIPE_IMAGE_TAG"}
    env["PYTHONPATH"] = str(clone)

    def tag():
        return subprocess.run([sys.executable, "-m", "pipelines.version"], cwd=clone, env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    before = tag()
    (clone / "docs" / "note.md").write_text("a page\n")
    _git(clone, "add", "docs/note.md")
    _git(clone, "commit", "--quiet", "-m", "docs only")
    assert tag() == before
    with open(clone / "components" / "contracts" / "names.py", "a") as f:
        f.write("# a change the images hold\n")
    _git(clone, "commit", "--quiet", "-am", "a step changes")
    moved = tag()
    assert moved != before and moved.endswith(_git(clone, "rev-parse", "--short=12", "HEAD"))

    with open(clone / "components" / "contracts" / "names.py", "a") as f:
        f.write("# uncommitted\n")
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "compile", "configs/penguins.yaml", "--output-dir",
                           str(tmp_path / "out")], cwd=clone, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"gpupipe-cpu:{moved}" in (tmp_path / "out" / "penguins.yaml").read_text()
    warning = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "components/contracts/names.py" in warning[0] and f"gpupipe-cpu:{moved}" in warning[0]


def _podman_history(stage_instructions):
    """A stage's history as podman/buildah record it (read off the built images: an ENV or ARG
    is `#(nop) ENV ...`, a COPY of a folder `#(nop) COPY dir:<hash> in <destination>`)."""
    lines = []
    for instruction in stage_instructions:
        keyword, _, rest = instruction.partition(" ")
        if keyword == "COPY":
            lines.append(f"/bin/sh -c #(nop) COPY dir:0123abcd in {rest.split()[-1]} ")
        elif keyword == "RUN":
            lines.append(f"/bin/sh -c {rest}")
        else:
            lines.append(f"/bin/sh -c #(nop) {instruction}")
    return lines


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_image_test_prunes_earlier_final_stages_and_keeps_the_builder_cache(dockerfile):
    """`./dev image-test` removes the final-stage images of earlier builds (each a venv layer of
    2.6 or 6.4 GB of its own; CI once ran out of disk on the GPU image), and must not take the
    builder stages, whose cached lock installs make the next build minutes instead of tens."""
    spec = importlib.util.spec_from_file_location("prune", ROOT / "images" / "prune.py")
    prune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prune)
    *builders, (_, final) = stages(dockerfile)
    assert prune.is_final_stage(_podman_history(final))
    for _, builder in builders:
        assert not prune.is_final_stage(_podman_history(builder))
    assert "--prune" in (ROOT / "dev").read_text().split("image_test()", 1)[1].split("\n}\n", 1)[0]
