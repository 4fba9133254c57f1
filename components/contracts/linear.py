"""The linear model of a split's examples, shared by train (the default model starts from
it: components/train/linear_start.py) and evaluate (the baseline beside every evaluation:
components/evaluate/linear.py): scikit-learn's LogisticRegression (classification) or
Ridge (regression) on one design.

The design (`LinearDesign`, fixed on the rows it is fitted on): per numeric feature the
value imputed with the median and standardised, and a missing indicator; per categorical
feature one column for the values outside its `LINEAR_MAX_CATEGORIES` most frequent ones
(and values unseen when fitted), then one for each of them; per text feature the TF-IDF of its
tokens and n-grams (components/contracts/linear_text.py). Train builds the same design inside
the model from the same constants, so the model's linear part computes exactly what was
fitted here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from components.contracts.examples import (SAMPLE_ROWS, block_files, examples_pattern, records_compression,
                                           split_files, spread_shards)
from components.contracts.linear_text import TextColumn, fit_text_column, text_block

LINEAR_MAX_TRAIN_ROWS = SAMPLE_ROWS  # the train rows a linear model is fitted on: ingest's sample's size
SPREAD_SHARDS = 4  # a strided read takes at least this many shards, spread over the split
# A categorical feature's most frequent values one-hot in the design. 1,000 (every value the
# model's vocabulary holds) overfit the start on tail values of a few rows each: the ctr config
# at 2M rows scored AUC 0.8836 against 0.8862 with 100 (docs/benchmarks.md, Scale).
LINEAR_MAX_CATEGORIES = 100
_READ_BATCH = 4096


def read_split(examples_dir: str, split: str, label: str, kinds: Dict[str, str], regression: bool,
               stride: int = 1, rows: int = 0, keep: Optional[Callable] = None
               ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """About one example in `stride` of a split (all of them with 1) as columns: numeric
    float (NaN when missing), categorical and text bytes (b"" when missing); and the labels
    (text for classes). `rows`: the split's, when known: a strided read takes whole column
    blocks when every shard holds enough of them for the stride. `keep`: [records]
    serialized -> [records] bool, the examples to keep (the linear start's: those outside the
    validation slice); it reads the row shards."""
    import tensorflow as tf

    spec = {label: tf.io.FixedLenFeature([], tf.float32 if regression else tf.string)}
    for name, kind in kinds.items():
        spec[name] = (tf.io.FixedLenFeature([], tf.float32, default_value=math.nan) if kind == "numeric" else
                      tf.io.FixedLenFeature([], tf.string, default_value=""))
    files, parallel = split_files(examples_dir, split), None
    blocks = block_files(examples_pattern(examples_dir, split)) if stride > 1 and rows and keep is None else []
    if len(blocks) > 1:  # the same rows as column blocks (ingest's): a fraction of the decompression and parse
        read = _read_blocks(blocks, spec, stride, rows)
        if read is not None:
            return _label_apart(read, label, regression)
    if stride > 1 and len(files) > 1:
        # Reading every record to keep one in `stride` decompresses the whole split (at 2M rows
        # most of the linear start's and the baseline's time): read a spread share of the
        # shards instead (at least SPREAD_SHARDS, evenly spaced: a sorted table is sampled over
        # its whole range), and every k-th record of those, for about the same rows.
        picked = spread_shards(files, 1 / stride, at_least=SPREAD_SHARDS)
        stride, files, parallel = max(1, round(stride * len(picked) / len(files))), picked, min(len(picked), 4)
    if parallel:  # each picked shard strided on its own, read side by side
        every = stride
        dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP").shard(every, 0),
            cycle_length=parallel, num_parallel_calls=parallel)
    else:  # a whole split in its files' order (evaluate pairs it with the model's predictions)
        dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
        if stride > 1:
            dataset = dataset.shard(stride, 0)
    columns: Dict[str, List[np.ndarray]] = {name: [] for name in spec}
    for batch in dataset.batch(_READ_BATCH):
        parsed = tf.io.parse_example(batch, spec)
        kept = keep(batch).numpy() if keep is not None else None
        for name in spec:
            columns[name].append(parsed[name].numpy() if kept is None else parsed[name].numpy()[kept])
    return _label_apart({name: np.concatenate(parts) if parts else np.empty(0) for name, parts in columns.items()},
                        label, regression)


def read_train_sample(examples_dir: str, label: str, kinds: Dict[str, str], regression: bool,
                      held_out: int = 0) -> Optional[Tuple[Dict[str, np.ndarray], np.ndarray]]:
    """read_split's columns and labels for the train sample ingest wrote (contracts/examples.py:
    TrainSample, up to LINEAR_MAX_TRAIN_ROWS rows), without its rows in the validation slice's
    first `held_out` buckets; None when the examples have no sample (or not these columns).
    Arrow alone: no TensorFlow, no decompression of the split."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from components.contracts import storage
    from components.contracts.examples import SLICE_FEATURE, read_manifest, sample_path

    manifest = read_manifest(examples_dir) or {}
    if not manifest.get("sample"):
        return None
    wanted = [label, *kinds, SLICE_FEATURE]
    data = storage.read_bytes(sample_path(examples_dir))
    if data is None:
        return None
    table = pq.ParquetFile(pa.BufferReader(data)).read()  # (read_table would import pyarrow.dataset: 0.17 s)
    if any(name not in table.schema.names for name in wanted):
        return None
    if held_out:
        table = table.filter(pc.greater_equal(table.column(SLICE_FEATURE), held_out))
    out: Dict[str, np.ndarray] = {}
    for name in [label, *kinds]:
        column = table.column(name).combine_chunks()
        numeric = (name == label and regression) or (name != label and kinds[name] == "numeric")
        if numeric:
            out[name] = column.cast(pa.float32()).fill_null(math.nan).to_numpy()
        else:
            out[name] = column.cast(pa.binary()).fill_null(b"").to_numpy(zero_copy_only=False)
    return _label_apart(out, label, regression)


