"""Ingest alone, with its statistics, on the click-through CSV (issue #36's 2M-row table):
wall seconds, CPU seconds of this process and its worker processes, rows/s, core-µs a row.

Imports happen before the clock starts (a task pays them once, in its start phase).

  python -m bench.ingest --rows 2000000 [--workdir DIR] [--workers N]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)


def cpu_seconds(who=None) -> float:
    """CPU seconds of this process and its (ended) worker processes, or of `who` alone
    (resource.RUSAGE_SELF or RUSAGE_CHILDREN)."""
    if who is None:
        return cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--workdir", default="", help="where the CSV is kept (default: a temporary directory)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: ingest's choice)")
    args = p.parse_args()
    import tensorflow  # noqa: F401
    import tensorflow_data_validation  # noqa: F401

    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings
    from components.sources import synthetic

    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-ingest-")
    csv = os.path.join(workdir, f"ctr-{args.rows}.csv")
    if not os.path.isfile(csv):
        synthetic.write_csv(csv, args.rows)
    out = os.path.join(workdir, f"examples-{args.rows}")
    shutil.rmtree(out, ignore_errors=True)
    settings = DataSettings(source=csv, label=synthetic.LABEL, numeric_features=synthetic.NUMERIC,
                            categorical_features=synthetic.CATEGORICAL, split={"eval_percent": 10})
    extra = {} if args.workers is None else {"workers": args.workers}
    started, cpu, own = time.perf_counter(), cpu_seconds(), cpu_seconds(resource.RUSAGE_SELF)
    manifest = ingest_data(settings, out, **extra)
    wall, cpu, own = time.perf_counter() - started, cpu_seconds() - cpu, cpu_seconds(resource.RUSAGE_SELF) - own
    rows = sum(manifest["rows"].values())
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs) / 2 ** 20
    print(f"{rows:,} rows in {wall:.1f} s ({rows / wall:,.0f} rows/s), {cpu:.1f} CPU s ({cpu / rows * 1e6:.1f} "
          f"core-us a row; this process {own / rows * 1e6:.1f}), workers {manifest['engine'].get('workers', 1)}, "
          f"load average {os.getloadavg()[0]:.1f}, statistics "
          f"{manifest['statistics'].get('seconds', 0):.1f} s in TFDV, output {size:,.0f} MB, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB (workers "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:,.0f} MB)")
    shutil.rmtree(out, ignore_errors=True)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
