"""Warm task start (pipelines/warm.py): a kfp.local task forked from the warm server gets the
command, environment, working directory and streams a cold one gets, reports the same exit
status, and runs cold when the server is off or gone. Real kfp.local (SubprocessRunner)
runs a small Lightweight Python Component each time."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kfp import dsl, local

from pipelines import warm

pytestmark = pytest.mark.unit
LIGHT = ("kfp.dsl.executor_main",)  # what the test server preloads: the executor only


@dsl.component(base_image="python:3.11")
def describe(tag: str) -> str:
    import json
    import os
    import sys

    print(f"task says {tag}")  # stdout
    print(f"task warns {tag}", file=sys.stderr)
    return json.dumps({"ppid": os.getppid(), "cwd": os.getcwd(), "tag": os.environ.get("WARM_TEST_TAG"),
                       "argv0": sys.argv[0]})


@dsl.component(base_image="python:3.11")
def fail(message: str):
    raise ValueError(message)


def _run(task_fn, capfd, **kwargs):
    task = task_fn(**kwargs)
    out, err = capfd.readouterr()
    return task, out + err


@pytest.fixture(autouse=True)
def no_session_server(monkeypatch):
    """These tests start servers of their own (the session's is announced in the environment)."""
    for name in (warm.SHIM_ENV, warm.warm_client.SOCKET_ENV, warm.warm_client.MODULES_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def kfp_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WARM_TEST_TAG", "from-the-run")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    return tmp_path


def test_a_warm_task_is_the_forked_server_with_the_runs_environment_and_streams(kfp_local, capfd):
    import json

    with warm.warm_tasks(preload=LIGHT) as server:
        task, printed = _run(describe, capfd, tag="hello")
    seen = json.loads(task.output)
    assert seen["ppid"] == server.pid  # forked from the warm server, not started by the shell
    assert seen["cwd"] == str(kfp_local) and seen["tag"] == "from-the-run"
    assert seen["argv0"].endswith("executor_main.py")  # `python -m kfp.dsl.executor_main`, as cold
    assert "task says hello" in printed and "task warns hello" in printed  # both streams reach kfp.local
    assert server.poll() is not None  # stopped with the run
    assert "gpupipe-warm" not in sys.executable  # restored


def test_a_failing_warm_task_fails_with_its_traceback_as_a_cold_one_does(kfp_local, capfd):
    with warm.warm_tasks(preload=LIGHT):
        with pytest.raises(RuntimeError, match="finished with status .*FAILURE"):
            _run(fail, capfd, message="bad input here")
    printed = capfd.readouterr()
    assert "ValueError: bad input here" in printed.out + printed.err


def test_off_or_gone_the_tasks_run_cold(kfp_local, capfd, monkeypatch):
    import json

    with warm.warm_tasks(preload=LIGHT) as server:
        server.terminate()
        server.wait()
        task, _ = _run(describe, capfd, tag="cold")
    assert json.loads(task.output)["ppid"] != server.pid  # the server was gone: a new Python ran it
    monkeypatch.setenv(warm.WARM_ENV, "0")
    with warm.warm_tasks(preload=LIGHT) as server:
        assert server is None
        task, _ = _run(describe, capfd, tag="off")
    assert json.loads(task.output)["tag"] == "from-the-run"


def test_a_run_inside_an_environment_with_a_server_uses_that_server(kfp_local, capfd, monkeypatch):
    """A nested run (a test session's server, announced in the environment) starts none."""
    import json

    with warm.warm_server(preload=LIGHT) as outer:
        for name, value in outer.environment.items():
            monkeypatch.setenv(name, value)
        with warm.warm_tasks(preload=LIGHT) as own:
            assert own is None
            task, _ = _run(describe, capfd, tag="nested")
    assert json.loads(task.output)["ppid"] == outer.process.pid


def test_the_client_runs_the_executor_warm_and_forwards_sigterm_as_128_plus_the_signal(tmp_path):
    """`python3 -m kfp.dsl.executor_main ...` through the client: the executor's own output
    and exit code; a SIGTERM to the client reaches the task, and the client exits 143 as a
    shell reports a task SIGTERM ended. Anything but the executor runs as plain Python."""
    import signal
    import time

    with warm.warm_tasks(preload=LIGHT):
        assert os.environ[warm.warm_client.SOCKET_ENV]
        proc = subprocess.run([sys.executable, "-m", "kfp.dsl.executor_main", "--help"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "usage" in proc.stdout.lower()  # the executor's own --help, run warm
        bad = subprocess.run([sys.executable, "-m", "kfp.dsl.executor_main", "--no-such-flag"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "error: the following arguments are required" in bad.stderr  # argparse, as cold
        plain = subprocess.run([sys.executable, "-c", "import sys; print(sys.flags.no_site)"],
                               capture_output=True, text=True, timeout=60)
        assert plain.stdout.strip() == "0"  # not an executor: the real Python, with its site

        waiting = tmp_path / "component.py"  # a task that waits: the executor imports this module
        waiting.write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
        task = subprocess.Popen([sys.executable, "-m", "kfp.dsl.executor_main", "--component_module_path",
                                 str(waiting), "--executor_input", "{}", "--function_to_execute", "f"],
                                cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        assert "up" in iter(lambda: task.stdout.readline().strip(), "")  # after the executor's own log line
        task.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert task.wait(timeout=30) == 128 + signal.SIGTERM and time.monotonic() - started < 10


def test_a_task_whose_client_is_killed_is_stopped_by_the_server(tmp_path):
    """SIGKILL of the client (no handler runs): its socket closes, and the server stops the
    task it forked for it instead of leaving it to run on with nobody waiting."""
    import signal
    import time

    with warm.warm_tasks(preload=LIGHT) as server:
        deadline = time.monotonic() + 30
        while not os.path.exists(os.environ[warm.warm_client.SOCKET_ENV]) and time.monotonic() < deadline:
            time.sleep(0.05)  # listening: the task runs warm, not cold
        waiting = tmp_path / "component.py"
        waiting.write_text("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(60)\n")
        client = subprocess.Popen([sys.executable, "-m", "kfp.dsl.executor_main", "--component_module_path",
                                   str(waiting), "--executor_input", "{}", "--function_to_execute", "f"],
                                  cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        line = next(line for line in iter(client.stdout.readline, "") if line.startswith("pid "))
        task = int(line.split()[1])
        assert Path(f"/proc/{task}/stat").read_text().split(")")[1].split()[1] == str(server.pid)  # the fork
        client.kill()
        client.wait()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{task}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{task}").exists() and server.poll() is None  # the task, not the server


BIG = 300  # MB a task below holds at once (its pages touched: b"x" * n, not a lazy zero allocation)


def test_a_tasks_peak_rss_is_its_own_cold_or_warm(tmp_path):
    """run_task keeps the task's peak RSS, taken once: a cold task's own high-water mark, which
    it writes as it exits (importing `components`; not the RSS of the run it was forked
    from), a warm one's (the fork, not its small client) as the server reaped it."""
    from pipelines import stopping

    module = tmp_path / "component.py"  # the executor imports it: the memory is held there, then the task fails
    module.write_text(f"import components\nheld = b'x' * ({BIG} << 20)\nprint('held', flush=True)\n")
    executor = ["-m", "kfp.dsl.executor_main", "--component_module_path", str(module), "--executor_input", "{}",
                "--function_to_execute", "f"]
    assert stopping.run_task([sys.executable, "-c", f"import components\nheld = b'x' * ({BIG} << 20)"]) == 0
    cold = stopping.take_peak_rss_mb()
    assert BIG < cold < BIG + 100 and stopping.take_peak_rss_mb() is None
    assert stopping.run_task([sys.executable, "-c", "import components"]) == 0
    assert stopping.take_peak_rss_mb() < 50  # a small Python's, though forked from this test process
    assert stopping.run_task([sys.executable, "-c", "pass"]) == 0 and stopping.take_peak_rss_mb() is None
    assert stopping.run_task([sys.executable, *executor]) != 0  # no function f: it fails after importing
    assert BIG < stopping.take_peak_rss_mb() < BIG + 200
    with warm.warm_tasks(preload=LIGHT):
        assert stopping.run_task([sys.executable, *executor]) != 0
        warm_peak = stopping.take_peak_rss_mb()
    assert BIG < warm_peak < BIG + 400, warm_peak
