"""The examples artifact (ingest writes it; validate, train, evaluate and push read it):
`<dir>/{train,eval}/part-NNNNN.tfrecord.gz` gzip TFRecord shards of tf.train.Example, and
`<dir>/manifest.json` (rows per split, source files, split rule, feature types), and
`<dir>/statistics/stats.pb`, the TFDV statistics ingest computed while it held the rows
(validate reuses them).

Beside the shards, for the train input alone: `<dir>/blocks/{train,eval}/part-NNNNN.tfrecord.gz`,
the same rows in column blocks (`encode_blocks`): one tf.train.Example holds up to
BLOCK_ROWS consecutive rows of a split, each feature a list of their values (a missing
number NaN, a missing string empty: what the row-wise parse fills in), so one parse reads a
block at a fraction of parsing its rows one Example each (docs/benchmarks.md, "Feeding the
GPU"). Every other reader reads the row shards; data gpupipe did not write has no blocks
and is read row by row."""
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


def block_shard_path(examples_dir: str, split: str, index: int) -> str:
    return storage.join(examples_dir, "blocks", split, f"part-{index:05d}.tfrecord.gz")


def block_files(file_pattern: str) -> List[str]:
    """The column-block shards beside the row shards `file_pattern` names (an examples
    artifact's `<dir>/<split>/part-*.tfrecord.gz`), sorted; [] when there are none."""
    split_dir, _, name = file_pattern.rpartition("/")
    examples_dir, _, split = split_dir.rpartition("/")
    if name != "part-*.tfrecord.gz" or not examples_dir:
        return []
    return sorted(e.uri for e in storage.glob(storage.join(examples_dir, "blocks", split, "part-*.tfrecord.gz")))


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
