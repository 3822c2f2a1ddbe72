"""Cron expressions: parse the standard 5 fields and find the next time one matches (pure, no clock).

``minute hour day-of-month month day-of-week``, each a comma list of ``*``, ``n``, ``a-b``,
with an optional step (``*/15``, ``8-18/2``, ``5/10`` = ``5-59/10``); months and weekdays also by
name (``jan``..``dec``, ``sun``..``sat``, any case); weekday ``0`` and ``7`` are both Sunday.  As in
Vixie cron, when both day fields are restricted a day matches if *either* does (``0 0 1 * mon``: the
1st and every Monday); when one starts with ``*`` (``*/2`` too, as in Vixie cron) both must match.  ``@yearly`` (``@annually``),
``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and ``@hourly`` stand for their usual fields.

Times are unix seconds.  An expression is read in a time zone (a :class:`zoneinfo.ZoneInfo`, default
UTC): an instant *matches* when it is on a whole minute and its wall-clock time there matches the
fields, counting only the first occurrence of a wall-clock time.  So across daylight-saving changes a
time in the skipped hour never fires that day, and one in the repeated hour fires once (the first).

:func:`parse` raises :class:`CronError` (a ``ValueError``) naming what is wrong; :func:`next_after`
gives the first matching instant strictly after a time; :func:`matches` says whether one matches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Final
from zoneinfo import ZoneInfo

__all__ = ["CronError", "Cron", "parse", "next_after", "matches", "zone", "MACROS"]

UTC: Final = timezone.utc

#: The ``@`` shorthands and the fields they stand for.
MACROS: Final[dict[str, str]] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTHS: Final = {n: i + 1 for i, n in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS: Final = {n: i for i, n in enumerate("sun mon tue wed thu fri sat".split())}
# (name, lowest, highest, names) per field
_FIELDS: Final = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_DAYS_IN: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most each month can have
_SEARCH_YEARS: Final = 12  # a valid expression matches within 8 years (29 February); look a little further


class CronError(ValueError):
    """A cron expression that is not valid (``expr``), and why (``reason``)."""

    def __init__(self, expr: object, reason: str) -> None:
        super().__init__(f"not a cron expression: {expr!r} ({reason})")
        self.expr = expr
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression: the allowed values of each field (weekday 7 folded to 0), and whether
    each day field was ``*`` (Vixie's either-day rule)."""

    expr: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    def day_matches(self, d: datetime) -> bool:
        """Whether the calendar day of ``d`` matches the two day fields."""
        dom = d.day in self.days
        dow = (d.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow  # the '*' one is always true
        return dom or dow

    def wall_matches(self, d: datetime) -> bool:
        """Whether the wall-clock minute ``d`` (seconds ignored) matches every field."""
        return d.minute in self.minutes and d.hour in self.hours and d.month in self.months and self.day_matches(d)


def _number(text: str, lo: int, hi: int, names: dict[str, int], field: str, expr: str) -> int:
    t = text.lower()
    if t in names:
        return names[t]
    if not t.isdigit():
        raise CronError(expr, f"{field}: {text!r} is not a number{' or a name' if names else ''}")
    n = int(t)
    if not lo <= n <= hi:
        raise CronError(expr, f"{field}: {n} is out of {lo}-{hi}")
    return n


def _field(text: str, lo: int, hi: int, names: dict[str, int], field: str, expr: str) -> frozenset[int]:
    out: set[int] = set()
    for item in text.split(","):
        if item == "":
            raise CronError(expr, f"{field}: an empty item in {text!r}")
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise CronError(expr, f"{field}: the step in {item!r} is not a whole number >= 1")
            step = int(step_text)
        if base == "*":
            a, b = lo, hi
        elif "-" in base:
            left, _, right = base.partition("-")
            a = _number(left, lo, hi, names, field, expr)
            b = _number(right, lo, hi, names, field, expr)
            if a > b:
                raise CronError(expr, f"{field}: the range {item!r} runs backwards")
        else:
            a = _number(base, lo, hi, names, field, expr)
            b = hi if slash else a  # 'a/n': from a to the top, every n
        out.update(range(a, b + 1, step))
    return frozenset(out)


def parse(expr: object) -> Cron:
    """The :class:`Cron` of ``expr``; :class:`CronError` if it is not a valid 5-field expression (or
    names no day that exists, such as ``0 0 30 2 *``)."""
    if type(expr) is not str:
        raise CronError(expr, "a cron expression is a str")
    text = MACROS.get(expr.strip().lower(), expr)
    parts = text.split()
    if len(parts) != 5:
        raise CronError(expr, f"5 fields (minute hour day-of-month month day-of-week), not {len(parts)}")
    sets = [_field(p, lo, hi, names, name, expr) for p, (name, lo, hi, names) in zip(parts, _FIELDS)]
    minutes, hours, days, months, weekdays = sets
    weekdays = frozenset(d % 7 for d in weekdays)
    # as in Vixie cron, a day field starting with '*' (also '*/2') leaves the other one to decide
    any_day, any_weekday = parts[2].startswith("*"), parts[4].startswith("*")
    cron = Cron(expr, minutes, hours, days, months, weekdays, any_day, any_weekday)
    if (any_day or any_weekday) and not any(d <= _DAYS_IN[m - 1] for m in months for d in days):
        raise CronError(expr, "no chosen day of month exists in a chosen month")
    return cron


def zone(tz: object) -> ZoneInfo | timezone:
    """The time zone ``tz`` names (``None``: UTC; a ``ZoneInfo`` as is); :class:`CronError` for an unknown name."""
    if tz is None:
        return UTC
    if isinstance(tz, (ZoneInfo, timezone)):
        return tz
    if type(tz) is not str:
        raise CronError(tz, "a time zone is an IANA name like 'Europe/Paris'")
    try:
        return ZoneInfo(tz)
    except (ValueError, OSError, LookupError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise CronError(tz, f"unknown time zone ({exc.__class__.__name__})") from None


def _wall(t: float, tz: ZoneInfo | timezone) -> datetime:
    """The naive wall-clock time of instant ``t`` in ``tz`` (its fold kept)."""
    return datetime.fromtimestamp(t, tz).replace(tzinfo=None)


def _instant(wall: datetime, tz: ZoneInfo | timezone) -> float | None:
    """The first instant whose wall-clock time in ``tz`` is ``wall`` (a whole minute), or None if the
    clocks skip it (a daylight-saving gap)."""
    t = wall.replace(tzinfo=tz, fold=0).timestamp()
    back = _wall(t, tz)
    if back.replace(fold=0) != wall:
        return None
    return t


def matches(cron: Cron, t: float, tz: ZoneInfo | timezone = UTC) -> bool:
    """Whether instant ``t`` matches ``cron`` in ``tz`` (see the module docstring)."""
    if t % 60 != 0:
        return False
    wall = _wall(t, tz)
    if wall.second != 0 or not cron.wall_matches(wall):
        return False
    return _instant(wall.replace(fold=0), tz) == t


def _next_wall(cron: Cron, c: datetime, limit: datetime) -> datetime | None:
    """The first wall-clock minute at or after ``c`` (a whole minute) that matches, before ``limit``."""
    while c < limit:
        if c.month not in cron.months:
            c = datetime(c.year + (c.month == 12), c.month % 12 + 1, 1)
            continue
        if not cron.day_matches(c):
            c = datetime(c.year, c.month, c.day) + timedelta(days=1)
            continue
        if c.hour not in cron.hours:
            c = datetime(c.year, c.month, c.day, c.hour) + timedelta(hours=1)
            continue
        if c.minute not in cron.minutes:
            later = [m for m in cron.minutes if m > c.minute]
            if later:
                c = c.replace(minute=min(later))
            else:
                c = datetime(c.year, c.month, c.day, c.hour) + timedelta(hours=1)
            continue
        return c
    return None


def next_after(cron: Cron, t: float, tz: ZoneInfo | timezone = UTC) -> float:
    """The first instant strictly after unix time ``t`` that matches ``cron`` in ``tz`` (a whole minute)."""
    if not math.isfinite(t):
        raise ValueError(f"a time is finite unix seconds, not {t!r}")
    base = math.floor(t / 60) * 60  # the minute t is in (t itself if whole)
    wall = _wall(base, tz).replace(second=0, microsecond=0, fold=0)
    c = wall + timedelta(minutes=1)
    limit = c + timedelta(days=366 * _SEARCH_YEARS)
    while True:
        found = _next_wall(cron, c, limit)
        if found is None:
            raise CronError(cron.expr, f"matches no time within {_SEARCH_YEARS} years of {t}")
        at = _instant(found, tz)
        if at is not None and at > t:
            return at
        c = found + timedelta(minutes=1)  # skipped by the clocks, or before t (the repeated hour)
