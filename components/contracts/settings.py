"""The base of every step's settings model, and the table's columns that every step shares.

A step's settings are one pydantic model: the config file holds it as a section, the
pipeline passes it to the step as one JSON parameter, and the step reads it back with
`model_validate_json`. No field is listed by hand anywhere in between.
"""
from __future__ import annotations

import keyword
import re
import unicodedata
from typing import Dict, List, Type, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

S = TypeVar("S", bound="Strict")
# What a feature may be called as written: it names the SavedModel's inputs, which
# TensorFlow holds to Python's rule for parameter names (an ASCII letter first, then
# letters, digits and '_'; not a keyword). TensorFlow renames 'a.b' and 'a-b' to 'a_b' in
# the signature on its own, and refuses '_id', 'café' and 'class'.
TF_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_]+")


def takes_as_written(column: str) -> bool:
    return bool(TF_NAME_RE.match(column)) and not keyword.iskeyword(column)


def safe_name(column: str) -> str:
    """The name a column has in the examples, the schema, the feature specs and the
    SavedModel's inputs. A name TensorFlow takes is kept as written; any other loses its
    accents (é -> e), has each run of characters other than ASCII letters, digits and '_'
    replaced by one '_' and '_' trimmed from both ends, gets 'f_' in front when what is
    left is empty or does not start with a letter, and '_' behind when it is a Python
    keyword: 'bill length (mm)' -> 'bill_length_mm', 'education-num' -> 'education_num',
    'Größe' -> 'Gro_e', '_id' -> 'id', '2nd' -> 'f_2nd', 'class' -> 'class_'. A safe name
    maps to itself."""
    if takes_as_written(column):
        return column
    plain = "".join(c for c in unicodedata.normalize("NFKD", column) if not unicodedata.combining(c))
    safe = _UNSAFE_RUN.sub("_", plain).strip("_")
    safe = safe if safe[:1].isascii() and safe[:1].isalpha() else f"f_{safe}"
    return f"{safe}_" if keyword.iskeyword(safe) else safe


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
        taken: Dict[str, str] = {}
        for column in [self.label, *names]:
            safe = safe_name(column)
            if safe in taken:
                raise ValueError(f"columns {taken[safe]!r} and {column!r} both map to the safe name {safe!r} (the "
                                 "names TensorFlow takes); rename one in the data and here")
            taken[safe] = column
        return self
