"""constellation.worker_pool.call: answers, handle_call, demand, failures, refusals, timeouts, drain.

Deterministic: workers are held on a gate (a GO message), and the tests wait
for conditions the pool reports (snapshot, reporter), never for time.
"""

from __future__ import annotations

import math

import pytest

import ensemble as e
from constellation import core
from constellation import worker_pool as wp
from constellation.worker_pool import WorkerId

GO = "go"


def _sum(total, event):
    return total + event


def _each(**overrides):
    settings = {"size": 1, "prefetch": 1, "initial_state": lambda slot: 0, "handle_event": _sum}
    settings.update(overrides)
    return wp.each(**settings)


def _to_me():
    me = e.self()
    return lambda event: e.send(me, ("report", event))


def _reports_until(kind):
    seen = []
    while True:
        got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "report" else e.NOMATCH, timeout=5)
        assert got is not e.TIMEOUT
        seen.append(got)
        if type(got) is kind:
            return seen


def _gate(test):
    """Wait for GO when the event is "gate" (telling ``test`` the worker's pid first)."""

    def wait(event):
        if event == "gate":
            e.send(test, ("started", e.self()))
            e.receive(lambda m: m if m == GO else e.NOMATCH)

    return wait


def _started():
    got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "started" else e.NOMATCH, timeout=5)
    assert got is not e.TIMEOUT
    return got


def _call_async(pool, event, timeout=None):
    """Call from another process; its outcome comes back as ("outcome", event, ok, value)."""
    test = e.self()

    def caller():
        try:
            value = wp.call(pool, event, timeout)
        except Exception as err:  # the outcome is the test's to check
            e.send(test, ("outcome", event, False, err))
        else:
            e.send(test, ("outcome", event, True, value))

    return e.spawn(caller)


def _outcome(event, timeout=5):
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == "outcome" and m[1] == event else e.NOMATCH,
                    timeout=timeout)
    assert got is not e.TIMEOUT
    return got[2], got[3]


def _until_buffered(pool, n):
    """Until the pool buffers ``n`` events: each snapshot is a round trip that lets a caller process run."""
    for _ in range(10_000):
        if wp.snapshot(pool).buffered_events == n:
            return
    raise AssertionError(f"the pool never buffered {n} events")


# -- answers ------------------------------------------------------------------------------


def test_call_answers_the_state_handle_event_returned():
    """Without handle_call, the answer is the worker's state after this event, in order after earlier pushes."""
    pool = wp.start(_each())
    wp.push(pool, [1, 2])
    answer = wp.call(pool, 10)
    wp.stop(pool)
    assert 13 == answer


def test_handle_call_answers_its_reply_and_keeps_its_state():
    """handle_call(state, event) -> (reply, state): the reply answers, the state goes on to the next events."""
    config = _each(handle_call=lambda total, event: (f"{total}+{event}", total + event))
    pool = wp.start(config)
    first = wp.call(pool, 5)
    wp.push(pool, [1])
    second = wp.call(pool, 2)
    wp.stop(pool)
    assert ("0+5", "6+2") == (first, second)


def test_with_handle_call_and_the_method_on_the_handle():
    pool = wp.start(wp.with_handle_call(_each(), lambda total, event: (event * 2, total)))
    answer = pool.call(21)
    pool.stop()
    assert 42 == answer


def test_handle_batch_gets_the_call_alone_and_the_plain_events_around_it_as_batches():
    """For new(handle_batch=...), a batch holding a call is split: (1,), then the call as (2,), then (3,)."""
    test = e.self()
    gate = _gate(test)
    batches = []

    def handle(state, batch):
        gate(batch[0])
        batches.append(batch)
        return state + len(batch)

    pool = wp.start(wp.new(size=1, prefetch=3, initial_state=lambda slot: 0, handle_batch=handle))
    wp.push(pool, ["gate", "x", "y"])
    worker = _started()
    wp.push(pool, [1])
    _call_async(pool, 2)
    _until_buffered(pool, 2)
    wp.push(pool, [3])
    e.send(worker, GO)
    outcome = _outcome(2)
    wp.stop(pool)
    assert (True, 5) == outcome  # 3 events, then (1,), then the call's (2,): 5 events seen
    assert [("gate", "x", "y"), (1,), (2,), (3,)] == batches


