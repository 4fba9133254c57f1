"""Feature kinds: each kind of feature (numeric, categorical, ...) is one module here holding
its `FeatureKind` (components/kinds/base.py: what a kind declares), registered below in the
order every step takes the kinds. The config's data section (`Columns`) has one list per
registered kind, and the feature specs one list of specs per kind.

This floor stands on components/contracts alone; the steps and pipelines/ stand on it.
"""
from components.kinds.base import KINDS, ColumnFacts, Encoded, FeatureKind, FeatureSetting, config_keys, kind_named, register
from components.kinds.categorical import CategoricalKind
from components.kinds.datetime_kind import DatetimeKind
from components.kinds.image import ImageKind
from components.kinds.numeric import NumericKind
from components.kinds.text_kind import TextKind

register(NumericKind())
register(CategoricalKind())
register(ImageKind())
register(DatetimeKind())
register(TextKind())

from components.kinds.columns import Columns, entry_name  # noqa: E402  (built from the kinds registered above)
from components.kinds.specs import (FeatureSpecs, feature_statistics, load_feature_specs,  # noqa: E402
                                    specs_from_statistics, write_feature_specs)

__all__ = ["KINDS", "ColumnFacts", "Columns", "Encoded", "FeatureKind", "FeatureSetting", "FeatureSpecs", "config_keys",
           "entry_name", "feature_statistics", "kind_named", "load_feature_specs", "register", "specs_from_statistics",
           "write_feature_specs"]
