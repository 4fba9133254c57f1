"""init's features: which columns are numeric, which categorical, which are left out and why.

TFDV computes the sample's statistics and infers the schema: INT and FLOAT features become
numeric features, BYTES ones categorical; integer columns with few distinct values (at most
`CODE_MAX_VALUES`) or code-like ones (digits with leading zeros; a name such as `*_code`,
`zip`, `area`, `hour`, `month` with at most `CODE_MAX_NAMED_VALUES` values) are categorical.
Left out: columns empty in every sampled row, constant ones (the same value in every sampled
row; one that is also missing in some rows stays, since its missingness can carry signal),
ID-like columns (a different value in every sampled row) and leaks (a column that alone
predicts the label almost perfectly on held-out sampled rows: `LEAK_ACCURACY`, `LEAK_R2`).
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

from pipelines.init.sample import ID_MIN_ROWS, SAMPLE_SEED

CODE_MAX_VALUES = 10  # an integer column with at most this many values is proposed as categorical
CODE_MAX_NAMED_VALUES = 1000  # ... and with a code-like name, at most this many
CODE_NAME_WORDS = frozenset({"code", "codes", "id", "zip", "zipcode", "postcode", "postal", "area", "tract", "region",
                             "district", "county", "zone", "hour", "month", "day", "weekday", "dow", "type",
                             "category", "class", "group", "kind", "status", "station", "store"})
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


def _name_words(name: str) -> List[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def _shown(value) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


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


def choose_features(table, label: str, codes: Optional[dict] = None
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
        if column.null_count == 0 and len(values := pc.unique(column)) == 1:
            left_out.append((name, f"the same value ({_shown(values[0].as_py())}) in each of its {len(column)} "
                                   "sampled rows (a constant carries no signal)"))
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


def find_leaks(table, label: str, task: str, numeric: List[str], categorical: List[str]) -> List[Tuple[str, str]]:
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
