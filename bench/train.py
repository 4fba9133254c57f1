"""Training input benchmark: examples/s of the same model fed four ways, on the synthetic
click-through table (13 numeric + 26 categorical columns, label).

  in-memory   the trainer's input when the split fits training.cache_budget_mb: parsed
              batches cached in memory (the untimed first epoch fills the cache)
  disk-cache  the trainer's input when it does not, but fits training.disk_cache_budget_mb:
              the first epoch (untimed) streams the shards and writes the parsed batches to
              local scratch; later epochs stream them back from disk
  streaming   the trainer's input over both budgets: every epoch streams the shards
              (parallel interleaved TFRecord reads of ingest's column blocks, one
              parse per window of blocks, rows reordered in the window, rebatched,
              prefetch; components.train.data.make_dataset)
  naive       per-example parse, sequential reads, no prefetch
and, without training, how fast the streaming and disk-cache inputs alone deliver batches
and at what CPU cost (their capacity when the model runs elsewhere, as on a GPU), and the
CPU cost of the row-wise input's parts (data without column blocks): gzip TFRecord reading
of the row shards and `parse_example` of one Example a row.

Model: a 256-128-64 DNN over standardised numerics and hashed embeddings (dim 16).
Each variant trains `--epochs` epochs; the first is warm-up, the rest are timed.

  python -m bench.train --rows 200000 [--optimizer adagrad]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)


def prepare(rows: int, workdir: str, seed: int):
    """Synthetic rows -> ingest shards -> train-split statistics -> feature specs."""
    from components.kinds import Columns, specs_from_statistics
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings
    from components.sources import synthetic
    from components.validate.logic import ingest_statistics

    examples = os.path.join(workdir, "examples")
    if not os.path.isfile(os.path.join(examples, "statistics", "stats.pb")):
        ingest_data(DataSettings(source=f"synthetic:ctr?rows={rows}&seed={seed}", label=synthetic.LABEL,
                                 numeric_features=synthetic.NUMERIC, categorical_features=synthetic.CATEGORICAL,
                                 split={"eval_percent": 10}), examples, shard_rows=max(10_000, rows // 16))
    stats = ingest_statistics(examples)["train"].datasets[0]
    specs = specs_from_statistics(stats, Columns(label=synthetic.LABEL, numeric_features=synthetic.NUMERIC, categorical_features=synthetic.CATEGORICAL), task="binary", max_vocabulary=1, hash_buckets=10_000)  # hash every categorical column
    return examples, specs, int(stats.num_examples)


class EpochTimer:
    def __init__(self):
        import tf_keras

        class _T(tf_keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.seconds, self.cpu_seconds = [], []

            def on_epoch_begin(self, epoch, logs=None):
                self._t, self._cpu = time.perf_counter(), time.process_time()

            def on_epoch_end(self, epoch, logs=None):
                self.seconds.append(time.perf_counter() - self._t)
                self.cpu_seconds.append(time.process_time() - self._cpu)

        self.callback = _T()


def input_alone(examples: str, specs, batch: int, seed: int, train_rows: int, cache: str) -> dict:
    """The input with nothing training: examples/s, and CPU core-microseconds per example
    (process CPU time over examples), over two epochs after an untimed first epoch (which
    fills the disk cache); with the disk cache, also its size."""
    from components.train.data import make_dataset

    pattern = os.path.join(examples, "train", "part-*.tfrecord.gz")
    cache_dir = tempfile.mkdtemp(prefix="disk-cache-", dir=os.path.dirname(examples))
    steps = math.ceil(train_rows / batch)
    it = iter(make_dataset(pattern, specs, batch, shuffle=True, seed=seed, repeat=True, cache=cache,
                           cache_dir=cache_dir))
    for _ in range(steps):
        next(it)
    cpu, started = time.process_time(), time.perf_counter()
    for _ in range(2 * steps):
        next(it)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    size = sum(os.path.getsize(os.path.join(cache_dir, f)) for f in os.listdir(cache_dir))
    shutil.rmtree(cache_dir, ignore_errors=True)
    n = 2 * steps * batch
    return {"examples_per_second": round(n / seconds), "core_us_per_example": round(cpu_seconds / n * 1e6, 2),
            "cache_mb": round(size / 1e6, 1)}


def input_parts(examples: str, specs, batch: int) -> dict:
    """CPU core-microseconds per example of the streaming input's two main parts, apart:
    reading the gzip TFRecords (one file after another), and `parse_example` on batches
    of serialized examples already in memory."""
    import tensorflow as tf

    from components.contracts.examples import split_files
    from components.train.data import parse_spec

    files = split_files(examples, "train")
    cpu, n = time.process_time(), 0
    batches = []
    for records in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(batch):
        batches.append(records)
        n += int(records.shape[0])
    read = (time.process_time() - cpu) / n * 1e6
    spec = parse_spec(specs, with_label=True)
    tf.io.parse_example(batches[0], spec)
    cpu = time.process_time()
    for records in batches:
        tf.io.parse_example(records, spec)
    parse = (time.process_time() - cpu) / n * 1e6
    return {"gzip_read_core_us_per_example": round(read, 2), "parse_core_us_per_example": round(parse, 2)}


def run_variant(name: str, examples: str, specs, train_rows: int, batch: int, epochs: int, seed: int,
                optimizer: str = "adam") -> dict:
    import tf_keras

    from components.contracts.names import CACHE_DISK, CACHE_MEMORY, CACHE_NONE
    from components.contracts.compat.tensorflow import graph_code_without_autograph
    from components.train.data import make_dataset, make_naive_dataset
    from components.train.model import build_model
    from components.train.optimizers import make_optimizer
    from components.train.runtime import choose_strategy
    from components.train.settings import TrainSettings

    tf_keras.utils.set_random_seed(seed)
    pattern = os.path.join(examples, "train", "part-*.tfrecord.gz")
    steps = math.ceil(train_rows / batch)
    cache_dir = tempfile.mkdtemp(prefix="disk-cache-", dir=os.path.dirname(examples))
    if name == "naive":
        ds = make_naive_dataset(pattern, specs, batch).repeat()
    else:
        cache = {"in-memory": CACHE_MEMORY, "disk-cache": CACHE_DISK, "streaming": CACHE_NONE}[name]
        ds = make_dataset(pattern, specs, batch, shuffle=True, seed=seed, repeat=True, cache=cache,
                          cache_dir=cache_dir)
    graph_code_without_autograph()  # as the trainer does
    strategy = choose_strategy("auto")  # what the trainer uses on this machine
    with strategy.scope():
        model = build_model(specs, TrainSettings(model="dnn", hidden_units=[256, 128, 64], embedding_dim=16))
        model.compile(optimizer=make_optimizer(optimizer, 1e-3 if optimizer == "adam" else 0.05),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy())
    timer = EpochTimer()
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer.callback], verbose=0)
    shutil.rmtree(cache_dir, ignore_errors=True)
    timed, cpu = timer.callback.seconds[1:], timer.callback.cpu_seconds[1:]
    examples = steps * batch * len(timed)
    return {"examples_per_second": examples / sum(timed), "cores_busy": sum(cpu) / sum(timed),
            "core_us_per_example": sum(cpu) / examples * 1e6, "first_epoch_seconds": timer.callback.seconds[0]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3, help="including one warm-up epoch")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", default="", help="reuse ingested data here (default: a temp dir)")
    p.add_argument("--variants", default="in-memory,disk-cache,streaming,naive")
    p.add_argument("--optimizer", default="adam", choices=["adam", "adagrad", "ftrl", "sgd"])
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-train-")
    examples, specs, train_rows = prepare(args.rows, workdir, args.seed)
    results, detail = {}, {}
    for name in args.variants.split(","):
        figures = run_variant(name, examples, specs, train_rows, args.batch, args.epochs, args.seed, args.optimizer)
        print(f"{name:<10} {figures['examples_per_second']:>10,.0f} examples/s  {figures['cores_busy']:.2f} cores busy "
              f"{figures['core_us_per_example']:6.2f} CPU core-us per example; first epoch (untimed: tracing, "
              f"cache fill) {figures['first_epoch_seconds']:.1f} s", flush=True)
        results[name] = figures.pop("examples_per_second")
        detail[name] = {k: round(v, 2) for k, v in figures.items()}
    alone = {name: input_alone(examples, specs, args.batch, args.seed, train_rows, cache)
             for name, cache in (("streaming", "none"), ("disk-cache", "disk"))}
    for name, figures in alone.items():
        print(f"{name} input alone (no training): {figures['examples_per_second']:,} examples/s, "
              f"{figures['core_us_per_example']} CPU core-us per example"
              + (f", cache {figures['cache_mb']} MB on disk" if name == "disk-cache" else ""), flush=True)
    parts = input_parts(examples, specs, args.batch)
    print(f"streaming input parts: gzip TFRecord read {parts['gzip_read_core_us_per_example']}, "
          f"parse_example {parts['parse_core_us_per_example']} CPU core-us per example", flush=True)
    for name in ("disk-cache", "streaming"):
        if {name, "in-memory"} <= results.keys():
            print(f"{name} / in-memory = {results[name] / results['in-memory']:.2f} (target >= 0.80)")
        if {name, "naive"} <= results.keys():
            print(f"{name} / naive     = {results[name] / results['naive']:.2f} (target >= 3.00)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": args.rows, "train_rows": train_rows, "batch": args.batch, "cores": os.cpu_count(),
                      "optimizer": args.optimizer, "input_alone": alone, "input_parts": parts,
                      "examples_per_second": {k: round(v) for k, v in results.items()}, "detail": detail,
                      "peak_rss_mb": round(peak_mb)}))
    if not args.workdir:  # generated data in a temp dir: not kept
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
