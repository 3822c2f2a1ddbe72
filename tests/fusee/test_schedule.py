"""Schedules (issue 16 point 4): the coordinator's pure transitions (hypothesis laws), then schedules on
engines on virtual time (fusee.testing): fires at cron and interval times with deterministic IDs,
bad input refused with nothing recorded, pause / resume / trigger / delete, the three overlap
policies, catch-up of missed times, listing, parking, continue-as-new and reopening.

Fired runs report to the test's process with ensemble messages; time moves only when a test moves the
virtual clock.  Where a test must see the coordinator has handled a wake-up, it waits (``wait_until``)
for the schedule's own listing to show it, never for a fixed time.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusee
from fusee import schedule as S
from fusee.testing import TestEngine, VirtualClock, wait_until

from ._kit import next_probe, no_probe_pending, tell

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() + 30  # Monday 2024-01-01 00:00:30 UTC
MIDNIGHT = T0 - 30


@fusee.workflow("job")
def job(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, inp))
    return [ctx.workflow_id, inp]


@fusee.workflow("hold")
def hold(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, inp))
    ctx.wait_for("go")
    return ctx.workflow_id


# -- the pure core: laws -------------------------------------------------------------------------

SPECS = st.builds(
    S.Spec,
    name=st.just("s"),
    workflow=st.just("job"),
    every=st.sampled_from([1.0, 60.0, 90.0, 3600.0]),
    overlap=st.sampled_from(S.OVERLAPS),
    catchup=st.sampled_from([10.0, 120.0, 3600.0, S.DEFAULT_CATCHUP]),
)
CRON_SPECS = st.builds(
    S.Spec,
    name=st.just("c"),
    workflow=st.just("job"),
    cron=st.sampled_from(["*/5 * * * *", "0 9 * * mon-fri", "30 2 * * *", "0 0 1 * *"]),
    timezone=st.sampled_from([None, "America/New_York"]),
    overlap=st.sampled_from(S.OVERLAPS),
    catchup=st.sampled_from([10.0, 600.0, S.DEFAULT_CATCHUP]),
)
# steps of the world: time passes (seconds), or an event comes
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("wait"), st.floats(min_value=0, max_value=4000)),
        st.tuples(st.sampled_from(["pause", "resume", "trigger", "end_first", "end_all", "bogus"]), st.just(0.0)),
    ),
    max_size=25,
)


def drive(spec: S.Spec, steps):
    """Fold the world's steps through the transitions as the coordinator does; yields (before, after,
    starts, now) per transition."""
    now = T0
    s = S.new_state(spec, now)
    for kind, x in steps:
        before = s
        if kind == "wait":
            now = round(now + x, 3)  # event times are whole milliseconds
            w = S.wake_at(s)
            if w is None or w > now:
                continue
            starts: tuple = ()
            if S.needs_check(s):
                s, starts = S.on_alive(s, list(s.running))
            s, more = S.on_due(s, now)
            starts += more
        elif kind == "end_first":
            s, starts = S.on_event(s, {"kind": "ended", "id": s.running[0] if s.running else "x"})
        elif kind == "end_all":
            starts = ()
            for id in list(s.running):
                s, more = S.on_event(s, {"kind": "ended", "id": id})
                starts += more
        else:
            s, starts = S.on_event(s, {"kind": kind, "at": round(now, 3)})
        yield before, s, starts, now


@settings(max_examples=150, deadline=None)
@given(st.one_of(SPECS, CRON_SPECS), STEPS)
def test_the_overlap_policies_hold_and_no_instant_fires_twice(spec, steps):
    fired: list[str] = []
    for before, s, starts, now in drive(spec, steps):
        for id, at in starts:
            assert id == S.run_id(spec.name, at) and at <= now
        fired.extend(id for id, _ in starts)
        if spec.overlap != "allow":
            assert len(s.running) <= 1  # skip and buffer_one never run two at once
        if spec.overlap != "buffer_one":
            assert s.buffered is None
        elif s.buffered is not None:
            assert s.running and not s.paused  # a start is kept only behind a running one
        if s.paused:
            assert S.wake_at(s) is None
        else:
            assert S.wake_at(s) == s.next
        assert S.State.of_plain(s.plain()) == s  # the state crosses continue-as-new intact
    assert len(fired) == len(set(fired))  # time only moves forward: no run ID twice


@settings(max_examples=150, deadline=None)
@given(st.one_of(SPECS, CRON_SPECS), st.floats(min_value=0, max_value=10 * 86400))
def test_a_wake_up_takes_the_due_times_in_the_window_in_order_and_moves_next_past_now(spec, late):
    """From a fresh state, waking ``late`` seconds after the first due time: with nothing running, the
    first due time within the catch-up window starts (or, with allow, each one), oldest first; every
    start is a due time; the next due time is the first after now."""
    s = S.new_state(spec, T0)
    now = s.next + late
    s2, starts = S.on_due(s, now)
    assert s2.next == spec.next_after(now) and s2.next > now
    times = [at for _, at in starts]
    assert times == sorted(times) and len(set(times)) == len(times)
    for at in times:
        assert now - spec.catchup <= at <= now and spec.at_or_after(at) == at
    in_window = _due_times(spec, max(s.next, spec.at_or_after(now - spec.catchup)), now)
    if spec.overlap == "allow":
        assert times == in_window[: S.MAX_CATCHUP]
    else:
        assert times == in_window[:1]
        assert s2.skipped == max(0, min(len(in_window), S.MAX_CATCHUP) - 1 - (s2.buffered is not None))


def _due_times(spec, first, now, limit=S.MAX_CATCHUP + 1):
    out, t = [], first
    while t <= now and len(out) < limit:
        out.append(t)
        t = spec.next_after(t)
    return out


def test_names_and_stamps():
    assert S.schedule_id("nightly") == "fusee.schedule/nightly"
    assert S.run_id("nightly", MIDNIGHT) == "nightly@2024-01-01T00:00:00Z"
    assert S.run_id("n", MIDNIGHT + 1.25) == "n@2024-01-01T00:00:01.250Z"
    assert S.wrapper_id("n@x") == "fusee.scheduled/n@x"
    every = S.Spec("s", "job", every=3600.0)
    assert every.next_after(T0) == MIDNIGHT + 3600 and every.next_after(MIDNIGHT + 3600) == MIDNIGHT + 7200


def test_state_of_folds_the_journal_like_the_coordinator():
    """Pending events count at once: a pause delivered and not yet taken shows as paused."""
    from fusee import records as r

    s = S.new_state(S.Spec("s", "job", every=60.0), T0)
    journal = [
        (1, r.Signal(1, S.EVENT, None, {"kind": "trigger", "at": T0})),
        (2, r.Waited(1, 0, "signal", {"kind": "trigger", "at": T0})),
        (3, r.Signal(1, S.EVENT, "d", {"kind": "pause"})),
        (4, r.Signal(1, S.EVENT, "d", {"kind": "resume", "at": T0})),  # a resend: ignored
    ]
    got = S.state_of(s.plain(), journal)
    assert got.paused and got.running == (S.run_id("s", T0),) and got.fired == 1


# -- on an engine ----------------------------------------------------------------------------------


@pytest.fixture
def eng():
    with TestEngine([job, hold], shards=2, clock=VirtualClock(T0)) as e:
        yield e


def fired(n: int = 1) -> list:
    """The next ``n`` fired runs' reports, ``(id, input)``, in arrival order."""
    out = []
    for _ in range(n):
        kind, id, inp = next_probe()
        assert kind == "ran"
        out.append((id, inp))
    return out


