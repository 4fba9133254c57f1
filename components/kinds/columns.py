"""The table's columns every step shares: the label and one list of features per registered
kind (data.numeric_features, data.categorical_features, ...), built from the registry."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

from pydantic import Field, create_model, model_validator

from components.contracts.settings import Strict, safe_name
from components.kinds.base import KINDS, FeatureKind, FeatureSetting


def entry_name(entry) -> str:
    """A list entry's column: the entry itself, or its mapping's `name`."""
    return entry if isinstance(entry, str) else entry.name


class _Columns(Strict):
    """Which columns of the table are the label and the features, and of which kind."""

    label: str

    def entries(self, kind: FeatureKind) -> list:
        return list(getattr(self, kind.config_key))

    def names_of(self, kind: Union[str, FeatureKind]) -> List[str]:
        """The columns declared of one kind, in their order."""
        kind = KINDS[kind] if isinstance(kind, str) else kind
        return [entry_name(e) for e in self.entries(kind)]

    def by_kind(self) -> Dict[str, List[str]]:
        """{kind: its columns} for every registered kind, in the registry's order."""
        return {kind.name: self.names_of(kind) for kind in KINDS.values()}

    def declared(self) -> List[Tuple[str, FeatureKind, Optional[FeatureSetting]]]:
        """(column, kind, its per-feature settings or None) for every feature, kinds in order."""
        out = []
        for kind in KINDS.values():
            for entry in self.entries(kind):
                setting = None if isinstance(entry, str) else entry
                if setting is None and kind.settings is not None:
                    setting = kind.settings(name=entry)  # a bare name: the kind's defaults
                out.append((entry_name(entry), kind, setting))
        return out

    @property
    def features(self) -> List[str]:
        return [name for name, _, _ in self.declared()]

    def kind_of(self, column: str) -> Optional[FeatureKind]:
        return next((kind for name, kind, _ in self.declared() if name == column), None)

    def key_of(self, column: str) -> str:
        """The config key that declares `column` (data.<kind's list>)."""
        kind = self.kind_of(column)
        return f"data.{kind.config_key}" if kind else "data features"

    @model_validator(mode="after")
    def _features_are_distinct(self):
        keys = [kind.config_key for kind in KINDS.values()]
        if not self.features:
            raise ValueError(f"declare at least one of {', '.join(keys)}")
        kinds_of: Dict[str, List[str]] = {}
        for kind in KINDS.values():
            for name in set(self.names_of(kind)):
                kinds_of.setdefault(name, []).append(kind.name)
        for name, kinds in kinds_of.items():
            if len(kinds) > 1:
                raise ValueError(f"feature '{name}' is declared both {' and '.join(kinds)}; keep it in one of "
                                 f"{', '.join(KINDS[k].config_key for k in kinds)}")
        names = self.features
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"feature listed twice: {', '.join(dupes)}")
        if self.label in names:
            raise ValueError(f"label '{self.label}' is also listed as a feature")
        taken: Dict[str, str] = {}
        for column in [self.label, *names]:
            safe = safe_name(column)
            if safe in taken:
                raise ValueError(f"columns {taken[safe]!r} and {column!r} both map to the safe name {safe!r} (the "
                                 "names TensorFlow takes); rename one in the data and here")
            taken[safe] = column
        return self


def _field(kind: FeatureKind):
    entry = Union[str, kind.settings] if kind.settings is not None else str
    extra = "; an entry is a column name or a mapping of `name` and its settings" if kind.settings else ""
    return List[entry], Field(default_factory=list, description=kind.description + extra)


Columns = create_model("Columns", __base__=_Columns, __module__=__name__,
                       **{kind.config_key: _field(kind) for kind in KINDS.values()})
Columns.__doc__ = _Columns.__doc__
