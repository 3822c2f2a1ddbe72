"""Concurrency limits (issue 7, spec §2.5): the coordinator's pure transitions (hypothesis laws),
then limited workflow types on real engines: never more than the limit at once, admission in start
order, per-key limits, ``queued`` status, withdrawal by cancel, ``result(id)`` following the slot,
and turns kept across a SIGKILL and reopen (child program ``tests/fusee/_limit_child.py``).

Workflow bodies report their start and end to the test's process with ensemble messages (runs live
on other carriers); the test releases them one at a time with signals.  No sleeps synchronise.
"""

from __future__ import annotations

import os
import selectors
import signal as _signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
import fusee
from ensemble import NOMATCH
from fusee import concurrency as c

# -- the laws of the pure core ---------------------------------------------------------------

IDS = st.sampled_from([f"r{i}" for i in range(8)])
EVENTS = st.lists(
    st.tuples(st.sampled_from(["request", "release", "bogus"]), IDS, st.integers(min_value=1, max_value=4)),
    max_size=60,
)


def run_events(limit: int, events):
    """Fold ``events`` through the coordinator (on_event then admit); yields (state, admitted) per event."""
    t = c.Turns(limit)
    for kind, id, lim in events:
        t, admitted = c.admit(c.on_event(t, {"kind": kind, "id": id, "limit": lim}))
        yield t, admitted


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=4), EVENTS)
def test_never_more_holders_than_the_limit_once_settled(limit, events):
    """After admitting, holders never exceed the limit unless a lowered limit left extra holders
    (which it never evicts), and then nobody is admitted."""
    prev_running = 0
    for t, admitted in run_events(limit, events):
        if admitted:
            assert len(t.running) <= t.limit
        else:
            assert len(t.running) <= max(t.limit, prev_running)
        # admission fills the room: no one waits while there is room
        assert not t.queue or len(t.running) >= t.limit
        assert len(set(t.running)) == len(t.running) and len(set(t.queue)) == len(t.queue)
        assert not set(t.running) & set(t.queue)
        prev_running = len(t.running)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=4), EVENTS)
def test_admission_in_request_order(limit, events):
    """IDs are admitted in the order of their (first, still standing) requests."""
    requested: list[str] = []  # standing requests, in order
    t = c.Turns(limit)
    for kind, id, lim in events:
        before = t
        t = c.on_event(t, {"kind": kind, "id": id, "limit": lim})
        if kind == "request" and id not in before.queue and id not in before.running:
            requested.append(id)
        if kind == "release" and id in requested:
            requested.remove(id)
        t, admitted = c.admit(t)
        waiting = [x for x in requested if x not in before.running]
        assert list(admitted) == waiting[: len(admitted)]
        for x in admitted:
            requested.remove(x)
        assert list(t.queue) == [x for x in requested]


@given(st.integers(min_value=1, max_value=4), st.lists(IDS, min_size=1, max_size=12, unique=True))
def test_release_frees_a_turn(limit, ids):
    """When the queue is not empty, a holder's release admits exactly the next one waiting."""
    t = c.Turns(limit)
    for id in ids:
        t, _ = c.admit(c.on_event(t, c.request(id, limit)))
    holder = t.running[0]
    queued = t.queue
    t2, admitted = c.admit(c.on_event(t, c.release(holder, limit)))
    assert holder not in t2.running
    assert admitted == queued[:1]
    assert len(t2.running) == min(limit, len(ids) - 1)


@given(st.integers(min_value=1, max_value=3), st.lists(IDS, min_size=1, max_size=12, unique=True), st.data())
def test_withdraw_removes_a_queued_request(limit, ids, data):
    """A release of a waiting ID removes it from the queue and admits nobody new."""
    t = c.Turns(limit)
    for id in ids:
        t, _ = c.admit(c.on_event(t, c.request(id, limit)))
    if not t.queue:
        return
    gone = data.draw(st.sampled_from(t.queue))
    t2, admitted = c.admit(c.on_event(t, c.release(gone, limit)))
    assert gone not in t2.queue and gone not in t2.running
    assert admitted == ()
    assert t2.queue == tuple(x for x in t.queue if x != gone)
    assert t2.running == t.running


