"""How a local run stops: on a signal, with nothing of it left running, and the same way
for `gpupipe run`, `resume` and `predict`.

- `stop_signals()`: for a command's duration, SIGTERM (what `timeout`, CI runners, systemd
  and schedulers send), SIGINT (Ctrl-C) and SIGHUP (a lost terminal) raise `Terminated` in
  the main thread, once: a second signal while the first unwinds is noted, not raised again,
  so the cleanup it started finishes. Each resource cleans up as the exception passes: the
  running task's process group is stopped (`run_task`), the warm server is stopped
  (pipelines/warm.py), the run records where it stopped (pipelines/local_run.py), and the
  command exits 128 + the signal's number (143, 130, 129), as a shell reports it.
- `run_task(command)`: a task's process in a process group of its own (a warm task's fork
  joins it, pipelines/warm.py), so that the task and whatever it started stop together:
  SIGTERM to the group, SIGKILL after STOP_GRACE seconds.
- `die_with_parent()`: what a process cannot clean up when its parent is killed outright
  (SIGKILL, the OOM killer): on Linux the kernel sends the child SIGTERM when its parent
  dies (prctl PR_SET_PDEATHSIG). The warm server, every task's process and every warm task's
  fork ask for it, so a killed `gpupipe run` leaves nothing behind within a second or two.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator, List, Optional, Tuple

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE = 3.0  # seconds a task's group has to end after SIGTERM before SIGKILL
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Terminated(BaseException):
    """A stop signal reached the command (a BaseException, as KeyboardInterrupt is: the
    libraries' `except Exception` does not swallow it)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"terminated by {self.name}")

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@functools.lru_cache(maxsize=None)
def _prctl() -> Optional[Callable[..., int]]:
    """libc's prctl (Linux), None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(signum: int = signal.SIGTERM, parent: Optional[int] = None) -> bool:
    """Asks the kernel to send this process `signum` when its parent dies (Linux; elsewhere
    nothing, and False). `parent`: the parent's pid as the caller knew it; a parent already
    gone by the time of the call is the same as one dying after it."""
    prctl = _prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)
    return True


def dies_with_this_process() -> Optional[Callable[[], int]]:
    """Popen's preexec_fn for a child that gets SIGTERM when this process dies (None where
    there is no prctl). prctl is looked up here, in this process: the child, between fork and
    exec, only calls it (nothing imported, no lock taken), and this process is alive then
    (Popen waits for the exec)."""
    prctl = _prctl()
    return None if prctl is None else functools.partial(prctl, _PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def group_alive(pgid: int) -> bool:
    """Whether a process of the group `pgid` still runs. A zombie does not: a task orphaned by
    its stopped shell waits to be reaped by init, which in a container may take its time."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                    state, _, group = f.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(group) == pgid and state not in ("Z", "X"):
                return True
    return False


