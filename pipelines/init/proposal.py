"""What `gpupipe init` proposes for a table, and how: sample it, read the label's task,
choose the features, size the training.

`propose` puts the other modules together: the sample (sample.py), the label's task and
metric (label.py), the features and the columns left out (features.py); the batch size,
learning rate and epoch cap follow from the number of sampled rows.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.settings import safe_name
from components.kinds import KINDS
from components.sources import readers
from pipelines.init.features import choose_features, find_leaks
from pipelines.init.label import label_task
from pipelines.init.sample import SAMPLE_ROWS, sample_table

# The epoch cap: room for about this many training steps (early stopping on the validation
# slice of train usually ends training well before it), between MIN_EPOCHS and MAX_EPOCHS.
TARGET_STEPS = 20_000
MIN_EPOCHS, MAX_EPOCHS = 20, 300
SMALL_TABLE_ROWS = 10_000  # below: batch_size 32 and learning rate 0.003; else 256 and 0.001


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
    features: Dict[str, List[str]] = field(default_factory=dict)  # {feature kind: its columns}
    notes: Dict[str, str] = field(default_factory=dict)  # {column: why its kind took it}, where a kind says
    left_out: List[Tuple[str, str]] = field(default_factory=list)  # (column, reason)
    settings: Dict[str, dict] = field(default_factory=dict)  # {column: its entry's settings}, where a kind gives some
    batch_size: int = 32
    epochs: int = 10
    learning_rate: float = 0.003
    label_missing: float = 0.0  # share of sampled rows without a label

    threshold = "from the eval split at run time"  # what the gate's threshold is (`gpupipe init` prints it)

    @property
    def numeric(self) -> List[str]:
        return self.features.get("numeric", [])

    @property
    def categorical(self) -> List[str]:
        return self.features.get("categorical", [])

    @property
    def codes(self) -> List[Tuple[str, str]]:
        """(column proposed as categorical codes, why)."""
        return [(c, self.notes[c]) for c in self.categorical if c in self.notes]

    @property
    def renamed(self) -> List[Tuple[str, str]]:
        columns = [self.label, *(c for cs in self.features.values() for c in cs)]
        return [(c, safe_name(c)) for c in columns if safe_name(c) != c]

    def counted(self) -> str:
        """'4 numeric and 3 categorical feature(s)' (numeric and categorical always, other kinds when proposed)."""
        counts = [f"{len(self.features.get(kind, []))} {kind}" for kind in KINDS
                  if kind in ("numeric", "categorical") or self.features.get(kind)]
        return f"{', '.join(counts[:-1])} and {counts[-1]} feature(s)"


def pipeline_name(source: str) -> str:
    """A pipeline and model name from the source's file or folder name: lowercase letters,
    digits and '-', a letter first."""
    base = os.path.basename(source.rstrip("/")) or "table"
    base = re.sub(r"\.(gz|gzip)$", "", base, flags=re.I)
    base = re.sub(r"\.(csv|parquet|pq|tfrecords?)$", "", base, flags=re.I)
    name = re.sub(r"[^a-z0-9]+", "-", base.lower()).strip("-") or "table"
    return (name if name[0].isalpha() else f"t-{name}")[:63].rstrip("-")


def propose(source: str, label: str, sample_rows: int = SAMPLE_ROWS, name: Optional[str] = None,
            data_format: str = "auto") -> Proposal:
    files = readers.resolve(source, data_format, key="gpupipe init DATA", format_key="--format")
    first = files[0]
    header = readers.columns_of(first)
    if label not in header:
        raise GpupipeError(f"{source}: no column '{label}' (columns: {', '.join(header)}): pass --label "
                           "one of them")
    table, total, codes = sample_table(files, sample_rows)
    rows = table.num_rows
    task, metric, trivial, answer, note = label_task(table.column(label), label, source, rows)
    chosen = choose_features(table, label, codes)
    leaks = find_leaks(table, label, task, chosen.features)
    leaked = {c for c, _ in leaks}
    features = {kind: kept for kind, columns in chosen.features.items()
                if (kept := [c for c in columns if c not in leaked])}
    left_out = chosen.left_out + leaks
    if not features:
        raise GpupipeError(f"{source}: no column besides '{label}' can be a feature"
                           f"{' (' + '; '.join(f'{c}: {r}' for c, r in left_out) + ')' if left_out else ''}: "
                           "add feature columns to the data")
    batch_size = 32 if rows < SMALL_TABLE_ROWS else 256
    steps_per_epoch = max(1, math.ceil(rows * 0.8 / batch_size))
    return Proposal(
        name=name or pipeline_name(source), source=source, format=first.format, label=label, task=task, metric=metric,
        sample_trivial=trivial, threshold_why=answer, label_note=note, rows=rows,
        whole_file=rows == total, total_rows=total, files=len(files), features=features,
        notes={c: why for c, why in chosen.notes.items() if c not in leaked}, left_out=left_out, batch_size=batch_size,
        settings={c: setting for c, setting in chosen.settings.items() if c not in leaked},
        label_missing=table.column(label).null_count / rows,
        epochs=min(MAX_EPOCHS, max(MIN_EPOCHS, math.ceil(TARGET_STEPS / steps_per_epoch))),
        learning_rate=0.003 if rows < SMALL_TABLE_ROWS else 0.001)
