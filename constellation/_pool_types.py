"""The worker pool's values: configuration and its validation, identities, events, snapshot, errors.

Pure data (no process is touched here); :mod:`constellation.worker_pool`
re-exports every public name.  :class:`ConfigError` and
:class:`InvalidBufferCapacity` (and the buffer-capacity rule) are the core's,
shared with the stage; ``InvalidSize``, ``InvalidPrefetch`` and
``InvalidTimeout`` are the pool's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from .core import ConfigError, StageError, check_buffer_capacity
from .core import InvalidBufferCapacity as InvalidBufferCapacity  # re-exported by worker_pool

DEFAULT_TIMEOUT = 5.0

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    """A pool's settings; build it with :func:`each` or :func:`new`, validated at start.

    ``timeout`` (seconds) bounds every call, the pool's start, source supplies
    and the supervisor's shutdown wait; ``buffer_capacity`` bounds undelivered
    events (None: unlimited, else an int > 0:
    :func:`constellation.core.check_buffer_capacity`); ``reporter`` gets the lifecycle :data:`Event` s;
    ``dispatcher`` is where the workers run; ``handle_call`` (None: the
    pool's handler) handles the events of :func:`~constellation.worker_pool.call`.
    """

    size: int
    prefetch: int
    initial_state: Callable[[int], Any]
    handle_batch: Callable[[Any, tuple], Any] | None
    handle_event: Callable[[Any, Any], Any] | None = None
    timeout: float = DEFAULT_TIMEOUT
    buffer_capacity: int | None = None
    reporter: Callable[[Any], Any] | None = None
    dispatcher: str = "default"
    handle_call: Callable[[Any, Any], tuple[Any, Any]] | None = None


def new(
    *,
    size: int,
    prefetch: int,
    initial_state: Callable[[int], Any],
    handle_batch: Callable[[Any, tuple], Any],
    timeout: float = DEFAULT_TIMEOUT,
    buffer_capacity: int | None = None,
    reporter: Callable[[Any], Any] | None = None,
    dispatcher: str = "default",
    handle_call: Callable[[Any, Any], tuple[Any, Any]] | None = None,
) -> Config:
    """A pool whose workers run ``state = handle_batch(state, events)`` per batch (events: a tuple).

    ``initial_state(slot)`` makes each worker's first state.  ``handle_call``
    (optional) is what a :func:`~constellation.worker_pool.call`'s event gets:
    ``(reply, state) = handle_call(state, event)``; without it the call's event
    is handled as a batch of one and the call answers the state it returned.
    """
    return Config(size, prefetch, initial_state, handle_batch, None, timeout, buffer_capacity, reporter, dispatcher,
                  handle_call)


def each(
    *,
    size: int,
    prefetch: int,
    initial_state: Callable[[int], Any],
    handle_event: Callable[[Any, Any], Any],
    timeout: float = DEFAULT_TIMEOUT,
    buffer_capacity: int | None = None,
    reporter: Callable[[Any], Any] | None = None,
    dispatcher: str = "default",
    handle_call: Callable[[Any, Any], tuple[Any, Any]] | None = None,
) -> Config:
    """A pool whose workers fold ``state = handle_event(state, event)`` over each batch, in order.

    ``handle_call`` (optional) is what a :func:`~constellation.worker_pool.call`'s
    event gets instead: ``(reply, state) = handle_call(state, event)``; without
    it the call's event goes through ``handle_event`` and the call answers the
    state it returned.
    """
    return Config(size, prefetch, initial_state, None, handle_event, timeout, buffer_capacity, reporter, dispatcher,
                  handle_call)


def with_timeout(config: Config, seconds: float) -> Config:
    """``config`` with another call timeout (seconds)."""
    return replace(config, timeout=seconds)


def with_buffer_capacity(config: Config, capacity: int | None) -> Config:
    """``config`` with a bound on undelivered events (None: unlimited)."""
    return replace(config, buffer_capacity=capacity)


def with_reporter(config: Config, reporter: Callable[[Any], Any] | None) -> Config:
    """``config`` with a lifecycle reporter (called asynchronously, in a notifier process)."""
    return replace(config, reporter=reporter)


def with_dispatcher(config: Config, dispatcher: str) -> Config:
    """``config`` with its workers on another ensemble dispatcher."""
    return replace(config, dispatcher=dispatcher)


def with_handle_call(config: Config, handle_call: Callable[[Any, Any], tuple[Any, Any]] | None) -> Config:
    """``config`` whose :func:`~constellation.worker_pool.call` events get ``(reply, state) = handle_call(state, event)``
    (None: the pool's own handler, and the call answers the state it returned)."""
    return replace(config, handle_call=handle_call)


class InvalidSize(ConfigError):
    """``size`` is not an int > 0."""


class InvalidPrefetch(ConfigError):
    """``prefetch`` is not an int > 0."""


class InvalidTimeout(ConfigError):
    """``timeout`` is not a finite number of seconds > 0."""


def _is_count(x: Any) -> bool:
    return type(x) is int and x > 0


def validate(config: Config) -> Config:
    """``config`` if it is good; else raise the first fault: size, prefetch, timeout, buffer capacity."""
    if not _is_count(config.size):
        raise InvalidSize(config.size)
    if not _is_count(config.prefetch):
        raise InvalidPrefetch(config.prefetch)
    t = config.timeout
    if type(t) not in (int, float) or not math.isfinite(t) or t <= 0:
        raise InvalidTimeout(t)
    check_buffer_capacity(config.buffer_capacity)
    return config


# --------------------------------------------------------------------------
# Identities, events, snapshot
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class WorkerId:
    """One worker incarnation's identity: monotonic from 1 within a pool incarnation."""

    value: int


def worker_id_to_int(id: WorkerId) -> int:
    """The integer of a worker id."""
    return id.value


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    """Worker ``id`` started in ``slot``."""

    id: WorkerId
    slot: int


@dataclass(frozen=True, slots=True)
class WorkerStopped:
    """Worker ``id`` of ``slot`` is gone (stopped or crashed)."""

    id: WorkerId
    slot: int


@dataclass(frozen=True, slots=True)
class WorkerReplaced:
    """Worker ``previous`` of ``slot`` died and ``replacement`` took its place."""

    previous: WorkerId
    replacement: WorkerId
    slot: int


@dataclass(frozen=True, slots=True)
class BatchStarted:
    """Worker ``id`` is about to handle ``event_count`` events."""

    id: WorkerId
    event_count: int


@dataclass(frozen=True, slots=True)
class BatchCompleted:
    """Worker ``id``'s handler returned for ``event_count`` events."""

    id: WorkerId
    event_count: int


@dataclass(frozen=True, slots=True)
class PoolStopping:
    """A stop was asked: the pool drains what it accepted."""


@dataclass(frozen=True, slots=True)
class PoolStopped:
    """Every worker is gone; the pool answers its stop callers and exits."""


Event = WorkerStarted | WorkerStopped | WorkerReplaced | BatchStarted | BatchCompleted | PoolStopping | PoolStopped


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The pool now: its workers (start order, replacements last), buffered events, stopping."""

    workers: tuple[WorkerId, ...]
    buffered_events: int
    stopping: bool


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class ActorStart(Exception):
    """The pool process failed to start; ``reason`` is ensemble's start error reason."""

    def __init__(self, reason: Any) -> None:
        super().__init__(f"the worker pool failed to start: {reason!r}")
        self.reason = reason


class PoolError(Exception):
    """A pool call failed."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PoolUnavailable(PoolError):
    """The pool is not running (stopped, crashed, or being restarted by its supervisor)."""

    def __init__(self, reason: Any = None) -> None:
        super().__init__("the worker pool is not running" + ("" if reason is None else f" ({reason!r})"))
        self.reason = reason


class PoolTimeout(PoolError):
    """No answer within the timeout: the request may still be applied (a stop keeps draining)."""

    def __init__(self) -> None:
        super().__init__("the worker pool did not answer in time (the request may still be applied)")


class AlreadyStopping(PoolError):
    """The pool is stopping: no more pushes, and one stop is enough."""

    def __init__(self) -> None:
        super().__init__("the worker pool is already stopping")


class SourceManaged(PoolError):
    """The pool takes events only from its source: use :func:`constellation.source.supply`."""

    def __init__(self) -> None:
        super().__init__("the worker pool is fed by its source; push is refused")


class StageProtocol(PoolError):
    """The pool's stage refused the command; ``error`` is the core's StageError."""

    def __init__(self, error: StageError) -> None:
        super().__init__(f"the worker pool's stage refused the command: {error}")
        self.error = error

    @property
    def stage_error(self) -> StageError:
        """The core's error (same as ``error``)."""
        return self.error

    def __eq__(self, other: object) -> bool:
        return type(other) is StageProtocol and self.error == other.error

    def __hash__(self) -> int:
        return hash((StageProtocol, self.error))

    def __repr__(self) -> str:
        return f"StageProtocol({self.error!r})"


class HandlerFailed(PoolError):
    """The handler raised on a :func:`~constellation.worker_pool.call`'s event; ``error`` is what it raised.

    :func:`~constellation.worker_pool.call` raises it ``from error``.  As for
    any event whose handler raises, the worker died and was replaced; the rest
    of its batch is lost (at-most-once).
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"the worker pool's handler raised on the call's event: {error!r}")
        self.error = error

    def __eq__(self, other: object) -> bool:
        return type(other) is HandlerFailed and self.error is other.error

    def __hash__(self) -> int:
        return hash((HandlerFailed, id(self.error)))

    def __repr__(self) -> str:
        return f"HandlerFailed({self.error!r})"


class WorkerCrashed(PoolError):
    """The worker holding a :func:`~constellation.worker_pool.call`'s event died before its handler returned for it.

    ``worker`` is its :class:`WorkerId`, ``reason`` its exit reason.  The event
    is not retried (at-most-once): the handler may or may not have started on it.
    """

    def __init__(self, worker: WorkerId, reason: Any) -> None:
        super().__init__(f"worker {worker.value} died before answering the call ({reason!r})")
        self.worker = worker
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return type(other) is WorkerCrashed and (self.worker, self.reason) == (other.worker, other.reason)

    def __hash__(self) -> int:
        return hash((WorkerCrashed, self.worker))

    def __repr__(self) -> str:
        return f"WorkerCrashed({self.worker!r}, {self.reason!r})"
