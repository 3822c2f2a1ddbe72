"""A cancel lands where the journal says, live as after a reopen (fusee.replay.Machine.next_for).

Each test builds one interleaving of an operation's completion and the run's ``Cancel``
deterministically: a shard server handler is wrapped so that both records are appended in one
handler call, before the run's process (on the same carrier) runs again.  The workflow reports
what its code saw (``seen``); the engine is then reopened (a clean shutdown without checkpoint, so
the run replays from the log, or a crash once the journal is durable) and the replayed code must
see exactly the same, with no DeterminismError, then finish the same way.
"""

from __future__ import annotations

import pytest

import ensemble as e
import fusee
from ensemble import NOMATCH, TIMEOUT
from fusee.shard import _ShardServer
from fusee.testing import TestEngine

from ._kit import tell


def await_probe(tag, timeout=10.0):
    """The next probe ``(tag, value)``: its value."""
    got = e.receive(lambda m: m[1] if type(m) is tuple and len(m) == 2 and m[0] == "probe" and type(m[1]) is tuple
                    and m[1][0] == tag else NOMATCH, timeout=timeout)
    assert got is not TIMEOUT, f"no probe {tag!r}"
    return got[1]


def seen_then_finish(ctx, got):
    """Report what the code saw (every time it runs: live, then replayed), then wait to be told to end."""
    tell(("seen", list(got)))
    got.append(ctx.wait_for("finish"))
    return got


def then_a_step(ctx, got):
    try:
        ctx.step("after", lambda: 1)
        got.append("after ran")
    except fusee.Cancelled as exc:
        got.append(["cancelled at after", exc.reason])


@fusee.workflow("co_kid")
def co_kid(ctx, _):
    tell(("kid waiting", ctx.workflow_id))
    return ctx.wait_for("go")


@fusee.workflow("co_child_parent")
def co_child_parent(ctx, _):
    got = []
    try:
        got.append(["child", ctx.child(co_kid, "co-kid", None)])
    except fusee.Cancelled as exc:
        got.append(["cancelled at child", exc.reason])
    then_a_step(ctx, got)
    return seen_then_finish(ctx, got)


@fusee.workflow("co_start_child_parent")
def co_start_child_parent(ctx, _):
    got = []
    try:
        ctx.start_child(co_kid, "co-skid", None, parent_close="abandon")
        got.append("started")
    except fusee.Cancelled as exc:
        got.append(["cancelled at start_child", exc.reason])
    then_a_step(ctx, got)
    return seen_then_finish(ctx, got)


@fusee.workflow("co_waiter")
def co_waiter(ctx, _):
    got = []
    tell(("waiting", None))
    try:
        got.append(["signal", ctx.wait_for("sig")])
    except fusee.Cancelled as exc:
        got.append(["cancelled at wait", exc.reason])
    got.append(["kept", ctx.wait_for("sig", timeout=0)])  # a signal received but not taken is kept
    return seen_then_finish(ctx, got)


@fusee.workflow("co_sleeper")
def co_sleeper(ctx, _):
    got = []
    tell(("sleeping", None))
    try:
        ctx.sleep("nap", 60)
        got.append("slept")
    except fusee.Cancelled as exc:
        got.append(["cancelled at sleep", exc.reason])
    then_a_step(ctx, got)
    return seen_then_finish(ctx, got)


@fusee.workflow("co_stepper")
def co_stepper(ctx, fails):
    got = []
    try:
        got.append(["step", ctx.step("work", lambda: 0, retry=fusee.Retry(attempts=3, initial=5))])
    except fusee.Cancelled as exc:
        got.append(["cancelled at step", exc.reason])
    then_a_step(ctx, got)
    return seen_then_finish(ctx, got)


WORKFLOWS = [co_kid, co_child_parent, co_start_child_parent, co_waiter, co_sleeper, co_stepper]


@pytest.fixture(params=["shutdown", "crash"])
def reopen(request):
    """How the engine is reopened: a clean shutdown without checkpoint, or a crash once all is durable."""

    def reopen_(te: TestEngine) -> None:
        if request.param == "crash":
            j = te.engine.host.journal
            for s in range(te.shards):
                assert j.wait_durable(s, j.last_lsn(s), timeout=10)
            te.crash()
        te.reopen()

    reopen_.mode = request.param
    return reopen_


@pytest.fixture
def te():
    eng = TestEngine(WORKFLOWS, shards=1, checkpoint_on_shutdown=False)
    yield eng
    eng.close()


def kinds(te, id):
    return [type(rec).__name__ for _, rec in te.describe(id)["journal"]]


def replays_the_same(te, reopen, id, live):
    """Reopen; the replayed code sees what the live code saw, and the run then ends the same way."""
    journal = te.describe(id)["journal"]
    reopen(te)
    assert live == await_probe("seen")
    d = te.describe(id)
    assert "running" == d["status"], d["error"]
    assert journal == d["journal"][: len(journal)]
    te.signal(id, "finish", "end")
    assert live + ["end"] == te.result(id, timeout=10)


# -- a child's end and a cancel -----------------------------------------------------------------


