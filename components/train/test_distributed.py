"""The real train entry point (`python -m components.train`) as separate processes:
two workers under MultiWorkerMirroredStrategy (TF_CONFIG on loopback), and preemption:
SIGKILL then resume, SIGTERM then checkpoint and exit 143, on one process and on one of
two workers. The SIGKILL test starts its processes cold; the others warm (the root
conftest's `warm_python`: forks of the session's warm server, which imported TensorFlow,
as a warm local run starts its tasks)."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.train.launch import INDEX_ENV, WORKERS_ENV
from conftest import PENGUIN_COLUMNS, ROOT, penguin_settings

pytestmark = pytest.mark.unit

# Enough steps that a kill lands mid-run: 120 epochs x 9 steps, a checkpoint every 25 steps.
# Every epoch runs (no early stopping), so a resumed run's step count is known.
LONG = dict(epochs=120, checkpoint_steps=25, hidden_units=[64, 64], early_stopping=None)


def train_command(examples, stats, model_dir, backup_dir, report_dir, warm=None, **settings):
    """The worker's command line: `python -m components.train ...`, with `warm` (the
    warm_python fixture) through the warm server's shim."""
    s = penguin_settings(**settings)
    return [warm[0] if warm else sys.executable, "-m", "components.train", "--examples", examples, "--statistics", stats,
            "--model-dir", str(model_dir), "--columns", PENGUIN_COLUMNS.model_dump_json(),
            "--settings", s.model_dump_json(), "--backup-dir", str(backup_dir),
            "--report-dir", str(report_dir)]


def env(warm=None, **extra):
    return {**os.environ, **(warm[1] if warm else {}), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT), **extra}


def report(report_dir) -> dict:
    return json.loads((Path(report_dir) / "report.json").read_text())


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(tmp_path, examples, stats, jobset=False, warm=None, **settings):
    """Two `python -m components.train` processes on loopback: under one TF_CONFIG (as the
    training-operator gives a TFJob's workers), or, `jobset`, with the environment a JobSet's
    workers get (the worker host list and the Indexed Job's completion index), from which
    the entry point builds TF_CONFIG itself."""
    hosts = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        if jobset:
            extra = {WORKERS_ENV: ",".join(hosts), INDEX_ENV: str(index)}
        else:
            tf_config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
            extra = {"TF_CONFIG": json.dumps(tf_config)}
        cmd = train_command(examples, stats, tmp_path / "model", tmp_path / "backup", tmp_path / f"report-{index}",
                            warm=warm, **settings)
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env(warm, **extra), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    return procs


def test_two_workers_train_and_only_the_chief_writes_the_model(tmp_path, penguin_examples, penguin_validation,
                                                               warm_python):
    model_dir = tmp_path / "model"
    scratch = tmp_path / "scratch"  # no memory budget: each worker caches parsed batches on disk here
    scratch.mkdir()
    # With gradient accumulation (k=2): each worker accumulates, the all-reduce runs when applying.
    # Early stopping watches the validation slice of train (a quarter of it), each worker
    # evaluating its shard of the slice; both see the same reduced val_loss.
    procs = start_workers(tmp_path, penguin_examples, penguin_validation["statistics"], jobset=True, warm=warm_python,
                          epochs=2, validation_percent=25, early_stopping={"patience": 1},
                          batch_size=16, gradient_accumulation_steps=2,
                          cache_budget_mb=0, disk_cache_budget_mb=100, scratch_dir=str(scratch))
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[1][-3000:] + outputs[0][-3000:]
    assert (model_dir / "saved_model.pb").is_file() and (model_dir / "assets.extra").is_dir()
    chief = report(tmp_path / "report-0")
    assert chief["strategy"] == "MultiWorkerMirroredStrategy" and chief["workers"] == 2 and chief["replicas"] == 2
    assert chief["global_batch_size"] == 32 and chief["input_cache"] == "disk"
    assert chief["effective_batch_size"] == 64 and chief["optimizer_steps"] == chief["steps_per_epoch"]  # 2 epochs / 2
    assert chief["early_stopping_monitor"] == "val_loss" and len(chief["history"]["val_loss"]) == 2
    assert [o.count("input: parsed batches written to local scratch") for o in outputs] == [1, 1]
    assert not list(scratch.iterdir()), "a worker's disk cache outlived training"
    assert not (tmp_path / "report-1").exists()  # the second worker wrote no report
    discarded = Path(str(model_dir) + "-scratch")
    assert not discarded.exists() or not any(discarded.rglob("saved_model.pb"))  # its model copy was discarded


