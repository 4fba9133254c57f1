"""Ingest: CSV, Parquet or TFRecord into gzip TFRecord shards of tf.train.Example, one
folder per split (reading: components/sources/readers.py).

Rows are read in Arrow batches and written as they come, so memory stays flat. The
train/eval split is a deterministic hash of `data.split.key` (any column of the data)
or else of the feature values, never of the label: the same rows land in the same split
on every run, and rows with the same key, or the same features, in one split. A missing
value stays a missing feature (an empty Feature), never 0 or "nan".
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

import pyarrow as pa

from components.contracts import names
from components.contracts.errors import reports_errors
from components.contracts.examples import shard_path
from components.contracts.statistics import StatisticsAccumulator
from components.ingest.settings import DataSettings
from components.kinds.base import RowSource
from components.ingest.tables import (GZIP_LEVEL, SHARD_ROWS, Tally, column_types, finish_ingest, prepare_batch,
                                      statistics_options, time_cutoff)
from components.sources import readers


class _ShardWriter:
    """Writes gzip TFRecord shards of at most `shard_rows` records into one split folder.
    Records are written in a background thread (TFRecordWriter releases the GIL while it
    compresses), so encoding the next batch overlaps with gzip of this one."""

    def __init__(self, examples_dir: str, split: str, shard_rows: int, compression_level: int):
        import tensorflow as tf

        self._tf = tf
        self._dir, self._split = examples_dir, split
        self._shard_rows = shard_rows
        self._options = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=compression_level)
        self._writer = None
        self._in_shard = 0
        self._pending = None
        self.shards = 0
        self.rows = 0
        tf.io.gfile.makedirs(os.path.dirname(shard_path(examples_dir, split, 0)))

    def write(self, records: List[bytes]) -> None:
        self.wait()
        self._pending = _POOL.submit(self._write, records)

    def _write(self, records: List[bytes]) -> None:
        for record in records:
            if self._writer is None or self._in_shard >= self._shard_rows:
                self._roll()
            self._writer.write(record)
            self._in_shard += 1
            self.rows += 1

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def _roll(self) -> None:
        if self._writer is not None:
            self._writer.close()
        path = shard_path(self._dir, self._split, self.shards)
        self._writer = self._tf.io.TFRecordWriter(path, options=self._options)
        self.shards += 1
        self._in_shard = 0

    def close(self) -> None:
        self.wait()
        if self._writer is not None:
            self._writer.close()


_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpupipe-shard-writer")


def ingest_data(settings: DataSettings, output_dir: str, *, numeric_label: bool = False,
                shard_rows: int = SHARD_ROWS, compression_level: int = GZIP_LEVEL,
                with_statistics: bool = True) -> dict:
    """Reads `settings.source` (CSV, Parquet or TFRecord; a file, directory, glob or gs://
    prefix; or the synthetic table) and writes `output_dir/{train,eval}/part-*.tfrecord.gz`
    plus `output_dir/manifest.json`. Returns the manifest. `settings`: the config's data
    section; `numeric_label`: the label is a number (regression). The examples name each
    column by its safe name (contracts.settings.safe_name); the manifest's `columns` maps
    the renamed ones back to the data's names. `beam.ingest_data_beam` takes the same
    (settings, output_dir, numeric_label); the rest here tunes this in-process engine
    (rows per shard, gzip level, statistics or not: bench/data.py measures them)."""
    label, split_key, eval_percent = settings.label, settings.split.key, settings.split.eval_percent
    files = readers.resolve(settings.source, settings.format)
    readers.check_file_columns(files[0], label, settings.features, split_key)
    types = column_types(settings, numeric_label, split_key)
    cutoff = time_cutoff(files, settings, types)
    writers = {split: _ShardWriter(output_dir, split, shard_rows, compression_level)
               for split in names.SPLITS}
    statistics = {split: StatisticsAccumulator(statistics_options(settings)) for split in names.SPLITS} if with_statistics else {}
    dropped_no_label = 0
    per_file: Dict[str, dict] = {}  # by unit: a file, or an image folder's class folder
    try:
        for unit in readers.read_units(files, types, settings.na_values):
            entry = per_file.setdefault(unit.uri, {"uri": unit.uri, "bytes": 0, "rows": 0})
            entry["bytes"] += unit.size
            source = RowSource(unit.uri, unit.format, unit.files)
            for batch in unit.batches:
                dropped, prepared = prepare_batch(batch, settings, source, eval_percent, split_key, cutoff)
                dropped_no_label += dropped
                if prepared is None:
                    continue
                entry["rows"] += prepared.rows
                for split, mask in prepared.masks():
                    writers[split].write(prepared.records_of(mask))
                    if statistics and mask.any():
                        statistics[split].add(prepared.lists.filter(pa.array(mask)))
    finally:
        for writer in writers.values():
            writer.close()
    rows = {split: w.rows for split, w in writers.items()}
    stats = None
    if statistics:
        stats = {split: acc.result(split) for split, acc in statistics.items() if not acc.empty} \
            if sum(rows.values()) else {}
    tally = Tally(files=files, per_file=list(per_file.values()), rows=rows, shards={split: w.shards for split, w in writers.items()},
                  dropped_no_label=dropped_no_label, stats=stats,
                  stats_seconds=sum(st.seconds for st in statistics.values()), cutoff=cutoff)
    return finish_ingest(output_dir, settings, tally, numeric_label=numeric_label,
                         compression_level=compression_level)


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
