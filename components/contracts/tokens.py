"""How a text column becomes tokens (Arrow's RE2 kernels): the rule ingest's vocabulary, the
linear design's text columns (components/contracts/linear.py) and, by the same patterns in
TensorFlow's string ops, the SavedModel (components/kinds/text_ops.py) share, so they read a
value alike:

- lower-cased (Unicode: Arrow's utf8_lower, TensorFlow's lower with encoding utf-8);
- split on non-word characters: a token is a maximal run of letters and digits (`[\\pL\\pN]+`,
  any script; '_', punctuation and whitespace separate), so "Don't!" is `don`, `t`;
- n-grams (bigrams with `ngrams: 2`) are neighbouring tokens joined by one space.

A value with no token (empty, whitespace, punctuation only) has no tokens."""
from __future__ import annotations

TOKEN = r"[\pL\pN]+"
SEPARATORS = r"[^\pL\pN]+"  # what splits a value into tokens (RE2 syntax, for Arrow and TensorFlow alike)


def _strings(values):
    import pyarrow as pa

    array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(list(values), pa.string())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        array = array.cast(pa.string())
    return array


def tokenize(values):
    """An Arrow string array (or a list of str/None) -> a ListArray of each value's tokens (a null
    value: an empty list)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    array = pc.fill_null(_strings(values), "")
    pieces = pc.split_pattern_regex(pc.utf8_lower(array), SEPARATORS)
    flat = pc.list_flatten(pieces)
    parents = pc.list_parent_indices(pieces).to_numpy()
    keep = pc.not_equal(pc.binary_length(flat), 0).to_numpy(zero_copy_only=False)
    counts = np.bincount(parents[keep], minlength=len(array))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep)))


def with_ngrams(tokens, ngrams: int):
    """Each row's tokens followed by its n-grams up to `ngrams` (2: bigrams), as one ListArray."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy()
    rows = len(tokens)
    parts, owners = [flat], [parents]
    for n in range(2, ngrams + 1):
        if len(flat) < n:
            break
        same = parents[:len(flat) - n + 1] == parents[n - 1:]
        joined = flat.slice(0, len(flat) - n + 1)
        for k in range(1, n):
            joined = pc.binary_join_element_wise(joined, flat.slice(k, len(flat) - n + 1), " ")
        parts.append(joined.filter(pa.array(same)))
        owners.append(parents[:len(flat) - n + 1][same])
    owner = np.concatenate(owners)
    order = np.argsort(owner, kind="stable")  # per row: its tokens, then its bigrams, ...
    values = pa.concat_arrays([p.cast(pa.string()) for p in parts]).take(pa.array(order))
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=rows))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)
