"""`gpupipe init DATA --label COLUMN`: a commented config, proposed from a sample of the
table, that runs as it is.

The sample is `SAMPLE_ROWS` rows drawn at random (bottom-k of seeded random keys, one
pass) across every row of the source's files, read by components/sources: a table sorted
by its label is sampled over its whole range. CSV columns are read as text and typed on
the sample (integer, else float, else text), so a column whose later rows hold text is
text. TFDV computes the sample's statistics and infers the schema: INT and FLOAT features
become numeric features, BYTES ones categorical; integer columns with few distinct values
(at most `CODE_MAX_VALUES`) or code-like ones (digits with leading zeros; a name such as
`*_code`, `zip`, `area`, `hour`, `month` with at most `CODE_MAX_NAMED_VALUES` values) are
categorical, and init says why. Left out, with a line saying why: columns empty in every
sampled row, ID-like columns (text or integers with a different value in every sampled
row) and leaks (a column that alone predicts the label almost perfectly on held-out
sampled rows: `LEAK_ACCURACY`, `LEAK_R2`). A label with one value, or with a different
value in every row, is refused. The task and metric follow from the label: two values ->
binary (auc), more text values or at most `MAX_CLASS_INTEGERS` integers -> multiclass
(accuracy), other numbers -> regression (rmse). The gate is `must_beat_trivial`: evaluate
scores a model that learnt nothing on the eval split at run time, and the model must beat
it (not a constant from this sample).
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.names import NA_VALUES
from components.contracts.settings import safe_name
from components.sources import readers

SAMPLE_ROWS = 10_000
SAMPLE_SEED = 0  # the random keys of the sample: the same file gives the same proposal
MAX_CLASS_INTEGERS = 20  # an integer label with at most this many values is a class label
CODE_MAX_VALUES = 10  # an integer column with at most this many values is proposed as categorical
CODE_MAX_NAMED_VALUES = 1000  # ... and with a code-like name, at most this many
CODE_NAME_WORDS = frozenset({"code", "codes", "id", "zip", "zipcode", "postcode", "postal", "area", "tract", "region",
                             "district", "county", "zone", "hour", "month", "day", "weekday", "dow", "type",
                             "category", "class", "group", "kind", "status", "station", "store"})
LEAK_ROWS = 5000  # sampled rows the leak check fits on (3-fold, held out)
LEAK_ACCURACY = 0.99  # a column alone this accurate on held-out rows ...
LEAK_ERROR_SHARE = 0.1  # ... and with at most this share of the most frequent class's errors, is a leak
LEAK_R2 = 0.99  # regression: a column alone with this R^2 on held-out rows is a leak
ID_MIN_ROWS = 20  # fewer sampled rows than this say nothing about a column being an ID
# The epoch cap: room for about this many training steps (early stopping on the validation
# slice of train usually ends training well before it), between MIN_EPOCHS and MAX_EPOCHS.
TARGET_STEPS = 20_000
MIN_EPOCHS, MAX_EPOCHS = 20, 300
SMALL_TABLE_ROWS = 10_000  # below: batch_size 32 and learning rate 0.01; else 256 and 0.001
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./\-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


@dataclass
class Proposal:
    """What init proposes, and why."""

    name: str
    source: str
    format: str
    label: str
    task: str
    metric: str
    sample_trivial: float  # what a model that learnt nothing scores on the sample (evaluate recomputes it)
    threshold_why: str
    label_note: str
    rows: int  # sampled rows
    whole_file: bool  # the sample is every row of the source
    total_rows: int = 0  # rows of the source the sample was drawn from
    files: int = 1  # files of the source
    codes: List[Tuple[str, str]] = field(default_factory=list)  # (integer column proposed categorical, why)
    numeric: List[str] = field(default_factory=list)
    categorical: List[str] = field(default_factory=list)
    left_out: List[Tuple[str, str]] = field(default_factory=list)  # (column, reason)
    batch_size: int = 32
    epochs: int = 10
    learning_rate: float = 0.01
    label_missing: float = 0.0  # share of sampled rows without a label

    threshold = "from the eval split at run time"  # what the gate's threshold is (`gpupipe init` prints it)

    @property
    def renamed(self) -> List[Tuple[str, str]]:
        return [(c, safe_name(c)) for c in [self.label, *self.numeric, *self.categorical] if safe_name(c) != c]


def pipeline_name(source: str) -> str:
    """A pipeline and model name from the source's file or folder name: lowercase letters,
    digits and '-', a letter first."""
    base = os.path.basename(source.rstrip("/")) or "table"
    base = re.sub(r"\.(gz|gzip)$", "", base, flags=re.I)
    base = re.sub(r"\.(csv|parquet|pq|tfrecords?)$", "", base, flags=re.I)
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-") or "table"
    return (name if name[0].isalpha() else f"t-{name}")[:63].rstrip("-")


def _tfdv():
    """TFDV, imported without its notice about IPython (a notebook's display) on the terminal."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        import tensorflow_data_validation as tfdv
    return tfdv


def _is_integer_valued(values) -> bool:
    import numpy as np

    return bool(np.all(np.equal(np.mod(values, 1), 0)))


def _share(count: int, total: int) -> str:
    return f"{count / total:.0%}"


def _label_task(column, name: str, source: str, rows: int) -> Tuple[str, str, float, str, str]:
    """(task, metric, what a model that learnt nothing scores on the sample, what that
    model answers, a note on the label) from the label's sampled values; a label no model
    can learn is refused."""
    import numpy as np
    import pyarrow as pa

    present = column.drop_null()
    if len(present) == 0:
        raise GpupipeError(f"{source}: label '{name}' is empty in all {rows} sampled rows: pass --label the column "
                           "to predict")
    counts = present.value_counts().to_pylist()
    counts.sort(key=lambda c: (-c["counts"], str(c["values"])))
    distinct = len(counts)
    missing = f", {_share(rows - len(present), rows)} missing (those rows are dropped)" if len(present) < rows else ""
    if distinct == 1:
        raise GpupipeError(f"{source}: label '{name}' has one value ({counts[0]['values']!r}) in its {rows} sampled "
                           "rows, and a model needs two or more: pass --label another column, or sample more rows")
    numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
    values = present.to_numpy() if numeric else None
    if numeric and distinct > 2 and not (distinct <= MAX_CLASS_INTEGERS and _is_integer_valued(values)):
        std = float(np.std(values))
        note = f"regression: numbers from {values.min():g} to {values.max():g}{missing}"
        return "regression", "rmse", float(f"{std:.4g}"), "always predicting the mean", note
    if distinct == len(present) and len(present) >= ID_MIN_ROWS:
        raise GpupipeError(f"{source}: label '{name}' has a different value in each of its {len(present)} sampled "
                           "rows (an ID, not a class): pass --label the column to predict")
    shown = ", ".join(f"{c['values']} {_share(c['counts'], len(present))}" for c in counts[:5])
    shown += ", ..." if distinct > 5 else ""
    if distinct == 2:
        return "binary", "auc", 0.5, "the same score for every row", f"binary: {shown}{missing}"
    top = counts[0]["counts"] / len(present)
    return ("multiclass", "accuracy", float(f"{top:.4g}"),
            f"always answering {counts[0]['values']!r}, the most frequent class",
            f"multiclass: {distinct} values ({shown}){missing}")


# ----------------------------------------------------------------------------- the sample
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


# ----------------------------------------------------------------------------- features
def _name_words(name: str) -> List[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def _code_reason(name: str, column, unique: int) -> Optional[str]:
    """Why an integer column is proposed as categorical, or None (a quantity)."""
    if unique <= CODE_MAX_VALUES:
        return (f"integers with {unique} distinct values in the sample: proposed as categorical codes (move it to "
                "numeric_features if it is a quantity)")
    words = [w for w in _name_words(name) if w in CODE_NAME_WORDS]
    if words and unique <= CODE_MAX_NAMED_VALUES:
        return (f"integers with {unique} distinct values and a code-like name ('{words[-1]}'): proposed as "
                "categorical codes (move it to numeric_features if it is a quantity)")
    return None


def _features(table, label: str, codes: Optional[dict] = None
              ) -> Tuple[List[str], List[str], List[Tuple[str, str]], List[Tuple[str, str]]]:
    """(numeric, categorical, left out with the reason, integer or digit columns proposed
    as categorical with the reason) by TFDV's statistics and schema inference on the
    sampled rows."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    from tensorflow_metadata.proto.v0 import schema_pb2

    codes = codes or {}
    tfdv = _tfdv()
    left_out, columns, proposed_codes = [], {}, []
    for name in table.column_names:
        if name == label:
            continue
        column = table.column(name)
        if column.null_count == len(column) or pa.types.is_null(column.type):
            left_out.append((name, "empty in every sampled row"))
            continue
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                or pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = pc.cast(column, pa.string())  # dates, times, booleans: categories
        columns[name] = column
    if not columns:
        return [], [], left_out, []
    frame = pd.DataFrame({name: column.to_pandas() for name, column in columns.items()})
    schema = tfdv.infer_schema(tfdv.generate_statistics_from_dataframe(frame), infer_feature_shape=False)
    kinds = {f.name: f.type for f in schema.feature}
    numeric, categorical = [], []
    for name, column in columns.items():
        kind = kinds.get(name)
        present = column.drop_null()
        unique = len(pc.unique(present))
        whole_numbers = kind == schema_pb2.INT or pa.types.is_integer(column.type)
        if (kind == schema_pb2.BYTES or whole_numbers) and unique == len(present) and len(present) >= ID_MIN_ROWS:
            left_out.append((name, f"a different value in each of its {len(present)} sampled rows (an ID: nothing "
                                   "a model can learn from)"))
        elif name in codes:
            categorical.append(name)
            proposed_codes.append((name, f"digits with leading zeros (such as '{codes[name]}'): codes, proposed as "
                                         "categorical"))
        elif kind in (schema_pb2.INT, schema_pb2.FLOAT):
            reason = _code_reason(name, column, unique) if whole_numbers else None
            if reason:
                categorical.append(name)
                proposed_codes.append((name, reason))
            else:
                numeric.append(name)
        else:
            categorical.append(name)
    return numeric, categorical, left_out, proposed_codes


def _leaks(table, label: str, task: str, numeric: List[str], categorical: List[str]) -> List[Tuple[str, str]]:
    """(column, why) for each feature that alone predicts the label almost perfectly on
    held-out sampled rows (3-fold): a depth-limited decision tree on a numeric column, the
    most frequent label per value (or the mean) for a categorical one. Classification:
    accuracy >= LEAK_ACCURACY with at most LEAK_ERROR_SHARE of the most frequent class's
    errors; regression: R^2 >= LEAK_R2. Such a column is usually the label computed from it,
    or a value known only after the outcome: a model would learn it and nothing else."""
    import numpy as np
    import pandas as pd
    from sklearn.model_selection import KFold
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    labelled = table.filter(table.column(label).is_valid())
    if labelled.num_rows < 3 * ID_MIN_ROWS:
        return []
    if labelled.num_rows > LEAK_ROWS:
        labelled = labelled.take(np.random.default_rng(SAMPLE_SEED).choice(labelled.num_rows, LEAK_ROWS,
                                                                           replace=False))
    regression = task == "regression"
    y = labelled.column(label).to_pandas().to_numpy()
    y = y.astype(float) if regression else pd.Series(y).astype(str).to_numpy()
    folds = list(KFold(3, shuffle=True, random_state=SAMPLE_SEED).split(y))
    if regression:
        trivial = float(np.mean((y - y.mean()) ** 2))
    else:
        trivial = 1 - pd.Series(y).value_counts().iloc[0] / len(y)  # the most frequent class's error
    found = []
    for name in [*numeric, *categorical]:
        raw = labelled.column(name).to_pandas()
        predicted = np.empty(len(y), dtype=float if regression else object)
        for train, test in folds:
            if name in numeric:
                x = raw.astype(float)
                x = x.fillna(x.min() - 1 if x.notna().any() else 0).to_numpy().reshape(-1, 1)
                tree = (DecisionTreeRegressor if regression else DecisionTreeClassifier)(
                    max_depth=6, min_samples_leaf=5, random_state=SAMPLE_SEED)
                predicted[test] = tree.fit(x[train], y[train]).predict(x[test])
            else:
                x = raw.astype(str).to_numpy()
                by_value = pd.DataFrame({"x": x[train], "y": y[train]}).groupby("x")["y"]
                table_of = by_value.mean() if regression else by_value.agg(lambda v: v.value_counts().index[0])
                fallback = y[train].mean() if regression else pd.Series(y[train]).value_counts().index[0]
                predicted[test] = pd.Series(x[test]).map(table_of).fillna(fallback).to_numpy()
        if regression:
            error = float(np.mean((y - predicted.astype(float)) ** 2))
            r2 = 1 - error / trivial if trivial else 0.0
            if r2 >= LEAK_R2:
                found.append((name, f"alone predicts '{label}' almost perfectly (R^2 {r2:.4f} on held-out sampled "
                                    "rows): a leak (the label computed from it, or a value known only after the "
                                    "outcome); add it back only if it is known when the model predicts"))
        else:
            accuracy = float(np.mean(predicted == y))
            if accuracy >= LEAK_ACCURACY and (1 - accuracy) <= LEAK_ERROR_SHARE * trivial:
                found.append((name, f"alone predicts '{label}' almost perfectly (accuracy {accuracy:.4f} on held-out "
                                    f"sampled rows, against {1 - trivial:.4f} for the most frequent class): a leak "
                                    "(the label computed from it, or a value known only after the outcome); add it "
                                    "back only if it is known when the model predicts"))
    return found


def propose(source: str, label: str, sample_rows: int = SAMPLE_ROWS, name: Optional[str] = None,
            data_format: str = "auto") -> Proposal:
    files = readers.resolve(source, data_format)
    first = files[0]
    header = readers.columns_of(first)
    if label not in header:
        raise GpupipeError(f"{source}: no column '{label}' (columns: {', '.join(header)}): pass --label "
                           "one of them")
    table, total, codes = sample_table(files, sample_rows)
    rows = table.num_rows
    task, metric, trivial, answer, note = _label_task(table.column(label), label, source, rows)
    numeric, categorical, left_out, proposed_codes = _features(table, label, codes)
    leaks = _leaks(table, label, task, numeric, categorical)
    leaked = {c for c, _ in leaks}
    numeric = [c for c in numeric if c not in leaked]
    categorical = [c for c in categorical if c not in leaked]
    left_out += leaks
    proposed_codes = [(c, why) for c, why in proposed_codes if c not in leaked]
    if not numeric and not categorical:
        raise GpupipeError(f"{source}: no column besides '{label}' can be a feature"
                           f"{' (' + '; '.join(f'{c}: {r}' for c, r in left_out) + ')' if left_out else ''}: "
                           "add feature columns to the data")
    batch_size = 32 if rows < SMALL_TABLE_ROWS else 256
    steps_per_epoch = max(1, math.ceil(rows * 0.8 / batch_size))
    return Proposal(
        name=name or pipeline_name(source), source=source, format=first.format, label=label, task=task, metric=metric,
        sample_trivial=trivial, threshold_why=answer, label_note=note, rows=rows,
        whole_file=rows == total, total_rows=total, files=len(files), numeric=numeric, categorical=categorical,
        left_out=left_out, codes=proposed_codes, batch_size=batch_size,
        label_missing=table.column(label).null_count / rows,
        epochs=min(MAX_EPOCHS, max(MIN_EPOCHS, math.ceil(TARGET_STEPS / steps_per_epoch))),
        learning_rate=0.01 if rows < SMALL_TABLE_ROWS else 0.001)


def _scalar(value: str) -> str:
    """A YAML scalar for a column name (quoted when plain YAML would read it otherwise)."""
    return value if _PLAIN.match(value) and value.lower() not in _YAML_WORDS else json.dumps(value)


def _dropped_label_line(missing: float) -> str:
    if missing <= 0.1:
        return "  max_dropped_label_fraction: 0.2  # more rows than this without a label stop ingest"
    bound = min(1.0, math.ceil((missing + 0.1) * 10) / 10)
    return (f"  max_dropped_label_fraction: {bound}  # {missing:.0%} of the sampled rows have no label (dropped); "
            "more than this stop ingest")


def _path(value: str) -> str:
    return value if _PLAIN_PATH.match(value) and re.search("[A-Za-z]", value) else json.dumps(value)


def _items(names: List[str], indent: str = "    ") -> List[str]:
    lines = []
    for name in names:
        safe = safe_name(name)
        lines.append(f"{indent}- {_scalar(name)}" + (f"  # the model's input: {safe}" if safe != name else ""))
    return lines


def render(p: Proposal, command: str, path: str) -> str:
    """The config as commented YAML."""
    every = "the whole file" if p.files == 1 else f"every row of its {p.files} files"
    sampled = f"{p.rows} sampled rows" + (f" ({every})" if p.whole_file else
                                          f" (drawn at random from all {p.total_rows:,} rows of {p.source})")
    lines = [
        f"# Proposed by `{command}` from {sampled}.",
        f"# Review it, then run it as it is: gpupipe run {path}",
        "# Every key and its default: pipelines/config.py and components/<step>/settings.py.",
        f"name: {p.name}",
        f"description: {json.dumps(f'{p.task} model of {p.label} in {os.path.basename(p.source)} (gpupipe init)')}",
        "data:",
        f"  source: {_path(p.source)}",
        f"  format: {p.format if p.format in readers.FORMATS else 'auto'}",
        f"  label: {_scalar(p.label)}  # {p.label_note}",
    ]
    lines.append("  # TFDV inferred these INT or FLOAT: standardised, a missing value imputed with the train mean")
    lines += ["  numeric_features:", *_items(p.numeric)] if p.numeric else ["  numeric_features: []"]
    lines.append("  # TFDV inferred these BYTES, or they are integer codes (below): a vocabulary (or hash buckets) and "
                 "an embedding; missing is a value")
    lines += ["  categorical_features:", *_items(p.categorical)] if p.categorical else ["  categorical_features: []"]
    if p.codes:
        lines.append("  # categorical, not numbers, by gpupipe init:")
        lines += [f"  #   {c}: {reason}" for c, reason in p.codes]
    if p.left_out:
        lines.append("  # left out by gpupipe init (add one back to a list above if it is a real feature):")
        lines += [f"  #   {c}: {reason}" for c, reason in p.left_out]
    lines += [
        "  split:",
        "    eval_percent: 20  # a deterministic hash of the feature values (never the label); split.key: COLUMN "
        "(any column) keeps a key's rows together",
        "  # A CSV cell spelt like one of na_values is missing; the default is Arrow's list:",
        f"  #   {', '.join(json.dumps(v) for v in NA_VALUES)}",
        "  # na_values: [\"\", NA, \"?\"]",
        _dropped_label_line(p.label_missing),
        "validation:",
        "  # Categorical values unseen in training: up to this share of a split's values pass with a warning (the",
        "  # model's out-of-vocabulary row takes them); more stop the run. Per feature:",
        "  # unseen_category_tolerance_by_feature: {COLUMN: 0.05}",
        "  unseen_category_tolerance: 0.01",
        "training:",
        f"  task: {p.task}",
        "  model: dnn  # or wide_deep, cross",
        "  hidden_units: [64, 32]",
        "  embedding_dim: 8",
        f"  batch_size: {p.batch_size}",
        f"  epochs: {p.epochs}  # a cap: room for about {TARGET_STEPS:,} steps over the sampled rows' train split",
        "  # Training stops when the loss on a held-out slice of the train split (validation_percent of its rows,",
        "  # never the eval split) has not improved for `patience` epochs, and keeps the best epoch's weights.",
        "  validation_percent: 10",
        "  early_stopping: {metric: loss, patience: 10}",
        f"  learning_rate: {p.learning_rate}",
        "evaluation:",
        f"  metric: {p.metric}",
        "  # The model must beat a model that learnt nothing, scored by evaluate on the eval split at run time",
        f"  # ({p.threshold_why}; on the sampled rows it scores {p.sample_trivial:g}).",
        "  must_beat_trivial: true",
        "  # true: a model worse than the linear baseline (LogisticRegression or Ridge on the same train split and",
        "  # features, scored on the eval split and reported beside the model either way) is not blessed",
        "  must_beat_baseline: false",
        f"  threshold: 0  # a fixed bound besides ({'an upper' if p.metric == 'rmse' else 'a lower'} bound on "
        f"{p.metric}); 0: none",
        "serving:",
        "  base: serving  # TF Serving versions land in serving/<model_name>/<N>/",
        f"  model_name: {p.name}",
    ]
    return "\n".join(lines) + "\n"


def init_config(source: str, label: str, output: Optional[str] = None, sample_rows: int = SAMPLE_ROWS,
                name: Optional[str] = None, data_format: str = "auto", command: str = "") -> Tuple[Path, Proposal]:
    """Proposes a config for `source` and writes it to `output` (default
    configs/<name>.yaml); an existing file is never overwritten."""
    import yaml

    from pipelines.config import parse_config

    def refuse_existing(path: Path) -> Path:
        if path.exists():
            raise GpupipeError(f"{path}: exists, and init does not overwrite a config: pass -o a new path, or "
                               "remove it")
        return path

    if output:
        refuse_existing(Path(output))
    proposal = propose(source, label, sample_rows, name, data_format)
    path = refuse_existing(Path(output or Path("configs") / f"{proposal.name}.yaml"))
    text = render(proposal, command or f"gpupipe init {source} --label {label}", str(path))
    parse_config(yaml.safe_load(text), origin=f"init: the config proposed for {source}")  # it must load as written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path, proposal
