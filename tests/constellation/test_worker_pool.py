"""constellation.worker_pool: config, push/snapshot/stop, drain, replacement, errors, reporter, supervision."""

from __future__ import annotations

import pytest

import ensemble as e
from constellation import core
from constellation import worker_pool as wp
from constellation.worker_pool import WorkerId
from tests.constellation.test_core import BAD_CAPACITIES
from ensemble import supervisor

GO = "go"


def _noop(state, event):
    return state


def _config(**overrides):
    settings = {"size": 1, "prefetch": 1, "initial_state": lambda slot: 0, "handle_event": _noop}
    settings.update(overrides)
    return wp.each(**settings)


def _to_me():
    """A reporter that sends every event to the calling process."""
    me = e.self()
    return lambda event: e.send(me, ("report", event))


def _next_report(timeout=5):
    got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "report" else e.NOMATCH, timeout=timeout)
    assert got is not e.TIMEOUT
    return got


def _reports_until(kind):
    seen = []
    while True:
        event = _next_report()
        seen.append(event)
        if type(event) is kind:
            return seen


def _gated(test):
    """A handler that tells ``test`` it started (and where), then waits for GO."""

    def handle(state, event):
        e.send(test, ("started", e.self(), event))
        e.receive(lambda m: m if m == GO else e.NOMATCH)
        return state + [event]

    return handle


def _started():
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == "started" else e.NOMATCH, timeout=5)
    assert got is not e.TIMEOUT
    return got[1], got[2]


# -- configuration -----------------------------------------------------------------


def test_validation_reports_size_first():
    """A config wrong everywhere is refused for its size first."""
    config = _config(size=0, prefetch=0, timeout=0, buffer_capacity=0)
    with pytest.raises(wp.InvalidSize) as info:
        wp.start(config)
    assert wp.InvalidSize(0) == info.value


def test_validation_order_prefetch_timeout_capacity():
    """Prefetch is checked before timeout, timeout before buffer capacity."""
    with pytest.raises(wp.InvalidPrefetch) as a:
        wp.start(_config(prefetch=-1, timeout=0, buffer_capacity=0))
    with pytest.raises(wp.InvalidTimeout) as b:
        wp.start(_config(timeout=0, buffer_capacity=0))
    with pytest.raises(wp.InvalidBufferCapacity) as c:
        wp.start(_config(buffer_capacity=0))
    assert (wp.InvalidPrefetch(-1), wp.InvalidTimeout(0), wp.InvalidBufferCapacity(0)) == (a.value, b.value, c.value)


@pytest.mark.parametrize("capacity", BAD_CAPACITIES)
def test_validation_uses_the_core_buffer_capacity_rule(capacity):
    """validate, start and supervised refuse what core.check_buffer_capacity refuses, with its one error class."""
    assert wp.InvalidBufferCapacity is core.InvalidBufferCapacity and wp.ConfigError is core.ConfigError
    for entry in (wp.validate, wp.start, wp.supervised):
        with pytest.raises(wp.InvalidBufferCapacity) as info:
            entry(_config(buffer_capacity=capacity))
        assert core.InvalidBufferCapacity(capacity) == info.value


def test_the_pool_routes_through_the_runtime():
    """The pool's state is a constellation.runtime value: one route per worker, reached through its pid."""
    from constellation import runtime
    from ensemble import sys

    pool = wp.start(_config(size=2, prefetch=3))
    state = sys.get_state(pool.whereis())
    assert type(state.rt) is runtime.Runtime
    workers = [state.workers[n] for n in state.order]
    assert {w.sub: w.sub for w in workers} == runtime.routes(state.rt)
    assert {w.sub: w.pid for w in workers} == runtime.participants(state.rt)
    assert 6 == core.available_demand(state.rt.state)
    wp.stop(pool)


def test_supervised_validates_raw():
    """supervised raises the config error itself."""
    with pytest.raises(wp.InvalidTimeout) as info:
        wp.supervised(_config(timeout=-1.0))
    assert wp.InvalidTimeout(-1.0) == info.value


def test_new_and_each_defaults():
    """new and each default to a 5 s timeout, no capacity, no reporter, the default dispatcher."""
    config = wp.new(size=2, prefetch=3, initial_state=lambda s: s, handle_batch=lambda s, b: s)
    assert (5.0, None, None, "default") == (config.timeout, config.buffer_capacity, config.reporter, config.dispatcher)


