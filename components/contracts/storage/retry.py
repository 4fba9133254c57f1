"""How hard the storage layer tries, and what it tells when it gives up.

Transient faults (429, 5xx, a reset connection, a timeout) are retried by the clients'
own machinery: google-cloud-storage's `Retry` (exponential backoff with jitter, its own
predicate of what is transient; conditional writes are retried because a generation
precondition makes a replay safe) and botocore's `standard` retry mode (the same, with a
retry quota). Both are bounded by `attempts` (tries per request, the first included), every
try by the connect and read timeouts (the read timeout at most the deadline), and all tries
of one storage operation by `deadline_seconds`: a retry is started only if it can end in
time (`another_try_fits`: the time spent, the longest backoff before it and one whole try
within the deadline), so an endpoint that accepts connections and never answers fails the
operation within the deadline, in one line naming the endpoint and the keys to change.
The bounds come from the config's `storage.retry` section (components/contracts/settings.py:
RetrySettings), which renders the variables below into every task's environment; unset,
the defaults here.

Every retry is counted (`retries()`) and logged on the `gpupipe.storage` logger (a task's
run.log: components/contracts/errors.py `reports_errors` shows it there; the terminal of a
CLI command stays one line). A fault that outlives the retries, or one that no retry
mends (credentials, permissions, a missing bucket), is a `StorageError`: one line naming
the URI, what happened and the fix.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass

from components.contracts.errors import GpupipeError

ATTEMPTS_ENV = "GPUPIPE_STORAGE_ATTEMPTS"
DEADLINE_ENV = "GPUPIPE_STORAGE_DEADLINE"
CONNECT_TIMEOUT_ENV = "GPUPIPE_STORAGE_CONNECT_TIMEOUT"
READ_TIMEOUT_ENV = "GPUPIPE_STORAGE_READ_TIMEOUT"
DEFAULT_ATTEMPTS = 5
DEFAULT_DEADLINE = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0
INITIAL_BACKOFF = 0.5  # GCS: the first wait, doubled each time with jitter (botocore: its own, up to 20 s)
MAX_BACKOFF = 20.0

log = logging.getLogger("gpupipe.storage")
log.addHandler(logging.NullHandler())  # a library's logger: shown where a step turns it on, never on the CLI's terminal


class StorageError(GpupipeError):
    """A storage fault a user or operator mends (or waits out): one line naming the URI, what
    happened and the fix. `kind` is one of the constants below."""

    def __init__(self, kind: str, uri: str, message: str):
        super().__init__(" ".join(message.split()))
        self.kind, self.uri = kind, uri


CREDENTIALS_MISSING = "credentials missing"
CREDENTIALS_REFUSED = "credentials refused"
PERMISSION_DENIED = "permission denied"
NOT_FOUND = "not found"
UNREACHABLE = "endpoint unreachable"
THROTTLED = "throttled or unavailable"


@dataclass(frozen=True)
class Policy:
    attempts: int
    deadline: float
    connect_timeout: float
    read_timeout: float


def _number(name: str, default: float, kind=float):
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise GpupipeError(f"{name}: {text!r} is not a number; fix storage.retry in the config (or unset {name})"
                           ) from None
    if value <= 0:
        raise GpupipeError(f"{name}: {text!r} must be above 0; fix storage.retry in the config (or unset {name})")
    return value


def policy() -> Policy:
    """The bounds in effect (read from the environment each time: cheap, and a test or a
    task may change them). No single try outlasts the deadline: both timeouts at most it."""
    deadline = _number(DEADLINE_ENV, DEFAULT_DEADLINE)
    return Policy(int(_number(ATTEMPTS_ENV, DEFAULT_ATTEMPTS, int)), deadline,
                  min(_number(CONNECT_TIMEOUT_ENV, DEFAULT_CONNECT_TIMEOUT), deadline),
                  min(_number(READ_TIMEOUT_ENV, DEFAULT_READ_TIMEOUT), deadline))


def another_try_fits(started: float, backoff: float) -> bool:
    """Whether a retry after up to `backoff` seconds, and its whole try (connect and read
    timeouts), still ends within the deadline of an operation begun at `started`
    (time.monotonic()). False is noted on the operation in progress, for its message."""
    p = policy()
    fits = time.monotonic() - started + backoff + p.connect_timeout + p.read_timeout <= p.deadline
    op = current()
    if not fits and op is not None:
        op.out_of_time = True
    return fits


def deadline_note(err: BaseException) -> str:
    """'; storage.retry.deadline_seconds (2 s) left no time for another try' when that is
    why the operation that raised `err` stopped retrying, else ''."""
    op = current()
    if not getattr(err, "storage_out_of_time", False) and not (op is not None and op.out_of_time):
        return ""
    return f"; storage.retry.deadline_seconds ({policy().deadline:g} s) left no time for another try"


# -- counting ------------------------------------------------------------------------------
_lock = threading.Lock()
_counts: Counter = Counter()
_current = threading.local()


def retries(scheme: str = "") -> int:
    """How many retries this process has made (of one scheme's stores: "gs", "s3")."""
    with _lock:
        return sum(n for s, n in _counts.items() if not scheme or s == scheme)


def reset_counts() -> None:
    with _lock:
        _counts.clear()


class operation:
    """Brackets one storage-layer call in this thread: its retries and how long it took,
    for the message when it fails."""

    def __init__(self, uri: str):
        self.uri, self.retries, self.started = uri, 0, time.monotonic()
        self.out_of_time = False

    def __enter__(self):
        self.outer = getattr(_current, "op", None)
        _current.op = self
        return self

    def __exit__(self, kind, err, tb):
        _current.op = self.outer
        if err is not None and not hasattr(err, "storage_uri"):
            try:  # the innermost object a failure is about (one file of a tree), for its message
                err.storage_uri, err.storage_out_of_time = self.uri, self.out_of_time
            except AttributeError:
                pass
        return False

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


def current():
    return getattr(_current, "op", None)


def note_retry(scheme: str, uri: str, reason: str, attempt: int, attempts: int) -> None:
    """One retry: counted and logged (`attempt` is the try that is about to start)."""
    with _lock:
        _counts[scheme] += 1
    op = current()
    if op is not None:
        op.retries += 1
    log.warning("storage: %s: %s; try %d of %d", uri, " ".join(str(reason).split())[:200], attempt, attempts)


def keys_to_raise(err: BaseException) -> str:
    """The storage.retry keys that give an unreachable endpoint more time: the timeouts and
    the deadline when a try timed out or the deadline stopped the retries, else the attempts."""
    timed_out = "timed out" in connection_reason(err) or "timeout" in connection_reason(err)
    if timed_out or deadline_note(err):
        return "storage.retry.read_timeout_seconds and storage.retry.deadline_seconds"
    return "storage.retry.attempts"


def tries_so_far() -> str:
    """'after 5 tries in 3.2 s' for the operation in progress ('' outside one)."""
    op = current()
    if op is None:
        return ""
    return f" after {op.retries + 1} tr{'y' if op.retries == 0 else 'ies'} in {op.seconds:.1f} s"


def short(reason: object, limit: int = 160) -> str:
    """One line of at most `limit` characters."""
    text = " ".join(str(reason).split()) or type(reason).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def connection_reason(err: BaseException) -> str:
    """What a connection-level failure was, in a few words (the clients nest their causes)."""
    text = str(err)
    for needle, said in (("Connection refused", "connection refused"),
                         ("Could not connect to the endpoint URL", "no connection"),
                         ("Read timed out", "no answer within the read timeout"),
                         ("Read timeout", "no answer within the read timeout"),
                         ("Connect timeout", "no connection within the connect timeout"),
                         ("timed out", "timed out"), ("reset by peer", "connection reset"),
                         ("Connection aborted", "connection reset"), ("Name or service not known", "unknown host"),
                         ("Temporary failure in name resolution", "unknown host"),
                         ("Connection broken", "connection broken while reading")):
        if needle in text:
            return said
    return short(text)
