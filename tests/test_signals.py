"""A local run that is stopped leaves nothing behind, and says where it stopped (pipelines/stopping.py,
pipelines/run_dir.py). `gpupipe run` on penguins runs as a user's shell, CI runner or `timeout`
starts it: a process of its own, in a session of its own, with a warm server of its own (not the
test session's), so every process of the run is in that session and is found there (/proc).
SIGTERM during ingest, SIGTERM again during train of the resumed run, then `gpupipe resume`
finishes it; SIGINT and SIGHUP end the same way with their own exit codes; a SIGKILL of the
client leaves no warm server or task behind."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import warm

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("signal-runs")]
ROOT = Path(__file__).resolve().parents[1]


def run_env() -> dict:
    """This environment without the test session's warm server: the run starts its own."""
    own = (warm.SHIM_ENV, warm.warm_client.SOCKET_ENV, warm.warm_client.MODULES_ENV, warm.warm_client.PYTHON_ENV)
    return {k: v for k, v in os.environ.items() if k not in own}


def session(sid: int) -> list:
    """The live processes (pid, command line) of the session `sid` (zombies are not)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append((int(entry), command))
    return found


def gone_within(sid: int, seconds: float) -> list:
    deadline = time.monotonic() + seconds
    while session(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return session(sid)


def catches(pid: int, signum: int, timeout: float = 60) -> None:
    """Waits until the process `pid` handles `signum` (its handler installed: /proc/PID/status SigCgt)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
        if caught & (1 << (signum - 1)):
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never handled signal {signum}")


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=run_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def run_args(tmp_path: Path, *extra) -> list:
    return ["run", "configs/penguins.yaml", "--runs-dir", str(tmp_path / "runs"),
            "--serving-base", str(tmp_path / "serving"), *extra]


def signal_when(proc: subprocess.Popen, marker: str, signum: int, timeout: float = 240) -> tuple:
    """Reads the run's lines until one holds `marker`, sends `signum`; (exit code, everything
    printed, seconds from the signal to the exit)."""
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        seen.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    assert marker in seen[-1], "".join(seen)
    proc.send_signal(signum)
    sent = time.monotonic()
    rest = proc.stdout.read()
    code = proc.wait(timeout=60)
    return code, "".join(seen) + rest, time.monotonic() - sent


def assert_stopped(tmp_path: Path, printed: str, step: str, name: str = "SIGTERM") -> Path:
    """The one line, and the run's folder saying it was stopped by `name` at `step`: summary.txt,
    run.log (the newest run's, through runs/penguins-last.log) and the run's record."""
    last = tmp_path / "runs" / "penguins-last.log"
    run_dir = last.resolve().parent
    said = f"terminated by {name} at step {step}"
    assert printed.strip().splitlines()[-1] == \
        f"gpupipe run penguins: {said}; `gpupipe resume {run_dir}` continues it", printed
    assert "Traceback" not in printed
    assert said in (run_dir / "summary.txt").read_text()
    assert last.read_text().rstrip().endswith(f"gpupipe: {said}")
    record = json.loads((run_dir / "gpupipe-run.json").read_text())
    assert record["status"] == "TERMINATED" and record["terminated"] == {"signal": name, "step": step}
    return run_dir