# -- push, snapshot, stop ---------------------------------------------------------------


def test_push_then_stop_processes_every_event():
    """Every pushed event is handled once stop has answered."""
    handled = []
    config = _config(size=4, prefetch=8, handle_event=lambda n, ev: handled.append(ev) or n + 1)
    pool = wp.start(config)
    wp.push(pool, [1, 2, 3, 4])
    wp.push(pool, range(5, 41))
    wp.stop(pool)
    assert list(range(1, 41)) == sorted(handled)


def test_each_folds_in_order_within_a_worker():
    """A single worker sees the events in push order."""
    handled = []
    pool = wp.start(_config(size=1, prefetch=3, handle_event=lambda n, ev: handled.append(ev) or n))
    wp.push(pool, list(range(10)))
    wp.stop(pool)
    assert list(range(10)) == handled


def test_new_hands_whole_batches():
    """handle_batch gets the batch as a tuple of at most prefetch events."""
    batches = []
    config = wp.new(size=1, prefetch=4, initial_state=lambda s: 0, handle_batch=lambda s, b: batches.append(b) or s)
    pool = wp.start(config)
    wp.push(pool, list(range(10)))
    wp.stop(pool)
    assert ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9)) == tuple(batches)


def test_snapshot_of_a_fresh_pool():
    """A fresh pool lists its workers 1..size, nothing buffered, not stopping."""
    pool = wp.start(_config(size=3))
    snap = wp.snapshot(pool)
    wp.stop(pool)
    assert wp.Snapshot((WorkerId(1), WorkerId(2), WorkerId(3)), 0, False) == snap


def test_initial_state_gets_the_slot():
    """Each worker's first state is initial_state(slot)."""
    seen = []
    pool = wp.start(_config(size=3, initial_state=lambda slot: seen.append(slot) or slot))
    wp.stop(pool)
    assert [0, 1, 2] == seen


def test_calls_after_stop_are_unavailable():
    """push, snapshot and stop on a stopped pool raise PoolUnavailable."""
    pool = wp.start(_config())
    wp.stop(pool)
    errors = []
    for call in (lambda: wp.push(pool, [1]), lambda: wp.snapshot(pool), lambda: wp.stop(pool)):
        with pytest.raises(wp.PoolUnavailable) as info:
            call()
        errors.append(type(info.value))
    assert [wp.PoolUnavailable] * 3 == errors


def test_methods_on_the_handle():
    """Pool.push, Pool.snapshot and Pool.stop are the module functions."""
    handled = []
    pool = wp.start(_config(handle_event=lambda n, ev: handled.append(ev) or n))
    pool.push([7])
    assert 1 == len(pool.snapshot().workers)
    pool.stop()
    assert [7] == handled


# -- demand renewal and drain ----------------------------------------------------------------


def test_demand_is_renewed_only_after_the_handler_returns():
    """size 1, prefetch 2, push 4: while the first batch runs, 2 stay buffered."""
    test = e.self()
    config = wp.new(size=1, prefetch=2, initial_state=lambda s: [], handle_batch=lambda s, b: _gated(test)(s, b))
    pool = wp.start(config)
    wp.push(pool, [1, 2, 3, 4])
    worker, first = _started()
    buffered = wp.snapshot(pool).buffered_events
    e.send(worker, GO)
    worker, second = _started()
    e.send(worker, GO)
    wp.stop(pool)
    assert (2, (1, 2), (3, 4)) == (buffered, first, second)


def test_stray_messages_to_a_worker_neither_stop_it_nor_renew_demand():
    """A worker ignores messages that are not the pool's: its demand stays what it completed."""
    test = e.self()
    config = wp.new(size=1, prefetch=2, initial_state=lambda s: [], handle_batch=lambda s, b: _gated(test)(s, b))
    pool = wp.start(config)
    wp.push(pool, [1, 2, 3, 4, 5, 6])
    worker, first = _started()
    for stray in [(), ("x",), (object(), 2), ("DOWN", e.make_ref(), "process", test, "normal"), [1], "done"]:
        e.send(worker, stray)
    e.send(worker, GO)
    worker, second = _started()
    buffered = wp.snapshot(pool).buffered_events  # 2 in flight, none more: the strays renewed nothing
    e.send(worker, GO)
    worker, third = _started()
    e.send(worker, GO)
    wp.stop(pool)
    assert ((1, 2), (3, 4), 2, (5, 6)) == (first, second, buffered, third)


