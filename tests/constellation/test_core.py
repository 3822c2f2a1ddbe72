"""Laws and spec examples for constellation.core.update (spec §1.1 transitions, §3 items 1-6)."""

import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constellation import core
from constellation.core import (
    Ask,
    BufferCapacityExceeded,
    Cancel,
    DuplicateSubscription,
    InvalidDemand,
    NotifyCancelled,
    ParticipantDown,
    Push,
    SendEvents,
    Shutdown,
    StageError,
    Subscribe,
    Subscription,
    SubscriptionCancelled,
    UnknownSubscription,
    available_demand,
    buffer_size,
    buffered_events,
    is_cancelled,
    subscription,
    subscription_ids,
    update,
)
from constellation.dispatch import broadcast, custom, demand, partition
from tests.constellation.test_dispatch import Target, pick_by_event, reference

SETTINGS = settings(max_examples=100, deadline=None)

IDS = ["s0", "s1", "s2", "s3"]
PARTICIPANTS = ["p0", "p1"]


def key(event):
    return event % 2


STRATEGIES = {
    "demand": (None, demand()),
    "broadcast": (None, broadcast()),
    "partition": (key, partition(key)),
    "custom": (pick_by_event, custom(pick_by_event)),
}


def run(state, *commands):
    """Apply ``commands`` in turn; the final state and all effects."""
    effects = []
    for c in commands:
        state, out = update(state, c)
        effects.extend(out)
    return state, effects


def snapshot(state):
    """Everything the queries tell about a state."""
    subs = tuple(subscription(state, i) for i in subscription_ids(state))
    tomb = tuple(i for i in IDS + ["x", "a", "b"] if is_cancelled(state, i))
    return (subs, tomb, buffered_events(state), buffer_size(state), available_demand(state))


# --------------------------------------------------------------------------- a naive model


class Model:
    """A literal transcription of spec §1.1 (lists, per-event dispatch via the naive reference)."""

    def __init__(self, kind, capacity):
        self.kind = kind
        self.fn = STRATEGIES[kind][0]
        self.capacity = capacity
        self.subs = []  # [id, participant, demand, partition] in dispatch order
        self.cancelled = set()
        self.buffer = []

    def copy(self):
        m = Model(self.kind, self.capacity)
        m.subs = [list(s) for s in self.subs]
        m.cancelled = set(self.cancelled)
        m.buffer = list(self.buffer)
        return m

    def find(self, id):
        return next((s for s in self.subs if s[0] == id), None)

    def dispatch(self):
        targets = [Target(s[0], s[2], s[3]) for s in self.subs]
        if not self.buffer or not targets:
            return []
        if self.kind == "broadcast":
            cap = all(t.demand > 0 for t in targets)
        else:
            cap = any(t.demand > 0 for t in targets)
        if not cap:
            return []
        r = reference(self.kind, self.fn, targets, self.buffer)
        meta = {s[0]: s for s in self.subs}
        self.subs = [[t.id, meta[t.id][1], t.demand, t.partition] for t in r.targets]
        self.buffer = list(r.remaining)
        return [SendEvents(d.id, d.events) for d in r.deliveries]

    def remove(self, ids):
        self.subs = [s for s in self.subs if s[0] not in ids]
        self.cancelled |= set(ids)
        return [NotifyCancelled(i) for i in ids]

    def apply(self, c):
        """The effects, or raises the expected error (self is then garbage: use a copy)."""
        if type(c) is Subscribe:
            if self.find(c.id) or c.id in self.cancelled:
                raise DuplicateSubscription(c.id)
            self.subs.append([c.id, c.participant_id, 0, c.partition])
            return []
        if type(c) is Ask:
            s = self.find(c.id)
            if s is None:
                raise SubscriptionCancelled(c.id) if c.id in self.cancelled else UnknownSubscription(c.id)
            if c.n <= 0:
                raise InvalidDemand(c.n)
            s[2] += c.n
            return self.dispatch()
        if type(c) is Push:
            self.buffer.extend(c.events)
            out = self.dispatch()
            if self.capacity is not None and len(self.buffer) > self.capacity:
                raise BufferCapacityExceeded(self.capacity, len(self.buffer))
            return out
        if type(c) is Cancel:
            if self.find(c.id):
                return self.remove([c.id]) + self.dispatch()
            if c.id in self.cancelled:
                return []
            raise UnknownSubscription(c.id)
        if type(c) is ParticipantDown:
            ids = [s[0] for s in self.subs if s[1] == c.participant_id]
            return (self.remove(ids) + self.dispatch()) if ids else []
        return self.remove([s[0] for s in self.subs])

    def snapshot(self):
        subs = tuple(Subscription(*s) for s in self.subs)
        tomb = tuple(i for i in IDS + ["x", "a", "b"] if i in self.cancelled)
        return (subs, tomb, tuple(self.buffer), len(self.buffer), sum(s[2] for s in self.subs))


