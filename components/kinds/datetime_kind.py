"""The datetime kind (data.datetime_features): a date or time per row, written as text (ISO
8601, or the entry's `format`) and kept as that text through ingest and into the model,
which parses it with TensorFlow string ops (datetime_ops.py), so `serving_default` takes
the value as written. The model's inputs: the year standardised, month, day of month, day
of week, hour and minute as sin/cos of their period, the elapsed time since the train
split's earliest value standardised, and an indicator of a value missing or not parsing.

Ingest parses each batch by the same rules (datetime_parse.py): the seconds and year of
each value that parses are statistics columns (<name>__seconds, <name>__year: the spec's
standardisation), and the values that do not parse are counted; past the entry's
`max_unparsed` share of the present values the run stops in one line naming the column,
an example value and the `format` key."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

from pydantic import Field, field_validator

from components.contracts.errors import GpupipeError
from components.kinds.base import (ColumnFacts, Encoded, FeatureKind, FeatureSetting, StringColumn,
                                   clear_string_domain, feature_statistics, find_statistics)
from components.kinds.datetime_parse import (ISO_NAME, DatetimeFeature, compile_format, detect_format,  # noqa: F401
                                             parse_strings)

DERIVED = ("seconds", "year")  # the statistics of each datetime feature: <name>__seconds, <name>__year
UNPARSED = "unparsed"  # <name>__unparsed: the values that do not parse, for ingest's check alone (then dropped)
DETECT_SHARE = 0.99  # gpupipe init: a text column is proposed as datetime when this share of its sampled values parse
DAY = 86400


class DatetimeSetting(FeatureSetting):
    """One datetime column's settings: how its values are written, and how many may be unreadable."""

    format: Optional[str] = Field(
        None, description="how the values are written, a strftime subset: %Y (4 digits), %m, %d, %H (1 or 2 "
                          "digits), %M, %S (2 digits), %%, e.g. '%d/%m/%Y %H:%M'; unset: ISO 8601 "
                          "(YYYY-MM-DD, optionally [ T]HH:MM[:SS][.fraction][Z|+HH:MM])")
    max_unparsed: float = Field(
        0.01, ge=0, le=1, description="more than this share of the column's present values not parsing by `format` "
                                      "stops ingest (the format is probably wrong); an empty cell is missing, not "
                                      "unparsed; those that pass are missing to the model")

    @field_validator("format")
    @classmethod
    def _format(cls, v):
        if v:
            compile_format(v)  # ValueError names the problem
        return v


@dataclass(frozen=True)
class DatetimeStatistics:
    """What `spec` takes: the column's statistics and its derived seconds and year (None when
    the statistics were not ingest's: then the column's most frequent values are parsed)."""

    column: object
    seconds: object = None
    year: object = None


def _non_missing(feature) -> int:
    which = feature.WhichOneof("stats") if feature is not None else None
    return int(getattr(feature, which).common_stats.num_non_missing) if which else 0


def _std(value: float) -> float:
    return float(value) if value > 0 else 1.0


