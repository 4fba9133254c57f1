"""Gradient accumulation benchmark: what `training.gradient_accumulation_steps` costs per
example, on the synthetic click-through table and the bench.train model (a 256-128-64 DNN
over standardised numerics and hashed embeddings, dim 16), built and compiled by the
trainer's own compile_model, parsed batches cached in memory.

  large        k=1 at --batch: one update per batch of --batch rows
  accumulated  k=--k at --batch / k: the same update size (an effective batch of --batch)
               from k micro-batches: what a GPU that holds only --batch / k rows runs
  small        k=1 at --batch / k: a plain step of the micro-batch (the accumulation's
               overhead per step is accumulated against small)

Each variant trains `--epochs` epochs of the split; the first is warm-up, the rest timed.

  python -m bench.accumulation --rows 100000 --batch 1024 --k 4 [--optimizer adam]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
from bench.train import EpochTimer, prepare


def run_variant(examples: str, specs, train_rows: int, batch: int, k: int, epochs: int, seed: int,
                optimizer: str) -> dict:
    import tf_keras

    from components.contracts.names import CACHE_MEMORY
    from components.train.model import compile_model
    from components.contracts.compat.tensorflow import graph_code_without_autograph
    from components.train.data import make_dataset
    from components.train.runtime import choose_strategy
    from components.train.settings import TrainSettings

    tf_keras.utils.set_random_seed(seed)
    graph_code_without_autograph()  # as the trainer does
    pattern = os.path.join(examples, "train", "part-*.tfrecord.gz")
    steps = k * math.ceil(train_rows / (batch * k))  # as the trainer rounds an epoch
    ds = make_dataset(pattern, specs, batch, shuffle=True, seed=seed, repeat=True, cache=CACHE_MEMORY)
    settings = TrainSettings(task="binary", model="dnn", hidden_units=[256, 128, 64], embedding_dim=16,
                             hash_buckets=10_000, optimizer=optimizer, gradient_accumulation_steps=k, epochs=epochs)
    model = compile_model(specs, settings, choose_strategy("auto"), 1e-3 if optimizer == "adam" else 0.05, steps)
    timer = EpochTimer()
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer.callback], verbose=0)
    timed = timer.callback.seconds[1:]
    return {"examples_per_second": steps * batch * len(timed) / sum(timed),
            "updates_per_second": steps // k * len(timed) / sum(timed),
            "step_ms": sum(timed) / (steps * len(timed)) * 1e3,
            "optimizer_steps": int(model.optimizer.iterations.numpy())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=1024, help="the effective batch")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--epochs", type=int, default=3, help="including one warm-up epoch")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--optimizer", default="adam", choices=["adam", "adagrad", "ftrl", "sgd"])
    p.add_argument("--workdir", default="", help="reuse ingested data here (default: a temp dir)")
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-accumulation-")
    examples, specs, train_rows = prepare(args.rows, workdir, args.seed)
    micro = args.batch // args.k
    results = {}
    for name, batch, k in (("large", args.batch, 1), ("accumulated", micro, args.k), ("small", micro, 1)):
        figures = run_variant(examples, specs, train_rows, batch, k, args.epochs, args.seed, args.optimizer)
        results[name] = {key: round(v, 2) for key, v in figures.items()}
        print(f"{name:<12} batch {batch:>5} k={k}: {figures['examples_per_second']:>9,.0f} examples/s "
              f"{figures['updates_per_second']:>7.1f} updates/s {figures['step_ms']:6.2f} ms a step", flush=True)
    acc, small, large = results["accumulated"], results["small"], results["large"]
    print(f"accumulated / small step time = {acc['step_ms'] / small['step_ms']:.2f}; "
          f"accumulated / large examples/s = {acc['examples_per_second'] / large['examples_per_second']:.2f}")
    print(json.dumps({"rows": args.rows, "train_rows": train_rows, "batch": args.batch, "k": args.k,
                      "optimizer": args.optimizer, "cores": os.cpu_count(), "results": results}))
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