def advance(eng, t: float) -> None:
    """Move virtual time to ``t`` once every active schedule waits for its next due time: a coordinator
    arms its wait relative to the clock, so the clock must not jump while one does."""
    wait_until(
        lambda: all(d["next"] is None or d["next"] in eng.clock.waiting() for d in eng.schedules()),
        timeout=10,
        what="every schedule's wait armed",
    )
    eng.advance_to(t)


def idle(h) -> None:
    """Wait until the schedule knows none of its runs still runs (their ends told)."""
    wait_until(lambda: h.describe()["running"] == [], timeout=10, what="the runs' ends told")


def settled(h, now: float) -> dict:
    """The schedule's listing once it has handled every due time up to ``now``."""
    wait_until(lambda: h.describe()["next"] > now, timeout=10, what="the schedule caught up")
    return h.describe()


def test_every_fires_at_each_due_time_with_deterministic_ids(eng):
    h = eng.schedule("tick", job, every="1m", input={"n": 1})
    assert isinstance(h, fusee.Schedule) and h.id == "fusee.schedule/tick"
    d = h.describe()
    assert d["next"] == MIDNIGHT + 60 and d["state"] == "active" and d["overlap"] == "skip"
    for i in (1, 2, 3):
        advance(eng, MIDNIGHT + 60 * i)
        id = S.run_id("tick", MIDNIGHT + 60 * i)
        assert fired() == [(id, {"n": 1})]
        assert h.result(id, timeout=10) == [id, {"n": 1}]
        assert eng.describe(id)["type"] == "job"
        idle(h)  # overlap skip: the next due time starts a run only once this one's end is told
    d = settled(h, MIDNIGHT + 180)
    assert d["fired"] == 3 and d["next"] == MIDNIGHT + 240
    assert [x["id"] for x in d["recent"]] == [S.run_id("tick", MIDNIGHT + 60 * i) for i in (1, 2, 3)]


