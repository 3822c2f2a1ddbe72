"""Dispatch strategies: which subscription gets which buffered event.

Pure rules, no I/O: :mod:`constellation.core` asks the strategy (through its
engine over the stage's buffer, which answers what :func:`dispatch` answers;
see "Engines" below) after every ``Ask``, ``Push``, ``Cancel`` and
``ParticipantDown`` and applies the answer.  The rules are constellation 0.2's (``domains/dispatcher.gleam`` and
its ``demand``, ``broadcast``, ``partition`` and ``custom`` sub-modules,
``docs/adr/0004-dispatch-ordering.md``):

A :class:`Target` is one active subscription as the strategy sees it: its
``id``, its outstanding ``demand`` (>= 0) and its ``partition``.  The targets
come in *dispatch order*; :func:`dispatch` answers a :class:`DispatchResult`
with the targets in their new order and demand, one :class:`Delivery` per
target that received events (never an empty one), and the ``remaining``
events (in their relative order) that stay buffered.

1. :func:`demand` -- per event, the first target (in the current order)
   with demand > 0 gets it and the order becomes ``targets after it ++
   targets before it ++ [it]``.  The rotation is a cyclic one, so it
   persists across commands: pushes ``[1]``, ``[2]``, ``[3]`` to two
   subscriptions go first, second, first.  When no target has demand the
   rest stays buffered.  Capacity: some target has demand > 0.
2. :func:`broadcast` -- a strict barrier: ``count = min(len(events), min
   demand of all targets)``; every target gets the same first ``count``
   events; the order never changes.  Capacity: there is a target and every
   target has demand > 0 (a new subscriber blocks everyone until it asks).
3. :func:`partition` -- per event, the first target in the current order
   whose ``partition == key(event)`` and whose demand > 0 gets it and moves
   to the end of the order.  An event with no such owner stays buffered and
   dispatch goes on with the next event (no head-of-line blocking); several
   targets may share a partition (round robin).  Capacity: some target has
   demand > 0.
4. :func:`custom` -- per event, ``select(targets, event)`` (the targets with
   the demand already taken in this dispatch) names an id or ``None``.  The
   library enforces safety: ``None``, an id that is no target, or a target
   without demand leaves the event buffered (in relative order) and the loop
   goes on.  Otherwise that target's demand drops by one and it gets the
   event.  The order is never rotated.  Capacity: some target has demand > 0.

Deliveries of :func:`demand`, :func:`partition` and :func:`custom` come in
the order each target first received an event in this dispatch; those of
:func:`broadcast` in target order.  Every delivery is FIFO.  An exception
raised by a ``key`` or ``select`` function propagates unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, Callable, Hashable, Iterable, Optional

__all__ = [
    "Strategy",
    "Target",
    "Delivery",
    "DispatchResult",
    "demand",
    "broadcast",
    "partition",
    "custom",
    "dispatch",
    "has_capacity",
    "window",
]

_DEMAND = "demand"
_BROADCAST = "broadcast"
_PARTITION = "partition"
_CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class Strategy:
    """A dispatch strategy; build one with :func:`demand`, :func:`broadcast`, :func:`partition` or :func:`custom`."""

    kind: str
    function: Optional[Callable[..., Any]] = None

    def __repr__(self) -> str:
        if self.function is None:
            return f"{self.kind}()"
        return f"{self.kind}({self.function!r})"


@dataclass(frozen=True, slots=True)
class Target:
    """One active subscription as a strategy sees it (``demand`` >= 0)."""

    id: Hashable
    demand: int
    partition: int = 0


@dataclass(frozen=True, slots=True)
class Delivery:
    """Events for one subscription, in FIFO order (never empty in a result)."""

    id: Hashable
    events: tuple


@dataclass(frozen=True, slots=True)
class DispatchResult:
    """The targets in their new order and demand, the deliveries, and the events left buffered."""

    targets: tuple[Target, ...]
    deliveries: tuple[Delivery, ...]
    remaining: tuple


_DEMAND_STRATEGY = Strategy(_DEMAND)
_BROADCAST_STRATEGY = Strategy(_BROADCAST)


def demand() -> Strategy:
    """Per-event round robin over the targets with demand; the rotation persists."""
    return _DEMAND_STRATEGY


def broadcast() -> Strategy:
    """Every target gets every event; the slowest subscriber holds everyone back."""
    return _BROADCAST_STRATEGY


def partition(key: Callable[[Any], int]) -> Strategy:
    """Each event goes to an owner of partition ``key(event)``; no head-of-line blocking."""
    if not callable(key):
        raise TypeError(f"partition key must be callable, got {key!r}")
    return Strategy(_PARTITION, key)


def custom(select: Callable[[tuple[Target, ...], Any], Optional[Hashable]]) -> Strategy:
    """``select(targets, event)`` picks a target id (or ``None``); the library enforces demand."""
    if not callable(select):
        raise TypeError(f"custom selector must be callable, got {select!r}")
    return Strategy(_CUSTOM, select)


def _check(strategy: Any) -> None:
    if type(strategy) is not Strategy:
        raise TypeError(f"not a dispatch strategy: {strategy!r}")


def has_capacity(strategy: Strategy, targets: Iterable[Target]) -> bool:
    """Whether ``strategy`` could deliver anything at all to ``targets``."""
    _check(strategy)
    return window(strategy, [t.demand for t in targets]) != 0


def window(strategy: Strategy, demands: Iterable[int]) -> Optional[int]:
    """How much of the buffer's head a dispatch to targets with ``demands`` (each >= 0) can use.

    ``0``: nothing (no capacity); ``k > 0``: only the first ``k`` events
    (:func:`demand`: the sum of the demands, :func:`broadcast`: the smallest),
    and whatever of them stays buffered is their tail; ``None``: the whole
    buffer, any event of which may stay (:func:`partition`, :func:`custom`,
    when some target has demand).  Dispatching the first ``k`` events and
    keeping the rest behind them is the same as dispatching them all.  The
    core uses it to hand a strategy no more of a large backlog than it can move.
    """
    kind = strategy.kind
    if kind == _DEMAND:
        return sum(demands)
    if kind == _BROADCAST:
        return min(demands, default=0)
    return None if any(d > 0 for d in demands) else 0


def dispatch(strategy: Strategy, targets: Iterable[Target], events: Iterable[Any]) -> DispatchResult:
    """Run ``strategy`` over ``events`` for ``targets`` (in dispatch order); see the module rules."""
    _check(strategy)
    targets = tuple(targets)
    events = tuple(events)
    order = []
    demands: dict[Hashable, int] = {}
    partitions: dict[Hashable, int] = {}
    for t in targets:
        if type(t) is not Target:
            raise TypeError(f"not a Target: {t!r}")
        if t.id in demands:
            raise ValueError(f"duplicate target id {t.id!r}")
        if type(t.demand) is not int or t.demand < 0:
            raise ValueError(f"target demand must be an int >= 0, got {t.demand!r}")
        order.append(t.id)
        demands[t.id] = t.demand
        partitions[t.id] = t.partition
    new_order, deliveries, remaining = _run(strategy, tuple(order), demands, partitions, events)
    return DispatchResult(
        tuple(Target(i, demands[i], partitions[i]) for i in new_order),
        tuple(Delivery(i, evs) for i, evs in deliveries),
        remaining,
    )


# --------------------------------------------------------------------------
# Engines: a strategy over a stage's buffer
# --------------------------------------------------------------------------
#
# The core keeps its buffer (``constellation.core._Buffer``: ``size``,
# ``take(k)``, ``drop(k)``, ``split(k)``, ``peek(start, k)``,
# ``holding(events)``, and its head chunk ``chunks[0]`` from ``offset`` on,
# read-only) and asks the strategy's engines, chosen once per stage
# by :func:`_engine` and :func:`_asks_engine`, to dispatch it:
# ``engine(order, demands, partitions, buffer) -> (order, buffer,
# deliveries)``, ``demands`` a fresh dict it updates in place, deliveries
# ``(id, events)`` pairs.  Every engine answers what :func:`_run` over the
# buffer's :func:`window` answers, the rest of the buffer staying behind it;
# the strategy kinds are told apart here, never in the core.


def _engine(strategy: Strategy) -> Callable[[tuple, dict, dict, Any], tuple]:
    """The engine that runs ``strategy`` over a core buffer (see above)."""
    _check(strategy)
    if strategy.kind == _DEMAND:
        return _engine_demand

    def engine(order: tuple, demands: dict, partitions: dict, buffer: Any) -> tuple:
        return _windowed(strategy, order, demands, partitions, buffer)

    return engine


def _asks_engine(strategy: Strategy) -> Callable[[tuple, dict, dict, Any, list], tuple]:
    """The engine of a run of asks: ``asks_engine(order, demands, partitions, buffer, asks)``.

    ``asks`` is a list of ``(id, n)`` pairs, ids of targets and ``n > 0``;
    each adds ``n`` to its target's demand and dispatches, in turn.  Answers
    ``(order, buffer, deliveries)``: what folding :func:`_engine` over the
    asks answers (every ask's deliveries, in order), ``demands`` updated in
    place.
    """
    engine = _engine(strategy)
    return _asks_demand if engine is _engine_demand else _folded(engine)


def _folded(engine: Callable[[tuple, dict, dict, Any], tuple]) -> Callable[[tuple, dict, dict, Any, list], tuple]:
    """The asks engine that folds ``engine`` over the asks, one dispatch after each."""

    def asks_engine(order: tuple, demands: dict, partitions: dict, buffer: Any, asks: list) -> tuple:
        sent: list = []
        for i, n in asks:
            demands[i] += n
            if buffer.size:
                order, buffer, out = engine(order, demands, partitions, buffer)
                sent += out
        return order, buffer, sent

    return asks_engine


def _asks_demand(order: tuple, demands: dict, partitions: dict, buffer: Any, asks: list) -> tuple:
    """:func:`demand`'s asks engine: the fold of :func:`_engine_demand`, its fast case done in place.

    While each ask's target is the only one with demand (workers renewing
    their own demand one after the other), the deliveries are consecutive
    runs of the buffer's head: they are sliced off in turn (from the head
    chunk directly while they lie in it, else ``buffer.peek``) and the buffer
    is cut once, at the end; and as each such delivery turns the order round
    until its target is last, the turns add up to one, made once, for the
    last of them.  An ask that finds other targets with demand goes through
    :func:`_engine_demand`.
    """
    sent: list = []
    left = buffer.size
    if not left:  # nothing to deliver: the asks only add demand
        for i, n in asks:
            demands[i] += n
        return order, buffer, sent
    taken = 0  # events delivered from the buffer's head, not cut off yet
    head = buffer.chunks[0]
    at = buffer.offset  # where the next delivery starts in ``head`` (while it lies in it)
    end_of_head = len(head)
    total = sum(demands.values())
    last = None  # the target of the last delivery whose turn of the order is not made yet
    append = sent.append
    if not total and asks and at + _sum(map(_second, asks)) <= end_of_head:
        # No target has demand and the asks fit in the head chunk (so in the buffer): each is
        # served whole, in turn, by the next slice of the head (every demand stays 0).
        for i, n in asks:
            end = at + n
            append((i, head[at:end]))
            at = end
        j = order.index(i) + 1  # _turned(order, i), inlined
        if j < len(order):
            order = order[j:] + order[:j]
        return order, buffer.drop(at - buffer.offset), sent
    if not total:
        # No target has demand (the steady state of busy workers): each ask in turn is its
        # target's only demand, served whole while the buffer lasts (that demand stays 0) --
        # the loop below, where ``d == total`` always holds, with less to track.
        for i, n in asks:
            if not left:
                demands[i] += n
                continue
            if n < left:
                k = n
            else:
                k = left
                demands[i] = n - k
            end = at + k
            append((i, head[at:end]) if end <= end_of_head else (i, buffer.peek(taken, k)))
            at = end
            taken += k
            left -= k
            last = i
        asks = ()
    for i, n in asks:
        d = demands[i] + n
        total += n
        if not left:
            demands[i] = d
            continue
        if d == total:  # the only target with demand
            k = d if d < left else left
            end = at + k
            if end <= end_of_head:
                append((i, head[at:end]))
            else:
                append((i, buffer.peek(taken, k)))
            at = end
            taken += k
            left -= k
            demands[i] = d - k
            total -= k
            last = i
            continue
        # Another target has demand too.  That happens only before this run's first delivery: after
        # any dispatch the buffer is empty or no target has demand, so nothing is taken or pending.
        demands[i] = d
        order, buffer, out = _engine_demand(order, demands, partitions, buffer)
        sent += out
        left = buffer.size
        total = sum(demands.values())
        if left:
            head = buffer.chunks[0]
            at = buffer.offset
            end_of_head = len(head)
    if last is not None:  # _turned(order, last), inlined
        j = order.index(last) + 1
        if j < len(order):
            order = order[j:] + order[:j]
    return order, buffer.drop(taken), sent


_sum = sum
_second = itemgetter(1)


def _turned(order: tuple, last: Hashable) -> tuple:
    """``order`` turned round until ``last`` is last."""
    j = order.index(last) + 1
    return order[j:] + order[:j] if j < len(order) else order


def _windowed(strategy: Strategy, order: tuple, demands: dict, partitions: dict, buffer: Any) -> tuple:
    """The reference engine: :func:`_run` over the buffer's :func:`window`, the rest kept behind it."""
    if not buffer.size or not order:
        return order, buffer, []
    size = window(strategy, demands.values())
    if size == 0:
        return order, buffer, []
    events = buffer.take(size)
    order, deliveries, remaining = _run(strategy, order, demands, partitions, events)
    if size is None:
        return order, buffer.holding(remaining), deliveries
    return order, buffer.drop(len(events) - len(remaining)), deliveries


