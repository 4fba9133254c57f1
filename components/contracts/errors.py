"""The one error type a user can cause, and how it reaches the CLI as one line."""
from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

# The local runner sets this so a failed task's one-line reason reaches the summary.
ERROR_FILE_ENV = "GPUPIPE_ERROR_FILE"
# The exit code of a process stopped by a GpupipeError (a config or data error: no retry fixes it).
CONFIG_ERROR_EXIT = 2


class GpupipeError(Exception):
    """A problem with the user's input (config, data, paths): the message is one line
    that names the input and the fix."""


def reports_errors(step: str) -> Callable[[F], F]:
    """Decorates a component entry point: a GpupipeError's message is appended to
    $GPUPIPE_ERROR_FILE (when set) as `step: message`, then re-raised so the task fails."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            _show_storage_retries()
            try:
                return func(*args, **kwargs)
            except GpupipeError as err:
                path = os.environ.get(ERROR_FILE_ENV)
                if path:
                    with open(path, "a", encoding="utf-8") as f:
                        f.write(f"{step}: {err}\n")
                raise

        return wrapper  # type: ignore[return-value]

    return decorate


class _Stderr(logging.Handler):
    """Writes to whatever sys.stderr is when a record comes (a task's log; under a test, its
    capture)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 (logging must never fail the step)
            self.handleError(record)


def _show_storage_retries() -> None:
    """In a step, the storage layer's retries (components/contracts/storage/retry.py) go to
    stderr, the task's log; a CLI command's terminal stays one line."""
    logger = logging.getLogger("gpupipe.storage")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
        logger.setLevel(logging.INFO)
