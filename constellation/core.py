"""The pure protocol core of a stage: ``update(state, command) -> (state, effects)``.

Pure and deterministic, no I/O, no clock: the stage process (and the worker
pool) asks :func:`update` and carries out the effects.  The rules are
constellation 0.2's (``core.gleam``, ``core/{model,subscription,dispatch,
lifecycle}.gleam``, ``domains/*``; spec §1.1 and §3):

=======================  ===============================================  =========================================
command                  errors (first found wins)                        new state / effects
=======================  ===============================================  =========================================
``Subscribe(id, p, k)``  :class:`DuplicateSubscription` if ``id`` is      add it (demand 0, partition ``k``) at the
                         active **or** tombstoned                         end of the dispatch order; ``[]``, no
                                                                          dispatch
``Ask(id, n)``           :class:`UnknownSubscription`,                    demand += n, dispatch; ``SendEvents``
                         :class:`SubscriptionCancelled`,
                         :class:`InvalidDemand` (``n`` no int > 0)
``Push(events)``         :class:`BufferCapacityExceeded` if, *after*      append, dispatch; ``SendEvents``
                         the immediate dispatch, more than
                         ``buffer_capacity`` events stay buffered
``Cancel(id)``           :class:`UnknownSubscription` for a never-seen    remove and tombstone, dispatch;
                         id; a tombstoned id is a no-op ``(state, [])``   ``[NotifyCancelled(id), SendEvents..]``
``ParticipantDown(p)``   never (an unknown participant is a no-op)        remove and tombstone each of ``p``'s
                                                                          subscriptions, dispatch;
                                                                          ``[NotifyCancelled.., SendEvents..]``
``Shutdown()``           never                                            remove and tombstone all, no dispatch,
                                                                          buffer kept; ``[NotifyCancelled..]``
=======================  ===============================================  =========================================

All or nothing: :func:`update` either answers a new :class:`StageState` or
raises a :class:`StageError` and the state it was given is untouched (states
are immutable values; so are commands and effects).  Tombstones last for the
stage's life: a cancelled id can never be subscribed again.  Cancellation
notices come in dispatch order, before any delivery; outstanding demand of a
cancelled subscription is discarded.

*Dispatch* runs the strategy (:mod:`constellation.dispatch`) over the whole
buffer -- old and new events -- for the active subscriptions in dispatch
order, unless the buffer is empty or the strategy has no capacity; the
strategy's target order becomes the new dispatch order (the round robin
persists across commands), consumed demand is subtracted, and each non-empty
delivery becomes one ``SendEvents`` in the order the strategy answered.  The
buffer is FIFO and nothing is dropped silently.  Only ``Push`` checks the
capacity; events delivered at once do not count against it (capacity 2,
demand 3, push ``[1, 2, 3]``: all delivered).

Subscription and participant ids are any hashable values.  The buffer takes
``k`` events from its head in O(k), so a stage with a large backlog serves a
small ``Ask`` cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Optional, Union

from ensemble.decide.values import same

from . import dispatch as _dispatch
from .dispatch import Strategy

__all__ = [
    "Subscribe",
    "Ask",
    "Push",
    "Cancel",
    "ParticipantDown",
    "Shutdown",
    "Command",
    "SendEvents",
    "NotifyCancelled",
    "Effect",
    "StageError",
    "InvalidDemand",
    "UnknownSubscription",
    "DuplicateSubscription",
    "SubscriptionCancelled",
    "BufferCapacityExceeded",
    "ConfigError",
    "InvalidBufferCapacity",
    "check_buffer_capacity",
    "Subscription",
    "StageState",
    "new",
    "update",
    "buffered_events",
    "buffer_size",
    "subscription",
    "is_cancelled",
    "available_demand",
    "subscription_ids",
    "strategy",
    "buffer_capacity",
]


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Add subscription ``id`` for ``participant_id``, owning ``partition`` (demand starts at 0)."""

    id: Hashable
    participant_id: Hashable
    partition: int = 0


@dataclass(frozen=True, slots=True)
class Ask:
    """Subscription ``id`` wants ``n`` more events (``n`` an int > 0)."""

    id: Hashable
    n: int


@dataclass(frozen=True, slots=True)
class Push:
    """Append ``events`` (a tuple or list) to the buffer and dispatch."""

    events: Union[tuple, list]