def _engine_demand(order: tuple, demands: dict, partitions: dict, buffer: Any) -> tuple:
    """:func:`demand`'s engine; one target with demand (a consumer renewing its own) is the fast case."""
    only = None
    for i in order:
        if demands[i] > 0:
            if only is not None:
                events = buffer.take(sum(demands.values()))
                order, deliveries, remaining = _run_demand(order, demands, events)
                return order, buffer.drop(len(events) - len(remaining)), deliveries
            only = i
    if only is None:
        return order, buffer, []
    take = demands[only]
    events, buffer = buffer.split(take)
    if not events:
        return order, buffer, []
    demands[only] = take - len(events)
    return _turned(order, only), buffer, [(only, events)]


def _run(
    strategy: Strategy,
    order: tuple,
    demands: dict,
    partitions: dict,
    events: tuple,
) -> tuple[tuple, list[tuple[Hashable, tuple]], tuple]:
    """The engine behind :func:`dispatch`: ``demands`` is updated in place.

    Answers ``(new_order, [(id, events), ...], remaining)``; the core calls
    it directly to avoid building :class:`Target` values.
    """
    kind = strategy.kind
    if kind == _DEMAND:
        return _run_demand(order, demands, events)
    if kind == _BROADCAST:
        return _run_broadcast(order, demands, events)
    if kind == _PARTITION:
        return _run_partition(strategy.function, order, demands, partitions, events)
    return _run_custom(strategy.function, order, demands, partitions, events)


