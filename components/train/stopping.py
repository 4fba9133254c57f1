"""A classifier's early stopping over the linear start, scoring the validation slice itself
(issue #36, point 2: the train task's time outside the epochs).

`SliceScoringStopper` is EarlyStoppingFromTheStart (components/train/linear_start.py) with
the slice's passes made cheaper, for the same decisions:
- the starting weights' scores come from the linear fit in numpy (`start_scores`): the
  untrained model is that fit (its residual head starts at zero; a test holds them equal),
  so no pass of the model, and no trace, before the first epoch;
- after each epoch one pass of one traced function gives both Keras' `val_loss` and
  `val_<metric>` (into the epoch's logs, so History, TensorBoard and the report see them as
  Keras' own) and the per-row losses the paired margin needs: `fit` runs without Keras'
  validation, which traced a test function and passed over the slice a second time;
- that function is traced in a thread during the first epoch (after its first step, while
  the steps run in TensorFlow's threads), not after it.
At 2M rows the slice's passes took 2.7 s of the task, most of it those traces and passes.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np
import tensorflow as tf

from components.contracts.linear import design_matrix
from components.train.linear_start import EarlyStoppingFromTheStart, LinearStart


def start_scores(start: LinearStart, validation):
    """({loss, accuracy}, the per-row losses) of a classifier's starting weights (the linear
    fit) on the validation slice: the cross-entropy and argmax the model's softmax gives."""
    names = [c.name for group in (start.design.numeric, start.design.categorical, start.design.text) for c in group]
    columns: dict = {name: [] for name in names}
    targets = []
    for features, target in validation:
        for name in names:
            columns[name].append(features[name].numpy().reshape(-1))
        targets.append(target.numpy().reshape(-1))
    x = {name: np.concatenate(parts) for name, parts in columns.items()}
    y = np.concatenate(targets).astype(np.int64) if targets else np.empty(0, np.int64)
    probabilities = start.fit.predict(design_matrix(start.design, x))
    rows = -np.log(np.maximum(probabilities[np.arange(len(y)), np.maximum(y, 0)], 1e-7))
    return {"loss": float(rows.mean()), "accuracy": float((probabilities.argmax(1) == y).mean())}, rows


class SliceScoringStopper(EarlyStoppingFromTheStart):
    """For a classifier with a linear start and a validation slice that `fit` is not given
    (the module's docstring): monitors val_loss or val_accuracy."""

    def __init__(self, validation, start: LinearStart, **kwargs):
        super().__init__(validation=validation, **kwargs)
        self.start = start
        self._pass = None  # the traced (per-row loss, per-row correct) of a batch
        self._tracing: Optional[threading.Thread] = None
        self._epoch_rows: Optional[np.ndarray] = None
        self.trace_cpu_seconds = 0.0

    def _start_scores(self):
        return start_scores(self.start, self.validation)

    def _function(self):
        if self._pass is None:
            model = self.model

            @tf.function(reduce_retracing=True)
            def scored(features, target):
                out = tf.cast(model(features, training=False), tf.float32)
                index = tf.cast(target, tf.int32)
                picked = tf.gather(out, tf.maximum(index, 0), batch_dims=1)
                return -tf.math.log(tf.maximum(picked, 1e-7)), tf.equal(tf.argmax(out, -1, output_type=tf.int32), index)

            self._pass = scored
        return self._pass

    def on_train_batch_end(self, batch, logs=None):
        super().on_train_batch_end(batch, logs)
        if batch == 1 and self._tracing is None:  # the train function is traced and running: trace beside it
            scored = self._function()

            def trace():
                started = time.thread_time()
                scored.get_concrete_function(*self.validation.element_spec)
                self.trace_cpu_seconds = time.thread_time() - started  # inside the epoch's time: the feed's cost leaves it out

            self._tracing = threading.Thread(target=trace, name="validation-trace", daemon=True)
            self._tracing.start()

    def _slice_pass(self):
        if self._tracing is not None:
            self._tracing.join()
        scored = self._function()
        losses, correct = [], []
        for features, target in self.validation:
            loss, hit = scored(features, target)
            losses.append(loss.numpy())
            correct.append(hit.numpy())
        return (np.concatenate(losses), np.concatenate(correct)) if losses else (np.empty(0), np.empty(0))

    def _row_losses(self) -> np.ndarray:
        return self._epoch_rows if self._epoch_rows is not None else self._slice_pass()[0]

    def on_epoch_end(self, epoch, logs=None):
        started = (time.monotonic(), time.process_time())
        losses, correct = self._slice_pass()
        self._timed(started)
        if logs is not None and len(losses):
            logs["val_loss"], logs["val_accuracy"] = float(losses.mean()), float(correct.mean())
        self._epoch_rows = losses
        try:
            super().on_epoch_end(epoch, logs)
        finally:
            self._epoch_rows = None
