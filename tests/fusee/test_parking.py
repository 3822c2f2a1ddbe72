"""Parking, checkpoints and retention (issue 7): the pure decisions' laws, then the engine."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
import fusee
from fusee import parking as pk
from fusee import records as r
from fusee import store
from fusee.engine import Clock, shard_of
from fusee.errors import Cancelled, Corrupt, NotFound, Terminated
from fusee.testing import VirtualClock, parked_memory, wait_until

from ._kit import COUNTS, SEG, count


class Manual(Clock):
    """Time moves only when the test sets ``t``; a paused run wakes only for a message (or a parking)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def pause(self, at: float | None) -> None:
        e.receive(lambda m: m if m == "fusee_wake" else e.NOMATCH)


@fusee.workflow("park.waiter")
def waiter(ctx, input):
    a = ctx.step("before", lambda: count("before"))
    ctx.on_query("a", lambda _: a)
    got = ctx.wait_for("go")
    return [a, got]


@fusee.workflow("park.sleeper")
def sleeper(ctx, at):
    ctx.step("before", lambda: count("sleeper"))
    ctx.sleep_until("instant", at)
    return "woke"


@fusee.workflow("park.quick")
def quick(ctx, input):
    return ctx.step("s", lambda: input * 2)


WFS = [waiter, sleeper, quick]


def parked(engine) -> int:
    return engine.metrics()["runs_parked"]


# -- laws of the pure decisions ---------------------------------------------------------------

waitings = st.lists(
    st.tuples(st.floats(0, 1000, allow_nan=False), st.integers(0, 10_000)), max_size=30
).map(lambda xs: [pk.Waiting(i, s, b) for i, (s, b) in enumerate(xs)])


@settings(max_examples=150, deadline=None)
@given(
    waitings,
    st.floats(0, 2000, allow_nan=False),
    st.one_of(st.none(), st.floats(0, 500, allow_nan=False)),
    st.one_of(st.none(), st.integers(0, 100_000)),
    st.integers(0, 200_000),
)
def test_to_park_laws(ws, now, park_after, budget, extra):
    loaded = sum(w.nbytes for w in ws) + extra
    out = pk.to_park(now, park_after, budget, loaded, ws)
    by = {w.key: w for w in ws}
    assert len(out) == len(set(out)) and set(out) <= set(by)
    if park_after is not None:  # every run over park_after is parked
        assert {w.key for w in ws if w.since + park_after <= now} <= set(out)
    if budget is None and park_after is None:
        assert out == []
    left = [w for w in ws if w.key not in set(out)]
    freed = sum(by[k].nbytes for k in out)
    if budget is not None:
        if left:  # the budget holds, or nothing waiting is left loaded
            assert loaded - freed <= budget or not left
        for_budget = [by[k] for k in out if park_after is None or by[k].since + park_after > now]
        for w in left:  # a run left loaded waited no longer than any parked for the budget
            assert all(w.since >= p.since for p in for_budget)
    else:
        assert all(park_after is not None and by[k].since + park_after <= now for k in out)


@given(waitings, st.one_of(st.none(), st.floats(0, 100, allow_nan=False)))
def test_next_check_is_the_earliest_due(ws, park_after):
    got = pk.next_check(park_after, ws)
    if park_after is None or not ws:
        assert got is None
    else:
        assert got == min(w.since for w in ws) + park_after
        assert pk.to_park(got, park_after, None, 0, ws) != []


@given(st.one_of(st.none(), st.floats(0, 1e6)), st.floats(0, 1e6), st.one_of(st.none(), st.floats(0, 1e6)))
def test_expired_only_when_finished_and_retention_ended(finished, now, retention):
    got = pk.expired(finished, now, retention)
    assert got == (finished is not None and retention is not None and now - finished >= retention)


records = st.lists(st.binary(max_size=40), max_size=20).map(
    lambda bodies: [(i * 3 + 1, b) for i, b in enumerate(bodies)]
)


