"""The text kind (data.text_features): free text per row (a review, a ticket, a title), kept
as the string through ingest and into the model, which tokenises it with TensorFlow string ops
by ingest's rule (text_tokens.py, text_ops.py), so `serving_default` takes the raw string.

Ingest tokenises each batch in its own pass: an empty or blank value becomes missing, and two
statistics columns join the column's, <name>__tokens (each row's tokens and n-grams: TFDV's
rank histogram of it is the train split's vocabulary, the spec's) and <name>__token_count (the
distribution of lengths). After the pass each split's token column carries, as TFDV custom
statistics, its share of tokens outside the train split's vocabulary. The encoders: `bag`, the
mean embedding of unigrams and n-grams, tokens past the vocabulary hashed into `hash_buckets`;
`transformer`, a small Transformer encoder over the first `sequence_length` tokens."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List, Literal, Optional

from pydantic import Field, model_validator

from components.kinds.base import (LINEAR_TEXT, ColumnFacts, Encoded, FeatureKind, FeatureSetting, StringColumn,
                                   clear_string_domain, feature_statistics, find_statistics)
from components.kinds.text_tokens import counts_of_values, ranked, tokenize, with_ngrams

TOKEN_IDS = "token_ids"  # Encoded.extras: {feature: [batch, sequence_length] int64 token ids, 0 padding}
OOV_SHARE = "out_of_vocabulary_share"  # the custom statistic on each split's <name>__tokens
# gpupipe init: a text column is proposed as text when this share of its sampled values differ
# and they are long (DETECT_TOKENS tokens or DETECT_CHARS characters on average).
DETECT_DISTINCT, DETECT_TOKENS, DETECT_CHARS = 0.3, 4.0, 40.0


class TextSetting(FeatureSetting):
    """One text column's settings: the vocabulary, the encoder and its size."""

    encoder: Literal["bag", "transformer"] = Field(
        "bag", description="bag: the mean embedding of the value's unigrams and n-grams (fast, the default); "
                           "transformer: token and position embeddings through `layers` self-attention blocks, "
                           "mean-pooled")
    max_tokens: int = Field(20000, ge=1, le=1_000_000,
                            description="vocabulary size: the train split's most frequent tokens and n-grams")
    min_count: int = Field(2, ge=1, description="a token in the vocabulary was seen at least this often in train")
    hash_buckets: int = Field(10000, ge=1, description="tokens outside the vocabulary are hashed into this many "
                                                       "embedding rows (unseen words still carry signal)")
    ngrams: int = Field(2, ge=1, le=3, description="bag: unigrams up to n-grams of this length (2: and bigrams); "
                                                   "the transformer takes unigrams")
    sequence_length: int = Field(128, ge=1, le=4096, description="transformer (and custom_model token ids): the "
                                                                 "first this many tokens of a value")
    dim: int = Field(32, ge=2, le=1024, description="the embedding width (the text's part of the dense vector)")
    layers: int = Field(2, ge=1, le=12, description="transformer: self-attention blocks")
    heads: int = Field(2, ge=1, le=16, description="transformer: attention heads (each dim / heads wide)")

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.encoder == "transformer" and self.dim % self.heads:
            raise ValueError(f"dim {self.dim} is not a multiple of heads {self.heads}; set dim to a multiple")
        return self


@dataclass(frozen=True)
class TextFeature:
    name: str
    vocabulary: List[str] = field(default_factory=list)  # most frequent first
    encoder: str = "bag"
    hash_buckets: int = 10000
    ngrams: int = 2
    sequence_length: int = 128
    dim: int = 32
    layers: int = 2
    heads: int = 2


@dataclass(frozen=True)
class TextStatistics:
    """What `spec` takes: the column's statistics and its token column's (None when the statistics
    were not ingest's: then the column's most frequent values are tokenised)."""

    column: object
    tokens: object = None


def _counts(feature):
    s = feature.string_stats
    return [(b.label, b.sample_count) for b in s.rank_histogram.buckets] or [(v.value, v.frequency) for v in s.top_values]


