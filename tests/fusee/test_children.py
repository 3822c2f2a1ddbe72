"""fusee composition (issue 7): child workflows, signals between runs, continue-as-new, run timeouts."""

from __future__ import annotations

import pytest

import fusee
from fusee import records as r
from fusee.testing import wait_until

from ._kit import SEG, await_probe, tell


@pytest.fixture(params=["memory", "disk"])
def opener(request, tmp_path):
    """As conftest's ``opener``, with 3 shards by default (children on other shards than their parent)."""
    opened = []
    path = None if request.param == "memory" else str(tmp_path / "data")

    def open_(workflows, shards=3, **opts):
        eng = fusee.Engine.open(path, workflows=workflows, shards=shards, segment_size=SEG, **opts)
        opened.append(eng)
        return eng

    yield open_
    for eng in opened:
        eng.shutdown()


@fusee.workflow("double")
def double(ctx, n):
    return ctx.step("x2", lambda: n * 2)


@fusee.workflow("boom")
def boom(ctx, _):
    ctx.step("fail", lambda: 1 / 0)


@fusee.workflow("waiter")
def waiter(ctx, _):
    tell("waiting")
    return ctx.wait_for("go")


@fusee.workflow("parent")
def parent(ctx, n):
    a = ctx.child(double, f"c-{ctx.workflow_id}-a", n)
    b = ctx.child("double", f"c-{ctx.workflow_id}-b", a)
    return [a, b]


@fusee.workflow("parent_of_boom")
def parent_of_boom(ctx, _):
    try:
        ctx.child(boom, "c-boom", None)
    except fusee.ChildFailed as exc:
        return [exc.id, exc.status, exc.failure["type"]]


@fusee.workflow("parent_of_waiter")
def parent_of_waiter(ctx, how):
    ctx.start_child(waiter, "c-wait", None, parent_close=how)
    return "started"


@fusee.workflow("sender")
def sender(ctx, target):
    ctx.signal_workflow(target, "go", "from-sender")
    return "sent"


@fusee.workflow("counter")
def counter(ctx, n):
    if n < 5:
        ctx.continue_as_new(n + 1)
    return n


@fusee.workflow("slow")
def slow(ctx, _):
    ctx.sleep("long", 3600)
    return "woke"


@fusee.workflow("parent_of_slow")
def parent_of_slow(ctx, _):
    try:
        ctx.child(slow, "c-slow", None, timeout=0.05)
    except fusee.ChildFailed as exc:
        return exc.status


def kinds(engine, id):
    return [r.kind_of(rec) for _, rec in engine.describe(id)["journal"]]


def test_child_results_are_recorded_at_fixed_positions(opener):
    eng = opener([double, parent])
    assert [6, 12] == eng.execute(parent, "p", 3, timeout=10)
    assert ["start", "child", "childdone", "child", "childdone", "done"] == kinds(eng, "p")
    start = eng.describe("c-p-a")["journal"][0][1]
    assert (start.parent["id"], start.parent["seq"]) == ("p", 0)


def test_a_failing_child_raises_child_failed_in_the_parent(opener):
    eng = opener([boom, parent_of_boom])
    assert ["c-boom", "failed", "StepFailed"] == eng.execute(parent_of_boom, "pb", timeout=10)


@pytest.mark.parametrize(("how", "status"), [("terminate", "terminated"), ("request_cancel", "cancelled"), ("abandon", "running")])
def test_parent_close_decides_what_the_parents_end_does_to_a_running_child(opener, how, status):
    eng = opener([waiter, parent_of_waiter])
    assert "started" == eng.execute(parent_of_waiter, "pw", how, timeout=10)
    await_probe("waiting")
    if status == "running":
        assert "running" == eng.describe("c-wait")["status"]
        eng.signal("c-wait", "go", 1)
        assert 1 == eng.result("c-wait", timeout=10)
    else:
        with pytest.raises((fusee.Terminated, fusee.Cancelled)):
            eng.result("c-wait", timeout=10)
        assert status == eng.describe("c-wait")["status"]


def test_signal_workflow_is_recorded_and_delivered_once(opener):
    eng = opener([waiter, sender])
    eng.start(waiter, "w")
    await_probe("waiting")
    assert "sent" == eng.execute(sender, "s", "w", timeout=10)
    assert "from-sender" == eng.result("w", timeout=10)
    assert "send" in kinds(eng, "s")
    sig = [rec for _, rec in eng.describe("w")["journal"] if type(rec) is r.Signal]
    assert [s.dedup for s in sig] == ["fusee.send/s/%d/0" % eng.describe("s")["run"]]


def test_continue_as_new_follows_to_the_last_run(opener):
    eng = opener([counter])
    run = eng.start(counter, "k", 0)
    assert 5 == run.result(timeout=10)
    assert 5 == eng.result("k", timeout=10)
    d = eng.describe("k")
    assert (d["status"], d["input"]) == ("completed", 5)
    assert d["journal"][0][1].origin is not None
    assert 5 == eng.execute(counter, "k2", 0, timeout=10)


def test_a_run_past_its_timeout_ends_timed_out(opener):
    eng = opener([slow])
    run = eng.start(slow, "t", timeout=0.05)
    with pytest.raises(fusee.TimedOut):
        run.result(timeout=10)
    assert "timed_out" == eng.describe("t")["status"]
    assert eng.describe("t")["journal"][0][1].deadline is not None


