"""End-to-end benchmark: `gpupipe run CONFIG` N times (default 3), each in a fresh
process as a user runs it, and what the time went to.

Prints per run and as the median over the runs: the pipeline's wall time, each step's
time, the train task's first and steady epoch and the share of the train task spent
outside `fit` (start-up, model build, report, export); each step's start-up (a fresh
Python importing the KFP executor and the step's logic, median of 3); and the peak RSS
of the largest process of the runs. Accuracy (or the primary metric) of each run, so
speed is never bought with quality.

Local runs start their tasks warm (pipelines/warm.py) unless --cold; the start-up column is
always the cold start, what each pod on the cluster pays.

  python -m bench.e2e [--config configs/penguins.yaml] [--runs 3] [--data-source S] [--epochs N] [--cold]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from components.contracts.compat.kfp import EXECUTOR_ENV, EXECUTOR_MODULE

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("fingerprint", "ingest", "validate", "train", "evaluate", "push", "report")
_STEP_LINE = re.compile(r"^  (\w+)\s+SUCCESS\s+([\d.]+)s$")
_METRIC_LINE = re.compile(r"^  eval (\w+): ([\d.]+) ")


# What each step's task loads before it can work: the KFP executor, the step, and the
# libraries its logic imports where it needs them (TensorFlow is imported inside
# functions, so importing the logic module alone would not show it). The storage client
# of the config's data source (fingerprint, ingest) and serving base (fingerprint, push)
# comes on top: the storage layer imports google-cloud-storage only for gs:// and boto3
# only for s3:// (STORE_CLIENTS).
STEP_LIBRARIES = {
    "fingerprint": ["components.sources.readers", "components.store.served"],
    "ingest": ["tensorflow", "tfx_bsl.coders.example_coder", "pyarrow.csv"],
    "validate": ["tensorflow_data_validation"],
    "train": ["components.train.model", "components.train.runtime", "components.train.data", "components.train.optimizers",
              "components.train.resilience", "components.train.telemetry", "components.train.export",
              "components.train.target", "components.train.report", "components.contracts.compat.tf_keras"],
    "evaluate": ["tensorflow"],
    "push": ["tensorflow", "tensorflow_serving.apis.prediction_log_pb2"],
    "report": ["plotly.io", "tensorflow_metadata.proto.v0.anomalies_pb2", "google.protobuf.text_format"],
}
STORE_CLIENTS = {"gs://": "google.cloud.storage", "s3://": "boto3", "minio://": "boto3"}


def store_clients(step: str, data_source: str, serving_base: str) -> list:
    uses = {"fingerprint": (data_source, serving_base), "ingest": (data_source,), "push": (serving_base,)}
    return sorted({m for uri in uses.get(step, ()) for prefix, m in STORE_CLIENTS.items() if uri.startswith(prefix)})


def startup_seconds(step: str, repeats: int = 3, clients: tuple = ()) -> float:
    """A fresh Python importing what the step's task loads before its work starts, with
    the variables of the task's command (compat.kfp.EXECUTOR_ENV: kfp then skips its
    compile-time imports, the KFP and Kubernetes clients, about 1.1 s)."""
    modules = [EXECUTOR_MODULE, f"components.{step}.component", f"components.{step}.logic",
               *STEP_LIBRARIES[step], *clients]
    code = "import " + ", ".join(modules)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, stderr=subprocess.DEVNULL,
                       env={**os.environ, **EXECUTOR_ENV})
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def one_run(config: str, workdir: Path, extra: list) -> dict:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", config, "--quiet", "--runs-dir",
                          str(workdir / "runs"), "--serving-base", str(workdir / "serving"), *extra],
                         cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"run failed:\n{out.stdout}\n{out.stderr}")
    steps = {m.group(1): float(m.group(2)) for m in map(_STEP_LINE.match, out.stdout.splitlines()) if m}
    metric = next((m.groups() for m in map(_METRIC_LINE.match, out.stdout.splitlines()) if m), ("?", "nan"))
    pipeline_seconds = float(re.search(r"SUCCESS in ([\d.]+)s", out.stdout).group(1))
    report = json.loads(next((workdir / "runs").glob("*/train/report/report.json")).read_text())
    fit = report["train_seconds"]
    return {"wall": wall, "pipeline": pipeline_seconds, "steps": steps, "metric": metric[0],
            "value": float(metric[1]), "first_epoch": report["first_epoch_seconds"],
            "steady_epoch": report["steady_epoch_seconds"], "fit": fit,
            "outside_fit_share": 1 - fit / steps["train"], "traces": report["train_function_traces"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/penguins.yaml")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--data-source")
    p.add_argument("--epochs", type=int)
    p.add_argument("--cold", action="store_true", help="gpupipe run --cold: each task in a new Python, as a pod")
    args = p.parse_args()
    extra = (["--data-source", args.data_source] if args.data_source else []) + \
            (["--epochs", str(args.epochs)] if args.epochs else []) + (["--cold"] if args.cold else [])

    print("start-up per step (a fresh python importing the KFP executor, the step and its libraries; "
          "median of 3):")
    from pipelines.config import load_config

    data_source = args.data_source or load_config(ROOT / args.config).data.source
    for step in STEPS:  # the runs below push to a local serving base (--serving-base in one_run)
        clients = store_clients(step, data_source, "")
        print(f"  {step:<11} {startup_seconds(step, clients=tuple(clients)):5.2f} s"
              + (f"  (with {', '.join(clients)})" if clients else ""))

    runs = []
    for i in range(args.runs):
        workdir = Path(tempfile.mkdtemp(prefix="gpupipe-bench-e2e-"))
        try:
            r = one_run(args.config, workdir, extra)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        runs.append(r)
        steps = "  ".join(f"{s} {r['steps'][s]:.1f}" for s in STEPS)
        print(f"run {i + 1}: pipeline {r['pipeline']:.1f} s (wall {r['wall']:.1f} s)  {steps}  "
              f"{r['metric']} {r['value']:.4f}  first epoch {r['first_epoch']:.2f} s, steady {r['steady_epoch']:.2f} s,"
              f" train outside fit {r['outside_fit_share']:.0%}, traces {r['traces']}")

    med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    print(f"\n{args.config}, median of {len(runs)} runs:")
    print(f"  pipeline          {med('pipeline'):.1f} s   (process wall {med('wall'):.1f} s)")
    for step in STEPS:
        print(f"  {step:<17} {statistics.median(r['steps'][step] for r in runs):.1f} s")
    print(f"  first epoch       {med('first_epoch'):.2f} s")
    print(f"  steady epoch      {med('steady_epoch'):.2f} s")
    print(f"  train outside fit {med('outside_fit_share'):.0%} of the train task")
    print(f"  {runs[0]['metric']:<17} {min(r['value'] for r in runs):.4f} (lowest of the runs)")
    print(f"  peak RSS          {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB "
          "(the largest process of all runs)")


if __name__ == "__main__":
    main()
