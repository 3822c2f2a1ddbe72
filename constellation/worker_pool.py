"""Resilient worker pools backed by constellation demand (spec §1.5, §2.8).

The pool is one ensemble process (a gen_server) that owns a *pure* runtime
(:mod:`constellation.runtime`: the core stage and its routing, as a stage
process has) and ``size`` worker processes.  Each worker asks
for ``prefetch`` events, runs the handler on them in its own process, and
renews only the capacity it completed, after the handler returned::

    from constellation import worker_pool

    config = worker_pool.each(size=4, prefetch=8, initial_state=lambda slot: 0,
                              handle_event=lambda processed, event: processed + 1)
    pool = worker_pool.start(config)
    worker_pool.push(pool, [1, 2, 3, 4])  # fire and forget: returns once the events are accepted
    worker_pool.call(pool, 5)             # what handle_event returned for 5: its worker's new count
    worker_pool.stop(pool)          # drains everything accepted, then answers

:func:`call` sends one event through the same buffer and demand as
:func:`push` and answers what the handler returned for it: ``handle_call``'s
reply when the config has one (``(reply, state) = handle_call(state,
event)``), else the state the pool's handler returned.  It raises
:class:`HandlerFailed` (from the handler's exception) when the handler raises
on it, :class:`WorkerCrashed` when its worker dies before answering, and
:class:`PoolTimeout` when no answer comes in time.

At most ``size * prefetch`` events are outstanding.  A worker that dies is
replaced in the same slot with the next monotonic :class:`WorkerId`; the batch
it held is not retried, so processing is at-most-once (persist and retry work
before pushing it when stronger delivery is needed).  ``dispatcher`` places the
workers on an ensemble dispatcher: ``"blocking"`` for handlers that block the
OS thread (a C driver, the original ``time.sleep``).

Errors are exceptions: configuration errors (:class:`InvalidSize`,
:class:`InvalidPrefetch`, :class:`InvalidTimeout`,
:class:`InvalidBufferCapacity`, checked in that order by every ``start*`` and
:func:`supervised`), :class:`ActorStart` when the pool process fails to start,
and :class:`PoolUnavailable`, :class:`PoolTimeout`, :class:`AlreadyStopping`,
:class:`SourceManaged` and :class:`StageProtocol` from the calls (and
:class:`HandlerFailed`, :class:`WorkerCrashed` from :func:`call`).  A
:class:`PoolTimeout` means "no answer in time", not "rejected": the request
may still be applied (and a ``stop`` keeps draining), so retry only idempotent
operations.  Reporter and source callbacks run in notifier processes, never in
the pool's: a raising reporter drops only that event, a raising source
callback stops the pool.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import ensemble as e
from ensemble import CallError, StartError, gen_server

from . import source as _source
from ._pool_server import CALL as _CALL
from ._pool_server import PUSH as _PUSH
from ._pool_server import SNAPSHOT as _SNAPSHOT
from ._pool_server import STOP as _STOP
from ._pool_server import _PoolServer
from ._pool_types import (
    DEFAULT_TIMEOUT,
    ActorStart,
    AlreadyStopping,
    BatchCompleted,
    BatchStarted,
    Config,
    ConfigError,
    Event,
    HandlerFailed,
    InvalidBufferCapacity,
    InvalidPrefetch,
    InvalidSize,
    InvalidTimeout,
    PoolError,
    PoolStopped,
    PoolStopping,
    PoolTimeout,
    PoolUnavailable,
    Snapshot,
    SourceManaged,
    StageProtocol,
    WorkerCrashed,
    WorkerId,
    WorkerReplaced,
    WorkerStarted,
    WorkerStopped,
    each,
    new,
    validate,
    with_buffer_capacity,
    with_dispatcher,
    with_handle_call,
    with_reporter,
    with_timeout,
    worker_id_to_int,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "Config",
    "each",
    "new",
    "with_timeout",
    "with_buffer_capacity",
    "with_reporter",
    "with_dispatcher",
    "with_handle_call",
    "validate",
    "WorkerId",
    "worker_id_to_int",
    "WorkerStarted",
    "WorkerStopped",
    "WorkerReplaced",
    "BatchStarted",
    "BatchCompleted",
    "PoolStopping",
    "PoolStopped",
    "Snapshot",
    "Event",
    "ConfigError",
    "InvalidSize",
    "InvalidPrefetch",
    "InvalidTimeout",
    "InvalidBufferCapacity",
    "ActorStart",
    "PoolError",
    "PoolUnavailable",
    "PoolTimeout",
    "AlreadyStopping",
    "SourceManaged",
    "StageProtocol",
    "HandlerFailed",
    "WorkerCrashed",
    "Pool",
    "start",
    "start_link",
    "start_with_source",
    "start_with_source_link",
    "supervised",
    "push",
    "call",
    "snapshot",
    "stop",
]

# --------------------------------------------------------------------------
# The handle and its calls
# --------------------------------------------------------------------------


_names = itertools.count(1)


def _new_name() -> str:
    return f"constellation.worker_pool.{next(_names)}"


class Pool:
    """A running pool's capability: its registered name (stable across supervised restarts) and timeout."""

    __slots__ = ("name", "timeout")

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Pool({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Pool and other.name == self.name

    def __hash__(self) -> int:
        return hash((Pool, self.name))

    def whereis(self) -> Any:
        """The pool's current pid, or None."""
        return e.whereis(self.name)

    def push(self, events: Sequence[Any]) -> None:
        """:func:`push` on this pool."""
        push(self, events)

    def call(self, event: Any, timeout: float | None = None) -> Any:
        """:func:`call` on this pool."""
        return call(self, event, timeout)

    def snapshot(self) -> Snapshot:
        """:func:`snapshot` of this pool."""
        return snapshot(self)

    def stop(self) -> None:
        """:func:`stop` this pool."""
        stop(self)


def _call(pool: Pool, request: Any, timeout: float | None = None) -> Any:
    try:
        answer = gen_server.call(pool.name, request, pool.timeout if timeout is None else timeout)
    except CallError as err:
        if err.reason == "timeout":
            raise PoolTimeout() from None
        raise PoolUnavailable(err.reason) from None
    if answer[0] == "ok":
        return answer[1]
    raise answer[1]


def push(pool: Pool, events: Sequence[Any]) -> None:
    """Push ``events`` (in order) into a push-driven pool; returns once they are accepted.

    Raises :class:`AlreadyStopping`, :class:`SourceManaged`,
    :class:`StageProtocol` (``BufferCapacityExceeded``: nothing of this push
    was taken), :class:`PoolTimeout` (may still be applied) or
    :class:`PoolUnavailable`.
    """
    if type(events) is not tuple:
        events = tuple(events)
    _call(pool, (_PUSH, events))


def call(pool: Pool, event: Any, timeout: float | None = None) -> Any:
    """Handle ``event`` in the pool and answer the handler's result for it.

    The event is pushed like :func:`push`'s (same buffer, same demand, same
    refusals, in order with the pushes before it) and handled by whichever
    worker gets it, in order within its batch.  The answer is
    ``handle_call``'s reply when the config has one (``(reply, state) =
    handle_call(state, event)``), else the state the pool's handler returned
    for it (``handle_event(state, event)``, or ``handle_batch(state,
    (event,))``).  ``timeout`` is in seconds (None: the pool's timeout;
    ``math.inf``: no limit).

    Raises :class:`HandlerFailed` ``from`` the handler's exception when it
    raised on this event (its worker died and was replaced, as for any raising
    handler); :class:`WorkerCrashed` when the worker holding the event died
    before the handler returned for it (it is not retried: at-most-once);
    :class:`AlreadyStopping`, :class:`SourceManaged`, :class:`StageProtocol`
    (``BufferCapacityExceeded``: not taken) as :func:`push` does;
    :class:`PoolTimeout` (the event may still be handled; the late answer is
    dropped) or :class:`PoolUnavailable` (the pool stopped or crashed meanwhile).
    """
    try:
        return _call(pool, (_CALL, event), timeout)
    except HandlerFailed as err:
        raise err from err.error


def snapshot(pool: Pool) -> Snapshot:
    """The pool's workers, buffered event count and whether it is stopping."""
    return _call(pool, _SNAPSHOT)


def stop(pool: Pool) -> None:
    """Stop gracefully: every accepted event is handled, then the workers and the pool end.

    Answers only after the drain: :class:`PoolTimeout` if that takes longer
    than the timeout (the drain goes on; a timeout does not cancel a running
    handler).  A second stop raises :class:`AlreadyStopping`; a pool already
    gone, :class:`PoolUnavailable`.
    """
    _call(pool, _STOP)


# --------------------------------------------------------------------------
# Starting
# --------------------------------------------------------------------------


def _start_server(config: Config, name: str, link: bool, notify_source: Any, source_id: Any) -> Any:
    server = _PoolServer(config, notify_source, source_id)
    starter = gen_server.start_link if link else gen_server.start
    return starter(server, name=name, timeout=config.timeout)


def _start(config: Config, link: bool, notify_source: Any = None) -> tuple[Pool, Any]:
    validate(config)
    name = _new_name()
    source_id = e.make_ref() if notify_source is not None else None
    try:
        _start_server(config, name, link, notify_source, source_id)
    except StartError as err:
        raise ActorStart(err.reason) from None
    pool = Pool(name, config.timeout)
    if notify_source is None:
        return pool, None
    return pool, _source.Source(source_id, name, config.timeout)


def start(config: Config) -> Pool:
    """Start a push-driven pool (unlinked); raises a :class:`ConfigError` or :class:`ActorStart`."""
    return _start(config, False)[0]


def start_link(config: Config) -> Pool:
    """:func:`start`, linked to the caller."""
    return _start(config, True)[0]


def start_with_source(config: Config, notify_source: Callable[[Any], Any]) -> tuple[Pool, _source.Source]:
    """Start a pool fed by an asynchronous source; answers ``(pool, source)``.

    ``notify_source`` gets :class:`~constellation.source.DemandGranted`,
    :class:`~constellation.source.GrantRevoked` and
    :class:`~constellation.source.SourceStopped` in a notifier process of its
    own; one that raises stops the pool.  The pool refuses :func:`push`
    (:class:`SourceManaged`).
    """
    if not callable(notify_source):
        raise TypeError(f"notify_source must be callable, not {notify_source!r}")
    return _start(config, False, notify_source)  # type: ignore[return-value]


def start_with_source_link(config: Config, notify_source: Callable[[Any], Any]) -> tuple[Pool, _source.Source]:
    """:func:`start_with_source`, linked to the caller."""
    if not callable(notify_source):
        raise TypeError(f"notify_source must be callable, not {notify_source!r}")
    return _start(config, True, notify_source)  # type: ignore[return-value]


def supervised(config: Config, *, id: Any = None, restart: str = "permanent") -> dict:
    """A child spec for :mod:`ensemble.supervisor`; its ``"pool"`` entry is the pool's handle.

    The pool's name is allocated once, here, so the handle reaches every
    incarnation the supervisor starts.  In-flight work of a dead incarnation is
    not replayed; calls during a restart may raise :class:`PoolUnavailable`.
    The supervisor waits ``config.timeout`` seconds for a graceful shutdown.
    Raises a :class:`ConfigError` for a bad config.
    """
    validate(config)
    name = _new_name()

    def start_pool() -> Any:
        return _start_server(config, name, True, None, None)

    return {
        "id": name if id is None else id,
        "start": start_pool,
        "restart": restart,
        "shutdown": config.timeout,
        "type": "worker",
        "pool": Pool(name, config.timeout),
    }
