"""The deadlines of receives parked with a timeout on one carrier: which are due, which to forget.

A receive with a timeout used to arm (and close) a hub timer of its own on every
park, though most never fire (the reply comes first).  A carrier now keeps one
heap of entries and one hub timer armed at the earliest deadline.  An entry is a
tuple ``(at, seq, claim, *item)``: ``at`` the deadline; ``seq`` unique and
increasing (so equal deadlines come out in the order they were pushed, and
nothing after it is ever compared); ``claim`` a list, non-empty while the entry
is live -- the runtime empties it when the wait ends some other way (a wake, a
doom) and never searches the heap for it.  Stale entries are dropped when they
reach the top (:func:`due`, :func:`next_at`) or by :func:`compact` once the heap
outgrows :func:`limit_after` the last compaction, so each park costs one push and
O(1) amortized upkeep, and the heap stays within about twice the live entries.

Pure: no clock (the caller passes ``now``), no I/O, no threads.
"""

from __future__ import annotations

from heapq import heapify, heappop

__all__ = ["due", "next_at", "compact", "limit_after", "MIN_LIMIT"]

#: The smallest heap size that triggers a compaction.
MIN_LIMIT = 64


def due(heap: list[tuple], now: float) -> list[tuple]:
    """Pop every entry whose deadline is ``<= now``; answer the live ones, earliest first
    (equal deadlines: pushed first)."""
    out = []
    while heap and heap[0][0] <= now:
        entry = heappop(heap)
        if entry[2]:
            out.append(entry)
    return out


def next_at(heap: list[tuple]) -> float | None:
    """The earliest deadline of a live entry (stale entries on top are popped), or None."""
    while heap and not heap[0][2]:
        heappop(heap)
    return heap[0][0] if heap else None


def compact(heap: list[tuple]) -> int:
    """Drop every stale entry of ``heap`` (in place, still a heap); answer the next limit."""
    heap[:] = [e for e in heap if e[2]]
    heapify(heap)
    return limit_after(len(heap))


def limit_after(n_live: int) -> int:
    """The heap size at which to compact again, after a compaction left ``n_live`` entries."""
    return max(MIN_LIMIT, 2 * n_live)
