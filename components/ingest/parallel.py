"""Ingest's batches spread over worker processes, each preparing, encoding, writing its own
shards and accumulating its own statistics, so parsing the source, the encoders and TFDV
run on every core instead of in one Python thread (docs/benchmarks.md, "Feeding the GPU").

The workers are forked once the step's imports are done (as the warm server forks the
tasks) and only while TensorFlow's runtime has not started in this process (`can_fork`: a
fork of a process whose runtime threads run can deadlock in the child); they take batches
round-robin (memory stays flat: at most QUEUED batches wait per worker) and hand back what
they counted when the source is done. A batch's bytes go down a pipe (widened to 1 MiB) as
they are, read by the worker into one buffer: a multiprocessing queue pickled them into a
copy, and the worker unpickled another, 1.0-1.4 core-µs a row of the click-through table's
batches against 0.3-0.5 so (docs/benchmarks.md, "Ingest's gzip by ISA-L, one lookup table,
uncompressed blocks").
An error in a worker (a value a kind refuses) is raised again in the step, as the one line
it is; the other workers are stopped, and nothing is half-written: the manifest is written
last, by the step.
"""
from __future__ import annotations

import multiprocessing
import queue
import threading
from typing import Callable, List

QUEUED = 2


def can_fork() -> bool:
    """Whether worker processes may be forked here: TensorFlow imported or not, its runtime
    (the eager context and its thread pools, which tf.data and every op start) not started."""
    from components.contracts.compat.tensorflow import runtime_started

    return not runtime_started()


def _serve(make_state: Callable, index: int, inbox, outbox) -> None:
    import pyarrow as pa

    try:
        state = make_state(index)
        while (header := inbox.recv()) is not None:
            size, rest = header
            # From Arrow's memory pool, not the C heap: 23 MB buffers allocated and freed by
            # turns there grew each worker's RSS with the rows (20M rows: 3.4 GB for two)
            payload = pa.allocate_buffer(size)
            inbox.recv_bytes_into(memoryview(payload))
            state.add(payload, *rest)
        outbox.put((index, "done", state.finish()))
    except BaseException as err:  # noqa: BLE001  (handed to the step, which raises it)
        try:
            outbox.put((index, "error", err))
        except Exception:  # an error that does not pickle: its text
            outbox.put((index, "error", RuntimeError(str(err))))


# A pipe's buffer, where the system allows it (Linux's default and unprivileged maximum,
# /proc/sys/fs/pipe-max-size: 1 MiB): 33 batches of 23 MB cost the two processes 1.5-1.6
# CPU seconds through such a pipe, 2.4-2.6 through multiprocessing's default socket pair and
# 3.1-3.4 through a 64 KiB pipe (docs/benchmarks.md, "Ingest's fifth round").
PIPE_BYTES = 1 << 20


def _widen(conn) -> None:
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above the system's maximum: the default
        pass


class _Sender:
    """A worker's inbox: a bounded queue of items (at most QUEUED wait) and a thread that
    writes each down the pipe (the write releases the GIL); None ends the worker's input."""

    def __init__(self, conn):
        self._conn, self._items, self.error = conn, queue.Queue(QUEUED), None
        self._thread = threading.Thread(target=self._send, daemon=True, name="gpupipe-ingest-sender")
        self._thread.start()

    def _send(self) -> None:
        try:
            while (item := self._items.get()) is not None:
                payload, *rest = item
                self._conn.send((memoryview(payload).nbytes, rest))
                self._conn.send_bytes(payload)
            self._conn.send(None)
        except BaseException as err:  # noqa: BLE001  (raised in the step: Workers._check)
            self.error = err

    def put(self, item, timeout: float) -> None:
        self._items.put(item, timeout=timeout)

    def end(self) -> None:
        """Wakes a thread that waits for an item (a full queue's thread is writing, and a
        write to a stopped worker fails): the step's error is then raised without waiting
        for the join's timeout."""
        try:
            self._items.put_nowait(None)
        except queue.Full:
            pass

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class Workers:
    """`count` forked processes, each running `make_state(index)` then its
    `add(payload, *rest)` for each `(payload, *rest)` submitted to it (payload: a bytes-like
    object, which the worker gets as a pyarrow Buffer) and its `finish()` (whose result
    `finish` returns, by index)."""

    def __init__(self, count: int, make_state: Callable):
        context = multiprocessing.get_context("fork")
        self._outbox = context.Queue()
        self._processes, conns = [], []
        for i in range(count):
            theirs, mine = context.Pipe(duplex=False)  # (the worker's read end, this process's write end)
            _widen(mine)
            p = context.Process(target=_serve, args=(make_state, i, theirs, self._outbox), daemon=True,
                                name=f"gpupipe-ingest-{i}")
            p.start()
            theirs.close()  # so a write to a worker that is gone fails, not waits (and no later worker holds it)
            self._processes.append(p)
            conns.append(mine)
        self._senders = [_Sender(c) for c in conns]  # threads: once every worker is forked
        self._next = 0
        self._results = {}

    def submit(self, payload, *rest) -> None:
        sender = self._senders[self._next]
        self._next = (self._next + 1) % len(self._senders)
        while True:
            try:
                sender.put((payload, *rest), timeout=0.5)
                return
            except queue.Full:
                self._check()

    def _take(self, timeout: float) -> None:
        index, what, value = self._outbox.get(timeout=timeout)
        if what == "error":
            raise value
        self._results[index] = value

    def _check(self) -> None:
        """Raises a worker's error, names a worker that died without one, or raises what
        stopped a sender."""
        try:
            while True:
                self._take(0)
        except queue.Empty:
            pass
        for i, p in enumerate(self._processes):
            if not p.is_alive() and i not in self._results:
                try:  # its error (or its result) may still be on its way
                    self._take(0.5)
                except queue.Empty:
                    pass
                if i not in self._results:
                    raise RuntimeError(f"ingest worker {i} exited with code {p.exitcode}")
        for sender in self._senders:  # an item that could not be sent (its worker then waits for it)
            if sender.error is not None:
                raise sender.error

    def finish(self) -> List[object]:
        for sender in self._senders:
            while True:
                try:
                    sender.put(None, timeout=0.5)
                    break
                except queue.Full:
                    self._check()
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
        for sender in self._senders:  # (a write to a worker that is gone now fails)
            sender.end()
            sender.join(5)
