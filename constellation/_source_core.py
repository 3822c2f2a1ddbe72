"""The pure bookkeeping of an asynchronous source's demand grants (spec §1.4).

A pool offers its source only *unreserved* capacity: capacity the source has
not already been granted.  :class:`Reservation` is an immutable value; every
function answers a new one (and, where the pool must act, a list of actions)
and never changes the one it was given.  Nothing here sends, waits or runs user
code: the pool process (:mod:`constellation.worker_pool`) carries the answers
out.

* :func:`reconcile` brings the open grants in line with the capacity: equal
  capacity and pending amount is a no-op, more capacity issues one grant of the
  difference, less revokes every open grant and issues one of the whole
  capacity (if any).
* :func:`supply` checks one offset-based, possibly partial supply against a
  grant: :class:`Accepted`, :class:`Duplicate` or :class:`StaleGrant`, or it
  raises :class:`OffsetGap`, :class:`OffsetOverlap` or :class:`GrantExceeded`.
* :func:`unavailable`, :func:`available` and :func:`shutdown` move the status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "AVAILABLE",
    "UNAVAILABLE",
    "STOPPED",
    "COMPLETED_WINDOW",
    "Grant",
    "Reservation",
    "GrantCapacity",
    "RevokeGrant",
    "StopSource",
    "Accepted",
    "Duplicate",
    "StaleGrant",
    "SourceError",
    "SupplyProtocol",
    "OffsetGap",
    "OffsetOverlap",
    "GrantExceeded",
    "SourceMismatch",
    "SourceTimeout",
    "SourceUnavailable",
    "new",
    "pending",
    "reconcile",
    "supply",
    "unavailable",
    "available",
    "shutdown",
]

AVAILABLE: Final = "available"
UNAVAILABLE: Final = "unavailable"
STOPPED: Final = "stopped"
COMPLETED_WINDOW: Final = 64
"""How many fully supplied grants are remembered, so that a retry of them is a Duplicate."""


# -- state --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """An open grant: ``amount`` events may be supplied, ``supplied`` already were."""

    id: int
    amount: int
    supplied: int = 0


@dataclass(frozen=True, slots=True)
class Reservation:
    """The source's grant state: status, open grants (by id), recently completed grants."""

    status: str = AVAILABLE
    grants: tuple[Grant, ...] = ()
    completed: tuple[tuple[int, int], ...] = ()  # (id, amount), oldest first, at most COMPLETED_WINDOW
    next_id: int = 1


# -- actions the pool carries out ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrantCapacity:
    """Tell the source it may supply ``amount`` events against grant ``id``."""

    id: int
    amount: int


@dataclass(frozen=True, slots=True)
class RevokeGrant:
    """Tell the source grant ``id`` (of its original ``amount``) is withdrawn."""

    id: int
    amount: int


@dataclass(frozen=True, slots=True)
class StopSource:
    """Tell the source it will get no more grants."""


# -- supply results -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accepted:
    """The supply was taken: the grant now expects ``next_offset``; ``remaining`` is left."""

    next_offset: int
    remaining: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The supply repeats events already accepted: nothing happened."""


@dataclass(frozen=True, slots=True)
class StaleGrant:
    """The grant is revoked, unknown or long completed: nothing happened."""


# -- errors ------------------------------------------------------------------------------


class SourceError(Exception):
    """A supply the pool could not take."""


class SupplyProtocol(SourceError):
    """A supply that breaks the grant's offset rules (the base of the three below)."""


class OffsetGap(SupplyProtocol):
    """The supply starts after the grant's next offset."""

    def __init__(self, expected: int, provided: int) -> None:
        super().__init__(f"offset gap: expected offset {expected}, got {provided}")
        self.expected = expected
        self.provided = provided

    def __eq__(self, other: object) -> bool:
        return type(other) is OffsetGap and (self.expected, self.provided) == (other.expected, other.provided)

    def __hash__(self) -> int:
        return hash((OffsetGap, self.expected, self.provided))

    def __repr__(self) -> str:
        return f"OffsetGap(expected={self.expected}, provided={self.provided})"


class OffsetOverlap(SupplyProtocol):
    """The supply starts inside the accepted range and runs past it."""

    def __init__(self, accepted_until: int, provided_until: int) -> None:
        super().__init__(f"offset overlap: accepted until {accepted_until}, supply runs until {provided_until}")
        self.accepted_until = accepted_until
        self.provided_until = provided_until

    def __eq__(self, other: object) -> bool:
        return type(other) is OffsetOverlap and (self.accepted_until, self.provided_until) == (
            other.accepted_until,
            other.provided_until,
        )

    def __hash__(self) -> int:
        return hash((OffsetOverlap, self.accepted_until, self.provided_until))

    def __repr__(self) -> str:
        return f"OffsetOverlap(accepted_until={self.accepted_until}, provided_until={self.provided_until})"


class GrantExceeded(SupplyProtocol):
    """The supply holds more events than the grant has left."""

    def __init__(self, remaining: int, provided: int) -> None:
        super().__init__(f"grant exceeded: {remaining} remaining, {provided} supplied")
        self.remaining = remaining
        self.provided = provided

    def __eq__(self, other: object) -> bool:
        return type(other) is GrantExceeded and (self.remaining, self.provided) == (other.remaining, other.provided)

    def __hash__(self) -> int:
        return hash((GrantExceeded, self.remaining, self.provided))

    def __repr__(self) -> str:
        return f"GrantExceeded(remaining={self.remaining}, provided={self.provided})"