def _vocabulary(tokens_stats, setting: TextSetting) -> List[str]:
    vocabulary = ranked(_counts(tokens_stats), setting.max_tokens, setting.min_count)
    return [t for t in vocabulary if " " not in t] if setting.encoder == "transformer" else vocabulary


def oov_drift(current, baseline, names: List[str], thresholds: Dict[str, float], default: float) -> List[str]:
    """Drift of each text feature's out-of-vocabulary share against a baseline (the served
    version's train statistics): the share of this train split's tokens and n-grams outside the
    baseline's vocabulary (its `vocabulary_size` most frequent tokens) less the baseline's own
    share; one line for each past its threshold (`validation.drift.features.<name>__tokens`, else
    `default`). The length distribution, <name>__token_count, drifts by TFDV's numeric comparator."""
    lines = []
    for name in names:
        now, then = find_statistics(current, f"{name}__tokens"), find_statistics(baseline, f"{name}__tokens")
        if now is None or then is None or not _counts(then):
            continue
        stats = {c.name: c.num for c in then.custom_stats}
        size = int(stats.get("vocabulary_size", len(_counts(then))))
        vocabulary = set(ranked(_counts(then), size, 1))
        total = now.string_stats.common_stats.tot_num_values
        share = (total - sum(c for t, c in _counts(now) if t in vocabulary)) / total if total else 0.0
        rise, key = share - stats.get(OOV_SHARE, 0.0), f"{name}__tokens"
        threshold = thresholds.get(key, default)
        if rise > threshold:
            lines.append(f"train: feature '{name}': {share:.1%} of the tokens and n-grams are outside the baseline's "
                         f"vocabulary of {len(vocabulary):,} (the baseline's own share {stats.get(OOV_SHARE, 0.0):.1%}"
                         f"), up {rise:.1%}, past the threshold {threshold:.1%} "
                         f"(validation.drift.features.{key}; the text's words changed)")
    return lines


