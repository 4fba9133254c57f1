"""How a datetime column's strings are read, written once for ingest (Arrow and NumPy, here)
and the SavedModel (TensorFlow string ops: datetime_ops.py): a format becomes one anchored
regex (RE2 syntax, which Arrow's and TensorFlow's string kernels both run) whose groups are
the parts, and the parts become days since 1970-01-01 by integer civil-from-date arithmetic
(`days_from_civil`, written over any array module: NumPy's or TensorFlow's operators).

A format is a strftime subset: %Y (4 digits), %m, %d, %H (1 or 2 digits), %M, %S (2 digits),
%% (a literal '%'); it holds %Y, each directive at most once, and a part it leaves out is the
start of its period (month 1, day 1, 00:00:00). With no format, ISO 8601 is read:
`YYYY-MM-DD`, optionally `[ T]HH:MM`, optionally `:SS`, fractional seconds (ignored) and a
trailing `Z` or UTC offset (`+02:00`, `-0530`): the parts are the clock as written (the hour
of day, the weekday where it was written), the seconds since 1970 the instant in UTC. Leading and trailing whitespace is dropped; an empty value is missing, not bad.
A value whose parts are out of range (month 13, 31 April, 29 February of a common year, hour
24) does not parse."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class DatetimeFeature:
    """A datetime feature's spec (what the trained model keeps): its format and the train split's year and elapsed-time scale."""
    name: str
    format: str = ""  # '': ISO 8601
    year_mean: float = 2000.0
    year_std: float = 1.0
    reference: int = 0  # seconds since 1970-01-01 of the train split's earliest value
    elapsed_mean: float = 0.0  # days since the reference: the train split's mean and deviation
    elapsed_std: float = 1.0


PARTS = "YmdHMS"  # the parts, in the order the rewrite lists them
DEFAULTS = {"Y": "1970", "m": "1", "d": "1", "H": "0", "M": "0", "S": "0"}  # a part a format leaves out
_DIGITS = {"Y": "[0-9]{4}", "m": "[0-9]{1,2}", "d": "[0-9]{1,2}", "H": "[0-9]{1,2}", "M": "[0-9]{2}", "S": "[0-9]{2}"}
_SPECIAL = set(".^$*+?()[]{}|\\")
ISO_NAME = "ISO 8601 (YYYY-MM-DD[ T]HH:MM[:SS][Z|+HH:MM])"
# Groups 1-6: the parts; 7-9: a UTC offset's sign, hours and minutes (ISO_OFFSET).
_ISO = (r"^([0-9]{4})-([0-9]{2})-([0-9]{2})"
        r"(?:[ T]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,][0-9]+)?)?(?:Z|([+-])([0-9]{2}):?([0-9]{2}))?)?$")
ISO_OFFSET = (7, 8, 9)
# What `gpupipe init` tries on a text column after ISO 8601, in this order (month first before
# day first: the two agree on days up to 12, and init proposes the first that fits).
COMMON_FORMATS = ("%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M", "%Y/%m/%d",
                  "%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M", "%m/%d/%Y",
                  "%d/%m/%Y %H:%M:%S", "%d/%m/%Y %H:%M", "%d/%m/%Y",
                  "%d.%m.%Y %H:%M:%S", "%d.%m.%Y %H:%M", "%d.%m.%Y", "%d-%m-%Y %H:%M", "%d-%m-%Y")


@dataclass(frozen=True)
class DateFormat:
    """A format compiled: its anchored regex, the group of each part it holds, an example
    value it matches (what the SavedModel parses in place of a value that does not match,
    whose result is then discarded) and the rewrite that turns a match into the six parts
    ('0\\1 0\\2 ...', a part the format leaves out as its default)."""

    format: Optional[str]
    pattern: str
    groups: Dict[str, int]
    example: str
    offset: Optional[Tuple[int, int, int]] = None  # the groups of a UTC offset's sign, hours, minutes

    @property
    def rewrite(self) -> str:
        return " ".join(f"0\\{self.groups[p]}" if p in self.groups else DEFAULTS[p] for p in PARTS)

    @property
    def shown(self) -> str:
        return self.format or ISO_NAME


def compile_format(fmt: Optional[str]) -> DateFormat:
    """The compiled format (None or '': ISO 8601); ValueError names what is wrong with it."""
    if not fmt:
        return DateFormat(None, _ISO, {p: i + 1 for i, p in enumerate(PARTS)}, "1970-01-01 00:00:00", ISO_OFFSET)
    pattern, example, groups, i = ["^"], [], {}, 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            d = fmt[i + 1] if i + 1 < len(fmt) else ""
            if d == "%":
                pattern.append("%")
                example.append("%")
            elif d in _DIGITS:
                if d in groups:
                    raise ValueError(f"format {fmt!r} holds %{d} twice")
                groups[d] = len(groups) + 1
                pattern.append(f"({_DIGITS[d]})")
                example.append(DEFAULTS[d].zfill(4 if d == "Y" else 2))
            else:
                raise ValueError(f"format {fmt!r}: %{d} is not one of %Y %m %d %H %M %S %%")
            i += 2
            continue
        pattern.append("\\" + c if c in _SPECIAL else c)
        example.append(c)
        i += 1
    if "Y" not in groups:
        raise ValueError(f"format {fmt!r} has no %Y (a year of 4 digits)")
    return DateFormat(fmt, "".join(pattern) + "$", groups, "".join(example))


def days_from_civil(y, m, d, where):
    """Days since 1970-01-01 of the (proleptic Gregorian) date y-m-d, on integer arrays of any
    module whose `//` floors (NumPy, TensorFlow): H. Hinnant's days_from_civil."""
    y = y - where(m <= 2, 1, 0)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def days_in_month(y, m, where):
    """28 to 31: the days of month m of year y (integer arrays of any module)."""
    leap = ((y % 4) == 0) & (((y % 100) != 0) | ((y % 400) == 0))
    return where(m == 2, 28 + where(leap, 1, 0), 30 + (m + m // 8) % 2)


def day_of_week(days, where=None):
    """0 Monday .. 6 Sunday of days since 1970-01-01 (a Thursday)."""
    return (days + 3) % 7


def in_range(y, m, d, hh, mm, ss, where):
    """Whether the parts name a real time: month 1-12, a day of that month, 00:00:00-23:59:59."""
    month = (m >= 1) & (m <= 12)
    return month & (d >= 1) & (d <= days_in_month(y, where(month, m, 1), where)) & (hh <= 23) & (mm <= 59) & (ss <= 59)


@dataclass
class Parsed:
    """A column parsed: per value whether it is missing (null or blank), whether it parsed,
    and for those that did its parts and seconds since 1970-01-01 00:00:00 (0 elsewhere)."""

    missing: object  # numpy bool
    ok: object  # numpy bool
    parts: Dict[str, object]  # {part: numpy int64}
    seconds: object  # numpy int64

    @property
    def bad(self):
        return ~self.missing & ~self.ok


def parse_strings(values, fmt: DateFormat) -> Parsed:
    """An Arrow string array (or a list of str/None) parsed by `fmt` (Arrow's RE2 kernels)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values, pa.string())
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not pa.types.is_string(array.type):
        array = pc.cast(array, pa.string())
    text = pc.ascii_trim_whitespace(array)
    missing = pc.fill_null(pc.equal(text, ""), True).to_numpy(zero_copy_only=False)
    matched = pc.fill_null(pc.match_substring_regex(text, fmt.pattern), False).to_numpy(zero_copy_only=False)
    parts = {}
    for p in PARTS:
        if p in fmt.groups:
            taken = pc.replace_substring_regex(pc.if_else(pa.array(matched), text, fmt.example), fmt.pattern,
                                               f"0\\{fmt.groups[p]}")
            parts[p] = pc.cast(taken, pa.int64()).to_numpy().astype(np.int64)
        else:
            parts[p] = np.full(len(text), int(DEFAULTS[p]), np.int64)
    y, m, d, hh, mm, ss = (parts[p] for p in PARTS)
    ok = matched & ~missing & in_range(y, m, d, hh, mm, ss, np.where)
    offset = np.zeros(len(text), np.int64)
    if fmt.offset:
        safe = pc.if_else(pa.array(matched), text, fmt.example)
        sign, oh, om = (pc.replace_substring_regex(safe, fmt.pattern, f"{'' if i == 0 else '0'}\\{g}")
                        for i, g in enumerate(fmt.offset))
        oh, om = (pc.cast(v, pa.int64()).to_numpy().astype(np.int64) for v in (oh, om))
        ok &= (oh <= 23) & (om <= 59)
        offset = np.where(pc.equal(sign, "-").to_numpy(zero_copy_only=False), -1, 1) * (oh * 3600 + om * 60)
    days = days_from_civil(y, np.where(ok, m, 1), np.where(ok, d, 1), np.where)
    seconds = np.where(ok, days * 86400 + hh * 3600 + mm * 60 + ss - offset, 0).astype(np.int64)
    return Parsed(missing=missing, ok=ok, parts=parts, seconds=seconds)


def detect_format(values, min_share: float) -> Optional[Tuple[Optional[str], int]]:
    """(the format, None for ISO 8601, that reads at least `min_share` of the present values;
    how many it reads), trying ISO 8601 then COMMON_FORMATS; None when none does."""
    for fmt in (None, *COMMON_FORMATS):
        parsed = parse_strings(values, compile_format(fmt))
        present = int((~parsed.missing).sum())
        read = int(parsed.ok.sum())
        if present and read >= min_share * present:
            return fmt, read
    return None
