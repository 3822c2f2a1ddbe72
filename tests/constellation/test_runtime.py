"""The pure runtime: participant registry, routing of effects, and its laws (spec §1.2, §3.14)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constellation import core, dispatch, runtime
from constellation.runtime import Cancelled, Deliver, Events


def _subscribed(*subs, strategy=None):
    rt = runtime.new(strategy)
    for id_, participant, handle in subs:
        rt, out = runtime.subscribe(rt, id_, participant, 0, handle)
        assert [] == out
    return rt


def test_events_are_routed_to_the_participants_handle():
    """SendEvents becomes Deliver(handle, Events(id, events))."""
    rt = _subscribed(("s1", "p1", "h1"))
    rt, out = runtime.ask(rt, "s1", 2)
    assert [] == out
    rt, out = runtime.push(rt, [1, 2, 3])
    assert [Deliver("h1", Events("s1", (1, 2)))] == out
    assert (3,) == core.buffered_events(rt.state)


def test_a_second_handle_for_a_participant_is_rejected_and_nothing_is_committed():
    """ParticipantAlreadyRegistered leaves registry and core as they were."""
    rt = _subscribed(("s1", "p1", "h1"))
    with pytest.raises(runtime.ParticipantAlreadyRegistered) as err:
        runtime.subscribe(rt, "s2", "p1", 0, "other")
    assert "p1" == err.value.participant_id
    assert not runtime.has_subscription(rt, "s2")
    assert ("s1",) == core.subscription_ids(rt.state)
    assert {"p1": "h1"} == runtime.participants(rt)


def test_the_same_handle_may_own_many_subscriptions():
    """A participant subscribes twice through one handle."""
    rt = _subscribed(("s1", "p1", "h1"), ("s2", "p1", "h1"))
    assert {"s1": "p1", "s2": "p1"} == runtime.routes(rt)
    assert {"p1": "h1"} == runtime.participants(rt)


def test_the_participant_goes_with_its_last_subscription():
    """Cancelling routes Cancelled, drops the route, and the participant only at the last one."""
    rt = _subscribed(("s1", "p1", "h1"), ("s2", "p1", "h1"))
    rt, out = runtime.cancel(rt, "s1")
    assert [Deliver("h1", Cancelled("s1"))] == out
    assert (False, True) == (runtime.has_subscription(rt, "s1"), runtime.has_participant(rt, "p1"))
    rt, out = runtime.cancel(rt, "s2")
    assert [Deliver("h1", Cancelled("s2"))] == out
    assert (False, False) == (runtime.has_subscription(rt, "s2"), runtime.has_participant(rt, "p1"))


def test_a_participant_may_come_back_with_a_new_handle_after_its_last_subscription():
    """Once the entry is gone, the participant id is free for another handle."""
    rt = _subscribed(("s1", "p1", "h1"))
    rt, _ = runtime.cancel(rt, "s1")
    rt, _ = runtime.subscribe(rt, "s2", "p1", 0, "h2")
    assert {"p1": "h2"} == runtime.participants(rt)


def test_participant_down_cancels_its_subscriptions_and_redispatches():
    """Cancelled notices come first, then events released for the others."""
    rt = _subscribed(("a", "pa", "ha"), ("b", "pb", "hb"), strategy=dispatch.broadcast())
    rt, _ = runtime.ask(rt, "b", 2)
    rt, out = runtime.push(rt, [1, 2])
    assert [] == out
    rt, out = runtime.participant_down(rt, "pa")
    assert [Deliver("ha", Cancelled("a")), Deliver("hb", Events("b", (1, 2)))] == out
    assert {"pb": "hb"} == runtime.participants(rt)


def test_shutdown_cancels_everyone_without_dispatch():
    """Shutdown routes Cancelled to each in dispatch order and leaves the buffer."""
    rt = _subscribed(("a", "pa", "ha"), ("b", "pb", "hb"))
    rt, _ = runtime.push(rt, [1])
    rt, out = runtime.shutdown(rt)
    assert [Deliver("ha", Cancelled("a")), Deliver("hb", Cancelled("b"))] == out
    assert ({}, {}) == (runtime.participants(rt), runtime.routes(rt))


def test_core_errors_propagate_as_themselves():
    """A core rejection is raised unchanged and the runtime keeps its state."""
    rt = _subscribed(("s1", "p1", "h1"))
    with pytest.raises(core.InvalidDemand) as err:
        runtime.ask(rt, "s1", 0)
    assert core.InvalidDemand(0) == err.value
    with pytest.raises(core.DuplicateSubscription):
        runtime.subscribe(rt, "s1", "p2", 0, "h2")
    assert {"p1": "h1"} == runtime.participants(rt)


def test_consumption_reports_are_checked():
    """A report needs a positive amount and a routed subscription."""
    rt = _subscribed(("s1", "p1", "h1"))
    assert runtime.check_consumption(rt, "s1", 3) is None
    with pytest.raises(runtime.InvalidConsumptionReport) as bad:
        runtime.check_consumption(rt, "s1", 0)
    assert 0 == bad.value.amount
    with pytest.raises(runtime.MissingSubscriptionRoute) as missing:
        runtime.check_consumption(rt, "nope", 1)
    assert "nope" == missing.value.id


def test_lookups_raise_routing_errors():
    """handle_of and participant_of name what is missing."""
    rt = _subscribed(("s1", "p1", "h1"))
    assert ("h1", "p1") == (runtime.handle_of(rt, "p1"), runtime.participant_of(rt, "s1"))
    with pytest.raises(runtime.MissingParticipantRoute):
        runtime.handle_of(rt, "p9")
    with pytest.raises(runtime.MissingSubscriptionRoute):
        runtime.participant_of(rt, "s9")


# --------------------------------------------------------------------------
# Laws
# --------------------------------------------------------------------------

IDS = st.sampled_from(["s0", "s1", "s2", "s3", "s4"])
PARTICIPANTS = st.sampled_from(["p0", "p1", "p2"])
HANDLES = st.sampled_from(["h0", "h1", "h2"])
OPS = st.one_of(
    st.tuples(st.just("subscribe"), IDS, PARTICIPANTS, HANDLES),
    st.tuples(st.just("ask"), IDS, st.integers(-1, 4)),
    st.tuples(st.just("push"), st.lists(st.integers(0, 99), max_size=5)),
    st.tuples(st.just("cancel"), IDS),
    st.tuples(st.just("participant_down"), PARTICIPANTS),
    st.tuples(st.just("shutdown")),
)


def _step(rt, op):
    kind = op[0]
    if kind == "subscribe":
        return runtime.subscribe(rt, op[1], op[2], 0, op[3])
    if kind == "ask":
        return runtime.ask(rt, op[1], op[2])
    if kind == "push":
        return runtime.push(rt, op[1])
    if kind == "cancel":
        return runtime.cancel(rt, op[1])
    if kind == "participant_down":
        return runtime.participant_down(rt, op[1])
    return runtime.shutdown(rt)


def _snapshot(rt):
    return (
        runtime.participants(rt),
        runtime.routes(rt),
        core.subscription_ids(rt.state),
        core.buffered_events(rt.state),
        core.available_demand(rt.state),
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=30), st.sampled_from([None, 3]))
def test_registry_and_core_stay_consistent(ops, capacity):
    """Routes match the core's subscriptions, participants match the routes, errors change nothing."""
    rt = runtime.new(None, capacity)
    for op in ops:
        before = _snapshot(rt)
        handles = runtime.participants(rt)
        try:
            after, out = _step(rt, op)
        except (core.StageError, runtime.RoutingError):
            assert before == _snapshot(rt)
            continue
        for d in out:  # every delivery goes to the handle of the id's participant (before or after)
            owner = rt.routes[d.message.id]
            assert handles[owner] == d.to
            if type(d.message) is Cancelled:
                assert not runtime.has_subscription(after, d.message.id)
        rt = after
        routes = runtime.routes(rt)
        assert set(core.subscription_ids(rt.state)) == set(routes)
        assert set(routes.values()) == set(runtime.participants(rt))
        for id_, participant in routes.items():
            assert participant == core.subscription(rt.state, id_).participant_id


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(IDS, PARTICIPANTS, HANDLES), max_size=12))
def test_one_handle_per_participant(subs):
    """A participant keeps the handle it registered first until its last subscription goes."""
    rt = runtime.new()
    first = {}
    for id_, participant, handle in subs:
        try:
            rt, _ = runtime.subscribe(rt, id_, participant, 0, handle)
        except runtime.ParticipantAlreadyRegistered as err:
            assert participant == err.participant_id
            assert handle != first[participant]
            continue
        except core.DuplicateSubscription:
            continue
        first.setdefault(participant, handle)
    assert first == runtime.participants(rt)


