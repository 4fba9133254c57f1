"""`gpupipe run` (the pipeline end to end on this machine, kfp.local) and `gpupipe resume`
(a local run again, reusing what finished, also one a signal stopped).

Both stop the same way on SIGTERM, SIGINT and SIGHUP (pipelines/stopping.py, installed by
pipelines/cli/__init__.py): the running task and the warm server stop, the run's folder
records `terminated by SIGTERM at step X`, one line is printed, and the exit code is 128 +
the signal's number (143, 130, 129)."""
from __future__ import annotations

import argparse
import sys

from pipelines import steps
from pipelines.config import load_config


def cmd_run(args: argparse.Namespace) -> int:
    from pipelines.local_run import run_local

    config = load_config(args.config)
    overrides = {}
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.serving_base is not None:
        overrides["serving_base"] = args.serving_base
    if args.data_source is not None:
        overrides["data_source"] = args.data_source
    summary = run_local(config, runs_dir=args.runs_dir, overrides=overrides, quiet=args.quiet,
                        warm=False if args.cold else None, cache=not args.no_cache)
    return _ended(summary)


def _ended(summary) -> int:
    """The summary and 0 or 1; a run a signal stopped: one line, and 128 + the signal (143 for SIGTERM)."""
    if summary.terminated:
        print(summary.stopped_line(), file=sys.stderr, flush=True)
        return summary.terminated.exit_code
    print(summary.render())
    return 0 if summary.ok else 1


def cmd_resume(args: argparse.Namespace) -> int:
    from pipelines.local_run import resume_local

    summary = resume_local(args.run_dir, quiet=args.quiet, warm=False if args.cold else None)
    return _ended(summary)


def add_commands(sub) -> None:
    p = sub.add_parser("run", help="run the pipeline end to end on this machine (kfp.local)")
    p.add_argument("config")
    p.add_argument("--runs-dir", default="runs", help="local pipeline root (default: runs/)")
    p.add_argument("--epochs", type=int, help="override training.epochs for this run")
    p.add_argument("--data-source", help="override data.source for this run")
    p.add_argument("--serving-base", help="override serving.base for this run")
    p.add_argument("--quiet", action="store_true", help="print the summary only (no live progress)")
    p.add_argument("--cold", action="store_true", help="start every task in a new Python, as a pod does (default: "
                                                       "tasks fork from one process that imported their libraries; "
                                                       "GPUPIPE_WARM_START=0 does the same)")
    cached = [step.name for step in steps.registered() if step.cached]  # the registry's, never a copy
    p.add_argument("--no-cache", action="store_true", help="run every step, reusing no earlier run's outputs "
                                                           f"(default: {', '.join(cached[:-1])} and {cached[-1]} reuse "
                                                           "those of a run with the same inputs, as KFP's cache does)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("resume", help="run a local run again with its own config and parameters: what finished is "
                                      "reused, the failed step and those after it run")
    p.add_argument("run_dir", help="the run's folder, runs/<pipeline>-<time>")
    p.add_argument("--quiet", action="store_true", help="print the summary only")
    p.add_argument("--cold", action="store_true", help="start every task in a new Python, as a pod does")
    p.set_defaults(func=cmd_resume)
