"""A local run's folder under the runs directory, safe for several runs at once (of the same
config or not) in one runs directory.

- The folder is claimed, not guessed: when kfp.local names the run (`<pipeline>-<time to
  the microsecond>`, components/contracts/compat/kfp.py: kfp_local_run_name) the name is
  taken with an exclusive mkdir, and named again if another run took it first. The run then
  knows its own folder instead of looking for the newest one.
- The run's log is written from the start into a file of its own (a hidden temporary one
  until the folder exists, then renamed into it as `run.log`, still open), and
  `<runs dir>/<pipeline>-last.log` is a symbolic link to the newest run's log, replaced in
  one step (a link made under a temporary name, then os.replace): a reader finds the old
  link or the new one, never none.
- The run's record (RUN_FILE: its config, parameters and status, and at its end each step's
  status, seconds and peak RSS; `gpupipe resume` reads it)
  is written when the folder is claimed, and again when the run ends, each time whole
  (a temporary file, then os.replace), so a run stopped half way can be resumed.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional, TextIO

from components.contracts import storage

RUN_FILE = "gpupipe-run.json"  # in each run's folder: its config and parameters (gpupipe resume)
LOG_FILE = "run.log"
SUMMARY_FILE = "summary.txt"  # the summary `gpupipe run` printed, as it printed it


def last_log(pipeline_root: Path, pipeline: str) -> Path:
    return pipeline_root / f"{pipeline}-last.log"


def point_last_log(pipeline_root: Path, pipeline: str, log: Path) -> None:
    """`<runs dir>/<pipeline>-last.log` -> `log` (relative, so the runs directory can move),
    replaced atomically. Where the file system has no symbolic links, there is no link."""
    link = last_log(pipeline_root, pipeline)
    temporary = pipeline_root / f".{link.name}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    try:
        os.symlink(os.path.relpath(log, pipeline_root), temporary)
        os.replace(temporary, link)
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def read_record(run_dir: Path) -> Optional[dict]:
    path = run_dir / RUN_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_record(run_dir: Path, record: dict) -> None:
    storage.write_text(str(run_dir / RUN_FILE), json.dumps(record, indent=2))  # whole: temporary, then os.replace


class RunFolder:
    """One run's folder and log. `open_log()` before the run; `name` is what kfp.local names
    the run with (kfp_local_run_name); `path` is None until then."""

    def __init__(self, pipeline_root: Path, pipeline: str, record: dict):
        self.root, self.pipeline, self.record = pipeline_root, pipeline, record
        self.path: Optional[Path] = None
        fd, temporary = tempfile.mkstemp(prefix=f".{pipeline}-", suffix=".log", dir=pipeline_root)
        os.close(fd)
        self.log = Path(temporary)

    def open_log(self) -> TextIO:
        return open(self.log, "w", encoding="utf-8")

    def name(self, default: Callable[[str], str], pipeline_name: str) -> str:
        while True:
            candidate = default(pipeline_name)
            try:
                os.mkdir(self.root / candidate)
                break
            except FileExistsError:  # another run's, this microsecond: a new time
                continue
        self.path = self.root / candidate
        log = self.path / LOG_FILE
        os.replace(self.log, log)  # the open log goes on being written, in the run's folder
        self.log = log
        write_record(self.path, {**self.record, "status": "RUNNING"})
        point_last_log(self.root, self.pipeline, log)
        return candidate

    def keep_log(self) -> None:
        """The run broke off before kfp.local named it: its log goes beside the runs."""
        if self.path is None and self.log.exists():
            final = last_log(self.root, self.pipeline)
            os.replace(self.log, final)
            self.log = final

    def finish(self, status: str, summary: str, note: str = "", **fields) -> None:
        """The run ended: its record says how, its log ends with `note`, summary.txt holds the summary."""
        if note:
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(f"\ngpupipe: {note}\n")
        if self.path is None:  # kfp.local never named the run: the log stays beside the runs
            self.keep_log()
            return
        write_record(self.path, {**self.record, "status": status, **fields})
        storage.write_text(str(self.path / SUMMARY_FILE), summary + "\n")
