"""Training input benchmark: examples/s of the same model fed three ways, on the synthetic
click-through table (13 numeric + 26 categorical columns, label).

  in-memory  parsed batches cached in memory (an untimed first epoch fills the cache)
  streaming  the trainer's input: parallel interleaved gzip TFRecord reads, shuffle, batch,
             one vectorised parse per batch, prefetch (components.train.model.make_dataset)
  naive      per-example parse, sequential reads, no prefetch
and, without training, how fast the streaming input alone delivers batches (its capacity
when the model runs elsewhere, as on a GPU).

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
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)


def prepare(rows: int, workdir: str, seed: int):
    """Synthetic rows -> ingest shards -> train-split statistics -> feature specs."""
    from components.ingest import synthetic
    from components.ingest.logic import ingest_csv
    from components.train.features import specs_from_statistics
    from components.validate.logic import ingest_statistics

    examples = os.path.join(workdir, "examples")
    if not os.path.isfile(os.path.join(examples, "statistics", "stats.pb")):
        ingest_csv(f"synthetic:ctr?rows={rows}&seed={seed}", examples, synthetic.LABEL, synthetic.NUMERIC,
                   synthetic.CATEGORICAL, eval_percent=10, shard_rows=max(10_000, rows // 16))
    stats = ingest_statistics(examples)["train"].datasets[0]
    specs = specs_from_statistics(stats, synthetic.LABEL, synthetic.NUMERIC, synthetic.CATEGORICAL, task="binary",
                                  max_vocabulary=1, hash_buckets=10_000)  # hash every categorical column
    return examples, specs, int(stats.num_examples)


class EpochTimer:
    def __init__(self):
        import tf_keras

        class _T(tf_keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.seconds = []

            def on_epoch_begin(self, epoch, logs=None):
                self._t = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.seconds.append(time.perf_counter() - self._t)

        self.callback = _T()


def input_only(examples: str, specs, batch: int, seed: int, batches: int = 150) -> float:
    """Examples/s the streaming input delivers with nothing else running."""
    from components.train.model import make_dataset

    pattern = os.path.join(examples, "train", "part-*.tfrecord.gz")
    it = iter(make_dataset(pattern, specs, batch, shuffle=True, seed=seed, repeat=True))
    for _ in range(20):
        next(it)
    started = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch / (time.perf_counter() - started)


def run_variant(name: str, examples: str, specs, train_rows: int, batch: int, epochs: int, seed: int,
                optimizer: str = "adam") -> float:
    import tf_keras

    from components.train.model import build_model, make_dataset, make_naive_dataset
    from components.train.logic import make_optimizer
    from components.train.runtime import choose_strategy

    tf_keras.utils.set_random_seed(seed)
    pattern = os.path.join(examples, "train", "part-*.tfrecord.gz")
    steps = math.ceil(train_rows / batch)
    if name == "naive":
        ds = make_naive_dataset(pattern, specs, batch).repeat()
    else:
        ds = make_dataset(pattern, specs, batch, shuffle=True, seed=seed, repeat=True, cache=(name == "in-memory"))
    strategy = choose_strategy("auto")  # what the trainer uses on this machine
    with strategy.scope():
        model = build_model(specs, "dnn", [256, 128, 64], embedding_dim=16)
        model.compile(optimizer=make_optimizer(optimizer, 1e-3 if optimizer == "adam" else 0.05),
                      loss=tf_keras.losses.SparseCategoricalCrossentropy())
    timer = EpochTimer()
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer.callback], verbose=0)
    timed = timer.callback.seconds[1:]
    return steps * batch * len(timed) / sum(timed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=3, help="including one warm-up epoch")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--workdir", default="", help="reuse ingested data here (default: a temp dir)")
    p.add_argument("--variants", default="in-memory,streaming,naive")
    p.add_argument("--optimizer", default="adam", choices=["adam", "adagrad", "ftrl", "sgd"])
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-train-")
    examples, specs, train_rows = prepare(args.rows, workdir, args.seed)
    results = {}
    for name in args.variants.split(","):
        results[name] = run_variant(name, examples, specs, train_rows, args.batch, args.epochs, args.seed,
                                    args.optimizer)
        print(f"{name:<10} {results[name]:>10,.0f} examples/s", flush=True)
    capacity = input_only(examples, specs, args.batch, args.seed)
    print(f"streaming input alone (no training): {capacity:,.0f} examples/s", flush=True)
    if {"in-memory", "streaming"} <= results.keys():
        print(f"streaming / in-memory = {results['streaming'] / results['in-memory']:.2f} (target >= 0.80)")
    if {"naive", "streaming"} <= results.keys():
        print(f"streaming / naive     = {results['streaming'] / results['naive']:.2f} (target >= 3.00)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rows": args.rows, "train_rows": train_rows, "batch": args.batch, "cores": os.cpu_count(),
                      "optimizer": args.optimizer, "input_only_examples_per_second": round(capacity),
                      "examples_per_second": {k: round(v) for k, v in results.items()},
                      "peak_rss_mb": round(peak_mb)}))


if __name__ == "__main__":
    main()
