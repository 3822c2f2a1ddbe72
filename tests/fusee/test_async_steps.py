"""Async completions: ``ctx.step_async(name, start_fn)``, settled from outside by ``engine.complete`` / ``engine.fail``.

Checked: ``start_fn`` gets a token naming the run and the step; the run waits durably and returns the
value (or raises ``StepFailed``); a second settle raises ``AlreadySettled`` and changes nothing; a forged
or malformed token raises ``InvalidToken``, a token of an ended run ``NotRunning`` (nothing recorded
either way); a token works after a reopen; ``start_fn`` runs once (not again on replay once its
``AsyncStarted`` is durable); a parked run is loaded by a settle; every record boundary survives a
crash (``crash_everywhere``).
"""

from __future__ import annotations

import pytest

import fusee
from fusee import records as r
from fusee.errors import AlreadySettled, InvalidToken, NotRunning, NotSerializable, StepFailed
from fusee.replay import parse_token
from fusee.testing import TestEngine, crash_everywhere, wait_until

from ._kit import COUNTS, SEG, count

TOKENS: dict[str, str] = {}


def hand_over(key: str):
    def start(token: str) -> None:
        count(f"start-{key}")
        TOKENS[key] = token

    return start


@fusee.workflow("async.pay")
def pay(ctx, inp):
    got = ctx.step_async("charge", hand_over(ctx.workflow_id))
    try:
        more = ctx.step_async("refund", hand_over(ctx.workflow_id + "/2"))
    except StepFailed as e:
        more = e.failure
    return [got, more]


@fusee.workflow("async.broken")
def broken(ctx, _):
    def start(token):
        raise ConnectionError("the provider is down")

    try:
        ctx.step_async("x", start)
    except StepFailed as e:
        return e.failure


def token_of(key: str) -> str:
    wait_until(lambda: key in TOKENS, 10, f"the token of {key}")
    return TOKENS.pop(key)


def kinds(eng, id):
    return [type(rec).__name__ for _, rec in eng.describe(id)["journal"]]


def test_complete_and_fail_settle_the_step_once(opener):
    eng = opener([pay])
    run = eng.start(pay, "a1", None)
    t = token_of("a1")
    assert parse_token(t)[:3] == ("a1", run.run, 0)
    eng.complete(t, {"paid": 30})
    with pytest.raises(AlreadySettled) as e:
        eng.complete(t, {"paid": 31})
    assert e.value.code == "already_settled" and e.value.status == "ok"
    t2 = token_of("a1/2")
    eng.fail(t2, ValueError("declined"))
    with pytest.raises(AlreadySettled):
        eng.fail(t2, "again")
    assert run.result(10) == [{"paid": 30}, {"type": "ValueError", "message": "declined"}]
    assert kinds(eng, "a1").count("Settled") == 2 and kinds(eng, "a1").count("AsyncStarted") == 2


def test_a_bad_token_or_value_is_refused_with_nothing_recorded(opener):
    eng = opener([pay])
    eng.start(pay, "a2", None)
    t = token_of("a2")
    before = kinds(eng, "a2")
    forged = t[:-1] + ("0" if t[-1] != "0" else "1")
    for bad in (forged, "nonsense", t + ".x", 42, None, t.replace("fz1.", "fz2.")):
        with pytest.raises(InvalidToken) as e:
            eng.complete(bad, 1)
        assert e.value.code == "invalid_token"
    with pytest.raises(NotSerializable):
        eng.complete(t, {1, 2})
    assert kinds(eng, "a2") == before
    eng.terminate("a2")
    with pytest.raises(NotRunning):
        eng.complete(t, 1)


def test_start_fn_that_raises_fails_the_step(opener):
    eng = opener([broken])
    assert eng.execute(broken, "b1", None, timeout=10) == {"type": "ConnectionError", "message": "the provider is down"}


def test_a_token_works_after_a_reopen_and_start_fn_does_not_run_again(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, workflows=[pay], shards=2, segment_size=SEG) as eng:
        eng.start(pay, "a3", None)
        t = token_of("a3")
        wait_until(lambda: "AsyncStarted" in kinds(eng, "a3"), 10)
    with fusee.Engine.open(path, workflows=[pay], shards=2, segment_size=SEG, checkpoint_on_shutdown=False) as eng:
        eng.complete(t, "late")
        eng.fail(token_of("a3/2"), "no")
        assert eng.result("a3", 10) == ["late", "no"]
    assert COUNTS == {"start-a3": 1, "start-a3/2": 1}


def test_a_parked_run_is_loaded_by_a_settle(tmp_path):
    with fusee.Engine.open(str(tmp_path / "d"), workflows=[pay], shards=1, segment_size=SEG, park_after=None) as eng:
        eng.start(pay, "a4", None)
        t = token_of("a4")
        wait_until(lambda: eng.metrics()["runs_waiting"] == 1, 10)
        eng.park_now(True)
        wait_until(lambda: eng.metrics()["runs_parked"] == 1, 10)
        eng.complete(t, 1)
        eng.complete(token_of("a4/2"), 2)
        assert eng.result("a4", 10) == [1, 2]
        assert COUNTS == {"start-a4": 1, "start-a4/2": 1}


def settle(eng, key: str, value) -> None:
    """Settle the async step whose token ``key`` names (re-runnable: a token lost in the crash is handed out
    again by start_fn; one settled before the crash is settled already)."""
    while True:
        t = TOKENS.get(key)
        if t is None:
            wait_until(lambda: key in TOKENS, 10)
            continue
        try:
            eng.complete(t, value)
            return
        except AlreadySettled:
            return
        except InvalidToken:  # its Awaiting did not survive the crash: wait for start_fn's new one
            wait_until(lambda: TOKENS.get(key) != t, 10)


def async_case(eng: TestEngine):
    run = eng.start(pay, "ac", None, fusee.IdPolicy.ATTACH)
    settle(eng, "ac", "one")
    settle(eng, "ac/2", "two")
    return run.result(10), [type(rec).__name__ for _, rec in eng.describe("ac")["journal"]]


def test_crash_everywhere_over_async_steps():
    report = crash_everywhere(async_case, [pay])
    result, journal = report.result
    assert result == ["one", "two"]
    assert journal == ["Start", "Awaiting", "AsyncStarted", "Settled", "Awaiting", "AsyncStarted", "Settled", "Done"]
    assert report.boundaries == 8