class SourceMismatch(SourceError):
    """The grant belongs to another source (another pool, or an earlier incarnation)."""

    def __init__(self) -> None:
        super().__init__("the grant belongs to another source")


class SourceTimeout(SourceError):
    """No answer within the timeout; the supply may still be applied."""

    def __init__(self) -> None:
        super().__init__("the pool did not answer the supply in time (it may still be applied)")


class SourceUnavailable(SourceError):
    """The pool is gone or stopping, or its stage refused the events (nothing was taken)."""

    def __init__(self, reason: object = None) -> None:
        super().__init__("the pool cannot take supplies" + ("" if reason is None else f": {reason}"))
        self.reason = reason


def _eq_by_type(self: object, other: object) -> bool:
    return type(other) is type(self)


for _cls in (SourceMismatch, SourceTimeout):
    _cls.__eq__ = _eq_by_type  # type: ignore[method-assign]
    _cls.__hash__ = lambda self: hash(type(self))  # type: ignore[method-assign]
    _cls.__repr__ = lambda self: f"{type(self).__name__}()"  # type: ignore[method-assign]


# -- transitions ---------------------------------------------------------------------


def new() -> Reservation:
    """An available source with no grants; the first grant id is 1."""
    return Reservation()


def pending(r: Reservation) -> int:
    """The capacity granted and not yet supplied: ``Σ(amount − supplied)`` over open grants."""
    return sum(g.amount - g.supplied for g in r.grants)


def _revoke_all(r: Reservation) -> tuple[Reservation, list]:
    actions = [RevokeGrant(g.id, g.amount) for g in r.grants]
    if not r.grants:
        return r, actions
    return Reservation(r.status, (), r.completed, r.next_id), actions


def reconcile(r: Reservation, capacity: int) -> tuple[Reservation, list]:
    """Match the open grants to ``capacity`` (negative counts as 0); only while available."""
    if r.status != AVAILABLE:
        return r, []
    capacity = max(0, capacity)
    owed = pending(r)
    if capacity == owed:
        return r, []
    if capacity > owed:
        amount = capacity - owed
        g = Grant(r.next_id, amount)
        return Reservation(r.status, (*r.grants, g), r.completed, r.next_id + 1), [GrantCapacity(g.id, amount)]
    r, actions = _revoke_all(r)
    if capacity > 0:
        g = Grant(r.next_id, capacity)
        r = Reservation(r.status, (g,), r.completed, r.next_id + 1)
        actions.append(GrantCapacity(g.id, capacity))
    return r, actions


def supply(r: Reservation, grant_id: int, offset: int, count: int) -> tuple[Reservation, object]:
    """Check ``count`` events supplied at ``offset`` of grant ``grant_id``.

    Answers ``(reservation, Accepted | Duplicate | StaleGrant)``; raises
    :class:`OffsetGap`, :class:`OffsetOverlap` or :class:`GrantExceeded`
    (the reservation given is untouched either way).  Only counts are
    compared: the contents of a retried supply are not checked.
    """
    index = -1
    for i, g in enumerate(r.grants):
        if g.id == grant_id:
            index = i
            break
    if index < 0:
        if r.status != STOPPED and any(gid == grant_id for gid, _ in r.completed):
            return r, Duplicate()
        return r, StaleGrant()
    g = r.grants[index]
    supplied = g.supplied
    if offset < supplied:
        if offset + count <= supplied:
            return r, Duplicate()
        raise OffsetOverlap(supplied, offset + count)
    if offset > supplied:
        raise OffsetGap(supplied, offset)
    remaining = g.amount - supplied
    if count > remaining:
        raise GrantExceeded(remaining, count)
    if count == 0:
        return r, Accepted(offset, remaining)
    now = supplied + count
    grants = list(r.grants)
    completed = r.completed
    if now == g.amount:
        del grants[index]
        completed = (*completed, (g.id, g.amount))[-COMPLETED_WINDOW:]
    else:
        grants[index] = Grant(g.id, g.amount, now)
    return Reservation(r.status, tuple(grants), completed, r.next_id), Accepted(now, g.amount - now)


def unavailable(r: Reservation) -> tuple[Reservation, list]:
    """The source has nothing for now: revoke every open grant; no grants until :func:`available`."""
    if r.status == STOPPED:
        return r, []
    r, actions = _revoke_all(r)
    return Reservation(UNAVAILABLE, r.grants, r.completed, r.next_id), actions


def available(r: Reservation, capacity: int) -> tuple[Reservation, list]:
    """The source can supply again: reconcile against ``capacity`` (nothing once stopped)."""
    if r.status == STOPPED:
        return r, []
    return reconcile(Reservation(AVAILABLE, r.grants, r.completed, r.next_id), capacity)


def shutdown(r: Reservation) -> tuple[Reservation, list]:
    """Revoke every open grant and stop the source for good (supplies become stale)."""
    if r.status == STOPPED:
        return r, []
    r, actions = _revoke_all(r)
    actions.append(StopSource())
    return Reservation(STOPPED, (), r.completed, r.next_id), actions
