"""constellation.source: the pure grant rules (_source_core) and sources attached to a pool."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
from constellation import _source_core as sc
from constellation import core, runtime
from constellation import source
from constellation import worker_pool as wp
from constellation.source import (
    Accepted,
    DemandGrant,
    DemandGranted,
    Duplicate,
    GrantRevoked,
    SourceStopped,
    StaleGrant,
)

# -- the pure rules ------------------------------------------------------------------------


def _granted(capacity):
    return sc.reconcile(sc.new(), capacity)


def test_first_grant_is_id_1_of_the_whole_capacity():
    """Reconciling a new reservation to 8 grants id 1 of 8."""
    r, actions = _granted(8)
    assert ([sc.GrantCapacity(1, 8)], 8) == (actions, sc.pending(r))


def test_no_regrant_while_capacity_equals_pending():
    """A capacity already granted grants nothing more."""
    r, _ = _granted(8)
    assert (r, []) == sc.reconcile(r, 8)


def test_more_capacity_grants_only_the_difference():
    """Capacity above pending grants the unreserved difference."""
    r, _ = _granted(8)
    assert [sc.GrantCapacity(2, 3)] == sc.reconcile(r, 11)[1]


def test_less_capacity_revokes_all_and_regrants():
    """Capacity below pending revokes every open grant (original amounts) and grants the capacity."""
    r, _ = _granted(8)
    r, _ = sc.reconcile(r, 11)
    r, _ = sc.supply(r, 1, 0, 2)
    assert [sc.RevokeGrant(1, 8), sc.RevokeGrant(2, 3), sc.GrantCapacity(3, 4)] == sc.reconcile(r, 4)[1]


def test_negative_capacity_counts_as_zero():
    """A negative capacity revokes and grants nothing."""
    r, _ = _granted(2)
    r, actions = sc.reconcile(r, -3)
    assert ([sc.RevokeGrant(1, 2)], 0) == (actions, sc.pending(r))


def test_partial_supplies_advance_the_offset():
    """Two partial supplies of a grant of 8: Accepted(2, 6) then Accepted(8, 0)."""
    r, _ = _granted(8)
    r, a = sc.supply(r, 1, 0, 2)
    r, b = sc.supply(r, 1, 2, 6)
    assert (Accepted(2, 6), Accepted(8, 0), ()) == (a, b, r.grants)


def test_empty_supply_is_accepted_and_changes_nothing():
    """A supply of no events at the expected offset is Accepted(offset, remaining)."""
    r, _ = _granted(8)
    r, _ = sc.supply(r, 1, 0, 3)
    assert (r, Accepted(3, 5)) == sc.supply(r, 1, 3, 0)


def test_contained_retry_is_duplicate():
    """A retry inside the accepted range is Duplicate and changes nothing."""
    r, _ = _granted(8)
    r, _ = sc.supply(r, 1, 0, 4)
    assert ((r, Duplicate()), (r, Duplicate())) == (sc.supply(r, 1, 0, 4), sc.supply(r, 1, 1, 2))


def test_completed_grant_retry_is_duplicate():
    """Retrying a fully supplied grant is Duplicate."""
    r, _ = _granted(2)
    r, _ = sc.supply(r, 1, 0, 2)
    assert Duplicate() == sc.supply(r, 1, 0, 2)[1]


def test_completed_window_is_64():
    """A grant completed 65 grants ago is stale, 64 ago is still a duplicate."""
    r = sc.new()
    for _ in range(65):
        r, (grant,) = sc.reconcile(r, 1)
        r, _ = sc.supply(r, grant.id, 0, 1)
    assert (StaleGrant(), Duplicate()) == (sc.supply(r, 1, 0, 1)[1], sc.supply(r, 2, 0, 1)[1])


def test_partial_overlap_raises():
    """A supply starting inside the accepted range and running past it raises OffsetOverlap."""
    r, _ = _granted(8)
    r, _ = sc.supply(r, 1, 0, 3)
    with pytest.raises(sc.OffsetOverlap) as info:
        sc.supply(r, 1, 2, 3)
    assert sc.OffsetOverlap(3, 5) == info.value


def test_gap_raises():
    """A supply past the next offset raises OffsetGap(expected, provided)."""
    r, _ = _granted(8)
    with pytest.raises(sc.OffsetGap) as info:
        sc.supply(r, 1, 1, 1)
    assert sc.OffsetGap(0, 1) == info.value


def test_too_many_raises():
    """A supply larger than the remainder raises GrantExceeded(remaining, provided)."""
    r, _ = _granted(4)
    r, _ = sc.supply(r, 1, 0, 1)
    with pytest.raises(sc.GrantExceeded) as info:
        sc.supply(r, 1, 1, 4)
    assert sc.GrantExceeded(3, 4) == info.value


def test_unknown_or_revoked_grant_is_stale():
    """A grant never issued, or revoked, is StaleGrant."""
    r, _ = _granted(4)
    revoked, _ = sc.unavailable(r)
    assert (StaleGrant(), StaleGrant()) == (sc.supply(r, 9, 0, 1)[1], sc.supply(revoked, 1, 0, 1)[1])


def test_unavailable_then_available():
    """unavailable revokes and grants nothing more; available grants the capacity again."""
    r, _ = _granted(4)
    r, revoked = sc.unavailable(r)
    quiet = sc.reconcile(r, 10)[1]
    r, granted = sc.available(r, 10)
    assert ([sc.RevokeGrant(1, 4)], [], [sc.GrantCapacity(2, 10)]) == (revoked, quiet, granted)


def test_shutdown_revokes_then_stops_for_good():
    """shutdown revokes open grants, then StopSource; afterwards nothing is granted and supplies are stale."""
    r, _ = _granted(4)
    r, actions = sc.shutdown(r)
    assert [sc.RevokeGrant(1, 4), sc.StopSource()] == actions
    assert ([], [], StaleGrant()) == (sc.reconcile(r, 5)[1], sc.available(r, 5)[1], sc.supply(r, 1, 0, 1)[1])


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("reconcile"), st.integers(-3, 20)),
        st.tuples(st.just("supply"), st.integers(0, 12), st.integers(0, 12), st.integers(0, 12)),
        st.tuples(st.just("unavailable")),
        st.tuples(st.just("available"), st.integers(0, 20)),
        st.tuples(st.just("shutdown")),
    ),
    max_size=40,
)


def _step(r, op):
    kind = op[0]
    if kind == "reconcile":
        return sc.reconcile(r, op[1])
    if kind == "supply":
        return sc.supply(r, *op[1:])[0], []
    if kind == "unavailable":
        return sc.unavailable(r)
    if kind == "available":
        return sc.available(r, op[1])
    return sc.shutdown(r)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_law_grants_stay_within_their_amount_and_ids_grow(ops):
    """No grant is ever supplied beyond its amount; granted ids strictly increase from 1."""
    r = sc.new()
    issued = []
    for op in ops:
        try:
            r, actions = _step(r, op)
        except sc.SupplyProtocol:
            continue
        issued += [a.id for a in actions if type(a) is sc.GrantCapacity]
        assert all(0 <= g.supplied < g.amount for g in r.grants)
    assert issued == sorted(set(issued)) and all(i >= 1 for i in issued)


@settings(max_examples=200, deadline=None)
@given(_ops, st.integers(0, 20))
def test_law_reconcile_makes_pending_the_capacity(ops, capacity):
    """After reconcile while available, pending equals the capacity."""
    r = sc.new()
    for op in ops:
        try:
            r, _ = _step(r, op)
        except sc.SupplyProtocol:
            pass
    r, _ = sc.reconcile(r, capacity)
    expected = capacity if r.status == sc.AVAILABLE else sc.pending(r)
    assert expected == sc.pending(r)


@settings(max_examples=200, deadline=None)
@given(_ops, st.integers(0, 12), st.integers(0, 12), st.integers(0, 12))
def test_law_supply_moves_only_when_accepted(ops, grant_id, offset, count):
    """Duplicate, StaleGrant and errors leave the reservation as it was; Accepted moves it by count."""
    r = sc.new()
    for op in ops:
        try:
            r, _ = _step(r, op)
        except sc.SupplyProtocol:
            pass
    before = sc.pending(r)
    try:
        after, result = sc.supply(r, grant_id, offset, count)
    except sc.SupplyProtocol:
        after, result = r, None
    if type(result) is Accepted:
        assert before - count == sc.pending(after)
    else:
        assert r is after


# -- a source attached to a pool -----------------------------------------------------------------


def _events_to_me():
    me = e.self()
    return lambda event: e.send(me, ("source", event))


def _next_event(timeout=5):
    got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "source" else e.NOMATCH, timeout=timeout)
    assert got is not e.TIMEOUT
    return got


def _pool(size=2, prefetch=4, handled=None, **options):
    handled = [] if handled is None else handled
    config = wp.each(
        size=size,
        prefetch=prefetch,
        initial_state=lambda slot: 0,
        handle_event=lambda total, ev: handled.append(ev) or total + ev,
        **options,
    )
    return wp.start_with_source(config, _events_to_me())


def test_first_grant_is_size_times_prefetch():
    """A pool of 2 workers with prefetch 4 grants 8 at once."""
    pool, src = _pool()
    granted = _next_event()
    wp.stop(pool)
    assert DemandGranted(DemandGrant(src.source_id, 1, 8)) == granted


def test_supply_in_two_parts_is_handled():
    """A grant of 8 supplied in two parts: Accepted(2, 6), Accepted(8, 0), all 8 handled."""
    handled = []
    pool, src = _pool(handled=handled)
    grant = _next_event().grant
    first = source.supply(src, grant, 0, [1, 2])
    second = source.supply(src, grant, 2, [3, 4, 5, 6, 7, 8])
    wp.stop(pool)
    assert (Accepted(2, 6), Accepted(8, 0), list(range(1, 9))) == (first, second, sorted(handled))


def test_pool_rejects_protocol_errors_without_delivering():
    """Gap, overlap and excess raise, a retry is Duplicate, and none of them delivers anything."""
    handled = []
    pool, src = _pool(handled=handled)
    grant = _next_event().grant
    source.supply(src, grant, 0, [1, 2])
    raised = []
    for offset, events in ((3, [9]), (1, [9, 9]), (2, [9] * 7)):
        with pytest.raises(source.SupplyProtocol) as info:
            source.supply(src, grant, offset, events)
        raised.append(info.value)
    retry = source.supply(src, grant, 0, [1, 2])
    wp.stop(pool)
    assert [source.OffsetGap(2, 3), source.OffsetOverlap(2, 3), source.GrantExceeded(6, 7)] == raised
    assert (Duplicate(), [1, 2]) == (retry, sorted(handled))


def test_foreign_grant_is_a_mismatch():
    """A grant of another pool's source raises SourceMismatch."""
    pool_a, src_a = _pool()
    pool_b, src_b = _pool()
    grant_a = _next_event().grant
    _next_event()
    with pytest.raises(source.SourceMismatch) as info:
        source.supply(src_b, grant_a, 0, [1])
    wp.stop(pool_a)
    wp.stop(pool_b)
    assert source.SourceMismatch() == info.value


