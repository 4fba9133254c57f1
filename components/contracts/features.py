"""The feature specs a model is built with (train writes them into the SavedModel's
assets.extra/; evaluate reads them back): derived from the declared columns and the TFDV
statistics of the train split."""
from __future__ import annotations

import json
import math

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from components.contracts import names, storage
from components.contracts.errors import GpupipeError
from components.contracts.settings import safe_name

TASKS = ("multiclass", "binary", "regression")


@dataclass(frozen=True)
class NumericFeature:
    name: str
    mean: float
    std: float


@dataclass(frozen=True)
class CategoricalFeature:
    """A vocabulary (most frequent values first) or, for high cardinality, hash buckets."""

    name: str
    vocabulary: List[str] = field(default_factory=list)
    hash_buckets: int = 0

    @property
    def cardinality(self) -> int:
        """Embedding rows: the vocabulary plus one out-of-vocabulary row, or the buckets."""
        return self.hash_buckets or len(self.vocabulary) + 1


@dataclass(frozen=True)
class FeatureSpecs:
    label: str
    classes: List[str]  # empty for regression
    numeric: List[NumericFeature] = field(default_factory=list)
    categorical: List[CategoricalFeature] = field(default_factory=list)
    task: str = "multiclass"
    label_mean: Optional[float] = None  # regression: the target's mean and deviation
    label_std: Optional[float] = None
    columns: Dict[str, str] = field(default_factory=dict)  # {safe name: column as written} where they differ

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpecs":
        return cls(
            label=d["label"], classes=list(d["classes"]),
            numeric=[NumericFeature(**n) for n in d["numeric"]],
            categorical=[CategoricalFeature(**c) for c in d["categorical"]],
            task=d.get("task", "multiclass"), label_mean=d.get("label_mean"), label_std=d.get("label_std"),
            columns=dict(d.get("columns", {})))


def feature_statistics(dataset, name: str):
    for feature in dataset.features:
        if (feature.path.step and feature.path.step[0] == name) or feature.name == name:
            return feature
    raise GpupipeError(f"statistics: no statistics for column '{name}'; is it in the data? "
                       "Fix data features in the config")


def _ranked_values(stats) -> List[str]:
    """Distinct values, most frequent first (ties by value): TFDV's rank histogram (up to
    1000 values), else its top values."""
    s = stats.string_stats
    buckets = [(b.sample_count, b.label) for b in s.rank_histogram.buckets] or \
              [(v.frequency, v.value) for v in s.top_values]
    return [value for _, value in sorted(buckets, key=lambda fv: (-fv[0], fv[1]))]


def _numeric(stats, name: str) -> NumericFeature:
    s = stats.num_stats
    std = s.std_dev if s.std_dev > 0 and math.isfinite(s.std_dev) else 1.0
    return NumericFeature(name=name, mean=float(s.mean), std=float(std))


def specs_from_statistics(train_stats, label: str, numeric: List[str], categorical: List[str],
                          task: str = "multiclass", max_vocabulary: int = 1000, hash_buckets: int = 1000
                          ) -> FeatureSpecs:
    """Normalisation constants, vocabularies (or hash buckets) and label classes from the
    train split's statistics (a DatasetFeatureStatistics). Columns are named by their safe
    names (contracts.settings.safe_name), as the examples hold them."""
    renamed = {safe_name(c): c for c in [label, *numeric, *categorical] if safe_name(c) != c}
    label, numeric, categorical = safe_name(label), [safe_name(c) for c in numeric], [safe_name(c) for c in categorical]
    if task not in TASKS:
        raise GpupipeError(f"training.task: '{task}' is not one of {', '.join(TASKS)}")
    numeric_specs = [_numeric(feature_statistics(train_stats, name), name) for name in numeric]
    categorical_specs = []
    for name in categorical:
        stats = feature_statistics(train_stats, name)
        if stats.string_stats.unique > max_vocabulary:
            categorical_specs.append(CategoricalFeature(name=name, hash_buckets=hash_buckets))
        else:
            categorical_specs.append(CategoricalFeature(name=name, vocabulary=_ranked_values(stats)[:max_vocabulary]))
    label_stats = feature_statistics(train_stats, label)
    if task == "regression":
        if not label_stats.HasField("num_stats"):
            raise GpupipeError(f"data.label: column '{label}' is not numeric; regression needs a numeric label")
        target = _numeric(label_stats, label)
        return FeatureSpecs(label=label, classes=[], numeric=numeric_specs, categorical=categorical_specs, task=task,
                            label_mean=target.mean, label_std=target.std, columns=renamed)
    classes = sorted(_ranked_values(label_stats))
    if len(classes) < 2:
        raise GpupipeError(f"data.label: column '{label}' has {len(classes)} distinct value(s) in the train split; "
                           "a classifier needs at least 2")
    if task == "binary" and len(classes) != 2:
        raise GpupipeError(f"training.task: binary, but label '{label}' has {len(classes)} values "
                           f"({', '.join(classes[:5])}...); use task: multiclass")
    return FeatureSpecs(label=label, classes=classes, numeric=numeric_specs, categorical=categorical_specs, task=task,
                        columns=renamed)


def write_feature_specs(specs: FeatureSpecs, model_dir: str) -> None:
    """Beside the exported model, in assets.extra/ (TF Serving ignores it there)."""
    storage.write_text(storage.join(model_dir, "assets.extra", names.FEATURE_SPECS_FILE),
                       json.dumps(specs.to_dict(), indent=2))


def load_feature_specs(model_dir: str) -> FeatureSpecs:
    """The feature specs a trained model was built with."""
    path = storage.join(model_dir, "assets.extra", names.FEATURE_SPECS_FILE)
    text = storage.read_text(path)
    if text is None:
        raise GpupipeError(f"model: {path} not found; {model_dir} is not a gpupipe model, retrain it")
    return FeatureSpecs.from_dict(json.loads(text))
