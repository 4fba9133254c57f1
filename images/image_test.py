"""`./dev image-test`: the built images as a cluster runs them.

    python images/image_test.py --cpu REF --gpu REF

1. Both images run as uid 10001; the CPU image has no compiler; both have the same Python.
2. The GPU image imports tf_keras and TensorFlow and reports no GPU (there is none here).
3. The compiled penguins pipeline, the YAML file `gpupipe compile` writes, runs with every
   task in a container of the CPU image: kfp.local walks the DAG, and each task runs as its pod
   would (PodTaskHandler). Data and serving base are in a bucket of the GCS emulator (a real GCS
   JSON API server on loopback, the test fixture tests/fixtures/gcs.py). A whole version must
   land in the bucket, each task's working directory must stay empty, and the train task must
   take its linear start from the process it starts beside it (components/train/linear_fit.py).

Prints one line per check and the pushed version; exits 1 with an `error:` line on a failure.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from components.contracts.names import IMAGE_DIGEST_ENV  # noqa: E402
def _engine() -> str:
    """The engine images/build.sh built with: docker with a running daemon, else podman."""
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        return "docker"
    return "podman"


ENGINE = os.environ.get("GPUPIPE_ENGINE") or _engine()
UID = "10001"
WORKDIR = "/home/gpupipe/work"  # each task's working directory: an empty host folder, checked after


class CheckFailed(Exception):
    pass


def container(image: str, *command: str, entrypoint: str = "") -> str:
    args = [ENGINE, "run", "--rm", "--network", "none"]
    if entrypoint:
        args += ["--entrypoint", entrypoint]
    done = subprocess.run(args + [image, *command], capture_output=True, text=True)
    if done.returncode != 0:
        raise CheckFailed(f"{image}: {' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout.strip()


def check_images(cpu: str, gpu: str) -> None:
    for image in (cpu, gpu):
        uid = container(image, "-u", entrypoint="id")
        if uid != UID:
            raise CheckFailed(f"{image} runs as uid {uid}, not {UID}")
    compilers = container(cpu, "-c", "for c in cc gcc g++ c++ clang; do command -v $c; done; true", entrypoint="sh")
    if compilers:
        raise CheckFailed(f"{cpu} holds a compiler: {compilers.split()}")
    versions = {image: container(image, "-c", "import platform; print(platform.python_version())",
                                 entrypoint="python") for image in (cpu, gpu)}
    if len(set(versions.values())) != 1:
        raise CheckFailed(f"the images' Pythons differ: {versions}")
    print(f"ok: both images run as uid {UID}, Python {versions[cpu]}; no compiler in the CPU image")
    found = container(gpu, "-c", "import tf_keras, tensorflow as tf; "
                      "print(tf.__version__, tf_keras.__version__, len(tf.config.list_physical_devices('GPU')))",
                      entrypoint="python")
    tf_version, keras_version, gpus = found.split()[-3:]
    if gpus != "0":
        raise CheckFailed(f"{gpu} reports {gpus} GPU(s) on a machine with none")
    print(f"ok: the GPU image imports TensorFlow {tf_version} and tf_keras {keras_version}; GPUs found: {gpus}")


def digest(image: str) -> str:
    return subprocess.run([ENGINE, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                          text=True, check=True).stdout.strip()


def writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o777 if path.is_dir() else path.stat().st_mode | 0o666)


def executor_env(compiled: dict) -> Dict[str, List[dict]]:
    """Each executor's `env`, by the function it runs (`--function_to_execute NAME`)."""
    found = {}
    for executor in compiled["deploymentSpec"]["executors"].values():
        c = executor["container"]
        found[c["args"][c["args"].index("--function_to_execute") + 1]] = c.get("env", [])
    return found


def pod_task_handler(compiled: dict, pod_dirs: List[Path], host_env: Dict[str, str], logs: Path):
    """FIXTURE, a task handler for kfp.local that runs each task as its pod would: a new
    container of the image the task names, its ENTRYPOINT replaced by the compiled `command`
    (as Kubernetes' `command` does) followed by `args`, the executor's env from the compiled
    YAML, the image's user, a read-only root filesystem with an emptyDir-like /tmp, an empty
    working directory, and nothing from the host but the pipeline root (kfp.local keeps
    artifacts there; on a cluster the KFP launcher moves them to the pipeline root) and
    `host_env`, which stands in for the cluster's storage credentials."""
    from kfp.local import status, task_handler_interface

    env_by_function = executor_env(compiled)

    class PodTaskHandler(task_handler_interface.ITaskHandler):
        def __init__(self, image, full_command, pipeline_root, runner):
            self.image, self.full_command, self.pipeline_root = image, full_command, pipeline_root

        def run(self):
            function = self.full_command[self.full_command.index("--function_to_execute") + 1]
            pod = Path(tempfile.mkdtemp(prefix=f"pod-{function}-", dir=logs))
            pod.chmod(0o777)
            pod_dirs.append(pod)
            env = {e["name"]: e["value"] for e in env_by_function[function]} | host_env
            env[IMAGE_DIGEST_ENV] = digest(self.image)  # what a runtime that knows it passes
            writable(Path(self.pipeline_root))  # the image's user writes its outputs beside kfp.local's files
            args = [ENGINE, "run", "--rm", "--network", "host", "--read-only", "--tmpfs", "/tmp:rw,mode=1777",
                    "-v", f"{self.pipeline_root}:{self.pipeline_root}:rw", "-v", f"{pod}:{WORKDIR}:rw",
                    "-w", WORKDIR, "--entrypoint", self.full_command[0]]
            for name, value in env.items():
                args += ["-e", f"{name}={value}"]
            start = time.monotonic()
            with open(pod.parent / f"{pod.name}.log", "w") as log:
                code = subprocess.run(args + [self.image, *self.full_command[1:]], stdout=log,
                                      stderr=subprocess.STDOUT).returncode
            lines = (pod.parent / f"{pod.name}.log").read_text(errors="replace").splitlines()
            print(f"  task {function}: exit {code} in {time.monotonic() - start:.1f} s ({len(lines)} log lines)")
            if code != 0:
                print("\n".join(f"    | {line}" for line in lines[-40:]))
            return status.Status.SUCCESS if code == 0 else status.Status.FAILURE

    return PodTaskHandler