def test_revoked_grant_is_stale_and_delivers_nothing():
    """unavailable revokes the grant (original identity); supplying it is StaleGrant; available grants again."""
    handled = []
    pool, src = _pool(handled=handled)
    grant = _next_event().grant
    source.unavailable(src)
    revoked = _next_event()
    stale = source.supply(src, grant, 0, [1])
    source.available(src)
    regranted = _next_event()
    wp.stop(pool)
    assert (GrantRevoked(grant), StaleGrant(), []) == (revoked, stale, handled)
    assert DemandGranted(DemandGrant(src.source_id, 2, 8)) == regranted


def test_stop_revokes_pending_grants_then_source_stopped():
    """Stopping the pool revokes the open grant and then sends SourceStopped."""
    pool, src = _pool()
    grant = _next_event().grant
    wp.stop(pool)
    assert [GrantRevoked(grant), SourceStopped()] == [_next_event(), _next_event()]


def test_supply_after_stop_is_unavailable():
    """A supply to a stopped pool raises SourceUnavailable."""
    pool, src = _pool()
    grant = _next_event().grant
    wp.stop(pool)
    with pytest.raises(source.SourceUnavailable):
        source.supply(src, grant, 0, [1])


def test_no_new_grant_until_capacity_is_unreserved():
    """A retained grant is not re-granted; completions grant only what they freed."""
    test = e.self()

    def handle(total, event):
        e.send(test, ("handled", event))
        return total

    config = wp.each(size=1, prefetch=2, initial_state=lambda s: 0, handle_event=handle)
    pool, src = wp.start_with_source(config, _events_to_me())
    grant = _next_event().grant
    source.supply(src, grant, 0, [1])
    e.receive(lambda m: m if type(m) is tuple and m[0] == "handled" else e.NOMATCH, timeout=5)
    freed = _next_event()
    wp.stop(pool)
    assert (2, DemandGranted(DemandGrant(src.source_id, 2, 1))) == (grant.amount, freed)