def test_sigterm_during_ingest_then_during_train_leaves_nothing_and_resume_finishes_the_run(tmp_path):
    proc = start(*run_args(tmp_path, "--epochs", "12"))
    code, printed, took = signal_when(proc, "ingest      running", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and took < 5, printed
    assert gone_within(proc.pid, 5) == []
    first = assert_stopped(tmp_path, printed, "ingest")

    # the run resumed, stopped again while it trains
    proc = start("resume", str(first))
    code, printed, took = signal_when(proc, "train       epoch 1/", signal.SIGTERM)
    assert code == 143 and took < 5, printed
    assert gone_within(proc.pid, 5) == []
    second = assert_stopped(tmp_path, printed, "train")
    assert second != first and json.loads((second / "gpupipe-run.json").read_text())["resumes"] == str(first)
    steps = {line.split()[0]: line.split()[1] for line in (second / "summary.txt").read_text().splitlines()[1:8]}
    assert steps["ingest"] == "SUCCESS" and steps["train"] == "TERMINATED" and steps["evaluate"] == "NOT"  # NOT RUN
    assert not (tmp_path / "runs" / ".cache" / "train").exists()  # an unfinished task is not an entry
    assert not (tmp_path / "serving" / "penguins").exists()  # nothing pushed, nothing half-written

    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "resume", str(second)], cwd=ROOT, env=run_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ingest      CACHED" in done.stdout and "train       SUCCESS" in done.stdout
    assert f"pushed version 1: {tmp_path / 'serving'}/penguins/1" in done.stdout
    assert sorted(p.name for p in (tmp_path / "serving" / "penguins").iterdir() if p.name.isdigit()) == ["1"]

    # predict with the version pushed, stopped the same way: one line, 143, no predictions file
    output = tmp_path / "predictions.csv"
    proc = start("predict", "configs/penguins.yaml", "--data", "data/penguins.csv", "--output", str(output),
                 "--serving-base", str(tmp_path / "serving"))
    catches(proc.pid, signal.SIGTERM)
    proc.send_signal(signal.SIGTERM)
    printed, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143 and printed == "gpupipe predict: terminated by SIGTERM\n", printed
    assert not output.exists() and gone_within(proc.pid, 5) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_sigint_and_sighup_stop_a_run_as_sigterm_does_with_their_own_exit_code(tmp_path, signum):
    proc = start(*run_args(tmp_path, "--epochs", "4"))
    code, printed, _ = signal_when(proc, "ingest      running", signum)
    assert code == 128 + signum, printed  # 130, 129
    assert gone_within(proc.pid, 5) == []
    assert_stopped(tmp_path, printed, "ingest", signal.Signals(signum).name)


def test_a_killed_client_leaves_no_warm_server_or_task_behind(tmp_path):
    """SIGKILL: the run cannot clean up; its warm server (parent-death signal) and the task
    forked from it (its client's socket closing, its own parent-death signal) end by themselves."""
    proc = start(*run_args(tmp_path, "--epochs", "4"))
    for line in proc.stdout:
        if "ingest      running" in line:
            break
    deadline = time.monotonic() + 60
    while not any("warm_client" in cmd for _, cmd in session(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)  # until ingest's task is on its way (the client of the warm server)
    running = session(proc.pid)
    assert any("pipelines.warm" in cmd for _, cmd in running) and any("warm_client" in cmd for _, cmd in running)
    proc.kill()
    proc.wait()
    assert gone_within(proc.pid, 10) == []


_DROPS = {
    "__del__": """
class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs here; Python drops what it raises
Dropped()
""",
    # as an import's module lock's callback (importlib's `_get_module_lock.<locals>.cb`)
    "weakref callback": """
class Owner:
    pass
owner = Owner()
keep = weakref.ref(owner, lambda _: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(1)))
del owner
""",
}


@pytest.mark.parametrize("where", list(_DROPS))
def test_a_stop_signal_whose_exception_python_dropped_is_raised_again_with_nothing_printed(where):
    """Python drops what a signal handler raises inside a __del__, a weakref callback (an
    import's module lock has one) or an at-fork callback (logging's, at each Popen), and
    prints it: the handler takes it from sys.unraisablehook, prints nothing, and the signal is
    raised again in the main thread within milliseconds, so the command does not go on."""
    code = ("import os, signal, sys, time, weakref\n"
            "from pipelines.stopping import Terminated, stop_signals\n"
            "hook = sys.unraisablehook\n"
            "try:\n"
            "    with stop_signals():\n"
            + "".join(f"        {line}\n" for line in _DROPS[where].strip().splitlines()) +
            "        for _ in range(300):\n"
            "            time.sleep(0.001)\n"
            "        print('went on')\n"
            "except Terminated as stop:\n"
            "    print(stop, sys.unraisablehook is hook, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "terminated by SIGTERM True True\n" and "Exception ignored" not in out.stderr, out