def test_many_callers_each_get_their_own_answer_once():
    """Concurrent calls beside pushes on several workers: each caller gets exactly its event's reply."""
    config = _each(size=3, prefetch=4, handle_call=lambda total, event: (event * 2, total))
    pool = wp.start(config)
    for event in range(40):
        _call_async(pool, event)
        wp.push(pool, [0, 0])
    outcomes = {event: _outcome(event) for event in range(40)}
    wp.stop(pool)
    assert {event: (True, event * 2) for event in range(40)} == outcomes
    assert e.receive(lambda m: m if type(m) is tuple and m[0] == "outcome" else e.NOMATCH, timeout=0) is e.TIMEOUT


def test_call_on_the_blocking_dispatcher():
    pool = wp.start(_each(size=2, dispatcher="blocking", handle_call=lambda s, event: (event + 1, s)))
    answer = wp.call(pool, 41)
    wp.stop(pool)
    assert 42 == answer


# -- demand -------------------------------------------------------------------------------


def test_a_call_waits_for_demand_like_a_push():
    """With the only worker busy, the call's event is buffered (no bypass) and answered once demand comes."""
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_event=lambda total, event: gate(event) or total + 1))
    wp.push(pool, ["gate"])
    worker = _started()
    _call_async(pool, "later")
    _until_buffered(pool, 1)
    early = e.receive(lambda m: m if type(m) is tuple and m[0] == "outcome" else e.NOMATCH, timeout=0)
    e.send(worker, GO)
    outcome = _outcome("later")
    wp.stop(pool)
    assert (e.TIMEOUT, (True, 2)) == (early, outcome)


def test_stop_drains_buffered_calls_and_answers_them_first():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_event=lambda total, event: gate(event) or total + 1))
    wp.push(pool, ["gate"])
    worker = _started()
    _call_async(pool, "a")
    _call_async(pool, "b")
    _until_buffered(pool, 2)
    stopper = e.spawn(lambda: (wp.stop(pool), e.send(test, ("stopped",))))
    e.send(worker, GO)
    a, b = _outcome("a"), _outcome("b")
    assert e.receive(lambda m: m if m == ("stopped",) else e.NOMATCH, timeout=5) == ("stopped",)
    assert ((True, 2), (True, 3)) == (a, b)
    assert "normal" == e.exit_reason(stopper, timeout=5)


# -- failures -----------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_a_raising_handler_fails_the_call_with_handler_failed_and_the_worker_is_replaced():
    error = Boom("no")

    def handle(total, event):
        if event == "boom":
            raise error
        return total + event

    pool = wp.start(_each(handle_event=handle, reporter=_to_me()))
    _reports_until(wp.WorkerStarted)
    with pytest.raises(wp.HandlerFailed) as info:
        wp.call(pool, "boom")
    replaced = _reports_until(wp.WorkerReplaced)[-1]
    after = wp.call(pool, 7)  # a fresh worker, a fresh state
    wp.stop(pool)
    assert (error, error) == (info.value.error, info.value.__cause__)
    assert isinstance(info.value, wp.PoolError)
    assert (wp.WorkerReplaced(WorkerId(1), WorkerId(2), 0), 7) == (replaced, after)


def test_a_handle_call_answering_no_pair_fails_the_call():
    pool = wp.start(_each(handle_call=lambda total, event: "not a pair of two"))
    with pytest.raises(wp.HandlerFailed) as info:
        wp.call(pool, 1)
    wp.stop(pool)
    assert isinstance(info.value.error, ValueError)


def test_a_worker_killed_while_handling_the_call_fails_it_with_worker_crashed():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_call=lambda total, event: (gate(event), total)))
    _call_async(pool, "gate")
    worker = _started()
    e.exit(worker, "kill")
    outcome = _outcome("gate")
    wp.stop(pool)
    assert (False, wp.WorkerCrashed(WorkerId(1), "killed")) == outcome


