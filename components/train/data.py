"""The input: gzip TFRecord shards -> (features, target) batches through tf.data, and where
the parsed train batches live after the first epoch (memory, local disk, or read again)."""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from typing import Dict, List

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.examples import BLOCK_ROWS, SLICE_FEATURE, block_files, records_compression, spread_shards
from components.kinds import FeatureSpecs, feature_statistics
from components.train.target import LOG, STANDARDIZE


def parse_spec(specs: FeatureSpecs, with_label: bool) -> Dict[str, tf.io.FixedLenFeature]:
    """tf.Example parse spec, each feature's as its kind declares it (a missing numeric value
    parses as NaN, a missing string as '')."""
    spec = {f.name: kind.parse_feature(f) for kind, f in specs.each()}
    if with_label:
        dtype = tf.float32 if specs.task == "regression" else tf.string
        spec[specs.label] = tf.io.FixedLenFeature([1], dtype)
    return spec


def label_transform(specs: FeatureSpecs, target: str = STANDARDIZE):
    """Raw label tensor [batch, 1] -> training target: class index, or the float value
    (log(1 + y) when the target transform is log)."""
    if specs.task == "regression":
        if target == LOG:
            return lambda raw: tf.math.log1p(tf.maximum(tf.squeeze(raw, axis=-1), 0.0))
        return lambda raw: tf.squeeze(raw, axis=-1)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(specs.classes), tf.range(len(specs.classes), dtype=tf.int64)),
        default_value=-1)
    return lambda raw: table.lookup(tf.squeeze(raw, axis=-1))


