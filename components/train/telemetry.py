"""Telemetry: step and epoch timing, the live `progress:` lines, GPU utilisation samples,
and the training report they end in (TrainReport, the JSON and Markdown the step writes)."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading
import time
from typing import List, Optional

import numpy as np

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts import names


class StepTimer(tf_keras.callbacks.Callback):
    """Wall time of each training step (the first, which traces the function, is dropped)
    and of each epoch: `epochs` holds, per epoch, its wall and CPU seconds (time.monotonic,
    time.process_time) and those of its validation pass (inside the epoch: Keras validates
    before on_epoch_end), for the report's phases (components/train/phases.py)."""

    def __init__(self):
        super().__init__()
        self.seconds: List[float] = []
        self.epochs: List[dict] = []
        self._started = None
        self._epoch = self._test = (0.0, 0.0)
        self._validation = [0.0, 0.0]
        self.first_step_cpu_seconds = 0.0  # the first epoch's start and first step (its trace of the train function)

    @property
    def epoch_seconds(self) -> List[float]:
        return [e["seconds"] for e in self.epochs]

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = (time.monotonic(), time.process_time())
        self._validation = [0.0, 0.0]

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({"seconds": time.monotonic() - self._epoch[0],
                            "cpu_seconds": time.process_time() - self._epoch[1],
                            "validation_seconds": self._validation[0], "validation_cpu_seconds": self._validation[1]})

    def on_test_begin(self, logs=None):
        self._test = (time.monotonic(), time.process_time())

    def on_test_end(self, logs=None):
        self._validation[0] += time.monotonic() - self._test[0]
        self._validation[1] += time.process_time() - self._test[1]

    def first_and_steady_epoch(self):
        """(the first epoch's seconds, the median of the later ones), None where there is none."""
        seconds = self.epoch_seconds
        first = seconds[0] if seconds else None
        steady = float(np.median(seconds[1:])) if len(seconds) > 1 else None
        return first, steady

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self._started is not None:
            self.seconds.append(time.perf_counter() - self._started)
        if batch == 0 and not self.epochs:
            self.first_step_cpu_seconds = time.process_time() - self._epoch[1]

    def percentiles(self):
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


def traces(function) -> Optional[int]:
    """How often a tf.function was traced (once per input signature it saw)."""
    count = getattr(function, "experimental_get_tracing_count", None)
    return count() if count else None


def strategy_name(strategy) -> str:
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        return "default (one device)"
    return type(strategy).__name__


@dataclasses.dataclass(frozen=True)
class ComputeOnly:
    """The model's own train step on one batch held in memory: its median wall seconds and
    its median CPU seconds (every thread of the process)."""

    seconds: float
    cpu_seconds: float


def compute_only_step(model, dataset, strategy, steps: int = 10) -> Optional[ComputeOnly]:
    """Median time of the model's own train step on one batch held in memory: the step time
    without input wait. The training steps' median against this gives the input-wait
    fraction, and the epoch's CPU less this step's gives the feed's (feed_cost). Called after
    the export: the extra steps change only this in-memory copy, which is discarded. The batch
    comes from the training dataset itself, so the step's input has the same spec and the
    train function is not traced again."""
    try:
        held = dataset.take(1).cache().repeat()
        iterator = iter(strategy.experimental_distribute_dataset(held))
        model.train_function(iterator)  # fills the cache
        times, cpu = [], []
        for _ in range(steps):
            t, c = time.perf_counter(), time.process_time()
            model.train_function(iterator)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        return ComputeOnly(float(np.percentile(times, 50)), float(np.percentile(cpu, 50)))
    except Exception as err:  # a measurement, never a reason to fail training
        print(f"compute-only step timing skipped: {err}", flush=True)
        return None


def feed_cost(timer: StepTimer, steps: int, batch: int, compute: Optional[ComputeOnly],
              aside_cpu_seconds: float = 0.0) -> Optional[float]:
    """CPU core-microseconds per example that feeding the steps cost in this run: the epochs'
    CPU seconds (StepTimer's, their validation passes left out) less the first step's (the
    train function's trace), less `aside_cpu_seconds` (other work in the epochs' time: the
    validation function's trace beside the first epoch), less the compute-only step's CPU for
    each other step, over those steps' examples. On a GPU node the step's compute leaves the
    CPU and this is what stays there (reading, parsing, batching, Keras' loop); on a CPU node
    it is the share of the cores the steps did not use. None without the timing, or when the
    estimate is not positive (a run too short to tell)."""
    if compute is None or not timer.epochs or steps <= 1 or batch <= 0:
        return None
    epoch_cpu = sum(e["cpu_seconds"] - e["validation_cpu_seconds"] for e in timer.epochs)
    feed = epoch_cpu - timer.first_step_cpu_seconds - aside_cpu_seconds - (steps - 1) * compute.cpu_seconds
    return feed / ((steps - 1) * batch) * 1e6 if feed > 0 else None