def wait_for_checkpoint(backup_dir: Path, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(backup_dir.rglob("*.index")) and any(backup_dir.rglob("checkpoint")):
            return
        assert proc.poll() is None, "training ended before its first checkpoint"
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


def test_sigkill_then_rerun_resumes_with_the_same_total_steps(tmp_path, penguin_examples, penguin_validation):
    cmd = train_command(penguin_examples, penguin_validation["statistics"], tmp_path / "model", tmp_path / "backup",
                        tmp_path / "report", **LONG)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_checkpoint(tmp_path / "backup", proc)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (tmp_path / "model" / "saved_model.pb").exists()
    # The last step the killed process reached, as it left it beside its checkpoints.
    reached = int((tmp_path / "backup" / "gpupipe-progress").read_text())

    rerun = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    resumed = report(tmp_path / "report")
    assert resumed["resumed_from_step"] > 0
    assert (resumed["preemptions"], resumed["resumes"]) == (0, 1)  # SIGKILL: no notice, so no preemption counted
    # The steps after the last checkpoint are done again: at most one checkpoint interval.
    lost = reached - resumed["resumed_from_step"]
    assert 0 <= lost <= LONG["checkpoint_steps"] and resumed["steps_lost"] == lost
    assert resumed["interruptions"] == [{"preempted": False, "reached_step": reached,
                                         "checkpoint_step": resumed["resumed_from_step"], "steps_lost": lost}]
    assert f"resumed from step {resumed['resumed_from_step']}" in rerun.stdout
    # The optimizer steps of an uninterrupted run: every epoch's steps once.
    assert resumed["optimizer_steps"] == LONG["epochs"] * resumed["steps_per_epoch"] == 120 * 9
    assert (tmp_path / "model" / "saved_model.pb").is_file()
    assert not (tmp_path / "backup").exists()  # cleaned up once the model is whole


def test_sigterm_checkpoints_to_the_remote_backup_and_a_new_process_resumes_from_it(
        tmp_path, monkeypatch, penguin_examples, penguin_validation, warm_python):
    """As on the cluster: the backup lives under the run's remote root (gs://, here the GCS
    emulator), the first pod is preempted (SIGTERM: checkpoint, exit 143), and the retry runs
    in a new process with another local scratch directory: it fetches the backup and resumes."""
    from components.contracts.storage.gcs import client as gcs_client
    from tests.fixtures.gcs import gcs_emulator

    with gcs_emulator(monkeypatch) as bucket:
        home = f"gs://{bucket}/root/penguins/run-1/train/backup"
        settings = dict(LONG, epochs=40)  # each checkpoint is uploaded: fewer steps, fewer uploads
        cmd = train_command(penguin_examples, penguin_validation["statistics"], tmp_path / "model", home,
                            tmp_path / "report", warm=warm_python, **settings)
        scratch = [tmp_path / "scratch-pod-1", tmp_path / "scratch-pod-2"]
        for s in scratch:
            s.mkdir()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(warm_python, GPUPIPE_SCRATCH_DIR=str(scratch[0])), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 300
        while not any(b.name.endswith("/checkpoint") for b in gcs_client().list_blobs(bucket)):
            assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint reached the bucket"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 143, out[-3000:]
        assert "SIGTERM received" in out and "exiting with 143" in out
        assert not (tmp_path / "model" / "saved_model.pb").exists()
        assert not list(scratch[0].iterdir()), "the local mirror of the backup outlived the process"

        rerun = subprocess.run(cmd, cwd=ROOT, env=env(warm_python, GPUPIPE_SCRATCH_DIR=str(scratch[1])), capture_output=True,
                               text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
        assert f"backup: {home} (" in rerun.stdout and "file(s) fetched" in rerun.stdout
        resumed = report(tmp_path / "report")
        assert resumed["resumed_from_step"] > 0 and resumed["optimizer_steps"] == 40 * 9
        assert f"resumed from step {resumed['resumed_from_step']}" in rerun.stdout
        # The preemption travelled with the checkpoint to the pod that resumed; SIGTERM
        # checkpointed at the step it stopped, so no step is done twice.
        assert (resumed["preemptions"], resumed["resumes"], resumed["steps_lost"]) == (1, 1, 0)
        assert resumed["interruptions"] == [{"preempted": True, "reached_step": resumed["resumed_from_step"],
                                             "checkpoint_step": resumed["resumed_from_step"], "steps_lost": 0}]
        assert not [b.name for b in gcs_client().list_blobs(bucket)], "the backup outlived the whole model"


def test_sigterm_to_one_worker_checkpoints_both_then_both_resume(tmp_path, penguin_examples, penguin_validation,
                                                                 warm_python):
    settings = dict(LONG, epochs=25, batch_size=16)
    stats = penguin_validation["statistics"]
    procs = start_workers(tmp_path, penguin_examples, stats, warm=warm_python, **settings)
    wait_for_checkpoint(tmp_path / "backup", procs[0])
    procs[1].send_signal(signal.SIGTERM)  # the node of the second worker is preempted
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [143, 143], outputs[0][-3000:] + outputs[1][-3000:]
    assert "SIGTERM received" in outputs[1] and "SIGTERM received" not in outputs[0]
    assert all("exiting with 143" in out for out in outputs)  # the chief learnt of it through the all-reduce
    assert not (tmp_path / "model" / "saved_model.pb").exists()

    procs = start_workers(tmp_path, penguin_examples, stats, warm=warm_python, **settings)
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    resumed = report(tmp_path / "report-0")
    assert resumed["resumed_from_step"] > 0 and resumed["workers"] == 2
    assert all(f"resumed from step {resumed['resumed_from_step']}" in out for out in outputs)
    assert resumed["optimizer_steps"] == settings["epochs"] * resumed["steps_per_epoch"]
    # Both checkpointed at the all-reduce that told the chief: no step is done twice.
    assert (resumed["preemptions"], resumed["steps_lost"]) == (1, 0)
    assert [i["preempted"] for i in resumed["interruptions"]] == [True]
    assert (tmp_path / "model" / "saved_model.pb").is_file()
