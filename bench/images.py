"""Image input benchmark: the CPU side of an image job (read, decode, resize, augment) on
224x224 JPEGs, gpupipe's input pipeline side by side with the one people write first.

  gpupipe       ingest's shards (encoded bytes, header-checked) read by components.train.data's
                make_dataset as training reads them: parsed and decoded in parallel, the decoded
                uint8 images cached in memory in the first epoch, reordered, augmented, batched
  keras         tf_keras.utils.image_dataset_from_directory (one file read per image, decoded
                and resized to float32) plus the same augmentation map, batched
  keras+cache   the same with .cache() after the directory dataset (float32 images in memory),
                what a careful hand-written script adds

For each, per epoch: images per second (wall), CPU core-microseconds per image (the process's
CPU time over all threads, per image) and images per core-second; the peak RSS of the
process (each pipeline runs in a fresh process). Then the input cores one GPU would need at a
published ResNet-50 training rate. The JPEGs are random crops of scikit-learn's two sample
photographs (china.jpg, flower.jpg; nothing downloaded), re-encoded at 224x224, quality 90.

  python -m bench.images [--images 3000] [--epochs 3] [--workdir DIR]

With --e2e, whole-process wall and CPU time of `gpupipe run` on the digits example against a
hand-written tf_keras script doing the same job (bench/keras_digits.py), alternated A B A B
after one pair not counted, and their ratios pair by pair:

  python -m bench.images --e2e [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

SIZE = 224
CLASSES = 5
BATCH = 32
AUGMENT = {"flip": True, "crop": 0.1, "brightness": 0.1, "contrast": 0.1}
# NVIDIA DeepLearningExamples, TensorFlow/Classification/ConvNets/resnet50v1.5/README.md,
# "Training performance: NVIDIA DGX A100 (8x A100 40GB)": 1 GPU, batch 256, mixed precision
# + XLA, 2375 img/s averaged over an epoch (TensorFlow 20.06-tf1-py3 NGC container).
PUBLISHED_RATE = 2375
PUBLISHED_SOURCE = ("NVIDIA DeepLearningExamples, ResNet-50 v1.5 for TensorFlow, 1x A100 40GB, "
                    "mixed precision + XLA, batch 256")
PIPELINES = ("gpupipe", "keras", "keras+cache")


def make_jpegs(folder: str, count: int, seed: int = 0) -> int:
    """`count` 224x224 JPEGs in CLASSES class folders: random crops (a quarter to the whole of
    the short side) of scikit-learn's sample photographs, resized and re-encoded."""
    import numpy as np
    import sklearn.datasets
    import tensorflow as tf

    images = os.path.join(os.path.dirname(sklearn.datasets.__file__), "images")
    photos = [tf.io.decode_jpeg(tf.io.read_file(os.path.join(images, n)), channels=3)
              for n in ("china.jpg", "flower.jpg")]
    rng = np.random.default_rng(seed)
    for i in range(count):
        photo = photos[i % 2]
        h, w = int(photo.shape[0]), int(photo.shape[1])
        side = int(rng.integers(min(h, w) // 4, min(h, w)))
        y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = tf.image.resize(photo[y:y + side, x:x + side], [SIZE, SIZE])
        path = os.path.join(folder, f"class{i % CLASSES}", f"{i:05d}.jpg")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_jpeg(tf.cast(tf.round(crop), tf.uint8), quality=90))
    return count


def _config(folder: str, path: str) -> None:
    import yaml

    raw = {"name": "bench-images", "data": {
        "source": folder, "format": "images", "label": "label",
        "image_features": [{"name": "image", "image_size": [SIZE, SIZE], "channels": 3, "augment": AUGMENT}],
        "split": {"eval_percent": 1}},
        "training": {"task": "multiclass", "model": "cnn", "batch_size": BATCH},
        "serving": {"base": "serving", "model_name": "bench-images"}}
    with open(path, "w") as f:
        yaml.safe_dump(raw, f)


def _epochs(dataset, steps: int, epochs: int) -> list:
    """Pulls `steps` batches per epoch from one iterator (as fit does with steps_per_epoch):
    per epoch, the wall and CPU seconds and the images pulled."""
    it = iter(dataset)
    out = []
    for _ in range(epochs):
        wall, cpu, images = time.perf_counter(), time.process_time(), 0
        for _ in range(steps):
            x, _ = next(it)
            images += int((x["image"] if isinstance(x, dict) else x).shape[0])
        out.append({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "images": images})
    return out


def run_pipeline(name: str, workdir: str, epochs: int) -> dict:
    """One pipeline's epochs, in this (fresh) process; TensorFlow's import and the ingest
    before the clock."""
    import tensorflow as tf
    import tf_keras

    folder = os.path.join(workdir, "jpegs")
    count = sum(len(files) for _, _, files in os.walk(folder))
    if name == "gpupipe":
        from components.contracts.examples import examples_pattern
        from components.contracts.names import CACHE_MEMORY, TRAIN_SPLIT
        from components.contracts.statistics import load_statistics
        from components.ingest.logic import ingest_data
        from components.kinds import specs_from_statistics
        from components.train.data import make_dataset
        from pipelines.config import load_config

        config_path = os.path.join(workdir, "bench-images.yaml")
        _config(folder, config_path)
        config = load_config(config_path)
        examples = os.path.join(workdir, "examples")
        if not os.path.exists(os.path.join(examples, "manifest.json")):
            started = time.perf_counter()
            ingest_data(config.data, examples)
            print(f"  ingest (header check, shards): {count / (time.perf_counter() - started):,.0f} img/s",
                  file=sys.stderr)
        stats = load_statistics(os.path.join(examples, "statistics"), TRAIN_SPLIT)
        specs = specs_from_statistics(stats, config.data, "multiclass", 1000, 0)
        count = int(stats.num_examples)  # the train split: 1% of the files are held out for eval
        dataset = make_dataset(examples_pattern(examples, TRAIN_SPLIT), specs, BATCH, shuffle=True, seed=1,
                               repeat=True, cache=CACHE_MEMORY)
    else:
        from components.kinds.image import ImageFeature
        from components.kinds.image_ops import augment_image

        spec = ImageFeature(name="image", height=SIZE, width=SIZE, channels=3, augment=AUGMENT)
        # batch_size None: one image at a time, so the same per-image map as gpupipe's, then batched
        ds = tf_keras.utils.image_dataset_from_directory(folder, image_size=(SIZE, SIZE), batch_size=None,
                                                          shuffle=True, seed=1, label_mode="int")
        if name == "keras+cache":
            ds = ds.cache()
        ds = ds.map(lambda x, y: (augment_image(x, spec, True), y), num_parallel_calls=tf.data.AUTOTUNE)
        dataset = ds.batch(BATCH).repeat().prefetch(tf.data.AUTOTUNE)
    result = {"pipeline": name, "images": count, "epochs": _epochs(dataset, math.ceil(count / BATCH), epochs)}
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _row(name: str, epoch: int, e: dict) -> str:
    per_core = e["images"] / e["cpu_s"]
    return (f"| {name} | {epoch} | {e['images'] / e['wall_s']:,.0f} | {1e6 * e['cpu_s'] / e['images']:,.0f} "
            f"| {per_core:,.0f} | {PUBLISHED_RATE / per_core:.1f} |")


def input_benchmark(args) -> None:
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpupipe-bench-images-")
    folder = os.path.join(workdir, "jpegs")
    if not os.path.isdir(folder):
        make_jpegs(folder, args.images)
    results = {}
    for name in PIPELINES:
        out = subprocess.run([sys.executable, "-m", "bench.images", "--one", name, "--workdir", workdir,
                              "--epochs", str(args.epochs)], check=True, capture_output=True, text=True)
        sys.stderr.write("".join(line + "\n" for line in out.stderr.splitlines() if line.startswith("  ")))
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{args.images} JPEGs of {SIZE}x{SIZE}, batch {BATCH}, {os.cpu_count()} cores; augment {AUGMENT}")
    print("| pipeline | epoch | images/s | core-µs/image | images/core-s | cores for one GPU |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        for i, e in enumerate(r["epochs"], 1):
            print(_row(name, i, e))
    print("| pipeline | peak RSS |")
    print("|---|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['peak_rss_mb']:,.0f} MB |")
    ours = results["gpupipe"]["epochs"]
    for other in ("keras", "keras+cache"):
        theirs = results[other]["epochs"]
        first = (theirs[0]["cpu_s"] / theirs[0]["images"]) / (ours[0]["cpu_s"] / ours[0]["images"])
        later = [t["cpu_s"] / t["images"] / (o["cpu_s"] / o["images"]) for o, t in zip(ours[1:], theirs[1:])]
        print(f"images per core, gpupipe / {other}: epoch 1 {first:.2f}x"
              + (f", later epochs {statistics.median(later):.2f}x (median)" if later else ""))
    print(f"cores for one GPU: {PUBLISHED_RATE} img/s ({PUBLISHED_SOURCE}) / images per core-second")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


def _timed(command: list, cwd: str) -> tuple:
    """(wall seconds, CPU seconds) of a command as a whole process: the kernel's accounting of
    the children it reaped (its own tasks and servers included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _spread(values: list) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"


def e2e_benchmark(args) -> None:
    """gpupipe run on the digits example against bench/keras_digits.py, in turns (A B A B),
    after one pair not counted."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    workdir = tempfile.mkdtemp(prefix="gpupipe-bench-e2e-")
    gpupipe = os.path.join(os.path.dirname(sys.executable), "gpupipe")
    subprocess.run([gpupipe, "examples", "digits", os.path.join(workdir, "data", "digits")], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.copy(os.path.join(root, "configs", "digits.yaml"), workdir)
    ours, theirs = [], []
    for i in range(args.runs + 1):
        # --no-cache: every step runs (a rerun of the same config and data reuses earlier outputs);
        # python -P: bench/ is not on the script's path (bench/concurrent.py is not the standard library's)
        a = _timed([gpupipe, "run", "digits.yaml", "--no-cache", "--serving-base", f"serving-{i}"], workdir)
        b = _timed([sys.executable, "-P", os.path.join(root, "bench", "keras_digits.py"), "data/digits",
                    f"keras-{i}"], workdir)
        if i:  # the first pair warms the file cache and the imports' bytecode
            ours.append(a)
            theirs.append(b)
    for name, runs in (("gpupipe run configs/digits.yaml", ours), ("bench/keras_digits.py", theirs)):
        print(f"{name}: wall {_spread([w for w, _ in runs])}, CPU {_spread([c for _, c in runs])} "
              f"(median, min-max of {args.runs})")
    for i, what in ((0, "wall"), (1, "CPU")):
        ratios = [a[i] / b[i] for a, b in zip(ours, theirs)]
        print(f"{what} ratio gpupipe / keras script, pair by pair: median {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f})")
    shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workdir", default="", help="keep the JPEGs and shards here (default: a temp dir)")
    p.add_argument("--one", choices=PIPELINES, help=argparse.SUPPRESS)
    p.add_argument("--e2e", action="store_true", help="gpupipe run against a hand-written tf_keras script")
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    if args.one:
        print(json.dumps(run_pipeline(args.one, args.workdir, args.epochs)))
    elif args.e2e:
        e2e_benchmark(args)
    else:
        input_benchmark(args)


if __name__ == "__main__":
    main()
