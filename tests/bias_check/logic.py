"""The bias check: per sliced feature, the worst and the best value of the gate's metric
across the feature's values (evaluate's `evaluation.json`, inside its blessing artifact),
and whether the gap between them exceeds `max_gap`."""
from __future__ import annotations

import os
from typing import Dict

from components.contracts.reports import read_evaluation


def slice_gaps(blessing_dir: str, metric: str) -> Dict[str, dict]:
    """feature -> {worst, best (slice values), gap}, for the features sliced on `metric`."""
    gaps = {}
    for feature, values in (read_evaluation(blessing_dir).get("slices") or {}).items():
        scored = {value: m[metric] for value, m in values.items() if metric in m}
        if len(scored) > 1:
            worst, best = min(scored, key=scored.get), max(scored, key=scored.get)
            gaps[feature] = {"worst": worst, "best": best, "gap": scored[best] - scored[worst]}
    return gaps


def check_bias(*, blessing_dir: str, metric: str, max_gap: float, report_md: str) -> Dict[str, dict]:
    """Writes the Markdown table to `report_md`; returns the gaps."""
    gaps = slice_gaps(blessing_dir, metric)
    lines = [f"# Bias check: {metric} across slices (at most {max_gap:.2f} apart)", "",
             "| feature | worst | best | gap | |", "|---|---|---|---|---|"]
    lines += [f"| {f} | {g['worst']} | {g['best']} | {g['gap']:.4f} | {'over' if g['gap'] > max_gap else 'ok'} |"
              for f, g in sorted(gaps.items())]
    os.makedirs(os.path.dirname(report_md) or ".", exist_ok=True)
    with open(report_md, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return gaps
