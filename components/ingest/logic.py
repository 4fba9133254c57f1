"""Ingest: CSV, Parquet or TFRecord into gzip TFRecord shards of tf.train.Example, one
folder per split (reading: components/sources/readers.py), and the same rows as column
blocks for the train input (contracts/examples.py). A large source is prepared, encoded and
written by one worker process per core (parallel.py), each with its own shards and
statistics, merged at the end.

Rows are read in Arrow batches and written as they come, so memory stays flat. The
train/eval split is a deterministic hash of `data.split.key` (any column of the data)
or else of the feature values, never of the label: the same rows land in the same split
on every run, and rows with the same key, or the same features, in one split. A missing
value stays a missing feature (an empty Feature), never 0 or "nan".
"""
from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from components import record_workers_peak_rss, vm_hwm_kb
from components.contracts import names
from components.contracts.errors import reports_errors
from components.contracts.examples import (BLOCK_ROWS, TrainSample, block_shard_path, encode_blocks, shard_path,
                                           slice_buckets, write_train_sample)
from components.contracts.statistics import StatisticsAccumulator
from components.contracts.tfrecord import RecordWriter
from components.ingest.settings import DataSettings
from components.kinds.base import RowSource
from components.ingest.tables import (GZIP_LEVEL, SHARD_ROWS, Tally, column_types, finish_ingest, prepare_batch,
                                      statistics_options, time_cutoff, to_stream, writes_blocks)
from components.ingest.parallel import Workers, can_fork
from components.sources import readers


