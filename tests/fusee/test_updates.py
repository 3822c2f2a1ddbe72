"""Updates: ``ctx.on_update`` in workflow code, ``engine.update`` / ``Run.update`` from outside, update-with-start.

Checked: the handler's result is answered once its ``UpdateDone`` is durable; a validator's refusal (or
no handler) records nothing and raises ``UpdateRejected``; a handler that raises gives ``UpdateFailed``
and the run goes on; an update ID is applied once and answers the same again (also after the run
ended, while its records are held); an update to an ended run raises ``NotRunning``; bad input is
refused at the call with nothing recorded; the handler's steps replay exactly after a reopen, a
parking, and a crash after every record boundary (``crash_everywhere``).
"""

from __future__ import annotations

import pytest

import fusee
from fusee import records as r
from fusee.errors import NotRunning, NotSerializable, UpdateFailed, UpdateRejected
from fusee.testing import TestEngine, crash_everywhere, wait_until

from ._kit import COUNTS, SEG, count


@fusee.workflow("upd.acc")
def acc(ctx, inp):
    """Adds what updates bring (each through a step), until the signal "stop"; ``inp``: a starting total."""
    total = {"n": inp or 0}

    def add(v):
        if v == 13:
            raise ValueError("unlucky")
        total["n"] += ctx.step("add", lambda: (count(f"add-{v}"), v)[1])
        return total["n"]

    def positive(v):
        if type(v) is not int or v < 0:
            raise ValueError(f"not a count: {v!r}")

    ctx.on_update("add", add, positive)
    ctx.on_update("nap", lambda d: (ctx.sleep("nap", d), total["n"])[1])
    ctx.on_update("peek", lambda _: total["n"])
    ctx.on_query("total", lambda _: total["n"])
    ctx.wait_for("stop")
    return total["n"]


@fusee.workflow("upd.quick")
def quick(ctx, inp):
    ctx.on_update("add", lambda v: v + 1)
    return ctx.step("one", lambda: 1)


def kinds(eng, id):
    return [type(rec).__name__ for _, rec in eng.describe(id)["journal"]]


def test_an_update_answers_its_handlers_result_and_records_update_and_update_done(opener):
    eng = opener([acc])
    run = eng.start(acc, "u1", 10)
    assert eng.update("u1", "add", 5) == 15
    assert run.update("add", 2) == 17
    assert eng.query("u1", "total") == 17
    eng.signal("u1", "stop")
    assert run.result(10) == 17
    js = [rec for _, rec in eng.describe("u1")["journal"]]
    ups = [rec for rec in js if type(rec) is r.Update]
    assert [(u.name, u.payload) for u in ups] == [("add", 5), ("add", 2)]
    assert [(d.status, d.payload) for d in js if type(d) is r.UpdateDone] == [("ok", 15), ("ok", 17)]


def test_the_same_update_id_is_applied_once_and_answers_the_same(opener):
    eng = opener([acc])
    eng.start(acc, "u2", 0)
    assert eng.update("u2", "add", 4, update_id="order-7") == 4
    assert eng.update("u2", "add", 4, update_id="order-7") == 4
    assert eng.update("u2", "add", 99, update_id="order-7") == 4  # the first one's outcome, whatever is sent again
    assert COUNTS == {"add-4": 1}
    eng.signal("u2", "stop")
    assert eng.result("u2", 10) == 4
    assert eng.update("u2", "add", 4, update_id="order-7") == 4  # still answered once the run has ended
    assert kinds(eng, "u2").count("Update") == 1


def test_a_refused_update_records_nothing_and_raises_at_the_caller(opener):
    eng = opener([acc])
    eng.start(acc, "u3", 0)
    assert eng.update("u3", "add", 1) == 1
    before = kinds(eng, "u3")
    with pytest.raises(UpdateRejected, match="not a count") as e:
        eng.update("u3", "add", -5, update_id="neg")
    assert e.value.code == "update_rejected" and e.value.failure["type"] == "ValueError"
    with pytest.raises(UpdateRejected, match="no update handler 'sub'"):
        eng.update("u3", "sub", 1)
    assert kinds(eng, "u3") == before
    assert eng.update("u3", "add", 2, update_id="neg") == 3  # a refused update ID was never taken


def test_a_handler_that_raises_fails_the_update_not_the_run(opener):
    eng = opener([acc])
    eng.start(acc, "u4", 0)
    with pytest.raises(UpdateFailed, match="unlucky") as e:
        eng.update("u4", "add", 13, update_id="bad")
    assert e.value.failure == {"type": "ValueError", "message": "unlucky"}
    with pytest.raises(UpdateFailed):
        eng.update("u4", "add", 13, update_id="bad")  # the same outcome again
    assert eng.update("u4", "add", 1) == 1
    eng.signal("u4", "stop")
    assert eng.result("u4", 10) == 1


def test_bad_input_is_refused_at_the_call_with_nothing_recorded(opener):
    eng = opener([acc])
    eng.start(acc, "u5", 0)
    before = kinds(eng, "u5")
    with pytest.raises(NotSerializable):
        eng.update("u5", "add", {1, 2})
    with pytest.raises(TypeError):
        eng.update("u5", 3, 1)
    with pytest.raises(TypeError):
        eng.update("u5", "add", 1, update_id=7)
    with pytest.raises(fusee.NotFound):
        eng.update("nobody", "add", 1)
    assert kinds(eng, "u5") == before
    eng.terminate("u5")
    with pytest.raises(NotRunning) as e:
        eng.update("u5", "add", 1)
    assert e.value.code == "not_running" and e.value.status == "terminated"