def _run_demand(order: tuple, demands: dict, events: tuple):
    n = len(events)
    active = [i for i in order if demands[i] > 0]
    if not active or n == 0:
        return order, [], events
    if len(active) == 1:
        only = active[0]
        take = demands[only]
        if take > n:
            take = n
        demands[only] -= take
        k = order.index(only) + 1
        return order[k:] + order[:k], [(only, events[:take])], events[take:]
    # Round robin in bulk: ``r`` full rounds over the ``m`` active targets
    # give target ``j`` the events ``off + j, off + j + m, ...`` (a strided
    # slice); targets whose demand runs out leave the cycle, which keeps
    # its order, so the next round starts at the first survivor again.
    first = active
    parts: dict[Hashable, list] = {i: [] for i in active}
    off = 0
    last = None
    while active and off < n:
        m = len(active)
        left = n - off
        r = left // m
        low = min([demands[i] for i in active])
        if low < r:
            r = low
        if r == 0:
            for j in range(left):
                i = active[j]
                parts[i].append(events[off + j : off + j + 1])
                demands[i] -= 1
            last = active[left - 1]
            off = n
            break
        end = off + r * m
        for j, i in enumerate(active):
            parts[i].append(events[off + j : end : m])
            demands[i] -= r
        last = active[-1]
        off = end
        if low == r:
            active = [i for i in active if demands[i] > 0]
    deliveries = []
    for i in first:
        p = parts[i]
        if p:
            deliveries.append((i, p[0] if len(p) == 1 else tuple(chain.from_iterable(p))))
    k = order.index(last) + 1
    return order[k:] + order[:k], deliveries, events[off:]


