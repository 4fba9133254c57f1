"""A text feature's columns in the linear design (components/contracts/linear.py): TF-IDF of its
tokens and n-grams, the design of TF-IDF plus logistic regression.

Fixed on the rows the design is fitted on: the vocabulary is the tokens and n-grams (by the
tokenizer's rule, components/contracts/tokens.py, up to the text feature's `ngrams`) found in
at least `LINEAR_TEXT_MIN_ROWS` rows, the `LINEAR_MAX_TOKENS` most frequent (by rows, ties by
token); each gets its smoothed inverse document frequency, ln((1 + rows) / (1 + its rows)) + 1.
A row's columns: for each vocabulary token it holds, (1 + ln(count)) x its idf (sublinear term
frequency), the row L2-normalised, then times `scale`; tokens outside the vocabulary are left
out, and a value with no token is a row of zeros. scikit-learn's TfidfVectorizer(sublinear_tf=True)
computes the same (`tests/test_text_data.py` holds them to it). `scale` > 1 weakens the L2
penalty on the text's weights alone (x2 is C x4 for them): the logistic regression's C suits a
few standardised columns, while thousands of sparse TF-IDF columns, each seen in a few rows,
need a weaker penalty to learn their words (measured: docs/data.md, Text, Quality and speed).
components/train/linear_text.py computes the same columns inside the model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

LINEAR_MAX_TOKENS = 50_000
LINEAR_TEXT_MIN_ROWS = 2
LINEAR_TEXT_SCALE = 2.0


@dataclass(frozen=True)
class TextColumn:
    name: str
    ngrams: int
    tokens: List[str]  # the vocabulary, most frequent first: the block's columns
    idf: List[float]
    scale: float = LINEAR_TEXT_SCALE


def _tokens(values, ngrams: int) -> Tuple[np.ndarray, np.ndarray, int]:
    """(each token and n-gram, as str; the row it is in; rows) of `values` (bytes or str, b"" missing)."""
    import pyarrow as pa

    from components.contracts.tokens import tokenize, with_ngrams

    values = list(values)
    array = pa.array(values, pa.binary()) if values and isinstance(values[0], bytes) else pa.array(values, pa.string())
    tokens = tokenize(array)
    if ngrams > 1:
        tokens = with_ngrams(tokens, ngrams)
    flat = tokens.flatten().to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(len(values)), np.diff(tokens.offsets.to_numpy()))
    return flat, rows, len(values)


def fit_text_column(name: str, values, ngrams: int, max_tokens: int = LINEAR_MAX_TOKENS,
                    min_rows: int = LINEAR_TEXT_MIN_ROWS) -> TextColumn:
    """The block's vocabulary and idf from the rows it is fitted on (module docstring)."""
    import pandas as pd

    flat, rows, n = _tokens(values, ngrams)
    codes, uniques = pd.factorize(flat)
    width = max(1, len(uniques))
    pairs = np.unique(rows.astype(np.int64) * width + codes)  # each token once per row
    document = np.bincount(pairs % width, minlength=len(uniques))
    kept = np.flatnonzero(document >= min_rows)
    order = sorted(kept.tolist(), key=lambda i: (-document[i], uniques[i]))[:max_tokens]
    idf = np.log((1.0 + n) / (1.0 + document[order])) + 1.0
    return TextColumn(name, int(ngrams), [str(uniques[i]) for i in order], [float(v) for v in idf])


def text_block(column: TextColumn, values):
    """Sparse [rows, len(column.tokens)]: each row's TF-IDF (module docstring)."""
    import pandas as pd
    from scipy import sparse

    flat, rows, n = _tokens(values, column.ngrams)
    at = pd.Index(column.tokens).get_indexer(flat) if len(column.tokens) else np.full(len(flat), -1)
    known = at >= 0
    block = sparse.coo_matrix((np.ones(int(known.sum())), (rows[known], at[known])),
                              shape=(n, len(column.tokens))).tocsr()  # duplicates summed: counts
    block.sum_duplicates()
    block.data = (1.0 + np.log(block.data)) * np.asarray(column.idf, np.float64)[block.indices]
    norms = np.sqrt(np.asarray(block.multiply(block).sum(axis=1)).reshape(-1))
    return sparse.diags(column.scale / np.maximum(norms, 1e-12)) @ block