# --------------------------------------------------------------------------- generators

ids_st = st.sampled_from(IDS)
command_st = st.one_of(
    st.builds(Subscribe, ids_st, st.sampled_from(PARTICIPANTS), st.integers(0, 1)),
    st.builds(Subscribe, ids_st, st.sampled_from(PARTICIPANTS), st.integers(0, 1)),
    st.builds(Ask, ids_st, st.integers(-1, 6)),
    st.builds(Ask, ids_st, st.integers(1, 6)),
    st.builds(Push, st.integers(0, 6)),  # a count: numbered uniquely below
    st.builds(Push, st.integers(0, 6)),
    st.builds(Cancel, ids_st),
    st.builds(ParticipantDown, st.sampled_from(PARTICIPANTS + ["nobody"])),
    st.just(Shutdown()),
)
scenario_st = st.tuples(
    st.sampled_from(sorted(STRATEGIES)),
    st.one_of(st.none(), st.integers(1, 8)),
    st.lists(command_st, max_size=40),
)


def numbered(commands):
    """Turn each ``Push(count)`` into a push of fresh, increasing event numbers."""
    out, next_event = [], 0
    for c in commands:
        if type(c) is Push:
            c = Push(list(range(next_event, next_event + c.events)))
            next_event += len(c.events)
        out.append(c)
    return out


def play(kind, capacity, commands):
    """Run the scenario on the core and the model side by side, checking each step; a trace."""
    state = core.new(STRATEGIES[kind][1], capacity)
    model = Model(kind, capacity)
    trace = []
    for c in numbered(commands):
        before = snapshot(state)
        trial = model.copy()
        try:
            expected = ("ok", trial.apply(c))
        except StageError as e:
            expected = ("error", e)
        try:
            new_state, effects = update(state, c)
            actual = ("ok", effects)
        except StageError as e:
            actual = ("error", e)
            new_state = state
        assert expected == actual, c
        if actual[0] == "ok":
            model = trial
            state = new_state
        else:
            assert before == snapshot(state)
        assert model.snapshot() == snapshot(state)
        trace.append((c, actual))
    return state, trace


@SETTINGS
@given(scenario_st)
def test_agrees_with_the_naive_model(scenario):
    """Every transition, error and effect matches a literal transcription of the spec."""
    play(*scenario)


@SETTINGS
@given(scenario_st)
def test_laws(scenario):
    """Demand is never exceeded, nothing is lost or duplicated, order rules hold, effects are well formed."""
    kind, capacity, commands = scenario
    state, trace = play(kind, capacity, commands)
    asked, got = Counter(), {}
    pushed = []
    for c, (tag, out) in trace:
        if tag == "error":
            continue
        if type(c) is Ask:
            asked[c.id] += c.n
        if type(c) is Push:
            pushed.extend(c.events)
        seen_send = False
        for e in out:
            if type(e) is SendEvents:
                seen_send = True
                assert () != e.events
                got.setdefault(e.id, []).extend(e.events)
            else:
                assert False is seen_send  # notices come first
        sends = [e.id for e in out if type(e) is SendEvents]
        assert len(set(sends)) == len(sends)
    for i, evs in got.items():
        assert len(evs) <= asked[i]
        assert len(set(evs)) == len(evs)
        if kind != "custom":
            assert sorted(evs) == evs  # FIFO per subscription
    buffered = list(buffered_events(state))
    assert sorted(buffered) == buffered  # the buffer keeps relative order
    if kind == "broadcast":
        assert set(pushed) == set(buffered).union(*map(set, got.values()))
    else:
        delivered = [e for evs in got.values() for e in evs]
        assert sorted(pushed) == sorted(delivered + buffered)


# --------------------------------------------------------------------------- examples


def two_subs(strategy=None, capacity=None):
    return run(core.new(strategy, capacity), Subscribe("a", "p"), Subscribe("b", "q"))[0]


