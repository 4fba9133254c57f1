"""What a feature kind declares, and the registry of kinds.

A feature kind (numeric, categorical, ...) is one module under components/kinds/ holding one
`FeatureKind` subclass, registered with `register`: its config key (the data section's list
of columns of that kind, each entry a column name or, for a kind with per-feature settings,
a mapping with `name` and those settings), how ingest types and checks its column, the spec
train derives from the train split's statistics (what the trained model keeps in its
assets.extra/), the tf.Example parse spec, the serving signature's input, the model's input
and encoder, how the linear start and baseline take it, and what `gpupipe init` sees in a
sampled column to propose it. Every step asks the kind instead of branching on its name, so
a new kind is one module plus one registration (components/kinds/__init__.py).

TensorFlow and tf_keras are imported inside the methods that need them: ingest, validate
and init import the kinds without building a model.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Type

from pydantic import Field

from components.contracts.errors import GpupipeError
from components.contracts.settings import Strict

# How a linear model (the linear start, evaluate's baseline: components/contracts/linear.py)
# takes a feature of a kind: as a standardised number, as one-hot categories, as the TF-IDF of
# its tokens (components/contracts/linear_text.py), or not at all.
LINEAR_NUMERIC, LINEAR_CATEGORICAL, LINEAR_TEXT = "numeric", "categorical", "text"


class FeatureSetting(Strict):
    """One column's entry in a kind's list, when written as a mapping: its name, and the
    settings its kind declares (a subclass adds them)."""

    name: str = Field(description="the column")


@dataclass(frozen=True)
class ColumnFacts:
    """What `gpupipe init` knows of one sampled column: its name, the Arrow column (nulls
    are missing cells), the type TFDV infers for it (schema_pb2.FeatureType), its distinct
    present values, whether it holds whole numbers, and whether its values are digit codes
    with leading zeros (the sample keeps those as text)."""

    name: str
    column: Any
    tfdv_type: int
    unique: int
    present: int
    whole_numbers: bool
    leading_zeros: Optional[str] = None  # a sampled value, when the column is digits with leading zeros


@dataclass(frozen=True)
class RowSource:
    """Where a batch's rows come from, for ingest's preparation and its errors: the file (or an
    image folder's class folder), its format, and each row's own file when the rows are files."""

    uri: str
    format: str = ""
    files: Optional[Sequence[str]] = None

    def where(self, i: int, rows: int) -> str:
        """Row `i` of `rows` as an error names it: its file, the file itself, or `file row N`."""
        if self.files:
            return self.files[i]
        return self.uri if rows == 1 else f"{self.uri} row {i + 1}"

    @property
    def holds_paths(self) -> bool:
        """A table's cells (CSV, Parquet) may name other files; a record's or a folder's are the data."""
        return self.format in ("csv", "parquet")


class FeatureKind(ABC):
    """A kind of feature: the abstract methods are what every kind declares; the others
    have defaults that suit a kind whose column is one scalar per row."""

    name: ClassVar[str]  # the kind's name in the manifest, the specs and the docs
    config_key: ClassVar[str]  # its list in the data section: data.<config_key>
    description: ClassVar[str]  # the config reference's text for that list
    settings: ClassVar[Optional[Type[FeatureSetting]]] = None  # per-feature settings, when it has any
    spec_type: ClassVar[type]  # the dataclass of one feature's spec (name first)
    linear: ClassVar[Optional[str]] = None  # LINEAR_NUMERIC, LINEAR_CATEGORICAL, LINEAR_TEXT or None
    sliceable: ClassVar[bool] = False  # evaluation.slices may name a feature of this kind
    # Decoded one example at a time in the input pipeline (decode_example, then cached and
    # augmented), not parsed by the batch (images); the serving signatures call decode_batch.
    per_example: ClassVar[bool] = False
    # gpupipe init asks the kinds' `detect` in this order (lowest first) and takes the first
    # that claims a column: datetime and text before categorical (strings), codes before numbers.
    detect_rank: ClassVar[int] = 50
    # The comment init writes above the kind's list in the config it proposes.
    init_comment: ClassVar[str] = ""
    # detect may claim a column whose every sampled value differs (free text, timestamps);
    # such a column is otherwise left out as an ID.
    claims_unique: ClassVar[bool] = False

    # -- ingest ---------------------------------------------------------------------------
    @abstractmethod
    def arrow_type(self, setting: Optional[FeatureSetting]):
        """The Arrow type ingest and predict read the column as."""

    def prepare_column(self, column, name: str, setting: Optional[FeatureSetting], source: RowSource):
        """What ingest does to the column of one batch read from `source` before encoding it:
        refuses values a model cannot take (one line naming the column and the row), reads
        what the column points to. Returns the column and the columns derived from it for
        the statistics only ({name: Arrow array}). By default: as it is."""
        return column, {}

    def check_statistics(self, name: str, column: str, setting: Optional[FeatureSetting], stats: Dict[str, Any],
                         source: str) -> None:
        """After ingest's pass over the whole table: the statistics of every split ({split:
        DatasetFeatureStatisticsList}, features by their safe names; `name` is the column's,
        `column` as written) may refuse the column in one line (datetime: too many values
        that do not parse), and lose the columns prepare_column derived for this check alone.
        By default: nothing to check."""

    def statistics_buckets(self, setting: Optional[FeatureSetting]) -> int:
        """The values of a column's rank histogram the kind needs in its statistics (text: the
        vocabulary size, from its token column); ingest's StatsOptions keep at least the most
        of these (and TFDV's 1000). By default: none beyond TFDV's."""
        return 0

    # -- statistics -> spec ----------------------------------------------------------------
    def spec_statistics(self, dataset, name: str) -> Any:
        """What `spec` takes from the train split's statistics (a DatasetFeatureStatistics): by
        default the column's own; a kind may add the columns prepare_column derived."""
        return feature_statistics(dataset, name)

    @abstractmethod
    def spec(self, name: str, stats, setting: Optional[FeatureSetting], options) -> Any:
        """The feature's spec from its train-split statistics (a TFDV FeatureNameStatistics);
        `options`: the training section (max_vocabulary, hash_buckets, ...)."""

    def spec_from_dict(self, d: dict):
        return self.spec_type(**d)

    def parsed_bytes(self, spec, stats) -> int:
        """A generous estimate of one parsed value in memory (the input cache's decision)."""
        return 4

    def edit_schema(self, feature) -> None:
        """The feature's entry in the schema validate infers (a TFMD Feature), edited as the
        kind needs (images: image_domain, which keeps the drift and skew comparators off
        their bytes). By default: as TFDV infers it."""

    def edit_derived_schema(self, feature) -> None:
        """The schema entry of a column prepare_column derived for the statistics (<name>__x),
        edited as the kind needs (text: its token column has no string domain). By default: as
        TFDV infers it."""

    # -- the model's input -------------------------------------------------------------------
    @abstractmethod
    def parse_feature(self, spec):
        """The tf.Example parse spec of one row's value (tf.io.FixedLenFeature)."""

    @abstractmethod
    def serving_spec(self, spec):
        """The raw serving signature's input for this feature: one value per row."""

    def decoded_spec(self, spec):
        """The input of a second signature taking this feature already decoded (images:
        float pixels), or None when the kind has none."""
        return None

    def decode_example(self, spec, value):
        """A per_example kind: one example's parsed value -> what the input pipeline caches."""
        return value

    def decode_batch(self, spec, values):
        """[batch, 1] parsed values -> the model's input for them (the serving signatures)."""
        return values

    def augment(self, spec, value, training: bool):
        """A per_example kind: the cached value -> the model's input (random changes in training).
        Called on one example when `augments_each`, else on a batch of them."""
        return value

    def augments_each(self, spec, training: bool) -> bool:
        """Whether `augment` changes each example its own way (so runs once per example)."""
        return False

    @abstractmethod
    def model_input(self, spec):
        """The tf_keras Input of this feature."""

    @abstractmethod
    def encode(self, specs: List[Any], inputs: Dict[str, Any], options) -> "Encoded":
        """Every feature of this kind at once -> the tensors the model's dense vector takes
        (and anything else a family may use, in `extras`)."""

    # -- gpupipe init ------------------------------------------------------------------------
    def detect(self, facts: ColumnFacts) -> Optional[str]:
        """None when this kind does not take `facts`' column; else why init proposes it as this
        kind: '' when the list's `init_comment` says it all, or a note init writes under the list."""
        return None

    def detect_setting(self, facts: ColumnFacts) -> Optional[Dict[str, Any]]:
        """A kind with settings: what init writes in the entry of a column `detect` claimed
        ({setting: value}, beside its `name`; datetime: the format it read), or None for a
        bare name (the kind's defaults)."""
        return None


class StringColumn:
    """For a kind whose column is one string per row (categorical, datetime, text): parsed as
    a [1] string, served as a [None] string, the model's input a (1,) string; `avg_length`,
    the length assumed when the statistics have none."""

    avg_length: ClassVar[int] = 16

    def parsed_bytes(self, spec, stats) -> int:
        """A string's object plus its average length from the statistics."""
        avg = stats.string_stats.avg_length if stats is not None else 0
        return 32 + int(avg or self.avg_length)

    def parse_feature(self, spec):
        import tensorflow as tf

        return tf.io.FixedLenFeature([1], tf.string, default_value=[""])

    def serving_spec(self, spec):
        import tensorflow as tf

        return tf.TensorSpec([None], tf.string, name=spec.name)

    def model_input(self, spec):
        import tensorflow as tf
        import tf_keras

        return tf_keras.Input(shape=(1,), name=spec.name, dtype=tf.string)


@dataclass
class Encoded:
    """One kind's part of the model: `dense`, tensors [batch, width] that join the dense
    vector; `extras`, what a family may take besides (categorical: the shared table's ids)."""

    dense: List[Any]
    extras: Dict[str, Any]


def clear_string_domain(feature) -> None:
    """A string feature whose values are not categories (timestamps, free text): no domain in
    the schema, so values unseen in training, which are the norm, are no anomaly."""
    feature.ClearField("domain")
    feature.ClearField("distribution_constraints")


def find_statistics(dataset, name: str):
    """The statistics of column `name` (its safe name) in a DatasetFeatureStatistics, or None."""
    return next((f for f in dataset.features if (f.path.step and f.path.step[0] == name) or f.name == name), None)


def feature_statistics(dataset, name: str):
    """The statistics of column `name` (its safe name) in a DatasetFeatureStatistics."""
    found = find_statistics(dataset, name)
    if found is not None:
        return found
    raise GpupipeError(f"statistics: no statistics for column '{name}'; is it in the data? "
                       "Fix data features in the config")


KINDS: Dict[str, FeatureKind] = {}


def register(kind: FeatureKind) -> FeatureKind:
    """Adds a kind; the specs, the config's data section and every step take it in this order."""
    if kind.name in KINDS:
        raise ValueError(f"feature kind {kind.name} is registered twice")
    KINDS[kind.name] = kind
    return kind


def kind_named(name: str) -> FeatureKind:
    try:
        return KINDS[name]
    except KeyError:
        raise GpupipeError(f"feature kind '{name}' is not one of {', '.join(KINDS)}") from None


def config_keys() -> str:
    """'data.numeric_features / data.categorical_features / ...': the keys that declare features."""
    return " / ".join(f"data.{kind.config_key}" for kind in KINDS.values())
