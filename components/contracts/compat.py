"""Where gpupipe reaches into a pinned library beyond its public API: every such workaround
lives here, says the version it was read and measured on (MEASURED_ON), and is applied only
where it is needed, for as long as it is needed (context managers, never at import).
tests/test_compat.py fails when an installed version differs from MEASURED_ON, and checks
that each workaround's hook still exists, so a moved pin is read again before it ships.

- `kfp_setters_without_source`: kfp's resource setters name their caller through
  `inspect.stack()`, which reads source lines (seconds per compile in a process that imported
  TensorFlow);
- `kfp_local_task_handler`: kfp.local's SubprocessRunner runs each task through
  `subprocess_task_handler.SubprocessTaskHandler`, looked up when the task starts; the local
  task cache and the image test put their handler there for a run;
- `patched_attribute`, `patched_environ`: set a module attribute or environment variables
  for the duration of a block and put them back (what the warm task start needs of sys and
  os.environ), without unittest in product code.

The training step's own workarounds (TensorFlow's autograph conversion rules, tf_keras's
private optimizer and saving names) are still in components/train/runtime.py and
accumulation.py, measured on the same pins below.
"""
from __future__ import annotations

import contextlib
import inspect
import os
from typing import Dict, Iterator

# The versions each workaround here was read and measured on (requirements.lock).
MEASURED_ON = {"kfp": "2.13.0", "tensorflow": "2.16.2", "tf-keras": "2.16.0"}


@contextlib.contextmanager
def patched_attribute(owner: object, name: str, value: object) -> Iterator[None]:
    missing = object()
    before = getattr(owner, name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


@contextlib.contextmanager
def patched_environ(values: Dict[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _CallerNamesWithoutSource:
    """kfp 2.13's PipelineTask checks every resource setter (set_cpu_request, set_memory_limit,
    ...) with `inspect.stack()[1][3]`, the caller's name for an error message. `inspect.stack()`
    reads each frame's source lines, which looks each frame up among all loaded modules: in a
    process that imported TensorFlow (a test worker, a notebook) compiling one pipeline took
    about 4 s, 12.3 s of 15 s for three compiles under cProfile. The same frames without source
    lines (`inspect.stack(0)`) give the same name."""

    def __getattr__(self, name):
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1):
        return inspect.stack(0)


def kfp_setters_without_source():
    """For building a pipeline: kfp.dsl.pipeline_task's `inspect` is one whose stack() reads
    no source lines (kfp/dsl/pipeline_task.py, `_validate_*` of the resource setters)."""
    from kfp.dsl import pipeline_task

    return patched_attribute(pipeline_task, "inspect", _CallerNamesWithoutSource())


def kfp_local_task_handler(handler: type):
    """For a kfp.local run: its SubprocessRunner's tasks go through `handler` (a subclass of,
    or stand-in for, kfp.local.subprocess_task_handler.SubprocessTaskHandler: kfp 2.13's
    kfp/local/task_dispatcher.py reads that name when each task starts)."""
    from kfp.local import subprocess_task_handler

    return patched_attribute(subprocess_task_handler, "SubprocessTaskHandler", handler)


def kfp_local_subprocess_handler() -> type:
    from kfp.local import subprocess_task_handler

    return subprocess_task_handler.SubprocessTaskHandler