def test_cron_fires_at_matching_times_in_utc_and_in_a_time_zone(eng):
    h = eng.schedule("weekday", job, cron="*/15 9 * * mon-fri", input=2)
    ny = eng.schedule("ny", job, cron="0 9 * * *", timezone="America/New_York", input=3)
    assert h.describe()["next"] == MIDNIGHT + 9 * 3600
    assert ny.describe()["next"] == MIDNIGHT + 14 * 3600 and ny.describe()["timezone"] == "America/New_York"
    advance(eng, MIDNIGHT + 9 * 3600)
    assert fired() == [("weekday@2024-01-01T09:00:00Z", 2)]
    idle(h)
    advance(eng, MIDNIGHT + 9 * 3600 + 15 * 60)
    assert fired() == [("weekday@2024-01-01T09:15:00Z", 2)]
    idle(h)
    h.pause()  # 09:30 and 09:45 pass while paused: not caught up, so only ny fires at 14:00
    advance(eng, MIDNIGHT + 14 * 3600)
    assert fired() == [("ny@2024-01-01T14:00:00Z", 3)]
    h.resume()
    assert settled(h, eng.now())["next"] == MIDNIGHT + 86400 + 9 * 3600  # Tuesday 09:00


def test_bad_input_raises_a_typed_error_and_records_nothing(eng):
    bad = [
        (fusee.UnknownWorkflow, dict(workflow="nope", every="1m")),
        (ValueError, dict(cron="* * * * *", every="1m")),
        (ValueError, dict()),
        (ValueError, dict(every="1m", overlap="buffer_all")),
        (fusee.CronError, dict(cron="61 * * * *")),
        (fusee.CronError, dict(cron="* * * *")),
        (fusee.CronError, dict(cron="0 9 * * *", timezone="Mars/Olympus")),
        (ValueError, dict(every="1m", timezone="Europe/Paris")),
        (ValueError, dict(every="500ms")),
        (ValueError, dict(every="soon")),
        (TypeError, dict(every=[1])),
        (ValueError, dict(every="1m", catchup_window="-1s")),
        (ValueError, dict(every="1m", catchup_window="5s")),
        (ValueError, dict(name="", every="1m")),
        (ValueError, dict(workflow="fusee.delay", every="1m")),
        (fusee.NotSerializable, dict(every="1m", input={"f": object()})),
    ]
    for error, kw in bad:
        kw = {"name": "s", "workflow": job, **kw}
        with pytest.raises(error):
            eng.schedule(kw.pop("name"), kw.pop("workflow"), **kw)
    assert eng.list() == [] and eng.schedules() == []
    assert issubclass(fusee.CronError, ValueError)
    eng.schedule("s", job, every="1m")
    with pytest.raises(fusee.AlreadyExists):
        eng.schedule("s", job, every="2m")
    assert [d["every"] for d in eng.schedules()] == [60.0]
    with pytest.raises(fusee.NotFound):
        eng.schedule_handle("other")