def test_no_batch_exceeds_prefetch_and_every_event_is_handled_once():
    """Renewing in rounds (completions counted while the pool yields) never asks a worker for more than prefetch."""
    batches = []

    def handle(state, batch):
        batches.append((e.self(), batch))
        return state

    pool = wp.start(wp.new(size=3, prefetch=5, initial_state=lambda slot: None, handle_batch=handle))
    for k in range(0, 1000, 7):
        wp.push(pool, list(range(k, min(k + 7, 1000))))
    wp.stop(pool)
    sizes = {len(batch) for _, batch in batches}
    handled = sorted(ev for _, batch in batches for ev in batch)
    assert (True, list(range(1000))) == (max(sizes) <= 5, handled)
    assert 3 == len({pid for pid, _ in batches})


def test_handlers_that_yield_complete_by_message_or_by_count_alike():
    """Workers whose handlers yield finish after the pool's turn as often as within it: nothing is lost or doubled."""
    from ensemble.dispatcher import yield_

    batches = []

    def handle(state, batch):
        if batch[0] % 3:
            yield_()  # the pool may resume (and close its board) before this batch completes
        batches.append(batch)
        return state

    pool = wp.start(wp.new(size=3, prefetch=4, initial_state=lambda slot: None, handle_batch=handle))
    for k in range(0, 2000, 50):
        wp.push(pool, list(range(k, k + 50)))
    wp.stop(pool)
    handled = sorted(ev for batch in batches for ev in batch)
    assert (4, list(range(2000))) == (max(len(b) for b in batches), handled)


def test_each_worker_handles_its_batches_in_order_through_cells_and_messages():
    """Batches left in a worker's cell and batches sent as messages reach it in dispatch order.

    Small pushes leave workers with part of their demand, so a worker gets batches while busy
    (messages) as well as while it waits on its cell; some handlers yield, so the pool's turn
    and a worker's interleave.  Events are pushed in order and the buffer is FIFO: each worker
    must see strictly increasing events, and every event once.
    """
    from ensemble.dispatcher import yield_

    seen = []

    def handle(state, event):
        if event % 5 == 0:
            yield_()
        seen.append((e.self(), event))
        return state

    pool = wp.start(_config(size=4, prefetch=16, handle_event=handle))
    k = 0
    for size in [3, 40, 1, 7, 64, 2, 100, 5] * 20:
        wp.push(pool, list(range(k, k + size)))
        k += size
    wp.stop(pool)
    assert list(range(k)) == sorted(ev for _, ev in seen)
    for pid in {p for p, _ in seen}:
        mine = [ev for p, ev in seen if p is pid]
        assert mine == sorted(mine)


def test_a_call_is_answered_while_busy_workers_keep_completing():
    """Renewing demand in rounds leaves the pool answering a call within a round or two, not after the drain."""
    from constellation._pool_server import _ROUNDS

    total = 10_000
    pool = wp.start(_config(size=2, prefetch=1))
    wp.push(pool, list(range(total)))
    handled = total - wp.snapshot(pool).buffered_events
    wp.stop(pool)
    assert handled < _ROUNDS  # two workers, one event each per round: far fewer than _ROUNDS rounds went by


def test_stop_drains_buffered_events_before_answering():
    """stop answers only once buffered and in-flight events are handled."""
    handled = []
    test = e.self()

    def handle(state, event):
        if event == 0:
            e.send(test, ("started", e.self(), event))
            e.receive(lambda m: m if m == GO else e.NOMATCH)
        handled.append(event)
        return state

    pool = wp.start(_config(size=1, prefetch=1, handle_event=handle, reporter=_to_me()))
    wp.push(pool, [0, 1, 2, 3])
    worker, _ = _started()
    stopper = e.spawn(wp.stop, pool)
    _reports_until(wp.PoolStopping)
    snap = wp.snapshot(pool)
    e.send(worker, GO)
    assert "normal" == e.exit_reason(stopper, timeout=5)
    assert (True, 3, [0, 1, 2, 3]) == (snap.stopping, snap.buffered_events, handled)