def test_a_raising_source_callback_stops_the_pool():
    """A source callback that raises stops the pool (fail fast)."""

    def notify(event):
        raise RuntimeError("source callback")

    config = wp.each(size=1, prefetch=1, initial_state=lambda s: 0, handle_event=lambda s, ev: s)
    pool, src = wp.start_with_source(config, notify)
    pid = pool.whereis()
    reason = e.exit_reason(pid, timeout=5)
    with pytest.raises(wp.PoolUnavailable):
        wp.snapshot(pool)
    assert "asynchronous source callback stopped" == reason


def test_refused_delivery_leaves_the_grant_unchanged():
    """When the stage refuses supplied events, SourceUnavailable is raised and the reservation stays."""
    from constellation._pool_server import _PoolServer, _State

    config = wp.each(size=1, prefetch=1, initial_state=lambda s: 0, handle_event=lambda s, ev: s)
    server = _PoolServer(config, None, "src")
    state = _State()
    state.rt = runtime.new(None, 1)  # no subscriber: everything supplied would be buffered
    state.source_id = "src"
    state.reservation, _ = sc.reconcile(sc.new(), 5)
    before = state.reservation
    answer = server._supply(state, (source.SUPPLY, "src", 1, 0, (1, 2, 3)))
    assert ("error", source.SourceUnavailable, before, 0) == (
        answer[0],
        type(answer[1]),
        state.reservation,
        core.buffer_size(state.rt.state),
    )


def test_grant_amount():
    """grant_amount answers the grant's amount."""
    assert 8 == source.grant_amount(DemandGrant("s", 1, 8))


def test_example_supplies_one_grant_in_two_parts():
    """examples/async_source.py prints both acceptances and the seed's last line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "async_source.py")],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(root),
    )
    expected = (
        "granted 8 events\n"
        "Accepted(next_offset=2, remaining=6)\n"
        "Accepted(next_offset=8, remaining=0)\n"
        "source delivered 8 events\n"
    )
    assert (0, expected) == (done.returncode, done.stdout)
