"""Laws and ADR 0004 examples for constellation.dispatch (spec §1.1, §3 items 4 and 5)."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constellation.dispatch import (
    Delivery,
    DispatchResult,
    Target,
    broadcast,
    custom,
    demand,
    dispatch,
    has_capacity,
    partition,
    window,
)

SETTINGS = settings(max_examples=100, deadline=None)


# A naive, per-event transcription of the spec's rules: the optimised
# engine must agree with it exactly (targets, deliveries, remaining).


def _deliver(deliveries, i, event):
    for pos, (j, evs) in enumerate(deliveries):
        if j == i:
            deliveries[pos] = (j, evs + (event,))
            return
    deliveries.append((i, (event,)))


def reference(kind, fn, targets, events):
    ts = [[t.id, t.demand, t.partition] for t in targets]
    deliveries = []
    remaining = []
    if kind == "broadcast":
        count = min([len(events)] + [t[1] for t in ts]) if ts else 0
        for t in ts:
            t[1] -= count
        if count:
            deliveries = [(t[0], tuple(events[:count])) for t in ts]
        remaining = list(events[count:])
    elif kind == "demand":
        for pos, event in enumerate(events):
            k = next((k for k, t in enumerate(ts) if t[1] > 0), None)
            if k is None:
                remaining = list(events[pos:])
                break
            sel = ts[k]
            sel[1] -= 1
            _deliver(deliveries, sel[0], event)
            ts = ts[k + 1 :] + ts[:k] + [sel]
    elif kind == "partition":
        for event in events:
            want = fn(event)
            k = next((k for k, t in enumerate(ts) if t[1] > 0 and t[2] == want), None)
            if k is None:
                remaining.append(event)
                continue
            sel = ts.pop(k)
            sel[1] -= 1
            ts.append(sel)
            _deliver(deliveries, sel[0], event)
    else:
        for event in events:
            pick = fn(tuple(Target(*t) for t in ts), event)
            sel = next((t for t in ts if pick is not None and t[0] == pick and t[1] > 0), None)
            if sel is None:
                remaining.append(event)
                continue
            sel[1] -= 1
            _deliver(deliveries, sel[0], event)
    return DispatchResult(
        tuple(Target(*t) for t in ts),
        tuple(Delivery(i, evs) for i, evs in deliveries),
        tuple(remaining),
    )


def key(event):
    return event % 3


def pick_by_event(targets, event):
    """Selects target number ``event`` (mod len + 1, the extra slot meaning an unknown id)."""
    if not targets:
        return None
    k = event % (len(targets) + 2)
    if k == len(targets):
        return "nobody"
    if k == len(targets) + 1:
        return None
    return targets[k].id


STRATEGIES = [
    ("demand", None, demand()),
    ("broadcast", None, broadcast()),
    ("partition", key, partition(key)),
    ("custom", pick_by_event, custom(pick_by_event)),
]


@st.composite
def targets_st(draw):
    n = draw(st.integers(0, 5))
    return [Target(f"s{i}", draw(st.integers(0, 6)), draw(st.integers(0, 3))) for i in range(n)]


events_st = st.lists(st.integers(0, 1000), max_size=30)
strategy_st = st.sampled_from(STRATEGIES)


@SETTINGS
@given(strategy_st, targets_st(), events_st)
def test_agrees_with_the_naive_transcription(strat, targets, events):
    """The engine answers exactly what a per-event reading of the spec answers."""
    kind, fn, s = strat
    assert reference(kind, fn, targets, events) == dispatch(s, targets, events)


@SETTINGS
@given(strategy_st, targets_st(), events_st)
def test_demand_safety_and_conservation(strat, targets, events):
    """No target gets more than its demand, demand drops by what it got, nothing is lost or duplicated."""
    _, _, s = strat
    r = dispatch(s, targets, events)
    before = {t.id: t.demand for t in targets}
    after = {t.id: t.demand for t in r.targets}
    assert sorted(before) == sorted(after)
    got = Counter()
    for d in r.deliveries:
        assert () != d.events
        assert d.id in before
        got[d.id] += len(d.events)
    for i in before:
        assert before[i] - got[i] == after[i]
        assert after[i] >= 0
    if s == broadcast():
        delivered = list(r.deliveries[0].events) if r.deliveries else []
    else:
        delivered = [e for d in r.deliveries for e in d.events]
    assert Counter(events) == Counter(delivered) + Counter(r.remaining)


def _is_subsequence(sub, seq):
    it = iter(seq)
    return all(any(x == y for y in it) for x in sub)


@SETTINGS
@given(strategy_st, targets_st(), st.lists(st.integers(0, 1000), max_size=30, unique=True))
def test_order_is_kept(strat, targets, events):
    """Each delivery and the remaining events are subsequences of the input (FIFO, relative order)."""
    _, _, s = strat
    r = dispatch(s, targets, events)
    for d in r.deliveries:
        assert True is _is_subsequence(d.events, events)
    assert True is _is_subsequence(r.remaining, events)


@SETTINGS
@given(targets_st(), events_st)
def test_demand_takes_a_prefix_and_rotates_cyclically(targets, events):
    """Demand dispatch delivers a prefix of ``min(len, total demand)`` events and only rotates the order."""
    r = dispatch(demand(), targets, events)
    taken = min(len(events), sum(t.demand for t in targets))
    assert tuple(events[taken:]) == r.remaining
    ids = [t.id for t in targets]
    new = [t.id for t in r.targets]
    assert True is any(ids[k:] + ids[:k] == new for k in range(max(1, len(ids))))


@SETTINGS
@given(targets_st(), events_st)
def test_broadcast_is_a_strict_barrier(targets, events):
    """Everyone gets the same head of ``min(len, min demand)`` events, in target order, order unchanged."""
    r = dispatch(broadcast(), targets, events)
    count = min([len(events)] + [t.demand for t in targets]) if targets else 0
    expected = tuple(Delivery(t.id, tuple(events[:count])) for t in targets) if count else ()
    assert expected == r.deliveries
    assert tuple(events[count:]) == r.remaining
    assert [t.id for t in targets] == [t.id for t in r.targets]


@SETTINGS
@given(targets_st(), events_st)
def test_partition_respects_keys_and_blocks_no_line(targets, events):
    """Each event goes to an owner of its partition; a remaining event had no owner with demand left."""
    r = dispatch(partition(key), targets, events)
    owner = {t.id: t.partition for t in targets}
    for d in r.deliveries:
        assert all(owner[d.id] == key(e) for e in d.events)
    left = {t.partition for t in r.targets if t.demand > 0}
    for e in r.remaining:
        assert key(e) not in left


@SETTINGS
@given(targets_st(), events_st)
def test_custom_never_rotates(targets, events):
    """The custom strategy keeps the target order."""
    r = dispatch(custom(pick_by_event), targets, events)
    assert [t.id for t in targets] == [t.id for t in r.targets]


@SETTINGS
@given(strategy_st, targets_st())
def test_has_capacity(strat, targets):
    """Broadcast needs every target to have demand; the others need any target to have some."""
    kind, _, s = strat
    if kind == "broadcast":
        expected = bool(targets) and all(t.demand > 0 for t in targets)
    else:
        expected = any(t.demand > 0 for t in targets)
    assert expected == has_capacity(s, targets)


@SETTINGS
@given(strategy_st, targets_st(), events_st)
def test_window_is_all_a_dispatch_can_use(strat, targets, events):
    """Dispatching the window and keeping the rest behind it answers what dispatching everything does.

    0 means no capacity; a bounded window (demand: the demand's sum, broadcast:
    its minimum) leaves its own tail; None (partition, custom) takes all.
    """
    kind, _, s = strat
    demands = [t.demand for t in targets]
    w = window(s, demands)
    assert (w != 0) == has_capacity(s, targets)
    anyone = any(d > 0 for d in demands)
    expected = {"demand": sum(demands), "broadcast": min(demands, default=0)}.get(kind, None if anyone else 0)
    assert expected == w
    whole = dispatch(s, targets, events)
    if w == 0:
        assert tuple(events) == whole.remaining and () == whole.deliveries
        return
    head = events if w is None else events[:w]
    part = dispatch(s, targets, head)
    assert whole == DispatchResult(part.targets, part.deliveries, part.remaining + tuple(events[len(head) :]))
    if w is not None:
        assert part.remaining == tuple(head[len(head) - len(part.remaining) :])


def test_demand_round_robin_example():
    """Round robin over [a, b] delivers a first, then b; the order rotates past the last pick."""
    r = dispatch(demand(), [Target("a", 2), Target("b", 2)], [1, 2, 3])
    assert (Delivery("a", (1, 3)), Delivery("b", (2,))) == r.deliveries
    assert (Target("b", 1), Target("a", 0)) == r.targets
    assert () == r.remaining


def test_demand_skips_targets_without_demand():
    """A target without demand is skipped and ends up before the selected one."""
    r = dispatch(demand(), [Target("a", 0), Target("b", 1), Target("c", 0)], [1, 2])
    assert (Delivery("b", (1,)),) == r.deliveries
    assert ("c", "a", "b") == tuple(t.id for t in r.targets)
    assert (2,) == r.remaining


def test_partition_round_robins_owners_without_head_of_line_blocking():
    """Owners of a partition take turns; an unowned event does not block later ones."""
    targets = [Target("a", 5, 0), Target("b", 5, 0), Target("c", 5, 1)]
    r = dispatch(partition(lambda e: e[0]), targets, [(2, "x"), (0, 1), (1, 2), (0, 3), (0, 4)])
    expected = (
        Delivery("a", ((0, 1), (0, 4))),
        Delivery("c", ((1, 2),)),
        Delivery("b", ((0, 3),)),
    )
    assert expected == r.deliveries
    assert ((2, "x"),) == r.remaining


def test_custom_sees_decremented_demand_and_unsafe_picks_stay_buffered():
    """The selector sees demand already taken; unknown, None and zero-demand picks leave the event buffered."""
    seen = []

    def select(targets, event):
        seen.append(tuple(t.demand for t in targets))
        return {"a": "a", "z": "zz", "n": None}[event]

    r = dispatch(custom(select), [Target("a", 1), Target("b", 3)], ["a", "z", "a", "n"])
    assert (Delivery("a", ("a",)),) == r.deliveries
    assert ("z", "a", "n") == r.remaining
    assert [(1, 3), (0, 3), (0, 3), (0, 3)] == seen


def test_bad_arguments():
    """Non-callable keys and selectors, bad targets and non-strategies are refused."""
    with pytest.raises(TypeError):
        partition(3)
    with pytest.raises(TypeError):
        custom(None)
    with pytest.raises(TypeError):
        dispatch("demand", [], [])
    with pytest.raises(ValueError):
        dispatch(demand(), [Target("a", -1)], [])
    with pytest.raises(ValueError):
        dispatch(demand(), [Target("a", 1), Target("a", 1)], [])


def test_selector_exceptions_propagate():
    """An exception from ``select`` or ``key`` reaches the caller unchanged."""

    def boom(*_):
        raise KeyError("boom")

    with pytest.raises(KeyError):
        dispatch(custom(boom), [Target("a", 1)], [1])
    with pytest.raises(KeyError):
        dispatch(partition(boom), [Target("a", 1)], [1])


# --------------------------------------------------------------------------
# Engines: a strategy over a core buffer
# --------------------------------------------------------------------------


@st.composite
def mostly_idle_targets_st(draw):
    """Targets most of which have no demand (a consumer renewing its own demand while the rest are busy)."""
    n = draw(st.integers(0, 5))
    demand_st = st.sampled_from([0, 0, 0, 1, 2, 5])
    return [Target(f"s{i}", draw(demand_st), draw(st.integers(0, 3))) for i in range(n)]


@pytest.mark.parametrize("strat", STRATEGIES, ids=[s[0] for s in STRATEGIES])
@SETTINGS
@given(
    st.one_of(targets_st(), mostly_idle_targets_st()),
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=8), max_size=5),
)
def test_an_engine_answers_what_dispatch_answers(strat, targets, pushes):
    """The core's engine of a strategy answers dispatch over the whole buffer; the rest stays, in order."""
    from constellation import core
    from constellation.dispatch import _engine

    _, _, s = strat
    buffer = core._EMPTY
    for chunk in pushes:
        buffer = buffer.push(tuple(chunk))
    events = buffer.to_tuple()
    expected = dispatch(s, targets, events)
    demands = {t.id: t.demand for t in targets}
    partitions = {t.id: t.partition for t in targets}
    order, rest, deliveries = _engine(s)(tuple(t.id for t in targets), demands, partitions, buffer)
    actual = DispatchResult(
        tuple(Target(i, demands[i], partitions[i]) for i in order),
        tuple(Delivery(i, evs) for i, evs in deliveries),
        rest.to_tuple(),
    )
    assert expected == actual
    assert events == buffer.to_tuple()  # the buffer given is a value: untouched


