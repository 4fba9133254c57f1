"""kfp 2.13.0's private names (components/contracts/compat/__init__.py, MEASURED_ON)."""
from __future__ import annotations

import inspect
import re
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

# The command every compiled task runs (kfp 2.13 kfp/dsl/component_factory.py,
# _get_command_and_args_for_lightweight_component): `_KFP_RUNTIME=true python3 -m
# kfp.dsl.executor_main --component_module_path ... --executor_input ... --function_to_execute
# NAME`. With _KFP_RUNTIME set, kfp/__init__.py and kfp/dsl/__init__.py skip their compile-time
# imports (the KFP and Kubernetes clients, about 1 s). Strings, so that importing this module
# loads no kfp.
EXECUTOR_MODULE = "kfp.dsl.executor_main"
EXECUTOR_ENV: Dict[str, str] = {"_KFP_RUNTIME": "true"}
FUNCTION_FLAG = "--function_to_execute"  # the component's function: the step's name
INPUT_FLAG = "--executor_input"  # the task's inputs and outputs (JSON)


def executor_argument(command: Sequence[str], flag: str) -> str:
    """The value after `flag` in an executor command line ("" when it has none)."""
    command = list(command)
    return command[command.index(flag) + 1] if flag in command[:-1] else ""


class _CallerNamesWithoutSource:
    """kfp 2.13's PipelineTask checks every resource setter (set_cpu_request, set_memory_limit,
    ...) with `inspect.stack()[1][3]`, the caller's name for an error message. `inspect.stack()`
    reads each frame's source lines, which looks each frame up among all loaded modules: in a
    process that imported TensorFlow (a test worker, a notebook) compiling one pipeline took
    about 4 s, 12.3 s of 15 s for three compiles under cProfile; even `inspect.stack(0)` stats
    every frame's file (about 1 s a compile under pytest). The frames' own names, read from
    the frames alone, give the same (frame, filename, lineno, function) entries."""

    def __getattr__(self, name):
        return getattr(inspect, name)

    @staticmethod
    def stack(context: int = 1):
        frame, frames = sys._getframe(1), []  # the function that called stack(), then its callers
        while frame is not None:
            frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None))
            frame = frame.f_back
        return frames


def kfp_setters_without_source():
    """For building a pipeline: kfp.dsl.pipeline_task's `inspect` is one whose stack() reads
    no source lines (kfp/dsl/pipeline_task.py, `_validate_*` of the resource setters)."""
    from kfp.dsl import pipeline_task

    from components.contracts.compat import patched_attribute

    return patched_attribute(pipeline_task, "inspect", _CallerNamesWithoutSource())


def kfp_local_task_handler(handler: type):
    """For a kfp.local run: its SubprocessRunner's tasks go through `handler` (a subclass of,
    or stand-in for, kfp.local.subprocess_task_handler.SubprocessTaskHandler: kfp 2.13's
    kfp/local/task_dispatcher.py reads that name when each task starts)."""
    from kfp.local import subprocess_task_handler

    from components.contracts.compat import patched_attribute

    return patched_attribute(subprocess_task_handler, "SubprocessTaskHandler", handler)


def kfp_local_subprocess_handler() -> type:
    from kfp.local import subprocess_task_handler

    return subprocess_task_handler.SubprocessTaskHandler


def kfp_local_task_runner(run: Callable[[List[str]], int]):
    """For a kfp.local run: each SubprocessRunner task's command runs through `run(full_command)
    -> exit code` instead of kfp's own Popen (kfp 2.13's subprocess_task_handler.run_local_subprocess,
    looked up by SubprocessTaskHandler.run for each task; `run` prints the task's output as it does)."""
    from kfp.local import subprocess_task_handler

    from components.contracts.compat import patched_attribute

    return patched_attribute(subprocess_task_handler, "run_local_subprocess", run)