def test_pause_resume_trigger_and_delete(eng):
    h = eng.schedule("p", job, every="1m")
    h.pause()
    d = h.describe()
    assert d["state"] == "paused" and d["next"] is None  # at once: the pause is durable
    eng.advance_to(MIDNIGHT + 150)  # two due times pass while paused
    id = h.trigger()  # fires while paused: the first report is the trigger's, nothing scheduled fired
    assert id == S.run_id("p", MIDNIGHT + 150)
    assert fired() == [(id, None)]
    assert h.result(id, timeout=10) == [id, None]
    idle(h)
    h.resume()  # not caught up: the next due time is the first after the resume
    assert settled(h, MIDNIGHT + 150)["next"] == MIDNIGHT + 180
    advance(eng, MIDNIGHT + 180)
    assert fired() == [(S.run_id("p", MIDNIGHT + 180), None)]
    d = settled(h, MIDNIGHT + 180)
    assert d["fired"] == 2 and d["state"] == "active"
    h.delete()
    assert eng.schedules() == []
    for call in (h.describe, h.pause, h.resume, h.trigger, h.delete):
        with pytest.raises(fusee.NotFound):
            call()
    with pytest.raises(fusee.NotFound):
        eng.schedule_handle("p")
    assert eng.describe(S.run_id("p", MIDNIGHT + 180))["status"] == "completed"  # its runs stay
    eng.advance_to(MIDNIGHT + 300)  # no schedule waits
    again = eng.schedule("p", job, every="1m", input="v2")  # the name is free again
    assert again.describe()["fired"] == 0
    advance(eng, MIDNIGHT + 360)
    assert fired() == [(S.run_id("p", MIDNIGHT + 360), "v2")]
    assert no_probe_pending()


def test_overlap_skip_skips_while_the_previous_run_runs(eng):
    h = eng.schedule("k", hold, every="1m", overlap="skip")
    first = S.run_id("k", MIDNIGHT + 60)
    advance(eng, MIDNIGHT + 60)
    assert fired() == [(first, None)]
    advance(eng, MIDNIGHT + 120)
    d = settled(h, MIDNIGHT + 120)
    assert d["skipped"] == 1 and d["running"] == [first]
    assert h.trigger() and True  # a trigger goes through the policy too: skipped
    wait_until(lambda: h.describe()["skipped"] == 2, timeout=10)
    eng.signal(first, "go")
    assert h.result(first, timeout=10) == first
    wait_until(lambda: h.describe()["running"] == [], timeout=10, what="the end told")
    advance(eng, MIDNIGHT + 180)
    assert fired() == [(S.run_id("k", MIDNIGHT + 180), None)]


def test_overlap_buffer_one_starts_one_more_when_the_previous_ends(eng):
    h = eng.schedule("b", hold, every="1m", overlap="buffer_one")
    first, second = S.run_id("b", MIDNIGHT + 60), S.run_id("b", MIDNIGHT + 120)
    advance(eng, MIDNIGHT + 60)
    assert fired() == [(first, None)]
    advance(eng, MIDNIGHT + 120)
    assert settled(h, MIDNIGHT + 120)["buffered"] == MIDNIGHT + 120
    advance(eng, MIDNIGHT + 180)
    d = settled(h, MIDNIGHT + 180)
    assert d["buffered"] == MIDNIGHT + 120 and d["skipped"] == 1  # one kept, the rest skipped
    eng.signal(first, "go")  # no time passes: the buffered one starts as the first ends
    assert fired() == [(second, None)]
    d = h.describe()
    assert d["running"] == [second] and d["buffered"] is None
    eng.signal(second, "go")
    assert h.result(second, timeout=10) == second


def test_overlap_allow_starts_regardless(eng):
    h = eng.schedule("a", hold, every="1m", overlap="allow")
    advance(eng, MIDNIGHT + 60)
    advance(eng, MIDNIGHT + 120)
    ids = [S.run_id("a", MIDNIGHT + 60), S.run_id("a", MIDNIGHT + 120)]
    assert sorted(id for id, _ in fired(2)) == ids
    assert settled(h, MIDNIGHT + 120)["running"] == ids
    for id in ids:
        eng.signal(id, "go")
        assert h.result(id, timeout=10) == id


