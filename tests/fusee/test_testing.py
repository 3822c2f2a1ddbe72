"""fusee.testing: virtual time, step mocks, and crash injection at every record boundary (issue 7's test kit)."""

from __future__ import annotations

import itertools
import time

import gevent
import pytest

import ensemble as e
import fusee
from fusee import IdPolicy
from fusee.testing import CrashReport, TestEngine, VirtualClock, crash_everywhere

DAY = 86400.0
EFFECTS: list[tuple[str, str]] = []  # (step name, idempotency key) of every body that ran
RUNS = itertools.count()  # a value that is not recorded: it changes every time workflow code runs


@pytest.fixture(autouse=True)
def _reset():
    EFFECTS.clear()
    e.flush()
    yield
    e.flush()


def effect(name: str, value=None):
    """A step body with an external effect: notes (name, key) and returns ``value`` (default: name)."""

    def body(s):
        EFFECTS.append((name, s.key))
        return name if value is None else value

    return body


# -- workflows ---------------------------------------------------------------------------------


@fusee.workflow("nap")
def nap(ctx, _):
    t0 = ctx.now()
    ctx.sleep("day", "1d")
    ctx.sleep("week", "7d")
    return ctx.now() - t0


@fusee.workflow("patient")
def patient(ctx, _):
    got = ctx.wait_for("answer", timeout="1h")
    return {"got": got, "now": ctx.now()}


@fusee.workflow("deadline")
def deadline(ctx, at):
    got = ctx.wait_for("answer", until=at)
    return {"got": got, "now": ctx.now()}


@fusee.workflow("quote")
def quote(ctx, item):
    return ctx.step("price", lambda: 100) + ctx.step("tax", lambda: 20)


@fusee.workflow("trip")
def trip(ctx, who):
    """A saga: book a flight and a hotel, pay; a failed payment cancels what was booked, newest first."""
    booked = []
    try:
        booked.append(ctx.step("book_flight", effect("book_flight", "F-1")))
        ctx.sleep("hold", "2h")
        booked.append(ctx.step("book_hotel", effect("book_hotel", "H-1")))
        ctx.step("pay", lambda: 1 / 0)
    except fusee.StepFailed as exc:
        undone = []
        for ref in reversed(booked):
            undone.append(ctx.step("cancel_" + ref, effect("cancel_" + ref)))
        return {"who": who, "failed": exc.name, "undone": undone}
    return {"who": who, "booked": booked}


@fusee.workflow("flaky")
def flaky(ctx, _):
    seen = next(RUNS)  # workflow code must not depend on what it does not record
    ctx.step("one", effect("one"))
    return seen


# -- virtual time ------------------------------------------------------------------------------


def test_a_day_then_a_week_takes_no_real_time():
    t = time.monotonic()
    with TestEngine([nap]) as eng:
        start = eng.now()
        slept = eng.execute(nap, "nap-1")
        assert eng.now() - start >= 8 * DAY
    assert slept >= 8 * DAY
    assert time.monotonic() - t < 1.0


def test_with_parking_a_sleeping_run_is_parked_and_woken_on_virtual_time():
    """park_after on a TestEngine: the sleeping run is parked an (virtual) hour in, and the skip to its
    wake-up loads it again; still no real time."""
    t = time.monotonic()
    with TestEngine([nap], park_after=3600) as eng:
        slept = eng.execute(nap, "nap-parked")
        m = eng.metrics()
    assert slept >= 8 * DAY
    assert m["parks"] == 2 and m["loads"] == 2  # once per sleep
    assert time.monotonic() - t < 2.0


def test_wait_for_with_a_virtual_timeout_returns_none():
    with TestEngine([patient]) as eng:
        start = eng.now()
        got = eng.execute(patient, "p-1", timeout=5)
    assert got["got"] is None
    assert got["now"] >= start + 3600


def test_wait_for_until_an_absolute_deadline_holds_however_the_clock_moves_meanwhile():
    with TestEngine([deadline]) as eng:
        at = eng.now() + 7200
        got = eng.execute(deadline, "d-1", at, timeout=5)
        assert got == {"got": None, "now": at}  # woke at the deadline itself, not later


def test_a_signal_before_the_deadline_wins_and_leaves_no_stale_pause():
    with TestEngine([patient]) as eng:
        start = eng.now()
        run = eng.start(patient, "p-2")
        eng.signal("p-2", "answer", 42)
        got = run.result(5)
        assert got == {"got": 42, "now": start}  # no virtual time passed
        assert eng.clock.next_deadline() is None


def test_virtual_clock_advance_wakes_only_due_pauses():
    clock = VirtualClock(start=1000.0)
    woke: list[str] = []
    me = e.self()

    def sleeper(name, at):
        clock.pause(at)
        woke.append(name)
        e.send(me, ("woke", name))

    e.spawn(sleeper, "soon", 1010.0)
    e.spawn(sleeper, "late", 2000.0)
    gevent.sleep(0)  # a yield, not a wait: both sleepers (on this thread) run until they pause
    assert clock.waiting() == [1010.0, 2000.0]
    assert clock.advance(10) == 1010.0
    assert e.receive(lambda m: m if m == ("woke", "soon") else NOMATCH_, timeout=5) == ("woke", "soon")
    assert woke == ["soon"] and clock.waiting() == [2000.0]
    assert clock.skip() and clock.now() == 2000.0
    assert e.receive(lambda m: m if m == ("woke", "late") else NOMATCH_, timeout=5) == ("woke", "late")
    assert clock.next_deadline() is None and not clock.skip()
    clock.pause(1500.0)  # already past: returns at once
    with pytest.raises(ValueError):
        clock.advance(-1)


