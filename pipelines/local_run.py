"""Runs a pipeline end to end on this machine with kfp.local's SubprocessRunner and
summarises it: each step's status and time, the eval metric, the pushed version."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, TextIO

from components.contracts import names
from components.contracts.compat.kfp import (kfp_local_run_name, kfp_local_task_event, kfp_local_task_runner,
                                             without_colours)
from components.contracts.errors import ERROR_FILE_ENV, GpupipeError
from components.contracts.storage import is_remote
from components.sources.readers import check_columns
from components.sources.synthetic import is_synthetic
from pipelines import steps as registry
from pipelines.config import PipelineConfig
from pipelines.factory import P_DATA_SOURCE, P_SERVING_BASE, create_pipeline, run_parameters
from pipelines.reports import ANOMALIES_DIR, BLESSING_DIR, PUSHED_DIR, REPORT_OUTPUT
from pipelines.run_dir import RUN_FILE, RunFolder, read_record
from pipelines import stopping
from pipelines.stopping import Terminated, run_task
from pipelines.task_cache import HIT, TaskCache, caching_tasks, saved_seconds

TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
PROGRESS = names.PROGRESS_PREFIX  # the trainer's progress lines (components/train/telemetry.py: Progress)
_EPOCH = re.compile(r"epoch (\d+)/(\d+)")
CACHED = "CACHED"  # a step whose outputs an earlier run with the same inputs made (pipelines/task_cache.py)
TERMINATED = "TERMINATED"  # a signal stopped the run (pipelines/stopping.py); `gpupipe resume` goes on


def step_column() -> int:
    """The width of the step names in the summary."""
    return max(len(name) for name in registry.names())


@dataclass
class StepResult:
    name: str
    status: str = "NOT RUN"
    seconds: Optional[float] = None
    peak_rss_mb: Optional[float] = None  # its task process's (pipelines/stopping.py: run_task); None if reused
    task_seconds: Optional[float] = None  # its task process's, start to exit (`seconds` adds the run's cache work)


@dataclass
class RunSummary:
    pipeline: str
    status: str
    seconds: float
    steps: List[StepResult]
    run_dir: Optional[str] = None
    log_file: Optional[str] = None
    blessing: Optional[dict] = None
    push: Optional[dict] = None
    validation: Optional[dict] = None
    ingest: Optional[dict] = None  # the examples' manifest
    report: Optional[str] = None  # the run report's page, beside the run
    errors: List[str] = field(default_factory=list)
    notified: Optional[str] = None  # what notify.webhook_url was told, or why not
    saved: Dict[str, float] = field(default_factory=dict)  # reused tasks: what their first run took
    terminated: Optional[Terminated] = None  # the signal that stopped the run
    stopped_at: Optional[str] = None  # the step it stopped at

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS"

    @property
    def stopped(self) -> str:
        """`terminated by SIGTERM at step train` ("" for a run no signal stopped)."""
        return f"{self.terminated} at step {self.stopped_at}" if self.terminated else ""

    def stopped_line(self) -> str:
        """The one line a stopped run prints."""
        goes_on = f"; `gpupipe resume {self.run_dir}` continues it" if self.run_dir else ""
        return f"gpupipe run {self.pipeline}: {self.stopped}{goes_on}"

    @property
    def cached(self) -> List[str]:
        return [s.name for s in self.steps if s.status == CACHED]

    def render(self) -> str:
        lines = [f"gpupipe run {self.pipeline}: {self.status} in {self.seconds:.1f}s"]
        width = step_column()
        for step in self.steps:
            took = f"{step.seconds:6.1f}s" if step.seconds is not None else "      -"
            lines.append(f"  {step.name:<{width}} {step.status:<8} {took}")
        if self.cached:
            lines.append(f"  cached: {', '.join(self.cached)} reused from an earlier run with the same inputs "
                         f"(saved {sum(self.saved.values()):.1f}s; --no-cache runs them)")
        if self.ingest and self.ingest.get("rows_dropped_missing_label"):
            dropped, label = self.ingest["rows_dropped_missing_label"], self.ingest.get("label", "label")
            label = self.ingest.get("columns", {}).get(label, label)  # as the data names it
            lines.append(f"  ingest: {dropped} row(s) without a '{label}' dropped (empty or one of data.na_values)")
        if self.validation:
            v = self.validation
            lines += [f"  warning: validate: {line}" for line in v.get("warnings", [])]
            if v.get("baseline"):
                drift = f"{len(v['drift'])} feature(s) drifted" if v["drift"] else "no drift past thresholds"
                lines.append(f"  data drift vs {v['baseline']}: {drift}")
            else:
                lines.append("  data drift: no baseline yet (nothing served)")
        if self.blessing:
            b = self.blessing
            verdict = "blessed" if b["blessed"] else "not blessed"
            lines.append(f"  eval {b['metric']}: {b['value']:.4f} (threshold {b['threshold']:.4f}): {verdict}")
            if b.get("baseline_version") is not None:
                lines.append(f"  baseline: served version {b['baseline_version']}, "
                             f"{b['metric']} {b['baseline_value']:.4f}")
            for reason in b.get("reasons", []):
                lines.append(f"    - {reason}")
        if self.push:
            if self.push.get("pushed"):
                lines.append(f"  pushed version {self.push['version']}: {self.push['path']}")
            else:
                lines.append(f"  not pushed: {self.push.get('reason')}")
        if self.report:
            lines.append(f"  run report: {self.report}")
        if self.notified:
            lines.append(f"  {self.notified}")
        if self.terminated:
            lines.append(f"  {self.stopped_line().split(': ', 1)[1]}")
        for err in self.errors:
            lines.append(f"error: {err}")
        if self.log_file:
            lines.append(f"  full log: {self.log_file}")
        return "\n".join(lines)


class _ProgressTee(io.TextIOBase):
    """Stands in for sys.stdout during the run: every line goes to the log file; kfp.local's
    task start/finish lines are timed and echoed as one line each, and the trainer's
    `progress:` lines (epoch, step, loss, examples/s, ETA) shown live: rewritten in place
    on a terminal, as plain lines (the first, the last, and one every PLAIN_EVERY seconds)
    otherwise. `quiet`: nothing until the summary."""

    PLAIN_EVERY = 5.0

    def __init__(self, log: TextIO, console: TextIO, steps: Dict[str, StepResult], quiet: bool = False):
        self._log, self._console, self._steps = log, console, steps
        self.started: Dict[str, float] = {}
        self._buffer = ""
        self._quiet = quiet
        self._tty = console.isatty()
        self._running: Optional[str] = None
        self._progress_shown = 0.0
        self._progress_open = False  # a progress line waits for its newline (terminal)
        self.saved: Dict[str, float] = {}  # reused tasks: the seconds their first run took
        self._width = step_column()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._log.write(text)
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self._observe(without_colours(line))
        return len(text)

    def flush(self) -> None:
        self._log.flush()

    def _say(self, text: str) -> None:
        if self._quiet:
            return
        if self._progress_open:
            self._console.write("\n")
            self._progress_open = False
        print(text, file=self._console, flush=True)

    def _progress(self, line: str) -> None:
        if self._quiet:
            return
        text = f"  {self._running or '':<{self._width}} {line.split(PROGRESS, 1)[1].strip()}"
        if self._tty:
            self._console.write(f"\r\x1b[K{text}")
            self._console.flush()
            self._progress_open = True
            return
        now = time.monotonic()
        m = _EPOCH.search(line)
        edge = m is not None and (m.group(1) == "1" or m.group(1) == m.group(2))
        if edge or now - self._progress_shown >= self.PLAIN_EVERY:
            self._progress_shown = now
            print(text, file=self._console, flush=True)

    def _observe(self, line: str) -> None:
        event = kfp_local_task_event(line)
        if event:  # kfp.local names the task; the summary, the step (its function's name)
            step = registry.by_task(event[0])
            event = (step.name if step else event[0], event[1])
        if event and event[1] is None:
            name = event[0]
            self.started[name] = time.monotonic()
            self._running = name
            if name in self._steps:
                self._steps[name].status = "RUNNING"
            self._say(f"  {name:<{self._width}} running ...")
        elif HIT in line:
            self.saved.update(saved_seconds(line))
        elif event:
            name, status = event
            self._running = None
            if name in self.saved and status == "SUCCESS":
                status = CACHED
            if name in self._steps:
                self._steps[name].status = status
                self._steps[name].seconds = time.monotonic() - self.started.get(name, time.monotonic())
                self._steps[name].peak_rss_mb = stopping.take_peak_rss_mb()
                self._steps[name].task_seconds = stopping.take_task_seconds()
                self._say(f"  {name:<{self._width}} {status} in {self._steps[name].seconds:.1f}s")
        elif line.lstrip().startswith(PROGRESS):  # kfp.local indents a task's own lines
            self._progress(line)


def resolve_local_path(path: str) -> str:
    """Relative local paths start at the working directory; object store URIs (gs://, s3://)
    and synthetic sources pass through."""
    return path if is_remote(path) or is_synthetic(path) else str(Path(path).expanduser().resolve())


def preflight(config: PipelineConfig, params: dict) -> None:
    """Fails fast, before any task starts, on a missing data file or a missing column."""
    data = config.data
    check_columns(params[P_DATA_SOURCE], data.label, data.features, data.split.key, data.format)


def _read_json(path: Path) -> Optional[dict]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def run_local(config: PipelineConfig, runs_dir: str = "runs", overrides: Optional[dict] = None,
              console: Optional[TextIO] = None, quiet: bool = False, warm: Optional[bool] = None,
              cache: bool = True, resumes: Optional[str] = None) -> RunSummary:
    """Runs every step through kfp.local (SubprocessRunner, this Python environment) and
    returns the summary. Raises GpupipeError for input problems found before the run.
    `warm` (default: unless GPUPIPE_WARM_START=0): tasks start as forks of a process that
    has imported their libraries (pipelines/warm.py), the same command in a warm process.
    `cache`: the steps the registry marks `cached` reuse the outputs of an earlier run with the
    same inputs, as KFP's cache does on the cluster (pipelines/task_cache.py); False reuses
    nothing (what runs is still stored). `console`: where progress goes (default: sys.stderr
    as it is at the call, not at import, so an in-process caller that swaps it is safe).
    A stop signal (pipelines/stopping.py: Terminated, raised by the command's handler) stops
    the running task and the warm server; the summary then says where (`terminated`,
    `stopped_at`), as do the run's folder (run.log, RUN_FILE, summary.txt)."""
    from pipelines.warm import enabled, warm_tasks

    console = sys.stderr if console is None else console
    warm = enabled() if warm is None else warm
    from kfp import local

    if config.training.pods.workers > 1:
        # Multi-worker training is a JobSet or TFJob on the cluster; on one machine it runs in-process.
        print(f"gpupipe run {config.name}: training.pods.workers={config.training.pods.workers} runs as a "
              f"{config.training.pods.launcher} on the cluster; training in-process here", file=console, flush=True)
        config = config.model_copy(update={"training": config.training.model_copy(update={"workers": 1})})
    # The object stores' settings (storage.s3) as the cluster's tasks get them; a variable
    # already set in this shell wins (e.g. a MinIO endpoint reached from this machine).
    for name, value in config.storage.environment().items():
        os.environ.setdefault(name, value)
    params = {**run_parameters(config), **(overrides or {})}
    params[P_DATA_SOURCE] = resolve_local_path(params[P_DATA_SOURCE])
    params[P_SERVING_BASE] = resolve_local_path(params[P_SERVING_BASE])
    preflight(config, params)

    pipeline_root = Path(runs_dir).resolve()
    pipeline_root.mkdir(parents=True, exist_ok=True)
    record = {"config": config.model_dump(mode="json", exclude_unset=True), "parameters": params,
              **({"resumes": resumes} if resumes else {})}
    steps = {name: StepResult(name) for name in registry.names()}
    pipeline = create_pipeline(config, local=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root), raise_on_error=False)
    folder = RunFolder(pipeline_root, config.name, record)

    error_fd, error_file = tempfile.mkstemp(prefix="gpupipe-errors-", suffix=".txt")
    os.close(error_fd)
    previous_error_env = os.environ.get(ERROR_FILE_ENV)
    previous_log_level = os.environ.get(TF_LOG_LEVEL_ENV)
    os.environ[ERROR_FILE_ENV] = error_file
    os.environ[TF_LOG_LEVEL_ENV] = "2"  # the tasks log TensorFlow's errors to run.log
    started = time.monotonic()
    if not quiet:
        print(f"gpupipe run {config.name}: running {len(steps)} steps locally (kfp.local)", file=console,
              flush=True)
    stopped = None
    tee = None
    try:
        with folder.open_log() as log, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tee = _ProgressTee(log, console, steps, quiet)
            with contextlib.redirect_stdout(tee), contextlib.redirect_stderr(tee), \
                    kfp_local_run_name(folder.name), kfp_local_task_runner(run_task), \
                    (warm_tasks() if warm else contextlib.nullcontext()), \
                    caching_tasks(TaskCache(str(pipeline_root / ".cache"), reuse=cache)):
                pipeline(**params)
                stopping.check()  # a signal whose exception was lost (pipelines/stopping.py: _Handler)
    except Terminated as stop:  # the task and the warm server are stopped by now (their own cleanup)
        stopped = stop
        stopping.handled()
    except BaseException:
        folder.keep_log()
        raise
    finally:
        for name, previous in ((ERROR_FILE_ENV, previous_error_env), (TF_LOG_LEVEL_ENV, previous_log_level)):
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous
    seconds = time.monotonic() - started
    errors = [line.strip() for line in Path(error_file).read_text(encoding="utf-8").splitlines() if line.strip()]
    os.unlink(error_file)

    run_dir = folder.path
    status = "SUCCESS" if all(s.status in ("SUCCESS", CACHED) for s in steps.values()) else "FAILURE"
    stopped_at = _stopped_at(steps, tee) if stopped else None
    if stopped:
        status, errors = TERMINATED, []
    failed = [s.name for s in steps.values() if s.status == "FAILURE"]
    if status == "FAILURE" and not errors:
        errors = [f"step {', '.join(failed) or '?'} failed; see the full log"]
    summary = RunSummary(pipeline=config.name, status=status, seconds=seconds, steps=list(steps.values()),
                         run_dir=str(run_dir) if run_dir else None, log_file=str(folder.log), errors=errors,
                         saved=tee.saved if tee else {}, terminated=stopped, stopped_at=stopped_at)
    if run_dir is not None:
        summary.blessing = _read_json(run_dir.joinpath(*BLESSING_DIR, names.BLESSING_FILE))
        summary.push = _read_json(run_dir.joinpath(*PUSHED_DIR, names.PUSH_RESULT_FILE))
        summary.validation = _read_json(run_dir.joinpath(*ANOMALIES_DIR, names.VALIDATION_FILE))
        summary.ingest = _read_json(run_dir / registry.INGEST / "examples" / names.MANIFEST_FILE)
        page = run_dir.joinpath(*REPORT_OUTPUT)
        if page.is_file():  # the task's output, also under the name a user looks for
            beside = run_dir / names.RUN_REPORT_PAGE
            try:
                os.link(page, beside)
            except OSError:
                shutil.copyfile(page, beside)
            summary.report = str(beside)
    if config.notify.webhook_url and not stopped:  # a stopped run has seconds to end in: no remote calls
        summary.notified = notify_outcome(config, summary)
    extra = {"terminated": {"signal": stopped.name, "step": stopped_at}} if stopped else {}
    steps_record = {s.name: {k: v for k, v in asdict(s).items() if k != "name"} for s in summary.steps}
    folder.finish(status, summary.render(), note=summary.stopped, steps=steps_record, **extra)
    summary.log_file = str(folder.log)
    return summary


def _stopped_at(steps: Dict[str, StepResult], tee: Optional[_ProgressTee]) -> str:
    """The step a signal stopped the run at: the one running (marked TERMINATED), else the next."""
    running = next((s for s in steps.values() if s.status == "RUNNING"), None)
    if running is None:
        return next((s.name for s in steps.values() if s.status == "NOT RUN"), "the end")
    running.status = TERMINATED
    started = tee.started.get(running.name) if tee else None
    running.seconds = time.monotonic() - started if started is not None else None
    return running.name


def resume_local(run_dir: str, console: Optional[TextIO] = None, quiet: bool = False, warm: Optional[bool] = None,
                 cache: bool = True) -> RunSummary:
    """Runs a local run again with its own config and parameters (its RUN_FILE), into the same
    runs folder: the tasks that finished are reused from the cache, the failed one and those
    after it run."""
    from pipelines.config import parse_config

    saved = read_record(Path(run_dir))
    if saved is None:
        raise GpupipeError(f"{run_dir}: no {RUN_FILE} here; give the folder of a local run (runs/<pipeline>-<time>), "
                           "as `gpupipe run` prints it")
    config = parse_config(saved["config"], origin=str(Path(run_dir) / RUN_FILE))
    return run_local(config, runs_dir=str(Path(run_dir).resolve().parent), overrides=saved["parameters"],
                     console=console, quiet=quiet, warm=warm, cache=cache, resumes=str(Path(run_dir).resolve()))


def notify_outcome(config: PipelineConfig, summary: RunSummary) -> str:
    """Tells notify.webhook_url how the run ended (components/notify), as the cluster's exit
    handler does; returns the summary's line about it. A webhook that fails is a warning."""
    from components.notify.logic import notify, outcome_of

    decided = None
    if summary.push is not None:
        decided = {**{k: (summary.blessing or {}).get(k) for k in ("blessed", "metric", "value", "threshold")},
                   "reasons": (summary.blessing or {}).get("reasons", []), **summary.push}
    outcome = outcome_of(summary.status, decided)
    try:
        sent = notify(config.notify, config.name, outcome, decided, error=(summary.errors or [""])[0])
    except GpupipeError as err:
        return f"warning: {err}"
    return f"notified: {outcome.replace('_', ' ')}" if sent else f"not notified: {outcome} is not in notify.on"