def test_subscribe_starts_at_zero_demand_without_dispatch():
    """Subscribe adds the subscription with demand 0 at the end of the order, with no effects."""
    state, effects = run(core.new(), Push([1]), Subscribe("a", "p", 3))
    assert [] == effects
    assert Subscription("a", "p", 0, 3) == subscription(state, "a")
    assert (1,) == buffered_events(state)
    assert ("a",) == subscription_ids(state)


def test_demand_round_robin_persists_across_commands():
    """Push [1], [2], [3] to two subscriptions: first, second, first (ADR 0004)."""
    state, _ = run(two_subs(), Ask("a", 5), Ask("b", 5))
    state, effects = run(state, Push([1]), Push([2]), Push([3]))
    expected = [SendEvents("a", (1,)), SendEvents("b", (2,)), SendEvents("a", (3,))]
    assert expected == effects


def test_ask_drains_the_buffer_fifo():
    """Ask takes events from the head of the buffer, across pushes."""
    state, _ = run(core.new(), Subscribe("a", "p"), Push([1, 2]), Push([3]))
    state, effects = update(state, Ask("a", 2))
    assert [SendEvents("a", (1, 2))] == effects
    assert (3,) == buffered_events(state)
    assert 0 == subscription(state, "a").demand


def test_round_robin_effects_in_first_delivery_order():
    """Demand round robin over [a, b] answers [Send(a), Send(b)]."""
    state, _ = run(two_subs(), Ask("a", 2), Ask("b", 2))
    _, effects = update(state, Push([1, 2, 3, 4]))
    assert [SendEvents("a", (1, 3)), SendEvents("b", (2, 4))] == effects


def test_capacity_without_subscribers():
    """Capacity 2, no subscribers: push [1, 2] is fine, push [3] fails with (2, 3) and buffers nothing."""
    state, _ = update(core.new(buffer_capacity=2), Push([1, 2]))
    with pytest.raises(BufferCapacityExceeded) as info:
        update(state, Push([3]))
    assert BufferCapacityExceeded(2, 3) == info.value
    assert (2, 3) == (info.value.capacity, info.value.attempted)
    assert (1, 2) == buffered_events(state)


def test_capacity_is_checked_after_immediate_dispatch():
    """Capacity 2 with demand 3: push [1, 2, 3] is delivered whole."""
    state, _ = run(core.new(buffer_capacity=2), Subscribe("a", "p"), Ask("a", 3))
    state, effects = update(state, Push([1, 2, 3]))
    assert [SendEvents("a", (1, 2, 3))] == effects
    assert 0 == buffer_size(state)


def test_rejected_push_delivers_nothing():
    """Capacity 1, demand 1: push [1, 2, 3] fails with (1, 2); nothing is delivered or buffered."""
    state, _ = run(core.new(buffer_capacity=1), Subscribe("a", "p"), Ask("a", 1))
    with pytest.raises(BufferCapacityExceeded) as info:
        update(state, Push([1, 2, 3]))
    assert BufferCapacityExceeded(1, 2) == info.value
    assert 0 == buffer_size(state)
    assert 1 == subscription(state, "a").demand


def test_ask_errors():
    """Unknown, cancelled and non-positive asks fail with their own errors."""
    state, _ = run(core.new(), Subscribe("a", "p"), Subscribe("b", "p"), Cancel("b"))
    for command, error in [
        (Ask("x", 1), UnknownSubscription("x")),
        (Ask("b", 1), SubscriptionCancelled("b")),
        (Ask("b", 0), SubscriptionCancelled("b")),
        (Ask("a", 0), InvalidDemand(0)),
        (Ask("a", -2), InvalidDemand(-2)),
        (Ask("a", 1.5), InvalidDemand(1.5)),
        (Ask("a", True), InvalidDemand(True)),
    ]:
        with pytest.raises(StageError) as info:
            update(state, command)
        assert error == info.value


def test_tombstones_last_forever():
    """A cancelled id can never be subscribed again, even after shutdown."""
    state, _ = run(core.new(), Subscribe("a", "p"), Cancel("a"), Shutdown())
    with pytest.raises(DuplicateSubscription) as info:
        update(state, Subscribe("a", "q"))
    assert DuplicateSubscription("a") == info.value
    assert True is is_cancelled(state, "a")
    with pytest.raises(SubscriptionCancelled):
        subscription(state, "a")
    with pytest.raises(UnknownSubscription):
        subscription(state, "x")


