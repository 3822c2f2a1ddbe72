"""The pure runtime: a participant registry and effect routing over the protocol core.

A :class:`Runtime` is the core's :class:`~constellation.core.StageState` plus a
registry: which handle each participant id is reached through, and which
participant owns each subscription.  Every operation answers
``(runtime, [Deliver(to, message), ...])``: the core's effects resolved into
messages for handles (``SendEvents`` becomes ``Deliver(handle, Events(id,
events))``, ``NotifyCancelled`` becomes ``Deliver(handle, Cancelled(id))`` and
drops the route).  Nothing here does I/O; the stage process and the worker
pool execute the deliveries.  :func:`ask_all` is a fold of :func:`ask` in one
step (a pool renews several workers' demand at once), and
:func:`ask_all_unrouted` the same with its deliveries left as ``(id, events)``
pairs, for a caller that reaches each subscription's handle itself.

Rules (spec §1.2, §3.14): one participant id is reached through one handle, so
a second subscription of the same participant with a different handle raises
:class:`ParticipantAlreadyRegistered`; the same handle may own many
subscriptions; a participant's entry lives until its last subscription is
removed.  Every error leaves the runtime unchanged (it is a value: operations
return a new one).  Core errors propagate as themselves
(:class:`constellation.core.StageError` subclasses); the registry's own are
:class:`RoutingError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Iterable

from ensemble.decide.values import same

from . import core

__all__ = [
    "Runtime",
    "Events",
    "Cancelled",
    "Deliver",
    "RoutingError",
    "ParticipantAlreadyRegistered",
    "MissingSubscriptionRoute",
    "MissingParticipantRoute",
    "InvalidConsumptionReport",
    "new",
    "subscribe",
    "ask",
    "ask_all",
    "ask_all_unrouted",
    "push",
    "cancel",
    "participant_down",
    "shutdown",
    "check_consumption",
    "has_participant",
    "has_subscription",
    "handle_of",
    "participant_of",
    "participants",
    "routes",
]


# --------------------------------------------------------------------------
# Messages
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Events:
    """Events for the subscription ``id``, in delivery order."""

    id: Hashable
    events: tuple


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The subscription ``id`` is cancelled; nothing more comes for it."""

    id: Hashable


@dataclass(frozen=True, slots=True)
class Deliver:
    """Send ``message`` (:class:`Events` or :class:`Cancelled`) to the handle ``to``."""

    to: Any
    message: Events | Cancelled


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class RoutingError(Exception):
    """Base of the registry's errors (the core's errors are StageError subclasses).

    Errors compare equal by type and fields.
    """

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.args == other.args  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.args))


class ParticipantAlreadyRegistered(RoutingError):
    """``participant_id`` is already registered with a different handle."""

    def __init__(self, participant_id: Hashable) -> None:
        super().__init__(f"participant {participant_id!r} is already registered with another handle")
        self.participant_id = participant_id

    def __repr__(self) -> str:
        return f"ParticipantAlreadyRegistered({self.participant_id!r})"


class MissingSubscriptionRoute(RoutingError):
    """No route is registered for the subscription ``id``."""

    def __init__(self, id: Hashable) -> None:  # noqa: A002 - the spec's field name
        super().__init__(f"no route for subscription {id!r}")
        self.id = id

    def __repr__(self) -> str:
        return f"MissingSubscriptionRoute({self.id!r})"


class MissingParticipantRoute(RoutingError):
    """No handle is registered for ``participant_id``."""

    def __init__(self, participant_id: Hashable) -> None:
        super().__init__(f"no handle for participant {participant_id!r}")
        self.participant_id = participant_id

    def __repr__(self) -> str:
        return f"MissingParticipantRoute({self.participant_id!r})"


class InvalidConsumptionReport(RoutingError):
    """A consumption report must count at least one event; ``amount`` did not."""

    def __init__(self, amount: Any) -> None:
        super().__init__(f"a consumption report needs a positive amount, not {amount!r}")
        self.amount = amount

    def __repr__(self) -> str:
        return f"InvalidConsumptionReport({self.amount!r})"


# --------------------------------------------------------------------------
# The runtime value
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Runtime:
    """Core state plus registry; treat it as a value (operations return a new one).

    ``participants`` maps participant id to handle, ``routes`` subscription id
    to participant id, ``owned`` participant id to its number of routes.
    """

    state: Any
    participants: dict
    routes: dict
    owned: dict