ASKS = st.lists(st.tuples(st.sampled_from(["s0", "s1", "s2", "s9"]), st.integers(0, 4)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3), st.integers(0, 12), st.lists(OPS, max_size=4), ASKS)
def test_ask_all_is_the_fold_of_ask(subscribers, backlog, ops, asks):
    """ask_all (and ask_all_unrouted) answer the runtime and deliveries of one ask per pair in turn, or the fold's first error."""
    rt = runtime.new()
    for k in range(subscribers):
        rt, _ = runtime.subscribe(rt, f"s{k}", f"p{k % 2}", 0, f"h{k % 2}")
    rt, _ = runtime.push(rt, list(range(backlog)))
    for op in ops:
        try:
            rt, _ = _step(rt, op)
        except (core.StageError, runtime.RoutingError):
            pass
    before = _snapshot(rt)
    try:
        folded, expected = rt, []
        for id_, n in asks:
            folded, out = runtime.ask(folded, id_, n)
            expected.extend(out)
        expected = ("ok", expected, _snapshot(folded))
    except (core.StageError, runtime.RoutingError) as err:
        expected = ("error", err)
    try:
        after, out = runtime.ask_all(rt, asks)
        actual = ("ok", out, _snapshot(after))
    except (core.StageError, runtime.RoutingError) as err:
        actual = ("error", err)
    assert expected == actual
    assert before == _snapshot(rt)
    try:  # unrouted: the same runtime, each delivery as (id, events)
        after, sent = runtime.ask_all_unrouted(rt, asks)
        unrouted = ("ok", sent, _snapshot(after))
    except (core.StageError, runtime.RoutingError) as err:
        unrouted = ("error", err)
    if expected[0] == "ok":
        assert all(type(d.message) is Events for d in expected[1])
        expected = ("ok", [(d.message.id, d.message.events) for d in expected[1]], expected[2])
    assert expected == unrouted
    assert before == _snapshot(rt)
