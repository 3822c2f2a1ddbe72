"""fusee's journal: per-shard logs of opaque records, group-committed to disk.

Layout: ``<path>/shard-<n>/<segment number>.seg``, each a segment of
:mod:`fusee.segment` (a 4 KiB header, then frames), beside the directory's
``LOCK``, ``MANIFEST`` and each shard's ``HEAD`` (:mod:`fusee.directory`).
LSNs increase across a shard's segments, from 1, and are never reused.  Every
open takes the lock, recovers each shard (scanning its segments in order;
anything missing or cut short is ``Corrupt``), and starts a fresh segment
numbered after every one there is, so new frames never follow torn bytes in
one file.

:class:`Journal` is the face of three modules, one concept each, over one
:class:`fusee.journal_shard.ShardState` per shard:

* :mod:`fusee.segment_files`: the segment files' lifecycle: recovery (with
  HEAD), allocation (preallocated, zero-filled), spare segments prepared off
  the flush path, rollover, deletion before a checkpoint;
* :mod:`fusee.group_commit`: appends, the shard's flusher process on a
  carrier (a native OS thread with its own hub) of a dispatcher of its own
  (:meth:`Journal.home`), inline flushes by waiting processes on that
  carrier, waiters, ``on_durable`` callbacks, and the voids of a failed
  flush (a full or failing disk: :class:`fusee.errors.StorageError`);
* :mod:`fusee.journal_metrics`: the flush statistics (:meth:`Journal.metrics`).

Threads: appends may come from any greenlet on any carrier;
:meth:`Journal.wait_durable` blocks only the calling process;
:meth:`Journal.on_durable` callbacks run on the shard's carrier thread right
after the ``fdatasync`` and must not block.

``path=None`` keeps everything in memory: every append is durable at once,
and ``on_durable`` callbacks run at once in the caller.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable

import ensemble as e
from ensemble import dispatcher as _dispatcher

from . import blobs as _blobs
from . import directory as _dir
from . import group_commit as _commit
from . import segment as _seg
from . import segment_files as _files
from .disk import DISK, Disk
from .errors import Corrupt, StorageError, storage_error
from .journal_metrics import summary as _summary
from .journal_shard import ShardState

__all__ = ["Journal", "DEFAULT_SEGMENT_SIZE"]

DEFAULT_SEGMENT_SIZE = 16 << 20  # zero-filled at every open: 64 MiB x 4 shards took ~2.3 s here
_journal_ids = itertools.count(1)


def _joined(s: ShardState, pairs: list[tuple[int, bytes]], note: bool = True) -> list[tuple[int, bytes]]:
    """``pairs`` (``(lsn, body)`` read from shard ``s``'s segments) with each offloaded payload put back
    (:mod:`fusee.blob_refs`), noting (with ``note``) which blobs the log refers to.  :class:`Corrupt`
    naming the blob's file for one missing or damaged, or the frame for a malformed reference."""
    store = s.blobs
    out = pairs
    for i, (lsn, body) in enumerate(pairs):
        if b'"$blobs":' not in body:  # the quick test; fusee.blob_refs looks closer
            continue
        try:
            full = store.join(body)
        except ValueError as exc:
            where = _where(s, lsn)
            raise Corrupt(where[0], where[1], f"record {lsn}: {exc}") from None
        if full is body:
            continue
        if note:
            store.note_logged(lsn, body)
        if out is pairs:
            out = list(pairs)
        out[i] = (lsn, full)
    return out


def _where(s: ShardState, lsn: int) -> tuple[str, int]:
    """The file and offset of recovered frame ``lsn`` of ``s`` (the shard's directory if unknown)."""
    for base, p, offsets in s.places:
        if base <= lsn < base + len(offsets):
            return p, offsets[lsn - base]
    return s.dir or "", 0


class Journal:
    """Per-shard, group-committed logs of opaque byte bodies.  Open with :meth:`Journal.open`."""

    def __init__(
        self,
        path: str | None,
        shards: int,
        segment_size: int,
        zero_fill: bool,
        disk: Disk = DISK,
        on_void: Callable[[int, int, int, StorageError], Any] | None = None,
        offload: int | None = None,
    ) -> None:
        if type(shards) is not int or shards < 1:
            raise ValueError(f"shards must be a positive int, not {shards!r}")
        if type(segment_size) is not int or segment_size < _seg.HEADER_SIZE + _seg.FRAME_HEADER:
            raise ValueError(f"segment_size {segment_size!r} is too small")
        self.path = path
        self.segment_size = segment_size
        self.zero_fill = zero_fill
        self.disk = disk
        self.on_void = on_void
        self.offload = offload
        self.closed = False
        self._shards = [ShardState(i, disk, zero_fill, segment_size, on_void) for i in range(shards)]
        self._seq = itertools.count()
        self._dispatchers: list[str] = []
        self._lock: _dir.DirLock | None = None

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        path: str | None,
        shards: int | None = None,
        *,
        segment_size: int | None = None,
        zero_fill: bool = True,
        after: list[int] | None = None,
        disk: Disk = DISK,
        lock: "_dir.DirLock | None" = None,
        layout: "tuple[_dir.Manifest, bool] | None" = None,
        on_void: Callable[[int, int, int, StorageError], Any] | None = None,
        offload: int | None = None,
    ) -> "Journal":
        """Open (recovering) the journal at ``path``; ``None`` keeps it in memory.

        ``shards`` and ``segment_size`` default to the directory's recorded
        layout (:mod:`fusee.directory`; for a new directory, 4 and
        :data:`DEFAULT_SEGMENT_SIZE`); another explicit value raises
        :class:`fusee.errors.WrongLayout`.  Takes the directory's lock (unless
        ``lock``, already taken, is given; released by :meth:`close` and
        :meth:`abandon`): :class:`fusee.errors.Locked` if another journal holds it.
        Raises :class:`fusee.errors.Corrupt` (naming the file) for a damaged or
        missing acknowledged record.  Starts a fresh segment per shard and, per
        shard, a dispatcher of one carrier (:meth:`home`) with the shard's flusher.
        ``after[n]`` (default 0) is the LSN of shard ``n``'s checkpoint: its log
        may begin at ``after[n] + 1`` (earlier segments deleted), and records at
        or before it are not recovered (the checkpoint holds them).

        ``on_void(shard, lo, hi, error)``, if given, is called (on the shard's
        carrier, must not block) when a failed write voids LSNs ``lo..hi``; the
        shard then refuses appends (raising ``error``) until :meth:`resume`.

        ``offload`` (bytes; None: never) moves each payload of a record whose encoding is over it to the
        shard's blob area (:mod:`fusee.blobs`, :mod:`fusee.blob_refs`) before the record is written; on
        a directory only.  Blobs already there are read whatever ``offload`` is: the bodies recovered
        (and read back) have their payloads put back, and a blob missing or damaged is ``Corrupt``
        naming its file.
        """
        if path is None:  # no disk, no blobs: offload does nothing in memory
            return cls(None, 4 if shards is None else shards, segment_size or DEFAULT_SEGMENT_SIZE, zero_fill, disk, on_void)
        own = lock is None
        if own:
            lock = _dir.lock(path)
        try:
            if layout is None:
                layout = _dir.open_layout(path, shards, segment_size, 4, DEFAULT_SEGMENT_SIZE)
            manifest, new = layout
            j = cls(path, manifest.shards, manifest.segment_size, zero_fill, disk, on_void, offload)
            j._lock = lock
            if new:  # a new directory (or one of format 2): its layout is recorded before anything else
                _dir.write_manifest(path, manifest, disk)
            _dir.remove_stale_temps(path, manifest.shards)
            for s in j._shards:
                s.dir = os.path.join(path, f"shard-{s.index}")
                disk.mkdir(s.dir)
                _files.recover(s, after[s.index] if after else 0)
                s.blobs = _blobs.BlobStore(path, s.index, disk, offload)
                s.recovered = _joined(s, s.recovered)
            for s in j._shards:
                _files.start(s)
            disk.fsync_dir(path)
        except BaseException as exc:
            for s in j._shards if "j" in locals() else ():
                _files.close_current(s)
            if own:
                lock.release()  # type: ignore[union-attr]
            if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, NotADirectoryError, PermissionError)):
                raise storage_error(exc, "opening", path) from exc
            raise
        serial = next(_journal_ids)
        started = _commit.Token(False)
        me = e.self()
        for s in j._shards:
            s.home = _dispatcher.define(f"fusee.shard-{serial}-{s.index}", 1)
            j._dispatchers.append(s.home)
            s.pid = e.spawn(_commit.flusher, s, me, started, dispatcher=s.home)
        for _ in j._shards:  # each flusher has noted its thread: waits there flush inline from now on
            _commit.await_token(started, None)
        return j

    # ------------------------------------------------------------------ records

    def _shard(self, shard: int) -> ShardState:
        try:
            return self._shards[shard]
        except (IndexError, TypeError):
            raise ValueError(f"no shard {shard!r} (the journal has {len(self._shards)})") from None

    def home(self, shard: int) -> str:
        """The dispatcher whose one carrier flushes ``shard``: processes there reach its disk without a
        thread hand-off (``"default"`` for an in-memory journal, which never flushes)."""
        return self._shard(shard).home

    def recovered(self, shard: int) -> list[tuple[int, bytes]]:
        """The ``(lsn, body)`` records the open found in ``shard``, in LSN order."""
        return list(self._shard(shard).recovered)

    def read_back(self, shard: int, after: int = 0) -> list[tuple[int, bytes]]:
        """The ``(lsn, body)`` records of ``shard`` after LSN ``after`` (a checkpoint's) through the last
        appended, in LSN order, read back from the disk once they are durable: what an open would recover
        now.  The caller sees to it that nothing is appended to ``shard`` meanwhile (its shard server and
        runs are stopped: :mod:`fusee.host` restarting a crashed shard server).  A record voided by a
        failed write is not there.  In memory (no disk): ValueError, nothing is kept.  Raises
        :class:`fusee.errors.Corrupt` for a missing or damaged record."""
        if self.path is None:
            raise ValueError("an in-memory journal keeps no records to read back")
        s = self._shard(shard)
        upto = s.next_lsn - 1
        if upto > after:
            try:
                self.wait_durable(shard, upto)
            except StorageError:
                pass  # voided: the disk has what survived
        return _joined(s, _files.read_back(s, after, min(upto, s.durable_lsn)), note=False)

    def refusing(self, shard: int) -> bool:
        """Whether ``shard`` refuses appends since a failed write voided some (until :meth:`resume`)."""
        return self._shard(shard).refusing is not None

    def flushers(self) -> list[Any]:
        """The pids of the shards' flusher processes (none in memory)."""
        return [s.pid for s in self._shards if s.pid is not None]

    def where(self, shard: int, lsn: int) -> tuple[str, int]:
        """``(path, offset)`` of a recovered record's frame: where to point ``Corrupt`` at for a bad body."""
        for base, p, offsets in self._shard(shard).places:
            if base <= lsn < base + len(offsets):
                return p, offsets[lsn - base]
        raise ValueError(f"lsn {lsn} of shard {shard} was not recovered")

    def append(self, shard: int, body: bytes) -> int:
        """Queue ``body`` for the next flush of ``shard`` and return its LSN; never blocks."""
        if type(body) is not bytes:
            raise TypeError(f"a journal body is bytes, not {type(body).__name__}")
        s = self._shard(shard)
        if self.path is None:  # in memory nobody keeps the bytes
            return self.append_unkept(shard)
        return _commit.append(s, body)

    def append_unkept(self, shard: int) -> int:
        """In memory (``path`` None): the LSN of one more record, which is durable at once and whose bytes
        nobody keeps, so the caller need not make them (:func:`fusee.records.check_record` checks that it
        could).  ValueError on a journal with a disk (its records go through :meth:`append`)."""
        if self.path is not None:
            raise ValueError("a journal on disk keeps every record: append its bytes")
        s = self._shards[shard]
        with s.lock:
            if self.closed:
                raise ValueError("the journal is closed")
            lsn = s.next_lsn
            s.next_lsn = lsn + 1
            s.durable_lsn = lsn
            s.records += 1
        return lsn

    def last_lsn(self, shard: int) -> int:
        """The LSN of the last record appended to ``shard`` (0 before any)."""
        return self._shard(shard).next_lsn - 1

    def delete_before(self, shard: int, lsn: int) -> int:
        """Delete ``shard``'s oldest segments whose every record is at or before ``lsn`` (a checkpoint
        holds them); never the segment an open journal writes to.  Returns how many went.

        Deletes in number order and stops at the first segment it keeps, so the
        log left is contiguous; a kept segment's records up to ``lsn`` are
        skipped at the next open (``Journal.open(after=...)``).
        """
        s = self._shard(shard)
        n = _files.delete_before(s, lsn, self.closed)
        if s.blobs is not None:
            s.blobs.collect(lsn)
        return n

    def blob_store(self, shard: int) -> "_blobs.BlobStore | None":
        """Shard ``shard``'s blob area (None in memory): where a checkpoint's offloaded payloads go
        (:func:`fusee.store.write`), and what :meth:`delete_before` collects after one."""
        return self._shard(shard).blobs

    def durable_lsn(self, shard: int) -> int:
        """The highest LSN of ``shard`` known to be on disk (0 before any)."""
        return self._shard(shard).durable_lsn

    def wait_durable(self, shard: int, lsn: int, timeout: float | None = None) -> bool:
        """Block the calling process or greenlet cooperatively until ``lsn`` is durable; False on timeout.

        Raises ValueError for an LSN not yet appended, the
        :class:`fusee.errors.StorageError` that voided ``lsn`` if the disk
        failed, and the error that stopped the shard's flushes otherwise.
        """
        return _commit.wait_durable(self._shard(shard), lsn, self._seq, timeout)

    def resume(self, shard: int) -> None:
        """Accept appends to ``shard`` again after a failed write voided some (see ``on_void``): its owner
        has rolled its state back to the durable records."""
        _commit.resume(self._shard(shard))

    def on_durable(self, shard: int, lsn: int, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` once ``lsn`` is durable: at once (in the caller) if it is already,
        else on the shard's flusher carrier thread right after the flush (it must not block)."""
        _commit.on_durable(self._shard(shard), lsn, self._seq, callback)

    def metrics(self) -> dict[str, Any]:
        """Flush statistics over every shard (``flush_thread_idents``: native ids of the flushing threads;
        ``inline_flushes``: flushes a waiting process on the shard's carrier did itself)."""
        return _summary(self._shards)

    def close(self, keep_lock: bool = False) -> None:
        """Flush what is pending, stop the flushers, close the files and give the directory's lock up
        (unless ``keep_lock``: then :meth:`unlock` does).  Idempotent."""
        if self.closed:
            if not keep_lock:
                self.unlock()
            return
        self.closed = True
        if self.path is None:
            return
        for s in self._shards:
            _commit.stop(s)
        try:
            for s in self._shards:
                if s.pid is not None:
                    e.exit_reason(s.pid)
        finally:
            self._release(keep_spares=False)
            if not keep_lock:
                self.unlock()

    def unlock(self) -> None:
        """Give the directory's lock up (idempotent): another journal may open it from now on."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _release(self, keep_spares: bool) -> None:
        """Close every shard's files and shut its carrier down (an unused spare segment is deleted, or,
        with ``keep_spares``, left on disk as a crash leaves it: the next open deletes it)."""
        for s in self._shards:
            _files.close_files(s, keep_spares)
        for name in self._dispatchers:
            _dispatcher.shutdown(name)

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def abandon(self) -> None:
        """Emulate a crash (for :mod:`fusee.testing`): drop every record not yet durable, kill the
        flushers and close the files without flushing.  Idempotent; the journal is closed afterwards.

        The caller first stops every other process that appends to or flushes this journal (the
        processes on the shards' carriers): a flush already in flight may still complete.
        """
        if self.closed:
            return
        self.closed = True
        if self.path is None:
            return
        for s in self._shards:
            _commit.drop_pending(s)
        flushers = [s.pid for s in self._shards if s.pid is not None]
        for pid in flushers:
            e.exit(pid, "kill")
        try:
            for pid in flushers:
                e.exit_reason(pid)
        finally:
            self._release(keep_spares=True)
            self.unlock()  # as the OS does for a process that dies