def test_missed_times_within_the_catch_up_window_are_taken(eng):
    """The engine was away 10 minutes: with allow, the due times of the last 3 minutes each start a run
    (older ones are missed); with skip (and the default window), one run starts for the backlog."""
    a = eng.schedule("win", job, every="1m", overlap="allow", catchup_window="3m")
    s = eng.schedule("all", job, every="1m")
    advance(eng, MIDNIGHT + 600 + 10)
    got = sorted(id for id, _ in fired(4))
    assert got == sorted([S.run_id("all", MIDNIGHT + 60)] + [S.run_id("win", MIDNIGHT + 60 * m) for m in (8, 9, 10)])
    assert settled(a, MIDNIGHT + 610)["fired"] == 3
    d = settled(s, MIDNIGHT + 610)
    assert d["fired"] == 1 and d["skipped"] == 9 and d["next"] == MIDNIGHT + 660


def test_listing_shows_every_schedule_with_its_next_fire_time(eng):
    eng.schedule("b-every", job, every="1h", overlap="allow")
    eng.schedule("a-cron", job, cron="0 12 * * *", input=[1, 2])
    eng.schedule_handle("b-every").pause()
    got = eng.schedules()
    assert [d["name"] for d in got] == ["a-cron", "b-every"]
    assert got[0]["next"] == MIDNIGHT + 12 * 3600 and got[0]["state"] == "active" and got[0]["cron"] == "0 12 * * *"
    assert got[0]["input"] == [1, 2] and got[0]["workflow"] == "job"
    assert got[1]["next"] is None and got[1]["state"] == "paused" and got[1]["every"] == 3600.0
    assert got[1]["overlap"] == "allow" and got[1]["catchup_window"] == S.DEFAULT_CATCHUP


def test_a_parked_schedule_is_listed_and_wakes_to_fire():
    with TestEngine([job], shards=2, clock=VirtualClock(T0), park_after=5.0) as eng:
        h = eng.schedule("park", job, every="1h")
        eng.advance_to(T0 + 10)
        eng.park_now(True)
        wait_until(lambda: eng.metrics()["runs_parked"] >= 1, timeout=10, what="the schedule parked")
        assert h.describe()["next"] == MIDNIGHT + 3600  # read from its journal while parked
        eng.advance_to(MIDNIGHT + 3600)  # it is parked: its shard wakes it
        eng.park_now(False)  # the shards' parking ticks are armed in real time
        assert fired() == [(S.run_id("park", MIDNIGHT + 3600), None)]
        h.pause()  # a parked (or loaded) schedule takes its events
        assert h.describe()["state"] == "paused"


def test_a_schedule_continues_as_new_and_keeps_its_state(eng, monkeypatch):
    monkeypatch.setattr(S, "EVENTS_PER_RUN", 3)
    h = eng.schedule("c", job, every="1m", overlap="allow")
    for i in range(1, 6):
        advance(eng, MIDNIGHT + 60 * i)
        assert fired() == [(S.run_id("c", MIDNIGHT + 60 * i), None)]
    d = settled(h, MIDNIGHT + 300)
    assert d["fired"] == 5 and [x["id"] for x in d["recent"]][-1] == S.run_id("c", MIDNIGHT + 300)
    runs = [rec for _, rec in eng.describe(h.id)["journal"]]
    assert type(runs[0]).__name__ == "Start" and runs[0].input["fired"] >= 3  # a later run, started with the state


@pytest.mark.parametrize("how", ["shutdown", "crash"])
def test_a_schedule_goes_on_after_a_reopen(eng, how):
    h = eng.schedule("r", job, every="1m", overlap="allow")
    advance(eng, MIDNIGHT + 60)
    assert fired() == [(S.run_id("r", MIDNIGHT + 60), None)]
    settled(h, MIDNIGHT + 60)
    idle(h)  # its end told: nothing moves while the state is compared across the reopen
    h.pause()
    h.resume()
    before = h.describe()
    if how == "crash":
        eng.crash()
    eng.reopen()
    h = eng.schedule_handle("r")
    assert h.describe() == before
    advance(eng, MIDNIGHT + 180)  # two due times passed: both caught up (allow)
    assert sorted(id for id, _ in fired(2)) == [S.run_id("r", MIDNIGHT + 120), S.run_id("r", MIDNIGHT + 180)]
    assert settled(h, MIDNIGHT + 180)["fired"] == 3
