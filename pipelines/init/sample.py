"""init's sample of a table: `SAMPLE_ROWS` rows drawn at random across every row of the
source's files, in one pass.

Each row gets a seeded random key and the `SAMPLE_ROWS` smallest stay (bottom-k), so a table
sorted by its label is sampled over its whole range and the same file gives the same
sample. The rows are read by components/sources; CSV cells are read as text and typed on the
sample (integer, else float, else text), and a text column of digits with leading zeros is
kept as text and reported, since those are codes.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.names import NA_VALUES
from components.sources import readers

SAMPLE_ROWS = 10_000
SAMPLE_SEED = 0  # the random keys of the sample: the same file gives the same proposal
ID_MIN_ROWS = 20  # fewer sampled rows than this say nothing about a column being an ID


def _typed(column):
    """A text column of a CSV sample typed as Arrow's CSV inference would on these rows:
    integers, else floats, else text (which stays text: dates, booleans are categories)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = column.drop_null()
    if len(present) == 0:
        return pa.nulls(len(column), pa.null())
    for kind in (pa.int64(), pa.float64()):
        try:
            return pc.cast(column, kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return column


def _leading_zero_codes(column) -> Optional[str]:
    """A value like '02134' when the text column is digits and some have a leading zero
    (postal codes, account codes: numbers would lose the zeros and mean nothing)."""
    import pyarrow.compute as pc

    present = column.drop_null()
    if len(present) == 0 or not pc.all(pc.match_substring_regex(present, r"^[0-9]+$")).as_py():
        return None
    zeros = present.filter(pc.match_substring_regex(present, r"^0[0-9]+$"))
    return zeros[0].as_py() if len(zeros) else None


def sample_table(files: List[readers.SourceFile], rows: int, na_values=NA_VALUES) -> Tuple[object, int, dict]:
    """(the sample, the rows it was drawn from, {column: a leading-zero value} for CSV text
    columns of digit codes). Up to `rows` rows drawn uniformly at random from every row of
    `files` in one pass (each row gets a seeded random key; the `rows` smallest stay),
    read by components/sources; in file order. CSV cells are read as text and typed on the
    sample (see _typed)."""
    import numpy as np
    import pyarrow as pa

    first = files[0]
    if first.format == "synthetic":  # independent rows already: the first ones are a fair sample
        table = readers.sample(first, rows, na_values)
        return table, table.num_rows, {}
    head = readers.sample(first, min(rows, 1000), na_values)
    if first.format == "csv":
        types = {name: pa.string() for name in head.column_names}
    else:
        types = {f.name: pa.string() if pa.types.is_null(f.type) or pa.types.is_binary(f.type) else f.type
                 for f in head.schema}
    rng = np.random.default_rng(SAMPLE_SEED)
    kept, keys, order, seen = None, np.empty(0), np.empty(0, dtype=np.int64), 0
    for f in files:
        for batch in readers.read_batches(f, types, na_values):
            n = batch.num_rows
            batch_keys = rng.random(n)
            candidates = pa.Table.from_batches([batch])
            if kept is not None:
                candidates = pa.concat_tables([kept, candidates])
            all_keys = np.concatenate([keys, batch_keys])
            all_order = np.concatenate([order, np.arange(seen, seen + n)])
            seen += n
            if len(all_keys) > rows:
                pick = np.argpartition(all_keys, rows - 1)[:rows]
                candidates, all_keys, all_order = candidates.take(pa.array(pick)), all_keys[pick], all_order[pick]
            kept, keys, order = candidates, all_keys, all_order
    if kept is None or kept.num_rows == 0:
        raise GpupipeError(f"data.source: {first.uri} has no data rows; point it at a file with data")
    table = kept.take(pa.array(np.argsort(order, kind="stable")))
    codes = {}
    if first.format == "csv":
        columns = {}
        for name in table.column_names:
            column = table.column(name).combine_chunks()
            zeros = _leading_zero_codes(column)
            if zeros is not None:
                codes[name] = zeros
            columns[name] = column if zeros is not None else _typed(column)
        table = pa.table(columns)
    return table, seen, codes