@dataclass(frozen=True, slots=True)
class Cancel:
    """Remove and tombstone subscription ``id`` (idempotent)."""

    id: Hashable


@dataclass(frozen=True, slots=True)
class ParticipantDown:
    """Participant ``participant_id`` is gone: cancel all of its subscriptions."""

    participant_id: Hashable


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Cancel every subscription; the buffer stays as it is."""


Command = Union[Subscribe, Ask, Push, Cancel, ParticipantDown, Shutdown]


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True, slots=True)
class SendEvents:
    """Send ``events`` (a non-empty tuple, FIFO) to subscription ``id``."""

    id: Hashable
    events: tuple


@dataclass(frozen=True, slots=True)
class NotifyCancelled:
    """Tell subscription ``id``'s participant that it is cancelled."""

    id: Hashable


Effect = Union[SendEvents, NotifyCancelled]


# --------------------------------------------------------------------------- errors


class StageError(Exception):
    """A command the stage rejects; the state is unchanged.

    Errors compare equal by type and fields, and pickle.
    """

    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.args == other.args  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((type(self), self.args))

    def __repr__(self) -> str:
        inner = ", ".join(repr(a) for a in self.args)
        return f"{type(self).__name__}({inner})"


class InvalidDemand(StageError):
    """``Ask`` with an amount that is no int > 0."""

    def __init__(self, amount: Any) -> None:
        super().__init__(amount)
        self.amount = amount

    def __str__(self) -> str:
        return f"invalid demand {self.amount!r}: must be an int > 0"


class UnknownSubscription(StageError):
    """No subscription with this id was ever made."""

    def __init__(self, id: Hashable) -> None:
        super().__init__(id)
        self.id = id

    def __str__(self) -> str:
        return f"unknown subscription {self.id!r}"


class DuplicateSubscription(StageError):
    """The id is active or was cancelled (tombstones last for the stage's life)."""

    def __init__(self, id: Hashable) -> None:
        super().__init__(id)
        self.id = id

    def __str__(self) -> str:
        return f"subscription {self.id!r} already exists or was cancelled"


class SubscriptionCancelled(StageError):
    """The subscription was cancelled (by ``Cancel``, its participant's death or ``Shutdown``)."""

    def __init__(self, id: Hashable) -> None:
        super().__init__(id)
        self.id = id

    def __str__(self) -> str:
        return f"subscription {self.id!r} is cancelled"


class BufferCapacityExceeded(StageError):
    """A push would leave ``attempted`` events buffered, more than ``capacity``."""

    def __init__(self, capacity: int, attempted: int) -> None:
        super().__init__(capacity, attempted)
        self.capacity = capacity
        self.attempted = attempted

    def __str__(self) -> str:
        return (
            f"buffer capacity {self.capacity} exceeded: the push would leave "
            f"{self.attempted} events buffered; nothing was accepted"
        )


# --------------------------------------------------------------------------- settings


class ConfigError(ValueError):
    """An invalid setting; ``value`` is the offending one.

    Errors compare equal by type and value (a value with an odd ``__eq__``
    compares unequal), and pickle.
    """

    def __init__(self, value: Any) -> None:
        super().__init__(f"{type(self).__name__}({value!r})")
        self.value = value

    def __reduce__(self) -> Any:
        return (type(self), (self.value,))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and same(self.value, other.value)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class InvalidBufferCapacity(ConfigError):
    """``buffer_capacity`` is neither None nor an int > 0 (see :func:`check_buffer_capacity`).

    The one error for this rule: :func:`new`, :func:`constellation.start` and
    :func:`constellation.worker_pool.start` all raise it.  ``capacity`` is the
    offending value (the same as ``value``).
    """

    def __init__(self, capacity: Any) -> None:
        super().__init__(capacity)
        self.args = (f"the buffer capacity must be None or an int > 0, not {capacity!r}",)

    @property
    def capacity(self) -> Any:
        """The offending value."""
        return self.value


