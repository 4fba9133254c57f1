"""Ingest's batches spread over worker processes, each preparing, encoding, writing its own
shards and accumulating its own statistics, so parsing the source, the encoders and TFDV
run on every core instead of in one Python thread (docs/benchmarks.md, "Feeding the GPU").

The workers are forked once the step's imports are done (as the warm server forks the
tasks) and only while TensorFlow's runtime has not started in this process (`can_fork`: a
fork of a process whose runtime threads run can deadlock in the child); they take batches round-robin through bounded queues (memory stays flat: at most
QUEUED batches wait per worker) and hand back what they counted when the source is done.
An error in a worker (a value a kind refuses) is raised again in the step, as the one line
it is; the other workers are stopped, and nothing is half-written: the manifest is written
last, by the step.
"""
from __future__ import annotations

import multiprocessing
import queue
from typing import Callable, List

QUEUED = 2


def can_fork() -> bool:
    """Whether worker processes may be forked here: TensorFlow imported or not, its runtime
    (the eager context and its thread pools, which tf.data and every op start) not started."""
    from components.contracts.compat.tensorflow import runtime_started

    return not runtime_started()


def _serve(make_state: Callable, index: int, inbox, outbox) -> None:
    try:
        state = make_state(index)
        while (item := inbox.get()) is not None:
            state.add(*item)
        outbox.put((index, "done", state.finish()))
    except BaseException as err:  # noqa: BLE001  (handed to the step, which raises it)
        try:
            outbox.put((index, "error", err))
        except Exception:  # an error that does not pickle: its text
            outbox.put((index, "error", RuntimeError(str(err))))


class Workers:
    """`count` forked processes, each running `make_state(index)` then its `add(*item)` for
    each item submitted to it and its `finish()` (whose result `finish` returns, by index)."""

    def __init__(self, count: int, make_state: Callable):
        context = multiprocessing.get_context("fork")
        self._outbox = context.Queue()
        self._inboxes = [context.Queue(QUEUED) for _ in range(count)]
        self._processes = [context.Process(target=_serve, args=(make_state, i, box, self._outbox), daemon=True,
                                           name=f"gpupipe-ingest-{i}") for i, box in enumerate(self._inboxes)]
        for p in self._processes:
            p.start()
        self._next = 0
        self._results = {}

    def submit(self, *item) -> None:
        box = self._inboxes[self._next]
        self._next = (self._next + 1) % len(self._inboxes)
        while True:
            try:
                box.put(item, timeout=0.5)
                return
            except queue.Full:
                self._check()

    def _take(self, timeout: float) -> None:
        index, what, value = self._outbox.get(timeout=timeout)
        if what == "error":
            raise value
        self._results[index] = value

    def _check(self) -> None:
        """Raises a worker's error, or names a worker that died without one."""
        try:
            while True:
                self._take(0)
        except queue.Empty:
            pass
        for i, p in enumerate(self._processes):
            if not p.is_alive() and i not in self._results:
                raise RuntimeError(f"ingest worker {i} exited with code {p.exitcode}")

    def finish(self) -> List[object]:
        for box in self._inboxes:
            box.put(None)
        while len(self._results) < len(self._processes):
            try:
                self._take(0.5)
            except queue.Empty:
                self._check()
        for p in self._processes:
            p.join()
        return [self._results[i] for i in range(len(self._processes))]

    def stop(self) -> None:
        for p in self._processes:
            if p.is_alive():
                p.terminate()
            p.join()