@SETTINGS
@given(
    st.integers(1, 5),
    st.lists(st.integers(1, 40), min_size=1, max_size=4),
    st.integers(0, 30),
    st.lists(st.tuples(st.integers(0, 4), st.integers(1, 12)), max_size=6),
)
def test_the_demand_asks_engine_renewing_idle_targets_is_the_fold(n, chunks, dropped, picks):
    """A worker pool's round: no target has demand and each ask renews one; the asks often fit in
    the head chunk (served as consecutive slices of it) and sometimes run past it: the fold's answer."""
    from constellation import core
    from constellation.dispatch import _asks_engine, _engine

    s = demand()
    buffer = core._EMPTY
    saved = core._APPEND_FROM
    core._APPEND_FROM = 1  # every push a chunk of its own
    try:
        for k, size in enumerate(chunks):
            buffer = buffer.push(tuple(range(100 * k, 100 * k + size)))
    finally:
        core._APPEND_FROM = saved
    buffer = buffer.drop(min(dropped, buffer.size - 1))
    ids = [f"s{i}" for i in range(n)]
    asks = [(ids[k % n], m) for k, m in picks]
    order = tuple(ids)
    demands, folded, sent = dict.fromkeys(ids, 0), (order, buffer), []
    for i, m in asks:
        demands[i] += m
        if folded[1].size:
            o, b, out = _engine(s)(folded[0], demands, {}, folded[1])
            folded = (o, b)
            sent += out
    expected = (folded[0], folded[1].to_tuple(), sent, demands)
    demands = dict.fromkeys(ids, 0)
    o, b, out = _asks_engine(s)(order, demands, {}, buffer, asks)
    assert expected == (o, b.to_tuple(), out, demands)
    assert b.size == len(b.to_tuple())


