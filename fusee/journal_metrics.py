"""The journal's flush statistics: counted per shard by each flush, summed over the shards on demand.

The holder of a shard's flush turn counts each successful flush in the
counters of :class:`fusee.journal_shard.ShardState` (``flushes``, ``records``,
``flush_seconds``, ``flush_seconds_max``: :func:`fusee.group_commit._flush`,
once per flush, inline); :func:`summary` is what
:meth:`fusee.journal.Journal.metrics` returns from them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .journal_shard import ShardState

__all__ = ["summary"]


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
