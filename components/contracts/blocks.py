"""Reading the column blocks ingest writes beside the row shards (examples.py: encode_blocks)
for a reader that wants whole columns: whether a split's blocks can give what a row-wise
parse spec parses (`readable_blocks`), and the blocks as batches of columns, one flat
tensor per feature, one value per row (`read_blocks`). Examples gpupipe did not write (data
from elsewhere, images) have no blocks; the caller then reads the row
shards. Evaluate reads its eval split here; train's input has its own reader
(components/train/data.py: _block_batches), which also shuffles and holds out rows."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

from components.contracts.examples import block_files, examples_pattern, records_compression

_CYCLE = 8  # block shards read side by side


def block_spec(spec: dict) -> Optional[dict]:
    """The blocks' parse spec (one tf.io.RaggedFeature a key) for a row parse spec
    {key: tf.io.FixedLenFeature}, or None when blocks cannot give what it parses: every
    feature must be one float32 a row whose missing value parses as NaN (or is required),
    or one string a row whose missing value parses as '' (or is required), as the blocks
    hold them (a missing number NaN, a missing string empty)."""
    import tensorflow as tf

    out = {}
    for key, feature in spec.items():
        if not isinstance(feature, tf.io.FixedLenFeature) or list(feature.shape) not in ([], [1]):
            return None
        default = feature.default_value
        if default is not None:
            flat = list(default) if isinstance(default, (list, tuple)) else [default]
            default = flat[0] if len(flat) == 1 else flat
        if feature.dtype == tf.float32:
            if default is not None and not (isinstance(default, float) and math.isnan(default)):
                return None
        elif feature.dtype == tf.string:
            if default not in (None, "", b""):
                return None
        else:
            return None
        out[key] = tf.io.RaggedFeature(feature.dtype)
    return out


def _kinds_in(record: bytes) -> Dict[str, str]:
    """{key: which value list it holds} of one serialized block."""
    import tensorflow as tf

    example = tf.train.Example.FromString(record)
    return {key: feature.WhichOneof("kind") for key, feature in example.features.feature.items()}


def readable_blocks(examples_dir: str, split: str, spec: dict) -> List[str]:
    """The split's block shards when they hold every key of the row parse spec `spec`, each
    as the spec parses it (float32 a float_list, a string a bytes_list); else [] (no blocks,
    an empty split, a spec the blocks cannot give: read the row shards)."""
    import tensorflow as tf

    if block_spec(spec) is None:
        return []
    files = block_files(examples_pattern(examples_dir, split))
    if not files:
        return []
    first = next(iter(tf.data.TFRecordDataset(files[:1], compression_type=records_compression(files)).take(1)), None)
    if first is None:
        return []
    held = _kinds_in(first.numpy())
    want = {tf.float32: "float_list", tf.string: "bytes_list"}
    return files if all(held.get(k) == want[f.dtype] for k, f in spec.items()) else []


def read_blocks(files: List[str], spec: dict, rows: int, parallel: int):
    """A tf.data.Dataset of {key: [rows'] values}, about `rows` rows a batch (whole blocks),
    from the block shards `files` (readable_blocks'), in a fixed order: the shards read side
    by side and interleaved, each batch of blocks parsed at once on `parallel` threads. A
    block holding fewer values for a key than it has rows is an error, not a silent shift."""
    import tensorflow as tf

    from components.contracts.examples import BLOCK_ROWS

    ragged = block_spec(spec)
    keys = list(ragged)
    cycle, compression = max(1, min(len(files), _CYCLE)), records_compression(files)
    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression, buffer_size=1 << 20),
        cycle_length=cycle, num_parallel_calls=min(cycle, parallel), deterministic=True)

    def parse(batch):
        parsed = tf.io.parse_example(batch, ragged)
        values = {k: parsed[k].flat_values for k in keys}
        sizes = tf.stack([tf.size(values[k]) for k in keys])
        # a stateful op: it runs with the map function (its automatic control dependencies)
        tf.debugging.assert_equal(sizes, tf.fill(tf.shape(sizes), sizes[0]), message=(
            "column blocks: a block holds a different number of values for some feature than for "
            f"{keys[0]}; run ingest again"))
        return values

    return records.batch(max(1, rows // BLOCK_ROWS)).map(parse, num_parallel_calls=parallel, deterministic=True)
