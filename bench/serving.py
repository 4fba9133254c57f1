"""Serving latency benchmark, in process (no TF Serving binary runs here): the pushed version's
SavedModel (`serving_default`, as TF Serving's Predict runs it) and its TFLite forms, each on one
CPU thread (intra- and inter-op parallelism 1; the interpreter with num_threads 1), called with
raw features at batch 1 and batch 32. Per form: p50 and p99 latency at both batch sizes,
requests per second per core at batch 1 (1 / mean latency) and rows per second per core at 32,
and the size on disk (the SavedModel: what TF Serving loads, and its variables alone). The
TFLite forms are the version's model.tflite (serving.export) and, for the others asked for,
converted here the same way (components/train/compress.py). With `--examples` (the run's
ingest output) each form is also scored on the eval split.

  python -m bench.serving --serving-base /tmp/serving-base --model ctr \\
      [--examples RUN/ingest/examples] [--forms float16,int8] [--calls 300]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

BATCHES = (1, 32)
MB = 2 ** 20


def one_thread() -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def newest_version(base: str, model: str) -> str:
    versions = [int(v) for v in os.listdir(os.path.join(base, model)) if v.isdigit()]
    if not versions:
        raise SystemExit(f"{base}/{model}: no version; run gpupipe run CONFIG --serving-base {base} first")
    return os.path.join(base, model, str(max(versions)))


def rows(specs, n: int, seed: int = 0) -> dict:
    """`n` rows of raw features drawn around the train split's statistics (numbers from the
    mean and deviation, categories from the vocabulary or as hashed tokens, images as PNG
    files of the model's size and channels, random pixels)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    features = {f.name: rng.normal(f.mean, f.std, n).astype(np.float32) for f in specs.numeric}
    for f in specs.categorical:
        values = f.vocabulary or [f"token-{i}" for i in range(1000)]
        features[f.name] = np.array([values[i].encode() for i in rng.integers(0, len(values), n)])
    for f in specs.of_kind("image"):
        import tensorflow as tf

        features[f.name] = np.array([tf.io.encode_png(rng.integers(0, 256, f.shape, dtype=np.uint8)).numpy()
                                     for _ in range(n)], dtype=object)
    return features


def timed(call, features: dict, calls: int) -> list:
    for _ in range(10):  # warm-up: the first calls trace and allocate
        call(features)
    seconds = []
    for _ in range(calls):
        started = time.perf_counter()
        call(features)
        seconds.append(time.perf_counter() - started)
    return seconds


def measure(call, specs, calls: int) -> dict:
    import numpy as np

    out = {}
    for batch in BATCHES:
        seconds = timed(call, rows(specs, batch), calls if batch == 1 else max(20, calls // 4))
        out[batch] = {"p50_ms": 1000 * float(np.percentile(seconds, 50)),
                      "p99_ms": 1000 * float(np.percentile(seconds, 99)), "per_core": batch / statistics.mean(seconds)}
    return out


def weight_bytes(version: str) -> int:
    """Bytes of what the model learnt (the ServingModule's model_variables), without what else
    the SavedModel's variables hold (e.g. the optimizer's slots)."""
    import tensorflow as tf

    module = tf.saved_model.load(version)
    return sum(v.numpy().nbytes for v in getattr(module, "model_variables", []))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serving-base", required=True)
    p.add_argument("--model", required=True, help="serving.model_name")
    p.add_argument("--version", default="", help="default: the newest")
    p.add_argument("--forms", default="float16,int8", help="TFLite forms beside the SavedModel")
    p.add_argument("--examples", default="", help="the run's ingest output, to score each form on its eval split")
    p.add_argument("--calls", type=int, default=300, help="timed calls at batch 1 (a quarter of it at 32)")
    args = p.parse_args(argv)
    one_thread()
    import tensorflow as tf

    from components.contracts import names
    from components.contracts.compressed import TFLITE_FILE, load_compression, saved_model_sizes, tflite_runner
    from components.kinds import load_feature_specs
    from components.train.compress import convert

    version = os.path.join(args.serving_base, args.model, args.version) if args.version else \
        newest_version(args.serving_base, args.model)
    specs = load_feature_specs(version)
    sizes = saved_model_sizes(version)
    signature = tf.saved_model.load(version).signatures[names.SERVING_SIGNATURE]
    results = [("SavedModel", sizes["saved_model_bytes"],
                measure(lambda f: signature(**{k: tf.constant(v) for k, v in f.items()}), specs, args.calls), None)]
    pushed = (load_compression(version) or {}).get("export")
    scratch = tempfile.mkdtemp(prefix="bench-serving-")
    try:
        for form in [f for f in args.forms.split(",") if f]:
            path = os.path.join(version, TFLITE_FILE) if form == pushed else os.path.join(scratch, f"{form}.tflite")
            if form != pushed:
                with open(path, "wb") as f:
                    f.write(convert(version, form))
            results.append((f"TFLite {form}" + (" (pushed)" if form == pushed else ""), os.path.getsize(path),
                            measure(tflite_runner(path), specs, args.calls), path))
        scores = score_forms(version, args.examples, results) if args.examples else {}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.model} version {os.path.basename(version)}: SavedModel variables {sizes['variables_bytes'] / MB:.3f} "
          f"MB ({weight_bytes(version) / MB:.3f} MB of them the model's weights); one CPU thread per form, "
          f"{args.calls} calls at batch 1, {max(20, args.calls // 4)} at 32")
    shown = ["auc", "accuracy"] if specs.task == "binary" else ["rmse"] if specs.task == "regression" else ["accuracy"]
    head = ["form", "size MB", "p50 b1 ms", "p99 b1 ms", "p50 b32 ms", "p99 b32 ms", "req/s/core b1",
            "rows/s/core b32"] + ([f"eval {m}" for m in shown] if scores else [])
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, size, m, _ in results:
        cells = [name, f"{size / MB:.3f}", f"{m[1]['p50_ms']:.2f}", f"{m[1]['p99_ms']:.2f}", f"{m[32]['p50_ms']:.2f}",
                 f"{m[32]['p99_ms']:.2f}", f"{m[1]['per_core']:,.0f}", f"{m[32]['per_core']:,.0f}"]
        if scores:
            cells += [f"{scores[name][m]:.4f}" for m in shown]
        print("| " + " | ".join(cells) + " |")


def score_forms(version: str, examples: str, results: list) -> dict:
    """Each form's metrics on the eval split (evaluate's own scoring)."""
    from components.contracts.compressed import raw_features, tflite_runner
    from components.kinds import load_feature_specs
    from components.evaluate.logic import evaluate_predictions, predict, score_model

    specs = load_feature_specs(version)
    scores = {}
    for name, _, _, path in results:
        if path is None:
            scores[name] = score_model(version, examples).metrics
            continue
        run = tflite_runner(path)
        scores[name] = evaluate_predictions(predict(version, examples, [], serve=lambda batch, run=run: run(
            raw_features(batch, specs)))).metrics
    return scores


if __name__ == "__main__":
    main()
