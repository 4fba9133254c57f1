"""The examples artifact (ingest writes it; validate, train, evaluate and push read it):
`<dir>/{train,eval}/part-NNNNN.tfrecord.gz` gzip TFRecord shards of tf.train.Example, and
`<dir>/manifest.json` (rows per split, source files, split rule, feature types), and
`<dir>/statistics/stats.pb`, the TFDV statistics ingest computed while it held the rows
(validate reuses them)."""
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
    """A record batch as serialized tf.train.Example (tfx_bsl's Arrow encoder), its columns
    under the names the SavedModel takes (safe_name)."""
    import pyarrow as pa
    from tfx_bsl.coders import example_coder

    from components.contracts.settings import safe_name

    lists = lists if lists is not None else as_list_batch(batch)
    lists = pa.RecordBatch.from_arrays(lists.columns, [safe_name(c) for c in lists.schema.names])
    return example_coder.RecordBatchToExamples(lists)
