"""The blessing artifact (evaluate writes it, push reads it): `<dir>/blessing.json`, the
verdict on the candidate model with its reasons, the baseline it was held against and its
metrics."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from components.contracts import names
from components.contracts.errors import GpupipeError


@dataclass
class Blessing:
    blessed: bool
    metric: str
    value: float
    threshold: float
    reasons: List[str] = field(default_factory=list)
    baseline_version: Optional[int] = None
    baseline_value: Optional[float] = None
    metrics: Dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def write_blessing(blessing: Blessing, blessing_dir: str) -> None:
    os.makedirs(blessing_dir, exist_ok=True)
    with open(os.path.join(blessing_dir, names.BLESSING_FILE), "w", encoding="utf-8") as f:
        json.dump(blessing.to_dict(), f, indent=2)


def read_blessing(blessing_dir: str) -> Blessing:
    path = os.path.join(blessing_dir, names.BLESSING_FILE)
    if not os.path.isfile(path):
        raise GpupipeError(f"blessing: {path} not found; run evaluate before push")
    with open(path, encoding="utf-8") as f:
        return Blessing(**json.load(f))
