"""The label's task and metric, from its sampled values.

Two values -> binary (auc); more text values, or at most `MAX_CLASS_INTEGERS` integers ->
multiclass (accuracy); other numbers -> regression (rmse). With them comes what a model that
learnt nothing scores on the sample, for the config's comment (evaluate recomputes it on the
eval split at run time). A label with one value, or a different value in every row, is
refused: no model can learn it.
"""
from __future__ import annotations

from typing import Tuple

from components.contracts.errors import GpupipeError
from pipelines.init.sample import ID_MIN_ROWS

MAX_CLASS_INTEGERS = 20  # an integer label with at most this many values is a class label


def _is_integer_valued(values) -> bool:
    import numpy as np

    return bool(np.all(np.equal(np.mod(values, 1), 0)))


def _share(count: int, total: int) -> str:
    return f"{count / total:.0%}"


def label_task(column, name: str, source: str, rows: int) -> Tuple[str, str, float, str, str]:
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
