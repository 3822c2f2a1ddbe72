"""fusee.cron, the pure parser and next-fire computation (issue 16, schedules): hypothesis laws (the
next fire is strictly after the given time, matches the expression, and no matching minute lies
between; in UTC and in time zones with daylight saving), the grammar by example, and typed errors."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import cron as c

UTC = timezone.utc
T2024 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()  # a Monday


def at(*args: int, tz=UTC) -> float:
    return datetime(*args, tzinfo=tz).timestamp()


# -- expressions as hypothesis draws them ----------------------------------------------------------


def _item(lo: int, hi: int):
    single = st.integers(lo, hi).map(str)
    rng = st.tuples(st.integers(lo, hi), st.integers(lo, hi)).map(lambda p: f"{min(p)}-{max(p)}")
    step = st.integers(1, max(1, hi - lo)).map(lambda n: f"*/{n}")
    rng_step = st.tuples(st.integers(lo, hi), st.integers(lo, hi), st.integers(1, 7)).map(
        lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"
    )
    return st.one_of(single, rng, step, rng_step)


def _field(lo: int, hi: int, star_weight: int = 1):
    lists = st.lists(_item(lo, hi), min_size=1, max_size=3).map(",".join)
    return st.one_of(*([st.just("*")] * star_weight), lists)


EXPRS = st.tuples(_field(0, 59), _field(0, 23), _field(1, 31, 2), _field(1, 12, 2), _field(0, 7, 2)).map(" ".join)
TIMES = st.floats(min_value=T2024 - 5 * 365 * 86400, max_value=T2024 + 5 * 365 * 86400, allow_nan=False)


def _valid(expr: str):
    try:
        return c.parse(expr)
    except c.CronError:
        return None


def _reference_next(cron: c.Cron, t: float) -> float:
    """The first matching minute after ``t`` in UTC, by walking: whole days whose date cannot match are
    stepped over, the others minute by minute (independent of the module's field-skipping search)."""
    m = (int(t // 60) + 1) * 60
    while True:
        d = datetime.fromtimestamp(m, UTC)
        if d.month not in cron.months or not cron.day_matches(d):
            m = int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp()) + 86400
            continue
        if d.hour in cron.hours and d.minute in cron.minutes:
            return float(m)
        m += 60


# -- laws ----------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(EXPRS, TIMES)
def test_next_is_after_matches_and_skips_no_matching_minute(expr, t):
    cron = _valid(expr)
    if cron is None:
        return
    n = c.next_after(cron, t)
    assert n > t
    assert n % 60 == 0
    assert c.matches(cron, n)
    assert n == _reference_next(cron, t)  # no matching minute lies between


ZONES = st.sampled_from(["UTC", "America/New_York", "Europe/Paris", "Asia/Kolkata", "Australia/Lord_Howe"])
DAILY = st.tuples(_field(0, 59), _field(0, 23)).map(lambda p: f"{p[0]} {p[1]} * * *")
DST_TIMES = st.sampled_from(
    [at(2024, 3, 10, 6), at(2024, 11, 3, 5), at(2024, 3, 31, 0), at(2024, 10, 27, 0), at(2024, 4, 7, 14), at(2024, 10, 6, 15)]
).flatmap(lambda base: st.floats(min_value=base - 3 * 3600, max_value=base + 3 * 3600))


@settings(max_examples=120, deadline=None)
@given(DAILY, ZONES, DST_TIMES)
def test_in_a_time_zone_across_daylight_saving_no_matching_instant_is_skipped(expr, name, t):
    """Around the year's clock changes: the next fire matches in the zone, and every whole minute
    between ``t`` and it does not (matching means: its wall-clock time, first occurrence only)."""
    cron, tz = c.parse(expr), ZoneInfo(name)
    n = c.next_after(cron, t, tz)
    assert n > t and c.matches(cron, n, tz)
    m = (int(t // 60) + 1) * 60
    while m < n:
        assert not c.matches(cron, m, tz), (expr, name, t, m)
        m += 60


@settings(max_examples=100, deadline=None)
@given(EXPRS, TIMES)
def test_next_after_a_fire_is_the_following_fire(expr, t):
    """Chaining: next_after is monotone, and asking from just before a fire gives that fire."""
    cron = _valid(expr)
    if cron is None:
        return
    n = c.next_after(cron, t)
    assert c.next_after(cron, n - 0.001) == n
    assert c.next_after(cron, n) > n


# -- the grammar, by example -----------------------------------------------------------------------


def test_lists_ranges_steps_and_names():
    cron = c.parse("0,30 9-17/2 * jan,JUL-aug mon-fri")
    assert cron.minutes == {0, 30} and cron.hours == {9, 11, 13, 15, 17}
    assert cron.months == {1, 7, 8} and cron.weekdays == {1, 2, 3, 4, 5}
    assert c.parse("5/20 * * * *").minutes == {5, 25, 45}
    assert c.parse("* * * * 7").weekdays == {0} == c.parse("* * * * sun").weekdays
    assert c.parse("@daily") == c.parse("0 0 * * *").__class__(
        "@daily", *[getattr(c.parse("0 0 * * *"), f) for f in ("minutes", "hours", "days", "months", "weekdays", "any_day", "any_weekday")]
    )


def test_next_fire_by_example():
    t = at(2024, 3, 9, 12, 0)  # a Saturday
    assert c.next_after(c.parse("*/5 * * * *"), t) == at(2024, 3, 9, 12, 5)
    assert c.next_after(c.parse("0 9 * * mon-fri"), t) == at(2024, 3, 11, 9, 0)
    assert c.next_after(c.parse("0 0 29 2 *"), t) == at(2028, 2, 29)
    assert c.next_after(c.parse("@hourly"), t + 1) == at(2024, 3, 9, 13)
    # both day fields restricted: either matches (the 1st, or a Monday)
    assert c.next_after(c.parse("0 0 1 * mon"), t) == at(2024, 3, 11)
    assert c.next_after(c.parse("0 0 15 * mon"), at(2024, 3, 12)) == at(2024, 3, 15)
    # one starts with '*' (also '*/2'): both must match
    assert c.next_after(c.parse("0 0 */2 * tue"), t) == at(2024, 3, 19)  # odd days, Tuesdays


def test_daylight_saving_skipped_hour_never_fires_and_repeated_hour_fires_once():
    ny = ZoneInfo("America/New_York")
    # 2024-03-10 02:30 does not exist in New York: the next 02:30 is the day after
    assert c.next_after(c.parse("30 2 * * *"), at(2024, 3, 10, 0, tz=ny), ny) == at(2024, 3, 11, 2, 30, tz=ny)
    # 2024-11-03 01:30 happens twice: it fires at the first only
    first = c.next_after(c.parse("30 1 * * *"), at(2024, 11, 3, 0, tz=ny), ny)
    assert datetime.fromtimestamp(first, ny).utcoffset().total_seconds() == -4 * 3600
    assert c.next_after(c.parse("30 1 * * *"), first, ny) == at(2024, 11, 4, 1, 30, tz=ny)
    # a zone's wall clock: 9:00 in Kolkata is 3:30 UTC
    assert c.next_after(c.parse("0 9 * * *"), at(2024, 1, 1), ZoneInfo("Asia/Kolkata")) == at(2024, 1, 1, 3, 30)


@pytest.mark.parametrize(
    "bad",
    [
        "", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *", "* * * 13 *",
        "* * * * 8", "*/0 * * * *", "5-1 * * * *", "x * * * *", "1,,2 * * * *", "* * * foo *", "0 0 30 2 *",
        "0 0 31 4,6 *", "@often", "-1 * * * *", "1-2-3 * * * *", "*/x * * * *", 3, None, b"* * * * *",
    ],
)
def test_invalid_expressions_raise_a_typed_error(bad):
    with pytest.raises(c.CronError) as ei:
        c.parse(bad)
    assert isinstance(ei.value, ValueError) and ei.value.expr == bad


def test_time_zones_by_name_and_unknown_ones():
    assert c.zone(None) is c.UTC
    assert c.zone("Europe/Paris") == ZoneInfo("Europe/Paris")
    for bad in ("Mars/Olympus", "", 5, "../etc/passwd"):
        with pytest.raises(c.CronError):
            c.zone(bad)