def test_a_timed_out_child_raises_child_failed(opener):
    eng = opener([slow, parent_of_slow])
    assert "timed_out" == eng.execute(parent_of_slow, "ps", timeout=10)


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize(("how", "error"), [("terminate", fusee.Terminated), ("request_cancel", fusee.Cancelled)])
def test_an_open_closes_the_children_of_a_parent_whose_close_was_lost(tmp_path, monkeypatch, how, error, checkpoint):
    """A crash just after a parent's ``Done`` is durable loses the telling of its children: the open does it again."""
    from fusee import run_state as fusee_run  # finish() tells parents and closes children from there

    path = str(tmp_path / "data")
    wfs = [waiter, parent_of_waiter]
    real = fusee_run._close_children
    monkeypatch.setattr(fusee_run, "_close_children", lambda st: None)  # the close is lost
    eng = fusee.Engine.open(path, wfs, shards=3, segment_size=SEG, checkpoint_on_shutdown=checkpoint)
    assert "started" == eng.execute(parent_of_waiter, "pw", how, timeout=10)
    await_probe("waiting")
    assert "running" == eng.describe("c-wait")["status"]
    eng.shutdown()
    monkeypatch.setattr(fusee_run, "_close_children", real)
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:
        assert (eng.metrics()["recovered_log_records"] == 0) is checkpoint
        with pytest.raises(error):
            eng.result("c-wait", timeout=10)
        assert eng.describe("c-wait")["status"] == {"terminate": "terminated", "request_cancel": "cancelled"}[how]
        assert "started" == eng.result("pw", timeout=10)
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:  # again: nothing more happens
        with pytest.raises(error):
            eng.result("c-wait", timeout=10)
        assert eng.describe("c-wait")["run"] == eng.describe("c-wait")["journal"][0][1].run


def test_an_open_leaves_an_abandoned_child_and_a_child_started_since_by_another_alone(tmp_path, monkeypatch):
    from fusee import run_state as fusee_run  # finish() tells parents and closes children from there

    path = str(tmp_path / "data")
    wfs = [waiter, parent_of_waiter]
    monkeypatch.setattr(fusee_run, "_close_children", lambda st: None)
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:
        assert "started" == eng.execute(parent_of_waiter, "pw", "abandon", timeout=10)
        await_probe("waiting")
        assert "started" == eng.execute(parent_of_waiter, "pt", "terminate", timeout=10)  # attached to c-wait
    monkeypatch.undo()
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:
        await_probe("waiting")  # replayed to its wait
        assert "running" == eng.describe("c-wait")["status"]  # "pt" did not start it: not its to close
        eng.signal("c-wait", "go", 7)
        assert 7 == eng.result("c-wait", timeout=10)


@fusee.workflow("relay")
def relay(ctx, seen):
    seen = seen + [ctx.wait_for("go")]
    if len(seen) < 3:
        ctx.continue_as_new(seen)
    return seen


@fusee.workflow("sender_then_wait")
def sender_then_wait(ctx, target):
    ctx.signal_workflow(target, "go", "from-sender")
    return ctx.wait_for("end")  # unfinished: every open delivers its Send again


def _signals(eng, id):
    return [(s.dedup, s.payload) for _, s in eng.describe(id)["journal"] if type(s) is r.Signal]


def test_a_send_delivered_again_after_its_target_continued_as_new_is_dropped(opener):
    from fusee.replay import send_dedup

    eng = opener([relay, sender_then_wait])
    first = eng.start(relay, "t", [])
    eng.start(sender_then_wait, "s", "t")
    wait_until(lambda: eng.describe("t")["run"] != first.run, 10, "the target continued as new")
    key = send_dedup("s", eng.describe("s")["run"], 0)
    second = eng.describe("t")
    assert second["journal"][0][1].origin == {"run": first.run, "dedup": [key]}
    assert eng.signal("t", "go", "again", dedup=key)  # the Send delivered again: accepted, dropped
    assert _signals(eng, "t") == []
    assert eng.signal("t", "go", "x", dedup="mine")
    wait_until(lambda: eng.describe("t")["run"] != second["run"], 10, "the target continued again")
    assert eng.describe("t")["journal"][0][1].origin["dedup"] == [key, "mine"]  # the chain's keys go on
    assert eng.signal("t", "go", "again", dedup=key) and eng.signal("t", "go", "again", dedup="mine")
    assert _signals(eng, "t") == []
    assert eng.signal("t", "go", "y")
    assert eng.result("t", timeout=10) == ["from-sender", "x", "y"]


def test_the_inherited_dedup_keys_survive_a_reopen(tmp_path):
    from fusee.replay import send_dedup

    path = str(tmp_path / "data")
    wfs = [relay, sender_then_wait]
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:
        first = eng.start(relay, "t", [])
        eng.start(sender_then_wait, "s", "t")
        wait_until(lambda: eng.describe("t")["run"] != first.run, 10, "the target continued as new")
        key = send_dedup("s", eng.describe("s")["run"], 0)
    for checkpoint in (True, False):
        with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG, checkpoint_on_shutdown=checkpoint) as eng:
            # the open delivered the sender's Send again; the new run of "t" holds the key in its Start
            assert eng.signal("t", "go", "again", dedup=key)
            assert _signals(eng, "t") == []
    with fusee.Engine.open(path, wfs, shards=3, segment_size=SEG) as eng:
        assert eng.signal("t", "go", "x") and eng.signal("t", "go", "y")
        assert eng.result("t", timeout=10) == ["from-sender", "x", "y"]
        assert eng.signal("s", "end", 1) and eng.result("s", timeout=10) == 1