def test_second_stop_and_push_while_stopping_are_refused():
    """While a stop drains, another stop or a push raises AlreadyStopping."""
    test = e.self()
    pool = wp.start(_config(initial_state=lambda s: [], handle_event=_gated(test), reporter=_to_me()))
    wp.push(pool, [1])
    worker, _ = _started()
    stopper = e.spawn(wp.stop, pool)
    _reports_until(wp.PoolStopping)
    with pytest.raises(wp.AlreadyStopping) as again:
        wp.stop(pool)
    with pytest.raises(wp.AlreadyStopping) as pushed:
        wp.push(pool, [2])
    e.send(worker, GO)
    assert "normal" == e.exit_reason(stopper, timeout=5)
    assert (wp.AlreadyStopping(), wp.AlreadyStopping()) == (again.value, pushed.value)


def test_stop_times_out_but_keeps_draining():
    """A drain longer than the timeout raises PoolTimeout; the pool still finishes."""
    test = e.self()
    handled = []

    def handle(state, event):
        e.send(test, ("started", e.self(), event))
        e.receive(lambda m: m if m == GO else e.NOMATCH)
        handled.append(event)
        return state

    pool = wp.start(_config(handle_event=handle, timeout=0.05))
    wp.push(pool, [1])
    worker, _ = _started()
    pid = pool.whereis()
    with pytest.raises(wp.PoolTimeout):
        wp.stop(pool)
    e.send(worker, GO)
    assert ("normal", [1]) == (e.exit_reason(pid, timeout=5), handled)


# -- errors -------------------------------------------------------------------------------


def test_buffer_capacity_rejects_the_whole_push():
    """size 1, prefetch 1, capacity 1: push [1, 2, 3] is BufferCapacityExceeded(1, 2), nothing buffered."""
    handled = []
    pool = wp.start(_config(buffer_capacity=1, handle_event=lambda n, ev: handled.append(ev) or n))
    with pytest.raises(wp.StageProtocol) as info:
        wp.push(pool, [1, 2, 3])
    buffered = wp.snapshot(pool).buffered_events
    wp.stop(pool)
    assert (core.BufferCapacityExceeded(1, 2), 0, []) == (info.value.error, buffered, handled)


def test_push_to_a_source_pool_is_source_managed():
    """A pool fed by a source refuses push."""
    pool, _ = wp.start_with_source(_config(), lambda event: None)
    with pytest.raises(wp.SourceManaged) as info:
        wp.push(pool, [1])
    wp.stop(pool)
    assert wp.SourceManaged() == info.value


def test_failing_initial_state_fails_the_start():
    """A worker whose initial_state raises makes start raise ActorStart."""

    def broken(slot):
        raise ValueError("no state")

    with pytest.raises(wp.ActorStart) as info:
        wp.start(_config(initial_state=broken))
    assert "worker_start_failed" == info.value.reason[0]


# -- worker replacement -------------------------------------------------------------------


def _crashing(handled):
    def handle(state, event):
        if event == "boom":
            raise RuntimeError("boom")
        handled.append(event)
        return state

    return handle


def test_crashed_worker_is_replaced_in_its_slot_with_the_next_id():
    """A crash is reported as stopped, started, replaced, with the next id in the same slot."""
    handled = []
    pool = wp.start(_config(size=2, handle_event=_crashing(handled), reporter=_to_me()))
    _reports_until(wp.WorkerStarted)
    _reports_until(wp.WorkerStarted)
    wp.push(pool, ["boom"])
    seen = _reports_until(wp.WorkerReplaced)
    snap = wp.snapshot(pool)
    wp.stop(pool)
    assert [
        wp.BatchStarted(WorkerId(1), 1),
        wp.WorkerStopped(WorkerId(1), 0),
        wp.WorkerStarted(WorkerId(3), 0),
        wp.WorkerReplaced(WorkerId(1), WorkerId(3), 0),
    ] == seen
    assert (WorkerId(2), WorkerId(3)) == snap.workers


def test_a_crashed_batch_is_not_retried():
    """The events of the batch whose handler crashed are lost; later ones are handled."""
    handled = []
    config = wp.new(
        size=1,
        prefetch=2,
        initial_state=lambda s: 0,
        handle_batch=lambda s, batch: [_crashing(handled)(s, ev) for ev in batch] and s,
        reporter=_to_me(),
    )
    pool = wp.start(config)
    wp.push(pool, ["boom", "lost"])
    _reports_until(wp.WorkerReplaced)
    wp.push(pool, ["after"])
    wp.stop(pool)
    assert ["after"] == handled