class DatetimeKind(StringColumn, FeatureKind):
    avg_length = 20
    name = "datetime"
    config_key = "datetime_features"
    description = ("columns of dates or times written as text (ISO 8601, or the entry's format): parsed inside the "
                   "model, which takes the year, month, day, weekday, hour and minute (cyclic) and the time since "
                   "the train split's earliest value; a missing or unreadable value is an indicator")
    settings = DatetimeSetting
    spec_type = DatetimeFeature
    detect_rank = 10  # before categorical: a timestamp is text TFDV infers BYTES
    claims_unique = True  # timestamps often differ in every row
    init_comment = ("text that parses as dates or times: parsed inside the model into year, month, day, weekday, "
                    "hour, minute (cyclic) and the time since the train split's earliest value")

    def arrow_type(self, setting):
        import pyarrow as pa

        return pa.string()

    def prepare_column(self, column, name: str, setting: DatetimeSetting, source):
        """The column as it is; its seconds and year where a value parses, and the values that
        do not (for ingest's check), as statistics columns."""
        import pyarrow as pa

        from components.contracts.settings import safe_name

        parsed, safe = parse_strings(column, compile_format(setting.format)), safe_name(name)
        derived = {f"{safe}__seconds": pa.array(parsed.seconds, pa.int64(), mask=~parsed.ok),
                   f"{safe}__year": pa.array(parsed.parts["Y"], pa.int64(), mask=~parsed.ok),
                   f"{safe}__{UNPARSED}": pa.array(column.to_pylist(), pa.string(), mask=~parsed.bad)}
        return column, derived

    def check_statistics(self, name: str, column: str, setting: DatetimeSetting, stats: Dict[str, object],
                         source: str) -> None:
        """Past `max_unparsed` of the present values not parsing: one line naming the column, an
        example and the format key. The unparsed values' column is then dropped from `stats`."""
        unparsed, present, example = 0, 0, None
        for split_stats in stats.values():
            dataset = split_stats.datasets[0]
            present += _non_missing(find_statistics(dataset, name))
            bad = find_statistics(dataset, f"{name}__{UNPARSED}")
            unparsed += _non_missing(bad)
            if bad is not None and example is None and bad.string_stats.top_values:
                example = bad.string_stats.top_values[0].value
            for i in reversed(range(len(dataset.features))):
                if dataset.features[i] is bad:
                    del dataset.features[i]
        if present and unparsed > setting.max_unparsed * present:
            shown = setting.format or ISO_NAME
            raise GpupipeError(
                f"data.datetime_features: {unparsed:,} of {present:,} values of column '{column}' in {source} "
                f"({unparsed / present:.1%}, over max_unparsed {setting.max_unparsed:g}) do not parse as {shown}, "
                f"such as {example!r}; set the entry's format to how they are written (e.g. {{name: {column}, "
                "format: \"%d/%m/%Y %H:%M\"}: %Y %m %d %H %M %S), or fix those cells")

    def edit_schema(self, feature) -> None:
        clear_string_domain(feature)

    def spec_statistics(self, dataset, name: str) -> DatetimeStatistics:
        return DatetimeStatistics(feature_statistics(dataset, name), find_statistics(dataset, f"{name}__seconds"),
                                  find_statistics(dataset, f"{name}__year"))

    def spec(self, name: str, stats: DatetimeStatistics, setting: DatetimeSetting, options) -> DatetimeFeature:
        fmt = setting.format or ""
        seconds = stats.seconds.num_stats if _non_missing(stats.seconds) else None
        year = stats.year.num_stats if _non_missing(stats.year) else None
        if seconds is None or year is None:
            return _spec_from_values(name, fmt, stats.column)
        reference = int(seconds.min)
        return DatetimeFeature(name=name, format=fmt, year_mean=float(year.mean), year_std=_std(year.std_dev),
                               reference=reference, elapsed_mean=(seconds.mean - reference) / DAY,
                               elapsed_std=_std(seconds.std_dev / DAY))

    def encode(self, specs: List[DatetimeFeature], inputs, options) -> Encoded:
        """Each feature parsed and encoded inside the model (datetime_ops.DatetimeEncoding)."""
        from components.kinds.datetime_ops import DatetimeEncoding
        from components.kinds.layers import concat

        parts = [DatetimeEncoding(asdict(f), name=f"{f.name}_datetime")(inputs[f.name]) for f in specs]
        return Encoded(dense=[concat(parts, "datetime")], extras={})

    def detect(self, facts: ColumnFacts) -> Optional[str]:
        found = _detected(facts)
        if found is None:
            return None
        fmt, read = found
        written = f"the format {fmt!r}" if fmt else ISO_NAME
        return f"{read} of {facts.present} sampled values read as {written}" + (" (its format, below)" if fmt else "")

    def detect_setting(self, facts: ColumnFacts) -> Optional[dict]:
        found = _detected(facts)
        return {"format": found[0]} if found and found[0] else None


def _detected(facts: ColumnFacts):
    """(format or None for ISO, values read) when a text column's sampled values parse as dates."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    if facts.tfdv_type != schema_pb2.BYTES or facts.leading_zeros:
        return None
    return detect_format(facts.column.drop_null(), DETECT_SHARE)


def _spec_from_values(name: str, fmt: str, column_stats) -> DatetimeFeature:
    """The spec from the column's most frequent values (TFDV's rank histogram) when the
    statistics hold no derived columns (computed outside ingest)."""
    import numpy as np

    from components.kinds.categorical import ranked_values

    s = column_stats.string_stats
    counts = {b.label: b.sample_count for b in s.rank_histogram.buckets} or \
             {v.value: v.frequency for v in s.top_values}
    values = ranked_values(column_stats)
    parsed = parse_strings(values, compile_format(fmt or None))
    if not parsed.ok.any():
        return DatetimeFeature(name=name, format=fmt)
    weights = np.array([counts[v] for v in values], float)[parsed.ok]
    seconds, years = parsed.seconds[parsed.ok], parsed.parts["Y"][parsed.ok].astype(float)
    reference = int(seconds.min())
    elapsed = (seconds - reference) / DAY
    mean = float(np.average(elapsed, weights=weights))
    year_mean = float(np.average(years, weights=weights))
    return DatetimeFeature(name=name, format=fmt, year_mean=year_mean,
                           year_std=_std(float(np.sqrt(np.average((years - year_mean) ** 2, weights=weights)))),
                           reference=reference, elapsed_mean=mean,
                           elapsed_std=_std(float(np.sqrt(np.average((elapsed - mean) ** 2, weights=weights)))))
