"""The statistics artifact (ingest and validate write it; train, push and the next run's
drift check read it): one binary DatasetFeatureStatisticsList, one dataset per split. And
TFDV statistics in process, batch by batch.

One accumulator serves ingest (fed with the Arrow batches it holds) and validate's
fallback (fed with batches decoded from the shards): each batch goes through TFDV's
in-memory combiners and the accumulators are merged, so memory stays flat.
"""
from __future__ import annotations

import time
from typing import Dict

from components.contracts import names, storage
from components.contracts.errors import GpupipeError

COMPACT_EVERY = 8  # batches between compactions of the accumulators


class StatisticsAccumulator:
    """TFDV statistics of one dataset, fed one Arrow record batch (list columns) at a time."""

    def __init__(self, options=None):
        import tensorflow_data_validation as tfdv
        from tensorflow_data_validation.statistics import stats_impl

        from components.contracts.compat.tfdv import in_memory_generators

        self._impl = stats_impl
        self._options = options or tfdv.StatsOptions()
        self._generators = in_memory_generators(self._options)  # (TFDV's, without its Beam-only counters)
        self._acc = None
        self._batches = 0
        self.seconds = 0.0  # time spent in TFDV

    @property
    def empty(self) -> bool:
        return self._acc is None

    def add(self, record_batch) -> None:
        started = time.perf_counter()
        part = self._impl.generate_partial_statistics_in_memory(record_batch, self._options, self._generators)
        self._acc = part if self._acc is None else [
            g.merge_accumulators([a, p]) for g, a, p in zip(self._generators, self._acc, part)]
        self._batches += 1
        if self._batches % COMPACT_EVERY == 0:
            self._acc = [g.compact(a) for g, a in zip(self._generators, self._acc)]
        self.seconds += time.perf_counter() - started

    def partial(self):
        """The accumulators so far (picklable: what a worker process hands back), or None."""
        return self._acc

    def merge(self, partial) -> None:
        """Adds another accumulator's `partial()` (the same options) to this one."""
        if partial is None:
            return
        self._acc = partial if self._acc is None else [
            g.merge_accumulators([a, p]) for g, a, p in zip(self._generators, self._acc, partial)]

    def result(self, name: str):
        """A DatasetFeatureStatisticsList with one dataset named `name`."""
        started = time.perf_counter()
        stats = self._impl.extract_statistics_output(self._acc, self._generators)
        stats.datasets[0].name = name
        self.seconds += time.perf_counter() - started
        return stats


def read_statistics(path: str):
    """A DatasetFeatureStatisticsList from a binary statistics file (local or on an object
    store), or None when there is no such file."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    data = storage.read_bytes(path)
    if data is None:
        return None
    merged = statistics_pb2.DatasetFeatureStatisticsList()
    merged.ParseFromString(data)
    return merged


def write_statistics(path: str, by_split: Dict[str, object]) -> None:
    """One binary file holding every split's statistics, one dataset per split."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    merged = statistics_pb2.DatasetFeatureStatisticsList()
    for stats in by_split.values():
        merged.datasets.extend(stats.datasets)
    storage.write_bytes(path, merged.SerializeToString())


def load_statistics(statistics_dir: str, split: str):
    """One split's statistics (a DatasetFeatureStatistics) from a statistics artifact."""
    path = storage.join(statistics_dir, names.STATS_FILE)
    merged = read_statistics(path)
    if merged is None:
        raise GpupipeError(f"statistics: {path} not found; run validate first")
    for dataset in merged.datasets:
        if dataset.name == split:
            return dataset
    raise GpupipeError(f"statistics: no '{split}' dataset in {statistics_dir}; rerun validate")