NOMATCH_ = e.NOMATCH


# -- mocks -------------------------------------------------------------------------------------


def test_mock_step_replaces_a_body_by_workflow_or_type_name():
    with TestEngine([quote]) as eng:
        assert eng.execute(quote, "q-1") == 120
        eng.mock_step(quote, "price", lambda: 7)
        eng.mock_step("quote", "tax", lambda s: len(s.key.split("/")))
        assert eng.execute(quote, "q-2") == 7 + 3
        with pytest.raises(TypeError):
            eng.mock_step(quote, "price", 5)


def test_a_mock_stays_across_a_crash_and_reopen():
    with TestEngine([nap, quote]) as eng:
        eng.mock_step(quote, "price", lambda: 1)
        eng.crash()
        eng.reopen()
        assert eng.execute(quote, "q-3") == 21


# -- crash_everywhere --------------------------------------------------------------------------


def trip_case(eng: TestEngine):
    """Book a trip for ann (attaching after a reopen); the result, and the step names the journal holds."""
    result = eng.start(trip, "trip-ann", "ann", IdPolicy.ATTACH).result(10)
    steps = [rec.name for _, rec in eng.describe("trip-ann")["journal"] if type(rec).__name__ == "Step"]
    return result, steps


def test_crash_everywhere_over_a_saga_with_compensation():
    report = crash_everywhere(trip_case, [trip])
    assert isinstance(report, CrashReport)
    result, steps = report.result
    assert result == {"who": "ann", "failed": "pay", "undone": ["cancel_H-1", "cancel_F-1"]}
    # every trial ended with each step (and each compensation) recorded exactly once, in order
    assert steps == ["book_flight", "book_hotel", "pay", "cancel_H-1", "cancel_F-1"]
    # Start, 5 Steps, Timer, Fired, Done
    assert report.boundaries == 9 and len(report.trials) == 9 and report.cases == 19
    assert [t.k for t in report.trials] == list(range(1, 10))
    for t in report.trials:
        # a compensation whose record survived the crash did not run again (the kit checks every step);
        # one whose record did not survive ran again after the reopen, at most once
        for name in ("cancel_H-1", "cancel_F-1"):
            total = t.bodies_before.get(name, 0) + t.bodies_after.get(name, 0)
            assert 1 <= total <= 2, (t.k, name, t)
            assert t.bodies_after.get(name, 0) <= 1
    # the last trials crashed after both compensations were durable: neither ran after the reopen
    last = report.trials[-1]
    assert len(last.durable_steps) == 5 and last.bodies_after == {}
    # the first trial crashed after the Start only: the flight was booked (its record was lost), and
    # everything ran (again) after the reopen, the flight with the same key
    first = report.trials[0]
    assert first.durable_steps == set() and first.bodies_before == {"book_flight": 1}
    assert first.bodies_after == {"book_flight": 1, "book_hotel": 1, "pay": 1, "cancel_H-1": 1, "cancel_F-1": 1}
    # every run of a body, in every trial, had the one idempotency key of its step
    for name in ("book_flight", "book_hotel", "cancel_H-1", "cancel_F-1"):
        assert len({key for n, key in EFFECTS if n == name}) == 1, name


def flaky_case(eng: TestEngine):
    return eng.start(flaky, "flaky-1", None, IdPolicy.ATTACH).result(10)


def test_crash_everywhere_detects_a_result_that_depends_on_what_is_not_recorded():
    with pytest.raises(AssertionError, match=r"crash after record 1 of 3: the case returned \d+, the clean run \d+"):
        crash_everywhere(flaky_case, [flaky])


def test_crash_everywhere_detects_a_durable_step_whose_body_runs_again(monkeypatch):
    """A broken engine (simulated) that runs step "one"'s body again even when it replays its record."""
    real_step = fusee.Ctx.step

    def forgetful(self, name, fn, retry=None, read_only=False):
        value = real_step(self, name, fn, retry, read_only)
        if name == "one":
            st = self._st
            body = st.host.step_body(st.wtype, name, fn)  # the kit counts what the engine takes from here
            body(fusee.StepContext(f"{st.id}/{st.run}/0", name, 1))
        return value

    monkeypatch.setattr(fusee.Ctx, "step", forgetful)

    @fusee.workflow("steady")
    def steady(ctx, _):
        return ctx.step("one", effect("one"))

    def case(eng):
        return eng.start(steady, "steady-1", None, IdPolicy.ATTACH).result(10)

    with pytest.raises(AssertionError, match=r"crash after record 2 of 3: step bodies ran again .*steady-1/0/0"):
        crash_everywhere(case, [steady])


def test_crash_everywhere_names_k_when_the_case_fails_after_the_reopen():
    @fusee.workflow("fragile")
    def fragile(ctx, _):
        ctx.step("one", effect("one"))
        return "ok"

    opened = itertools.count()

    def case(eng):
        if next(opened) == 2:  # the run after the first crash's reopen
            raise RuntimeError("boom")
        return eng.start(fragile, "f-1", None, IdPolicy.ATTACH).result(10)

    with pytest.raises(AssertionError, match=r"crash after record 1 of 3: the case raised RuntimeError\('boom'\) after"):
        crash_everywhere(case, [fragile])


def test_crash_everywhere_on_a_clean_scenario_reports_each_boundary():
    def case(eng):
        return eng.start(quote, "q", "x", IdPolicy.ATTACH).result(10)

    report = crash_everywhere(case, [quote], shards=2)
    assert report.result == 120 and report.boundaries == 4  # Start, Step, Step, Done
    assert [len(t.durable_steps) for t in report.trials] == [0, 1, 2, 2]