def test_replacement_gets_a_fresh_prefetch():
    """After a crash the replacement takes buffered events with its own full prefetch."""
    handled = []
    pool = wp.start(_config(size=1, prefetch=1, handle_event=_crashing(handled), reporter=_to_me()))
    wp.push(pool, ["boom", 1, 2, 3])
    _reports_until(wp.WorkerReplaced)
    wp.stop(pool)
    assert [1, 2, 3] == handled


# -- reporter ---------------------------------------------------------------------------------


def test_reporter_sees_the_lifecycle_in_order():
    """Start, one batch and a stop are reported in order."""
    pool = wp.start(_config(size=1, prefetch=2, reporter=_to_me()))
    wp.push(pool, [1, 2])
    first = _reports_until(wp.BatchCompleted)
    wp.stop(pool)
    rest = _reports_until(wp.PoolStopped)
    assert [
        wp.WorkerStarted(WorkerId(1), 0),
        wp.BatchStarted(WorkerId(1), 2),
        wp.BatchCompleted(WorkerId(1), 2),
        wp.PoolStopping(),
        wp.WorkerStopped(WorkerId(1), 0),
        wp.PoolStopped(),
    ] == first + rest


def test_a_raising_reporter_drops_only_its_event():
    """A reporter that raises does not stop the pool."""
    handled = []

    def reporter(event):
        raise RuntimeError("reporter")

    pool = wp.start(_config(reporter=reporter, handle_event=lambda n, ev: handled.append(ev) or n))
    wp.push(pool, [1, 2])
    wp.stop(pool)
    assert [1, 2] == handled


def test_killed_reporter_notifier_stops_the_pool():
    """A pool whose reporter notifier is killed stops; calls then raise PoolUnavailable."""
    test = e.self()

    def reporter(event):
        e.send(test, ("notifier", e.self()))

    pool = wp.start(_config(reporter=reporter))
    notifier = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "notifier" else e.NOMATCH, timeout=5)
    pid = pool.whereis()
    e.exit(notifier, "kill")
    reason = e.exit_reason(pid, timeout=5)
    with pytest.raises(wp.PoolUnavailable):
        wp.snapshot(pool)
    assert "telemetry notifier stopped" == reason


# -- supervision and dispatchers ------------------------------------------------------------------


def test_supervised_pool_survives_a_restart_through_the_same_handle():
    """A killed supervised pool is restarted and keeps working through the same handle."""
    handled = []
    spec = wp.supervised(_config(size=2, handle_event=lambda n, ev: handled.append(ev) or n))
    pool = spec["pool"]
    sup = supervisor.start({"strategy": "one_for_one", "intensity": 5, "period": 5}, [spec])
    wp.push(pool, [1])
    old = pool.whereis()
    ref = e.monitor(old)
    e.exit(old, "kill")
    e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] is ref else e.NOMATCH, timeout=5)
    children = supervisor.which_children(sup)
    new = pool.whereis()
    wp.push(pool, [2])
    snap = wp.snapshot(pool)
    wp.stop(pool)  # drains; the permanent child is then started again
    supervisor.stop(sup)
    assert (True, new) == (new is not old, children[0][1])
    assert ((WorkerId(1), WorkerId(2)), [1, 2]) == (snap.workers, handled)


def test_supervised_spec_shape():
    """The child spec is a permanent worker whose shutdown is the pool timeout."""
    spec = wp.supervised(_config(timeout=2.5))
    assert ("permanent", "worker", 2.5) == (spec["restart"], spec["type"], spec["shutdown"])


def test_a_pool_on_the_blocking_dispatcher():
    """Workers on "blocking" run on its carriers and handle every event, blocking calls included."""
    import gevent.monkey

    sleep = gevent.monkey.get_original("time", "sleep")
    places = []

    def handle(state, event):
        sleep(0.001)
        places.append((e.process_info(e.self(), "dispatcher"), event))
        return state

    pool = wp.start(_config(size=4, prefetch=2, handle_event=handle, dispatcher="blocking"))
    wp.push(pool, list(range(20)))
    wp.stop(pool)
    assert ({"blocking"}, list(range(20))) == ({d for d, _ in places}, sorted(ev for _, ev in places))


def test_worker_id_to_int():
    """worker_id_to_int answers the id's integer."""
    assert 7 == wp.worker_id_to_int(WorkerId(7))


def test_example_prints_processed_8_events():
    """examples/worker_pool.py prints the seed's output."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "worker_pool.py")],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(root),
    )
    assert (0, "processed 8 events\n") == (done.returncode, done.stdout)