def test_duplicate_active_subscription():
    """Subscribing an active id again fails."""
    state, _ = update(core.new(), Subscribe("a", "p"))
    with pytest.raises(DuplicateSubscription):
        update(state, Subscribe("a", "p"))


def test_cancel_is_idempotent_and_unknown_fails():
    """Cancelling a tombstone answers the same state and no effects; an unknown id fails."""
    state, effects = run(core.new(), Subscribe("a", "p"), Cancel("a"))
    assert [NotifyCancelled("a")] == effects
    again, effects = update(state, Cancel("a"))
    assert [] == effects
    assert state is again
    with pytest.raises(UnknownSubscription):
        update(state, Cancel("x"))


def test_cancelling_the_slow_broadcast_subscriber_releases_events():
    """Broadcast is a strict barrier; cancelling the laggard sends the notice first, then the events."""
    state, _ = run(two_subs(broadcast()), Ask("a", 3))
    state, effects = update(state, Push([1, 2]))
    assert [] == effects
    state, effects = update(state, Cancel("b"))
    assert [NotifyCancelled("b"), SendEvents("a", (1, 2))] == effects


def test_broadcast_deliveries_in_target_order():
    """Broadcast gives every subscription the same events, in dispatch order."""
    state, _ = run(two_subs(broadcast()), Ask("b", 2), Ask("a", 1))
    _, effects = update(state, Push([7, 8]))
    assert [SendEvents("a", (7,)), SendEvents("b", (7,))] == effects


def test_participant_down_cancels_its_subscriptions_in_dispatch_order():
    """All of a participant's subscriptions are tombstoned in dispatch order, notices before deliveries."""
    state, _ = run(
        core.new(),
        Subscribe("a", "p"),
        Subscribe("b", "q"),
        Subscribe("c", "p"),
        Push([1, 2, 3]),
    )
    state, _ = run(state, Ask("b", 3))
    state, _ = run(state, Push([4]), Ask("a", 1))
    assert ("b", "c", "a") == subscription_ids(state)
    state, effects = update(state, ParticipantDown("p"))
    assert [NotifyCancelled("c"), NotifyCancelled("a")] == effects
    assert ("b",) == subscription_ids(state)
    assert (True, True) == (is_cancelled(state, "a"), is_cancelled(state, "c"))
    assert [] == update(state, ParticipantDown("nobody"))[1]


def test_participant_down_releases_a_broadcast_barrier():
    """The death of the laggard's participant lets the others get the buffer."""
    state, _ = run(two_subs(broadcast()), Ask("a", 2), Push([1]))
    state, effects = update(state, ParticipantDown("q"))
    assert [NotifyCancelled("b"), SendEvents("a", (1,))] == effects


def test_shutdown_cancels_all_keeps_the_buffer_and_does_not_dispatch():
    """Shutdown notices every subscription in dispatch order, delivers nothing, keeps the buffer."""
    state, _ = run(two_subs(), Push([1, 2]))
    state, effects = update(state, Shutdown())
    assert [NotifyCancelled("a"), NotifyCancelled("b")] == effects
    assert (1, 2) == buffered_events(state)
    assert () == subscription_ids(state)
    assert 0 == available_demand(state)


def test_outstanding_demand_is_discarded_on_cancel():
    """The demand of a cancelled subscription no longer counts."""
    state, _ = run(two_subs(), Ask("a", 4), Ask("b", 1), Cancel("a"))
    assert 1 == available_demand(state)


def test_partition_keeps_unowned_events_and_counts_them_against_capacity():
    """An event no subscriber owns stays buffered, counts against capacity, and goes once an owner asks."""
    state, _ = run(core.new(partition(key), 1), Subscribe("even", "p", 0), Ask("even", 5))
    state, effects = update(state, Push([1, 2, 4]))
    assert [SendEvents("even", (2, 4))] == effects
    assert (1,) == buffered_events(state)
    with pytest.raises(BufferCapacityExceeded):
        update(state, Push([3]))
    state, effects = run(state, Subscribe("odd", "q", 1), Ask("odd", 1))
    assert [SendEvents("odd", (1,))] == effects