@settings(max_examples=100, deadline=None)
@given(records, st.integers(0, 2**40), st.data())
def test_checkpoint_roundtrips_and_any_damage_is_refused(recs, next_run, data):
    lsn = (recs[-1][0] if recs else 0) + data.draw(st.integers(0, 5))
    cp = store.Checkpoint(2, lsn, next_run, recs)
    raw = store.encode(cp)
    assert store.decode(raw) == cp
    i = data.draw(st.integers(0, len(raw) - 1))
    bad = bytearray(raw)
    bad[i] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(ValueError):
        store.decode(bytes(bad))
    with pytest.raises(ValueError):
        store.decode(raw[: data.draw(st.integers(0, len(raw) - 1))])


# -- parking in the engine ---------------------------------------------------------------------


def test_a_waiting_run_is_parked_and_a_signal_loads_it_again():
    with fusee.Engine.open(None, WFS, shards=2, park_after=0) as eng:
        eng.start(waiter, "w", None)
        wait_until(lambda: parked(eng) == 1, 10, "parked")
        m = eng.metrics()
        assert m["runs_loaded"] == 0 and m["parks"] == 1
        assert eng.describe("w")["parked"] is True
        assert eng.query("w", "a") == 1  # a parked run answers from the handlers it registered
        assert eng.signal("w", "go", "hi")
        assert eng.result("w", timeout=10) == [1, "hi"]
        assert COUNTS["before"] == 1  # the reload replayed the step: its body did not run again
        assert eng.metrics()["loads"] >= 1


def test_a_parked_runs_timer_still_fires():
    clock = Manual()
    with fusee.Engine.open(None, WFS, shards=1, park_after=0, clock=clock) as eng:
        eng.start(sleeper, "s", clock.t + 60)
        wait_until(lambda: parked(eng) == 1, 10, "parked")
        clock.t += 60
        eng._park_now(False)  # the tick the server's timer sends, now rather than in 60 s real time
        assert eng.result("s", timeout=10) == "woke"
        assert COUNTS["sleeper"] == 1


def test_the_server_timer_wakes_a_parked_sleeper_in_real_time():
    import time

    with fusee.Engine.open(None, WFS, shards=1, park_after=0) as eng:
        eng.start(sleeper, "s", time.time() + 0.3)
        wait_until(lambda: eng.metrics()["parks"] == 1, 10, "parked")
        assert eng.result("s", timeout=10) == "woke"


def test_cancel_and_terminate_reach_parked_runs():
    with fusee.Engine.open(None, WFS, shards=1, park_after=0) as eng:
        eng.start(waiter, "c", None)
        eng.start(waiter, "t", None)
        wait_until(lambda: parked(eng) == 2, 10, "parked")
        assert eng.cancel("c", "stop")
        with pytest.raises(Cancelled):
            eng.result("c", timeout=10)
        assert eng.terminate("t", "end")
        with pytest.raises(Terminated):
            eng.result("t", timeout=10)
        assert parked(eng) == 0


def test_a_memory_budget_parks_the_longest_waiting_first():
    clock = Manual(1000.0)
    per_run = pk.run_bytes(3)  # Start, Step, Wait
    with fusee.Engine.open(None, WFS, shards=1, park_after=None, memory_budget=int(per_run * 2.5), clock=clock) as eng:
        for i in range(5):
            clock.t = 1000.0 + i
            eng.start(waiter, f"b{i}", None)
            wait_until(lambda: eng.metrics()["runs_waiting"] + parked(eng) == i + 1, 10, "waiting")
        wait_until(lambda: parked(eng) == 3, 10, "three parked")
        assert [eng.describe(f"b{i}")["parked"] for i in range(5)] == [True, True, True, False, False]
        for i in range(5):
            eng.signal(f"b{i}", "go", i)
        assert [eng.result(f"b{i}", timeout=10) for i in range(5)] == [[i + 1, i] for i in range(5)]


class _PauseCountingClock(VirtualClock):
    """A virtual clock that tells how many processes are paused on it: a wait on that is O(1) per look,
    where ``metrics()`` scans every run of every shard (with 20,000 runs, 2 ms polls of it starve the shards)."""

    def paused(self) -> int:
        return len(self._pauses)


@fusee.workflow("park.mass_sleeper")
def mass_sleeper(ctx, at):
    ctx.sleep_until("instant", at)
    return 1


