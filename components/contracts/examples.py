"""The examples artifact (ingest writes it; validate, train, evaluate and push read it):
`<dir>/{train,eval}/part-NNNNN.tfrecord.gz` gzip TFRecord shards of tf.train.Example, and
`<dir>/manifest.json` (rows per split, source files, split rule, feature types), and
`<dir>/statistics/stats.pb`, the TFDV statistics ingest computed while it held the rows
(validate reuses them).

Beside the shards, for the train input alone: `<dir>/blocks/{train,eval}/part-NNNNN.tfrecord`
(TFRecord without compression: `block_shard_path`), the same rows in column blocks
(`encode_blocks`): one tf.train.Example holds up to
BLOCK_ROWS consecutive rows of a split, each feature a list of their values (a missing
number NaN, a missing string empty: what the row-wise parse fills in), so one parse reads a
block at a fraction of parsing its rows one Example each (docs/benchmarks.md, "Feeding the
GPU"). Every other reader reads the row shards; data gpupipe did not write has no blocks
and is read row by row.

Beside them too, when ingest wrote blocks: `<dir>/sample/train.parquet`, a uniform sample of
up to SAMPLE_ROWS train rows (`TrainSample`: each row's priority a hash of its position in
the source, the rows of smallest priority kept, in the source's order), its columns as the
blocks hold them with each row's validation-slice bucket. The linear start and evaluate's
baseline read it (contracts/linear.py: read_train_sample) without TensorFlow and without
decompressing the split."""
from __future__ import annotations

import json
import math
from typing import List, Optional

from components.contracts import names, storage
from components.contracts.errors import GpupipeError


def examples_pattern(examples_dir: str, split: str) -> str:
    """The glob of one split's shards inside an examples artifact."""
    return storage.join(examples_dir, split, "part-*.tfrecord.gz")


def shard_path(examples_dir: str, split: str, index: int) -> str:
    return storage.join(examples_dir, split, f"part-{index:05d}.tfrecord.gz")


def split_files(examples_dir: str, split: str, required: bool = True) -> List[str]:
    """One split's shards (local or on an object store), sorted; none is an error when `required`."""
    files = [e.uri for e in storage.glob(examples_pattern(examples_dir, split))]
    if required and not files:
        raise GpupipeError(f"examples: no {split} shards under {examples_dir}; run ingest first")
    return files


def spread_shards(files: List[str], share: float, at_least: int = 1) -> List[str]:
    """`share` of the shards (at least one), evenly spaced over them: ingest writes rows in the
    source's order, so evenly spaced shards sample a sorted table (by time, by label) over its
    whole range, where the first ones would hold its start only."""
    if share >= 1 or len(files) <= 1:
        return list(files)
    count = min(len(files), max(at_least, math.ceil(len(files) * share)))
    return sorted({files[int(i * len(files) / count)] for i in range(count)})


BLOCK_ROWS = 1024
# Each row's validation-slice bucket (in_validation_slice's hash of its row-wise Example,
# modulo 100), so the block input holds out the same rows as the row-wise one.
SLICE_FEATURE = "__gpupipe_slice_bucket__"


def slice_buckets(records: List[bytes]):
    """Each row-wise record's validation-slice bucket, 0-99 (train/data.py: in_validation_slice's
    hash of the serialized tf.Example), what SLICE_FEATURE holds. The records go in as one
    string tensor: a Python list is first checked element by element for tensors to pack
    (about 0.4 core-µs a record of the click-through table, against 0.2 in all this way)."""
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(tf.constant(records, tf.string), 100).numpy()


# The train sample's rows: what a linear model is fitted on (contracts/linear.py: LINEAR_MAX_TRAIN_ROWS).
SAMPLE_ROWS = 50_000
SAMPLE_FILE = "sample/train.parquet"
_ROW = "__gpupipe_row__"  # a sampled row's position in the source (the merge keeps the source's order)


def sample_path(examples_dir: str) -> str:
    return storage.join(examples_dir, SAMPLE_FILE)


