"""The journal's flush statistics: counted per shard by each flush, summed over the shards on demand.

:func:`count_flush` is called by the holder of a shard's flush turn after each
successful ``fdatasync`` (:mod:`fusee.group_commit`); :func:`summary` is what
:meth:`fusee.journal.Journal.metrics` returns.  Both only read and write the
counters of :class:`fusee.journal_shard.ShardState`.
"""

from __future__ import annotations

from typing import Any, Sequence

from .journal_shard import ShardState

__all__ = ["count_flush", "summary"]


def count_flush(s: ShardState, records: int, seconds: float) -> None:
    """Count one flush of ``records`` records whose write and sync took ``seconds`` (flush turn holder)."""
    s.flushes += 1
    s.records += records
    s.flush_seconds += seconds
    if seconds > s.flush_seconds_max:
        s.flush_seconds_max = seconds


def summary(shards: Sequence[ShardState]) -> dict[str, Any]:
    """Flush statistics over every shard (``flush_thread_idents``: native ids of the flushing threads;
    ``inline_flushes``: flushes a waiting process on the shard's carrier did itself).

    Keys: ``flushes``, ``records``, ``records_per_flush``, ``flush_seconds_mean``,
    ``flush_seconds_max``, ``max_flushes_in_flight``, ``inline_flushes``,
    ``spare_segments_used``, ``flush_thread_idents``, ``durable_lsn`` (per shard),
    ``storage_failures``, ``storage_error`` (the last one, while a shard is still
    affected by it; else None) and ``segments`` (each shard's current segment number).
    Read without the shards' locks: a snapshot, each figure current or one flush late.
    """
    flushes = sum(s.flushes for s in shards)
    records = sum(s.records for s in shards)
    seconds = sum(s.flush_seconds for s in shards)
    return {
        "flushes": flushes,
        "records": records,
        "records_per_flush": records / flushes if flushes else 0.0,
        "flush_seconds_mean": seconds / flushes if flushes else 0.0,
        "flush_seconds_max": max(s.flush_seconds_max for s in shards),
        "max_flushes_in_flight": max(s.max_in_flight for s in shards),
        "inline_flushes": sum(s.inline_flushes for s in shards),
        "spare_segments_used": sum(s.spares_used for s in shards),
        "flush_thread_idents": sorted(set().union(*(s.idents for s in shards))),
        "durable_lsn": [s.durable_lsn for s in shards],
        "storage_failures": sum(s.failures for s in shards),
        "storage_error": next((str(s.last_error) for s in shards if s.refusing is not None or s.void_after is not None), None),
        "segments": [s.seg_number for s in shards],
    }