@given(st.integers(min_value=1, max_value=4), EVENTS)
def test_state_round_trips_through_continue_as_new(limit, events):
    """plain / of_plain round-trip every reachable state, through the codec too."""
    from fusee import codec

    for t, _ in run_events(limit, events):
        assert c.Turns.of_plain(t.plain()) == t
        assert c.Turns.of_plain(codec.decode(codec.encode(t.plain()))) == t


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=3),
    st.lists(st.tuples(st.booleans(), IDS, st.integers(min_value=0, max_value=20)), max_size=40),
)
def test_waiting_ids_are_kept_in_start_order(limit, events):
    """Requests carrying their start time (``order``) wait sorted by it, whatever order they arrive
    in (ties: arrival order); admission takes the earliest started first."""
    t = c.Turns(limit)
    for is_request, id, order in events:
        ev = c.request(id, limit, float(order)) if is_request else c.release(id, limit)
        t, admitted = c.admit(c.on_event(t, ev))
        orders = dict(t.orders)
        assert set(orders) == set(t.queue)
        keys = [orders[q] for q in t.queue]
        assert keys == sorted(keys)
        assert c.Turns.of_plain(t.plain()) == t


@given(EVENTS)
def test_newest_limit_wins(events):
    """The limit after an event is the event's."""
    t = c.Turns(1)
    for kind, id, lim in events:
        t = c.on_event(t, {"kind": kind, "id": id, "limit": lim})
        assert t.limit == lim


def test_a_repeated_request_is_a_no_op_and_junk_only_counts():
    t = c.on_event(c.Turns(1), c.request("a", 1))
    assert c.on_event(t, c.request("a", 1)).queue == ("a",)
    t, adm = c.admit(t)
    assert adm == ("a",) and c.on_event(t, c.request("a", 1)).queue == ()
    for junk in (None, 3, [], {"kind": "request"}, {"kind": "request", "id": 5, "limit": 0}):
        j = c.on_event(t, junk)
        assert (j.queue, j.running, j.limit, j.events) == (t.queue, t.running, t.limit, t.events + 1)


def test_a_lowered_limit_evicts_nobody():
    t = c.Turns(3)
    for id in "abcd":
        t, _ = c.admit(c.on_event(t, c.request(id, 3)))
    t, adm = c.admit(c.on_event(t, c.release("a", 1)))
    assert adm == () and t.running == ("b", "c") and t.queue == ("d",)
    t, adm = c.admit(c.on_event(t, c.release("b", 1)))
    assert adm == () and t.running == ("c",)
    t, adm = c.admit(c.on_event(t, c.release("c", 1)))
    assert adm == ("d",)


def test_names():
    assert c.slot_id("x") == "fusee.queued/x"
    assert c.coordinator_id("sync") == "fusee.concurrency/sync"
    assert c.coordinator_id("sync", "t1") == "fusee.concurrency/sync/t1"
    assert c.slot_input("sync", "x", {"a": 1}, 2, "t") == {"type": "sync", "id": "x", "input": {"a": 1}, "limit": 2, "key": "t"}
    with pytest.raises(ValueError):
        c.slot_input("sync", "x", None, 0)


# -- on an engine ----------------------------------------------------------------------------

from ._kit import SEG, next_probe, no_probe_pending, tell  # noqa: E402


def body(ctx, inp):
    """Report start, wait for "go", report end; return the input's n."""
    n = inp["n"]
    ctx.step("begin", lambda: tell("start", ctx.workflow_id))
    ctx.wait_for("go")
    ctx.step("end", lambda: tell("end", ctx.workflow_id))
    if inp.get("fail"):
        raise ValueError(f"run {n} fails")
    return n


sync2 = fusee.workflow("sync2", concurrency=2)(body)
sync1 = fusee.workflow("sync1", concurrency=1)(body)
tenant1 = fusee.workflow("tenant1", concurrency=1, key=lambda inp: inp["tenant"])(body)