def new(strategy: Any = None, buffer_capacity: int | None = None) -> Runtime:
    """An empty runtime over ``core.new(strategy, buffer_capacity)`` (strategy None: demand)."""
    return Runtime(core.new(strategy, buffer_capacity), {}, {}, {})


def subscribe(rt: Runtime, id: Hashable, participant_id: Hashable, partition: int, handle: Any) -> tuple:  # noqa: A002
    """Register ``id`` for ``participant_id`` reached through ``handle``; answers ``(rt, [])``.

    Raises :class:`ParticipantAlreadyRegistered` when the participant has
    another handle (checked first), or the core's ``DuplicateSubscription``.
    """
    known = rt.participants.get(participant_id, _ABSENT)
    if known is not _ABSENT and not same(known, handle):
        raise ParticipantAlreadyRegistered(participant_id)
    state = core._subscribe(rt.state, id, participant_id, partition)
    participants = rt.participants
    if known is _ABSENT:
        participants = dict(participants)
        participants[participant_id] = handle
    routes = dict(rt.routes)
    routes[id] = participant_id
    owned = dict(rt.owned)
    owned[participant_id] = owned.get(participant_id, 0) + 1
    return _runtime(state, participants, routes, owned), []


def ask(rt: Runtime, id: Hashable, n: int) -> tuple:  # noqa: A002
    """Add ``n`` demand to ``id`` and route what it dispatches."""
    state, sent = core._ask(rt.state, id, n)
    return _routed(rt, state, sent)


def ask_all(rt: Runtime, asks: Iterable[tuple[Hashable, int]]) -> tuple:
    """:func:`ask` for each ``(id, n)`` of ``asks`` in turn, in one step.

    Answers what folding :func:`ask` over ``asks`` answers -- the same runtime
    and the deliveries of every ask, in order -- building one runtime instead
    of one per ask (a worker pool renews several workers' demand at once).
    All or nothing: the first error raises and the runtime is unchanged.
    """
    state, sent = core._ask_all(rt.state, asks)
    return _routed(rt, state, sent)


def ask_all_unrouted(rt: Runtime, asks: Iterable[tuple[Hashable, int]]) -> tuple:
    """:func:`ask_all` with its deliveries left unrouted: ``(rt, [(id, events), ...])``.

    ``ask_all_unrouted(rt, asks) == (rt2, [(d.message.id, d.message.events) for d in out])``
    where ``(rt2, out) == ask_all(rt, asks)`` (an ask delivers only
    :class:`Events`, and only to routed subscriptions): for a caller that
    reaches each subscription's handle on its own (a worker pool, whose
    workers each own one).  The core's errors, as :func:`ask_all` raises
    them, and all or nothing.
    """
    state, sent = core._ask_all(rt.state, asks)
    return _runtime(state, rt.participants, rt.routes, rt.owned), sent


def push(rt: Runtime, events: Any) -> tuple:
    """Push ``events`` and route what they dispatch (the core may raise BufferCapacityExceeded)."""
    state, sent = core._push(rt.state, events)
    return _routed(rt, state, sent)


def cancel(rt: Runtime, id: Hashable) -> tuple:  # noqa: A002
    """Cancel ``id`` (idempotent for a cancelled one); its handle gets :class:`Cancelled`."""
    state, gone, sent = core._cancel(rt.state, id)
    return _settled(rt, state, gone, sent)


def participant_down(rt: Runtime, participant_id: Hashable) -> tuple:
    """Cancel every subscription of ``participant_id`` and re-dispatch the buffer."""
    state, gone, sent = core._participant_down(rt.state, participant_id)
    return _settled(rt, state, gone, sent)


def shutdown(rt: Runtime) -> tuple:
    """Cancel every active subscription (no dispatch); each handle gets :class:`Cancelled`."""
    state, gone = core._shutdown(rt.state)
    return _settled(rt, state, gone, ())


def check_consumption(rt: Runtime, id: Hashable, amount: Any) -> None:  # noqa: A002
    """Validate a consumption report (telemetry only): positive amount, a routed subscription."""
    if type(amount) is not int or amount <= 0:
        raise InvalidConsumptionReport(amount)
    if id not in rt.routes:
        raise MissingSubscriptionRoute(id)