def test_custom_unsafe_picks_stay_buffered_in_order():
    """A selector naming a cancelled or unknown id, or None, leaves events buffered in order."""
    picks = {1: "a", 2: "gone", 3: None, 4: "a", 5: "nobody"}
    strategy = custom(lambda targets, e: picks[e])
    state, _ = run(core.new(strategy), Subscribe("a", "p"), Subscribe("gone", "p"), Cancel("gone"))
    state, effects = run(state, Ask("a", 1), Push([2, 1, 3, 4, 5]))
    assert [SendEvents("a", (1,))] == effects
    assert (2, 3, 4, 5) == buffered_events(state)
    state, effects = update(state, Ask("a", 5))
    assert [SendEvents("a", (4,))] == effects
    assert (2, 3, 5) == buffered_events(state)


def test_states_are_immutable_values():
    """update never changes the state it was given, and a state refuses attribute writes."""
    state = two_subs()
    before = snapshot(state)
    run(state, Ask("a", 2), Push([1, 2, 3]), Cancel("b"))
    assert before == snapshot(state)
    with pytest.raises(AttributeError):
        state._order = ()


def test_large_backlog_drains_in_order():
    """Many pushes, then small asks: the buffer serves its head in FIFO order."""
    state = core.new()
    for k in range(200):
        state, _ = update(state, Push(range(k * 7, k * 7 + 7)))
    state, _ = update(state, Subscribe("a", "p"))
    got = []
    while buffer_size(state):
        state, effects = update(state, Ask("a", 13))
        got.extend(effects[0].events)
    assert list(range(1400)) == got


class _Count(int):
    """An int subclass: not an int for the buffer-capacity rule."""


# Every entry point (core.new, constellation.start, worker_pool.start) is shown
# to refuse these with the one error; the rule itself is pinned by the law below.
BAD_CAPACITIES = [0, -1, True, False, 1.0, "3", _Count(2)]


@SETTINGS
@given(
    st.one_of(
        st.none(),
        st.integers(-3, 10**12),
        st.booleans(),
        st.floats(allow_nan=False),
        st.text(max_size=2),
        st.integers(1, 5).map(_Count),
    )
)
def test_the_buffer_capacity_rule(capacity):
    """The one rule: None or an int > 0 is kept as is; anything else raises InvalidBufferCapacity(capacity).

    core.new follows it exactly (it is where the stage and the pool get their state).
    """
    if capacity is None or (type(capacity) is int and capacity > 0):
        assert capacity is core.check_buffer_capacity(capacity)
        assert capacity == core.buffer_capacity(core.new(None, capacity))
        return
    with pytest.raises(core.InvalidBufferCapacity) as checked:
        core.check_buffer_capacity(capacity)
    with pytest.raises(core.InvalidBufferCapacity) as made:
        core.new(None, capacity)
    assert core.InvalidBufferCapacity(capacity) == checked.value == made.value
    assert capacity is checked.value.capacity is checked.value.value


def test_invalid_buffer_capacity_is_a_config_error_that_pickles():
    """The one error class: a ValueError and a ConfigError, equal by value, pickles, says the rule."""
    err = core.InvalidBufferCapacity(0)
    assert isinstance(err, core.ConfigError) and isinstance(err, ValueError)
    assert err == pickle.loads(pickle.dumps(err))
    assert "InvalidBufferCapacity(0)" == repr(err)
    assert "None or an int > 0" in str(err)


def test_bad_configuration_and_commands():
    """new refuses a bad capacity and a non-strategy; update refuses a non-command."""
    for capacity in BAD_CAPACITIES:
        with pytest.raises(core.InvalidBufferCapacity):
            core.new(buffer_capacity=capacity)
    with pytest.raises(TypeError):
        core.new("demand")
    with pytest.raises(TypeError):
        update(core.new(), ("push", [1]))


def test_errors_compare_pickle_and_explain():
    """Errors are equal by type and fields, survive pickling, and say what went wrong."""
    for e in [
        InvalidDemand(0),
        UnknownSubscription("x"),
        DuplicateSubscription("x"),
        SubscriptionCancelled("x"),
        BufferCapacityExceeded(2, 3),
    ]:
        assert e == pickle.loads(pickle.dumps(e))
        assert True is isinstance(e, StageError)
        assert "" != str(e)
    assert UnknownSubscription("x") != SubscriptionCancelled("x")
    assert "capacity 2" in str(BufferCapacityExceeded(2, 3))


# --------------------------------------------------------------------------- the buffer and the batched ask

chunk_sizes_st = st.lists(st.integers(0, 12), max_size=12)