class Tracker:
    """Counts runs at once from start/end probes; asserts the limit on every probe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running: set[str] = set()
        self.started: list[str] = []

    def take(self, kind: str | None = None) -> tuple[str, str]:
        got = next_probe()
        while got[0] not in ("start", "end"):  # other reports (e.g. "durable") are not counted
            got = next_probe()
        k, id = got
        if kind is not None:
            assert k == kind, f"expected a {kind}, got {got}"
        if k == "start":
            self.running.add(id)
            self.started.append(id)
            assert len(self.running) <= self.limit, f"{sorted(self.running)} run at once, limit {self.limit}"
        else:
            self.running.discard(id)
        return got


def test_a_limit_of_2_never_runs_more_than_2_and_admits_in_start_order(opener):
    eng = opener([sync2])
    ids = [f"s{i}" for i in range(7)]
    for i, id in enumerate(ids):
        eng.start(sync2, id, {"n": i})
    tr = Tracker(2)
    tr.take("start"), tr.take("start")
    assert sorted(tr.running) == ["s0", "s1"]
    for id in ids[2:]:
        assert eng.describe(id)["status"] == "queued"
    queued = {d["id"] for d in eng.list(status="queued")}
    assert queued == set(ids[2:])
    assert no_probe_pending()
    # release the oldest holder each time: the next in start order starts
    for i, id in enumerate(ids):
        eng.signal(id, "go")
        while id in tr.running:
            tr.take()
        if i + 2 < len(ids):
            k, got = tr.take("start")
            assert got == ids[i + 2]
    assert tr.started == ids
    assert [eng.result(id) for id in ids] == list(range(7))
    assert eng.describe("s3")["status"] == "completed"


def test_per_key_limits_are_independent(opener):
    eng = opener([tenant1])
    for id, t in [("a1", "A"), ("a2", "A"), ("b1", "B"), ("b2", "B")]:
        eng.start(tenant1, id, {"n": 0, "tenant": t})
    tr = Tracker(2)
    tr.take("start"), tr.take("start")
    assert sorted(tr.running) == ["a1", "b1"]
    assert eng.describe("a2")["status"] == "queued" and eng.describe("b2")["status"] == "queued"
    eng.signal("b1", "go")
    tr.take("end")
    assert tr.take("start") == ("start", "b2")
    assert eng.describe("a2")["status"] == "queued"
    eng.signal("a1", "go")
    tr.take("end")
    assert tr.take("start") == ("start", "a2")
    for id in ("b2", "a2"):
        eng.signal(id, "go")
    assert [eng.result(id) for id in ("a1", "a2", "b1", "b2")] == [0, 0, 0, 0]


def test_cancelling_a_queued_start_withdraws_it_and_result_follows(opener):
    eng = opener([sync1])
    for i in range(3):
        eng.start(sync1, f"q{i}", {"n": i})
    tr = Tracker(1)
    assert tr.take("start") == ("start", "q0")
    assert eng.cancel("q1", "not now")
    with pytest.raises(fusee.Cancelled):
        eng.result("q1", timeout=10)
    assert eng.describe("q1")["status"] == "cancelled"
    eng.signal("q0", "go")
    tr.take("end")
    assert tr.take("start") == ("start", "q2")  # q1 was withdrawn: q2 is next
    eng.signal("q2", "go")
    assert eng.result("q2", timeout=10) == 2
    assert eng.result("q0", timeout=10) == 0


def test_a_failure_gives_the_turn_back_and_result_raises_it(opener):
    eng = opener([sync1])
    eng.start(sync1, "f0", {"n": 0, "fail": True})
    h = eng.start(sync1, "f1", {"n": 1})
    tr = Tracker(1)
    assert tr.take("start") == ("start", "f0")
    assert h.status == "queued"
    eng.signal("f0", "go")
    tr.take("end")
    with pytest.raises(fusee.Failed) as ei:
        eng.result("f0", timeout=10)
    assert ei.value.failure["type"] == "ValueError"
    assert tr.take("start") == ("start", "f1")
    eng.signal("f1", "go")
    assert h.result(timeout=10) == 1  # the handle from start follows the slot
    assert h.status == "completed"


def test_many_concurrent_starts_through_a_limit(tmp_path):
    """A limited type on Engine.open(path): many starts, all finish, never more than the limit."""

    @fusee.workflow("quick4", concurrency=4)
    def quick4(ctx, inp):
        ctx.step("s", lambda: tell("start", ctx.workflow_id))
        ctx.step("t", lambda: tell("end", ctx.workflow_id))
        return inp

    with fusee.Engine.open(str(tmp_path / "d"), workflows=[quick4], shards=4, segment_size=SEG) as eng:
        n = 120
        for i in range(n):
            eng.start(quick4, f"k{i}", i)
        assert [eng.result(f"k{i}", timeout=30) for i in range(n)] == list(range(n))
        tr = Tracker(4)
        for _ in range(2 * n):
            tr.take()
        # admitted in start order: k<i> waits for i-3 ends, each after its own start
        assert sorted(tr.started) == sorted(f"k{i}" for i in range(n))
        for pos, id in enumerate(tr.started):
            assert pos >= int(id[1:]) - 3, f"{id} started at position {pos}"


# -- a SIGKILL and a reopen --------------------------------------------------------------------

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHILD = os.path.join(REPO, "tests", "fusee", "_limit_child.py")


def read_lines_until(proc: subprocess.Popen, want: set[str], deadline: float = 30.0) -> list[str]:
    """Lines of the child's stdout until every line in ``want`` has been seen (selectors, no sleeps)."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    buf, lines, end = b"", [], time.monotonic() + deadline
    try:
        while not want <= set(lines):
            left = end - time.monotonic()
            assert left > 0, f"the child printed {lines}, not {want - set(lines)}; stderr: {proc.stderr.read()!r}"  # type: ignore[union-attr]
            if not sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            assert chunk, f"the child ended: {lines}; stderr: {proc.stderr.read()!r}"  # type: ignore[union-attr]
            buf += chunk
            *done, buf = buf.split(b"\n")
            lines.extend(x.decode() for x in done)
    finally:
        sel.close()
    return lines