def _read_blocks(files: List[str], spec: dict, stride: int, rows: int):
    """read_split's strided sample from column blocks (contracts/examples.py: encode_blocks,
    whole blocks of consecutive rows): a spread share of the block shards (at least
    SPREAD_SHARDS) and every k-th block of those, for about one row in `stride` (at 2M rows
    0.9 CPU-s against about 3.4 from the row shards); None when a shard holds fewer than k
    blocks (too coarse) or the blocks do not hold every column of `spec` (row shards then)."""
    import tensorflow as tf

    from components.contracts.examples import BLOCK_ROWS

    picked = spread_shards(files, 1 / stride, at_least=SPREAD_SHARDS)
    every, parallel = max(1, round(stride * len(picked) / len(files))), min(len(picked), 4)
    if rows / len(files) < 4 * every * BLOCK_ROWS:
        return None
    ragged = {name: tf.io.RaggedFeature(feature.dtype) for name, feature in spec.items()}
    compression = records_compression(picked)
    dataset = tf.data.Dataset.from_tensor_slices(picked).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression, buffer_size=1 << 20).shard(every, 0),
        cycle_length=parallel, num_parallel_calls=parallel)
    columns: Dict[str, List[np.ndarray]] = {name: [] for name in spec}
    try:
        for batch in dataset.batch(16):
            parsed = tf.io.parse_example(batch, ragged)
            for name in spec:
                columns[name].append(parsed[name].flat_values.numpy())
    except tf.errors.InvalidArgumentError:  # a column of another type in the blocks
        return None
    out = {name: np.concatenate(parts) if parts else np.empty(0) for name, parts in columns.items()}
    return out if len({len(v) for v in out.values()}) == 1 else None


def _label_apart(out: Dict[str, np.ndarray], label: str, regression: bool):
    y = out.pop(label)
    if not regression:
        values, inverse = np.unique(y, return_inverse=True)
        y = np.array([v.decode("utf-8") for v in values], dtype=object)[inverse]
    return out, y


