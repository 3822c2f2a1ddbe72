"""Asynchronous demand sources: grants of unreserved pool capacity, supplied by offset.

A source is attached to a worker pool (:func:`constellation.worker_pool.start_with_source`).
The pool tells it, through ``notify_source`` (called in a notifier process of
its own, never in the pool's), when capacity is granted, revoked, or gone:
:class:`DemandGranted`, :class:`GrantRevoked`, :class:`SourceStopped`.  A
grant covers only capacity nobody holds yet, so a source may keep one while it
has nothing to send and supply it later, without polling::

    pool, src = worker_pool.start_with_source(config, inbox.put)
    grant = inbox.get().grant                           # DemandGranted(grant)
    source.supply(src, grant, 0, [1, 2])                # Accepted(next_offset=2, remaining=6)
    source.supply(src, grant, 2, [3, 4, 5, 6, 7, 8])    # Accepted(next_offset=8, remaining=0)

Supplies are partial and offset-based, per grant, from 0.  An exact or
contained retry of accepted events answers :class:`Duplicate` (nothing
happens); a revoked, unknown or long-completed grant answers
:class:`StaleGrant`; a gap, a partial overlap or too many events raise
:class:`OffsetGap`, :class:`OffsetOverlap` or :class:`GrantExceeded`; a grant
of another source raises :class:`SourceMismatch`.  The grant's reservation and
the delivery to the pool's stage commit together or not at all: when the stage
refuses the events, :class:`SourceUnavailable` is raised and the grant is as it
was.  :class:`SourceTimeout` means no answer in time: the supply may still be
applied, so retry it at the same offset (a retry is idempotent).  A callback
that raises stops the pool, because a dropped grant would strand capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from ensemble import CallError
from ensemble import gen_server

from ._source_core import (
    Accepted,
    Duplicate,
    GrantExceeded,
    OffsetGap,
    OffsetOverlap,
    SourceError,
    SourceMismatch,
    SourceTimeout,
    SourceUnavailable,
    StaleGrant,
    SupplyProtocol,
)

__all__ = [
    "DemandGrant",
    "DemandGranted",
    "GrantRevoked",
    "SourceStopped",
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
    "Source",
    "grant_amount",
    "supply",
    "available",
    "unavailable",
]

SUPPLY = "$constellation.source.supply"
AVAILABLE = "$constellation.source.available"
UNAVAILABLE = "$constellation.source.unavailable"


@dataclass(frozen=True, slots=True)
class DemandGrant:
    """Capacity granted to one source: ``amount`` events may be supplied against grant ``id``."""

    source_id: Hashable
    id: int
    amount: int


@dataclass(frozen=True, slots=True)
class DemandGranted:
    """The source may supply ``grant.amount`` events against ``grant``."""

    grant: DemandGrant


@dataclass(frozen=True, slots=True)
class GrantRevoked:
    """``grant`` (its original identity and amount) is withdrawn: its supplies are stale now."""

    grant: DemandGrant


@dataclass(frozen=True, slots=True)
class SourceStopped:
    """The pool is stopping: no more grants will come."""


class Source:
    """A running source's capability: where supplies go, and how long to wait for an answer."""

    __slots__ = ("source_id", "_server", "timeout")

    def __init__(self, source_id: Hashable, server: Any, timeout: float) -> None:
        self.source_id = source_id
        self._server = server
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Source({self._server!r})"

    def supply(self, grant: DemandGrant, offset: int, events: Sequence[Any]) -> Any:
        """:func:`supply` on this source."""
        return supply(self, grant, offset, events)


def grant_amount(grant: DemandGrant) -> int:
    """How many events ``grant`` allows in all."""
    return grant.amount


def supply(source: Source, grant: DemandGrant, offset: int, events: Sequence[Any]) -> Any:
    """Supply ``events`` at ``offset`` of ``grant``; answers Accepted, Duplicate or StaleGrant.

    Raises :class:`SourceMismatch` (checked here, before anything is sent) for
    a grant of another source, :class:`OffsetGap`, :class:`OffsetOverlap`,
    :class:`GrantExceeded`, :class:`SourceUnavailable` (pool gone or stopping,
    or its stage refused the events) or :class:`SourceTimeout` (no answer in
    time: the supply may still be applied).
    """
    if type(grant) is not DemandGrant or grant.source_id != source.source_id:
        raise SourceMismatch()
    if type(events) is not tuple:
        events = tuple(events)
    try:
        answer = gen_server.call(source._server, (SUPPLY, source.source_id, grant.id, offset, events), source.timeout)
    except CallError as err:
        if err.reason == "timeout":
            raise SourceTimeout() from None
        raise SourceUnavailable(err.reason) from None
    if answer[0] == "ok":
        return answer[1]
    raise answer[1]


def unavailable(source: Source) -> None:
    """Tell the pool the source has nothing for now: its open grants are revoked (asynchronous)."""
    gen_server.cast(source._server, (UNAVAILABLE, source.source_id))


def available(source: Source) -> None:
    """Tell the pool the source can supply again: unreserved capacity is granted (asynchronous)."""
    gen_server.cast(source._server, (AVAILABLE, source.source_id))
