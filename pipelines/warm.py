"""Warm task start for local runs: every kfp.local task is a new Python process that imports
the KFP executor, its step and TensorFlow (4.8-6.8 s per step on 2 cores, docs/benchmarks.md);
a warm run pays that once.

`warm_tasks()` (used by pipelines/local_run.py around kfp.local) starts one server process,
`python -m pipelines.warm SOCKET`, which imports what the steps import (TensorFlow, tf_keras,
TFDV, Beam, scikit-learn, the storage clients, kfp's executor and every step's modules) and
then listens on a Unix socket. For the duration of the run kfp.local's `python3` is
pipelines/warm_client.py: it passes the task's command line, environment, working directory
and standard streams to the server, which forks a child that runs exactly the command
kfp.local asked for (`python -m kfp.dsl.executor_main ...`, the cluster's entry point) with
those streams, in that directory, with that environment, and reports its exit code.

What stays the same as a cold start: the task's code, its arguments, its artifacts, its
environment, its process (one per task, so a task's state dies with it) and its exit code.
What differs: the modules are already imported (TensorFlow read TF_CPP_MIN_LOG_LEVEL when
the server started; the server starts after the run set it), and the process is a fork of
the server, not of the shell. The server listens at once and imports between requests, so
a task starts with what has been imported by then (the first, fingerprint, with little; a
task arriving during TensorFlow's import waits for it instead of importing it again). A task
starts cold (a new Python) when the server cannot be reached, and every task does with
GPUPIPE_WARM_START=0 or `gpupipe run --cold`. The cluster never sees any of this: each pod
runs the compiled command itself.
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

from components.contracts.compat import patched_attribute, patched_environ
from components.contracts.compat.kfp import EXECUTOR_ENV, EXECUTOR_MODULE, FUNCTION_FLAG, executor_argument
from pipelines import steps, stopping, warm_client

WARM_ENV = "GPUPIPE_WARM_START"
SHIM_ENV = "GPUPIPE_WARM_SHIM"  # set with the client's variables: a server this environment can use
EXECUTOR = (EXECUTOR_MODULE,)  # what runs warm: the command of every compiled task


def default_preload() -> tuple:
    """What every task needs (the KFP executor, the steps' component modules): imported first."""
    return ("components", EXECUTOR_MODULE, *(step.module for step in steps.registered()))


# What a step's task needs before its work starts (its registry entry's `preload`), by the
# component's function name (kfp passes it as --function_to_execute): the server imports it
# before it forks that task, so no task imports TensorFlow while the server is importing it
# too. While a task runs, the server imports what the next two steps need (the registry's
# order), so a run that stops early (bad data at ingest) does not pay for the libraries of
# steps it never reaches.
def needs(step: str) -> tuple:
    """What `step`'s task imports before its work starts (nothing for a function not a step)."""
    return next((s.preload for s in steps.registered() if s.name == step), ())


def everything() -> tuple:
    return tuple(dict.fromkeys([*default_preload(), *(m for step in steps.registered() for m in step.preload)]))


def lookahead(step: str) -> list:
    """What the two steps after `step` need (nothing for a function not a step)."""
    order = steps.names()
    if step not in order:
        return []
    i = order.index(step)
    return [m for later in order[i + 1:i + 3] for m in needs(later)]


def enabled() -> bool:
    return os.environ.get(WARM_ENV, "1") != "0"


# -- the server -------------------------------------------------------------------------------
_orphans: set = set()  # the sockets of clients that went away while their task ran


def _run_child(inherited, fds, request: dict, server: int) -> None:
    """In the forked child: become the task kfp.local started, run it, exit with its code."""
    code = 1
    try:
        for sock in inherited:  # the server's sockets are not the task's
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        # The task's process group is its client's when that is the task's own (one group per
        # task, stopped as one: pipelines/stopping.py), else (or in another session) its own.
        try:
            os.setpgid(0, int(request.get("pgid") or 0))
        except (OSError, ValueError):
            os.setpgid(0, 0)
        stopping.die_with_parent(signal.SIGTERM, parent=server)
        if "numpy" in sys.modules:  # as a new process would: fresh entropy (random reseeds itself at fork)
            sys.modules["numpy"].random.seed()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        argv = request["argv"]  # ["-m", module, args...]
        sys.argv = [argv[1], *argv[2:]]
        import runpy

        try:
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        except BaseException:  # noqa: BLE001 (printed as Python would, then exit 1)
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _receive_request(conn: socket.socket):
    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    if len(header) < 4:
        return None, fds
    size = struct.unpack("!I", header[:4])[0]
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds


def serve(path: str, modules=None) -> None:
    """Listens at once, then imports `modules` (default_preload() unless given; and, as tasks
    arrive, what the next steps need) one module at a time; between two imports (and after
    the last) it forks one child per request, until SIGTERM. A task that arrives while a
    module is importing waits for that import, then for its own step's needs, and starts
    with all of it loaded."""
    import warnings

    warnings.simplefilter("ignore")
    children: Dict[int, socket.socket] = {}
    parent = os.getppid()

    def stop(*_) -> None:
        # At once, also in the middle of an import (TensorFlow's takes seconds): the tasks
        # still running get SIGTERM, each with its process group, and nothing else is left
        # to finish. SIGTERM comes from the run that started this server, or from the kernel
        # when that run died without a word (stopping.die_with_parent, at the server's start).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        for pid in list(children):
            _stop_task(pid)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(8)
    os.rename(path + ".tmp", path)
    default, order = default_preload(), steps.names()
    modules = default if modules is None else tuple(modules)
    # a run's first task arrives at once and brings its own needs; the second step's come next
    pending = [*modules, *(needs(order[1]) if modules == default and len(order) > 1 else ())]
    while True:  # until SIGTERM (stop), or the run that started it is gone
        if os.getppid() != parent:  # where no parent-death signal came (not Linux)
            stop()
        step = _serve_once(listener, children, timeout=0 if pending else 0.2)
        if step:
            pending = [m for m in pending + lookahead(step) if m not in sys.modules]
        if pending:
            _import(pending.pop(0))


def _import(name: str) -> None:
    import importlib

    with contextlib.suppress(ImportError):
        importlib.import_module(name)


def _stop_task(pid: int) -> None:
    """SIGTERM to a task (a forked child) and its process group (never this server's group,
    nor the one of the process that started it)."""
    spared = {os.getpgrp()}
    with contextlib.suppress(OSError):
        spared.add(os.getpgid(os.getppid()))
    with contextlib.suppress(OSError):
        group = os.getpgid(pid)
        if group not in spared:
            os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)