def row_priorities(positions):
    """The sample priorities of rows at `positions` in the source (ints): splitmix64 of
    each, so the rows of smallest priority are a uniform sample, the same whatever the
    batches and workers that carried them."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = np.asarray(positions).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class TrainSample:
    """The `size` train rows of smallest priority (row_priorities) among those added, kept as
    they come: a row is a candidate while its priority is below the largest one kept, so
    past the first `size` rows few are (about size x ln(rows / size) in all). Each kept row
    carries its validation-slice bucket (slice_buckets of its row-wise record)."""

    def __init__(self, size: int = SAMPLE_ROWS):
        import numpy as np

        self.size = size
        self._parts: list = []  # (priorities, rows: a record batch with SLICE_FEATURE and _ROW)
        self._pending = 0
        self._threshold = np.iinfo(np.uint64).max

    def add(self, columns, records: List[bytes], positions) -> None:
        """Train rows: `columns` (a record batch, what the blocks hold), their row-wise
        `records`, and each one's position in the source (ints: its row as read, the rows
        without a label and the other split's counted)."""
        import numpy as np
        import pyarrow as pa

        positions = np.asarray(positions, np.int64)
        priorities = row_priorities(positions)
        picked = np.flatnonzero(priorities < self._threshold)
        if not len(picked):
            return
        buckets = np.asarray(slice_buckets([records[i] for i in picked]), np.int8)
        rows = columns.take(pa.array(picked))
        rows = pa.RecordBatch.from_arrays(
            [*rows.columns, pa.array(buckets), pa.array(positions[picked])],
            [*rows.schema.names, SLICE_FEATURE, _ROW])
        self._parts.append((priorities[picked], rows))
        self._pending += len(picked)
        if self._pending > 2 * self.size:
            self._prune()

    def _prune(self) -> None:
        import numpy as np
        import pyarrow as pa

        if not self._parts:
            return
        priorities = np.concatenate([p for p, _ in self._parts])
        table = pa.Table.from_batches([b for _, b in self._parts]).combine_chunks()
        if len(priorities) > self.size:
            keep = np.argpartition(priorities, self.size - 1)[:self.size]
            priorities, table = priorities[keep], table.take(pa.array(keep))
            self._threshold = priorities.max()
        self._parts = [(priorities, table.combine_chunks().to_batches()[0])] if len(table) else []
        self._pending = len(priorities)

    def part(self):
        """What this process kept (a record batch, for write_train_sample), or None."""
        self._prune()
        return self._parts[0][1] if self._parts else None


def smallest_rows(parts: list, size: int = SAMPLE_ROWS):
    """TrainSample parts (each in Arrow's stream format, or None) merged: the `size` rows of
    smallest priority among them, in the source's order, as a table (its positions kept, so
    it can be merged again); None when no part holds a row. The same rows whichever parts,
    of whichever processes, carried them."""
    import numpy as np
    import pyarrow as pa

    tables = [pa.ipc.open_stream(p).read_all() for p in parts if p is not None]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    table = pa.concat_tables(tables).combine_chunks()
    positions = table.column(_ROW).to_numpy()
    if len(positions) > size:
        keep = np.argpartition(row_priorities(positions), size - 1)[:size]
        table, positions = table.take(pa.array(keep)), positions[keep]
    return table.take(pa.array(np.argsort(positions, kind="stable")))


def write_train_sample(examples_dir: str, parts: list, size: int = SAMPLE_ROWS) -> Optional[dict]:
    """Merges TrainSample parts (`smallest_rows`: the workers', or a Beam job's one merged
    part) into `<dir>/sample/train.parquet`; returns the manifest's entry, or None when no
    part holds a row."""
    import pyarrow.parquet as pq

    table = smallest_rows(parts, size)
    if table is None:
        return None
    table = table.remove_column(table.schema.get_field_index(_ROW))
    path = sample_path(examples_dir)
    storage.makedirs(storage.parent(path))
    pq.write_table(table, path)
    return {"file": SAMPLE_FILE, "rows": table.num_rows}


def block_shard_path(examples_dir: str, split: str, index: int) -> str:
    """A column-block shard: TFRecord without compression (`records_compression`). The feed
    reads them every epoch, and inflating gzip was about a third of its CPU (1.0 of 3.0
    core-µs a row of the click-through table) for 2.7x fewer bytes on disk
    (docs/benchmarks.md, "Ingest's gzip by ISA-L, one lookup table, uncompressed blocks")."""
    return storage.join(examples_dir, "blocks", split, f"part-{index:05d}.tfrecord")


