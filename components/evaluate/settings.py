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


# The primary metrics a model that learnt nothing has a score for (evaluate computes it on
# the eval split: logic.trivial_scores).
TRIVIAL_METRICS = ("accuracy", "auc", "pr_auc", "log_loss", "rmse", "mae")


class EvaluationSettings(Strict):
    metric: str = Field("accuracy", description="primary metric: shown in the summary; `threshold` bounds it")
    threshold: float = Field(
        0.0, description="a fixed value threshold on the primary metric: a lower bound (an upper bound for "
                         "lower-is-better metrics such as rmse or log_loss); 0: none; pipeline parameter "
                         "eval_threshold")
    must_beat_trivial: bool = Field(
        False, description="the primary metric must beat what a model that learnt nothing scores on this run's "
                           "eval split, computed by evaluate at run time: the best constant answer (the most "
                           "frequent class for accuracy, the class shares for log_loss and pr_auc, 0.5 for auc, "
                           "the mean for rmse, the median for mae)")
    must_beat_baseline: Optional[bool] = Field(
        None, description="the primary metric must be at least as good as a linear baseline's (scikit-learn's "
                          "LogisticRegression, or Ridge for regression, trained on the same train split and "
                          "features, scored on the same eval split), not worse within float32 rounding (1e-5 "
                          "relative); the baseline is computed and reported beside the model either way. Unset "
                          "(the default): on, and a table with no baseline (one class in train) is noted and gated "
                          "without it; true: such a table fails the step; false: off")
    change_threshold: Optional[ChangeThreshold] = Field(
        None, description="primary metric vs the model now served; skipped when nothing is served yet")
    thresholds: Dict[str, MetricThreshold] = Field(default_factory=dict, description="more metrics to gate on")
    slices: List[str] = Field(default_factory=list, description="categorical features to slice metrics by")
    max_compression_drop: float = Field(
        0.01, ge=0, description="the compressed model (serving.export float16 or int8) may score at most this much "
                                "worse than the SavedModel on the primary metric, on the same eval split, in the "
                                "metric's units (0: not worse at all); beyond it the release is refused")
    fail_if_not_blessed: bool = Field(False, description="fail the run (not only skip the push) when not blessed")

    @model_validator(mode="after")
    def _trivial_has_a_score(self) -> "EvaluationSettings":
        if self.must_beat_trivial and self.metric not in TRIVIAL_METRICS:
            raise ValueError(f"must_beat_trivial: a model that learnt nothing has no score for metric '{self.metric}'; "
                             f"use metric one of {', '.join(TRIVIAL_METRICS)}, or set must_beat_trivial: false")
        return self

    def rules(self) -> Dict[str, dict]:
        """Every threshold but the primary value bound, by metric (change_threshold joins the
        primary metric's rule)."""
        rules = {name: rule.model_dump(exclude_none=True) for name, rule in self.thresholds.items()}
        if self.change_threshold is not None:
            rules.setdefault(self.metric, {})["change"] = self.change_threshold.model_dump(exclude_none=True)
        return rules