def make_dataset(file_pattern: str, specs: FeatureSpecs, batch_size: int, shuffle: bool, seed: int,
                 repeat: bool = False, cache: str = names.CACHE_NONE, cache_dir: str = "",
                 shuffle_buffer: int = 10_000, validation_percent: int = 0, part: str = "all",
                 target: str = STANDARDIZE, shard_share: float = 1.0, max_rows: int = 0) -> tf.data.Dataset:
    """(features, target) batches from gzip TFRecord shards: parallel interleaved reads,
    shuffle, batch then one vectorised parse per batch, prefetch.

    `cache`: "none" reads and parses the shards every epoch; "memory" keeps the parsed
    batches of the first epoch in memory; "disk" writes them to a file under `cache_dir`
    (local scratch) during the first epoch and reads them back in later epochs, which
    skips decompression and parsing (the costly part on the CPU: about 10 of 16
    core-microseconds per example here). Cached batches are replayed in a new order
    every epoch; the examples inside a batch stay together.

    Reads and parses run on every core the process may use (`input_parallelism`), set
    rather than left to tf.data's autotuner: its model thread, once training has run
    for a while, sleeps for up to its optimisation period (tens of seconds), and an
    iterator read inside `fit`'s train function waits for it when it is destroyed,
    which is the end of `fit`. On the click-through example that was 8-17 s of a 50 s
    train task doing nothing; with the autotuner off the teardown takes 0.3 s and the
    input delivers the same examples/s (docs/benchmarks.md, "Fourth round").

    When ingest wrote column blocks beside the shards (contracts/examples.py: block_files),
    they are read instead (`_block_batches`): a window of blocks parsed at once, about 2.5
    core-µs per example against 10 for one Example a row on the click-through table
    (docs/benchmarks.md, "Feeding the GPU"); the same rows, the same validation slice.

    `part`: "all" the examples, or with `validation_percent` > 0 the "train" rows or the
    "validation" slice of them (`in_validation_slice`: a hash of the serialized example,
    so the same rows every epoch and on every worker, the two parts disjoint). `shard_share`
    < 1 reads that share of the shards only, spread evenly over them (`spread_shards`);
    `max_rows` > 0 (a dataset read once, or cached: the validation slice) keeps its first
    rows, about that many (whole batches), before the cache, so the read stops there."""
    if part not in ("all", "train", "validation"):
        raise GpupipeError(f"input part: '{part}' is not all, train or validation")
    if cache not in names.INPUT_CACHES:
        raise GpupipeError(f"input cache: '{cache}' is not one of {', '.join(names.INPUT_CACHES)}")
    if cache == names.CACHE_DISK and not cache_dir:
        raise GpupipeError("input cache: 'disk' needs a local scratch directory; set training.scratch_dir")
    files = sorted(tf.io.gfile.glob(file_pattern))
    if not files:
        raise GpupipeError(f"examples: no files match {file_pattern}; run ingest first")
    files = spread_shards(files, shard_share)
    if any(kind.per_example for kind, _ in specs.kinds()):
        return _decoded_dataset(files, specs, batch_size, shuffle, seed, repeat, cache, cache_dir, shuffle_buffer,
                                validation_percent, part, target, max_rows)
    spec = parse_spec(specs, with_label=True)
    to_target = label_transform(specs, target)
    blocks = spread_shards(block_files(file_pattern), shard_share)
    by_block = block_parse_spec(spec) if blocks else None
    if by_block:
        batched = _block_batches(blocks, by_block, specs.label, to_target, batch_size, shuffle, seed,
                                 shuffle_buffer, validation_percent, part, repeat and cache == names.CACHE_NONE)
    else:
        def parse(serialized):
            parsed = tf.io.parse_example(serialized, spec)
            return parsed, to_target(parsed.pop(specs.label))

        ds = _records(files, shuffle, seed, validation_percent, part)
        if shuffle:
            ds = ds.shuffle(shuffle_buffer, seed=seed)
        if repeat and cache == names.CACHE_NONE:
            ds = ds.repeat()
        batched = ds.batch(batch_size).map(parse, num_parallel_calls=input_parallelism())
    if max_rows > 0:
        batched = batched.take(math.ceil(max_rows / batch_size))
    if cache == names.CACHE_NONE:
        ds = batched
    else:
        # The first pass parses and caches; later passes replay the parsed batches from
        # the cache in a new order.
        cached = batched.cache(os.path.join(cache_dir, "parsed-batches") if cache == names.CACHE_DISK else "")
        # batches held for reordering: fewer when memory is short (disk)
        replay = cached.shuffle(256 if cache == names.CACHE_MEMORY else 64, seed=seed) if shuffle else cached
        if not repeat:
            ds = replay
        elif shuffle:
            # The first pass streams its batches as they are parsed (already in a shuffled
            # order: the example buffer above), so training starts on the first batch, not
            # after the whole split is parsed into the batch buffer; the later passes are
            # the reordered replay. Both read the one cache.
            ds = cached.concatenate(replay.repeat())
        else:
            ds = cached.repeat()
    options = tf.data.Options()
    # Few shards: shard by record, not by file, across multi-worker replicas.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.autotune.enabled = False  # the parallelism above is set (see the docstring)
    # The prefetch buffer still grows while the model waits for input (tf.data's prefetch
    # autotuner, which is not the model thread's).
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def block_parse_spec(spec: Dict[str, tf.io.FixedLenFeature]):
    """The column blocks' parse spec (contracts/blocks.py: block_spec) for a row parse spec of
    one value a row (shape [1], as the train input parses), with each row's validation-slice
    bucket; None when the blocks cannot give what it parses."""
    from components.contracts.blocks import block_spec

    if any(not isinstance(f, tf.io.FixedLenFeature) or list(f.shape) != [1] for f in spec.values()):
        return None
    out = block_spec(spec)
    if out is not None:
        out[SLICE_FEATURE] = tf.io.RaggedFeature(tf.int64)
    return out


# Blocks parsed together, then their rows reordered together, when shuffling: a batch draws
# from this many blocks (8 x BLOCK_ROWS rows), held in a shuffle buffer of blocks of about
# shuffle_buffer rows, as the row-wise input draws from its buffer of examples.
BLOCK_WINDOW = 8


