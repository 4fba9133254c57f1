"""Training runtime concerns: the tf.distribute strategy, GPU settings, preemption
(SIGTERM -> checkpoint -> exit 143), step timing and GPU utilisation sampling."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import List, Optional

import components  # noqa: F401
import tensorflow as tf
import tf_keras

from components.contracts import names

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM: retryable for TFJob's ExitCode policy and KFP retries


def graph_code_without_autograph() -> None:
    """Tells autograph to leave tf_keras and gpupipe's own code as it is.

    tf.function converts the Python of every function it calls unless the function's module
    is on TensorFlow's do-not-convert list, which names `keras` but not `tf_keras`. So the
    first epoch converted all of tf_keras' train step and layer code, and our own layers:
    15.6 s of the first epoch of a small model against 0.6 s without (measured on the
    penguins table, 2 cores, the same losses to the last digit). Both are graph code
    already (tf_keras uses tf.cond where it branches on tensors). A custom model's module
    (training.custom_model) is still converted. There is no public switch for a module, so
    this prepends to autograph's rules; idempotent."""
    from tensorflow.python.autograph.core import config as autograph_config
    from tensorflow.python.autograph.core import config_lib

    rules = autograph_config.CONVERSION_RULES
    if not any(isinstance(r, config_lib.DoNotConvert) and r.matches("tf_keras") for r in rules):
        own = ("tf_keras", "components")
        autograph_config.CONVERSION_RULES = tuple(config_lib.DoNotConvert(m) for m in own) + rules


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class Adam(tf_keras.optimizers.legacy.Adam):
    """tf_keras' Adam with one change: an embedding's gradient (IndexedSlices, the rows a
    batch looked up) is applied through the same fused dense kernel as any other gradient.

    The library's sparse path updates the moments of every row of the table anyway (it
    decays m and v over the whole table, then adds the batch's rows), so the result is the
    same update; it builds about 20 ops per embedding table to do it, the dense kernel one.
    On the click-through model (26 embedding tables) the train step has 1,274 ops instead of
    1,794 to trace and optimise before its first run (docs/benchmarks.md)."""

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        rows = tf.shape(handle, out_type=indices.dtype)[0]
        return self._resource_apply_dense(tf.math.unsorted_segment_sum(grad, indices, rows), handle, **kwargs)


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class WarmupThenDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `rate` over `warmup_steps`, then `decay` over the steps after
    it: "cosine" to alpha x rate at `decay_steps`, "step" x factor every `every_steps`, or
    "none"."""

    def __init__(self, rate: float, warmup_steps: int, decay: str, decay_steps: int, alpha: float = 0.0,
                 every_steps: int = 1000, factor: float = 0.5):
        super().__init__()
        self.rate, self.warmup_steps, self.decay, self.decay_steps = rate, warmup_steps, decay, decay_steps
        self.alpha, self.every_steps, self.factor = alpha, every_steps, factor

    def __call__(self, step):
        import math

        step = tf.cast(step, tf.float32)
        after = tf.maximum(step - self.warmup_steps, 0.0)
        if self.decay == "cosine":
            progress = tf.minimum(after / self.decay_steps, 1.0)
            decayed = self.rate * ((1 - self.alpha) * 0.5 * (1 + tf.cos(math.pi * progress)) + self.alpha)
        elif self.decay == "step":
            decayed = self.rate * tf.pow(self.factor, tf.floor(after / self.every_steps))
        else:
            decayed = tf.constant(self.rate, tf.float32)
        if not self.warmup_steps:
            return decayed
        return tf.where(step < self.warmup_steps, self.rate * step / self.warmup_steps, decayed)

    def get_config(self):
        return {"rate": self.rate, "warmup_steps": self.warmup_steps, "decay": self.decay,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "every_steps": self.every_steps,
                "factor": self.factor}


class Preempted(Exception):
    """Raised after a SIGTERM-triggered checkpoint; the entry point exits with 143."""


def cluster_workers(tf_config: Optional[str]) -> int:
    """How many workers (chief included) TF_CONFIG names; 1 when unset."""
    if not tf_config:
        return 1
    cluster = json.loads(tf_config).get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def is_chief(tf_config: Optional[str]) -> bool:
    """The chief (or the only process) writes the model; other workers write to scratch."""
    if not tf_config:
        return True
    cfg = json.loads(tf_config)
    task = cfg.get("task", {})
    if "chief" in cfg.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type", "worker") == "worker" and task.get("index", 0) == 0


def choose_strategy(name: str = "auto"):
    """`auto`: MultiWorkerMirroredStrategy when TF_CONFIG names several workers,
    MirroredStrategy over the GPUs of one node, else TensorFlow's default strategy on the
    one device (GPU when present). BackupAndRestore supports all three (not
    OneDeviceStrategy), and on one CPU the default strategy measured 12% faster than a
    one-device MirroredStrategy with streaming input (bench/train.py)."""
    workers = cluster_workers(os.environ.get("TF_CONFIG"))
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:  # already initialised in this process
            pass
    if name == "multi_worker" or (name == "auto" and workers > 1):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored" or (name == "auto" and len(gpus) > 1):
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def compute_capability() -> Optional[tuple]:
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        if details.get("compute_capability"):
            return tuple(details["compute_capability"])
    return None


def precision_policy(setting: str, capability: Optional[tuple]) -> str:
    """The Keras dtype policy: float16 on compute capability 7.x, bfloat16 allowed on 8.x
    and later (`auto` picks bfloat16 there), float32 on CPU or when `off`."""
    if setting == "off" or capability is None:
        return "float32"
    if setting == "float16":
        return "mixed_float16"
    if setting == "bfloat16":
        if capability[0] < 8:
            raise ValueError(f"training.mixed_precision: bfloat16 needs compute capability 8.0+, this GPU has "
                             f"{capability[0]}.{capability[1]}; use float16 or auto")
        return "mixed_bfloat16"
    return "mixed_bfloat16" if capability[0] >= 8 else "mixed_float16" if capability[0] >= 7 else "float32"


class PreemptionGuard(tf_keras.callbacks.Callback):
    """On SIGTERM, checkpoint through BackupAndRestore at the next step boundary and stop.
    Under MultiWorkerMirroredStrategy every worker learns of it (a SUM all-reduce every
    `sync_every` steps), so all of them take part in the collective save."""

    def __init__(self, backup: tf_keras.callbacks.BackupAndRestore, strategy, sync_every: int = 10):
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
            self.backup._backup(epoch=self._epoch, batch=batch)
            self.preempted = True
            self.model.stop_training = True


class Backup(tf_keras.callbacks.BackupAndRestore):
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
        from components.train.accumulation import batches_done

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

    def _backup(self, epoch, batch=0):
        super()._backup(epoch=epoch, batch=batch)
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
        from components.train.accumulation import batches_done

        self.resumed_from = int(self.model.optimizer.iterations.numpy())
        self.resumed_batches = batches_done(self.model.optimizer)
        if self.resumed_batches:
            print(f"resumed from step {self.resumed_from} (checkpoint in the backup directory)", flush=True)
        else:
            print("starting from step 0 (no checkpoint found)", flush=True)


class StepTimer(tf_keras.callbacks.Callback):
    """Wall time of each training step (the first, which traces the function, is dropped)
    and of each epoch."""

    def __init__(self):
        super().__init__()
        self.seconds: List[float] = []
        self.epoch_seconds: List[float] = []
        self._started = None
        self._epoch_started = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_seconds.append(time.perf_counter() - self._epoch_started)

    def first_and_steady_epoch(self):
        """(the first epoch's seconds, the median of the later ones), None where there is none."""
        import numpy as np

        first = self.epoch_seconds[0] if self.epoch_seconds else None
        steady = float(np.median(self.epoch_seconds[1:])) if len(self.epoch_seconds) > 1 else None
        return first, steady

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._started is not None:
            self.seconds.append(time.perf_counter() - self._started)

    def percentiles(self):
        import numpy as np

        steps = self.seconds[1:] or self.seconds
        if not steps:
            return None, None
        return float(np.percentile(steps, 50)), float(np.percentile(steps, 95))


class Progress(tf_keras.callbacks.Callback):
    """One `progress:` line per epoch, and every `every_seconds` inside a long epoch, in the
    task's log: epoch, optimizer step of the total, loss, examples/s and an ETA. The local
    runner (`gpupipe run`) shows them live; on the cluster they are in the pod's log."""

    def __init__(self, epochs: int, steps_per_epoch: int, global_batch: int, every_seconds: float = 10.0):
        super().__init__()
        self.epochs, self.steps_per_epoch, self.global_batch = epochs, steps_per_epoch, global_batch
        self.every_seconds = every_seconds
        self._epoch = 0
        self._started = self._last = 0.0
        self._first_step = 0

    def on_train_begin(self, logs=None):
        self._started = self._last = time.perf_counter()
        self._first_step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def _line(self, logs) -> str:
        step = int(self.model.optimizer.iterations.numpy())
        total = self.epochs * self.steps_per_epoch
        elapsed = time.perf_counter() - self._started
        rate = (step - self._first_step) / elapsed if elapsed > 0 else 0.0
        eta = (total - step) / rate if rate else 0.0
        loss = (logs or {}).get("loss")
        loss_text = f" loss {float(loss):.4f}" if loss is not None else ""
        return (f"{names.PROGRESS_PREFIX} epoch {self._epoch + 1}/{self.epochs} step {step}/{total}{loss_text} "
                f"examples/s {rate * self.global_batch:,.0f} eta {eta:.0f}s")

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if now - self._last >= self.every_seconds:
            self._last = now
            print(self._line(logs), flush=True)

    def on_epoch_end(self, epoch, logs=None):
        self._last = time.perf_counter()
        print(self._line(logs), flush=True)


class GpuSampler:
    """Samples GPU utilisation with nvidia-smi once a second while training (no GPU or no
    nvidia-smi: no samples)."""

    def __init__(self, interval: float = 1.0):
        self.interval = interval
        self.samples: List[float] = []
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if shutil.which("nvidia-smi") and tf.config.list_physical_devices("GPU"):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout
                values = [float(v) for v in out.split()]
                if values:
                    self.samples.append(sum(values) / len(values))
            except (OSError, ValueError, subprocess.SubprocessError):
                return

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)

    @property
    def mean(self) -> Optional[float]:
        return sum(self.samples) / len(self.samples) if self.samples else None