def test_a_limit_of_2_keeps_its_turns_across_a_sigkill_and_reopen(tmp_path):
    from . import _limit_child as lc

    path = str(tmp_path / "data")
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [sys.executable, CHILD, path, "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        read_lines_until(proc, {"ack start L4", "durable L0", "durable L1"})
    finally:
        proc.send_signal(_signal.SIGKILL)
        proc.wait()
    lc.REPORT[0] = lambda what, id: tell(what, id)
    try:
        with fusee.Engine.open(path, workflows=[lc.limited], shards=2, **lc.ENGINE_OPTIONS) as eng:
            tr = Tracker(2)
            for id in ("L0", "L1"):
                assert eng.describe(id)["status"] == "running"
            for id in ("L2", "L3", "L4"):
                assert eng.describe(id)["status"] == "queued"
            tr.running = {"L0", "L1"}
            tr.started = []
            for i in range(5):
                eng.signal(f"L{i}", "go")
                while f"L{i}" in tr.running:
                    tr.take()
                if i + 2 < 5:
                    assert tr.take("start") == ("start", f"L{i + 2}")
            assert [eng.result(f"L{i}", timeout=30) for i in range(5)] == list(range(5))
            assert tr.started == ["L2", "L3", "L4"]
    finally:
        lc.REPORT[0] = lc.print_line


def test_the_coordinator_continues_as_new_and_keeps_the_queue(opener, monkeypatch):
    """With a continue-as-new every 3 events, a limit of 2 still admits 12 runs in start order, 2 at most."""
    monkeypatch.setattr(c, "EVENTS_PER_RUN", 3)
    eng = opener([sync2])
    ids = [f"c{i}" for i in range(12)]
    for i, id in enumerate(ids):
        eng.start(sync2, id, {"n": i})
    tr = Tracker(2)
    tr.take("start"), tr.take("start")
    for i, id in enumerate(ids):
        eng.signal(id, "go")
        while id in tr.running:
            tr.take()
        if i + 2 < len(ids):
            assert tr.take("start") == ("start", ids[i + 2])
    assert [eng.result(id, timeout=10) for id in ids] == list(range(12))
    coord = eng.describe(c.coordinator_id("sync2"))
    assert coord["status"] == "running"
    assert len(coord["journal"]) < 40  # a fresh journal: the chain continued as new


# -- a coordinator that ends other than by continuing as new ----------------------------------


def test_slot_phase_and_rebuild_are_pure():
    from fusee import records as r

    cid = c.coordinator_id("t")
    send = lambda kind: r.Send(0, 1, cid, c.EVENT, {"kind": kind, "id": "x", "limit": 1})  # noqa: E731
    admit = r.Signal(0, c.ADMIT, "d", True)
    assert c.slot_phase([], cid) == "waiting"  # its request comes, recorded or not
    assert c.slot_phase([(1, admit)], cid) == "holding"
    assert c.slot_phase([(1, admit), (2, send("release"))], cid) is None
    assert c.slot_phase([(1, send("release"))], cid) is None  # withdrawn
    assert c.slot_phase([(1, send("release")), (2, admit)], cid) is None  # an ADMIT after: not taken
    other = r.Send(0, 1, c.coordinator_id("u"), c.EVENT, {"kind": "release", "id": "x", "limit": 1})
    assert c.slot_phase([(1, other)], cid) == "waiting"
    t = c.rebuild(2, ["h1", "h2", "h1"], [("w1", 5.0), ("w0", 1.0), ("w2", None)])
    assert t.running == ("h1", "h2") and t.queue == ("w0", "w1", "w2") and t.events == 0 and t.limit == 2
    assert c.admit(t) == (t, ())


def turns(eng, wtype="sync2"):
    """The coordinator's state (its query ``"turns"``; ``None`` before its code answers queries)."""
    try:
        return eng.query(c.coordinator_id(wtype), "turns")
    except fusee.Error:
        return None


def wait_turns(eng, wtype, pred, what):
    """Wait until the coordinator's state satisfies ``pred`` (a state only its query shows); return it."""
    from fusee.testing import wait_until

    wait_until(lambda: (lambda t: t is not None and pred(t))(turns(eng, wtype)), timeout=10, what=what)
    return turns(eng, wtype)


def queued_behind(eng, ids, wtype="sync2"):
    """Wait until the coordinator holds every one of ``ids`` in its queue (their requests are in)."""
    return wait_turns(eng, wtype, lambda t: set(ids) <= set(t["queue"]), f"{ids} queued")


def start_all(eng, wf, ids, tr, holders):
    """Start ``ids`` (input ``{"n": i}``): the first ``holders`` one at a time, each once the one before
    runs (the first requests race for the free turns), then the rest, which queue in start order."""
    for i, id in enumerate(ids):
        eng.start(wf, id, {"n": i})
        if i < holders:
            assert tr.take("start") == ("start", id)


def release_in_order(eng, tr, ids, first_waiting):
    """Let each of ``ids`` end in turn; after each, the next of ``ids`` from ``first_waiting`` on starts."""
    for i, id in enumerate(ids):
        eng.signal(id, "go")
        while id in tr.running:
            tr.take()
        if first_waiting + i < len(ids):
            assert tr.take("start") == ("start", ids[first_waiting + i])


def test_a_terminated_coordinator_is_rebuilt_from_its_slots(opener):
    """engine.terminate on the coordinator: a new one starts at once, its holders and queue rebuilt
    from the slots; the waiting slots are all admitted, in start order, never more than 2 at once."""
    eng = opener([sync2])
    ids = [f"t{i}" for i in range(6)]
    tr = Tracker(2)
    start_all(eng, sync2, ids, tr, 2)
    queued_behind(eng, ids[2:])
    cid = c.coordinator_id("sync2")
    old = eng.run(cid).run
    assert eng.terminate(cid, "operator")
    now = eng.describe(cid)
    assert now["status"] == "running" and now["run"] != old
    t = wait_turns(eng, "sync2", lambda t: t["queue"], "the new coordinator rebuilt")
    assert sorted(t["running"]) == ["t0", "t1"] and t["queue"] == ids[2:]
    assert no_probe_pending()
    release_in_order(eng, tr, ids, 2)
    assert tr.started == ids
    assert [eng.result(id, timeout=10) for id in ids] == list(range(6))


def test_a_coordinator_that_ended_unseen_is_restarted_by_the_next_slot(opener):
    """The coordinator ends without the engine restarting it (terminated in its shard): the next slot
    to give a turn back, or a new start, starts a new one rebuilt from the slots; all are admitted
    in start order, never more than 2 at once."""
    eng = opener([sync2])
    ids = [f"u{i}" for i in range(5)]
    tr = Tracker(2)
    start_all(eng, sync2, ids[:4], tr, 2)
    queued_behind(eng, ids[2:4])
    cid = c.coordinator_id("sync2")
    assert eng.host.call(eng.host.shard_of(cid), ("terminate", cid, "behind the engine's back")) is not None
    assert eng.describe(cid)["status"] == "terminated"
    eng.start(sync2, "u4", {"n": 4})  # a new start reaches a live coordinator: queued behind u2, u3
    t = queued_behind(eng, ["u2", "u3", "u4"])
    assert t["queue"] == ["u2", "u3", "u4"] and sorted(t["running"]) == ["u0", "u1"]
    assert no_probe_pending()
    release_in_order(eng, tr, ids, 2)
    assert tr.started == ids
    assert [eng.result(id, timeout=10) for id in ids] == list(range(5))


def test_a_coordinator_ended_while_slots_wait_is_restarted_by_a_holder(opener):
    """The coordinator dies with slots waiting and no new start: a holder giving its turn back starts
    the new one (rebuilt), which admits the waiting slots in start order."""
    eng = opener([sync1])
    ids = [f"v{i}" for i in range(4)]
    tr = Tracker(1)
    start_all(eng, sync1, ids, tr, 1)
    queued_behind(eng, ids[1:], "sync1")
    cid = c.coordinator_id("sync1")
    eng.host.call(eng.host.shard_of(cid), ("terminate", cid, "gone"))
    release_in_order(eng, tr, ids, 1)
    assert tr.started == ids
    assert eng.describe(cid)["status"] == "running"
    assert [eng.result(id, timeout=10) for id in ids] == list(range(4))


def test_a_coordinator_is_not_cancelled(opener):
    """A cancel of the coordinator is ignored: its queue would be lost."""
    eng = opener([sync1])
    tr = Tracker(1)
    start_all(eng, sync1, ["w0", "w1", "w2"], tr, 1)
    queued_behind(eng, ["w1", "w2"], "sync1")
    cid = c.coordinator_id("sync1")
    run = eng.run(cid).run
    assert eng.cancel(cid, "no")
    release_in_order(eng, tr, ["w0", "w1", "w2"], 1)
    assert eng.run(cid).run == run and eng.describe(cid)["status"] == "running"


# -- reusing a finished ID ----------------------------------------------------------------------


@fusee.workflow("quick1", concurrency=1)
def quick1(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, inp))
    return inp