def test_many_runs_sleeping_to_one_instant_are_parked_and_all_finish_after_a_mass_wake():
    """20,000 runs sleeping to one instant are all parked, and all finish after the mass wake.

    What fusee.testing.parked_memory(20_000, trace_memory=False) does, with cheap waits: each wait
    looks at the clock's paused processes first and asks ``metrics()`` only once that count says the
    state may be reached (a run sets ``waiting_since`` before it pauses on the clock); results are
    read from the start handles (no lookup per run)."""
    n = 20_000
    clock = _PauseCountingClock(1_000_000.0)
    with fusee.Engine.open(None, [mass_sleeper], shards=4, park_after=None, clock=clock) as eng:
        at = clock.now() + 3600.0
        runs = [eng.start(mass_sleeper, f"p{i}", at) for i in range(n)]
        wait_until(lambda: clock.paused() == n and eng.metrics()["runs_waiting"] == n, 60, f"{n} runs waiting")
        eng.park_now(True)
        wait_until(lambda: clock.paused() == 0 and parked(eng) == n, 60, f"{n} runs parked")
        m = eng.metrics()
        assert (m["runs_parked"], m["runs_loaded"], m["parks"]) == (n, 0, n)
        clock.advance_to(at)  # the instant comes: every parked run is due at once
        eng.park_now(False)
        finished = sum(1 for run in runs if run.result(timeout=60) == 1)
        assert finished == n
        assert eng.metrics()["runs"]["completed"] == n


def test_a_parked_run_takes_less_memory_than_a_loaded_one():
    """Traced allocations per run: parking frees most of what a waiting run holds (bench/fusee.py reports it)."""
    got = parked_memory(1_000, shards=2)
    assert (got["runs_parked"], got["finished"]) == (1_000, 1_000)
    assert 0 < got["bytes_per_parked_run"] < got["bytes_per_loaded_run"] / 2


# -- checkpoints -------------------------------------------------------------------------------


def _segs(path):
    return sorted(f for d in os.listdir(path) if d.startswith("shard-") for f in os.listdir(os.path.join(path, d)) if f.endswith(".seg"))


def test_shutdown_checkpoints_so_the_next_open_replays_nothing(tmp_path):
    path = str(tmp_path / "j")
    with fusee.Engine.open(path, WFS, shards=2, segment_size=SEG) as eng:
        eng.start(waiter, "w", None)
        assert eng.execute(quick, "q", 21, timeout=10) == 42
        wait_until(lambda: eng.metrics()["runs_waiting"] == 1, 10, "waiting")
    assert _segs(path) == []  # every segment lay wholly before the checkpoints
    for shard in range(2):
        names = sorted(os.listdir(os.path.join(path, f"shard-{shard}")))
        assert names == ["HEAD", *store.NAMES]  # HEAD: no segment yet, the checkpoint holds the log
    with fusee.Engine.open(path, WFS, shards=2, segment_size=SEG) as eng:
        m = eng.metrics()
        assert m["recovered_log_records"] == 0 and m["recovered_checkpoint_records"] > 0
        assert eng.result("q", timeout=10) == 42
        assert eng.signal("w", "go", "again")
        assert eng.result("w", timeout=10) == [1, "again"]
        eng.start(quick, "q2", 1)
    with fusee.Engine.open(path, WFS, shards=2, segment_size=SEG) as eng:  # a second generation
        assert eng.metrics()["recovered_log_records"] == 0
        assert [eng.result(x, timeout=10) for x in ("q", "q2", "w")] == [42, 2, [1, "again"]]
    assert COUNTS["before"] == 1


def test_a_log_after_the_checkpoint_is_replayed_from_there(tmp_path):
    path = str(tmp_path / "j")
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG) as eng:
        eng.start(waiter, "w", None)
        wait_until(lambda: eng.metrics()["runs_waiting"] == 1, 10, "waiting")
    eng = fusee.Engine.open(path, WFS, shards=1, segment_size=SEG, checkpoint_on_shutdown=False)
    eng.signal("w", "go", "x")
    assert eng.result("w", timeout=10) == [1, "x"]
    eng.shutdown()  # no checkpoint: the log now continues after the first one
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG) as eng:
        m = eng.metrics()
        assert m["recovered_log_records"] > 0 and m["recovered_checkpoint_records"] > 0
        assert eng.result("w", timeout=10) == [1, "x"]


