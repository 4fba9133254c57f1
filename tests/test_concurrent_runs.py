"""Runs of one config at once, sharing a runs directory, a cache and a serving base
(pipelines/run_dir.py, pipelines/task_cache.py, components/push): each run has its own
folder and log, `runs/<pipeline>-last.log` is always a whole link, a cache entry appears whole
or not at all, and each push is a whole version of its own.

Two runs at once here (about 25 s on 2 cores); `python -m bench.concurrent --runs 4` makes the
same checks on four at once (docs/getting-started.md)."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipelines import run_dir as runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
@pytest.mark.xdist_group("concurrent-runs")
def test_two_runs_at_once_in_one_runs_dir_cache_and_serving_base(tmp_path):
    from components.store.served import EXTRA_DIR, GPUPIPE_DIR, MODEL_FILE

    serving = tmp_path / "serving"
    command = [sys.executable, "-m", "pipelines.cli", "run", "configs/penguins.yaml", "--epochs", "4", "--quiet",
               "--runs-dir", str(tmp_path / "runs"), "--serving-base", str(serving)]
    procs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0 and "Traceback" not in out + err, out + err
    logs = [next(line.split("full log: ", 1)[1] for line in out.splitlines() if "full log: " in line)
            for out, _ in outs]
    folders = {Path(log).parent for log in logs}
    assert len(folders) == 2 and all(Path(log).name == "run.log" for log in logs)
    for folder in folders:  # each run's own log and record
        assert "gpupipe run penguins: SUCCESS" in (folder / "summary.txt").read_text()
        assert json.loads((folder / "gpupipe-run.json").read_text())["status"] == "SUCCESS"
    last = tmp_path / "runs" / "penguins-last.log"
    assert last.is_symlink() and last.resolve().parent in folders
    assert [p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith(".") and p.name != ".cache"] == []

    versions = sorted(int(p.name) for p in (serving / "penguins").iterdir() if p.name.isdigit())
    assert versions == [1, 2]
    pushed_by = {}
    for version in versions:
        path = serving / "penguins" / str(version)
        lineage = json.loads((path / EXTRA_DIR / GPUPIPE_DIR / MODEL_FILE).read_text())
        pushed_by[version] = lineage["run_name"]
        model = tmp_path / "runs" / lineage["run_name"] / "train" / "model"
        for file in (f for f in model.rglob("*") if f.is_file()):  # the run's model, whole
            assert (path / file.relative_to(model)).read_bytes() == file.read_bytes(), file
    assert set(pushed_by.values()) == {f.name for f in folders}


def test_a_run_folder_taken_by_another_run_is_named_again(tmp_path):
    names = iter(["penguins-1", "penguins-1", "penguins-2"])
    other = runs.RunFolder(tmp_path, "penguins", {"parameters": {}})
    mine = runs.RunFolder(tmp_path, "penguins", {"parameters": {"epochs": 3}})
    with other.open_log() as a, mine.open_log() as b:
        assert other.name(lambda _: next(names), "penguins") == "penguins-1"
        assert mine.name(lambda _: next(names), "penguins") == "penguins-2"
        a.write("other's\n")
        b.write("mine\n")
    assert (tmp_path / "penguins-1" / "run.log").read_text() == "other's\n"
    assert (tmp_path / "penguins-2" / "run.log").read_text() == "mine\n"
    assert runs.read_record(tmp_path / "penguins-2") == {"parameters": {"epochs": 3}, "status": "RUNNING"}
    assert os.readlink(tmp_path / "penguins-last.log") == os.path.join("penguins-2", "run.log")


def test_the_last_log_link_is_never_missing_while_runs_replace_it(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.log").write_text(name)
    link = runs.last_log(tmp_path, "penguins")
    runs.point_last_log(tmp_path, "penguins", tmp_path / "a" / "run.log")
    done, missing = threading.Event(), []

    def read():
        while not done.is_set():
            try:
                (missing.append(None) if link.read_text() not in ("a", "b") else None)
            except FileNotFoundError:
                missing.append(None)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(2000):  # pids differ between processes; here one process, so take turns
        runs.point_last_log(tmp_path, "penguins", tmp_path / "ab"[i % 2] / "run.log")
    done.set()
    reader.join()
    assert missing == [] and link.read_text() == "b"


def test_a_cache_entry_appears_whole_or_not_at_all(tmp_path):
    """While a task's outputs are stored, a reader looking at the entry sees none of it, or all of it."""
    from pipelines.task_cache import TaskCache

    task = tmp_path / "run" / "train"
    (task / "model").mkdir(parents=True)
    for i in range(400):
        (task / "model" / f"part-{i:03d}").write_bytes(os.urandom(2048))
    (task / "executor_output.json").write_text("{}")
    command = ["--function_to_execute", "train",
               "--executor_input", json.dumps({"outputs": {"outputFile": str(task / "executor_output.json")}})]
    cache = TaskCache(str(tmp_path / "cache"))
    parts = {"function": "train", "parameters": {"epochs": 3}}
    storing = threading.Thread(target=cache.store, args=(command, parts, 1.5))
    seen_partial, seen_whole = [], 0
    storing.start()
    while storing.is_alive() or not seen_whole:
        entries = [p for p in (tmp_path / "cache" / "train").glob("[!.]*")] if (tmp_path / "cache").exists() else []
        for entry in entries:
            files = len(list((entry / "task" / "model").iterdir()))
            if files != 400 or not (entry / "meta.json").is_file():
                seen_partial.append(files)
            seen_whole += 1
        if seen_whole:
            break
    storing.join()
    assert seen_partial == [] and seen_whole
    restored = tmp_path / "again" / "train"
    command[-1] = json.dumps({"outputs": {"outputFile": str(restored / "executor_output.json")}})
    assert cache.restore(command, parts)["seconds"] == 1.5
    assert len(list((restored / "model").iterdir())) == 400