def test_a_finished_id_of_a_limited_type_runs_again_with_start_new(opener):
    eng = opener([quick1])
    assert eng.execute(quick1, "r", 1, timeout=10) == 1
    assert next_probe() == ("ran", "r", 1)
    with pytest.raises(fusee.AlreadyExists):
        eng.start(quick1, "r", 2)
    h = eng.start(quick1, "r", 2, id_policy=fusee.IdPolicy("fail", "start_new"))
    assert eng.result("r", timeout=10) == 2 and h.result(timeout=10) == 2
    assert next_probe() == ("ran", "r", 2)  # it ran again: not the first run's outcome
    d = eng.describe("r")
    assert d["status"] == "completed" and d["input"] == 2 and d["result"] == 2
    # and once more, delayed
    assert eng.execute(quick1, "r", 3, id_policy=fusee.IdPolicy("fail", "start_new"), delay=0.01, timeout=10) == 3
    assert next_probe() == ("ran", "r", 3)


# -- a cancel that lands on the slot once its run is being started --------------------------------


@fusee.workflow("careful1", concurrency=1)
def careful1(ctx, inp):
    """Report its start; cancelled, report it and end only once told "finish"."""
    ctx.step("begin", lambda: tell("start", ctx.workflow_id))
    try:
        ctx.wait_for("go")
    except fusee.Cancelled:
        ctx.step("cancelled", lambda: tell("cancelled", ctx.workflow_id))
        ctx.wait_for("finish")
        ctx.step("end", lambda: tell("end", ctx.workflow_id))
        raise
    ctx.step("end", lambda: tell("end", ctx.workflow_id))
    return inp["n"]