@dataclass(frozen=True)
class NumericColumn:
    name: str
    fill: float  # the median of the fitted rows
    mean: float  # of the filled values
    std: float


@dataclass(frozen=True)
class CategoricalColumn:
    name: str
    values: List[bytes]  # most frequent first; the design's column 0 is every other value


@dataclass(frozen=True)
class LinearDesign:
    numeric: List[NumericColumn]
    categorical: List[CategoricalColumn]
    text: List[TextColumn] = field(default_factory=list)

    @property
    def dense_width(self) -> int:
        """The numeric and categorical columns (the design's first ones)."""
        return 2 * len(self.numeric) + sum(len(c.values) + 1 for c in self.categorical)

    @property
    def width(self) -> int:
        return self.dense_width + sum(len(c.tokens) for c in self.text)


def fit_design(columns: Dict[str, np.ndarray], numeric: List[str], categorical: List[str],
               text: Optional[Dict[str, int]] = None) -> LinearDesign:
    """The design's constants from the rows it is fitted on (read_split's columns); `text`:
    {text feature: its n-grams} (linear_text.py)."""
    import pandas as pd

    nums = []
    for name in numeric:
        values = columns[name].astype(np.float64)
        fill = float(np.nanmedian(values)) if np.isfinite(values).any() else 0.0
        filled = np.where(np.isnan(values), fill, values)
        nums.append(NumericColumn(name, fill, float(filled.mean()) if len(filled) else 0.0,
                                  float(filled.std()) if len(filled) and filled.std() > 0 else 1.0))
    cats = [CategoricalColumn(name, list(pd.Series(columns[name]).value_counts().index[:LINEAR_MAX_CATEGORIES]))
            for name in categorical]
    texts = [fit_text_column(name, columns[name], ngrams) for name, ngrams in (text or {}).items()]
    return LinearDesign(nums, cats, texts)


def design_matrix(design: LinearDesign, columns: Dict[str, np.ndarray]):
    """Sparse [rows, design.width]: the numeric values standardised, their missing
    indicators, then each categorical feature's one-hot block (other values first), then
    each text feature's TF-IDF block."""
    import pandas as pd
    from scipy import sparse

    blocks, indicators = [], []
    for c in design.numeric:
        x = columns[c.name].astype(np.float64)
        missing = np.isnan(x)
        blocks.append(sparse.csr_matrix(((np.where(missing, c.fill, x) - c.mean) / c.std)[:, None]))
        indicators.append(sparse.csr_matrix(missing.astype(np.float64)[:, None]))
    blocks += indicators
    for c in design.categorical:
        codes = pd.Categorical(columns[c.name], categories=c.values).codes.astype(np.int64) + 1  # -1 (other) -> 0
        rows = len(codes)
        blocks.append(sparse.csr_matrix((np.ones(rows), (np.arange(rows), codes)), shape=(rows, len(c.values) + 1)))
    blocks += [text_block(c, columns[c.name]) for c in design.text]
    return sparse.hstack(blocks).tocsr()


@dataclass
class LinearFit:
    """A fitted linear model: `predict(matrix)` gives [rows, classes] probabilities in
    `classes`' order (a class absent from the fitted rows gets 0), or [rows] values; `coef`
    [design width, outputs] and `intercept` [outputs] are its logits' (classification, one
    per class of `classes`) or its prediction's weights."""

    name: str
    coef: np.ndarray
    intercept: np.ndarray
    regression: bool

    def logits(self, matrix) -> np.ndarray:
        return np.asarray(matrix @ self.coef) + self.intercept

    def predict(self, matrix) -> np.ndarray:
        z = self.logits(matrix)
        if self.regression:
            return z[:, 0]
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


ABSENT_CLASS_LOGIT = -30.0


