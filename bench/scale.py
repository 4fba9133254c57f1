"""Scale benchmark (issue #36): where `gpupipe run` spends its time and memory on a large
click-through table.

Writes the synthetic click-through table (components/sources/synthetic.py: write_csv) as a
CSV of N rows, runs `gpupipe run` on configs/ctr.yaml with data.source pointed at it and
training.epochs 1 (a temporary copy of the config; every other setting as committed), in a
fresh runs directory with nothing reused (--no-cache), and prints:

- each step's wall time, its task process's (start to exit: what a pod runs, without the
  local run's own work between tasks) and its peak RSS (the run's record, gpupipe-run.json);
- the train task's phases (its report's `phases`: seconds, share, cores busy), and its time
  outside the epochs' training steps as a share of its task process's;
- ingest's rows/s (CSV rows over its task process's time, statistics included) and
  evaluate's (eval rows over its task process's time, end to end; and over its scoring pass
  alone, the steady state, from evaluation.json's `seconds`: at 200k eval rows the task's
  fixed start dominates).

Tasks start cold by default (`gpupipe run --cold`: a new Python per task, as a pod runs it),
so each peak RSS is that task's own; --warm forks them from the warm server, whose pages
(every step's libraries) then count in each task's RSS.

  python -m bench.scale [--rows 2000000] [--keep-data] [--keep-run] [--warm] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "ctr.yaml"


def make_table(path: Path, rows: int) -> float:
    """Writes the table (unless a file of it is there, from --keep-data); the seconds it took."""
    from components.sources.synthetic import write_csv

    if path.is_file():
        return 0.0
    started = time.monotonic()
    write_csv(str(path), rows)
    return time.monotonic() - started


def scale_config(csv: Path, workdir: Path) -> Path:
    raw = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    raw["data"]["source"] = str(csv)
    raw["training"]["epochs"] = 1
    path = workdir / "ctr-scale.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def run(config: Path, workdir: Path, warm: bool) -> dict:
    command = [sys.executable, "-m", "pipelines.cli", "run", str(config), "--quiet", "--no-cache",
               "--runs-dir", str(workdir / "runs"), "--serving-base", str(workdir / "serving"),
               *([] if warm else ["--cold"])]
    started = time.monotonic()
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    if out.returncode != 0:
        raise SystemExit(f"run failed:\n{out.stdout}\n{out.stderr}")
    run_dir = next(p for p in (workdir / "runs").glob("ctr-*") if p.is_dir())
    record = json.loads((run_dir / "gpupipe-run.json").read_text(encoding="utf-8"))
    manifest = json.loads((run_dir / "ingest" / "examples" / "manifest.json").read_text(encoding="utf-8"))
    train = json.loads((run_dir / "train" / "report" / "report.json").read_text(encoding="utf-8"))
    evaluation = json.loads((run_dir / "evaluate" / "blessing" / "evaluation.json").read_text(encoding="utf-8"))
    return {"wall": wall, "summary": out.stdout, "steps": record["steps"], "manifest": manifest, "train": train,
            "evaluation": evaluation}


def render(rows: int, csv_mb: float, result: dict) -> str:
    steps, train, manifest = result["steps"], result["train"], result["manifest"]
    split_rows = manifest.get("rows") or {}
    ingested = sum(split_rows.values()) + (manifest.get("rows_dropped_missing_label") or 0)
    eval_rows = result["evaluation"].get("metrics", {}).get("examples") or split_rows.get("eval")
    lines = [f"{rows:,} rows ({csv_mb:,.0f} MB of CSV), configs/ctr.yaml with training.epochs 1: "
             f"run {result['wall']:.1f} s", "", "| step | seconds | its task's process | peak RSS (MB) |",
             "|---|---:|---:|---:|"]

    def figure(value, spec: str) -> str:
        return format(value, spec) if value is not None else "-"

    for name, step in steps.items():
        lines.append(f"| {name} | {figure(step.get('seconds'), '.1f')} | {figure(step.get('task_seconds'), '.1f')} | "
                     f"{figure(step.get('peak_rss_mb'), ',.0f')} |")
    total = sum(p["seconds"] for p in train.get("phases", []))
    task = steps["train"].get("task_seconds") or steps["train"]["seconds"]
    lines += ["", f"train's phases ({total:.1f} s of its task process's {task:.1f} s, start to exit; the rest is "
                  "the process's exit after the report):", "",
              "| phase | seconds | share | cores busy |", "|---|---:|---:|---:|"]
    for p in train.get("phases", []):
        busy = p["cpu_seconds"] / p["seconds"] if p["seconds"] else 0.0
        lines.append(f"| {p['name']} | {p['seconds']:.1f} | {p['seconds'] / total:.1%} | {busy:.2f} |")
    epochs = sum(p["seconds"] for p in train.get("phases", []) if p["name"].startswith("epoch "))
    if epochs:
        lines += ["", f"train outside the epochs' training steps: {task - epochs:.1f} s of the task process's "
                      f"{task:.1f} s = {(task - epochs) / task:.1%}"]
    ingest = steps["ingest"].get("task_seconds") or steps["ingest"]["seconds"]
    lines += ["", f"ingest: {ingested / ingest:,.0f} rows/s over its task process's time ({ingested:,} rows, statistics "
                  "included)"]
    if eval_rows:
        evaluate = steps["evaluate"].get("task_seconds") or steps["evaluate"]["seconds"]
        lines.append(f"evaluate: {eval_rows / evaluate:,.0f} eval rows/s end to end ({eval_rows:,} rows over its task "
                     "process's time: the process's start and exit, imports and KFP's executor included)")
        spent = result["evaluation"].get("seconds") or {}
        if spent.get("scoring_pass"):
            lines.append(f"evaluate's scoring pass: {eval_rows / spent['scoring_pass']:,.0f} eval rows/s (the split read, "
                         "parsed and scored once, by the model and the linear baseline); run_evaluate "
                         + ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    for key in ("examples_per_second", "first_epoch_seconds", "train_seconds", "input_wait_fraction",
                "input_core_us_per_example", "feed_examples_per_core_second", "input_cache"):
        lines.append(f"train {key}: {train.get(key)}")
    auc = result["evaluation"].get("metrics", {}).get("auc")
    if auc is not None:
        lines.append(f"eval auc: {auc:.4f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--keep-data", action="store_true", help="keep the CSV (and reuse one kept before)")
    p.add_argument("--keep-run", action="store_true",
                   help="keep the run (WORKDIR/run/runs/ctr-*: its examples and model, for bench.evaluate)")
    p.add_argument("--warm", action="store_true", help="fork the tasks from the warm server (gpupipe run's default)")
    p.add_argument("--workdir", help="where the CSV and the run go (default: a temporary directory)")
    args = p.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    csv = workdir / f"ctr-{args.rows}.csv"
    try:
        seconds = make_table(csv, args.rows)
        csv_mb = csv.stat().st_size / 2 ** 20
        print(f"table: {csv} ({csv_mb:,.0f} MB)" + (f", written in {seconds:.1f} s" if seconds else ", kept"),
              flush=True)
        run_dir = workdir / "run"
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir()
        result = run(scale_config(csv, run_dir), run_dir, args.warm)
        print(render(args.rows, csv_mb, result))
    finally:
        if not args.keep_run:
            shutil.rmtree(workdir / "run", ignore_errors=True)
        if not args.keep_data:
            csv.unlink(missing_ok=True)
            if not args.workdir:
                shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
