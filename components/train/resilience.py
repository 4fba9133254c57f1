"""Resilience: training outlives its pod. BackupAndRestore checkpoints every N steps,
mirrored to a remote home a retry on another node fetches; SIGTERM checkpoints at the next
step and exits 143 (retryable); the report counts preemptions, resumes and steps lost."""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts.compat.tf_keras import BackupAndRestore

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM: retryable for TFJob's ExitCode policy and KFP retries


class Preempted(Exception):
    """Raised after a SIGTERM-triggered checkpoint; the entry point exits with 143."""


class PreemptionGuard(tf_keras.callbacks.Callback):
    """On SIGTERM, checkpoint through BackupAndRestore at the next step boundary and stop.
    Under MultiWorkerMirroredStrategy every worker learns of it (a SUM all-reduce every
    `sync_every` steps), so all of them take part in the collective save."""

    def __init__(self, backup: "Backup", strategy, sync_every: int = 10):
        super().__init__()
        self.backup, self.strategy, self.sync_every = backup, strategy, sync_every
        self.requested = False
        self.preempted = False
        self._epoch = 0
        self._multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._previous = None

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _on_sigterm(self, signum, frame) -> None:
        print("SIGTERM received: checkpointing at the next step, then exiting with 143", flush=True)
        self.requested = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _anyone_requested(self, batch: int) -> bool:
        if not self._multi_worker:
            return self.requested
        if batch % self.sync_every:
            return False
        flag = self.strategy.reduce(
            tf.distribute.ReduceOp.SUM,
            self.strategy.run(lambda: tf.constant(1 if self.requested else 0)), axis=None)
        return bool(flag.numpy() > 0)

    def on_train_batch_end(self, batch, logs=None):
        if not self.preempted and self._anyone_requested(batch):
            self.backup.count("preemptions")
            self.backup.backup_now(epoch=self._epoch, batch=batch)
            self.preempted = True
            self.model.stop_training = True


