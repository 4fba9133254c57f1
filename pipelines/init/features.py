"""init's features: which kind takes each column, which columns are left out and why.

TFDV computes the sample's statistics and infers the schema; then each registered feature
kind's `detect` (components/kinds/) is asked in `detect_rank` order, and the first to claim
a column takes it: categorical claims BYTES columns and integer codes (few distinct values,
digits with leading zeros, a code-like name), numeric INT and FLOAT ones. Left out: columns
empty or near-empty (a value in fewer than `NEAR_EMPTY_SHARE` of the sampled rows), constant
ones (the same value in every sampled row; one that is also missing in some rows stays,
since its missingness can carry signal), ID-like columns (a different value in every sampled
row, unless a kind that claims such columns takes it) and leaks (a column that alone
predicts the label almost perfectly on held-out sampled rows: `LEAK_ACCURACY`, `LEAK_R2`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from pipelines.init.sample import ID_MIN_ROWS, SAMPLE_SEED

NEAR_EMPTY_SHARE = 0.01  # a column with a value in fewer sampled rows than this share is left out
LEAK_ROWS = 5000  # sampled rows the leak check fits on (3-fold, held out)
LEAK_ACCURACY = 0.99  # a column alone this accurate on held-out rows ...
LEAK_ERROR_SHARE = 0.1  # ... and with at most this share of the most frequent class's errors, is a leak
LEAK_R2 = 0.99  # regression: a column alone with this R^2 on held-out rows is a leak


def _tfdv():
    """TFDV, imported without its notice about IPython (a notebook's display) on the terminal."""
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        import tensorflow_data_validation as tfdv
    return tfdv


def _shown(value) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


@dataclass
class Chosen:
    """init's features: the columns each kind claimed ({kind name: columns}, in table order),
    the note a kind wrote for a column it claimed where its list's comment does not say it all
    ({column: why}), the columns left out ([(column, why)]) and the settings a kind wrote in a
    claimed column's entry ({column: {setting: value}}: a datetime column's format)."""

    features: Dict[str, List[str]] = field(default_factory=dict)
    notes: Dict[str, str] = field(default_factory=dict)
    left_out: List[Tuple[str, str]] = field(default_factory=list)
    settings: Dict[str, dict] = field(default_factory=dict)  # {column: its entry's settings}, where a kind gives some


def _ranked_kinds():
    from components.kinds import KINDS

    return sorted(KINDS.values(), key=lambda kind: kind.detect_rank)


def choose_features(table, label: str, codes: Optional[dict] = None) -> Chosen:
    """Each sampled column's kind, by TFDV's statistics and schema inference on the sampled rows
    and the kinds' own `detect` (asked in `detect_rank` order; the first to claim a column takes
    it). Left out first: empty, near-empty and constant columns; then a column every value of
    which differs (an ID) unless a kind that claims such columns (`claims_unique`: text,
    timestamps) takes it."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    from tensorflow_metadata.proto.v0 import schema_pb2

    from components.kinds import ColumnFacts

    codes = codes or {}
    tfdv = _tfdv()
    chosen, columns = Chosen(), {}
    for name in table.column_names:
        if name == label:
            continue
        column = table.column(name)
        present = len(column) - column.null_count
        if present == 0 or pa.types.is_null(column.type):
            chosen.left_out.append((name, "empty in every sampled row"))
            continue
        if present < NEAR_EMPTY_SHARE * len(column):
            chosen.left_out.append((name, f"a value in only {present} of its {len(column)} sampled rows "
                                          f"(under {NEAR_EMPTY_SHARE:.0%}: too sparse to learn from)"))
            continue
        if column.null_count == 0 and len(values := pc.unique(column)) == 1:
            chosen.left_out.append((name, f"the same value ({_shown(values[0].as_py())}) in each of its {len(column)} "
                                          "sampled rows (a constant carries no signal)"))
            continue
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
                or pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = pc.cast(column, pa.string())  # dates, times, booleans: text
        columns[name] = column
    if not columns:
        return chosen
    frame = pd.DataFrame({name: column.to_pandas() for name, column in columns.items()})
    schema = tfdv.infer_schema(tfdv.generate_statistics_from_dataframe(frame), infer_feature_shape=False)
    types = {f.name: f.type for f in schema.feature}
    kinds = _ranked_kinds()
    for name, column in columns.items():
        tfdv_type = types.get(name, schema_pb2.BYTES)
        present = column.drop_null()
        facts = ColumnFacts(name=name, column=column, tfdv_type=tfdv_type, unique=len(pc.unique(present)),
                            present=len(present),
                            whole_numbers=tfdv_type == schema_pb2.INT or pa.types.is_integer(column.type),
                            leading_zeros=codes.get(name))
        id_like = ((tfdv_type == schema_pb2.BYTES or facts.whole_numbers) and facts.unique == facts.present
                   and facts.present >= ID_MIN_ROWS)
        for kind in kinds:
            if id_like and not kind.claims_unique:
                continue
            note = kind.detect(facts)
            if note is not None:
                chosen.features.setdefault(kind.name, []).append(name)
                if note:
                    chosen.notes[name] = note
                if setting := kind.detect_setting(facts):
                    chosen.settings[name] = setting
                break
        else:
            chosen.left_out.append((name, f"a different value in each of its {facts.present} sampled rows (an ID: "
                                          "nothing a model can learn from)" if id_like else
                                          "no feature kind takes it"))
    return chosen


def find_leaks(table, label: str, task: str, features: Dict[str, List[str]]) -> List[Tuple[str, str]]:
    """(column, why) for each feature that alone predicts the label almost perfectly on
    held-out sampled rows (3-fold): a depth-limited decision tree on a numeric column, the
    most frequent label per value (or the mean) for a categorical one. Classification:
    accuracy >= LEAK_ACCURACY with at most LEAK_ERROR_SHARE of the most frequent class's
    errors; regression: R^2 >= LEAK_R2. `features`: {kind: columns}; a kind the linear model
    takes as numbers is tried as numbers, one it takes as categories as values, others not
    at all. Such a column is usually the label computed from it,
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
    from components.kinds import KINDS
    from components.kinds.base import LINEAR_CATEGORICAL, LINEAR_NUMERIC

    numeric = [c for kind, cs in features.items() if KINDS[kind].linear == LINEAR_NUMERIC for c in cs]
    categorical = [c for kind, cs in features.items() if KINDS[kind].linear == LINEAR_CATEGORICAL for c in cs]
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