def _serve_once(listener: socket.socket, children: Dict[int, socket.socket], timeout: float) -> str:
    """Forks a child for each waiting request, then reaps the children that ended and
    sends each one's exit code and peak RSS to its client. A client whose socket closes while its task
    runs is gone (killed: nothing waits for the task any more): the task is stopped.
    Returns the last step started ("" if none)."""
    started = ""
    while True:
        watched = [conn for conn in children.values() if conn.fileno() >= 0 and conn not in _orphans]
        try:
            ready, _, _ = select.select([listener, *watched], [], [], timeout)
        except InterruptedError:
            ready = []
        if not ready:
            break
        timeout = 0
        for pid, conn in list(children.items()):
            if conn in ready:  # a client sends nothing after its request: this is its end
                _orphans.add(conn)
                _stop_task(pid)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        request, fds = _receive_request(conn)
        if request is None or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        step = executor_argument(request.get("argv", []), FUNCTION_FLAG)
        for name in needs(step):
            _import(name)
        started = step or started
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            _run_child([listener, conn, *children.values()], fds, request, server)
        for fd in fds:  # the child holds the task's streams; kfp.local sees EOF when it ends
            os.close(fd)
        children[pid] = conn
        conn.sendall(struct.pack("!i", pid))
    while children:
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            break
        code = os.waitstatus_to_exitcode(status)
        conn = children.pop(pid, None)
        _orphans.discard(conn)
        if conn is not None:  # the exit code, then the task's peak RSS (kB: ru_maxrss on Linux)
            with contextlib.suppress(OSError):
                conn.sendall(struct.pack("!iq", code if code >= 0 else 128 - code, usage.ru_maxrss))
            conn.close()
    return started


# -- the run's side -----------------------------------------------------------------------------
@dataclass
class WarmServer:
    process: subprocess.Popen
    python: str  # the shim to run where a command says python3
    environment: Dict[str, str]  # what the shim needs in its environment


@contextlib.contextmanager
def warm_server(preload=None, modules=EXECUTOR):
    """Starts the warm server and writes the shim; changes nothing else. `python -m MODULE
    ...` through the shim, with `environment` set, runs warm for a MODULE in `modules`,
    anything else as plain Python."""
    home = tempfile.mkdtemp(prefix="gpupipe-warm-")
    path = os.path.join(home, "tasks.sock")
    shim = os.path.join(home, "python3")
    client = Path(warm_client.__file__).resolve()
    with open(shim, "w", encoding="utf-8") as f:  # what kfp.local puts where the command says python3
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -S -E "{client}" "$@"\n')
    os.chmod(shim, 0o755)
    # The server imports kfp as each task's own command does (EXECUTOR_ENV), as in each pod.
    preload = default_preload() if preload is None else preload
    process = subprocess.Popen([sys.executable, "-m", "pipelines.warm", path, ",".join(preload)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, **EXECUTOR_ENV}, process_group=0,
                               preexec_fn=stopping.dies_with_this_process())
    # A group of its own: a Ctrl-C at the terminal reaches the run, which stops the server
    # (below) after its task; the server dies with the run that started it (die_with_parent).
    environment = {warm_client.SOCKET_ENV: path, warm_client.PYTHON_ENV: sys.executable,
                   warm_client.MODULES_ENV: ",".join(modules), SHIM_ENV: shim}
    try:
        yield WarmServer(process, shim, environment)
    finally:
        process.terminate()  # its tasks with it (serve: stop)
        try:
            process.wait(timeout=stopping.STOP_GRACE)
        except subprocess.TimeoutExpired:  # inside a long C call: its tasks die with it (_run_child)
            process.kill()
            process.wait()
        for name in (path, path + ".tmp", shim):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        with contextlib.suppress(OSError):
            os.rmdir(home)


@contextlib.contextmanager
def warm_tasks(preload=None, modules=EXECUTOR):
    """A warm server for a kfp.local run: for the duration, kfp.local's `python3` (this
    process's sys.executable) is the shim. Yields the server process (None with
    GPUPIPE_WARM_START=0: no-op; None also when the environment names a running server,
    GPUPIPE_WARM_SHIM and GPUPIPE_WARM_SOCKET, which is then used instead of a new one)."""
    if not enabled():
        yield None
        return
    shared = os.environ.get(SHIM_ENV, "")
    if shared and os.path.exists(shared) and os.environ.get(warm_client.SOCKET_ENV):
        # A server the calling environment already runs (a test session's): use it.
        with patched_attribute(sys, "executable", shared):
            yield None
        return
    with warm_server(preload, modules) as server, patched_environ(server.environment), \
            patched_attribute(sys, "executable", server.python):
        yield server.process


if __name__ == "__main__":
    serve(sys.argv[1], [m for m in sys.argv[2].split(",") if m] if len(sys.argv) > 2 else None)