class _ShardWriter:
    """Writes TFRecord shards of at most `shard_rows` rows into one split folder
    (`path_of(index)`: a shard's path), gzip by ISA-L (contracts/tfrecord.py) at
    `compression_level` (ISA-L's, 0-3), or without compression (None: the column blocks).
    Records are written in a background thread (ISA-L releases the GIL while it compresses),
    so encoding the next batch overlaps with writing this one."""

    def __init__(self, path_of, shard_rows: int, compression_level: Optional[int]):
        import tensorflow as tf

        self._path_of = path_of
        self._shard_rows = shard_rows
        self._level = compression_level
        self._writer = None
        self._in_shard = 0
        self._pending = None
        self.shards = 0
        self.rows = 0
        tf.io.gfile.makedirs(os.path.dirname(path_of(0)))

    def write(self, records: List[bytes]) -> None:
        self.wait()
        self._pending = _pool().submit(self._write, records)

    def write_blocks(self, columns: pa.RecordBatch, records: List[bytes]) -> None:
        """`columns`' rows (their row-wise `records`, for the slice buckets) as column blocks."""
        self.wait()
        self._pending = _pool().submit(self._write_blocks, columns, records)

    def _write_blocks(self, columns: pa.RecordBatch, records: List[bytes]) -> None:
        buckets = slice_buckets(records)
        blocks = encode_blocks(columns, buckets)
        sizes = [min(BLOCK_ROWS, columns.num_rows - i * BLOCK_ROWS) for i in range(len(blocks))]
        self._write(blocks, sizes)

    def _write(self, records: List[bytes], sizes: Optional[List[int]] = None) -> None:
        """`records` (each `sizes[i]` rows; None: one each) into the shards: a shard takes
        records while it holds fewer than shard_rows rows."""
        start = 0
        while start < len(records):
            if self._writer is None or self._in_shard >= self._shard_rows:
                self._roll()
            room = self._shard_rows - self._in_shard
            if sizes is None:
                stop = start + min(room, len(records) - start)
                rows = stop - start
            else:  # up to the record that fills the shard
                held = np.cumsum(sizes[start:])
                stop = min(len(records), start + int(np.searchsorted(held, room)) + 1)
                rows = int(held[stop - start - 1])
            self._writer.write_many(records[start:stop])
            self._in_shard += rows
            self.rows += rows
            start = stop

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def _roll(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = RecordWriter(self._path_of(self.shards), self._level)
        self.shards += 1
        self._in_shard = 0

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


_POOLS: Dict[int, ThreadPoolExecutor] = {}


def _pool() -> ThreadPoolExecutor:
    """This process's writer threads (a forked worker's own: a pool copied by the fork
    holds threads that do not exist in the child)."""
    pid = os.getpid()
    if pid not in _POOLS:
        _POOLS[pid] = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpupipe-shard-writer")
    return _POOLS[pid]


class _Outputs:
    """What one process writes and counts: each split's row shards, column blocks and its
    part of the train sample (when `with_blocks`), and statistics. `shard_index(n)`: the index of its n-th shard (a worker's
    shards interleave with the others' by index, so the shards stay in the source's order)."""

    def __init__(self, output_dir: str, settings: DataSettings, shard_rows: int, compression_level: int,
                 with_statistics: bool, with_blocks: bool, shard_index=lambda n: n):
        def paths(path_of, split):
            return lambda n: path_of(output_dir, split, shard_index(n))

        self.writers = {split: _ShardWriter(paths(shard_path, split), shard_rows, compression_level)
                        for split in names.SPLITS}
        self.block_writers = {split: _ShardWriter(paths(block_shard_path, split), shard_rows, None)  # (uncompressed)
                              for split in names.SPLITS} if with_blocks else {}
        self.sample = TrainSample() if with_blocks else None
        self.statistics = {split: StatisticsAccumulator(statistics_options(settings))
                           for split in names.SPLITS} if with_statistics else {}

    def add(self, prepared, first_row: int) -> None:
        """A prepared batch whose first row read was the source's `first_row`-th (the train
        sample's positions: that and each train row's offset in the batch)."""
        for split, start, stop in prepared.ranges():
            if start == stop:
                continue
            records = prepared.records[start:stop]
            self.writers[split].write(records)
            if self.block_writers:
                self.block_writers[split].write_blocks(prepared.columns.slice(start, stop - start), records)
            if self.sample is not None and split == names.TRAIN_SPLIT:
                self.sample.add(prepared.columns.slice(start, stop - start), records,
                                first_row + prepared.offsets[start:stop])
            if self.statistics:
                self.statistics[split].add(prepared.lists.slice(start, stop - start))

    def close(self) -> None:
        for writer in [*self.writers.values(), *self.block_writers.values()]:
            writer.close()

    def counts(self) -> dict:
        """Rows and shards per split, block shards, the train sample's part, the statistics'
        partial accumulators and seconds."""
        sample = self.sample.part() if self.sample is not None else None
        return {"rows": {s: w.rows for s, w in self.writers.items()},
                "shards": {s: w.shards for s, w in self.writers.items()},
                "block_shards": {s: w.shards for s, w in self.block_writers.items()},
                "sample": to_stream(sample) if sample is not None else None,  # through the worker's pipe
                "partials": {s: acc.partial() for s, acc in self.statistics.items()},
                "stats_seconds": sum(acc.seconds for acc in self.statistics.values())}


# Rows prepared at once (several read batches joined by the step's process before it hands
# them to a worker): the TFDV generators and the encoders cost a fixed time per batch and
# column (bench/ingest.py measures the whole).
WORK_ROWS = 60_000


class _Worker:
    """A worker process's part (parallel.Workers): prepares each batch it is given and writes
    it to its own shards."""

    def __init__(self, index: int, workers: int, output_dir: str, settings: DataSettings, split_key, **outputs):
        self._settings, self._split_key = settings, split_key
        self._outputs = _Outputs(output_dir, settings, shard_index=lambda n: n * workers + index, **outputs)

    def add(self, batch, source: RowSource, cutoff: Optional[int], first_row: int) -> None:
        """One batch (from the step's process, in Arrow's stream format: `to_stream`), the
        source's `first_row`-th row its first."""
        if not isinstance(batch, pa.RecordBatch):
            batch = pa.ipc.open_stream(batch).read_next_batch()
        s = self._settings
        _, prepared = prepare_batch(batch, s, source, s.split.eval_percent, self._split_key, cutoff)
        if prepared is not None:
            self._outputs.add(prepared, first_row)

    def finish(self) -> dict:
        """What this worker counted, with its peak RSS (kB; None where unknown)."""
        self._outputs.close()
        return {**self._outputs.counts(), "peak_rss_kb": vm_hwm_kb()}

    def close(self) -> None:
        self._outputs.close()


def _gathered(batches, per_row_files: bool):
    """Read batches (about 15,000 rows of a CSV) joined into batches of at least WORK_ROWS
    (a source whose rows are files: as they are, each batch naming its rows' files)."""
    pending, rows = [], 0
    for batch in batches:
        if per_row_files:
            yield batch
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= WORK_ROWS:
            yield _joined(pending)
            pending, rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: List[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches(max_chunksize=1 << 30)[0]


def input_cores() -> int:
    """The cores this process may run on (its CPU affinity: a pod's cpuset, a taskset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def import_for_workers(with_statistics: bool) -> None:
    """What the workers use, imported once before they are forked: TensorFlow (the shards'
    writer, the slice buckets) and TFDV's statistics generators, which this process needs
    too (the statistics' merge). Each worker imported them itself before: 3 s of CPU each,
    on the cores the step reads and writes on, and this process once more at the end (the
    2M-row CSV: docs/benchmarks.md, "A task's exit, and what ingest's workers import")."""
    import components

    components.import_tensorflow(keras=False)  # (no model here)
    if with_statistics:
        from components.contracts.compat.tfdv import import_statistics

        import_statistics()


# Sources at least this large are ingested by worker processes, one per core
# (parallel.py); smaller ones in this process (a fork costs more than it saves there).
PARALLEL_MIN_BYTES = 32 << 20


def ingest_data(settings: DataSettings, output_dir: str, *, numeric_label: bool = False,
                shard_rows: int = SHARD_ROWS, compression_level: int = GZIP_LEVEL,
                with_statistics: bool = True, workers: Optional[int] = None) -> dict:
    """Reads `settings.source` (CSV, Parquet or TFRecord; a file, directory, glob or gs://
    prefix; or the synthetic table) and writes `output_dir/{train,eval}/part-*.tfrecord.gz`
    (and the column blocks beside them, contracts/examples.py) plus
    `output_dir/manifest.json`. Returns the manifest. `settings`: the config's data
    section; `numeric_label`: the label is a number (regression). The examples name each
    column by its safe name (contracts.settings.safe_name); the manifest's `columns` maps
    the renamed ones back to the data's names. `beam.ingest_data_beam` takes the same
    (settings, output_dir, numeric_label); the rest here tunes this in-process engine
    (rows per shard, gzip level, statistics or not, worker processes: None for one per
    core when the source is at least PARALLEL_MIN_BYTES, else none; bench/data.py
    measures them)."""
    label, split_key = settings.label, settings.split.key
    files = readers.resolve(settings.source, settings.format)
    types = column_types(settings, numeric_label, split_key)
    with_blocks = writes_blocks(settings, types, split_key)
    outputs = dict(shard_rows=shard_rows, compression_level=compression_level, with_statistics=with_statistics,
                   with_blocks=with_blocks)
    if workers is None:
        workers = input_cores() if sum(f.size for f in files) >= PARALLEL_MIN_BYTES else 0
    if workers > 1:
        import_for_workers(with_statistics)
    workers = workers if workers > 1 and can_fork() else 1  # (the imports do not start TensorFlow's runtime)
    # Forked before this process reads a TFRecord source (TensorFlow's runtime then runs).
    pool = Workers(workers, lambda i: _Worker(i, workers, output_dir, settings, split_key, **outputs)) \
        if workers > 1 else None
    local = None if pool else _Worker(0, 1, output_dir, settings, split_key, **outputs)
    try:
        readers.check_file_columns(files[0], label, settings.features, split_key)
        cutoff = time_cutoff(files, settings, types)
    except BaseException:
        if pool:
            pool.stop()
        raise
    dropped_no_label, read_rows = 0, 0
    per_file: Dict[str, dict] = {}  # by unit: a file, or an image folder's class folder
    try:
        for unit in readers.read_units(files, types, settings.na_values):
            entry = per_file.setdefault(unit.uri, {"uri": unit.uri, "bytes": 0, "rows": 0})
            entry["bytes"] += unit.size
            source = RowSource(unit.uri, unit.format, unit.files)
            for batch in _gathered(unit.batches, per_row_files=bool(unit.files)):
                labelled = batch.num_rows - batch.column(0).null_count
                dropped_no_label += batch.num_rows - labelled
                entry["rows"] += labelled
                if labelled and pool:
                    pool.submit(to_stream(batch), source, cutoff, read_rows)
                elif labelled:
                    local.add(batch, source, cutoff, read_rows)
                read_rows += batch.num_rows
        parts = pool.finish() if pool else [local.finish()]
        if pool:  # the step's peak RSS counts its workers' (a pod's memory is the sum of its processes')
            record_workers_peak_rss(sum(p["peak_rss_kb"] or 0 for p in parts))
    finally:
        if pool:
            pool.stop()
        else:
            local.close()  # (after finish, a no-op)
    rows = {split: sum(p["rows"][split] for p in parts) for split in names.SPLITS}
    stats = None
    if with_statistics:
        merged = {split: StatisticsAccumulator(statistics_options(settings)) for split in names.SPLITS}
        for part in parts:
            for split, partial in part["partials"].items():
                merged[split].merge(partial)
        stats = {split: acc.result(split) for split, acc in merged.items() if not acc.empty} \
            if sum(rows.values()) else {}
    tally = Tally(files=files, per_file=list(per_file.values()), rows=rows,
                  shards={split: sum(p["shards"][split] for p in parts) for split in names.SPLITS},
                  dropped_no_label=dropped_no_label, stats=stats,
                  stats_seconds=sum(p["stats_seconds"] for p in parts) + (
                      sum(acc.seconds for acc in merged.values()) if with_statistics else 0), cutoff=cutoff)
    blocks = {"rows": BLOCK_ROWS, "compression": "none",
              "shards": {split: sum(p["block_shards"][split] for p in parts) for split in names.SPLITS}} \
        if with_blocks else None
    sample = write_train_sample(output_dir, [p["sample"] for p in parts]) if with_blocks else None
    return finish_ingest(output_dir, settings, tally, numeric_label=numeric_label,
                         compression_level=compression_level, blocks=blocks, sample=sample,
                         engine={"name": "local", "workers": workers})


def pick_engine(settings: DataSettings) -> Tuple[str, Optional[float]]:
    """(local or beam, the source's size in MB when `auto` measured it)."""
    if settings.engine != "auto":
        return settings.engine, None
    megabytes = sum(f.size for f in readers.resolve(settings.source, settings.format)) / 2 ** 20
    return ("beam" if megabytes > settings.beam_threshold_mb else "local"), megabytes


@reports_errors("ingest")
def run_ingest(*, settings: DataSettings, examples_dir: str, numeric_label: bool = False,
               source_fingerprint: str = "") -> dict:
    """The ingest step: `settings` is the config's data section (its source as this run
    gives it). `source_fingerprint`: what the fingerprint step saw (the cache key); a
    different fingerprint now means the data changed in between, and what is there now is
    read. Returns the manifest."""
    engine, megabytes = pick_engine(settings)
    if settings.engine == "auto":
        print(f"note: data.engine auto: {settings.source} is {megabytes:,.1f} MB, "
              f"{'above' if engine == 'beam' else 'at or below'} data.beam_threshold_mb "
              f"({settings.beam_threshold_mb:g}): {engine}", flush=True)
    if engine == "beam":
        from components.ingest.beam import ingest_data_beam

        manifest = ingest_data_beam(settings, examples_dir, numeric_label=numeric_label)
    else:
        manifest = ingest_data(settings, examples_dir, numeric_label=numeric_label)
    for note in manifest.get("notes", []):
        print(f"note: data.source: {note}", flush=True)
    if manifest["rows_dropped_missing_label"]:
        print(f"note: {manifest['rows_dropped_missing_label']} row(s) without a '{settings.label}' dropped",
              flush=True)
    if source_fingerprint and source_fingerprint != manifest["source_fingerprint"]:
        print(f"note: {settings.source} changed after the fingerprint step ({source_fingerprint} -> "
              f"{manifest['source_fingerprint']}); ingested the files as they are now", flush=True)
    return manifest
