"""The datetime kind's parts, without kfp or a pipeline: ingest's parse (Arrow) and the
model's (TensorFlow string ops) agree value by value, valid and invalid, with Python's own
datetime as the independent side; the encoding's cyclic columns and day of week; formats
refused in one line; the spec from statistics computed outside ingest."""
import datetime as dt
import math
import re

import numpy as np
import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow as tf

from components.kinds.datetime_kind import DatetimeFeature, DatetimeSetting
from components.kinds.datetime_ops import COLUMNS, encode_tensor, parse_tensor
from components.kinds.datetime_parse import compile_format, detect_format, parse_strings

pytestmark = pytest.mark.unit

EPOCH = dt.datetime(1970, 1, 1)
# (value, format, the datetime it names or None when it must not parse; "" is missing)
CASES = [
    ("2024-02-29 13:05:07", None, dt.datetime(2024, 2, 29, 13, 5, 7)),  # a leap day
    ("2023-02-29", None, None),  # not a leap year
    ("1999-12-31T23:59", None, dt.datetime(1999, 12, 31, 23, 59)),
    ("2021-06-01T10:00:30.250Z", None, dt.datetime(2021, 6, 1, 10, 0, 30)),  # fraction ignored
    ("  2020-01-01  ", None, dt.datetime(2020, 1, 1)),  # whitespace dropped
    ("1900-03-01 00:00", None, dt.datetime(1900, 3, 1)),  # before 1970
    ("2000-02-29", None, dt.datetime(2000, 2, 29)),  # divisible by 400: leap
    ("2100-02-29", None, None),  # divisible by 100: not
    ("2020-13-01", None, None),
    ("2020-04-31", None, None),
    ("2020-01-01 24:00", None, None),
    ("2020-01-01 10:60", None, None),
    ("2020-1-1", None, None),  # ISO wants two digits
    ("2020-01-01 10:00+02:00", None, dt.datetime(2020, 1, 1, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
    ("2020-01-01T23:30:00-0530", None, dt.datetime(2020, 1, 1, 23, 30, tzinfo=dt.timezone(-dt.timedelta(hours=5, minutes=30)))),
    ("2020-01-01 10:00+25:00", None, None),  # no such offset
    ("2020-01-01+02:00", None, None),  # an offset needs a time
    ("20200101", None, None),
    ("hello", None, None),
    ("", None, "missing"),
    ("   ", None, "missing"),
    ("31/12/2019 08:15", "%d/%m/%Y %H:%M", dt.datetime(2019, 12, 31, 8, 15)),
    ("1/2/2000 0:05", "%d/%m/%Y %H:%M", dt.datetime(2000, 2, 1, 0, 5)),
    ("12/31/2019 08:15", "%d/%m/%Y %H:%M", None),
    ("2019.12.31", "%Y.%m.%d", dt.datetime(2019, 12, 31)),
    ("2019x12x31", "%Y.%m.%d", None),  # '.' is a literal dot, not any character
    ("100% 2019", "100%% %Y", dt.datetime(2019, 1, 1)),
    ("[2019-05] 7h", "[%Y-%m] %Hh", dt.datetime(2019, 5, 1, 7)),
]


@pytest.mark.parametrize("fmt", sorted({f or "" for _, f, _ in CASES}))
def test_ingest_and_the_model_parse_alike_and_as_python_does(fmt):
    cases = [(v, want) for v, f, want in CASES if (f or "") == fmt]
    values = [v for v, _ in cases]
    py = parse_strings(values, compile_format(fmt or None))
    missing, ok, parts, seconds = (t.numpy() if hasattr(t, "numpy") else {k: p.numpy() for k, p in t.items()}
                                   for t in parse_tensor(tf.constant(values), fmt))
    assert list(py.ok) == list(ok) and list(py.missing) == list(missing)
    assert list(py.seconds) == list(seconds)
    for i, (value, want) in enumerate(cases):
        assert bool(py.missing[i]) == (want == "missing"), value
        assert bool(py.ok[i]) == isinstance(want, dt.datetime), value
        if isinstance(want, dt.datetime):  # the instant (UTC) in seconds; the parts as written
            utc = want.astimezone(dt.timezone.utc).replace(tzinfo=None) if want.tzinfo else want
            assert seconds[i] == (utc - EPOCH) // dt.timedelta(seconds=1), value
            assert [parts[p][i] for p in "YmdHM"] == [want.year, want.month, want.day, want.hour, want.minute]


def _encoded(values, **spec):
    return dict(zip(COLUMNS, encode_tensor(tf.constant(values), DatetimeFeature(name="t", **spec)).numpy().T))


def test_day_of_week_of_known_dates():
    dates = [dt.date(1970, 1, 1), dt.date(2000, 1, 1), dt.date(2024, 2, 29), dt.date(1969, 12, 31),
             dt.date(1900, 1, 1), dt.date(2038, 1, 19)] + [dt.date(2023, 5, 1) + dt.timedelta(days=k) for k in range(7)]
    enc = _encoded([d.isoformat() for d in dates])
    weekday = np.round(np.mod(np.arctan2(enc["weekday_sin"], enc["weekday_cos"]) / (2 * math.pi) * 7, 7)).astype(int) % 7
    assert list(weekday) == [d.weekday() for d in dates]  # 0 Monday, as Python counts


def test_cyclic_columns_are_sin_and_cos_of_the_period_and_missing_is_an_indicator():
    enc = _encoded(["2021-07-16 18:45", "2021-01-01 00:00", "", "not a date"], year_mean=2021.0, year_std=2.0,
                   reference=int((dt.datetime(2021, 1, 1) - EPOCH).total_seconds()), elapsed_mean=10.0,
                   elapsed_std=5.0)
    for column, value, period in [("month", 6, 12), ("day", 15, 31), ("hour", 18, 24), ("minute", 45, 60)]:
        assert enc[f"{column}_sin"][0] == pytest.approx(math.sin(2 * math.pi * value / period), abs=1e-5)
        assert enc[f"{column}_cos"][0] == pytest.approx(math.cos(2 * math.pi * value / period), abs=1e-5)
        assert (enc[f"{column}_sin"][1], enc[f"{column}_cos"][1]) == pytest.approx((0.0, 1.0), abs=1e-6)
    assert enc["year"][0] == 0.0 and enc["elapsed"][1] == pytest.approx(-2.0)  # day 0: (0 - 10) / 5
    assert enc["elapsed"][0] == pytest.approx(((31 + 28 + 31 + 30 + 31 + 30 + 15 + 18.75 / 24) - 10) / 5, abs=1e-4)
    assert list(enc["missing"]) == [0.0, 0.0, 1.0, 1.0]
    assert all(enc[c][2] == 0.0 and enc[c][3] == 0.0 for c in COLUMNS if c != "missing")


@pytest.mark.parametrize("fmt, message", [
    ("%d/%m", "has no %Y"), ("%Y-%m-%d %I:%M", "%I is not one of %Y %m %d %H %M %S %%"),
    ("%Y %Y", "holds %Y twice"),
])
def test_a_format_outside_the_subset_is_refused_naming_the_directive(fmt, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        DatetimeSetting(name="t", format=fmt)


def test_detect_reads_iso_first_and_otherwise_the_first_common_format_that_fits():
    assert detect_format(["2020-01-02", "2020-03-04 10:00", None], 0.99) == (None, 2)
    assert detect_format(["25/12/2020 10:00", "01/02/2021 23:59"], 0.99) == ("%d/%m/%Y %H:%M", 2)
    assert detect_format(["12/25/2020", "01/02/2021"], 0.99) == ("%m/%d/%Y", 2)
    assert detect_format(["u001", "u002"], 0.99) is None and detect_format(["12", "7"], 0.99) is None


def test_the_spec_without_ingest_statistics_parses_the_most_frequent_values():
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from components.kinds.datetime_kind import DatetimeKind, DatetimeStatistics

    feature = statistics_pb2.FeatureNameStatistics(name="t")
    for value, count in [("2020-01-01", 3), ("2020-01-03", 1), ("garbage", 5)]:
        feature.string_stats.top_values.add(value=value, frequency=count)
    spec = DatetimeKind().spec("t", DatetimeStatistics(feature), DatetimeSetting(name="t"), None)
    assert spec.reference == 1577836800 and spec.year_mean == 2020.0
    assert spec.elapsed_mean == pytest.approx(0.5) and spec.elapsed_std == pytest.approx(math.sqrt(0.75))
