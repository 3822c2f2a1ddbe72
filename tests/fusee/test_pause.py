"""Pause on exhaustion: ``Engine.open(..., on_exhausted="pause")`` and ``engine.resume(id)``.

Checked: a step that used its retry budget leaves the run ``paused`` (describe, list, ``Run.status``, the
HTTP API's list filter) with a ``Paused`` record; ``resume`` records ``Resumed`` and retries with a fresh
budget (pausing again when that is used up too); ``resume`` of a run that is not paused raises
``NotPaused`` with nothing recorded; a cancel lands at the paused step; a pause survives a reopen;
``on_exhausted="fail"`` (the default) fails the step as before; every record boundary survives a crash.
"""

from __future__ import annotations

import pytest

import fusee
from fusee import http_api
from fusee.errors import NotPaused
from fusee.testing import TestEngine, crash_everywhere, wait_until

from ._kit import SEG, count


def flaky_body(s):
    """Fails until attempt 4 (so with 2 attempts per budget: fail, pause, resume, fail, ok)."""
    count(f"try-{s.attempt}")
    if s.attempt < 4:
        raise RuntimeError(f"attempt {s.attempt}")
    return s.attempt


@fusee.workflow("pause.flaky")
def flaky(ctx, _):
    return ctx.step("call", flaky_body, retry=fusee.Retry(2, initial=0))


@fusee.workflow("pause.never")
def never(ctx, _):
    try:
        return ctx.step("call", lambda: 1 / 0, retry=fusee.Retry(1, initial=0))
    except fusee.Cancelled:
        return "compensated"


def kinds(eng, id):
    return [type(rec).__name__ for _, rec in eng.describe(id)["journal"]]


def paused(eng, id):
    wait_until(lambda: eng.describe(id)["status"] == "paused", 10, f"{id} paused")


def test_a_step_out_of_retries_pauses_the_run_and_resume_gives_a_fresh_budget(opener):
    eng = opener([flaky], on_exhausted="pause")
    run = eng.start(flaky, "p1", None)
    paused(eng, "p1")
    assert run.status == "paused"
    assert [d["status"] for d in eng.list() if d["id"] == "p1"] == ["paused"]
    assert [d["id"] for d in eng.list(status="paused")] == ["p1"]
    assert kinds(eng, "p1") == ["Start", "Attempt", "Paused"]
    eng.resume("p1")
    assert run.result(10) == 4
    assert kinds(eng, "p1") == ["Start", "Attempt", "Paused", "Resumed", "Attempt", "Step", "Done"]


def test_a_fresh_budget_used_up_pauses_again(opener):
    eng = opener([never], on_exhausted="pause")
    eng.start(never, "p2", None)
    paused(eng, "p2")
    eng.resume("p2")
    wait_until(lambda: kinds(eng, "p2").count("Paused") == 2, 10)
    assert eng.describe("p2")["status"] == "paused"
    eng.cancel("p2", "give up")  # lands at the paused step
    assert eng.result("p2", 10) == "compensated"


@fusee.workflow("pause.waiter")
def waiter(ctx, _):
    return ctx.wait_for("go")


def test_resume_of_a_run_that_is_not_paused_is_refused_with_nothing_recorded(opener):
    eng = opener([flaky, waiter], on_exhausted="pause")
    eng.start(waiter, "w", None)
    before = kinds(eng, "w")
    with pytest.raises(NotPaused, match="running") as e:
        eng.resume("w")
    assert e.value.code == "not_paused" and kinds(eng, "w") == before
    eng.start(flaky, "p3", None)
    paused(eng, "p3")
    eng.resume("p3")
    assert eng.result("p3", 10) == 4
    before = kinds(eng, "p3")
    with pytest.raises(NotPaused, match="completed"):
        eng.resume("p3")
    assert kinds(eng, "p3") == before
    with pytest.raises(fusee.NotFound):
        eng.resume("nobody")


def test_on_exhausted_fail_is_the_default_and_other_values_are_refused(tmp_path):
    with fusee.Engine.open(None, workflows=[flaky], shards=1) as eng:
        with pytest.raises(fusee.Failed, match="attempt 2"):
            eng.execute(flaky, "f", None, timeout=10)
    with pytest.raises(ValueError, match="on_exhausted"):
        fusee.Engine.open(None, workflows=[flaky], on_exhausted="retry")


def test_a_paused_run_stays_paused_across_a_reopen(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, workflows=[flaky], shards=2, segment_size=SEG, on_exhausted="pause") as eng:
        eng.start(flaky, "p4", None)
        paused(eng, "p4")
    with fusee.Engine.open(path, workflows=[flaky], shards=2, segment_size=SEG, on_exhausted="pause",
                           checkpoint_on_shutdown=False) as eng:
        assert eng.describe("p4")["status"] == "paused"
        eng.resume("p4")
        assert eng.result("p4", 10) == 4


def test_the_http_api_lists_paused_runs():
    assert http_api.parse_list_query("status=paused").status == "paused"


def pause_case(eng: TestEngine):
    run = eng.start(flaky, "pc", None, fusee.IdPolicy.ATTACH)
    wait_until(lambda: eng.describe("pc")["status"] in ("paused", "completed") or "Resumed" in kinds(eng, "pc"), 10)
    if eng.describe("pc")["status"] == "paused":
        eng.resume("pc")
    return run.result(10), kinds(eng, "pc")


def test_crash_everywhere_over_a_pause_and_a_resume():
    with TestEngine([flaky], on_exhausted="pause") as eng:
        assert pause_case(eng)[0] == 4
    report = crash_everywhere(pause_case, [flaky], on_exhausted="pause")
    assert report.result == (4, ["Start", "Attempt", "Paused", "Resumed", "Attempt", "Step", "Done"])
    assert report.boundaries == 7