class Backup(BackupAndRestore):
    """BackupAndRestore whose checkpoints outlive the pod.

    Its checkpoints are written to a local directory (TensorFlow's own filesystems are not
    used: gpupipe's storage layer, components/contracts/storage, for every remote path);
    with a remote `home` (gs://, s3://) each backup the chief makes is then mirrored there,
    TensorFlow's `checkpoint` index last, and a new process (a retry on another node)
    starts by fetching it. Where `home` is local it is the directory itself."""

    INDEX = "checkpoint"
    HISTORY = "gpupipe-preemptions.json"  # beside the checkpoints: preemptions and resumes so far
    # Beside them too: the last training step this run reached, rewritten in place every step
    # (a 21-byte pwrite; it outlives a killed process) and, with a remote home, mirrored
    # there at most every PROGRESS_UPLOAD_SECONDS and with every checkpoint.
    PROGRESS = "gpupipe-progress"
    PROGRESS_UPLOAD_SECONDS = 10.0

    def __init__(self, home: str, scratch: str, save_freq: int, chief: bool):
        from components.contracts.storage import download_prefix, is_remote

        self.home, self.chief = home, chief
        self.remote = is_remote(home)
        local = tempfile.mkdtemp(prefix="gpupipe-backup-", dir=scratch) if self.remote else home
        if self.remote:
            fetched = download_prefix(home, local)
            print(f"backup: {home} ({fetched} file(s) fetched) mirrored in {local}", flush=True)
        super().__init__(local, save_freq=save_freq, delete_checkpoint=False)
        path = os.path.join(local, self.HISTORY)
        self.history = {"preemptions": 0, "resumes": 0, "steps_lost": 0, "interruptions": []}
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                self.history.update(json.load(f))
        self._step = 0
        self._progress = None  # the open progress file (the chief's)
        self._progress_uploaded = 0.0

    def count(self, event: str) -> None:
        """Adds a preemption or a resume to the history kept with the checkpoints (written
        by the chief; it travels with the next backup)."""
        self.history[event] += 1
        self._write_history()

    def _write_history(self) -> None:
        if self.chief:
            os.makedirs(self.backup_dir, exist_ok=True)
            with open(os.path.join(self.backup_dir, self.HISTORY), "w", encoding="utf-8") as f:
                json.dump(self.history, f)

    def on_train_begin(self, logs=None):
        try:
            super().on_train_begin(logs)  # restores the newest checkpoint, if any
        except (tf.errors.OpError, ValueError, AssertionError) as err:
            # A checkpoint that cannot be read would fail every retry the same way: remove it,
            # so the next retry trains from step 0, and say so in one line.
            reason = (getattr(err, "message", None) or str(err)).strip().splitlines()[0][:200]
            self.discard()
            from components.contracts.errors import GpupipeError

            raise GpupipeError(f"training: the checkpoint in {self.home} cannot be restored ({reason}); it was "
                               "removed, so the next retry of this task trains from step 0") from None
        from components.train.optimizers import batches_done

        self._step = batches_done(self.model.optimizer)
        self._count_steps_lost(self._step)
        if self._step:
            self.count("resumes")
        if self.chief:
            os.makedirs(self.backup_dir, exist_ok=True)
            self._progress = os.open(os.path.join(self.backup_dir, self.PROGRESS), os.O_RDWR | os.O_CREAT, 0o644)
            self._write_progress()
            self._progress_uploaded = time.monotonic()

    def _count_steps_lost(self, restored: int) -> None:
        """The steps the interrupted run did after its last checkpoint, which this run does
        again: its progress record minus the restored step (0 after a SIGTERM, which
        checkpoints where it stops). In training steps (batches: k of them per optimizer
        step with gradient accumulation, which the report's resumed_from_step counts)."""
        path = os.path.join(self.backup_dir, self.PROGRESS)
        try:
            with open(path, encoding="ascii") as f:
                reached = int(f.read().strip() or 0)
        except (OSError, ValueError):
            reached = 0
        if not restored and not reached:
            return  # a first run
        lost = max(0, reached - restored)
        noticed = sum(1 for i in self.history["interruptions"] if i["preempted"])
        self.history["interruptions"].append({
            "preempted": self.history["preemptions"] > noticed,  # SIGTERM (with notice), else killed
            "reached_step": max(reached, restored), "checkpoint_step": restored, "steps_lost": lost})
        self.history["steps_lost"] += lost
        self._write_history()

    def _write_progress(self) -> None:
        os.pwrite(self._progress, f"{self._step:>20}\n".encode("ascii"), 0)

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._progress is not None:
            self._write_progress()
            if self.remote and time.monotonic() - self._progress_uploaded >= self.PROGRESS_UPLOAD_SECONDS:
                self._upload_progress()
        super().on_train_batch_end(batch, logs)  # may back up

    def _upload_progress(self) -> None:
        from components.contracts import storage

        storage.upload_file(os.path.join(self.backup_dir, self.PROGRESS), storage.join(self.home, self.PROGRESS))
        self._progress_uploaded = time.monotonic()

    def on_train_end(self, logs=None):
        self._close_progress()
        super().on_train_end(logs)

    def _close_progress(self) -> None:
        if self._progress is not None:
            os.close(self._progress)
            self._progress = None

    def after_backup(self) -> None:
        if self.remote and self.chief:
            from components.contracts.storage import upload_tree

            upload_tree(self.backup_dir, self.home, last=self.INDEX)
            self._progress_uploaded = time.monotonic()

    def discard(self) -> None:
        """Removes the backup (the model is whole, or the backup unreadable): a later
        retry starts from step 0."""
        from components.contracts.storage import delete_prefix

        delete_prefix(self.home)

    def close(self) -> None:
        """Removes the local mirror (never the backup itself)."""
        self._close_progress()
        if self.remote:
            shutil.rmtree(self.backup_dir, ignore_errors=True)


class ResumeLog(tf_keras.callbacks.Callback):
    """Logs where training starts: step 0, or the step BackupAndRestore restored."""

    def __init__(self):
        super().__init__()
        self.resumed_from = 0  # optimizer steps
        self.resumed_batches = 0  # training steps (more with gradient accumulation)

    def on_train_begin(self, logs=None):
        from components.train.optimizers import batches_done

        self.resumed_from = int(self.model.optimizer.iterations.numpy())
        self.resumed_batches = batches_done(self.model.optimizer)
        if self.resumed_batches:
            print(f"resumed from step {self.resumed_from} (checkpoint in the backup directory)", flush=True)
        else:
            print("starting from step 0 (no checkpoint found)", flush=True)
