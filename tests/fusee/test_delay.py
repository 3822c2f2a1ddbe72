"""Delayed starts (issue 7, spec §2.6): ``engine.start(..., delay=d)`` / ``at=``, through the delay run
``fusee.delay/<id>``: the run starts after the delay, ``result(id)`` works before it exists, a cancel
before the time cancels the start, and a delayed start survives a SIGKILL (reopened before the time it
still starts; after it, it runs at once).

Bodies report to the test's process with ensemble messages; no sleep synchronises.  Reopened engines
take a shifted clock (:class:`ShiftClock`) so "before" and "after" the time are exact, not raced.
"""

from __future__ import annotations

import os
import signal as _signal
import subprocess
import sys
import time

import pytest

import ensemble as e
import fusee
from fusee import delay as d
from fusee.engine import Clock
from fusee.workflow import _wake

from .test_concurrency import CHILD, REPO, read_lines_until

from ._kit import next_probe, no_probe_pending, tell  # noqa: E402


class ShiftClock(Clock):
    """Real time plus ``offset`` seconds (changeable); a paused run looks again at least every 10 ms."""

    __slots__ = ("offset",)

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    def pause(self, at: float | None) -> None:
        timeout = None if at is None else max(0.0, min(0.01, at - self.now()))
        e.receive(_wake, timeout=timeout)


@fusee.workflow("later")
def later(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, ctx._st.host.clock.now()))
    return inp


@fusee.workflow("later1", concurrency=1)
def later1(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, 0.0))
    ctx.wait_for("go")
    return inp


# -- pure parts --------------------------------------------------------------------------------


def test_due_at_and_names():
    assert d.delay_id("x") == "fusee.delay/x"
    assert d.due_at(100.0, 5, None) == 105.0
    assert d.due_at(100.0, None, 42) == 42.0
    for bad in ((None, None), (1, 2)):
        with pytest.raises(ValueError):
            d.due_at(0.0, *bad)
    with pytest.raises(TypeError):
        d.due_at(0.0, None, "soon")
    assert d.delay_input("t", "x", 1, 5) == {"type": "t", "id": "x", "input": 1, "at": 5.0}


def test_start_plan_chains_delay_slot_run():
    from fusee import concurrency as c

    assert c.start_plan("t", "x", 1) == ("t", "x", 1)
    wt, wid, winp = c.start_plan("t", "x", 1, limit=2, key="k", at=9.0)
    assert (wt, wid) == ("fusee.delay", "fusee.delay/x")
    assert winp == {"type": "fusee.queued", "id": "x", "input": c.slot_input("t", "x", 1, 2, "k"), "at": 9.0, "target": "fusee.queued/x"}
    assert c.following(wt, winp) == ("t", 1, 9.0)
    assert c.following("fusee.queued", c.slot_input("t", "x", 1, 2)) == ("t", 1, None)


# -- on an engine --------------------------------------------------------------------------------


def test_a_delayed_start_runs_after_the_delay_and_result_follows(opener):
    eng = opener([later])
    t0 = time.time()
    h = eng.start(later, "d1", {"v": 1}, delay=0.05)
    assert h.id == "d1"
    assert eng.result("d1", timeout=10) == {"v": 1}  # asked before the run exists: follows the delay run
    kind, id, ran_at = next_probe()
    assert (kind, id) == ("ran", "d1") and ran_at >= t0 + 0.05
    assert eng.describe("d1")["status"] == "completed" and eng.describe("d1")["type"] == "later"
    assert h.status == "completed" and h.result() == {"v": 1}
    # at=: unix seconds
    at = time.time() + 0.05
    assert eng.execute(later, "d2", 2, at=at, timeout=10) == 2
    kind, id, ran_at = next_probe()
    assert id == "d2" and ran_at >= at


def test_a_waiting_delayed_start_shows_delayed_and_a_cancel_cancels_it(opener):
    eng = opener([later])
    at = time.time() + 3600
    h = eng.start(later, "d3", 3, at=at)
    desc = eng.describe("d3")
    assert desc["status"] == "delayed" and desc["type"] == "later" and desc["input"] == 3
    assert desc["at"] == at and desc["via"] == "fusee.delay/d3"
    assert h.status == "delayed"
    assert [x["id"] for x in eng.list(status="delayed")] == ["d3"]
    with pytest.raises(TimeoutError):
        eng.result("d3", timeout=0.01)  # it waits: not NotFound
    assert eng.cancel("d3", "changed my mind")
    with pytest.raises(fusee.Cancelled):
        eng.result("d3", timeout=10)
    assert eng.describe("d3")["status"] == "cancelled"
    with pytest.raises(fusee.NotFound):
        eng.run("d3")  # the run never existed
    assert no_probe_pending()
    assert not eng.cancel("d3")  # already ended


