"""Ingest's worker processes (parallel.py): each batch's bytes reach its worker whole, the
workers' results come back by index, an error in a worker is raised in the step as it was,
and a worker that dies is named."""
import os

import pytest

from components.ingest.parallel import PIPE_BYTES, Workers


class _Summing:
    """A worker's state: the sizes and first bytes of what it was given, and its tags."""

    def __init__(self, index):
        self.index, self.seen = index, []

    def add(self, payload, tag, fail=None):
        if fail == "raise":
            raise ValueError(f"worker {self.index} refused {tag}")
        if fail == "exit":
            os._exit(3)
        data = memoryview(payload).tobytes()
        self.seen.append((tag, len(data), data[:4], data[-1] if data else None))

    def finish(self):
        return {"index": self.index, "seen": self.seen}


def test_payloads_reach_the_workers_whole_round_robin():
    workers = Workers(2, _Summing)
    try:
        sizes = [0, 1, 5 << 20, 70_000, 3, 9 << 20, 17]  # beyond a pipe's buffer, and empty
        for tag, size in enumerate(sizes):
            workers.submit(bytes([tag % 256]) * size if size else b"", tag)
        results = workers.finish()
    finally:
        workers.stop()
    assert [r["index"] for r in results] == [0, 1]
    seen = sorted(s for r in results for s in r["seen"])
    assert [(tag, size) for tag, size, _, _ in seen] == list(enumerate(sizes))
    assert all(first == bytes([tag]) * min(4, size) for tag, size, first, _ in seen if size)
    assert [tag for tag, *_ in results[0]["seen"]] == [0, 2, 4, 6]  # round-robin


def test_the_pipes_are_widened():
    """To 1 MiB: Linux's default maximum for a pipe (/proc/sys/fs/pipe-max-size)."""
    import fcntl

    workers = Workers(2, _Summing)
    try:
        sizes = [fcntl.fcntl(sender._conn.fileno(), fcntl.F_GETPIPE_SZ) for sender in workers._senders]
        workers.finish()
    finally:
        workers.stop()
    assert sizes == [PIPE_BYTES] * 2


def test_an_error_in_a_worker_is_raised_in_the_step():
    workers = Workers(2, _Summing)
    try:
        with pytest.raises(ValueError, match="worker 1 refused b"):
            for tag in ["a", "b", "c", "d", "e", "f", "g", "h"]:
                workers.submit(b"x" * 1000, tag, "raise" if tag == "b" else None)
            workers.finish()
    finally:
        workers.stop()


def test_a_worker_that_dies_is_named():
    """And the stop ends every sender thread (one waiting for an item is woken, not left to
    the join's timeout)."""
    workers = Workers(2, _Summing)
    try:
        with pytest.raises(RuntimeError, match="ingest worker 0 exited with code 3"):
            for tag in range(12):
                workers.submit(b"y" * (1 << 20), tag, "exit" if tag == 2 else None)
            workers.finish()
    finally:
        workers.stop()
    assert not any(sender._thread.is_alive() for sender in workers._senders)


def test_an_item_that_cannot_be_sent_is_raised_not_waited_on():
    """What a sender cannot send (here a value that does not pickle) stops the step with its
    error, instead of leaving the worker waiting and the step's submit blocked."""
    workers = Workers(1, _Summing)
    try:
        with pytest.raises(Exception, match="pickle"):
            workers.submit(b"z", lambda: None)  # a lambda does not pickle
            for tag in range(6):
                workers.submit(b"z", tag)
            workers.finish()
    finally:
        workers.stop()