def test_a_damaged_checkpoint_copy_falls_back_and_two_are_corrupt(tmp_path):
    path = str(tmp_path / "j")
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG) as eng:
        eng.execute(quick, "q", 5, timeout=10)
    d = os.path.join(path, "shard-0")

    def damage(name):
        p = os.path.join(d, name)
        with open(p, "r+b") as f:
            f.seek(60)
            b = f.read(1)
            f.seek(60)
            f.write(bytes([b[0] ^ 0xFF]))

    damage(store.NAMES[0])
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG, checkpoint_on_shutdown=False) as eng:
        assert eng.result("q", timeout=10) == 10
    damage(store.NAMES[1])
    with pytest.raises(Corrupt):
        fusee.Engine.open(path, WFS, shards=1, segment_size=SEG)


# -- retention ---------------------------------------------------------------------------------


def test_retention_forgets_finished_runs(tmp_path):
    clock = Manual(5000.0)
    path = str(tmp_path / "j")
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG, retention=10, clock=clock) as eng:
        assert eng.execute(quick, "old", 1, timeout=10) == 2
        clock.t += 5
        assert eng.result("old", timeout=10) == 2
        assert eng.execute(quick, "new", 2, timeout=10) == 4
        clock.t += 6
        with pytest.raises(NotFound):
            eng.result("old")
        assert eng.result("new", timeout=10) == 4
    clock.t += 10
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG, retention=10, clock=clock) as eng:
        with pytest.raises(NotFound):
            eng.result("new")
    with fusee.Engine.open(path, WFS, shards=1, segment_size=SEG, clock=clock) as eng:
        with pytest.raises(NotFound):  # the checkpoint no longer holds it
            eng.result("old")


# -- a parent parked while its children run ----------------------------------------------------


@fusee.workflow("park.kid")
def kid(ctx, n):
    got = ctx.wait_for("go")
    return [n, got]


@fusee.workflow("park.parent")
def parent(ctx, ids):
    for i, id in enumerate(ids):  # every child runs at once
        ctx.start_child(kid, id, i)
    return [ctx.child(kid, id, i) for i, id in enumerate(ids)]  # attach to each and wait for its end


def _elsewhere(n: int, not_shard: int, shards: int) -> list[str]:
    """``n`` workflow IDs on shards other than ``not_shard``, spread over them."""
    others = [s for s in range(shards) if s != not_shard]
    out: list[str] = []
    i = 0
    while len(out) < n:
        id = f"kid-{i}"
        if shard_of(id, shards) == others[len(out) % len(others)]:
            out.append(id)
        i += 1
    return out


def _parent_parked(eng, id: str) -> bool:
    return eng.describe(id)["parked"] is True


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_a_parent_parked_while_its_children_run_gets_all_their_results(tmp_path, where):
    path = None if where == "memory" else str(tmp_path / "j")
    ids = _elsewhere(4, shard_of("pp", 4), 4)
    assert len({shard_of(i, 4) for i in ids}) > 1  # children on several other shards
    wfs = [kid, parent]
    eng = fusee.Engine.open(path, wfs, shards=4, segment_size=SEG, park_after=0)
    try:
        run = eng.start(parent, "pp", ids)
        wait_until(lambda: parked(eng) == 5, 10, "the parent and its four children parked")
        assert _parent_parked(eng, "pp")
        for i, id in enumerate(ids):
            if where == "disk" and i == 2:  # a checkpoint while the parent is parked, then a reopen
                eng.shutdown()
                eng = fusee.Engine.open(path, wfs, shards=4, segment_size=SEG, park_after=0)
                assert eng.metrics()["recovered_log_records"] == 0
                wait_until(lambda: parked(eng) == 5 - i, 10, "parked again after the reopen")
                run = eng.run("pp")
            assert _parent_parked(eng, "pp")
            loads = eng.metrics()["loads"]
            assert eng.signal(id, "go", f"v{i}")
            assert eng.result(id, timeout=10) == [i, f"v{i}"]
            # the child's end loads the parent, which attaches to the next child and parks again
            wait_until(lambda: eng.metrics()["loads"] > loads and (i == len(ids) - 1 or _parent_parked(eng, "pp")), 10, "the parent reloaded")
        assert run.result(timeout=10) == [[i, f"v{i}"] for i in range(len(ids))]
        recs = [rec for _, rec in eng.describe("pp")["journal"]]
        done = [(rec.seq, rec.status) for rec in recs if type(rec) is r.ChildDone]
        assert done == [(i, "started") for i in range(4)] + [(4 + i, "completed") for i in range(4)]
        assert eng.metrics()["runs_parked"] == 0
    finally:
        eng.shutdown()