def test_a_delayed_start_of_a_limited_type_goes_delay_then_slot_then_run(opener):
    eng = opener([later1])
    eng.start(later1, "x0", 0)
    assert next_probe()[:2] == ("ran", "x0")
    eng.start(later1, "x1", 1, delay=0.01)
    # x1 is either still delayed or already queued behind x0; never running
    assert eng.describe("x1")["status"] in ("delayed", "queued")
    eng.signal("x0", "go")
    assert next_probe()[:2] == ("ran", "x1")
    eng.signal("x1", "go")
    assert eng.result("x1", timeout=10) == 1 and eng.result("x0", timeout=10) == 0


# -- a SIGKILL and a reopen --------------------------------------------------------------------


def _child_delays(path: str, id: str, at: float) -> None:
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [sys.executable, CHILD, path, "delay", id, repr(at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        read_lines_until(proc, {f"ack delay {id}"})
    finally:
        proc.send_signal(_signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("reopen", ["before", "after"])
def test_a_delayed_start_survives_a_sigkill(tmp_path, reopen):
    from . import _limit_child as lc

    path = str(tmp_path / "data")
    at = time.time() + 3600
    _child_delays(path, "D1", at)
    lc.REPORT[0] = lambda what, id: tell(what, id)
    clock = ShiftClock(0.0 if reopen == "before" else 7200.0)
    try:
        with fusee.Engine.open(path, workflows=[lc.limited, lc.later], shards=2, clock=clock, **lc.ENGINE_OPTIONS) as eng:
            if reopen == "before":
                desc = eng.describe("D1")
                assert desc["status"] == "delayed" and desc["at"] == at
                assert no_probe_pending()
                clock.offset = 7200.0  # the time comes
            assert eng.result("D1", timeout=10) == {"v": "D1"}
            assert next_probe() == ("ran", "D1")
            assert eng.describe("D1")["status"] == "completed"
    finally:
        lc.REPORT[0] = lc.print_line


@fusee.workflow("stuck")
def stuck(ctx, inp):
    ctx.wait_for("never")
    return inp


def test_a_delayed_start_keeps_its_own_timeout(opener):
    """``timeout=`` is the run's own: it counts from when the run starts, after the delay."""
    eng = opener([stuck])
    eng.start(stuck, "t1", 1, delay=0.01, timeout=0.05)
    with pytest.raises(fusee.TimedOut):
        eng.result("t1", timeout=10)
    assert eng.describe("t1")["status"] == "timed_out"
    assert eng.describe("t1")["type"] == "stuck"


@fusee.workflow("waiting")
def waiting(ctx, inp):
    ctx.step("ran", lambda: tell("ran", ctx.workflow_id, 0.0))
    ctx.wait_for("never")
    return inp


def test_a_cancel_after_the_delayed_run_exists_cancels_the_run(opener):
    eng = opener([waiting])
    eng.start(waiting, "c1", 1, delay=0.01)
    assert next_probe()[:2] == ("ran", "c1")
    assert eng.describe("c1")["type"] == "waiting" and "via" not in eng.describe("c1")
    assert eng.cancel("c1", "enough")
    with pytest.raises(fusee.Cancelled):
        eng.result("c1", timeout=10)
    assert eng.describe("c1")["status"] == "cancelled"
    with pytest.raises(fusee.Failed) as ei:
        eng.result(d.delay_id("c1"), timeout=10)  # the delay run ends with the run it started
    assert "cancelled" in str(ei.value)


def test_a_cancel_in_the_window_before_the_delayed_run_exists_cancels_the_run(opener):
    """cancel(id) lands on the delay run after it asked for the run but before the run exists: the
    delay run passes it on, and the run ends cancelled."""
    from .test_concurrency import hold_child_start

    eng = opener([waiting])
    hold_child_start(eng, "c2")
    eng.start(waiting, "c2", 2, delay=0.01)
    kind, pid = next_probe()
    assert kind == "asking"
    with pytest.raises(fusee.NotFound):
        eng.run("c2")
    assert eng.cancel("c2", "in the window")  # lands on the delay run
    e.send(pid, "proceed")
    with pytest.raises(fusee.Cancelled):
        eng.result("c2", timeout=10)
    desc = eng.describe("c2")
    assert desc["status"] == "cancelled" and desc["type"] == "waiting" and desc["run"] is not None