def block_files(file_pattern: str) -> List[str]:
    """The column-block shards beside the row shards `file_pattern` names (an examples
    artifact's `<dir>/<split>/part-*.tfrecord.gz`), sorted; [] when there are none. (An
    artifact written before the blocks were uncompressed has `.tfrecord.gz` blocks.)"""
    split_dir, _, name = file_pattern.rpartition("/")
    examples_dir, _, split = split_dir.rpartition("/")
    if name != "part-*.tfrecord.gz" or not examples_dir:
        return []
    for pattern in ("part-*.tfrecord", "part-*.tfrecord.gz"):
        found = sorted(e.uri for e in storage.glob(storage.join(examples_dir, "blocks", split, pattern)))
        if found:
            return found
    return []


def records_compression(files: List[str]) -> str:
    """tf.data's compression_type for TFRecord files named like these: GZIP for `.gz`."""
    return "GZIP" if files and files[0].endswith(".gz") else ""


def encode_blocks(columns, buckets, rows: int = BLOCK_ROWS) -> list:
    """A record batch of scalar float32 and string/binary columns (safe names) as column
    blocks of `rows` rows (the last one shorter): a missing number NaN, a missing string
    empty, and each row's validation-slice bucket (`buckets`, 0-99) under SLICE_FEATURE.
    Laid out with Arrow and numpy (example_encoder.encode_blocks); the train input parses
    them with RaggedFeature (components/train/data.py: block_parse_spec)."""
    import numpy as np
    import pyarrow as pa

    from components.contracts import example_encoder

    if not columns.num_rows:
        return []
    buckets = np.asarray(buckets, np.int64)
    if len(buckets) and (buckets.min() < 0 or buckets.max() > 127):
        raise ValueError("encode_blocks: slice buckets must be in 0-127")
    batch = pa.RecordBatch.from_arrays([*columns.columns, pa.array(buckets)], [*columns.schema.names, SLICE_FEATURE])
    return example_encoder.encode_blocks(batch, [SLICE_FEATURE], rows)


def blockable(types) -> bool:
    """Whether columns of these Arrow types can be written as column blocks."""
    import pyarrow as pa

    return all(pa.types.is_float32(t) or pa.types.is_string(t) or pa.types.is_binary(t) for t in types)


def ingest_statistics_dir(examples_dir: str) -> str:
    """The statistics ingest computed while it held the data (one dataset per split), inside
    the examples artifact: what train normalises and builds vocabularies from."""
    return storage.join(examples_dir, "statistics")


def ingest_statistics_path(examples_dir: str) -> str:
    return storage.join(ingest_statistics_dir(examples_dir), names.STATS_FILE)


def manifest_path(examples_dir: str) -> str:
    return storage.join(examples_dir, names.MANIFEST_FILE)


def read_manifest(examples_dir: str) -> Optional[dict]:
    """The manifest ingest wrote, or None for examples from elsewhere."""
    text = storage.read_text(manifest_path(examples_dir))
    return None if text is None else json.loads(text)


# -- Arrow batches as tf.Example: what ingest writes and what the serving_examples signature takes
def _as_list_column(array):
    """Scalar column -> list column (what the tf.Example encoder and TFDV take); null ->
    null list, which encodes as a feature with no values (missing)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_list(array.type):  # already one list per row (a derived statistics column: text's tokens)
        values = array.values.cast(pa.binary()) if pa.types.is_string(array.type.value_type) else array.values
        return pa.ListArray.from_arrays(array.offsets, values, mask=pc.is_null(array))
    valid = pc.is_valid(array).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(valid, dtype=np.int32)]).astype(np.int32)
    values = array.drop_null()
    if pa.types.is_string(values.type):
        values = values.cast(pa.binary())
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~valid))


def as_list_batch(batch):
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([_as_list_column(c) for c in batch.columns], batch.schema.names)


def encode_examples(batch, lists=None) -> list:
    """A record batch as serialized tf.train.Example, its columns under the names the
    SavedModel takes (safe_name): numpy's vectorised encoder (example_encoder) for float32
    and bytes columns of one value a row, tfx_bsl's Arrow encoder for the rest."""
    import pyarrow as pa
    from tfx_bsl.coders import example_coder

    from components.contracts import example_encoder
    from components.contracts.settings import safe_name

    lists = lists if lists is not None else as_list_batch(batch)
    lists = pa.RecordBatch.from_arrays(lists.columns, [safe_name(c) for c in lists.schema.names])
    if example_encoder.can_encode(lists):
        return example_encoder.encode(lists)
    return example_coder.RecordBatchToExamples(lists)