def check_buffer_capacity(capacity: Any) -> Optional[int]:
    """The one buffer-capacity rule: ``capacity`` itself if it is ``None`` (unlimited) or an int > 0.

    Anything else -- 0, a negative int, a bool, a float, an int subclass --
    raises :class:`InvalidBufferCapacity`.  Pure.  0 is refused because a
    stage that may buffer nothing rejects every push that outruns demand;
    GenStage's ``buffer_size`` is a count or ``:infinity`` too, but it drops
    overflow where constellation rejects the push whole (spec §1.1, §2.1).
    """
    if capacity is None or (type(capacity) is int and capacity > 0):
        return capacity
    raise InvalidBufferCapacity(capacity)


# --------------------------------------------------------------------------- buffer


class _Buffer:
    """An immutable FIFO: chunks of tuples, an offset into the first chunk, a size.

    Appending keeps O(log n) chunks (a new chunk merges with the last one
    while that one is no more than twice its size), taking ``k`` events from
    the head costs O(k), and the first chunk is compacted once the offset
    passes half of it.
    """

    __slots__ = ("chunks", "offset", "size")

    def __init__(self, chunks: tuple, offset: int, size: int) -> None:
        self.chunks = chunks
        self.offset = offset
        self.size = size

    def push(self, events: tuple) -> _Buffer:
        if not events:
            return self
        if not self.size:
            return _Buffer((events,), 0, len(events))
        chunks = list(self.chunks)
        chunks.append(events)
        while len(chunks) > 2 and len(chunks[-2]) <= 2 * len(chunks[-1]):
            tail = chunks.pop()
            chunks[-1] = chunks[-1] + tail
        return _Buffer(tuple(chunks), self.offset, self.size + len(events))

    def take(self, k: Optional[int]) -> tuple:
        """The first ``k`` events (all of them for ``None``)."""
        size = self.size
        if k is None or k > size:
            k = size
        if k <= 0:
            return ()
        chunks = self.chunks
        off = self.offset
        head = chunks[0]
        if off + k <= len(head):
            return head if (off == 0 and k == len(head)) else head[off : off + k]
        out = [head[off:]]
        k -= len(head) - off
        for c in chunks[1:]:
            if k <= len(c):
                out.append(c[:k])
                break
            out.append(c)
            k -= len(c)
        return tuple(_chain(out))

    def drop(self, k: int) -> _Buffer:
        """The buffer without its first ``k`` events."""
        if k <= 0:
            return self
        size = self.size - k
        if size <= 0:
            return _EMPTY
        chunks = self.chunks
        off = self.offset + k
        i = 0
        while off >= len(chunks[i]):
            off -= len(chunks[i])
            i += 1
        if i:
            chunks = chunks[i:]
        head = chunks[0]
        if off and 2 * off > len(head):
            chunks = (head[off:],) + chunks[1:]
            off = 0
        return _Buffer(chunks, off, size)

    def to_tuple(self) -> tuple:
        return self.take(None)


def _chain(parts: list) -> Iterable[Any]:
    for p in parts:
        yield from p


_EMPTY = _Buffer((), 0, 0)


def _buffer_of(events: tuple) -> _Buffer:
    return _Buffer((events,), 0, len(events)) if events else _EMPTY


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Subscription:
    """An active subscription: its ``id``, ``participant_id``, outstanding ``demand`` and ``partition``."""

    id: Hashable
    participant_id: Hashable
    demand: int
    partition: int


