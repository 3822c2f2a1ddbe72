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
small ``Ask`` cheaply.  The core never looks at which kind of strategy it
runs: the strategy's engines (``dispatch._engine`` and
``dispatch._asks_engine``, chosen once in :func:`new`) dispatch the buffer,
each kind in its own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
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

_new = object.__new__


#: Chunks at least this long are not merged into, and a head chunk is compacted only once more
#: events than this were taken from it (see :class:`_Buffer`).
_MERGE_BELOW = 4096

#: A pushed chunk at least this long is appended as it is, never merged (see :class:`_Buffer`).
_APPEND_FROM = 512


class _Buffer:
    """An immutable FIFO: chunks of tuples, an offset into the first chunk, a size.

    Appending merges a new chunk shorter than ``_APPEND_FROM`` events into
    the last one while that one is no more than twice its size and shorter
    than ``_MERGE_BELOW`` events: many small pushes make O(log n) chunks below
    that size, and an event is copied O(1) times (not O(log n)) once chunks
    reach it, for n / ``_MERGE_BELOW`` chunks at most beyond the small ones;
    a long push (``_APPEND_FROM`` events or more) is kept as it is, copied
    never, one chunk per ``_APPEND_FROM`` events at most.  Taking ``k``
    events from the head costs O(k), and the first chunk is compacted (its
    taken events let go) once the offset passes half of it and
    ``_MERGE_BELOW`` events.  The dispatch engines
    (:func:`constellation.dispatch._engine`) read it through ``size``,
    :meth:`take`, :meth:`drop`, :meth:`split`, :meth:`peek`, :meth:`holding`
    and the head chunk (``chunks[0]`` from ``offset`` on).
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
            return _buffer(events)
        if len(events) >= _APPEND_FROM:
            return _chunked(self.chunks + (events,), self.offset, self.size + len(events))
        chunks = list(self.chunks)
        chunks.append(events)
        while len(chunks) > 2 and len(chunks[-2]) <= 2 * len(chunks[-1]) and len(chunks[-2]) < _MERGE_BELOW:
            tail = chunks.pop()
            chunks[-1] = chunks[-1] + tail
        return _chunked(tuple(chunks), self.offset, self.size + len(events))

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
        return tuple(_flatten(out))

    def drop(self, k: int) -> _Buffer:
        """The buffer without its first ``k`` events."""
        if k <= 0:
            return self
        size = self.size - k
        if size <= 0:
            return _EMPTY
        chunks = self.chunks
        off = self.offset + k
        head = chunks[0]
        if off >= len(head):
            i = 0
            while off >= len(chunks[i]):
                off -= len(chunks[i])
                i += 1
            chunks = chunks[i:]
            head = chunks[0]
        if off > _MERGE_BELOW and 2 * off > len(head):
            chunks = (head[off:],) + chunks[1:]
            off = 0
        b = _new(_Buffer)  # _chunked(chunks, off, size), inlined
        b.chunks = chunks
        b.offset = off
        b.size = size
        return b

    def split(self, k: int) -> tuple[tuple, _Buffer]:
        """``(self.take(k), self.drop(k))`` for ``k >= 0``, in one step (the head chunk's case is the fast one)."""
        chunks = self.chunks
        if chunks:
            off = self.offset
            head = chunks[0]
            end = off + k
            n = len(head)
            if end < n:
                rest = _new(_Buffer)
                if end > _MERGE_BELOW and 2 * end > n:  # drop's compaction rule
                    rest.chunks = (head[end:],) + chunks[1:]
                    rest.offset = 0
                else:
                    rest.chunks = chunks
                    rest.offset = end
                rest.size = self.size - k
                return head[off:end], rest
        return self.take(k), self.drop(k)

    def peek(self, start: int, k: int) -> tuple:
        """The ``k`` events after the first ``start`` (``0 <= start``, ``0 <= k``), the buffer unchanged."""
        chunks = self.chunks
        off = self.offset + start
        if chunks and off + k <= len(chunks[0]):
            return chunks[0][off : off + k]
        if k <= 0 or start >= self.size:
            return ()
        i = 0
        while off >= len(chunks[i]):  # the chunk holding the first event wanted
            off -= len(chunks[i])
            i += 1
        c = chunks[i]
        if off + k <= len(c):
            return c[off : off + k]
        parts = [c[off:]]
        k -= len(c) - off
        for c in chunks[i + 1 :]:
            if k <= len(c):
                parts.append(c[:k])
                break
            parts.append(c)
            k -= len(c)
        return tuple(_flatten(parts))

    def holding(self, events: tuple) -> _Buffer:
        """A buffer of exactly ``events`` (what is left once a strategy took what it could anywhere)."""
        return _buffer(events)

    def to_tuple(self) -> tuple:
        return self.take(None)


_flatten = chain.from_iterable


def _chunked(chunks: tuple, offset: int, size: int) -> _Buffer:
    """``_Buffer(chunks, offset, size)`` without the call to ``__init__`` (the hot path builds many)."""
    b = _new(_Buffer)
    b.chunks = chunks
    b.offset = offset
    b.size = size
    return b


_EMPTY = _Buffer((), 0, 0)


def _buffer(events: tuple) -> _Buffer:
    """A buffer holding ``events``."""
    return _chunked((events,), 0, len(events)) if events else _EMPTY


# --------------------------------------------------------------------------- state


@dataclass(frozen=True, slots=True)
class Subscription:
    """An active subscription: its ``id``, ``participant_id``, outstanding ``demand`` and ``partition``."""

    id: Hashable
    participant_id: Hashable
    demand: int
    partition: int


class _Members:
    """What changes only when the membership does: shared by every state in between.

    ``owners`` and ``partitions`` map each active subscription to its
    participant and partition, ``cancelled`` holds the tombstones; the
    strategy, its dispatch engines and the capacity never change.  Immutable
    by convention (nothing writes one after :func:`_members` built it).
    """

    __slots__ = ("owners", "partitions", "cancelled", "strategy", "engine", "asks_engine", "capacity")


def _members(owners: dict, partitions: dict, cancelled: frozenset, base: Any) -> _Members:
    """New membership over ``base``'s strategy, engine and capacity."""
    m = _new(_Members)
    m.owners = owners
    m.partitions = partitions
    m.cancelled = cancelled
    m.strategy = base.strategy
    m.engine = base.engine
    m.asks_engine = base.asks_engine
    m.capacity = base.capacity
    return m


class StageState:
    """A stage's protocol state; an immutable value (build it with :func:`new`)."""

    __slots__ = ("_demands", "_order", "_buffer", "_members")

    _demands: dict  # id -> outstanding demand, active subscriptions only
    _order: tuple  # active ids in dispatch order
    _buffer: _Buffer
    _members: _Members

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("StageState is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("StageState is immutable")

    def __repr__(self) -> str:
        subs = ", ".join(f"{i!r}: {self._demands[i]}" for i in self._order)
        m = self._members
        return (
            f"StageState(strategy={m.strategy!r}, buffer_capacity={m.capacity!r}, "
            f"demand={{{subs}}}, buffered={self._buffer.size}, cancelled={len(m.cancelled)})"
        )


class _Building(StageState):
    """A :class:`StageState` being built: the same slots, writable.

    :func:`_make` fills one with plain attribute stores and then turns it into
    a ``StageState`` (assigning ``__class__``; the layouts are the same), a
    third of the cost of storing through the slot descriptors; a state is
    built on every command.
    """

    __slots__ = ()
    __setattr__ = object.__setattr__
    __delattr__ = object.__delattr__


def _make(demands: dict, order: tuple, buffer: _Buffer, members: _Members) -> StageState:
    s = _new(_Building)
    s._demands = demands
    s._order = order
    s._buffer = buffer
    s._members = members
    s.__class__ = StageState
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
    m = _new(_Members)
    m.owners, m.partitions, m.cancelled = {}, {}, frozenset()
    m.strategy, m.capacity = strategy, buffer_capacity
    m.engine, m.asks_engine = _dispatch._engine(strategy), _dispatch._asks_engine(strategy)
    return _make({}, (), _EMPTY, m)


# --------------------------------------------------------------------------- update
#
# ``update`` is the public face.  The steps below answer the same transitions
# with the effects in their raw form -- deliveries as ``(id, events)`` pairs,
# cancellations as a list of ids, which always come first -- and take the
# command's fields as arguments: :mod:`constellation.runtime` calls them
# directly and builds its deliveries without the effect values in between.

_NONE: tuple = ()


def update(state: StageState, command: Command) -> tuple[StageState, list[Effect]]:
    """Apply ``command``: the new state and its effects, or a :class:`StageError` (state unchanged)."""
    t = type(command)
    if t is Ask:
        state, sent = _ask(state, command.id, command.n)
        return state, _effects(_NONE, sent)
    if t is Push:
        state, sent = _push(state, command.events)
        return state, _effects(_NONE, sent)
    if t is Subscribe:
        return _subscribe(state, command.id, command.participant_id, command.partition), []
    if t is Cancel:
        state, gone, sent = _cancel(state, command.id)
    elif t is ParticipantDown:
        state, gone, sent = _participant_down(state, command.participant_id)
    elif t is Shutdown:
        state, gone = _shutdown(state)
        sent = _NONE
    else:
        raise TypeError(f"not a stage command: {command!r}")
    return state, _effects(gone, sent)


_set_send_id = SendEvents.__dict__["id"].__set__
_set_send_events = SendEvents.__dict__["events"].__set__


def _effects(gone: Any, sent: Any) -> list[Effect]:
    """The effect values: ``NotifyCancelled`` for each id in ``gone``, then ``SendEvents`` for each pair in ``sent``."""
    out: list[Effect] = [NotifyCancelled(i) for i in gone] if gone else []
    for i, events in sent:
        eff = _new(SendEvents)  # SendEvents(i, events), built through its slots
        _set_send_id(eff, i)
        _set_send_events(eff, events)
        out.append(eff)
    return out


def _missing(state: StageState, id: Hashable) -> StageError:
    if id in state._members.cancelled:
        return SubscriptionCancelled(id)
    return UnknownSubscription(id)


def _subscribe(state: StageState, id: Hashable, participant_id: Hashable, partition: int) -> StageState:
    """``Subscribe(id, participant_id, partition)``: the new state (no effects)."""
    m = state._members
    if id in state._demands or id in m.cancelled:
        raise DuplicateSubscription(id)
    demands = dict(state._demands)
    demands[id] = 0
    owners = dict(m.owners)
    owners[id] = participant_id
    partitions = dict(m.partitions)
    partitions[id] = partition
    return _make(demands, state._order + (id,), state._buffer, _members(owners, partitions, m.cancelled, m))


def _ask(state: StageState, id: Hashable, n: Any) -> tuple[StageState, Any]:
    """``Ask(id, n)``: the new state and the deliveries, ``(id, events)`` pairs."""
    demands = state._demands
    old = demands.get(id)
    if old is None:
        raise _missing(state, id)
    if type(n) is not int or n <= 0:
        raise InvalidDemand(n)
    demands = demands.copy()
    demands[id] = old + n
    buffer = state._buffer
    m = state._members
    if buffer.size:
        order, buffer, sent = m.engine(state._order, demands, m.partitions, buffer)
        return _make(demands, order, buffer, m), sent
    return _make(demands, state._order, buffer, m), _NONE


def _ask_all(state: StageState, asks: Iterable[tuple[Hashable, Any]]) -> tuple[StageState, list]:
    """``Ask(id, n)`` for each ``(id, n)`` of ``asks`` in turn, in one step: the last state and all deliveries.

    The same as folding :func:`_ask` over ``asks`` (each ask dispatches before
    the next is added), with one state built at the end; the first error
    raises and nothing is kept.  (An ask's errors do not depend on the asks
    before it, so all are checked first.)
    """
    if type(asks) is not list:
        asks = list(asks)
    if not asks:
        return state, []
    demands = state._demands
    for id, n in asks:
        if type(n) is not int or n <= 0 or id not in demands:
            if id not in demands:
                raise _missing(state, id)
            raise InvalidDemand(n)
    demands = demands.copy()
    m = state._members
    order, buffer, sent = m.asks_engine(state._order, demands, m.partitions, state._buffer, asks)
    return _make(demands, order, buffer, m), sent


def _push(state: StageState, events: Any) -> tuple[StageState, Any]:
    """``Push(events)``: the new state and the deliveries, ``(id, events)`` pairs."""
    if type(events) is not tuple:
        events = tuple(events)
    buffer = state._buffer.push(events)
    m = state._members
    demands = state._demands
    order = state._order
    sent: Any = _NONE
    if order and buffer.size:
        demands = demands.copy()
        order, buffer, sent = m.engine(order, demands, m.partitions, buffer)
    capacity = m.capacity
    if capacity is not None and buffer.size > capacity:
        raise BufferCapacityExceeded(capacity, buffer.size)
    return _make(demands, order, buffer, m), sent


def _remove(state: StageState, ids: list) -> tuple[StageState, list, Any]:
    """Remove and tombstone ``ids`` (in dispatch order), then dispatch."""
    gone = set(ids)
    m = state._members
    demands = {i: d for i, d in state._demands.items() if i not in gone}
    owners = {i: p for i, p in m.owners.items() if i not in gone}
    partitions = {i: k for i, k in m.partitions.items() if i not in gone}
    order = tuple(i for i in state._order if i not in gone)
    m = _members(owners, partitions, m.cancelled | gone, m)
    buffer = state._buffer
    sent: Any = _NONE
    if order and buffer.size:
        order, buffer, sent = m.engine(order, demands, partitions, buffer)
    return _make(demands, order, buffer, m), ids, sent


def _cancel(state: StageState, id: Hashable) -> tuple[StageState, list, Any]:
    """``Cancel(id)``: the new state, the cancelled ids and the deliveries."""
    if id in state._demands:
        return _remove(state, [id])
    if id in state._members.cancelled:
        return state, [], _NONE
    raise UnknownSubscription(id)


def _participant_down(state: StageState, p: Hashable) -> tuple[StageState, list, Any]:
    """``ParticipantDown(p)``: the new state, the cancelled ids and the deliveries."""
    owners = state._members.owners
    ids = [i for i in state._order if owners[i] == p]
    if not ids:
        return state, [], _NONE
    return _remove(state, ids)


def _shutdown(state: StageState) -> tuple[StageState, list]:
    """``Shutdown()``: the new state and the cancelled ids (no dispatch)."""
    ids = list(state._order)
    if not ids:
        return state, []
    m = state._members
    return _make({}, (), state._buffer, _members({}, {}, m.cancelled | frozenset(ids), m)), ids


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
    m = state._members
    return Subscription(id, m.owners[id], demand, m.partitions[id])


def is_cancelled(state: StageState, id: Hashable) -> bool:
    """Whether ``id`` is tombstoned (it was cancelled; it stays so for the stage's life)."""
    return id in state._members.cancelled


def available_demand(state: StageState) -> int:
    """The sum of the outstanding demand of all active subscriptions."""
    return sum(state._demands.values())


def subscription_ids(state: StageState) -> tuple:
    """The active subscription ids, in dispatch order."""
    return state._order


def strategy(state: StageState) -> Strategy:
    """The stage's dispatch strategy."""
    return state._members.strategy


def buffer_capacity(state: StageState) -> Optional[int]:
    """The buffer capacity (``None``: unlimited)."""
    return state._members.capacity