class TextKind(StringColumn, FeatureKind):
    avg_length = 200
    name = "text"
    config_key = "text_features"
    description = ("columns of free text (reviews, descriptions, titles): tokenised inside the model (lower-cased, "
                   "split on non-word characters) with a vocabulary of the train split's tokens, encoded by an "
                   "embedding bag of unigrams and bigrams or a small Transformer; an empty value is missing")
    settings = TextSetting
    spec_type = TextFeature
    linear = LINEAR_TEXT  # the linear start and baseline: the TF-IDF of its tokens and n-grams
    detect_rank = 20  # after datetime (a timestamp has tokens too), before categorical
    claims_unique = True  # reviews often differ in every row
    init_comment = ("free text: tokenised inside the model, a vocabulary of the train split's tokens, an embedding "
                    "bag of unigrams and bigrams (encoder: transformer for a small Transformer)")

    def arrow_type(self, setting):
        import pyarrow as pa

        return pa.string()

    def statistics_buckets(self, setting: TextSetting) -> int:
        return setting.max_tokens

    def prepare_column(self, column, name: str, setting: TextSetting, source):
        """Blank values become missing; each row's tokens (and n-grams) and its token count as
        statistics columns (missing for a missing value)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from components.contracts.settings import safe_name

        blank = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(column), ""), True)
        column = pc.if_else(blank, pa.scalar(None, pa.string()), column)
        tokens = tokenize(column)
        counts = pc.list_value_length(tokens)
        grams = with_ngrams(tokens, setting.ngrams) if setting.ngrams > 1 else tokens
        missing = blank
        safe = safe_name(name)
        derived = {f"{safe}__tokens": pa.ListArray.from_arrays(grams.offsets, grams.values, mask=missing),
                   f"{safe}__token_count": pc.if_else(missing, pa.scalar(None, pa.int64()), pc.cast(counts, pa.int64()))}
        return column, derived

    def check_statistics(self, name: str, column: str, setting: TextSetting, stats: Dict[str, object],
                         source: str) -> None:
        """Each split's share of tokens outside the train split's vocabulary, as a custom
        statistic on its token column (the empty column is refused before: check_not_empty)."""
        from components.contracts import names

        train = stats.get(names.TRAIN_SPLIT)
        found = find_statistics(train.datasets[0], f"{name}__tokens") if train is not None else None
        if found is None:
            return
        vocabulary = set(_vocabulary(found, setting))
        for split_stats in stats.values():
            tokens = find_statistics(split_stats.datasets[0], f"{name}__tokens")
            if tokens is None:
                continue
            total = tokens.string_stats.common_stats.tot_num_values
            known = sum(count for token, count in _counts(tokens) if token in vocabulary)
            tokens.custom_stats.add(name=OOV_SHARE, num=float(max(0.0, total - known) / total) if total else 0.0)
            tokens.custom_stats.add(name="vocabulary_size", num=float(len(vocabulary)))

    def edit_schema(self, feature) -> None:
        clear_string_domain(feature)

    def edit_derived_schema(self, feature) -> None:
        self.edit_schema(feature)  # new words are no anomaly either; the OOV share says how many

    def spec_statistics(self, dataset, name: str) -> TextStatistics:
        return TextStatistics(feature_statistics(dataset, name), find_statistics(dataset, f"{name}__tokens"))

    def spec(self, name: str, stats: TextStatistics, setting: TextSetting, options) -> TextFeature:
        if stats.tokens is not None and _counts(stats.tokens):
            vocabulary = _vocabulary(stats.tokens, setting)
        else:  # statistics computed outside ingest: the most frequent whole values, tokenised
            counts = counts_of_values(*zip(*_counts(stats.column)) if _counts(stats.column) else ([], []),
                                      1 if setting.encoder == "transformer" else setting.ngrams)
            vocabulary = ranked(list(counts.items()), setting.max_tokens, 1)
        return TextFeature(name=name, vocabulary=vocabulary, encoder=setting.encoder, hash_buckets=setting.hash_buckets,
                           ngrams=setting.ngrams, sequence_length=setting.sequence_length, dim=setting.dim,
                           layers=setting.layers, heads=setting.heads)

    def encode(self, specs: List[TextFeature], inputs, options) -> Encoded:
        """Each feature tokenised and encoded inside the model (text_ops); `extras[TOKEN_IDS]`: its
        [batch, sequence_length] token ids, for a custom model (unused ones are not in the model)."""
        from components.kinds.layers import concat
        from components.kinds.text_ops import TextBag, TextTransformer, TokenIds

        parts, ids = [], {}
        for f in specs:
            spec = asdict(f)
            ids[f.name] = TokenIds(spec, name=f"{f.name}_token_ids")(inputs[f.name])
            if f.encoder == "transformer":
                parts.append(TextTransformer(spec, name=f"{f.name}_transformer")(ids[f.name]))
            else:
                parts.append(TextBag(spec, name=f"{f.name}_bag")(inputs[f.name]))
        return Encoded(dense=[concat(parts, "text")], extras={TOKEN_IDS: ids})

    def detect(self, facts: ColumnFacts) -> Optional[str]:
        found = _looks_like_text(facts)
        if found is None:
            return None
        distinct, tokens, chars, vocabulary = found
        return (f"free text: {distinct:.0%} of {facts.present} sampled values distinct, {tokens:.1f} tokens "
                f"({chars:.0f} characters) a value on average, {vocabulary:,} distinct tokens")


def _looks_like_text(facts: ColumnFacts):
    """(distinct share, mean tokens, mean characters, distinct tokens) of a text column whose
    values mostly differ and are long; None for other columns (categories, codes, IDs)."""
    import pyarrow.compute as pc
    from tensorflow_metadata.proto.v0 import schema_pb2

    if facts.tfdv_type != schema_pb2.BYTES or facts.leading_zeros or not facts.present:
        return None
    distinct = facts.unique / facts.present
    if distinct < DETECT_DISTINCT:
        return None
    values = facts.column.drop_null()
    tokens = tokenize(values)
    mean_tokens = float(pc.mean(pc.list_value_length(tokens)).as_py() or 0.0)
    mean_chars = float(pc.mean(pc.utf8_length(values)).as_py() or 0.0)
    if mean_tokens < DETECT_TOKENS and mean_chars < DETECT_CHARS:
        return None
    return distinct, mean_tokens, mean_chars, len(pc.unique(pc.list_flatten(tokens)))