def _run_broadcast(order: tuple, demands: dict, events: tuple):
    if not order:
        return order, [], events
    count = min(len(events), min([demands[i] for i in order]))
    if count <= 0:
        return order, [], events
    sent = events[:count]
    for i in order:
        demands[i] -= count
    return order, [(i, sent) for i in order], events[count:]


def _run_partition(key: Callable[[Any], int], order: tuple, demands: dict, partitions: dict, events: tuple):
    rotation = list(order)
    budget = sum(demands.values())
    parts: dict[Hashable, list] = {}
    remaining = []
    for pos, event in enumerate(events):
        if budget == 0:
            remaining.extend(events[pos:])
            break
        want = key(event)
        chosen = None
        for i in rotation:
            if demands[i] > 0 and partitions[i] == want:
                chosen = i
                break
        if chosen is None:
            remaining.append(event)
            continue
        demands[chosen] -= 1
        budget -= 1
        rotation.remove(chosen)
        rotation.append(chosen)
        got = parts.get(chosen)
        if got is None:
            parts[chosen] = [event]
        else:
            got.append(event)
    return tuple(rotation), [(i, tuple(evs)) for i, evs in parts.items()], tuple(remaining)


def _run_custom(select: Callable[..., Any], order: tuple, demands: dict, partitions: dict, events: tuple):
    parts: dict[Hashable, list] = {}
    remaining = []
    view = None
    for event in events:
        if view is None:
            view = tuple(Target(i, demands[i], partitions[i]) for i in order)
        chosen = select(view, event)
        try:
            ok = chosen is not None and demands.get(chosen, 0) > 0
        except TypeError:  # an unhashable pick names no target
            ok = False
        if not ok:
            remaining.append(event)
            continue
        # Store under the target's own id object, not the selector's equal one.
        chosen = next(i for i in order if i == chosen)
        demands[chosen] -= 1
        view = None
        got = parts.get(chosen)
        if got is None:
            parts[chosen] = [event]
        else:
            got.append(event)
    return order, [(i, tuple(evs)) for i, evs in parts.items()], tuple(remaining)
