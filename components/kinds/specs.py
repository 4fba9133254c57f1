"""The feature specs a model is built with (train writes them into the SavedModel's
assets.extra/; evaluate and predict read them back): derived from the declared columns and
the TFDV statistics of the train split, one list of specs per kind."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from components.contracts import names, storage
from components.contracts.errors import GpupipeError
from components.contracts.settings import safe_name
from components.kinds.base import KINDS, FeatureKind, feature_statistics, kind_named  # noqa: F401 (feature_statistics: the kinds package exports it)

TASKS = ("multiclass", "binary", "regression")


@dataclass(frozen=True)
class FeatureSpecs:
    label: str
    classes: List[str]  # empty for regression
    features: Dict[str, List[Any]] = field(default_factory=dict)  # {kind: its features' specs, in order}
    task: str = "multiclass"
    label_mean: Optional[float] = None  # regression: the target's mean and deviation
    label_std: Optional[float] = None
    columns: Dict[str, str] = field(default_factory=dict)  # {safe name: column as written} where they differ

    def of_kind(self, kind: str) -> List[Any]:
        return list(self.features.get(kind, []))

    @property
    def numeric(self) -> List[Any]:
        return self.of_kind("numeric")

    @property
    def categorical(self) -> List[Any]:
        return self.of_kind("categorical")

    def kinds(self) -> Iterator[Tuple[FeatureKind, List[Any]]]:
        """(kind, its specs) for every kind with features, in the registry's order."""
        for kind in KINDS.values():
            if self.features.get(kind.name):
                yield kind, list(self.features[kind.name])

    def each(self) -> Iterator[Tuple[FeatureKind, Any]]:
        """(kind, spec) for every feature, kinds in the registry's order."""
        for kind, specs in self.kinds():
            for spec in specs:
                yield kind, spec

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "features"}
        d.update({kind: [asdict(s) for s in specs] for kind, specs in self.features.items()})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureSpecs":
        """The specs as to_dict wrote them (each kind's list under its name)."""
        fixed = {"label", "classes", "task", "label_mean", "label_std", "columns"}
        features = {}
        for key, specs in d.items():
            if key not in fixed:
                kind = kind_named(key)
                features[kind.name] = [kind.spec_from_dict(s) for s in specs]
        return cls(label=d["label"], classes=list(d["classes"]), features=features,
                   task=d.get("task", "multiclass"), label_mean=d.get("label_mean"), label_std=d.get("label_std"),
                   columns=dict(d.get("columns", {})))


@dataclass(frozen=True)
class SpecOptions:
    """What the specs take from the training section besides the statistics."""

    task: str = "multiclass"
    max_vocabulary: int = 1000
    hash_buckets: int = 1000


def specs_from_statistics(train_stats, columns, task: str = "multiclass", max_vocabulary: int = 1000,
                          hash_buckets: int = 1000) -> FeatureSpecs:
    """Each feature's spec by its kind (normalisation constants, vocabularies or hash
    buckets, ...) and the label's classes, from the train split's statistics (a
    DatasetFeatureStatistics). `columns`: the data section's (kinds.Columns). Columns are
    named by their safe names (contracts.settings.safe_name), as the examples hold them."""
    from components.kinds.categorical import ranked_values
    from components.kinds.numeric import numeric_spec

    options = SpecOptions(task, max_vocabulary, hash_buckets)
    declared = columns.declared()
    renamed = {safe_name(c): c for c in [columns.label, *(n for n, _, _ in declared)] if safe_name(c) != c}
    label = safe_name(columns.label)
    if task not in TASKS:
        raise GpupipeError(f"training.task: '{task}' is not one of {', '.join(TASKS)}")
    features: Dict[str, List[Any]] = {}
    for column, kind, setting in declared:
        name = safe_name(column)
        features.setdefault(kind.name, []).append(kind.spec(name, kind.spec_statistics(train_stats, name), setting,
                                                            options))
    label_stats = feature_statistics(train_stats, label)
    if task == "regression":
        if not label_stats.HasField("num_stats"):
            raise GpupipeError(f"data.label: column '{label}' is not numeric; regression needs a numeric label")
        target = numeric_spec(label_stats, label)
        return FeatureSpecs(label=label, classes=[], features=features, task=task, label_mean=target.mean,
                            label_std=target.std, columns=renamed)
    classes = sorted(ranked_values(label_stats))
    if len(classes) < 2:
        raise GpupipeError(f"data.label: column '{label}' has {len(classes)} distinct value(s) in the train split; "
                           "a classifier needs at least 2")
    if task == "binary" and len(classes) != 2:
        raise GpupipeError(f"training.task: binary, but label '{label}' has {len(classes)} values "
                           f"({', '.join(classes[:5])}...); use task: multiclass")
    return FeatureSpecs(label=label, classes=classes, features=features, task=task, columns=renamed)


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
