"""Data benchmark: ingest and statistics on the synthetic click-through table
(13 numeric + 26 categorical columns + label = 40 columns), at several row counts.

For each size, in a fresh process each (so peak RSS is that stage's own):
  ingest      CSV file -> gzip TFRecord train/eval shards (components.ingest.logic.ingest_data,
              without its statistics)
  statistics  TFDV's in-process path on the same Arrow batches, batch by batch with merged
              accumulators (what ingest does for validate while it holds the data); rows/s
              counts the time in TFDV, and is also given with the CSV reading included
  beam        TFDV's generate_statistics_from_tfrecord on Beam's DirectRunner (the train shards)
and checks that the two statistics paths agree on counts and means (train split).

With --beam-ingest-rows, ingest with its statistics on both engines over the same CSV cut
into --parts files (Beam's unit of parallel work is a file), and after each, train's input
over its train split (a second pass; core-µs an example, examples/s; the column blocks or the rows):
  local-parts      data.engine local (components.ingest.logic.ingest_data, with statistics)
  beam-direct      data.engine beam (components.ingest.beam.ingest_data_beam) on the DirectRunner
                   in process
  beam-multi       the same on the DirectRunner with 2 worker processes (multi_processing)
Beam's figures count the whole job: building the pipeline, starting the workers, the job.

  python -m bench.data --rows 200000,2000000 [--beam-rows 200000] [--gzip-levels]
  python -m bench.data --rows 200000 --beam-rows "" --beam-ingest-rows 200000 [--parts 4]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import components  # noqa: F401


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage(name: str, workdir: str, rows: int, level: int) -> dict:
    """One measured stage, run in this (fresh) process. Imports happen before the clock
    starts: throughput is measured, not TensorFlow's start-up (about 5 s, once per task)."""
    import apache_beam  # noqa: F401
    import tensorflow  # noqa: F401
    import tensorflow_data_validation  # noqa: F401
    from tfx_bsl.coders import example_coder  # noqa: F401

    from components.sources import synthetic

    csv_path = os.path.join(workdir, f"ctr-{rows}.csv")
    examples = os.path.join(workdir, f"examples-{rows}")
    if name in ENGINES:
        return ingest_engine(name, workdir, rows)
    if name == "ingest":
        from components.ingest.logic import ingest_data
        from components.ingest.settings import DataSettings

        started = time.perf_counter()
        manifest = ingest_data(DataSettings(source=csv_path, label=synthetic.LABEL, numeric_features=synthetic.NUMERIC,
                                            categorical_features=synthetic.CATEGORICAL, split={"eval_percent": 10}),
                               examples, compression_level=level, with_statistics=False)
        seconds = time.perf_counter() - started
        out_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(examples) for f in fs)
        return {"rows": sum(manifest["rows"].values()), "seconds": seconds, "output_mb": out_bytes / 2 ** 20}
    started = time.perf_counter()
    if name == "statistics":
        import pyarrow as pa

        from components.contracts.statistics import StatisticsAccumulator
        from components.ingest.tables import as_list_batch, column_types, split_is_eval
        from components.sources import readers

        from components.kinds import Columns

        types = column_types(Columns(label=synthetic.LABEL, numeric_features=synthetic.NUMERIC,
                                     categorical_features=synthetic.CATEGORICAL))
        train = StatisticsAccumulator()
        for batch in readers.read_batches(readers.resolve(csv_path)[0], types):
            train.add(as_list_batch(batch.filter(pa.array(~split_is_eval(batch, 10, None)))))
        dataset = train.result("train").datasets[0]
        means = {f.path.step[0]: f.num_stats.mean for f in dataset.features if f.HasField("num_stats")}
        return {"rows": int(dataset.num_examples), "seconds": train.seconds,
                "seconds_with_reading": time.perf_counter() - started, "means": means}
    else:
        from components.validate.logic import beam_split_statistics

        stats = beam_split_statistics(examples, "train", ["--runner=DirectRunner"])
    seconds = time.perf_counter() - started
    dataset = stats.datasets[0]
    means = {f.path.step[0]: f.num_stats.mean for f in dataset.features if f.HasField("num_stats")}
    return {"rows": int(dataset.num_examples), "seconds": seconds, "means": means}


ENGINES = {"local-parts": None, "beam-direct": ["--runner=DirectRunner"],
           "beam-multi": ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]}


def parts_dir(workdir: str, rows: int) -> str:
    return os.path.join(workdir, f"ctr-{rows}-parts")


