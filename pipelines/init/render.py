"""init's proposal written out as the config: commented YAML that loads as it is.

Every choice init made is a comment beside it (the label's values, the columns proposed as
codes or left out and why, the epoch cap, the trivial model the gate compares with); column
names and paths are quoted where plain YAML would read them otherwise.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Dict, List

from components.contracts.names import NA_VALUES
from components.contracts.settings import safe_name
from components.kinds import KINDS
from components.sources import readers
from pipelines.init.proposal import TARGET_STEPS, Proposal

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9_./][A-Za-z0-9_./\-]*$")
ALWAYS_LISTED = ("numeric", "categorical")  # written even when empty: what a user moves columns between
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


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


def _items(names: List[str], settings: Dict[str, dict], indent: str = "    ") -> List[str]:
    """A list's entries: a column's name, or a flow mapping of its name and the settings init chose."""
    lines = []
    for name in names:
        safe = safe_name(name)
        entry = _scalar(name)
        if settings.get(name):
            entry = "{" + ", ".join([f"name: {entry}", *(f"{k}: {json.dumps(v)}" for k, v in settings[name].items())]) + "}"
        lines.append(f"{indent}- {entry}" + (f"  # the model's input: {safe}" if safe != name else ""))
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
    for kind in KINDS.values():
        columns = p.features.get(kind.name, [])
        if not columns and kind.name not in ALWAYS_LISTED:
            continue
        if kind.init_comment:
            lines.append(f"  # {kind.init_comment}")
        lines += [f"  {kind.config_key}:", *_items(columns, p.settings)] if columns else [f"  {kind.config_key}: []"]
        if notes := [(c, p.notes[c]) for c in columns if c in p.notes]:
            lines.append(f"  # {kind.name}, by gpupipe init:")
            lines += [f"  #   {c}: {reason}" for c, reason in notes]
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
        "  # A model worse than the linear baseline (LogisticRegression or Ridge on the same train split and",
        "  # features, scored on the eval split and reported beside the model either way) is not blessed",
        "  # (must_beat_baseline: on unless set to false)",
        f"  threshold: 0  # a fixed bound besides ({'an upper' if p.metric == 'rmse' else 'a lower'} bound on "
        f"{p.metric}); 0: none",
        "serving:",
        "  base: serving  # TF Serving versions land in serving/<model_name>/<N>/",
        f"  model_name: {p.name}",
    ]
    return "\n".join(lines) + "\n"