def test_a_cancel_of_an_admitted_slot_goes_to_its_run_and_the_turn_waits_for_its_end(opener):
    """What cancel(id) does when it lands on the slot (before the run exists): the slot passes the
    cancel on to its run and keeps the turn until that run has ended."""
    eng = opener([careful1])
    tr = Tracker(1)
    start_all(eng, careful1, ["k0", "k1"], tr, 1)
    queued_behind(eng, ["k1"], "careful1")
    assert eng.cancel(c.slot_id("k0"), "stop")
    assert next_probe() == ("cancelled", "k0")  # the run itself got the cancel
    cid = c.coordinator_id("careful1")
    assert c.slot_phase(eng.describe(c.slot_id("k0"))["journal"], cid) == "holding"  # no release sent
    assert turns(eng, "careful1") == {**turns(eng, "careful1"), "running": ["k0"], "queue": ["k1"]}
    assert eng.describe("k1")["status"] == "queued" and eng.describe("k0")["status"] == "running"
    eng.signal("k0", "finish")
    assert tr.take("end") == ("end", "k0")
    assert tr.take("start") == ("start", "k1")  # the turn went back only once k0 ended
    with pytest.raises(fusee.Cancelled):
        eng.result("k0", timeout=10)
    assert eng.describe("k0")["status"] == "cancelled"
    eng.signal("k1", "go")
    assert eng.result("k1", timeout=10) == 1


