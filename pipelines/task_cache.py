"""Content-keyed reuse of task outputs in local runs, as KFP's cache does on the cluster.

On the cluster KFP reuses a cached task's outputs when its cache key matches: the
component (image, command, arguments), its parameters and its input artifacts. The compiled
pipeline caches the steps whose registry entry says `cached` (pipelines/steps.py; the ones
that read the data are keyed by the fingerprint task's outputs). kfp.local
ignores caching, so a local run does the same here: before kfp.local starts one of those
tasks, the key is computed from the task's executor input (its parameters, and the
content of each input artifact), the component's
code and gpupipe's own source; when a finished task with that key is in the cache, its
outputs are copied into this run and the task does not run. A task that succeeds is stored.

The cache lives beside the runs (`<runs dir>/.cache/<function>/<key>/`); `gpupipe run
--no-cache` reuses nothing (and stores what it runs). `gpupipe resume RUN_DIR` runs a run
again with its own config and parameters: what finished is reused, the rest runs.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from components.contracts.compat.kfp import FUNCTION_FLAG, INPUT_FLAG, executor_argument
from pipelines import steps

HIT = "gpupipe-cache: reused"  # the line a reused task prints (pipelines/local_run.py reads it)
_OUTPUT_FILE = "executor_output.json"
ROOT = Path(__file__).resolve().parents[1]


def cached() -> set:
    """The functions whose tasks are reused: the steps cached as the compiled pipeline caches them."""
    return {step.name for step in steps.registered() if step.cached}


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """gpupipe's own code (components/ and pipelines/, without tests): a change to a step's
    logic is a new key even before it is committed."""
    digest = hashlib.sha256()
    for package in ("components", "pipelines"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.name.startswith("test_"):
                digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def content_digest(path: str) -> str:
    """A file's or a directory's content: relative names and bytes, in a sorted walk."""
    digest = hashlib.sha256()
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for file in files:
        digest.update(str(file.relative_to(root) if file != root else "").encode() + b"\0")
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _key(parts: dict) -> str:
    """The task's key: its key_parts, hashed."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def key_parts(command: List[str]) -> Optional[dict]:
    """What the key is made of (kept with each entry, to tell why a task was not reused)."""
    function = executor_argument(command, FUNCTION_FLAG)
    if function not in cached():
        return None
    executor_input = json.loads(executor_argument(command, INPUT_FLAG))
    inputs = executor_input.get("inputs", {})
    artifacts = {name: [content_digest(a["uri"]) for a in value.get("artifacts", [])]
                 for name, value in sorted(inputs.get("artifacts", {}).items())}
    code = next((part for part in command if f"def {function}(" in part), "")
    return {"function": function, "component": hashlib.sha256(code.encode()).hexdigest(), "gpupipe": source_digest(),
            "parameters": inputs.get("parameterValues", {}), "artifacts": artifacts,
            "outputs": sorted(executor_input.get("outputs", {}).get("artifacts", {}))}


def _task_root(command: List[str]) -> Path:
    return Path(json.loads(executor_argument(command, INPUT_FLAG))["outputs"]["outputFile"]).parent


def _copy_tree(source: Path, target: Path) -> None:
    """Hard links where the file system allows (outputs never change once written)."""
    def link(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link, dirs_exist_ok=True)


class TaskCache:
    def __init__(self, root: str, reuse: bool = True):
        self.root = Path(root)
        self.reuse = reuse

    def entry(self, command: List[str], key: str) -> Path:
        return self.root / executor_argument(command, FUNCTION_FLAG) / key

    def restore(self, command: List[str], parts: Optional[dict]) -> Optional[dict]:
        """Copies a cached task's outputs into this task's folder (`parts`: its key_parts);
        their record, or None."""
        entry = self.entry(command, _key(parts)) if parts and self.reuse else None
        if entry is None or not (entry / "meta.json").is_file():
            return None
        meta = json.loads((entry / "meta.json").read_text())
        target = _task_root(command)
        _copy_tree(entry / "task", target)
        output = target / _OUTPUT_FILE
        output.unlink(missing_ok=True)  # a link to the cache's copy: written anew
        output.write_text((entry / "task" / _OUTPUT_FILE).read_text().replace(meta["task_root"], str(target)))
        return meta

    def store(self, command: List[str], parts: Optional[dict], seconds: float) -> None:
        if not parts:
            return
        key = _key(parts)
        entry = self.entry(command, key)
        source = _task_root(command)
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=entry.parent))
        try:
            _copy_tree(source, staging / "task")
            (staging / "meta.json").write_text(json.dumps({"task_root": str(source), "seconds": round(seconds, 2),
                                                           "stored_at": time.time(), "key": parts}, indent=1))
            with contextlib.suppress(OSError):  # another run stored the same key first: keep theirs
                os.rename(staging, entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def caching_tasks(cache: Optional[TaskCache]):
    """For a kfp.local run: its tasks go through the cache, a subclass of kfp.local's handler
    that restores or stores around the same run() (components/contracts/compat/kfp.py)."""
    if cache is None:
        yield
        return
    from kfp.local import status

    from components.contracts.compat import kfp_local_subprocess_handler, kfp_local_task_handler

    class CachingTaskHandler(kfp_local_subprocess_handler()):
        def run(self):
            parts = key_parts(self.full_command)  # the inputs hashed once, before the task may run
            meta = cache.restore(self.full_command, parts)
            if meta is not None:
                function = executor_argument(self.full_command, FUNCTION_FLAG)
                print(f"{HIT} {function}: outputs of an earlier run with the same inputs "
                      f"(saved {meta['seconds']:.1f}s)", flush=True)
                return status.Status.SUCCESS
            start = time.monotonic()
            result = super().run()
            if result == status.Status.SUCCESS:
                cache.store(self.full_command, parts, time.monotonic() - start)
            return result

    with kfp_local_task_handler(CachingTaskHandler):
        yield


def saved_seconds(line: str) -> Dict[str, float]:
    """{function: seconds} from a reused task's line."""
    body = line.split(HIT, 1)[1].strip()
    function = body.split(":", 1)[0]
    return {function: float(body.rsplit("(saved ", 1)[1].rstrip("s)"))}
