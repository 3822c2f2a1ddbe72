"""Parking decisions (pure): which waiting runs to unload, when to look again, what retention forgets.

A *loaded* run has a process replaying/running its code; a run that waits (a
sleep, a signal wait, a retry's backoff, a child) may be *parked*: its process
ends and only its records (its :class:`fusee.replay.History`) stay, in the
shard server's run table (and, at a clean shutdown, in a checkpoint).  Whatever
wakes it (a timer due, a signal, a cancel, a child's result) spawns its process
again, which replays the history: exactly what recovery does at an open.

The shard server (:mod:`fusee.shard`) executes what these functions decide;
they read nothing but their arguments.  The measurement behind "memory per
parked run" is :func:`fusee.testing.parked_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

__all__ = [
    "Settings",
    "Waiting",
    "LOADED_RUN_BYTES",
    "RECORD_BYTES",
    "run_bytes",
    "to_park",
    "next_check",
    "due",
    "expired",
]

#: Estimated bytes a loaded run costs beyond its records: its process (greenlet, frames, Ctx, Machine).
LOADED_RUN_BYTES = 16 * 1024
#: Estimated bytes one decoded record costs in memory.
RECORD_BYTES = 256


@dataclass(frozen=True, slots=True)
class Settings:
    """An engine's parking and retention settings (see :meth:`fusee.Engine.open`): ``park_after``
    (seconds a run waits before it is parked; None: never), ``memory_budget`` (bytes over every
    shard; None: none), ``retention`` (seconds a finished run is kept; None: forever)."""

    park_after: float | None = None
    memory_budget: int | None = None
    retention: float | None = None

    @property
    def parks(self) -> bool:
        """Whether runs are ever parked (a waiting run tells its shard server so)."""
        return self.park_after is not None or self.memory_budget is not None


@dataclass(frozen=True, slots=True)
class Waiting:
    """A loaded run that waits: ``key`` (any hashable naming it), waiting ``since`` (unix seconds),
    and the ``nbytes`` parking it would free."""

    key: Hashable
    since: float
    nbytes: int


def run_bytes(records: int) -> int:
    """The estimated memory of a loaded run holding ``records`` records (what parking it frees)."""
    return LOADED_RUN_BYTES + RECORD_BYTES * max(0, records)


def to_park(
    now: float,
    park_after: float | None,
    budget: int | None,
    loaded_bytes: int,
    waiting: Iterable[Waiting],
) -> list[Hashable]:
    """The keys of the waiting runs to park now, longest-waiting first (ties: by key order given).

    * every run waiting at least ``park_after`` seconds (``since + park_after <= now``;
      ``park_after`` None: none by age);
    * then, while ``loaded_bytes`` (all loaded runs, waiting or not) minus what
      the runs chosen so far free exceeds ``budget`` (None: no budget), the
      longest-waiting of the rest.

    Laws: the result is a subset of ``waiting`` without repeats; it includes
    every run over ``park_after``; a run left loaded has waited no longer than
    every run parked for the budget; if the budget is still exceeded, every
    waiting run is parked.
    """
    ws = sorted(waiting, key=lambda w: w.since)  # stable: ties keep the given order
    out: list[Hashable] = []
    freed = 0
    rest: list[Waiting] = []
    for w in ws:
        if park_after is not None and w.since + park_after <= now:
            out.append(w.key)
            freed += w.nbytes
        else:
            rest.append(w)
    if budget is not None:
        for w in rest:
            if loaded_bytes - freed <= budget:
                break
            out.append(w.key)
            freed += w.nbytes
    return out


def next_check(park_after: float | None, waiting: Iterable[Waiting]) -> float | None:
    """The earliest unix time at which one of ``waiting`` reaches ``park_after`` (None: never)."""
    if park_after is None:
        return None
    first = min((w.since for w in waiting), default=None)
    return None if first is None else first + park_after


def due(now: float, wake_ats: Iterable[tuple[float, Hashable]]) -> list[Hashable]:
    """The keys whose wake-up time is at or before ``now``, earliest first."""
    return [k for at, k in sorted(wake_ats, key=lambda p: p[0]) if at <= now]


def expired(finished: float | None, now: float, retention: float | None) -> bool:
    """Whether a run that finished at ``finished`` is past ``retention`` (None: kept forever;
    an unfinished run, ``finished`` None, never expires)."""
    return retention is not None and finished is not None and now - finished >= retention