def test_a_validator_cannot_record_anything():
    @fusee.workflow("upd.sneaky")
    def sneaky(ctx, _):
        ctx.on_update("x", lambda v: v, lambda v: ctx.step("no", lambda: 1))
        ctx.wait_for("stop")

    with fusee.Engine.open(None, workflows=[sneaky], shards=1) as eng:
        eng.start(sneaky, "s", None)
        with pytest.raises(UpdateRejected, match="runs no operations"):
            eng.update("s", "x", 1)
        assert kinds(eng, "s")[-1] != "Step"


def test_update_with_start_starts_the_run_if_needed_and_applies_the_update(opener):
    eng = opener([acc, quick])
    run = eng.start(acc, "u6", 100, update=("add", 1))
    assert run.update_result == 101 and run.id == "u6"
    again = eng.start(acc, "u6", 100, update=("add", 2))  # running: attached (IdPolicy.ATTACH by default)
    assert again.run == run.run and again.update_result == 103
    assert eng.start(acc, "u6", 0, update=("add", 2), update_id=None).update_result == 105
    # the update is taken at the code's first operation: even a run that ends at once applies it
    q = eng.start(quick, "q", None, update=("add", 41))
    assert q.update_result == 42 and q.result(10) == 1
    with pytest.raises(UpdateRejected):
        eng.start(acc, "u7", 0, update=("add", -1))
    assert eng.describe("u7")["status"] == "running"  # the run started all the same
    with pytest.raises(TypeError):
        eng.start(acc, "u8", 0, update="add")
    with pytest.raises(fusee.NotFound):
        eng.describe("u8")


def test_a_handler_may_sleep_and_the_update_is_answered_after(opener):
    eng = opener([acc])
    eng.start(acc, "u9", 7)
    assert eng.update("u9", "nap", 0.01) == 7
    assert "Timer" in kinds(eng, "u9") and "Fired" in kinds(eng, "u9")


def test_a_parked_run_is_loaded_by_an_update(tmp_path):
    with fusee.Engine.open(str(tmp_path / "d"), workflows=[acc], shards=1, segment_size=SEG, park_after=None) as eng:
        eng.start(acc, "p", 0)
        eng.update("p", "add", 1)
        wait_until(lambda: eng.metrics()["runs_waiting"] == 1, 10)
        eng.park_now(True)
        wait_until(lambda: eng.metrics()["runs_parked"] == 1, 10)
        assert eng.update("p", "add", 2) == 3
        assert COUNTS == {"add-1": 1, "add-2": 1}


def test_after_a_reopen_the_handlers_replay_exactly_and_the_total_is_rebuilt(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, workflows=[acc], shards=2, segment_size=SEG) as eng:
        eng.start(acc, "r", 0)
        assert [eng.update("r", "add", v, update_id=f"r{v}") for v in (1, 2, 3)] == [1, 3, 6]
    with fusee.Engine.open(path, workflows=[acc], shards=2, segment_size=SEG, checkpoint_on_shutdown=False) as eng:
        assert eng.update("r", "add", 2, update_id="r2") == 3  # answered from the journal
        assert eng.update("r", "add", 4) == 10  # the state the handlers built was replayed
        assert COUNTS == {"add-1": 1, "add-2": 1, "add-3": 1, "add-4": 1}
    with fusee.Engine.open(path, workflows=[acc], shards=2, segment_size=SEG) as eng:
        assert eng.query("r", "total") == 10 or eng.update("r", "peek", None) == 10
        eng.signal("r", "stop")
        assert eng.result("r", 10) == 10
        assert COUNTS == {"add-1": 1, "add-2": 1, "add-3": 1, "add-4": 1}


def update_case(eng: TestEngine):
    """Start attached, apply three updates (one refused, one failing) by fixed update IDs, stop; re-runnable."""
    eng.start(acc, "uc", 0, fusee.IdPolicy.ATTACH)
    got = [eng.update("uc", "add", 2, update_id="a")]
    try:
        eng.update("uc", "add", 13, update_id="b")
    except UpdateFailed as e:
        got.append(e.failure["message"])
    try:
        eng.update("uc", "add", -1, update_id="c")
    except UpdateRejected:
        got.append("rejected")
    except NotRunning:  # after a crash past the "stop": refused all the same (the run ended), nothing recorded
        got.append("rejected")
    got.append(eng.update("uc", "add", 5, update_id="d"))
    eng.signal("uc", "stop", dedup="stop")
    got.append(eng.result("uc", 10))
    return got


def test_crash_everywhere_over_updates():
    report = crash_everywhere(update_case, [acc])
    assert report.result == [2, "unlucky", "rejected", 7, 7]
    # Start, Wait, (Update, Step, UpdateDone) x 2, Update + UpdateDone (failed), Signal, Waited, Done
    assert report.boundaries == 13
    for t in report.trials:  # two adds ran (5 and 2); a body whose Step was lost in the crash ran once more
        assert 2 <= t.bodies_before.get("add", 0) + t.bodies_after.get("add", 0) <= 3, t