def test_a_call_behind_a_crashing_event_in_the_same_batch_fails_with_worker_crashed():
    """The batch (boom, call): the worker dies on boom, before the call's event; the call is not retried."""
    test = e.self()
    gate = _gate(test)
    handled = []

    def handle(total, event):
        gate(event)
        if event == "boom":
            raise Boom("boom")
        handled.append(event)
        return total

    pool = wp.start(_each(prefetch=2, handle_event=handle))
    wp.push(pool, ["gate", "x"])
    worker = _started()
    wp.push(pool, ["boom"])
    _call_async(pool, "lost")
    _until_buffered(pool, 2)
    e.send(worker, GO)
    ok, err = _outcome("lost")
    after = wp.call(pool, "after")
    wp.stop(pool)
    assert (False, WorkerId(1)) == (ok, err.worker)
    assert isinstance(err, wp.WorkerCrashed)
    assert ["gate", "x", "after"] == handled
    assert 0 == after


def test_timeout_raises_pool_timeout_and_the_late_answer_is_dropped():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_event=lambda total, event: gate(event) or total + 1))
    wp.push(pool, ["gate"])
    worker = _started()
    with pytest.raises(wp.PoolTimeout):
        wp.call(pool, 1, timeout=0.01)  # the only worker is held: no answer can come
    e.send(worker, GO)
    wp.stop(pool)  # the call's event was handled during the drain; its answer had nowhere to go
    assert e.receive(timeout=0) is e.TIMEOUT


def test_no_limit_with_math_inf():
    pool = wp.start(_each())
    answer = wp.call(pool, 3, timeout=math.inf)
    wp.stop(pool)
    assert 3 == answer


def test_a_pool_that_dies_fails_its_pending_calls_as_unavailable():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_event=lambda total, event: gate(event) or total))
    wp.push(pool, ["gate"])
    worker = _started()
    _call_async(pool, "pending")
    _until_buffered(pool, 1)
    e.exit(pool.whereis(), "kill")
    ok, err = _outcome("pending")
    e.send(worker, GO)
    assert (False, wp.PoolUnavailable) == (ok, type(err))


# -- refusals -----------------------------------------------------------------------------


def test_call_past_the_buffer_capacity_is_refused_and_not_taken():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(buffer_capacity=1, handle_event=lambda total, event: gate(event) or total))
    wp.push(pool, ["gate"])
    worker = _started()
    wp.push(pool, [1])
    with pytest.raises(wp.StageProtocol) as info:
        wp.call(pool, 2)
    buffered = wp.snapshot(pool).buffered_events
    e.send(worker, GO)
    wp.stop(pool)
    assert (core.BufferCapacityExceeded(1, 2), 1) == (info.value.error, buffered)


def test_call_to_a_source_pool_is_source_managed():
    pool, _ = wp.start_with_source(_each(), lambda event: None)
    with pytest.raises(wp.SourceManaged):
        wp.call(pool, 1)
    wp.stop(pool)


def test_call_while_stopping_is_refused_and_after_stop_unavailable():
    test = e.self()
    gate = _gate(test)
    pool = wp.start(_each(handle_event=lambda total, event: gate(event) or total))
    wp.push(pool, ["gate"])
    worker = _started()
    stopper = e.spawn(lambda: wp.stop(pool))
    for _ in range(10_000):
        if wp.snapshot(pool).stopping:
            break
    with pytest.raises(wp.AlreadyStopping):
        wp.call(pool, 1)
    e.send(worker, GO)
    assert "normal" == e.exit_reason(stopper, timeout=5)
    with pytest.raises(wp.PoolUnavailable):
        wp.call(pool, 1)


def test_errors_compare_by_value():
    error = Boom("x")
    assert wp.HandlerFailed(error) == wp.HandlerFailed(error)
    assert wp.HandlerFailed(error) != wp.HandlerFailed(Boom("x"))
    assert wp.WorkerCrashed(WorkerId(1), "killed") == wp.WorkerCrashed(WorkerId(1), "killed")
    assert "HandlerFailed(Boom('x'))" == repr(wp.HandlerFailed(error))