def write_parts(csv_path: str, directory: str, parts: int) -> None:
    """The CSV cut into `parts` files of about equal rows, each with the header."""
    with open(csv_path, encoding="utf-8") as f:
        header, *lines = f.readlines()
    os.makedirs(directory, exist_ok=True)
    size = -(-len(lines) // parts)
    for k in range(parts):
        with open(os.path.join(directory, f"part-{k}.csv"), "w", encoding="utf-8") as out:
            out.writelines([header, *lines[k * size:(k + 1) * size]])


def ingest_engine(name: str, workdir: str, rows: int) -> dict:
    """Ingest with statistics on one engine over the parts directory."""
    from components.sources import synthetic

    source, out = parts_dir(workdir, rows), os.path.join(workdir, f"examples-{name}-{rows}")
    shutil.rmtree(out, ignore_errors=True)
    from components.ingest.settings import DataSettings

    settings = DataSettings(source=source, label=synthetic.LABEL, numeric_features=synthetic.NUMERIC,
                            categorical_features=synthetic.CATEGORICAL, split={"eval_percent": 10},
                            beam_pipeline_args=ENGINES[name] or [])
    started = time.perf_counter()
    if ENGINES[name] is None:
        from components.ingest.logic import ingest_data

        manifest = ingest_data(settings, out)
    else:
        from components.ingest.beam import ingest_data_beam

        manifest = ingest_data_beam(settings, out)
    seconds = time.perf_counter() - started
    return {"rows": sum(manifest["rows"].values()), "split_rows": manifest["rows"], "seconds": seconds,
            **feed_cost(out)}


def feed_cost(examples_dir: str) -> dict:
    """The train input over an ingest's train split, as train reads it
    (components.train.data.make_dataset: shuffled batches of 1,024, the column blocks when
    the ingest wrote them, else one tf.Example a row): CPU core-µs an example (every thread
    of this process) and examples/s, and which it read."""
    from components.contracts.examples import block_files, examples_pattern
    from components.kinds import Columns, specs_from_statistics
    from components.sources import synthetic
    from components.train.data import make_dataset
    from components.validate.logic import ingest_statistics

    stats = ingest_statistics(examples_dir)["train"].datasets[0]
    columns = Columns(label=synthetic.LABEL, numeric_features=synthetic.NUMERIC,
                      categorical_features=synthetic.CATEGORICAL)
    specs = specs_from_statistics(stats, columns, task="binary", max_vocabulary=1000, hash_buckets=20000)
    pattern = examples_pattern(examples_dir, "train")
    for _ in range(2):  # the second pass timed: the first also traces the parse functions
        started, cpu, examples = time.perf_counter(), time.process_time(), 0
        for _, labels in make_dataset(pattern, specs, 1024, shuffle=True, seed=1):
            examples += int(labels.shape[0])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"feed_core_us": cpu / examples * 1e6, "feed_examples_per_s": examples / seconds,
            "feed_reads": "blocks" if block_files(pattern) else "rows"}


