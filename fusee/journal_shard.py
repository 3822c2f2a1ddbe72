"""The state of one shard of the journal (:mod:`fusee.journal`): its queue, its segment files, its counters.

One :class:`ShardState` per shard, shared by the modules that make the
journal: :mod:`fusee.segment_files` (the segment files: recovery, HEAD,
allocation, spares, rollover), :mod:`fusee.group_commit` (appends, the
flusher, inline flushes, waiters, voids) and :mod:`fusee.journal_metrics`
(the counters' summary).  It holds data only.

Threads: ``lock`` (a native lock, :func:`ensemble.threads.allocate_lock`)
guards the queue (``pending``, ``next_lsn``), ``durable_lsn``, ``waiters``,
``idle``, ``flushing``, ``closing``, ``error``, the voids and ``refusing``.
The segment fields and the counters are touched only by the holder of the
flush turn (``flushing``, or the flusher), on the shard's carrier, or before
the flusher starts and after it ends; the spare's by its preparation under
``spare_lock``.
"""

from __future__ import annotations

from typing import Any, Callable

from ensemble import dispatcher as _dispatcher
from ensemble.threads import allocate_lock

from . import directory as _dir
from .disk import Disk
from .errors import StorageError

__all__ = ["ShardState"]


class ShardState:
    """One shard's log: settings (copied from the journal at its creation), queue, files, counters."""

    __slots__ = (
        "index",
        "disk",
        "zero_fill",
        "segment_size",
        "on_void",
        "dir",
        "lock",
        "pending",
        "next_lsn",
        "durable_lsn",
        "waiters",
        "idle",
        "home",
        "ident",
        "flushing",
        "woken_home",
        "hub_turn",
        "inline_flushes",
        "last_inline",
        "spare_fd",
        "spare_number",
        "spare_size",
        "spare_pending",
        "spare_lock",
        "spares_used",
        "closing",
        "error",
        "pid",
        "recovered",
        "places",
        "fd",
        "direct",
        "seg_path",
        "seg_number",
        "seg_pos",
        "seg_size",
        "flushes",
        "records",
        "flush_seconds",
        "flush_seconds_max",
        "in_flight",
        "max_in_flight",
        "idents",
        "voided",
        "void_after",
        "refusing",
        "failures",
        "last_error",
        "head",
        "empties",
        "blobs",
    )

    def __init__(
        self,
        index: int,
        disk: Disk,
        zero_fill: bool,
        segment_size: int,
        on_void: Callable[[int, int, int, StorageError], Any] | None,
    ) -> None:
        self.index = index
        self.disk = disk  # the file layer every segment operation goes through
        self.zero_fill = zero_fill  # segments are zero-filled when made
        self.segment_size = segment_size  # the size a new segment is made (larger if one batch needs it)
        self.on_void = on_void  # the journal's listener for voided LSNs (None: appends are never refused)
        self.dir: str | None = None
        self.lock = allocate_lock()
        self.pending: list[bytes] = []  # bodies at LSNs next_lsn - len(pending) .. next_lsn - 1
        self.next_lsn = 1
        self.durable_lsn = 0
        self.waiters: list[tuple[int, int, Any]] = []  # heap of (lsn, seq, (pid, token) | callback)
        # The flusher is parked waiting for a kick.  Whoever turns ``idle`` from True to False
        # (under ``lock``) sends the one kick, so at most one is ever in its mailbox.
        self.idle = False
        self.home = _dispatcher.DEFAULT  # the dispatcher of the shard's carrier
        self.ident: int | None = None  # its thread, once the flusher runs
        self.flushing = False  # a flush (the flusher's or an inline one) holds the turn
        # Waiters on the shard's carrier that a flush has woken and that have not run yet (only
        # that carrier's thread changes it), and inline flushes since its hub last had a turn.
        self.woken_home = 0
        self.hub_turn = 0.0  # perf_counter() when the carrier's hub last had a turn from an inline flush
        self.inline_flushes = 0  # flushes done by a waiting process itself (no hand-off)
        self.last_inline: Any = None  # the process that did the last flush inline (None: the flusher)
        # The next segment, prepared (allocated, zero-filled, synced; header still zero) off the flush
        # path once the current one is half full; ``spare_lock`` is held while that is under way.
        self.spare_fd = -1
        self.spare_number = 0
        self.spare_size = 0
        self.spare_pending = False
        self.spare_lock = allocate_lock()
        self.spares_used = 0
        self.closing = False
        self.error: BaseException | None = None
        self.pid: Any = None
        self.recovered: list[tuple[int, bytes]] = []
        self.places: list[tuple[int, str, list[int]]] = []  # (base_lsn, path, frame offsets) per recovered segment
        self.fd = -1
        self.direct: Any = None  # the current segment's O_DIRECT appender (fusee.direct_io), None: buffered
        self.seg_path = ""
        self.seg_number = 0
        self.seg_pos = 0
        self.seg_size = 0
        self.flushes = 0
        self.records = 0
        self.flush_seconds = 0.0
        self.flush_seconds_max = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.idents: set[int] = set()
        # A failed flush voids its LSNs and every one appended after them (``(lo, hi, error)``, newest last);
        # the next flush first makes a new segment whose header says the log holds up to ``void_after``.
        # ``refusing``: appends raise that error until the owner has rolled its state back
        # (:meth:`Journal.resume`); only with an ``on_void`` listener.
        self.voided: list[tuple[int, int, StorageError]] = []
        self.void_after: int | None = None
        self.refusing: StorageError | None = None
        self.failures = 0
        self.last_error: StorageError | None = None
        self.head: _dir.Head | None = None  # what HEAD says now
        self.empties: list[str] = []  # recovered segments without a frame: deleted once HEAD moves past them
        # The shard's blob area (payload offload, fusee.blobs.BlobStore); None in memory.
        self.blobs: Any = None
