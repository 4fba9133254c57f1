"""A synthetic click-through-rate table, seeded, any row count, streamed in Arrow batches.

13 numeric columns (I1..I13: counts and rates, heavy-tailed, about 10-40% missing) and 26
categorical columns (C1..C26) whose cardinalities grow geometrically from 10 to 10^4, with
Zipf-skewed value frequencies; a binary `label` drawn from a logistic model of a few
numeric columns and per-value effects of several categorical ones, so a model can learn it
(base click rate about 25%).
"""
from __future__ import annotations

from typing import Iterator, List
from urllib.parse import parse_qs, urlparse

import numpy as np
import pyarrow as pa

from components.contracts.errors import GpupipeError

NUMERIC = [f"I{i}" for i in range(1, 14)]
CATEGORICAL = [f"C{i}" for i in range(1, 27)]
LABEL = "label"
CARDINALITIES = [int(round(10 * (1000 ** (i / 25)))) for i in range(26)]  # 10 .. 10^4
SCHEME = "synthetic:"


def _effects(seed: int):
    """The hidden model: fixed by the seed, independent of the row count."""
    rng = np.random.default_rng(seed + 1_000_003)
    numeric_w = rng.normal(0, 0.6, size=len(NUMERIC)) * (rng.random(len(NUMERIC)) < 0.6)
    value_effects = [rng.normal(0, 0.8 if i % 3 == 0 else 0.0, size=card) for i, card in enumerate(CARDINALITIES)]
    missing = 0.1 + 0.3 * rng.random(len(NUMERIC))
    return numeric_w, value_effects, missing


def ctr_batches(rows: int, seed: int = 7, batch_rows: int = 100_000) -> Iterator[pa.RecordBatch]:
    """Streams `rows` rows as record batches (label string "0"/"1", numerics float32 with
    nulls, categoricals strings like "C7_123")."""
    numeric_w, value_effects, missing = _effects(seed)
    rng = np.random.default_rng(seed)
    ranks = [np.arange(1, card + 1) for card in CARDINALITIES]
    zipf = [(1.0 / r ** 1.1) / (1.0 / r ** 1.1).sum() for r in ranks]
    done = 0
    while done < rows:
        n = min(batch_rows, rows - done)
        raw = rng.lognormal(mean=1.0, sigma=1.2, size=(n, len(NUMERIC))).astype(np.float32)
        z = np.log1p(raw)
        logit = -1.6 + (z - z.mean(axis=0)) @ numeric_w
        ids = [rng.choice(card, size=n, p=p) for card, p in zip(CARDINALITIES, zipf)]
        for col, effects in zip(ids, value_effects):
            logit = logit + effects[col]
        label = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int8)
        arrays = [pa.array(label.astype(str))]
        names = [LABEL]
        for j, name in enumerate(NUMERIC):
            mask = rng.random(n) < missing[j]
            arrays.append(pa.array(np.round(raw[:, j], 3), mask=mask, type=pa.float32()))
            names.append(name)
        for name, col in zip(CATEGORICAL, ids):
            arrays.append(pa.array(np.char.add(f"{name}_", col.astype(str))))
            names.append(name)
        yield pa.RecordBatch.from_arrays(arrays, names)
        done += n


def parse_source(source: str) -> tuple[int, int]:
    """`synthetic:ctr?rows=200000&seed=7` -> (rows, seed)."""
    parsed = urlparse(source)
    if parsed.scheme != "synthetic" or parsed.path != "ctr":
        raise GpupipeError(f"data.source: '{source}' is not synthetic:ctr?rows=N&seed=S")
    query = parse_qs(parsed.query)
    try:
        rows = int(query.get("rows", ["100000"])[0])
        seed = int(query.get("seed", ["7"])[0])
    except ValueError:
        raise GpupipeError(f"data.source: '{source}': rows and seed must be integers") from None
    if rows < 1:
        raise GpupipeError(f"data.source: '{source}': rows must be at least 1")
    return rows, seed


def is_synthetic(source: str) -> bool:
    return source.startswith(SCHEME)


def write_csv(path: str, rows: int, seed: int = 7) -> None:
    """Writes the synthetic table as CSV (for benchmarks and examples of file sources)."""
    import pyarrow.csv as pacsv

    writer = None
    try:
        for batch in ctr_batches(rows, seed):
            if writer is None:
                writer = pacsv.CSVWriter(path, batch.schema)
            writer.write_batch(batch)
    finally:
        if writer is not None:
            writer.close()


def columns() -> List[str]:
    return [LABEL, *NUMERIC, *CATEGORICAL]
