"""`gpupipe init DATA --label COLUMN`: a commented config, proposed from a sample of the
table, that runs as it is.

The sample is the first `SAMPLE_ROWS` rows of the source's first file, read by
components/sources (CSV types by Arrow's inference). TFDV computes its statistics and
infers the schema: INT and FLOAT features become numeric features, BYTES ones categorical.
Columns empty in every sampled row are left out, and so are ID-like columns (text or
integers with a different value in every sampled row); a label with one value, or with a
different value in every row, is refused. The task and metric follow from the label:
two values -> binary (auc), more text values or at most `MAX_CLASS_INTEGERS` integers ->
multiclass (accuracy), other numbers -> regression (rmse). The metric's threshold is what
a model that learnt nothing scores, so a blessed model has learnt something.
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
MAX_CLASS_INTEGERS = 20  # an integer label with at most this many values is a class label
ID_MIN_ROWS = 20  # fewer sampled rows than this say nothing about a column being an ID
TARGET_STEPS = 400  # epochs are chosen for about this many training steps
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
    threshold: float
    threshold_why: str
    label_note: str
    rows: int  # sampled rows
    whole_file: bool  # the sample is the whole (single) file
    numeric: List[str] = field(default_factory=list)
    categorical: List[str] = field(default_factory=list)
    left_out: List[Tuple[str, str]] = field(default_factory=list)  # (column, reason)
    batch_size: int = 32
    epochs: int = 10
    learning_rate: float = 0.01
    label_missing: float = 0.0  # share of sampled rows without a label

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
    """(task, metric, threshold, why the threshold, a note on the label) from the label's
    sampled values; a label no model can learn is refused."""
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
        return ("regression", "rmse", float(f"{std:.4g}"),
                "predicting the mean scores about this (the label's standard deviation); the model must do better",
                note)
    if distinct == len(present) and len(present) >= ID_MIN_ROWS:
        raise GpupipeError(f"{source}: label '{name}' has a different value in each of its {len(present)} sampled "
                           "rows (an ID, not a class): pass --label the column to predict")
    shown = ", ".join(f"{c['values']} {_share(c['counts'], len(present))}" for c in counts[:5])
    shown += ", ..." if distinct > 5 else ""
    if distinct == 2:
        return ("binary", "auc", 0.5, "a model that learnt nothing scores 0.5; the model must do better",
                f"binary: {shown}{missing}")
    top = counts[0]["counts"] / len(present)
    return ("multiclass", "accuracy", math.floor(top * 100) / 100,
            f"always answering {counts[0]['values']!r} (the most frequent class) scores {top:.2f}; the model must "
            "do better", f"multiclass: {distinct} values ({shown}){missing}")


def _features(table, label: str) -> Tuple[List[str], List[str], List[Tuple[str, str]]]:
    """(numeric, categorical, left out with the reason) by TFDV's statistics and schema
    inference on the sampled rows."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    from tensorflow_metadata.proto.v0 import schema_pb2

    tfdv = _tfdv()
    left_out, columns = [], {}
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
        return [], [], left_out
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
        elif kind in (schema_pb2.INT, schema_pb2.FLOAT):
            numeric.append(name)
        else:
            categorical.append(name)
    return numeric, categorical, left_out


def propose(source: str, label: str, sample_rows: int = SAMPLE_ROWS, name: Optional[str] = None,
            data_format: str = "auto") -> Proposal:
    files = readers.resolve(source, data_format)
    first = files[0]
    table = readers.sample(first, sample_rows)
    if label not in table.column_names:
        raise GpupipeError(f"{source}: no column '{label}' (columns: {', '.join(table.column_names)}): pass --label "
                           "one of them")
    rows = table.num_rows
    task, metric, threshold, why, note = _label_task(table.column(label), label, source, rows)
    numeric, categorical, left_out = _features(table, label)
    if not numeric and not categorical:
        raise GpupipeError(f"{source}: no column besides '{label}' can be a feature"
                           f"{' (' + '; '.join(f'{c}: {r}' for c, r in left_out) + ')' if left_out else ''}: "
                           "add feature columns to the data")
    batch_size = 32 if rows < SMALL_TABLE_ROWS else 256
    steps_per_epoch = max(1, math.ceil(rows * 0.8 / batch_size))
    return Proposal(
        name=name or pipeline_name(source), source=source, format=first.format, label=label, task=task, metric=metric,
        threshold=threshold, threshold_why=why, label_note=note, rows=rows,
        whole_file=len(files) == 1 and rows < sample_rows, numeric=numeric, categorical=categorical,
        left_out=left_out, batch_size=batch_size, label_missing=table.column(label).null_count / rows,
        epochs=min(40, max(3, math.ceil(TARGET_STEPS / steps_per_epoch))),
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
    sampled = f"{p.rows} sampled rows" + (" (the whole file)" if p.whole_file else
                                          f" (the first {p.rows} of {p.source}; more may follow)")
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
    lines.append("  # TFDV inferred these BYTES: a vocabulary (or hash buckets) and an embedding; missing is a value")
    lines += ["  categorical_features:", *_items(p.categorical)] if p.categorical else ["  categorical_features: []"]
    if p.left_out:
        lines.append("  # left out by gpupipe init (add one back to a list above if it is a real feature):")
        lines += [f"  #   {c}: {reason}" for c, reason in p.left_out]
    lines += [
        "  split:",
        "    eval_percent: 20  # a deterministic hash of the whole row; split.key: COLUMN keeps a key's rows together",
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
        f"  epochs: {p.epochs}  # about {TARGET_STEPS} steps over the sampled rows' train split",
        f"  learning_rate: {p.learning_rate}",
        "evaluation:",
        f"  metric: {p.metric}",
        f"  threshold: {p.threshold}  # {p.threshold_why}",
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