@contextlib.contextmanager
def quiet_kfp_local():
    """kfp.local logs each task's inputs and outputs, and the emulator each request, at INFO on
    the root logger (kfp.local resets its level and handlers per task, not its filters); the
    pod handler prints one line a task instead."""
    import logging

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def tasks_in_pods(handler):
    """For the run, kfp.local's SubprocessRunner runs its tasks through the pod handler
    (components/contracts/compat/kfp.py)."""
    from components.contracts.compat import kfp_local_task_handler

    return kfp_local_task_handler(handler)


def run_compiled_pipeline(cpu: str, gpu: str, work: Path) -> str:
    from kfp import components, local
    from kfp.local import pipeline_orchestrator

    from components.contracts import storage
    from tests.fixtures.gcs import gcs_emulator

    import pytest

    env = pytest.MonkeyPatch()  # what gcs_emulator sets (its interface), undone at the end
    try:
        with gcs_emulator(env) as bucket:
            root = f"gs://{bucket}"
            storage.upload_file(str(ROOT / "data" / "penguins.csv"), f"{root}/data/penguins.csv")
            raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
            raw["name"] = "penguins-images"
            raw["images"] = {"cpu": cpu, "gpu": gpu}
            raw["training"]["pods"].update(gpus=0, accelerator=None)  # the train task in the CPU image too (no GPU here)
            raw["training"]["linear_start_process_rows"] = 0  # the linear start's own process, for penguins' 279 rows too
            raw["cluster"].update(data_source=f"{root}/data/penguins.csv", serving_base=f"{root}/serving")
            # the emulator takes anonymous requests
            raw.get("storage", {}).get("gcs", {}).pop("credentials_secret", None)
            raw.pop("pipeline_root", None)  # kfp.local keeps artifacts on local disk
            config = work / "penguins-images.yaml"
            config.write_text(yaml.safe_dump(raw))
            done = subprocess.run([sys.executable, "-m", "pipelines.cli", "compile", str(config), "--output-dir",
                                   str(work / "compiled")], cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                raise CheckFailed(f"compile: {done.stderr.strip()}")
            compiled_file = work / "compiled" / "penguins-images.yaml"
            compiled = next(yaml.safe_load_all(compiled_file.read_text()))
            images = {e["container"]["image"] for e in compiled["deploymentSpec"]["executors"].values()}
            if images != {cpu}:
                raise CheckFailed(f"the compiled tasks name {sorted(images)}, not only {cpu}")

            artifacts = work / "artifacts"
            artifacts.mkdir()
            pods: List[Path] = []
            host_env = {"STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"]}
            pipeline = components.load_component_from_file(str(compiled_file))
            local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(artifacts))
            start = time.monotonic()
            with tasks_in_pods(pod_task_handler(compiled, pods, host_env, work)), quiet_kfp_local():
                try:
                    pipeline_orchestrator.run_local_pipeline(pipeline_spec=pipeline.pipeline_spec, arguments={})
                except RuntimeError as e:  # kfp.local's word for a failed task (its log is above)
                    raise CheckFailed(f"the compiled pipeline failed in the containers: {e}") from None
            seconds = time.monotonic() - start

            written = {str(p): os.listdir(p) for p in pods if os.listdir(p)}
            if written:
                raise CheckFailed(f"tasks wrote into their working directory: {written}")
            # the linear start's own process (components/train/linear_fit.py) ran in the image,
            # under its read-only root, and the task took its fit
            train_log = "".join(p.with_name(p.name + ".log").read_text(errors="replace")
                                for p in pods if p.name.startswith("pod-train-"))
            if "in a process of its own" not in train_log:
                raise CheckFailed("the train task fitted its linear start itself: the process beside it did not "
                                  "give it (its log: 'linear start: fitted here (...)')")
            objects = sorted(e.uri for e in storage.list_prefix(f"{root}/serving"))
            version = f"{root}/serving/penguins/1"
            needed = [f"{version}/saved_model.pb", f"{root}/serving/models.config"]
            missing = [n for n in needed if n not in objects]
            if missing or not any(o.startswith(f"{version}/variables/") for o in objects):
                raise CheckFailed(f"no whole version in the bucket: missing {missing or 'variables/'}; "
                                  f"found {objects[:10]}")
            lineage = json.loads(storage.read_bytes(f"{version}/assets.extra/gpupipe/model.json") or b"{}")
            print(f"ok: the compiled pipeline ran {len(pods)} tasks, each in a container of {cpu}, "
                  f"in {seconds:.0f} s; no task wrote into its working directory")
            return (f"pushed version 1: {version} ({sum(o.startswith(version + '/') for o in objects)} objects"
                    + f"; its lineage: image {lineage.get('image')}, built as {lineage.get('image_built')}, "
                    f"{lineage.get('image_digest')})")
    finally:
        env.undo()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", required=True, help="the CPU image's reference")
    parser.add_argument("--gpu", required=True, help="the GPU image's reference")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpupipe-image-test-"))
    try:
        check_images(args.cpu, args.gpu)
        print(run_compiled_pipeline(args.cpu, args.gpu, work))
        return 0
    except CheckFailed as e:
        print(f"error: image test: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