def _block_batches(files, spec, label: str, to_target, batch_size: int, shuffle: bool, seed: int,
                   shuffle_buffer: int, validation_percent: int, part: str, repeat: bool) -> tf.data.Dataset:
    """(features, target) batches from column blocks: blocks interleaved from the shards (in
    a shuffled order when `shuffle`), a window of them parsed at once (one parse_example for
    thousands of rows), the part of the split asked for kept (each row's slice bucket), the
    rows reordered within the window when `shuffle`, and rebatched to `batch_size`."""
    parallel, cycle, compression = input_parallelism(), min(len(files), 8), records_compression(files)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression, buffer_size=1 << 20),
                       cycle_length=cycle, num_parallel_calls=min(cycle, parallel), deterministic=not shuffle)
    if shuffle:
        ds = ds.shuffle(max(2 * BLOCK_WINDOW, shuffle_buffer // BLOCK_ROWS), seed=seed)
    if repeat:
        ds = ds.repeat()
    keep = None if part == "all" or validation_percent <= 0 else part == "validation"

    def parse(serialized):
        parsed = {name: values.flat_values for name, values in tf.io.parse_example(serialized, spec).items()}
        bucket = parsed.pop(SLICE_FEATURE)
        order = tf.range(tf.shape(bucket)[0])
        if keep is not None:
            order = tf.boolean_mask(order, tf.equal(bucket < validation_percent, keep))
        if shuffle:
            order = tf.random.shuffle(order, seed=seed)
        features = {name: tf.expand_dims(tf.gather(values, order), -1) for name, values in parsed.items()}
        return features, to_target(features.pop(label))

    window = max(1, math.ceil(batch_size / BLOCK_ROWS)) * (BLOCK_WINDOW if shuffle else 1)
    return ds.batch(window).map(parse, num_parallel_calls=parallel).rebatch(batch_size)


def _records(files, shuffle: bool, seed: int, validation_percent: int, part: str) -> tf.data.Dataset:
    """The serialized records of the shards, interleaved in parallel (in a shuffled file
    order when `shuffle`), filtered to the part of the split asked for."""
    parallel, cycle = input_parallelism(), min(len(files), 8)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP", buffer_size=1 << 20),
                       cycle_length=cycle, num_parallel_calls=min(cycle, parallel), deterministic=not shuffle)
    if part != "all" and validation_percent > 0:
        held = part == "validation"
        ds = ds.filter(lambda record: tf.equal(in_validation_slice(record, validation_percent), held))
    return ds


# Decoded examples held for reordering after the first epoch: an image is tens to hundreds
# of kB decoded, so far fewer than the records' buffer.
DECODED_SHUFFLE = 1024


def _decoded_dataset(files, specs: FeatureSpecs, batch_size: int, shuffle: bool, seed: int, repeat: bool,
                     cache: str, cache_dir: str, shuffle_buffer: int, validation_percent: int, part: str,
                     target: str, max_rows: int = 0) -> tf.data.Dataset:
    """make_dataset for features a kind decodes one example at a time (images): records
    shuffled, each parsed and decoded in parallel (`decode_example`: resized to the spec),
    cached decoded in the first epoch (memory or local scratch), then reordered, augmented
    for training only (`augment`: train batches only, never validation) and batched."""
    parallel = input_parallelism()
    spec = {f.name: kind.parse_feature(f) for kind, f in specs.each()}
    dtype = tf.float32 if specs.task == "regression" else tf.string
    spec[specs.label] = tf.io.FixedLenFeature([1], dtype)
    to_target = label_transform(specs, target)
    decoders = [(kind, f) for kind, f in specs.each() if kind.per_example]
    training = shuffle and part != "validation"

    def decode(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        for kind, f in decoders:
            parsed[f.name] = kind.decode_example(f, parsed[f.name])
        return parsed, to_target(parsed.pop(specs.label))

    def augment(features, y):
        features = dict(features)
        for kind, f in decoders:
            features[f.name] = kind.augment(f, features[f.name], training)
        return features, y

    ds = _records(files, shuffle, seed, validation_percent, part)
    if max_rows > 0:
        ds = ds.take(max_rows)
    if shuffle:
        ds = ds.shuffle(min(shuffle_buffer, 4 * DECODED_SHUFFLE), seed=seed)
    ds = ds.map(decode, num_parallel_calls=parallel, deterministic=not shuffle)
    if cache != names.CACHE_NONE:
        cached = ds.cache(os.path.join(cache_dir, "decoded-examples") if cache == names.CACHE_DISK else "")
        replay = cached.shuffle(DECODED_SHUFFLE, seed=seed) if shuffle else cached
        ds = (cached.concatenate(replay.repeat()) if shuffle else cached.repeat()) if repeat else replay
    elif repeat:
        ds = ds.repeat()
    if any(kind.augments_each(f, training) for kind, f in decoders):  # a random change of its own per example
        ds = ds.map(augment, num_parallel_calls=parallel).batch(batch_size)
    else:  # the same for every example (a cast): one op per batch, not per example
        ds = ds.batch(batch_size).map(augment, num_parallel_calls=parallel)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.autotune.enabled = False  # the parallelism is set (make_dataset's docstring)
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def in_validation_slice(serialized, percent: int):
    """Whether serialized examples fall in the validation slice of the train split: their
    bytes' hash in the first `percent` of 100 buckets (the same rows every run and epoch)."""
    return tf.strings.to_hash_bucket_fast(serialized, 100) < percent


def input_parallelism() -> int:
    """The cores this process may run on (its CPU affinity: a pod's cpuset, a taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def make_naive_dataset(file_pattern: str, specs: FeatureSpecs, batch_size: int) -> tf.data.Dataset:
    """The input pipeline people write first: one file after another, per-example parse,
    no parallelism, no prefetch. Only for the benchmark's comparison."""
    spec = parse_spec(specs, with_label=True)
    to_target = label_transform(specs)

    def parse_one(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        return parsed, parsed.pop(specs.label)

    ds = tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(file_pattern)), compression_type="GZIP").map(parse_one)
    return ds.batch(batch_size).map(lambda f, y: (f, to_target(y)))


def parsed_bytes_per_row(specs: FeatureSpecs, train_stats=None) -> int:
    """A generous estimate of one parsed example, in memory or in the disk cache (for the
    cache decision): each feature's as its kind estimates it (4 bytes a number; a string's
    object plus its average length from the statistics)."""
    def stats(name: str):
        return feature_statistics(train_stats, name) if train_stats is not None else None

    return sum(kind.parsed_bytes(f, stats(f.name)) for kind, f in specs.each()) + 16


INPUT_DESCRIPTIONS = {
    names.CACHE_MEMORY: "parsed batches cached in memory in the first epoch",
    names.CACHE_DISK: "parsed batches written to local scratch in the first epoch and read from there in later epochs",
    names.CACHE_NONE: "shards read and parsed every epoch (the split is over both cache budgets)",
}


ONE_EPOCH_INPUT = "shards read and parsed as the epoch goes (one epoch: no cache, nothing would replay it)"


def scratch_directory(setting: str) -> str:
    """Local scratch for the disk input cache: the setting, else $GPUPIPE_SCRATCH_DIR, else
    the system temp directory."""
    return setting or os.environ.get(names.SCRATCH_ENV) or tempfile.gettempdir()


def choose_input_cache(estimated_bytes: int, memory_budget_mb: int, disk_budget_mb: int, scratch_dir: str) -> str:
    """Where the parsed train batches live after the first epoch: "memory" when they fit the
    memory budget; else "disk" when they fit the disk budget and half the scratch
    directory's free space; else "none" (every epoch reads and parses the shards)."""
    if memory_budget_mb > 0 and estimated_bytes <= memory_budget_mb * 2 ** 20:
        return names.CACHE_MEMORY
    if disk_budget_mb > 0 and estimated_bytes <= disk_budget_mb * 2 ** 20:
        try:
            free = shutil.disk_usage(scratch_dir).free
        except OSError:
            free = 0
        if estimated_bytes <= free // 2:
            return names.CACHE_DISK
    return names.CACHE_NONE


def choose_caches(estimated_bytes: int, held_rows: int, train_rows: int, epochs: int, memory_budget_mb: int,
                  disk_budget_mb: int, scratch_dir: str):
    """(the train batches' cache, the validation slice's). The train batches: none with one
    epoch (nothing replays them: the copy and the memory are saved), else choose_input_cache.
    The slice (`held_rows` at most; about VALIDATION_ROWS at scale) is passed over after every
    epoch and for the linear start's scores: memory when the held-out rows fit the budget."""
    cache = choose_input_cache(estimated_bytes, memory_budget_mb, disk_budget_mb, scratch_dir) \
        if epochs > 1 else names.CACHE_NONE
    held_bytes = held_rows * estimated_bytes // max(1, train_rows)
    fits = cache == names.CACHE_MEMORY or 0 < held_bytes <= memory_budget_mb * 2 ** 20
    return cache, names.CACHE_MEMORY if held_rows and fits else names.CACHE_NONE


@contextlib.contextmanager
def input_cache_directory(cache: str, scratch_dir: str):
    """A fresh directory under scratch for the disk cache ("" for the other modes), removed
    afterwards, also after a preemption. Each process (worker) gets its own."""
    path = tempfile.mkdtemp(prefix="gpupipe-input-cache-", dir=scratch_dir) if cache == names.CACHE_DISK else ""
    try:
        yield path
    finally:
        if path:
            shutil.rmtree(path, ignore_errors=True)