def hold_child_start(eng, id):
    """Make the first start of child run ``id`` wait, after its ``Child`` is recorded, for ``"proceed"``
    (the process starting it reports ``("asking", pid)`` first): the window before the run exists."""
    orig = eng.host.call
    armed = [True]

    def _call(shard, request, **kw):
        if armed[0] and request[0] == "child" and request[1].id == id:
            armed[0] = False
            tell("asking", e.self())
            assert e.receive(lambda m: m if m == "proceed" else NOMATCH, timeout=10) == "proceed"
        return orig(shard, request, **kw)

    eng.host.call = _call


def test_cancel_in_the_window_before_the_run_exists_cancels_the_run(opener):
    eng = opener([sync1])
    hold_child_start(eng, "z0")
    eng.start(sync1, "z0", {"n": 0})
    kind, pid = next_probe()
    assert kind == "asking"
    eng.start(sync1, "z1", {"n": 1})
    queued_behind(eng, ["z1"], "sync1")
    with pytest.raises(fusee.NotFound):
        eng.run("z0")  # admitted, the run not started yet
    assert eng.cancel("z0", "too late?")  # lands on the slot
    e.send(pid, "proceed")
    with pytest.raises(fusee.Cancelled):
        eng.result("z0", timeout=10)
    assert eng.describe("z0")["status"] == "cancelled" and eng.describe("z0")["type"] == "sync1"
    got = next_probe()
    if got == ("start", "z0"):  # z0 may have begun before the cancel reached it (cancelled, it reports no end)
        got = next_probe()
    assert got == ("start", "z1")
    assert eng.describe("z1")["started"] >= eng.describe("z0")["finished"]  # the turn went back once z0 ended
    eng.signal("z1", "go")
    assert eng.result("z1", timeout=10) == 1