def fit_linear(matrix, y: np.ndarray, regression: bool, classes: List[str]) -> LinearFit:
    """Ridge (alpha 1) on float targets, or LogisticRegression (L2, C 1, lbfgs) on class
    names, as logits over `classes` (a binary model's one weight vector becomes the logit of
    the second class, the first's 0: the same probabilities under softmax)."""
    from sklearn.linear_model import LogisticRegression, Ridge
    from threadpoolctl import threadpool_limits

    # One BLAS thread: lbfgs' dense steps are small, and OpenBLAS' threads spun on them (53k
    # rows at 2M: 2.5-3.0 CPU-s for the fit, 0.7-0.9 with one thread, and sooner).
    with threadpool_limits(1):
        if regression:
            model = Ridge(alpha=1.0).fit(matrix, y.astype(np.float64))
            return LinearFit("Ridge", _float32(np.asarray(model.coef_, dtype=np.float64).reshape(-1, 1)),
                             _float32(np.array([float(model.intercept_)])), True)
        model = LogisticRegression(max_iter=2000).fit(matrix, y)
    learnt = list(model.classes_)
    coef = np.zeros((matrix.shape[1], len(classes)))
    intercept = np.full(len(classes), ABSENT_CLASS_LOGIT)
    if len(learnt) == 2:
        rows = {learnt[0]: (np.zeros(matrix.shape[1]), 0.0), learnt[1]: (model.coef_[0], float(model.intercept_[0]))}
    else:
        rows = {c: (model.coef_[i], float(model.intercept_[i])) for i, c in enumerate(learnt)}
    for i, c in enumerate(classes):
        if c in rows:
            coef[:, i], intercept[i] = rows[c]
    return LinearFit("LogisticRegression", _float32(coef), _float32(intercept), False)


def _float32(weights: np.ndarray) -> np.ndarray:
    """The weights at float32's precision, the model's: two categories whose weights the model
    holds equal score alike here too (a tie in both), so evaluate's baseline and a model that
    is the linear start rank their rows alike (unrounded, rotten-tomatoes' films alone: AUC
    0.579008 in the model against 0.579028, films ordered by their weights' float64 noise)."""
    return weights.astype(np.float32).astype(np.float64)


# The linear start's fit, saved beside the model (assets.extra/, TF Serving ignores it) for
# evaluate: on the same examples, rows and features it is the baseline evaluate would fit.
LINEAR_FIT_FILE = "gpupipe_linear_fit.json"


def _fit_path(model_dir: str) -> str:
    from components.contracts import storage

    return storage.join(model_dir, "assets.extra", LINEAR_FIT_FILE)


def write_linear_fit(model_dir: str, design: LinearDesign, fit: LinearFit, source: dict, fit_rows: int) -> None:
    """`source`: what the fit was read from (the examples' fingerprint, label, kinds, train rows),
    which evaluate compares with its own before it takes the fit as its baseline; `fit_rows`:
    the rows it was fitted on."""
    import base64
    import json

    from components.contracts import storage

    storage.write_text(_fit_path(model_dir), json.dumps({
        "source": source, "fit_rows": int(fit_rows), "name": fit.name, "regression": fit.regression,
        "coef": fit.coef.tolist(), "intercept": fit.intercept.tolist(),
        "numeric": [[c.name, c.fill, c.mean, c.std] for c in design.numeric],
        "categorical": [[c.name, [base64.b64encode(v).decode("ascii") for v in c.values]]
                        for c in design.categorical],
        "text": [[c.name, c.ngrams, c.tokens, c.idf, c.scale] for c in design.text]}))


def read_linear_fit(model_dir: str):
    """(the design, the fit, its `source` and fit_rows) written by write_linear_fit, or None."""
    import base64
    import json

    from components.contracts import storage

    text = storage.read_text(_fit_path(model_dir))
    if text is None:
        return None
    raw = json.loads(text)
    design = LinearDesign([NumericColumn(*c) for c in raw["numeric"]],
                          [CategoricalColumn(n, [base64.b64decode(v) for v in values])
                           for n, values in raw["categorical"]], [TextColumn(*c) for c in raw.get("text", [])])
    fit = LinearFit(raw["name"], np.asarray(raw["coef"], np.float64), np.asarray(raw["intercept"], np.float64),
                    raw["regression"])
    return design, fit, raw["source"], int(raw.get("fit_rows", 0))
