"""The categorical kind (data.categorical_features): a string per row, missing as ''; in
the model a vocabulary lookup (most frequent values of the train split first, row 0 out of
vocabulary) or, past training.max_vocabulary values, hash buckets, every categorical feature
a block of one shared embedding table."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from components.kinds.base import LINEAR_CATEGORICAL, ColumnFacts, Encoded, FeatureKind, FeatureSetting, StringColumn

IDS = "ids"  # Encoded.extras: [batch, categorical features] rows of the shared table
# gpupipe init: an integer column with at most CODE_MAX_VALUES values is proposed as
# categorical codes, and one with a code-like name with at most CODE_MAX_NAMED_VALUES.
CODE_MAX_VALUES = 10
CODE_MAX_NAMED_VALUES = 1000
CODE_NAME_WORDS = frozenset({"code", "codes", "id", "zip", "zipcode", "postcode", "postal", "area", "tract", "region",
                             "district", "county", "zone", "hour", "month", "day", "weekday", "dow", "type",
                             "category", "class", "group", "kind", "status", "station", "store"})


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


def ranked_values(stats) -> List[str]:
    """Distinct values, most frequent first (ties by value): TFDV's rank histogram (up to
    1000 values), else its top values."""
    s = stats.string_stats
    buckets = [(b.sample_count, b.label) for b in s.rank_histogram.buckets] or \
              [(v.frequency, v.value) for v in s.top_values]
    return [value for _, value in sorted(buckets, key=lambda fv: (-fv[0], fv[1]))]


def table_offsets(specs: List[CategoricalFeature]) -> List[int]:
    """Each categorical feature's first row in the shared table (its rows: its cardinality)."""
    offsets, row = [], 0
    for f in specs:
        offsets.append(row)
        row += f.cardinality
    return offsets


def table_rows(specs: List[CategoricalFeature]) -> int:
    """The shared table's rows: every categorical feature's block."""
    return sum(f.cardinality for f in specs)


class CategoricalKind(StringColumn, FeatureKind):
    name = "categorical"
    config_key = "categorical_features"
    description = ("columns of categories (text or codes): a vocabulary of the train split's values (hash buckets "
                   "past training.max_vocabulary) and an embedding; missing is a value")
    spec_type = CategoricalFeature
    linear = LINEAR_CATEGORICAL
    sliceable = True
    detect_rank = 30  # before numeric: integer codes are categories
    init_comment = ("TFDV inferred these BYTES, or they are integer codes (below): a vocabulary (or hash buckets) "
                    "and an embedding; missing is a value")

    def arrow_type(self, setting: Optional[FeatureSetting]):
        import pyarrow as pa

        return pa.string()

    def spec(self, name: str, stats, setting, options) -> CategoricalFeature:
        if stats.string_stats.unique > options.max_vocabulary:
            return CategoricalFeature(name=name, hash_buckets=options.hash_buckets)
        return CategoricalFeature(name=name, vocabulary=ranked_values(stats)[:options.max_vocabulary])

    def encode(self, specs: List[CategoricalFeature], inputs: Dict[str, object], options) -> Encoded:
        """The ids ([batch, features] rows of one shared table: each feature's lookup or hash
        bucket after the rows of the features before it) and their embeddings, flattened:
        one table, its gradient and its optimizer update for every categorical feature."""
        import tf_keras

        from components.kinds.layers import VocabularyRows

        rows = VocabularyRows([None if f.hash_buckets else f.vocabulary for f in specs],
                              [f.hash_buckets for f in specs], table_offsets(specs),
                              name="categorical_rows")([inputs[f.name] for f in specs])
        emb = tf_keras.layers.Embedding(table_rows(specs), options.embedding_dim, name="categorical_embeddings")(rows)
        return Encoded(dense=[tf_keras.layers.Flatten(name="categorical_flat")(emb)], extras={IDS: rows})

    def detect(self, facts: ColumnFacts) -> Optional[str]:
        """Text TFDV inferred BYTES (no note), and integer codes (a note saying why)."""
        from tensorflow_metadata.proto.v0 import schema_pb2

        if facts.leading_zeros:
            return (f"digits with leading zeros (such as '{facts.leading_zeros}'): codes, proposed as categorical")
        if facts.tfdv_type in (schema_pb2.INT, schema_pb2.FLOAT):
            return code_reason(facts.name, facts.unique) if facts.whole_numbers else None
        return ""


def _name_words(name: str) -> List[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def code_reason(name: str, unique: int) -> Optional[str]:
    """Why an integer column is proposed as categorical, or None (a quantity): few distinct
    values (`CODE_MAX_VALUES`), or a code-like name with at most `CODE_MAX_NAMED_VALUES`."""
    if unique <= CODE_MAX_VALUES:
        return (f"integers with {unique} distinct values in the sample: proposed as categorical codes (move it to "
                "numeric_features if it is a quantity)")
    words = [w for w in _name_words(name) if w in CODE_NAME_WORDS]
    if words and unique <= CODE_MAX_NAMED_VALUES:
        return (f"integers with {unique} distinct values and a code-like name ('{words[-1]}'): proposed as "
                "categorical codes (move it to numeric_features if it is a quantity)")
    return None