def run_stage(name: str, workdir: str, rows: int, level: int = 1) -> dict:
    """Runs `stage` in a child process and returns its result with its peak RSS."""
    code = ("import json, sys; from bench.data import stage, _peak_rss_mb; "
            f"r = stage({name!r}, {workdir!r}, {rows}, {level}); r['peak_rss_mb'] = _peak_rss_mb(); "
            "print('RESULT ' + json.dumps(r))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"stage {name} at {rows} rows failed:\n{out.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="200000,2000000")
    p.add_argument("--beam-rows", default="200000", help="sizes to also run on Beam's DirectRunner")
    p.add_argument("--gzip-levels", action="store_true", help="also compare gzip levels 1 and 6 at the first size")
    p.add_argument("--beam-ingest-rows", default="", help="sizes to also ingest on both engines (local, Beam "
                                                          "DirectRunner in process and with 2 worker processes)")
    p.add_argument("--parts", type=int, default=4, help="files the CSV is cut into for --beam-ingest-rows")
    p.add_argument("--workdir", default="")
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-data-")
    from components.sources import synthetic

    sizes = [int(r) for r in args.rows.split(",")]
    beam_sizes = {int(r) for r in args.beam_rows.split(",") if r}
    beam_ingest_sizes = {int(r) for r in args.beam_ingest_rows.split(",") if r}
    report = {"cores": os.cpu_count(), "sizes": {}}
    for rows in sizes:
        csv_path = os.path.join(workdir, f"ctr-{rows}.csv")
        if not os.path.exists(csv_path):
            synthetic.write_csv(csv_path, rows)
        ingest = run_stage("ingest", workdir, rows)
        stats = run_stage("statistics", workdir, rows)
        line = {"ingest_rows_per_s": round(ingest["rows"] / ingest["seconds"]),
                "statistics_rows_per_s_with_csv_reading": round(stats["rows"] / stats["seconds_with_reading"]),
                "ingest_peak_rss_mb": round(ingest["peak_rss_mb"]),
                "csv_mb": round(os.path.getsize(csv_path) / 2 ** 20, 1), "tfrecord_mb": round(ingest["output_mb"], 1),
                "statistics_rows_per_s": round(stats["rows"] / stats["seconds"]),
                "statistics_peak_rss_mb": round(stats["peak_rss_mb"])}
        print(f"{rows:>9,} rows  ingest {line['ingest_rows_per_s']:>8,} rows/s (peak RSS {line['ingest_peak_rss_mb']} MB)"
              f"  statistics {line['statistics_rows_per_s']:>8,} rows/s (peak RSS {line['statistics_peak_rss_mb']} MB)",
              flush=True)
        if rows in beam_sizes:
            beam = run_stage("beam", workdir, rows)
            line["beam_direct_rows_per_s"] = round(beam["rows"] / beam["seconds"])
            line["statistics_vs_beam"] = round(line["statistics_rows_per_s"] / line["beam_direct_rows_per_s"], 1)
            worst = max(abs(stats["means"][k] - beam["means"][k]) / max(abs(beam["means"][k]), 1e-9)
                        for k in beam["means"])
            line["same_counts"] = stats["rows"] == beam["rows"]
            line["max_relative_mean_difference"] = worst
            print(f"{'':>9}       beam DirectRunner {line['beam_direct_rows_per_s']:>8,} rows/s  ratio "
                  f"{line['statistics_vs_beam']}x  same counts: {line['same_counts']}  max mean diff: {worst:.2e}",
                  flush=True)
        if rows in beam_ingest_sizes:
            write_parts(csv_path, parts_dir(workdir, rows), args.parts)
            runs = {name: run_stage(name, workdir, rows) for name in ENGINES}
            if len({json.dumps(r["split_rows"], sort_keys=True) for r in runs.values()}) != 1:
                raise SystemExit(f"the engines disagree on the rows per split: {runs}")
            line["engines"] = {name: {"rows_per_s": round(r["rows"] / r["seconds"]), "seconds": round(r["seconds"], 1),
                                      "feed_core_us": round(r["feed_core_us"], 2),
                                      "feed_examples_per_s": round(r["feed_examples_per_s"]), "feed_reads": r["feed_reads"]}
                               for name, r in runs.items()}
            print(f"{'':>9}       ingest with statistics over {args.parts} files, same rows per split "
                  f"{runs['local-parts']['split_rows']}: " + "  ".join(
                      f"{name} {v['rows_per_s']:,} rows/s ({v['seconds']} s)" for name, v in line["engines"].items()),
                  flush=True)
            print(f"{'':>9}       train's input over each one's train split: " + "  ".join(
                f"{name} {v['feed_core_us']} core-µs an example, {v['feed_examples_per_s']:,} examples/s "
                f"({v['feed_reads']})" for name, v in line["engines"].items()), flush=True)
        report["sizes"][rows] = line
    if len(sizes) > 1:
        small, large = report["sizes"][sizes[0]], report["sizes"][sizes[-1]]
        for key in ("ingest_peak_rss_mb", "statistics_peak_rss_mb"):
            ratio = large[key] / small[key]
            report[f"{key}_ratio"] = round(ratio, 2)
            print(f"peak RSS {key.split('_')[0]} at {sizes[-1]:,} / at {sizes[0]:,} rows = {ratio:.2f} (target <= 1.2)")
    if args.gzip_levels:
        rows = sizes[0]
        for level in (1, 6):
            r = run_stage("ingest", workdir, rows, level)
            report[f"gzip_level_{level}"] = {"rows_per_s": round(r["rows"] / r["seconds"]),
                                             "output_mb": round(r["output_mb"], 1)}
            print(f"gzip level {level}: {report[f'gzip_level_{level}']['rows_per_s']:,} rows/s, "
                  f"{report[f'gzip_level_{level}']['output_mb']} MB", flush=True)
    print(json.dumps(report))
    if not args.workdir:  # generated data in a temp dir: not kept
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
