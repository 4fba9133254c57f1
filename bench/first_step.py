"""First-step benchmark: what the first epoch pays before training runs at its steady rate,
and what the end of `fit` pays, on a config's model and the synthetic click-through table.

In one process, on the train split of `synthetic:ctr?rows=--rows`, with the config's
training settings (configs/ctr.yaml: the cross model over 13 numeric and 26 categorical
features) and the trainer's own input (components.train.data.make_dataset) and model
(components.train.model.compile_model):

  ops           operations in the traced train step (what is traced and optimised)
  trace         tracing the train function on the training iterator (Python)
  first call    its first run: graph optimisation and instantiation, the first batch
  first epoch   the rest of the first epoch (it parses and caches the split)
  steady epoch  an epoch replayed from the cache
  teardown      destroying the training iterator after --teardown-steps steps, as the end
                of `fit` does: with the trainer's input (tf.data's autotuner off) and with
                the autotuner on (tf.data's default)

  python -m bench.first_step [--config configs/ctr.yaml] [--rows 20000]
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/ctr.yaml")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--teardown-steps", type=int, default=700,
                   help="steps before the teardown is timed (the autotuner's sleep grows with them); 0 skips it")
    p.add_argument("--workdir", default="", help="reuse ingested data here (default: a temp dir)")
    args = p.parse_args()

    import tensorflow as tf

    from bench.train import prepare
    from components.contracts.examples import examples_pattern
    from components.kinds import Columns, specs_from_statistics
    from components.contracts.names import CACHE_MEMORY, TRAIN_SPLIT
    from components.contracts.statistics import load_statistics
    from components.train.model import compile_model
    from components.contracts.compat.tensorflow import graph_code_without_autograph
    from components.train.data import make_dataset
    from components.train.runtime import choose_strategy
    from pipelines.config import load_config

    config = load_config(args.config)
    s, data = config.training, config.data
    examples, _, _ = prepare(args.rows, args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-"), args.seed)
    stats = load_statistics(os.path.join(examples, "statistics"), TRAIN_SPLIT)
    specs = specs_from_statistics(stats, data, s.task, s.max_vocabulary, s.hash_buckets)
    steps_per_epoch = math.ceil(int(stats.num_examples) / s.batch_size)
    pattern = examples_pattern(examples, TRAIN_SPLIT)
    graph_code_without_autograph()  # as the trainer does
    strategy = choose_strategy(s.strategy)

    def dataset(autotune: bool):
        ds = make_dataset(pattern, specs, s.batch_size, shuffle=True, seed=args.seed, repeat=True,
                          cache=CACHE_MEMORY)
        if autotune:
            options = tf.data.Options()
            options.autotune.enabled = True
            ds = ds.with_options(options)
        return ds

    started = time.perf_counter()
    model = compile_model(specs, s, strategy, s.learning_rate, steps_per_epoch)
    build = time.perf_counter() - started
    train_function = model.make_train_function()
    iterator = iter(dataset(autotune=False))
    started = time.perf_counter()
    concrete = train_function.get_concrete_function(iterator)
    trace = time.perf_counter() - started
    started = time.perf_counter()
    train_function(iterator)
    first_call = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps_per_epoch - 1):
        train_function(iterator)
    rest = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps_per_epoch):
        train_function(iterator)
    steady = time.perf_counter() - started
    print(f"{args.config}, synthetic ctr {args.rows:,} rows, {steps_per_epoch} steps per epoch of {s.batch_size}:")
    print(f"  model build       {build:.2f} s")
    print(f"  train step ops    {len(concrete.graph.get_operations()):,}")
    print(f"  trace             {trace:.2f} s")
    print(f"  first call        {first_call:.2f} s")
    print(f"  first epoch       {trace + first_call + rest:.2f} s (trace + first call + {rest:.2f} s)")
    print(f"  steady epoch      {steady:.2f} s")
    print(f"  first - steady    {trace + first_call + rest - steady:+.2f} s")
    del iterator
    gc.collect()
    if not args.teardown_steps:
        return
    for autotune in (False, True):
        iterator = iter(dataset(autotune))
        for _ in range(args.teardown_steps):
            train_function(iterator)
        started = time.perf_counter()
        del iterator
        gc.collect()
        label = "autotuner on (tf.data default)" if autotune else "trainer's input (autotuner off)"
        print(f"  teardown after {args.teardown_steps} steps, {label}: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
