"""Feature specs for training, derived from the config and the TFDV statistics of the train split."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import List

from components.errors import GpupipeError


@dataclass(frozen=True)
class NumericFeature:
    name: str
    mean: float
    std: float


@dataclass(frozen=True)
class CategoricalFeature:
    name: str
    vocabulary: List[str]


@dataclass(frozen=True)
class FeatureSpecs:
    label: str
    classes: List[str]
    numeric: List[NumericFeature] = field(default_factory=list)
    categorical: List[CategoricalFeature] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpecs":
        return cls(
            label=d["label"],
            classes=list(d["classes"]),
            numeric=[NumericFeature(**n) for n in d["numeric"]],
            categorical=[CategoricalFeature(**c) for c in d["categorical"]],
        )


def _feature_stats(dataset, name: str):
    for feature in dataset.features:
        if feature.path.step and feature.path.step[0] == name or feature.name == name:
            return feature
    raise GpupipeError(f"statistics: no statistics for column '{name}'; is it in the data? Fix data features in the config")


def _string_values(stats) -> List[str]:
    """Distinct values from TFDV's top values, most frequent first, ties by value."""
    top = stats.string_stats.top_values
    ranked = sorted(((v.frequency, v.value) for v in top), key=lambda fv: (-fv[0], fv[1]))
    return [value for _, value in ranked]


def specs_from_statistics(train_stats, label: str, numeric: List[str], categorical: List[str]) -> FeatureSpecs:
    """Normalisation constants and vocabularies from the train split's statistics
    (a DatasetFeatureStatistics)."""
    numeric_specs = []
    for name in numeric:
        s = _feature_stats(train_stats, name).num_stats
        std = s.std_dev if s.std_dev > 0 and math.isfinite(s.std_dev) else 1.0
        numeric_specs.append(NumericFeature(name=name, mean=float(s.mean), std=float(std)))
    categorical_specs = [
        CategoricalFeature(name=name, vocabulary=_string_values(_feature_stats(train_stats, name)))
        for name in categorical
    ]
    classes = sorted(_string_values(_feature_stats(train_stats, label)))
    if len(classes) < 2:
        raise GpupipeError(f"data.label: column '{label}' has {len(classes)} distinct value(s) in the train split; "
                           "a classifier needs at least 2")
    return FeatureSpecs(label=label, classes=classes, numeric=numeric_specs, categorical=categorical_specs)
