"""training.tune's settings: how many trials, within what budget, by which algorithm, at
which Kueue priority on the cluster, and the search space (components/train/tune.py runs
the search). Kept apart from settings.py so that module stays the training section itself."""
from __future__ import annotations

import re
from typing import List, Literal, Optional, Tuple

from pydantic import Field, field_validator, model_validator

from components.contracts.settings import Strict

DEFAULT_TUNING_PRIORITY_CLASS = "gpupipe-tuning"
_OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class TuneSettings(Strict):
    """A search over the learning rate, the tower's width and depth, dropout and the batch
    size (Keras Tuner's oracles). Each trial trains as training does (early stopping on the
    validation slice, best weights kept) and is scored on that slice's early-stopping
    metric; the best trial's model is the train step's model, no retraining."""

    trials: int = Field(4, ge=1, le=1000, description="the most trials (hyperparameter sets) the search runs")
    algorithm: Literal["random", "bayesian"] = Field(
        "random", description="random: RandomSearchOracle; bayesian: BayesianOptimizationOracle (a Gaussian "
                              "process over the finished trials proposes the next, after max(2, trials / 3) "
                              "random ones)")
    budget_seconds: Optional[int] = Field(
        None, ge=1, description="no trial starts once the search has run this long (running trials finish); "
                                "unset: no time budget")
    budget_epochs: Optional[int] = Field(
        None, ge=1, description="no trial starts once the finished trials have run this many epochs in all; "
                                "unset: no epoch budget")
    parallel_trials: int = Field(
        2, ge=1, le=64, description="on the cluster: trials running at once, each its own JobSet at "
                                    "priority_class (locally the trials run one after another)")
    priority_class: str = Field(
        DEFAULT_TUNING_PRIORITY_CLASS,
        description="Kueue WorkloadPriorityClass of the trials' JobSets (label kueue.x-k8s.io/priority-class): "
                    "give it a lower value than production's (cluster.priority), so trials fill idle GPUs and "
                    "production runs preempt them (docs/tuning.md)")
    learning_rate: Tuple[float, float] = Field(
        (1e-4, 1e-2), description="[low, high] of the learning rate, sampled on a log scale")
    width: List[int] = Field(
        default_factory=lambda: [32, 64, 128, 256],
        description="widths of the tower's first layer to choose from; each next layer is half as wide "
                    "(hidden_units [w, w/2, ...], at least 4)")
    depth: Tuple[int, int] = Field((1, 3), description="[fewest, most] layers of the tower")
    dropout: Tuple[float, float] = Field((0.0, 0.3), description="[low, high] dropout rate after each tower layer")
    batch_size: List[int] = Field(default_factory=lambda: [32, 64, 128, 256],
                                  description="per-replica batch sizes to choose from")

    @field_validator("priority_class")
    @classmethod
    def _object_name(cls, v: str) -> str:
        if not _OBJECT_NAME.match(v):
            raise ValueError(f"'{v}' is not a Kubernetes object name (lowercase letters, digits, '-' and '.')")
        return v

    @field_validator("width", "batch_size")
    @classmethod
    def _positive_choices(cls, v: List[int]) -> List[int]:
        if not v or any(x < 1 for x in v):
            raise ValueError("give one or more positive numbers to choose from, e.g. [32, 64, 128]")
        return sorted(set(v))

    @model_validator(mode="after")
    def _ranges(self) -> "TuneSettings":
        lr, depth, dropout = self.learning_rate, self.depth, self.dropout
        if not 0 < lr[0] <= lr[1]:
            raise ValueError(f"learning_rate {list(lr)}: give [low, high] with 0 < low <= high, e.g. [0.0001, 0.01]")
        if not 1 <= depth[0] <= depth[1] <= 8:
            raise ValueError(f"depth {list(depth)}: give [fewest, most] layers with 1 <= fewest <= most <= 8")
        if not 0 <= dropout[0] <= dropout[1] < 1:
            raise ValueError(f"dropout {list(dropout)}: give [low, high] with 0 <= low <= high < 1, e.g. [0, 0.3]")
        return self
