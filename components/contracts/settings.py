"""The base of every step's settings model, and the table's columns that every step shares.

A step's settings are one pydantic model: the config file holds it as a section, the
pipeline passes it to the step as one JSON parameter, and the step reads it back with
`model_validate_json`. No field is listed by hand anywhere in between.
"""
from __future__ import annotations

import re
from typing import List, Type, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

S = TypeVar("S", bound="Strict")
# What a feature may be called: it names the SavedModel's inputs and TensorFlow name scopes.
TF_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\-]*$")


class Strict(BaseModel):
    """Unknown keys are errors; settings do not change once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def from_json(cls: Type[S], text: str) -> S:
        """The settings from the JSON parameter the pipeline passed ("" or "{}": the defaults)."""
        return cls.model_validate_json(text or "{}")

    @classmethod
    def part_of(cls: Type[S], model: BaseModel) -> S:
        """This model's fields, taken from a larger model that has them all."""
        return cls.model_validate(model.model_dump(include=set(cls.model_fields)))


class Columns(Strict):
    """Which columns of the table are the label and the features, and of which kind."""

    label: str
    numeric_features: List[str] = Field(default_factory=list)
    categorical_features: List[str] = Field(default_factory=list)

    @property
    def features(self) -> List[str]:
        return [*self.numeric_features, *self.categorical_features]

    @model_validator(mode="after")
    def _features_are_distinct(self) -> "Columns":
        if not self.numeric_features and not self.categorical_features:
            raise ValueError("declare at least one of numeric_features, categorical_features")
        names = self.features
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"feature listed twice: {', '.join(dupes)}")
        if self.label in names:
            raise ValueError(f"label '{self.label}' is also listed as a feature")
        bad = [n for n in [self.label, *names] if not TF_NAME_RE.match(n)]
        if bad:
            raise ValueError(f"column name(s) {', '.join(repr(n) for n in bad)} are not names TensorFlow takes "
                             "(letters, digits, '_', '.', '-'; not '_' first); rename the column in the data and here")
        return self