def kfp_local_run_name(name: Callable[[Callable[[str], str], str], str]):
    """For a kfp.local run: its folder under the pipeline root is `name(kfp_default, pipeline_name)`
    (kfp 2.13's pipeline_orchestrator.py names it once, at the run's start, with
    executor_input_utils.get_local_pipeline_resource_name: `<pipeline>-<time to the microsecond>`)."""
    from kfp.local import executor_input_utils

    from components.contracts.compat import patched_attribute

    default = executor_input_utils.get_local_pipeline_resource_name
    return patched_attribute(executor_input_utils, "get_local_pipeline_resource_name",
                             lambda pipeline_name: name(default, pipeline_name))


# kfp.local reports each task on its log (kfp 2.13's kfp/local/task_dispatcher.py and
# pipeline_orchestrator.py, through logging_utils' colours): "Executing task 'train'" when it
# starts and "Task 'train' finished with status SUCCESS" when it ends. It has no other hook for
# a task's start and end, so `gpupipe run`'s live summary reads these lines.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK_STARTED = re.compile(r"Executing task '?([\w-]+)'?")
_TASK_FINISHED = re.compile(r"Task '?([\w-]+)'? finished with status (\w+)")


def kfp_local_task_event(line: str) -> Optional[Tuple[str, Optional[str]]]:
    """(task, None) for kfp.local's line saying a task starts, (task, status) for the one saying
    it finished; None for any other line (colours are ignored)."""
    line = _ANSI.sub("", line)
    if m := _TASK_STARTED.search(line):
        return m.group(1), None
    if m := _TASK_FINISHED.search(line):
        return m.group(1), m.group(2)
    return None


def without_colours(line: str) -> str:
    return _ANSI.sub("", line)


KFP_API_TIMEOUT = (10.0, 60.0)  # each request to the KFP API: (connect, read) seconds
KFP_API_ATTEMPTS = 3  # tries of one request, the first included


def kfp_client_with_deadlines(client, timeout: Tuple[float, float] = KFP_API_TIMEOUT,
                              attempts: int = KFP_API_ATTEMPTS):
    """`client` (a kfp 2.13 kfp.Client) with every request bounded: kfp_server_api's
    RESTClientObject sends `_request_timeout=None` unless a call passes one, which urllib3
    takes as no timeout at all (a KFP API that accepts and never answers holds the command
    for ever); and urllib3's default of 3 retries becomes `attempts` tries with backoff
    (0.5 s doubling, at most 10 s); a request that still fails is a GpupipeError, one line
    naming the KFP API's host and `--host`. Every API of the Client (runs, experiments,
    pipelines, uploads, health) shares the one ApiClient reached here through the private
    `_run_api`."""
    import urllib3

    from components.contracts.errors import GpupipeError

    rest = client._run_api.api_client.rest_client
    send = rest.request

    def request(method, url, *args, _request_timeout=None, **kwargs):
        try:
            return send(method, url, *args, _request_timeout=_request_timeout or timeout, **kwargs)
        except urllib3.exceptions.HTTPError as err:
            reason = getattr(err, "reason", None) or err
            host = "/".join(str(url).split("/")[:3])
            raise GpupipeError(f"--host {host}: the KFP API did not answer {method} within {attempts} tries of "
                               f"{timeout[0]:g} s to connect and {timeout[1]:g} s to read ({type(reason).__name__}); "
                               "check --host, the network and the KFP API server") from None

    rest.request = request
    rest.pool_manager.connection_pool_kw["retries"] = urllib3.Retry(
        total=attempts - 1, backoff_factor=0.5, backoff_max=10, raise_on_status=False)
    return client


def kfp_run_api(client):
    """kfp 2.13's kfp.Client keeps its kfp_server_api RunServiceApi private (`_run_api`), and
    has no method for a run's Retry (`run_service_retry_run`, POST /apis/v2beta1/runs/{id}:retry)
    nor for the v1beta1 run that carries the run's Argo Workflow; both go through this object
    (its ApiClient: the host, the credentials and kfp_client_with_deadlines' bounds)."""
    return client._run_api