class StageState:
    """A stage's protocol state; an immutable value (build it with :func:`new`)."""

    __slots__ = ("_demands", "_owners", "_partitions", "_order", "_cancelled", "_buffer", "_strategy", "_capacity")

    _demands: dict  # id -> outstanding demand, active subscriptions only
    _owners: dict  # id -> participant_id, active subscriptions only
    _partitions: dict  # id -> partition, active subscriptions only (what dispatch reads)
    _order: tuple  # active ids in dispatch order
    _cancelled: frozenset  # tombstones
    _buffer: _Buffer
    _strategy: Strategy
    _capacity: Optional[int]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("StageState is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("StageState is immutable")

    def __repr__(self) -> str:
        subs = ", ".join(f"{i!r}: {self._demands[i]}" for i in self._order)
        return (
            f"StageState(strategy={self._strategy!r}, buffer_capacity={self._capacity!r}, "
            f"demand={{{subs}}}, buffered={self._buffer.size}, cancelled={len(self._cancelled)})"
        )


_set = {name: StageState.__dict__[name].__set__ for name in StageState.__slots__}
_set_demands = _set["_demands"]
_set_owners = _set["_owners"]
_set_partitions = _set["_partitions"]
_set_order = _set["_order"]
_set_cancelled = _set["_cancelled"]
_set_buffer = _set["_buffer"]
_set_strategy = _set["_strategy"]
_set_capacity = _set["_capacity"]


def _make(
    demands: dict,
    owners: dict,
    partitions: dict,
    order: tuple,
    cancelled: frozenset,
    buffer: _Buffer,
    strategy: Strategy,
    capacity: Optional[int],
) -> StageState:
    s = object.__new__(StageState)
    _set_demands(s, demands)
    _set_owners(s, owners)
    _set_partitions(s, partitions)
    _set_order(s, order)
    _set_cancelled(s, cancelled)
    _set_buffer(s, buffer)
    _set_strategy(s, strategy)
    _set_capacity(s, capacity)
    return s


def new(strategy: Optional[Strategy] = None, buffer_capacity: Optional[int] = None) -> StageState:
    """An empty stage: no subscriptions, empty buffer; ``strategy`` defaults to ``dispatch.demand()``.

    ``buffer_capacity`` is ``None`` (unlimited) or an int > 0
    (:func:`check_buffer_capacity`); anything else raises
    :class:`InvalidBufferCapacity`.  A non-strategy raises ``TypeError``.
    """
    if strategy is None:
        strategy = _dispatch.demand()
    if type(strategy) is not Strategy:
        raise TypeError(f"not a dispatch strategy: {strategy!r}")
    check_buffer_capacity(buffer_capacity)
    return _make({}, {}, {}, (), frozenset(), _EMPTY, strategy, buffer_capacity)


# --------------------------------------------------------------------------- update


def update(state: StageState, command: Command) -> tuple[StageState, list[Effect]]:
    """Apply ``command``: the new state and its effects, or a :class:`StageError` (state unchanged)."""
    t = type(command)
    if t is Ask:
        return _ask(state, command)
    if t is Push:
        return _push(state, command)
    if t is Subscribe:
        return _subscribe(state, command)
    if t is Cancel:
        return _cancel(state, command)
    if t is ParticipantDown:
        return _participant_down(state, command)
    if t is Shutdown:
        return _shutdown(state)
    raise TypeError(f"not a stage command: {command!r}")


def _missing(state: StageState, id: Hashable) -> StageError:
    if id in state._cancelled:
        return SubscriptionCancelled(id)
    return UnknownSubscription(id)


def _subscribe(state: StageState, cmd: Subscribe) -> tuple[StageState, list[Effect]]:
    id = cmd.id
    if id in state._demands or id in state._cancelled:
        raise DuplicateSubscription(id)
    demands = dict(state._demands)
    demands[id] = 0
    owners = dict(state._owners)
    owners[id] = cmd.participant_id
    partitions = dict(state._partitions)
    partitions[id] = cmd.partition
    order = state._order + (id,)
    return (
        _make(demands, owners, partitions, order, state._cancelled, state._buffer, state._strategy, state._capacity),
        [],
    )


def _ask(state: StageState, cmd: Ask) -> tuple[StageState, list[Effect]]:
    id = cmd.id
    old = state._demands.get(id)
    if old is None and id not in state._demands:
        raise _missing(state, id)
    n = cmd.n
    if type(n) is not int or n <= 0:
        raise InvalidDemand(n)
    demands = dict(state._demands)
    demands[id] = old + n
    parts = state._partitions
    order, buffer, effects = _dispatch_buffer(state._strategy, state._order, demands, parts, state._buffer)
    return (
        _make(demands, state._owners, parts, order, state._cancelled, buffer, state._strategy, state._capacity),
        effects,
    )


def _push(state: StageState, cmd: Push) -> tuple[StageState, list[Effect]]:
    events = cmd.events
    if type(events) is not tuple:
        events = tuple(events)
    buffer = state._buffer.push(events)
    demands = dict(state._demands)
    order, buffer, effects = _dispatch_buffer(state._strategy, state._order, demands, state._partitions, buffer)
    capacity = state._capacity
    if capacity is not None and buffer.size > capacity:
        raise BufferCapacityExceeded(capacity, buffer.size)
    return (
        _make(demands, state._owners, state._partitions, order, state._cancelled, buffer, state._strategy, capacity),
        effects,
    )


def _remove(state: StageState, ids: list) -> tuple[StageState, list[Effect]]:
    """Remove and tombstone ``ids`` (in dispatch order), then dispatch."""
    gone = set(ids)
    demands = {i: d for i, d in state._demands.items() if i not in gone}
    owners = {i: p for i, p in state._owners.items() if i not in gone}
    partitions = {i: k for i, k in state._partitions.items() if i not in gone}
    order = tuple(i for i in state._order if i not in gone)
    effects: list[Effect] = [NotifyCancelled(i) for i in ids]
    order, buffer, sent = _dispatch_buffer(state._strategy, order, demands, partitions, state._buffer)
    effects.extend(sent)
    return (
        _make(demands, owners, partitions, order, state._cancelled | gone, buffer, state._strategy, state._capacity),
        effects,
    )


def _cancel(state: StageState, cmd: Cancel) -> tuple[StageState, list[Effect]]:
    id = cmd.id
    if id in state._demands:
        return _remove(state, [id])
    if id in state._cancelled:
        return state, []
    raise UnknownSubscription(id)


def _participant_down(state: StageState, cmd: ParticipantDown) -> tuple[StageState, list[Effect]]:
    p = cmd.participant_id
    owners = state._owners
    ids = [i for i in state._order if owners[i] == p]
    if not ids:
        return state, []
    return _remove(state, ids)


def _shutdown(state: StageState) -> tuple[StageState, list[Effect]]:
    effects: list[Effect] = [NotifyCancelled(i) for i in state._order]
    if not effects:
        return state, []
    return (
        _make({}, {}, {}, (), state._cancelled | frozenset(state._order), state._buffer, state._strategy, state._capacity),
        effects,
    )


def _dispatch_buffer(
    strategy: Strategy,
    order: tuple,
    demands: dict,
    partitions: dict,
    buffer: _Buffer,
) -> tuple[tuple, _Buffer, list[Effect]]:
    """Run the strategy over the buffer; ``demands`` (a fresh copy) is updated in place.

    Only the strategy's :func:`~constellation.dispatch.window` of the buffer is
    handed to it (the rest stays buffered behind it, exactly as a run over the
    whole buffer would leave it); a bounded window leaves its own tail.
    """
    if not buffer.size or not order:
        return order, buffer, []
    window = _dispatch.window(strategy, demands.values())
    if window == 0:
        return order, buffer, []
    events = buffer.take(window)
    order, deliveries, remaining = _dispatch._run(strategy, order, demands, partitions, events)
    if window is None:
        buffer = _buffer_of(remaining)
    else:
        buffer = buffer.drop(len(events) - len(remaining))
    return order, buffer, [SendEvents(i, evs) for i, evs in deliveries]


# --------------------------------------------------------------------------- queries


def buffered_events(state: StageState) -> tuple:
    """The undelivered events, oldest first."""
    return state._buffer.to_tuple()


def buffer_size(state: StageState) -> int:
    """How many events are buffered."""
    return state._buffer.size


def subscription(state: StageState, id: Hashable) -> Subscription:
    """The active subscription ``id``; raises :class:`SubscriptionCancelled` or :class:`UnknownSubscription`."""
    demand = state._demands.get(id)
    if demand is None:
        raise _missing(state, id)
    participant_id, part = state._owners[id], state._partitions[id]
    return Subscription(id, participant_id, demand, part)


def is_cancelled(state: StageState, id: Hashable) -> bool:
    """Whether ``id`` is tombstoned (it was cancelled; it stays so for the stage's life)."""
    return id in state._cancelled


def available_demand(state: StageState) -> int:
    """The sum of the outstanding demand of all active subscriptions."""
    return sum(state._demands.values())


def subscription_ids(state: StageState) -> tuple:
    """The active subscription ids, in dispatch order."""
    return state._order


def strategy(state: StageState) -> Strategy:
    """The stage's dispatch strategy."""
    return state._strategy


def buffer_capacity(state: StageState) -> Optional[int]:
    """The buffer capacity (``None``: unlimited)."""
    return state._capacity
