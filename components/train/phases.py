"""Where the train task's time went: named phases, each with its wall time (time.monotonic)
and its CPU time (time.process_time: every thread of the process, so `cpu_seconds /
seconds` is the cores it kept busy). The training report's `phases` lists them in this
order, each phase once (one that happens in several pieces, the validation slice's passes,
adds up):

- start: the process's start (the task) or the call's (train_model, run_train), the
  imports, the seed, the strategy and the precision policy;
- staging: inputs copied from an object store into local scratch (remote inputs only);
- statistics and vocabularies: the train split's statistics read, the feature specs (the
  vocabularies) and the regression target built from them;
- linear start: the linear model fitted on the train split (training.linear_start): with
  ingest's sample, a classifier's in a process of its own started before TensorFlow's
  import (components/train/linear_fit.py), and this phase is the wait for its weights
  after the model was built on the design it sent first (this phase then comes after the
  model's);
- model and input: the model built and compiled, the input pipelines set up; with a
  memory-cached slice (classification), the validation slice's first pass runs in a thread
  from the linear start until the model is built ("model and input, the validation slice's
  first read beside them": this phase ends when that pass does);
- validation slice: every pass over the held-out slice inside `fit` (Keras' validation
  after each epoch, the linear start's scores before the first and after each);
- epoch N: each epoch's training steps (its validation pass not included);
- fit, outside the epochs: the rest of `fit` (its start and end, callbacks between epochs,
  restoring the best weights);
- log-target smearing: Duan's factor on held-out rows (a log target only);
- export: the SavedModel written;
- report: the report built (the compute-only step timing included);
- mirror: the model and TensorBoard logs copied to an object store (remote only).

No TensorFlow here: the task imports this before it."""
from __future__ import annotations

import os
import time
from typing import Dict, List, Optional

START = "start"
STAGING = "staging"
STATISTICS = "statistics and vocabularies"
LINEAR_START = "linear start"
MODEL = "model and input"
MODEL_BESIDE = "model and input, the validation slice's first read beside them"
VALIDATION = "validation slice"
FIT_OTHER = "fit, outside the epochs"
SMEARING = "log-target smearing"
EXPORT = "export"
REPORT = "report"
MIRROR = "mirror"


def epoch_phase(epoch: int) -> str:
    """The phase of epoch `epoch` (1-based)."""
    return f"epoch {epoch}"


def process_age() -> float:
    """Seconds since this process started (its fork: a warm task's too), from /proc (Linux);
    0.0 where that is not known."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


class Phases:
    """A stopwatch of laps: `mark(name)` ends the phase that ran since the last mark (or the
    origin). `since_process_start`: the first phase starts when this process did (the task's
    imports count), else now."""

    def __init__(self, since_process_start: bool = False):
        age = process_age() if since_process_start else 0.0
        self._at = time.monotonic() - age
        # A process's CPU clock starts at its start (a fork's at the fork).
        self._cpu_at = 0.0 if since_process_start and age else time.process_time()
        self._phases: Dict[str, List[float]] = {}  # name -> [seconds, cpu seconds], first occurrence first

    def add(self, name: str, seconds: float, cpu_seconds: float) -> None:
        """Adds a phase measured elsewhere (or to one already there); the laps go on from the last mark."""
        total = self._phases.setdefault(name, [0.0, 0.0])
        total[0] += max(0.0, seconds)
        total[1] += max(0.0, cpu_seconds)

    def mark(self, name: str) -> None:
        now, cpu = time.monotonic(), time.process_time()
        self.add(name, now - self._at, cpu - self._cpu_at)
        self._at, self._cpu_at = now, cpu

    def fit(self, epochs: List[dict], validation: Optional[dict] = None) -> None:
        """Ends the lap that ran `fit`: each epoch's training steps (`epochs`: the StepTimer's,
        {seconds, cpu_seconds, validation_seconds, validation_cpu_seconds}), the validation
        slice's passes (those and `validation`'s, the linear start's own), the rest of the lap
        as FIT_OTHER."""
        now, cpu = time.monotonic(), time.process_time()
        lap, lap_cpu = now - self._at, cpu - self._cpu_at
        extra = validation or {}
        val = extra.get("seconds", 0.0) + sum(e["validation_seconds"] for e in epochs)
        val_cpu = extra.get("cpu_seconds", 0.0) + sum(e["validation_cpu_seconds"] for e in epochs)
        if val:
            self.add(VALIDATION, val, val_cpu)
        for i, e in enumerate(epochs):
            self.add(epoch_phase(i + 1), e["seconds"] - e["validation_seconds"],
                     e["cpu_seconds"] - e["validation_cpu_seconds"])
        steps = sum(e["seconds"] - e["validation_seconds"] for e in epochs)
        steps_cpu = sum(e["cpu_seconds"] - e["validation_cpu_seconds"] for e in epochs)
        self.add(FIT_OTHER, lap - val - steps, lap_cpu - val_cpu - steps_cpu)
        self._at, self._cpu_at = now, cpu

    def to_list(self) -> List[dict]:
        """The report's `phases`: [{name, seconds, cpu_seconds}], in the order they began."""
        return [{"name": name, "seconds": round(s, 3), "cpu_seconds": round(c, 3)}
                for name, (s, c) in self._phases.items()]