@fusee.workflow("park.one_child")
def one_child(ctx, id):
    return ctx.child(kid, id, 0)


def test_a_childs_result_delivered_just_before_its_parent_is_parked_is_not_lost(monkeypatch):
    """The ``ChildDone`` wakes the paused parent, and in the same turn of its shard server (the parent's
    process has not run since) a park tick parks it: the parked parent must be loaded again."""
    from fusee.shard import _ShardServer

    real = _ShardServer._child_done

    def child_done_then_park(self, *args):
        real(self, *args)
        self._park_tick(True)

    monkeypatch.setattr(_ShardServer, "_child_done", child_done_then_park)
    [id] = _elsewhere(1, shard_of("p1", 2), 2)
    with fusee.Engine.open(None, [kid, one_child], shards=2, park_after=None) as eng:
        run = eng.start(one_child, "p1", id)
        wait_until(lambda: eng.metrics()["runs_waiting"] == 2, 10, "the parent and its child waiting")
        assert eng.signal(id, "go", "v")
        assert run.result(timeout=10) == [0, "v"]
        m = eng.metrics()
        assert (m["parks"], m["loads"]) == (0, 1)  # its process ended to park; it was loaded again at once


def test_a_lost_child_done_of_an_attached_child_is_recovered(tmp_path, monkeypatch):
    """The parent attached to a child its ``start_child`` began; the child ends but the parent's shard never
    hears (the telling lost: a crash); the reopened parent asks again and must get that child's outcome."""
    from fusee import run_state as fusee_run  # finish() tells parents and closes children from there

    path = str(tmp_path / "j")
    ids = _elsewhere(1, shard_of("pp", 4), 4)
    eng = fusee.Engine.open(path, [kid, parent], shards=4, segment_size=SEG, park_after=None)
    try:
        eng.start(parent, "pp", ids)
        wait_until(lambda: eng.metrics()["runs_waiting"] == 2, 10, "the parent and its child waiting")
        monkeypatch.setattr(fusee_run, "_tell_parents", lambda st: setattr(st, "parents", []))
        assert eng.signal(ids[0], "go", "x")
        assert eng.result(ids[0], timeout=10) == [0, "x"]
    finally:
        eng.shutdown()
    monkeypatch.undo()
    with fusee.Engine.open(path, [kid, parent], shards=4, segment_size=SEG, park_after=None) as eng:
        assert eng.result("pp", timeout=2) == [[0, "x"]]


@fusee.workflow("park.attacher")
def attacher(ctx, id):
    return ctx.child(kid, id, 0)  # attaches: the child was started by nobody (a top-level start)


def test_a_lost_child_done_of_a_foreign_attached_child_is_recovered(tmp_path, monkeypatch):
    """The parent attached to a run it did not start; the run ends, the parent's shard never hears (the
    telling lost: a crash); the reopened parent asks again and takes that run's outcome (it ended after
    the parent asked), and no second run of the ID starts."""
    from fusee import run_state as fusee_run  # finish() tells parents and closes children from there

    path = str(tmp_path / "j")
    [id] = _elsewhere(1, shard_of("att", 4), 4)
    eng = fusee.Engine.open(path, [kid, attacher], shards=4, segment_size=SEG, park_after=None)
    try:
        eng.start(kid, id, 7)
        eng.start(attacher, "att", id)
        wait_until(lambda: eng.metrics()["runs_waiting"] == 2, 10, "the child and the parent waiting")
        monkeypatch.setattr(fusee_run, "_tell_parents", lambda st: setattr(st, "parents", []))
        assert eng.signal(id, "go", "x")
        assert eng.result(id, timeout=10) == [7, "x"]
        run_before = eng.describe(id)["run"]
    finally:
        eng.shutdown()
    monkeypatch.undo()
    with fusee.Engine.open(path, [kid, attacher], shards=4, segment_size=SEG, park_after=None) as eng:
        assert eng.result("att", timeout=10) == [7, "x"]
        assert eng.describe(id)["run"] == run_before  # the same run: none started again