@pytest.mark.parametrize("strat", STRATEGIES, ids=[s[0] for s in STRATEGIES])
@SETTINGS
@given(
    st.one_of(targets_st(), mostly_idle_targets_st()),
    st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=8), max_size=5),
    st.lists(st.tuples(st.integers(0, 4), st.integers(1, 6)), max_size=6),
    st.integers(1, 9),
)
def test_an_asks_engine_is_the_fold_of_the_engine(strat, targets, pushes, picks, append_from):
    """A run of asks answers what adding each ask's demand and running the engine, in turn, answers.

    Whatever the buffer's chunks: pushes of ``append_from`` events or more stay chunks of their own.
    """
    from constellation import core
    from constellation.dispatch import _asks_engine, _engine

    _, _, s = strat
    buffer = core._EMPTY
    saved = core._APPEND_FROM
    core._APPEND_FROM = append_from
    try:
        for chunk in pushes:
            buffer = buffer.push(tuple(chunk))
    finally:
        core._APPEND_FROM = saved
    asks = [(targets[k % len(targets)].id, n) for k, n in picks] if targets else []
    order = tuple(t.id for t in targets)
    partitions = {t.id: t.partition for t in targets}

    demands, folded, sent = {t.id: t.demand for t in targets}, (order, buffer), []
    for i, n in asks:
        demands[i] += n
        if folded[1].size:
            o, b, out = _engine(s)(folded[0], demands, partitions, folded[1])
            folded = (o, b)
            sent += out
    expected = (folded[0], folded[1].to_tuple(), sent, demands)

    demands = {t.id: t.demand for t in targets}
    o, b, out = _asks_engine(s)(order, demands, partitions, buffer, asks)
    assert expected == (o, b.to_tuple(), out, demands)