def test_a_child_that_ended_just_before_the_cancel_returns_its_result_and_the_cancel_lands_next(te, reopen, monkeypatch):
    """Child, ChildDone, Cancel, all recorded before the parent's process runs: the child's result, then the
    cancel at the next operation, live and replayed (a fixed cancel-first check raised it at the child live)."""
    real = _ShardServer._child_done

    def child_done_then_cancel(self, id, run, seq, status, payload):
        real(self, id, run, seq, status, payload)
        if id == "co-parent":
            self._cancel(id, "stop")  # in the same handler call: the parent has not run in between

    monkeypatch.setattr(_ShardServer, "_child_done", child_done_then_cancel)
    te.start(co_child_parent, "co-parent")
    await_probe("kid waiting")
    te.signal("co-kid", "go", 5)
    live = await_probe("seen")
    assert [["child", 5], ["cancelled at after", "stop"]] == live
    ks = kinds(te, "co-parent")
    assert ks.index("ChildDone") + 1 == ks.index("Cancel")
    replays_the_same(te, reopen, "co-parent", live)


def test_a_cancel_just_before_the_child_ends_lands_at_the_child(te, reopen, monkeypatch):
    """Child, Cancel, ChildDone, both recorded before the parent's process runs: the cancel lands at the child."""
    real = _ShardServer._child_done

    def cancel_then_child_done(self, id, run, seq, status, payload):
        if id == "co-parent":
            self._cancel(id, "stop")
        real(self, id, run, seq, status, payload)

    monkeypatch.setattr(_ShardServer, "_child_done", cancel_then_child_done)
    te.start(co_child_parent, "co-parent")
    await_probe("kid waiting")
    te.signal("co-kid", "go", 5)
    live = await_probe("seen")
    assert [["cancelled at child", "stop"], "after ran"] == live
    ks = kinds(te, "co-parent")
    assert ks.index("Cancel") + 1 == ks.index("ChildDone")
    replays_the_same(te, reopen, "co-parent", live)


def test_a_cancel_while_a_child_is_being_started_lands_at_start_child(te, reopen, monkeypatch):
    """Child, Cancel (while the child's shard starts it), ChildDone("started"): the cancel lands at
    start_child, live and replayed (it returned live, and the cancel landed at the next operation)."""
    real = _ShardServer._child

    def start_then_cancel(self, rec, parent):
        lsn = real(self, rec, parent)
        if parent["id"] == "co-sparent":
            self._cancel("co-sparent", "stop")
        return lsn

    monkeypatch.setattr(_ShardServer, "_child", start_then_cancel)
    te.start(co_start_child_parent, "co-sparent")
    live = await_probe("seen")
    assert [["cancelled at start_child", "stop"], "after ran"] == live
    ks = kinds(te, "co-sparent")
    assert ks.index("Cancel") + 1 == ks.index("ChildDone")
    replays_the_same(te, reopen, "co-sparent", live)
    te.signal("co-skid", "go", 1)  # abandoned: it ran on
    assert 1 == te.result("co-skid", timeout=10)


# -- a signal or a timer and a cancel -----------------------------------------------------------


def test_a_signal_then_a_cancel_while_waiting_lands_the_cancel_at_the_wait_and_keeps_the_signal(te, reopen, monkeypatch):
    """Wait, Signal, Cancel before the run's process runs: the wait's completion is its Waited, which would
    follow the Cancel, so the cancel lands at the wait (live and replayed) and the signal is kept."""
    real = _ShardServer._signal

    def signal_then_cancel(self, id, name, value, dedup):
        lsn = real(self, id, name, value, dedup)
        if id == "co-waiter" and name == "sig":
            self._cancel(id, "stop")
        return lsn

    monkeypatch.setattr(_ShardServer, "_signal", signal_then_cancel)
    te.start(co_waiter, "co-waiter")
    await_probe("waiting")
    te.signal("co-waiter", "sig", 7)
    live = await_probe("seen")
    assert [["cancelled at wait", "stop"], ["kept", 7]] == live
    replays_the_same(te, reopen, "co-waiter", live)


def test_a_cancel_when_a_timer_is_due_lands_at_the_sleep(te, reopen, monkeypatch):
    """The timer's time comes and a Cancel is recorded before the run's process runs: no Fired is recorded
    after the Cancel, the cancel lands at the sleep, live and replayed."""
    real = _ShardServer._cancel

    def due_then_cancel(self, id, reason):
        if id == "co-sleeper":
            te.advance(120)  # wakes the sleeper: it runs only once this handler is done
        return real(self, id, reason)

    monkeypatch.setattr(_ShardServer, "_cancel", due_then_cancel)
    te.start(co_sleeper, "co-sleeper")
    await_probe("sleeping")
    te.cancel("co-sleeper", "stop")
    live = await_probe("seen")
    assert [["cancelled at sleep", "stop"], "after ran"] == live
    assert "Fired" not in kinds(te, "co-sleeper")
    replays_the_same(te, reopen, "co-sleeper", live)


# -- a step's body or its retries and a cancel -----------------------------------------------------


@pytest.mark.parametrize("fails", [0, 1])
def test_a_cancel_while_a_step_runs_or_waits_to_retry_lands_at_the_step(te, reopen, fails):
    """A Cancel recorded while the body runs (before its Step) or after a failed attempt (before the retry):
    the cancel lands at the step, live and replayed; the Step is recorded and never run again."""
    calls = []

    def body():
        calls.append(1)
        if len(calls) == 1:
            te.engine.cancel("co-stepper", "stop")
            if fails:
                raise RuntimeError("first attempt fails")
        return 9

    te.mock_step(co_stepper, "work", body)
    te.start(co_stepper, "co-stepper", fails)
    live = await_probe("seen")
    assert [["cancelled at step", "stop"], "after ran"] == live
    ks = kinds(te, "co-stepper")
    assert ks.index("Cancel") < ks.index("Attempt" if fails else "Step")
    replays_the_same(te, reopen, "co-stepper", live)
    assert [1] == calls

