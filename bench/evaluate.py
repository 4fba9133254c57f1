"""Evaluate alone on a kept run's artifacts (issue #36 point 6): the step's logic
(`run_evaluate`, with configs/ctr.yaml's evaluation section) on a model and its examples,
in a fresh Python as a cold task runs it, timed from before the process starts: wall and
CPU seconds (every thread's), eval rows/s end to end and in the scoring pass alone, where
the time went (evaluation.json's `seconds`), the load average; and the metrics, so two
runs (the column blocks and the row shards, or two commits) can be compared.

  python -m bench.evaluate --run RUN_DIR [--repeat 3] [--rows-only] [--json OUT]

RUN_DIR is a `gpupipe run` record directory holding ingest/examples and train/model
(`python -m bench.scale --keep-run`). `--rows-only` hides the column blocks (reads the row
shards, as for data gpupipe did not write). Run with another checkout's PYTHONPATH to time
that checkout's evaluate: the child process imports whatever `components` is first on it.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time
t0 = time.monotonic()
import components  # noqa: F401
import tensorflow  # noqa: F401
from components.evaluate.logic import run_evaluate
from components.evaluate.settings import EvaluationSettings
imported = time.monotonic() - t0
model, examples, out, settings, rows_only = sys.argv[1:6]
if rows_only == "1":
    import components.contracts.blocks as blocks
    blocks.readable_blocks = lambda *args: []
evaluation, _ = run_evaluate(model_dir=model, examples_dir=examples, blessing_dir=out + "/blessing",
                             report_md=out + "/report.md", settings=EvaluationSettings.model_validate_json(settings))
print(json.dumps({"imports": imported, "seconds": evaluation.seconds, "metrics": evaluation.metrics,
                  "linear": evaluation.linear, "slices": evaluation.slices}))
"""


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def once(run: Path, rows_only: bool) -> dict:
    raw = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text(encoding="utf-8"))["evaluation"]
    from components.evaluate.settings import EvaluationSettings

    settings = EvaluationSettings.model_validate(raw).model_dump_json()
    with tempfile.TemporaryDirectory(prefix="gpupipe-bench-evaluate-") as out:
        before, load = resource.getrusage(resource.RUSAGE_CHILDREN), load_average()
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", CHILD, str(run / "train" / "model"),
                               str(run / "ingest" / "examples"), out, settings, "1" if rows_only else "0"],
                              capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(wall=wall, load_before=load, load_after=load_average(),
                  cpu=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                  peak_rss_mb=after.ru_maxrss / 1024)
    return result


def render(result: dict) -> str:
    rows = result["metrics"]["examples"]
    spent = result["seconds"]
    return (f"{rows:,} eval rows: process {result['wall']:.2f} s wall, {result['cpu']:.2f} CPU-s "
            f"({rows / result['wall']:,.0f} rows/s end to end; imports {result['imports']:.2f} s); scoring pass "
            f"{spent['scoring_pass']:.2f} s wall, {spent.get('scoring_pass_cpu', 0):.2f} CPU-s "
            f"({rows / spent['scoring_pass']:,.0f} rows/s); " + ", ".join(f"{k} {v:.2f}" for k, v in spent.items())
            + f"; auc {result['metrics'].get('auc', float('nan')):.6f}, linear auc "
            f"{(result.get('linear') or {}).get('auc', float('nan')):.6f}; peak RSS {result['peak_rss_mb']:,.0f} MB; "
            f"load {result['load_before']} -> {result['load_after']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a run record directory (ingest/examples, train/model)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--rows-only", action="store_true", help="read the row shards, not the column blocks")
    p.add_argument("--json", help="write the last result here")
    args = p.parse_args()
    for _ in range(args.repeat):
        result = once(Path(args.run), args.rows_only)
        print(render(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
