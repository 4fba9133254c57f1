"""The real train entry point (`python -m components.train`) as separate processes:
two workers under MultiWorkerMirroredStrategy (TF_CONFIG on loopback), and preemption:
SIGKILL then resume, SIGTERM then checkpoint and exit 143, on one process and on one of
two workers. Every process is warm (the root conftest's `warm_python`: a fork of the
session's warm server, which imported TensorFlow, as a warm local run starts its tasks):
the client passes a SIGTERM on to its fork, and the SIGKILL test kills the fork itself
(found by the log file it writes to), the process that trains.

Kills are timed by what the trainer leaves beside its checkpoints: the chief rewrites the
step it reached in `gpupipe-progress` after every step, before a checkpoint due at that
step, so a progress past a checkpoint step means that checkpoint is whole."""
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

# A checkpoint every 25 steps, 9 steps an epoch; each test's epochs leave a margin of steps
# after the step its kill waits for, so the kill lands mid-run. Every epoch runs (no early
# stopping), so a resumed run's step count is known.
LONG = dict(epochs=30, checkpoint_steps=25, hidden_units=[64, 64], early_stopping=None)
PROGRESS = "gpupipe-progress"  # components.train.resilience.Backup.PROGRESS


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


def progress(backup_dir: Path) -> int:
    """The last step the chief reached, as it leaves it beside its checkpoints (0: not yet)."""
    try:
        return int((backup_dir / PROGRESS).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def wait_for_step(backup_dirs, proc, past: int, timeout=300) -> int:
    """Waits until the chief's progress in one of `backup_dirs()` is past step `past` and
    returns it. The chief rewrites its progress at the end of every step, before the
    checkpoint due at that step: past a checkpoint step, that checkpoint is whole."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = max([progress(d) for d in backup_dirs()] or [0])
        if step > past:
            return step
        assert proc.poll() is None, f"training ended before step {past + 1}"
        time.sleep(0.01)
    raise AssertionError(f"training did not reach step {past + 1} in {timeout} s")


def checkpointed(backup_dir: Path) -> bool:
    return any(backup_dir.rglob("*.index")) and any(backup_dir.rglob("checkpoint"))


def trainer_pid(proc, server_pid: int, log: Path) -> int:
    """The process that trains for `proc`: the warm server's fork writing to `log` (the
    client handed it its standard streams), or `proc` itself when the client started cold
    (it became the real Python: no warm server to reach)."""
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        if not any(arg.endswith(b"warm_client.py") for arg in f.read().split(b"\0")):
            return proc.pid
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == proc.pid:
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent == server_pid and os.readlink(f"/proc/{entry}/fd/1") == str(log):
                return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    raise AssertionError(f"no fork of the warm server writes to {log}: {log.read_text()[-3000:]}")


def test_sigkill_then_rerun_resumes_with_the_same_total_steps(tmp_path, penguin_examples, penguin_validation,
                                                              warm_python, warm_session):
    """SIGKILL (no notice, no handler) of the process that trains, once its first checkpoint
    is whole and a few steps past it; the rerun resumes from that checkpoint and trains the
    steps of an uninterrupted run in all."""
    backup = tmp_path / "backup"
    cmd = train_command(penguin_examples, penguin_validation["statistics"], tmp_path / "model", backup,
                        tmp_path / "report", warm=warm_python, **LONG)
    log = tmp_path / "killed.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(warm_python), stdout=out, stderr=subprocess.STDOUT)
    first = LONG["checkpoint_steps"]
    wait_for_step(lambda: [backup], proc, past=first)
    assert checkpointed(backup), log.read_text()[-3000:]
    trainer = trainer_pid(proc, warm_session.process.pid, log)
    os.kill(trainer, signal.SIGKILL)
    # A cold process ends by the signal itself; a warm client exits 128 + 9, the status the
    # warm server reaped its fork with.
    assert proc.wait(timeout=60) == (-signal.SIGKILL if trainer == proc.pid else 128 + signal.SIGKILL), \
        log.read_text()[-3000:]
    with pytest.raises(ProcessLookupError):
        os.kill(trainer, 0)  # the trainer is gone, not only its client
    assert not (tmp_path / "model" / "saved_model.pb").exists()
    # The last step the killed process reached, as it left it beside its checkpoints.
    reached = progress(backup)
    assert first < reached < LONG["epochs"] * 9, reached  # killed mid-run, past its first checkpoint

    rerun = subprocess.run(cmd, cwd=ROOT, env=env(warm_python), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    resumed = report(tmp_path / "report")
    assert resumed["resumed_from_step"] >= first
    assert (resumed["preemptions"], resumed["resumes"]) == (0, 1)  # SIGKILL: no notice, so no preemption counted
    # The steps after the last checkpoint are done again: at most one checkpoint interval.
    lost = reached - resumed["resumed_from_step"]
    assert 0 <= lost <= LONG["checkpoint_steps"] and resumed["steps_lost"] == lost
    assert resumed["interruptions"] == [{"preempted": False, "reached_step": reached,
                                         "checkpoint_step": resumed["resumed_from_step"], "steps_lost": lost}]
    assert f"resumed from step {resumed['resumed_from_step']}" in rerun.stdout
    # The optimizer steps of an uninterrupted run: every epoch's steps once.
    assert resumed["optimizer_steps"] == LONG["epochs"] * resumed["steps_per_epoch"] == LONG["epochs"] * 9
    assert (tmp_path / "model" / "saved_model.pb").is_file()
    assert not backup.exists()  # cleaned up once the model is whole


def test_sigterm_checkpoints_to_the_remote_backup_and_a_new_process_resumes_from_it(
        tmp_path, monkeypatch, penguin_examples, penguin_validation, warm_python):
    """As on the cluster: the backup lives under the run's remote root (gs://, here the GCS
    emulator), the first pod is preempted (SIGTERM: checkpoint, exit 143) after its first
    checkpoint reached the bucket, and the retry runs in a new process with another local
    scratch directory: it fetches the backup (the SIGTERM's checkpoint, newer than the
    first) and resumes."""
    from components.contracts.storage.gcs import client as gcs_client
    from tests.fixtures.gcs import gcs_emulator

    with gcs_emulator(monkeypatch) as bucket:
        home = f"gs://{bucket}/root/penguins/run-1/train/backup"
        settings = dict(LONG, epochs=12)  # each checkpoint is uploaded: fewer steps, fewer uploads
        cmd = train_command(penguin_examples, penguin_validation["statistics"], tmp_path / "model", home,
                            tmp_path / "report", warm=warm_python, **settings)
        scratch = [tmp_path / "scratch-pod-1", tmp_path / "scratch-pod-2"]
        for s in scratch:
            s.mkdir()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(warm_python, GPUPIPE_SCRATCH_DIR=str(scratch[0])), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        # The local mirror of the backup (a directory of a random name in the pod's scratch):
        # past the first checkpoint step, that checkpoint is uploaded (the upload is part of it).
        wait_for_step(lambda: list(scratch[0].glob("gpupipe-backup-*")), proc, past=settings["checkpoint_steps"])
        assert any(b.name.endswith("/checkpoint") for b in gcs_client().list_blobs(bucket)), \
            "no checkpoint reached the bucket"
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
        assert resumed["resumed_from_step"] > settings["checkpoint_steps"]
        assert resumed["optimizer_steps"] == settings["epochs"] * 9
        assert f"resumed from step {resumed['resumed_from_step']}" in rerun.stdout
        # The preemption travelled with the checkpoint to the pod that resumed; SIGTERM
        # checkpointed at the step it stopped, so no step is done twice.
        assert (resumed["preemptions"], resumed["resumes"], resumed["steps_lost"]) == (1, 1, 0)
        assert resumed["interruptions"] == [{"preempted": True, "reached_step": resumed["resumed_from_step"],
                                             "checkpoint_step": resumed["resumed_from_step"], "steps_lost": 0}]
        assert not [b.name for b in gcs_client().list_blobs(bucket)], "the backup outlived the whole model"


def test_sigterm_to_one_worker_checkpoints_both_then_both_resume(tmp_path, penguin_examples, penguin_validation,
                                                                 warm_python):
    """Once the first checkpoint is whole, the second worker's node is preempted (SIGTERM):
    the chief learns of it at the next all-reduce of the flag (PreemptionGuard, the first
    step of an epoch here: 9 steps an epoch), both checkpoint there and exit 143, and both
    resume from that checkpoint."""
    settings = dict(LONG, epochs=12, batch_size=16)
    stats = penguin_validation["statistics"]
    procs = start_workers(tmp_path, penguin_examples, stats, warm=warm_python, **settings)
    wait_for_step(lambda: [tmp_path / "backup"], procs[0], past=settings["checkpoint_steps"])
    assert checkpointed(tmp_path / "backup")
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
    assert resumed["resumed_from_step"] > settings["checkpoint_steps"] and resumed["workers"] == 2
    assert all(f"resumed from step {resumed['resumed_from_step']}" in out for out in outputs)
    assert resumed["optimizer_steps"] == settings["epochs"] * resumed["steps_per_epoch"]
    # Both checkpointed at the all-reduce that told the chief: no step is done twice.
    assert (resumed["preemptions"], resumed["steps_lost"]) == (1, 0)
    assert [i["preempted"] for i in resumed["interruptions"]] == [True]
    assert (tmp_path / "model" / "saved_model.pb").is_file()
