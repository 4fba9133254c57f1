"""The stand-in `python3` of a warm local run (pipelines/warm.py): run as
`python -S -E pipelines/warm_client.py ARGS...` by kfp.local for each task, with the standard
library only (it starts in milliseconds).

It hands its arguments, environment, working directory and its stdin/stdout/stderr (the
file descriptors themselves, SCM_RIGHTS) to the warm server, which forks a process that
already imported TensorFlow and the steps' libraries, and runs the task there. It forwards
SIGTERM/SIGINT/SIGHUP to that process and exits with its exit code; that process joins this
one's process group, so a run that stops the group stops the task. For a task of a local
run (TASK_GROUP_ENV) it prints that process's peak RSS last (PEAK_RSS_LINE: the run reads it,
pipelines/stopping.py: run_task). When there is no warm server
(not started yet, or gone) or the command is not a KFP executor, it becomes the real Python
(`os.execv`), so a task always runs, warm or cold.
"""
import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "GPUPIPE_WARM_SOCKET"
PYTHON_ENV = "GPUPIPE_WARM_PYTHON"
# set for a task started in a process group of its own (pipelines/stopping.py: run_task): its
# warm fork joins that group, so stopping the group stops all of the task
TASK_GROUP_ENV = "GPUPIPE_TASK_GROUP"
MODULES_ENV = "GPUPIPE_WARM_MODULES"  # what the server runs (`-m MODULE`, comma-separated); set by pipelines/warm.py
PEAK_RSS_LINE = "gpupipe-task: peak RSS"  # `<this> <kB> kB`: the warm task's, which this process is not


def _cold(python: str, args: list) -> None:
    os.execv(python, [python, *args])


def _receive(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _die_with_parent() -> None:
    """SIGTERM to this process (and the task it becomes, cold) when its parent dies (Linux):
    pipelines/stopping.py's die_with_parent, with the standard library only."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main(args: list) -> int:
    _die_with_parent()
    python = os.environ.get(PYTHON_ENV) or sys.executable
    path = os.environ.get(SOCKET_ENV, "")
    modules = os.environ.get(MODULES_ENV, "").split(",")
    if len(args) < 2 or args[0] != "-m" or args[1] not in modules or not path:
        _cold(python, args)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:  # not listening yet (still importing) or gone: start cold
        conn.close()
        _cold(python, args)
    # pgid: the task's fork joins this process's group when that is the task's own (else a group of its own)
    group = os.getpgrp() if os.environ.get(TASK_GROUP_ENV) == "1" else 0
    request = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd(), "pgid": group}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
    header = _receive(conn, 4)
    if not header:  # the server died before forking: start cold
        _cold(python, args)
    child = struct.unpack("!i", header)[0]
    def forward(signum, _frame):
        try:  # a task that could not join this group leads its own (pipelines/warm.py: _run_child)
            os.killpg(child, signum)
        except OSError:
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    status = _receive(conn, 4)  # the task's exit code (128 + N when a signal N ended it)
    peak = _receive(conn, 8) if status else b""  # then its peak RSS, in kB
    if peak and os.environ.get(TASK_GROUP_ENV) == "1":
        print(f"{PEAK_RSS_LINE} {struct.unpack('!q', peak)[0]} kB", flush=True)
    return struct.unpack("!i", status)[0] if status else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