def _pushed(sizes):
    """A buffer made by pushes of the given sizes (fresh increasing numbers), and its events."""
    buffer, events = core._EMPTY, []
    for size in sizes:
        chunk = tuple(range(len(events), len(events) + size))
        buffer = buffer.push(chunk)
        events.extend(chunk)
    return buffer, events


@SETTINGS
@given(
    chunk_sizes_st,
    st.integers(1, 16),
    st.integers(1, 14),
    st.lists(st.integers(0, 14), max_size=8),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=4),
)
def test_the_buffer_is_a_fifo_whatever_the_merging(sizes, merge_below, append_from, cuts, peeks):
    """Pushes then drops, splits and peeks keep FIFO order and the size, whatever chunk sizes stop merging and compacting."""
    saved = core._MERGE_BELOW, core._APPEND_FROM
    core._MERGE_BELOW, core._APPEND_FROM = merge_below, append_from
    try:
        buffer, events = _pushed(sizes)
        assert (tuple(events), len(events)) == (buffer.to_tuple(), buffer.size)
        for start, k in peeks:
            assert tuple(events[start : start + k]) == buffer.peek(start, k)
        for k in cuts:
            head, rest = buffer.split(k)
            assert (buffer.take(k), buffer.drop(k).to_tuple()) == (head, rest.to_tuple())
            assert tuple(events[k : 2 * k + 1]) == buffer.peek(k, k + 1)
            assert (tuple(events[:k]), len(events[k:])) == (head, rest.size)
            buffer, events = rest, events[k:]
    finally:
        core._MERGE_BELOW, core._APPEND_FROM = saved


asks_st = st.lists(st.tuples(st.sampled_from(IDS[:3] + ["x"]), st.integers(0, 4)), max_size=6)


@st.composite
def backlog_st(draw):
    """A state with some subscriptions (no demand yet) over a backlog, maybe a tombstone, and the commands."""
    kind = draw(st.sampled_from(sorted(STRATEGIES)))
    commands = [Subscribe(i, PARTICIPANTS[k % 2], k % 2) for k, i in enumerate(IDS[: draw(st.integers(0, 3))])]
    commands.append(Push(draw(st.integers(0, 12))))
    commands.extend(draw(st.lists(st.sampled_from([Cancel("s0"), Ask("s1", 1), Push(3)]), max_size=2)))
    return kind, commands


@SETTINGS
@given(backlog_st(), asks_st)
def test_ask_all_is_the_fold_of_asks(backlog, asks):
    """core._ask_all answers the last state and all deliveries of one Ask per pair, or the fold's first error."""
    kind, commands = backlog
    state, _ = play(kind, None, commands)
    before = snapshot(state)
    expected_state, expected = state, []
    try:
        for id_, n in asks:
            expected_state, out = update(expected_state, Ask(id_, n))
            expected.extend(out)
        expected = ("ok", expected, snapshot(expected_state))
    except StageError as err:
        expected = ("error", err)
    try:
        got_state, sent = core._ask_all(state, asks)
        actual = ("ok", [SendEvents(i, evs) for i, evs in sent], snapshot(got_state))
    except StageError as err:
        actual = ("error", err)
    assert expected == actual
    assert before == snapshot(state)


@SETTINGS
@given(scenario_st)
def test_the_steps_agree_with_update(scenario):
    """The raw steps the runtime calls answer what update answers, effects in their raw form."""
    kind, capacity, commands = scenario
    state = core.new(STRATEGIES[kind][1], capacity)
    for c in numbered(commands):
        try:
            expected_state, expected = update(state, c)
            expected = ("ok", expected, snapshot(expected_state))
        except StageError as err:
            expected, expected_state = ("error", err), state
        t = type(c)
        try:
            if t is Subscribe:
                got, gone, sent = core._subscribe(state, c.id, c.participant_id, c.partition), [], []
            elif t is Ask:
                (got, sent), gone = core._ask(state, c.id, c.n), []
            elif t is Push:
                (got, sent), gone = core._push(state, c.events), []
            elif t is Cancel:
                got, gone, sent = core._cancel(state, c.id)
            elif t is ParticipantDown:
                got, gone, sent = core._participant_down(state, c.participant_id)
            else:
                (got, gone), sent = core._shutdown(state), []
            effects = [NotifyCancelled(i) for i in gone] + [SendEvents(i, evs) for i, evs in sent]
            actual = ("ok", effects, snapshot(got))
        except StageError as err:
            actual = ("error", err)
        assert expected == actual
        state = expected_state
