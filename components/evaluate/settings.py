"""Evaluate's settings: the config's `evaluation:` section."""
from __future__ import annotations

from typing import Dict, List, Optional

from pydantic import Field, model_validator

from components.contracts.settings import Strict


class ChangeThreshold(Strict):
    """Candidate vs the model now served, as TFMA's GenericChangeThreshold: with
    higher-is-better metrics the candidate passes when (candidate - baseline) >= absolute and
    (candidate - baseline) / |baseline| >= relative; lower-is-better flips both to <=.
    `absolute: -0.02` on accuracy allows a drop of at most 0.02."""

    absolute: Optional[float] = None
    relative: Optional[float] = None

    @model_validator(mode="after")
    def _one_bound(self) -> "ChangeThreshold":
        if self.absolute is None and self.relative is None:
            raise ValueError("give absolute, relative or both")
        return self


class MetricThreshold(Strict):
    """Value bounds (TFMA's GenericValueThreshold) and an optional change threshold."""

    lower_bound: Optional[float] = None
    upper_bound: Optional[float] = None
    change: Optional[ChangeThreshold] = None


class EvaluationSettings(Strict):
    metric: str = Field("accuracy", description="primary metric: shown in the summary; `threshold` bounds it")
    threshold: float = Field(
        0.0, description="value threshold on the primary metric: a lower bound (an upper bound for "
                         "lower-is-better metrics such as log_loss); pipeline parameter eval_threshold")
    change_threshold: Optional[ChangeThreshold] = Field(
        None, description="primary metric vs the model now served; skipped when nothing is served yet")
    thresholds: Dict[str, MetricThreshold] = Field(default_factory=dict, description="more metrics to gate on")
    slices: List[str] = Field(default_factory=list, description="categorical features to slice metrics by")
    fail_if_not_blessed: bool = Field(False, description="fail the run (not only skip the push) when not blessed")

    def rules(self) -> Dict[str, dict]:
        """Every threshold but the primary value bound, by metric (change_threshold joins the
        primary metric's rule)."""
        rules = {name: rule.model_dump(exclude_none=True) for name, rule in self.thresholds.items()}
        if self.change_threshold is not None:
            rules.setdefault(self.metric, {})["change"] = self.change_threshold.model_dump(exclude_none=True)
        return rules
