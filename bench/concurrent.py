"""Runs of one config at once (issue #39, acceptance 2): N `gpupipe run`s started together in
one runs directory, with one cache and one serving base, as N users or CI jobs start them.

Prints the wall time of all N, each run's status and folder, the versions pushed, and whether
each version holds its own run's model byte for byte; exits 1 when any check fails.
tests/test_concurrent_runs.py runs two at once in the suite; this runs any number.

  python -m bench.concurrent [--runs 4] [--config configs/penguins.yaml] [--epochs 4]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    from components.store.served import EXTRA_DIR, GPUPIPE_DIR, MODEL_FILE

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--config", default="configs/penguins.yaml")
    p.add_argument("--epochs", type=int, default=4)
    args = p.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="gpupipe-concurrent-"))
    serving, runs = home / "serving", home / "runs"
    command = [sys.executable, "-m", "pipelines.cli", "run", args.config, "--epochs", str(args.epochs), "--quiet",
               "--runs-dir", str(runs), "--serving-base", str(serving)]
    started = time.monotonic()
    procs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(args.runs)]
    outs = [proc.communicate(timeout=1800) for proc in procs]
    seconds = time.monotonic() - started
    failures = []
    folders = []
    for proc, (out, err) in zip(procs, outs):
        log = next((line.split("full log: ", 1)[1] for line in out.splitlines() if "full log: " in line), "")
        folders.append(Path(log).parent if log else None)
        status = out.splitlines()[0] if out else "(no output)"
        print(f"  exit {proc.returncode}  {status}  {folders[-1]}")
        if proc.returncode != 0 or "Traceback" in out + err:
            failures.append(f"a run ended with exit {proc.returncode}" + (" and a traceback" if "Traceback" in err else ""))
    if len({f for f in folders if f}) != args.runs:
        failures.append(f"{len(set(folders))} distinct run folders for {args.runs} runs")
    model_name = Path(args.config).stem
    versions = sorted(int(v.name) for v in (serving / model_name).iterdir() if v.name.isdigit()) \
        if (serving / model_name).is_dir() else []
    whole = 0
    for version in versions:
        path = serving / model_name / str(version)
        lineage = json.loads((path / EXTRA_DIR / GPUPIPE_DIR / MODEL_FILE).read_text())
        model = runs / lineage["run_name"] / "train" / "model"
        files = [f for f in model.rglob("*") if f.is_file()]
        if files and all((path / f.relative_to(model)).read_bytes() == f.read_bytes() for f in files):
            whole += 1
    if versions != list(range(1, args.runs + 1)) or whole != len(versions):
        failures.append(f"versions {versions}, {whole} of them whole")
    print(f"{args.runs} runs of {args.config} at once: {seconds:.1f} s; versions {versions}, {whole} whole, each "
          f"its own run's model; {'OK' if not failures else 'FAILED: ' + '; '.join(failures)}")
    print(f"  (runs, cache and serving base under {home})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