def stop_group(pgid: int, process: Optional[subprocess.Popen] = None, grace: float = STOP_GRACE) -> None:
    """SIGTERM to the process group `pgid`; SIGKILL to what is left of it after `grace`
    seconds. `process`: its leader, if this process started it (reaped here)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if process is not None and process.poll() is None:
            time.sleep(0.05)
            continue
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)


def run_task(full_command: List[str]) -> int:
    """kfp.local's run of one task's command (kfp 2.13 kfp/local/subprocess_task_handler.py,
    run_local_subprocess: its output line by line on stdout, then a blank line; the exit
    code), with the task in a process group of its own that dies with this process, and no
    terminal input. Any exception here (Terminated, KeyboardInterrupt) stops the group first;
    a stop signal whose exception was lost is raised here (`check`). The task's peak RSS is
    kept for take_peak_rss_mb: a warm task's fork's, which its client prints
    (pipelines/warm_client.py: PEAK_RSS_LINE), or the one a cold task wrote as it exited
    (components/__init__.py: PEAK_RSS_ENV; a command that does not import `components`
    writes none), plus the summed peak of the worker processes a step ran (ingest's:
    components.record_workers_peak_rss; see _with_workers). The task's wall time, from its
    process's start to its exit, is kept for take_task_seconds: what a pod would run, without
    the run's own work around it (the local cache's key and store)."""
    global _peak_rss_kb, _task_seconds
    from components import PEAK_RSS_ENV, WORKERS_PEAK_RSS_SUFFIX
    from pipelines.warm_client import TASK_GROUP_ENV

    _peak_rss_kb = _task_seconds = None
    check()
    fd, peak_file = tempfile.mkstemp(prefix="gpupipe-peak-rss-")  # a cold task's, as it exits
    os.close(fd)
    try:
        started = time.monotonic()
        process = subprocess.Popen(full_command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1, process_group=0,
                                   preexec_fn=dies_with_this_process(),
                                   env={**os.environ, TASK_GROUP_ENV: "1", PEAK_RSS_ENV: peak_file})
        code, reported = _follow(process)
        _task_seconds = time.monotonic() - started
        with open(peak_file, encoding="ascii") as f:
            written = f.read().strip()
        _peak_rss_kb = _with_workers(reported if reported is not None else int(written) if written.isdigit() else None,
                                     reported is not None, peak_file + WORKERS_PEAK_RSS_SUFFIX)
        return code
    finally:
        os.unlink(peak_file)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(peak_file + WORKERS_PEAK_RSS_SUFFIX)


def _with_workers(own: Optional[int], warm: bool, workers_file: str) -> Optional[int]:
    """A task's peak RSS in kB with its worker processes': the task's own plus the sum of its
    workers' high-water marks (each counts the pages it shares with the task since the fork,
    as each process's RSS does). A warm task's figure (wait4's) is already the largest of the
    fork's and its workers' own: there the fork's own is the one it wrote with its workers'."""
    try:
        with open(workers_file, encoding="ascii") as f:
            at_end, workers = (int(n) for n in f.read().split())
    except (OSError, ValueError):
        return own
    if own is None:
        return at_end + workers
    return max(own, at_end + workers) if warm else max(own, at_end) + workers


def _follow(process: subprocess.Popen) -> Tuple[int, Optional[int]]:
    """run_task's: the task's output printed; (its exit code, the peak RSS its warm client reported, in kB)."""
    from pipelines.warm_client import PEAK_RSS_LINE

    reported = None  # a warm task's fork's (the client's own RSS is not the task's)
    _running.add(process.pid)
    try:
        check()
        for line in iter(process.stdout.readline, ""):
            print(line, end="")
            if line.startswith(PEAK_RSS_LINE):
                reported = int(line[len(PEAK_RSS_LINE):].split()[0])
            check()
        print("\n")
        code = process.wait()
        check()
        return code, reported
    except BaseException:
        stop_group(process.pid, process)
        raise
    finally:
        _running.discard(process.pid)
        process.stdout.close()


_running: set = set()  # the process groups of the tasks running now (run_task)
_peak_rss_kb: Optional[int] = None  # the last task's (run_task)
_task_seconds: Optional[float] = None  # the last task's process's wall time (run_task)


def take_peak_rss_mb() -> Optional[float]:
    """The peak RSS of the task run_task ran last, in MB, once (None after that, or when a
    task ran no process: a reused one)."""
    global _peak_rss_kb
    peak, _peak_rss_kb = _peak_rss_kb, None
    return round(peak / 1024, 1) if peak is not None else None


def take_task_seconds() -> Optional[float]:
    """The wall time of the task process run_task ran last, from its start to its exit, once
    (None after that, or when a task ran no process: a reused one)."""
    global _task_seconds
    seconds, _task_seconds = _task_seconds, None
    return seconds


class _Handler:
    """Raises Terminated at the first stop signal, after a SIGTERM to the running tasks' groups.
    Python drops an exception a signal handler raises inside an at-fork callback (logging's,
    at every Popen), a __del__ or a weakref callback (an import's module lock has one) and
    hands it to sys.unraisablehook, which prints it: `unraisable` takes it instead, prints
    nothing, and a thread sends the signal to the main thread again (`signal.pthread_kill`,
    every 10 ms) until it is raised where it propagates.
    `received` stays set for `check()` too."""

    def __init__(self):
        self.received: Optional[int] = None
        self.lost = False  # the Terminated raised was dropped (unraisable): raise it again
        self.handled = False  # a caller caught the Terminated (handled())
        self._in_hook = False
        self._redeliver: Optional[threading.Thread] = None

    def __call__(self, signum, _frame) -> None:
        if self._in_hook or (self.received is not None and not self.lost):
            return  # in the hook (raised there, it would be dropped and printed), or the first one's cleanup
        if self.received is None:
            self.received = signum
            for pgid in list(_running):
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGTERM)
        self.lost = False
        raise Terminated(self.received)

    def unraisable(self, unraisable, previous: Callable) -> None:
        """sys.unraisablehook's, while the handler is installed."""
        if not isinstance(unraisable.exc_value, Terminated) or self.received is None:
            previous(unraisable)
            return
        self._in_hook = True
        try:
            self.lost = True
            if self._redeliver is None or not self._redeliver.is_alive():
                self._redeliver = threading.Thread(target=self._deliver, daemon=True, name="gpupipe-redeliver")
                self._redeliver.start()
        finally:
            self._in_hook = False

    def _deliver(self) -> None:
        main = threading.main_thread().ident
        while self.lost:
            signal.pthread_kill(main, self.received)
            time.sleep(0.01)

    def stop_delivering(self) -> None:
        """Before the signals' previous handlers are put back (a signal sent after would get
        the default action: the process's end)."""
        self.lost = False
        if self._redeliver is not None:
            self._redeliver.join()


_handler: Optional[_Handler] = None  # stop_signals' handler, while it is installed


def check() -> None:
    """Raises Terminated for a stop signal that came and whose exception nobody has caught yet."""
    if _handler is not None and _handler.received is not None and not _handler.handled:
        raise Terminated(_handler.received)


def handled() -> None:
    """The caller caught Terminated and ends the command on it: check() raises it no more."""
    if _handler is not None:
        _handler.handled = True


@contextlib.contextmanager
def stop_signals() -> Iterator[_Handler]:
    """SIGTERM, SIGINT and SIGHUP raise Terminated for the block's duration (the main thread
    only; elsewhere nothing changes). Yields the handler (`received`: the signal, if one came)."""
    global _handler
    handler = _Handler()
    if threading.current_thread() is not threading.main_thread():
        yield handler
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    outer, _handler = _handler, handler
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(handler.unraisable, previous=hook)
    try:
        yield handler
    finally:
        _handler = outer
        handler.stop_delivering()
        sys.unraisablehook = hook
        for sig, old in previous.items():
            signal.signal(sig, old)