def has_participant(rt: Runtime, participant_id: Hashable) -> bool:
    """Whether ``participant_id`` has a registered handle."""
    return participant_id in rt.participants


def has_subscription(rt: Runtime, id: Hashable) -> bool:  # noqa: A002
    """Whether ``id`` has a route (an active subscription)."""
    return id in rt.routes


def handle_of(rt: Runtime, participant_id: Hashable) -> Any:
    """The handle of ``participant_id``; raises :class:`MissingParticipantRoute`."""
    try:
        return rt.participants[participant_id]
    except KeyError:
        raise MissingParticipantRoute(participant_id) from None


def participant_of(rt: Runtime, id: Hashable) -> Hashable:  # noqa: A002
    """The participant owning ``id``; raises :class:`MissingSubscriptionRoute`."""
    try:
        return rt.routes[id]
    except KeyError:
        raise MissingSubscriptionRoute(id) from None


def participants(rt: Runtime) -> dict:
    """A copy of the registry: participant id to handle."""
    return dict(rt.participants)


def routes(rt: Runtime) -> dict:
    """A copy of the routes: subscription id to participant id."""
    return dict(rt.routes)


# --------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------

_ABSENT = object()

# Frozen dataclasses are built field by field through ``object.__setattr__``;
# on the hot path (every ask of a stage or a pool) they are built here through
# their slot descriptors instead: the same values, a third of the cost.
_new_object = object.__new__
_runtime_fields = tuple(Runtime.__dict__[f].__set__ for f in ("state", "participants", "routes", "owned"))
_set_state, _set_participants, _set_routes, _set_owned = _runtime_fields
_set_events_id, _set_events_events = (Events.__dict__[f].__set__ for f in ("id", "events"))
_set_deliver_to, _set_deliver_message = (Deliver.__dict__[f].__set__ for f in ("to", "message"))


def _runtime(state: Any, participants: dict, routes: dict, owned: dict) -> Runtime:
    """``Runtime(state, participants, routes, owned)``, built fast."""
    rt = _new_object(Runtime)
    _set_state(rt, state)
    _set_participants(rt, participants)
    _set_routes(rt, routes)
    _set_owned(rt, owned)
    return rt


def _routed(rt: Runtime, state: Any, sent: Any) -> tuple:
    """The runtime over ``state`` and the deliveries of ``sent`` (``(id, events)`` pairs); the registry stays."""
    participants, routes = rt.participants, rt.routes
    out = []
    for id_, events in sent:
        handle = participants.get(routes.get(id_, _ABSENT), _ABSENT)
        if handle is _ABSENT:
            handle = _handle_of(routes, participants, id_)[1]  # raises the missing route
        m = _new_object(Events)  # Deliver(handle, Events(id_, events)), built through the slots
        _set_events_id(m, id_)
        _set_events_events(m, events)
        d = _new_object(Deliver)
        _set_deliver_to(d, handle)
        _set_deliver_message(d, m)
        out.append(d)
    return _runtime(state, participants, routes, rt.owned), out


def _handle_of(routes: Any, participants: Any, id_: Any) -> tuple[Any, Any]:
    """``(participant, its handle)`` of subscription ``id_``; raises when either route is missing."""
    pid = routes.get(id_, _ABSENT)
    if pid is _ABSENT:
        raise MissingSubscriptionRoute(id_)
    handle = participants.get(pid, _ABSENT)
    if handle is _ABSENT:
        raise MissingParticipantRoute(pid)
    return pid, handle


def _settled(rt: Runtime, state: Any, gone: Any, sent: Any) -> tuple:
    """As :func:`_routed`, after a :class:`Cancelled` for each id in ``gone``, whose route goes."""
    if not gone:
        return _routed(rt, state, sent)
    participants, routes, owned = dict(rt.participants), dict(rt.routes), dict(rt.owned)
    out = []
    for id_ in gone:
        pid, handle = _handle_of(routes, participants, id_)
        out.append(Deliver(handle, Cancelled(id_)))
        del routes[id_]
        left = owned[pid] - 1
        if left:
            owned[pid] = left
        else:
            del owned[pid]
            del participants[pid]
    rt, delivered = _routed(_runtime(state, participants, routes, owned), state, sent)
    out.extend(delivered)
    return rt, out
