"""`gpupipe report`: a local run's HTML report, or the pool view of a config's recent local runs."""
from __future__ import annotations

import argparse
from pathlib import Path

from components.contracts.errors import GpupipeError
from pipelines.config import load_config


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.reports import open_in_browser, pool_runs, render_pool, run_page

    target = Path(args.target)
    if target.is_file():  # a config: the pool view of its recent local runs
        if args.open:
            raise GpupipeError(f"report --open: {target} is a config; --open opens a run's page (give RUN_DIR)")
        if not 0 <= args.input_bound <= 1:
            raise GpupipeError(f"report --input-bound {args.input_bound}: give a fraction between 0 and 1, e.g. 0.3")
        config = load_config(target)
        runs_dir = Path(args.runs_dir)
        print(render_pool(config.name, runs_dir, pool_runs(config.name, runs_dir, args.limit), args.input_bound))
        return 0
    page = run_page(target)
    print(page)
    if args.open and not open_in_browser(page):
        raise GpupipeError(f"report --open: no web browser found to open {page}; open the file by hand")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("report", help="RUN_DIR: print the path of the run's HTML report (--open opens it); CONFIG: "
                                      "the pool view of its recent local runs (GPU-hours, examples/s, input wait, "
                                      "GPU use, preemptions, cost)")
    p.add_argument("target", metavar="RUN_DIR|CONFIG")
    p.add_argument("--open", action="store_true", help="RUN_DIR: open the page in a web browser")
    p.add_argument("--runs-dir", default="runs", help="CONFIG: where the local runs are (default: runs/)")
    p.add_argument("--limit", type=int, default=10, help="CONFIG: this many of the newest runs")
    p.add_argument("--input-bound", type=float, default=0.3,  # pipelines.reports.INPUT_BOUND
                   help="CONFIG: flag runs whose input-wait fraction is above this (default: 0.3)")
    p.set_defaults(func=cmd_report)
