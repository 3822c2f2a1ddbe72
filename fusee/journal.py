"""fusee's journal: per-shard logs of opaque records, group-committed to disk.

Layout: ``<path>/shard-<n>/<segment number>.seg``, each a segment of
:mod:`fusee.segment` (a 4 KiB header, then frames), beside the directory's
``LOCK``, ``MANIFEST`` and each shard's ``HEAD`` (:mod:`fusee.directory`).
LSNs increase across a shard's segments, from 1, and are never reused.  Every
open takes the lock, recovers each shard (scanning its segments in order;
anything missing or cut short is ``Corrupt``), and starts a fresh segment
numbered after every one there is, so new frames never follow torn bytes in
one file.  A segment is preallocated to ``segment_size`` bytes
and, by default, zero-filled: on ext4 a write into merely fallocated space
converts an "unwritten" extent, a metadata change ``fdatasync`` must commit,
while a write over written zeros changes data only.  A batch that does not
fit in the current segment's room goes to a new segment (rollover), made
larger than ``segment_size`` if one batch needs it.

Group commit: each shard is one carrier (a native OS thread with its own
hub) of a dispatcher of its own, :meth:`Journal.home`; the shard's flusher
process lives there, and the engine puts the shard's server and runs there
too, so a step's round trip to the disk crosses no thread.
:meth:`Journal.append` only queues the body and assigns its LSN (and kicks an
idle flusher with a message); the flusher first lets every process already
runnable on its carrier run (so their records join the batch), then takes
*everything* queued, writes it as one batch (``os.write``) and calls
``os.fdatasync`` once, on its carrier's thread (the GIL is released, so other
shards and the caller's hub go on), then marks it durable and wakes the
waiters.  Records that arrive meanwhile (from other threads) queue up for the
next flush: one flush in flight per shard, and one ``fdatasync`` covers every
record that arrived meanwhile.  Nothing ever flushes on the caller's thread.

Threads: appends may come from any greenlet on any carrier (a native lock
guards each shard's queue).  :meth:`wait_durable` waits in a selective receive
(the calling process, or the main greenlet as a shell process) until the
flusher sends it a private token (on a timeout the wait is withdrawn, so no
token is left behind).  :meth:`on_durable` callbacks run on the shard's
carrier thread, inside the flusher process, right after the ``fdatasync``:
they must not block (send a message instead).

A full or failing disk (any ``OSError`` of a flush, through :class:`fusee.disk.Disk`)
voids the failed batch and everything appended after it: their waiters get a
:class:`fusee.errors.StorageError`, the next flush starts a new segment whose
header says where the durable log ends, and (with ``on_void``) appends are
refused until the owner has rolled back (:meth:`Journal.resume`).

``path=None`` keeps everything in memory: every append is durable at once,
and ``on_durable`` callbacks run at once in the caller.
"""

from __future__ import annotations

import heapq
import itertools
import os
import re
from time import perf_counter
from typing import Any, Callable

import ensemble as e
from ensemble import NOMATCH
from ensemble import dispatcher as _dispatcher
from gevent import monkey as _monkey
from gevent import get_hub as _get_hub
from greenlet import getcurrent as _getcurrent
from gevent import sleep as _yield_to_ready

from . import directory as _dir
from . import segment as _seg
from .disk import DISK, Disk
from .errors import StorageError, storage_error

# real OS-thread primitives, also when the app has monkey-patched threading
allocate_lock = _monkey.get_original("_thread", "allocate_lock")
get_ident = _monkey.get_original("_thread", "get_ident")

__all__ = ["Journal", "DEFAULT_SEGMENT_SIZE"]

DEFAULT_SEGMENT_SIZE = 16 << 20  # zero-filled at every open: 64 MiB x 4 shards took ~2.3 s here
_SEG_NAME = re.compile(r"^(\d+)\.seg$")
_ZEROS = bytes(1 << 20)
_journal_ids = itertools.count(1)
_HUB_TURN = 0.002  # seconds of inline flushes in a row before the carrier's hub gets a turn (a timeslice)


class _Kick:
    """The message that wakes an idle flusher: "there is something to flush, or the journal closes"."""

    __slots__ = ()


_KICK = _Kick()


def _is_kick(m: Any) -> Any:
    return True if m is _KICK else NOMATCH


class _Token:
    """What the flusher puts in a waiter's mailbox (and the waiter takes out): "your LSN is settled".

    ``home``: the waiter runs on the shard's own carrier (see ``_Shard.woken_home``); ``error``: the
    storage error that voided the LSN instead (None: it is durable).
    """

    __slots__ = ("home", "error")

    def __init__(self, home: bool) -> None:
        self.home = home
        self.error: StorageError | None = None


def _await_token(tok: _Token, timeout: float | None) -> bool:
    """Wait in a selective receive until ``tok`` is in the caller's mailbox; take it.  False on timeout."""
    return e.receive(lambda m: True if m is tok else NOMATCH, timeout=timeout) is True


def _wake(s: "_Shard", ready: list, error: StorageError | None = None) -> None:
    """Hand each ready waiter its token, with ``error`` if its LSN was voided (on the shard's carrier;
    ensemble.send is safe from any thread)."""
    send = e.send
    for p, tok in ready:
        if tok.home:
            s.woken_home += 1
        tok.error = error
        send(p, tok)


def _corrupt(path: str | None, offset: int, why: str) -> Exception:
    from .errors import Corrupt

    return Corrupt(path, offset, why)


_VOIDS_KEPT = 1024  # voided LSN ranges remembered per shard (a wait on an older voided LSN is not expected)


def _header_of(data: bytes, path: str) -> "_seg.Header | None":
    """The segment header at the start of ``data``; None if the file is empty or its header block is all
    zeros (never written); :class:`fusee.errors.Corrupt` if it is damaged."""
    block = data[: _seg.HEADER_SIZE]
    if not block.strip(b"\0"):
        return None
    return _seg.decode_header(data, path)


class _Shard:
    __slots__ = (
        "index",
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
    )

    def __init__(self, index: int) -> None:
        self.index = index
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
        self.last_inline: Any = None  # the greenlet that did the last flush inline (None: the flusher)
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
        self.closed = False
        self._shards = [_Shard(i) for i in range(shards)]
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
        """
        if path is None:
            return cls(None, 4 if shards is None else shards, segment_size or DEFAULT_SEGMENT_SIZE, zero_fill, disk, on_void)
        own = lock is None
        if own:
            lock = _dir.lock(path)
        try:
            if layout is None:
                layout = _dir.open_layout(path, shards, segment_size, 4, DEFAULT_SEGMENT_SIZE)
            manifest, new = layout
            j = cls(path, manifest.shards, manifest.segment_size, zero_fill, disk, on_void)
            j._lock = lock
            if new:  # a new directory (or one of format 2): its layout is recorded before anything else
                _dir.write_manifest(path, manifest, disk)
            _dir.remove_stale_temps(path, manifest.shards)
            for s in j._shards:
                s.dir = os.path.join(path, f"shard-{s.index}")
                disk.mkdir(s.dir)
                j._recover(s, after[s.index] if after else 0)
            for s in j._shards:
                j._new_segment(s, s.next_lsn, j.segment_size)
                for p in s.empties:  # HEAD is past them now
                    disk.unlink(p)
                if s.empties:
                    disk.fsync_dir(s.dir)
                s.empties = []
            disk.fsync_dir(path)
        except BaseException as exc:
            for s in j._shards if "j" in locals() else ():
                if s.fd >= 0:
                    os.close(s.fd)
                    s.fd = -1
            if own:
                lock.release()  # type: ignore[union-attr]
            if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, NotADirectoryError, PermissionError)):
                raise storage_error(exc, "opening", path) from exc
            raise
        serial = next(_journal_ids)
        started = _Token(False)
        me = e.self()
        for s in j._shards:
            s.home = _dispatcher.define(f"fusee.shard-{serial}-{s.index}", 1)
            j._dispatchers.append(s.home)
            s.pid = e.spawn(_flusher, j, s, me, started, dispatcher=s.home)
        for _ in j._shards:  # each flusher has noted its thread: waits there flush inline from now on
            _await_token(started, None)
        return j

    def _recover(self, s: _Shard, after: int = 0) -> None:
        """Read shard ``s``'s segments: its records after ``after`` (the checkpoint's LSN), checked whole.

        HEAD names the newest segment that may hold records: every segment up to
        it must be there, whole (its allocated size, recorded in its header) and
        in LSN sequence; one past it never held an acknowledged frame (a crash
        while making it, or an unused spare) and is deleted.  Anything else
        missing or cut short is :class:`fusee.errors.Corrupt` naming the file.
        """
        assert s.dir is not None
        disk = self.disk
        head = s.head = _dir.read_head(s.dir)
        numbers = sorted(int(m.group(1)) for f in os.listdir(s.dir) if (m := _SEG_NAME.match(f)))
        kept: list[tuple[int, str, _seg.Scan]] = []
        dropped = False
        for n in numbers:
            p = os.path.join(s.dir, f"{n}.seg")
            beyond = head is not None and (n > head.number or (n == head.number and not head.exists))
            with open(p, "rb") as f:
                data = f.read()
            if beyond:  # never made current: nothing acknowledged can be in it
                disk.unlink(p)
                dropped = True
                continue
            header = _header_of(data, p)
            if header is None:
                if head is None:  # format 2 (no HEAD): a segment whose creation never became durable
                    disk.unlink(p)
                    dropped = True
                    continue
                raise _corrupt(p, 0, f"segment {n} is empty or its header is gone ({len(data)} bytes); "
                               f"HEAD says the log goes on to segment {head.number}: records are lost")
            if header.size is not None and len(data) != header.size:
                raise _corrupt(p, len(data), f"segment {n} is {len(data)} bytes, it was made {header.size}: "
                               "cut short, records after this offset may be lost")
            sc = _seg.scan(data, p)
            if head is None and header.version >= 3:
                if sc.frames:
                    raise _corrupt(os.path.join(s.dir, _dir.HEAD_NAME), 0, f"HEAD is missing, segment {n} holds records")
                disk.unlink(p)
                dropped = True
                continue
            kept.append((n, p, sc))
        if head is not None and head.exists and not any(n == head.number for n, _, _ in kept):
            raise _corrupt(os.path.join(s.dir, f"{head.number}.seg"), 0,
                           f"segment {head.number} is missing: HEAD says it holds the log from lsn {head.base_lsn}")
        if head is None:  # format 2: a trailing segment with no valid frame was never used
            while kept and not kept[-1][2].frames and len(kept) > 1:
                n, p, sc = kept[-1]
                prev = kept[-2][2]
                expected = prev.frames[-1].lsn + 1 if prev.frames else (prev.header.base_lsn if prev.header else 1)
                if sc.header is not None and sc.header.base_lsn != expected:
                    break  # let the checks below report the gap
                disk.unlink(p)
                dropped = True
                kept.pop()
        if dropped:
            disk.fsync_dir(s.dir)
        next_lsn = after + 1
        prev_path, prev_end = None, 0
        for n, p, sc in kept:
            h = sc.header
            assert h is not None
            if h.shard != s.index:
                raise _corrupt(p, 0, f"segment belongs to shard {h.shard}, found in shard {s.index}")
            if h.number != n:
                raise _corrupt(p, 0, f"segment header says number {h.number}")
            if prev_path is None:
                if h.prior > after:
                    raise _corrupt(p, 0, f"records {after + 1}..{h.prior} are missing: the log's first segment "
                                   f"begins after them and no checkpoint holds them")
                # segments before a checkpoint not deleted (yet): their records up to ``after`` are skipped
            else:
                if h.prior >= next_lsn:
                    raise _corrupt(prev_path, prev_end,
                                   f"records {next_lsn}..{h.prior} are missing or damaged "
                                   f"(the next segment, {p}, says the log holds up to lsn {h.prior})")
                if h.prior < next_lsn - 1:  # a failed flush's frames that reached the previous segment: void
                    while s.recovered and s.recovered[-1][0] > h.prior:
                        s.recovered.pop()
                    base, pp, offs = s.places[-1] if s.places else (0, "", [])
                    if s.places and pp == prev_path:
                        del offs[max(0, h.prior + 1 - base):]
            s.recovered.extend((fr.lsn, fr.body) for fr in sc.frames if fr.lsn > after)
            if sc.frames:
                s.places.append((h.base_lsn, p, [fr.offset for fr in sc.frames]))
            if not sc.frames:
                s.empties.append(p)
            next_lsn = h.base_lsn + len(sc.frames)
            prev_path, prev_end = p, sc.end
        if head is not None and not head.exists and head.base_lsn - 1 > max(after, next_lsn - 1):
            raise _corrupt(os.path.join(s.dir, _dir.HEAD_NAME), 0,
                           f"records {max(after, next_lsn - 1) + 1}..{head.base_lsn - 1} are missing: "
                           "HEAD says a checkpoint holds them, and none does")
        next_lsn = max(next_lsn, after + 1)
        s.next_lsn = next_lsn
        s.durable_lsn = next_lsn - 1
        s.seg_number = max(numbers + [head.number if head else 0])  # numbers are never reused

    def _allocate(self, s: _Shard, number: int, size: int, header: _seg.Header | None) -> int:
        """Create segment file ``number`` of ``size`` bytes, allocated (zero-filled unless ``zero_fill`` is
        off), with ``header`` (or a zero one), synced with its directory; its open fd.  On failure nothing
        is left: the file is deleted and the ``OSError`` raised."""
        assert s.dir is not None
        disk = self.disk
        p = os.path.join(s.dir, f"{number}.seg")
        disk.unlink(p)  # a file of this number is a leftover of a failed attempt: it never held a record
        fd = disk.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        try:
            disk.allocate(fd, size)
            if self.zero_fill:
                left = size
                while left > 0:
                    n = min(left, len(_ZEROS))
                    disk.write(fd, memoryview(_ZEROS)[:n])
                    left -= n
            if header is not None:
                disk.pwrite(fd, _seg.encode_header(header), 0)
            disk.fsync(fd)  # size and extents: the last metadata change this file sees
            disk.fsync_dir(s.dir)
        except BaseException:
            os.close(fd)
            disk.unlink(p)
            raise
        return fd

    def _new_segment(self, s: _Shard, base_lsn: int, size: int, after: int | None = None) -> None:
        """Make segment ``seg_number + 1``, beginning at ``base_lsn`` (the log holding up to ``after``,
        default ``base_lsn - 1``) and at least ``size`` bytes, current: the spare prepared off the flush
        path if there is one big enough, else one made now.  HEAD names it before any frame goes in.
        On failure (``OSError``) no new file is left and the current segment stays current."""
        if s.spare_pending:  # a spare is being prepared: wait for it (a native wait, rare)
            with s.spare_lock:
                pass
        assert s.dir is not None
        disk = self.disk
        number = s.seg_number + 1
        p = os.path.join(s.dir, f"{number}.seg")
        if s.spare_fd >= 0 and s.spare_number == number and s.spare_size >= size:
            fd, size = s.spare_fd, s.spare_size
            s.spare_fd = -1
            try:
                disk.pwrite(fd, _seg.encode_header(_seg.Header(s.index, base_lsn, number, size, after)), 0)
                disk.fdatasync(fd)  # the header is durable before HEAD names the segment
            except BaseException:
                os.close(fd)
                disk.unlink(p)
                raise
            s.spares_used += 1
        else:
            self._drop_spare(s)
            fd = self._allocate(s, number, size, _seg.Header(s.index, base_lsn, number, size, after))
        head = _dir.Head(number, base_lsn, True)
        try:
            _dir.write_head(s.dir, head, disk)
        except BaseException:
            # HEAD may have reached the disk naming this segment: keep it (whole, empty) and never reuse
            # its number; an open deletes it if HEAD does not name it
            os.close(fd)
            s.seg_number = number
            raise
        s.head = head
        os.lseek(fd, _seg.HEADER_SIZE, os.SEEK_SET)
        if s.fd >= 0:
            os.close(s.fd)
        s.fd = fd
        s.seg_path = p
        s.seg_number = number
        s.seg_pos = _seg.HEADER_SIZE
        s.seg_size = size

    def _drop_spare(self, s: _Shard) -> None:
        """Close and delete the shard's unused spare segment, if any (a crash leaves it to the next open,
        whose recovery deletes a trailing segment without a header)."""
        if s.spare_fd >= 0 and s.dir is not None:
            os.close(s.spare_fd)
            s.spare_fd = -1
            try:
                self.disk.unlink(os.path.join(s.dir, f"{s.spare_number}.seg"))
            except OSError:
                pass  # left for the next open, which deletes a segment past HEAD

    # ------------------------------------------------------------------ records

    def _shard(self, shard: int) -> _Shard:
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
        if self.path is None:
            with s.lock:
                if self.closed:
                    raise ValueError("the journal is closed")
                lsn = s.next_lsn
                s.next_lsn = lsn + 1
                s.durable_lsn = lsn
                s.records += 1
            return lsn
        with s.lock:
            if s.closing:
                raise ValueError("the journal is closed")
            if s.error is not None:
                raise s.error
            if s.refusing is not None:
                raise s.refusing
            lsn = s.next_lsn
            s.next_lsn = lsn + 1
            s.pending.append(body)
            kick = s.idle
            s.idle = False
        if kick:
            if s.ident == get_ident():
                # On the shard's carrier the appender may be about to wait and flush inline: kick
                # once the processes runnable now have run, and only if they left work behind.
                _get_hub().loop.run_callback(_deferred_kick, s)
            else:
                e.send(s.pid, _KICK)
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
        if s.dir is None:
            return 0
        numbers = sorted(int(m.group(1)) for f in os.listdir(s.dir) if (m := _SEG_NAME.match(f)))
        bases: list[tuple[int, str, int | None]] = []
        for n in numbers:
            p = os.path.join(s.dir, f"{n}.seg")
            with open(p, "rb") as f:
                head = f.read(_seg.HEADER_SIZE)
            try:
                base = _seg.decode_header(head, p).base_lsn
            except Exception:
                base = None
            bases.append((n, p, base))
        gone = 0
        disk = self.disk
        for i, (n, p, base) in enumerate(bases):
            if not self.closed and p == s.seg_path:
                break
            if i + 1 < len(bases):
                nxt = bases[i + 1][2]
                if nxt is None or nxt - 1 > lsn:
                    break
            else:  # the last segment: scan it for its last record
                with open(p, "rb") as f:
                    sc = _seg.scan(f.read(), p)
                if sc.frames and sc.frames[-1].lsn > lsn:
                    break
                if s.head is not None and s.head.exists and s.head.number == n:
                    # HEAD first: the log's next segment is yet to be made, the checkpoint holds up to lsn
                    s.head = _dir.Head(n + 1, lsn + 1, False)
                    _dir.write_head(s.dir, s.head, disk)
            disk.unlink(p)
            gone += 1
        if gone:
            disk.fsync_dir(s.dir)
        return gone

    def durable_lsn(self, shard: int) -> int:
        """The highest LSN of ``shard`` known to be on disk (0 before any)."""
        return self._shard(shard).durable_lsn

    def wait_durable(self, shard: int, lsn: int, timeout: float | None = None) -> bool:
        """Block the calling process or greenlet cooperatively until ``lsn`` is durable; False on timeout.

        Raises ValueError for an LSN not yet appended, and the flusher's
        OSError if the disk failed.
        """
        s = self._shard(shard)
        if s.voided:
            err = _void_error(s, lsn)
            if err is not None:
                raise err
        if s.durable_lsn >= lsn:
            return True
        if lsn >= s.next_lsn:
            raise ValueError(f"lsn {lsn} of shard {shard} has not been appended")
        home = s.ident == get_ident()
        if home:
            _flush_inline(self, s, lsn)
            if s.durable_lsn >= lsn:
                return True
        tok = _Token(home)
        ent = (e.self(), tok)
        with s.lock:
            err = _void_error(s, lsn) if s.voided else None
            if err is not None:
                raise err
            if s.durable_lsn >= lsn:
                return True
            if s.error is not None:
                raise s.error
            heapq.heappush(s.waiters, (lsn, next(self._seq), ent))
        if not _await_token(tok, timeout):
            with s.lock:
                w = s.waiters
                for i, x in enumerate(w):
                    if x[2] is ent:  # still queued: the flusher will never deliver the token
                        w[i] = w[-1]
                        w.pop()
                        heapq.heapify(w)
                        return s.durable_lsn >= lsn
            # the flusher took it (durable, or the disk failed): its token is on the way
            _await_token(tok, None)
        if home:
            s.woken_home -= 1
        if tok.error is not None:
            raise tok.error
        if s.error is not None and s.durable_lsn < lsn:
            raise s.error
        return True

    def resume(self, shard: int) -> None:
        """Accept appends to ``shard`` again after a failed write voided some (see ``on_void``): its owner
        has rolled its state back to the durable records."""
        s = self._shard(shard)
        with s.lock:
            s.refusing = None

    def on_durable(self, shard: int, lsn: int, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` once ``lsn`` is durable: at once (in the caller) if it is already,
        else on the shard's flusher carrier thread right after the flush (it must not block)."""
        s = self._shard(shard)
        with s.lock:
            now = s.durable_lsn >= lsn
            if not now:
                if lsn >= s.next_lsn:
                    raise ValueError(f"lsn {lsn} of shard {shard} has not been appended")
                heapq.heappush(s.waiters, (lsn, next(self._seq), callback))
        if now:
            callback()

    def metrics(self) -> dict[str, Any]:
        """Flush statistics over every shard (``flush_thread_idents``: native ids of the flushing threads;
        ``inline_flushes``: flushes a waiting process on the shard's carrier did itself)."""
        shards = self._shards
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
            with s.lock:
                s.closing = True
                kick = s.idle
                s.idle = False
            if kick:
                e.send(s.pid, _KICK)
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
            if s.spare_pending:
                with s.spare_lock:
                    pass
            if keep_spares and s.spare_fd >= 0:
                os.close(s.spare_fd)
                s.spare_fd = -1
            self._drop_spare(s)
            if s.fd >= 0:
                os.close(s.fd)
                s.fd = -1
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
            with s.lock:
                s.closing = True
                s.idle = False
                s.pending = []
        flushers = [s.pid for s in self._shards if s.pid is not None]
        for pid in flushers:
            e.exit(pid, "kill")
        try:
            for pid in flushers:
                e.exit_reason(pid)
        finally:
            self._release(keep_spares=True)
            self.unlock()  # as the OS does for a process that dies


# ---------------------------------------------------------------------- the flusher


def _flusher(j: Journal, s: _Shard, opener: Any, started: _Token) -> None:
    """The shard's flusher process: flush everything queued, one batch at a time, until closed."""
    s.ident = get_ident()
    s.idents.add(s.ident)  # every flush of the shard runs on this thread (the flusher's or inline)
    e.send(opener, started)
    while True:
        # Let every process already runnable on this carrier run first (a flush wakes many runs;
        # a kick comes from one that others may follow), so their records join this batch.
        _yield_to_ready(0)
        with s.lock:
            if s.flushing or not s.pending:  # nothing to do, or an inline flush holds the turn
                if s.closing and not s.flushing:
                    return
                s.idle = True
                taken = None
            else:
                taken = _take(s)
        if taken is None:
            e.receive(_is_kick)
            continue
        s.last_inline = None
        try:
            _flush_taken(j, s, *taken)
        except StorageError:
            continue  # the batch was voided, its waiters told, the turn given back: go on
        except BaseException:
            return  # not the disk: recorded in s.error, every waiter woken
        _hand_back(s)


def _flush_inline(j: Journal, s: _Shard, lsn: int) -> None:
    """On the shard's own carrier: flush in the waiting process itself until ``lsn`` is durable, or until
    another flush holds the turn (then the caller waits for its token as usual).

    No thread hand-off either way: this is fusee's "inline flush" when load is
    low.  Every runnable process on the carrier gets a turn first (so its
    records join the batch), except when the same process flushed last and that
    flush woke nobody here (a chain of steps): then the flush starts at once,
    until ``_HUB_TURN`` seconds have passed since the hub's last turn.
    """
    me = _getcurrent()  # the waiting process's greenlet
    while s.durable_lsn < lsn:
        with s.lock:
            if s.error is not None:
                raise s.error
            if s.flushing:
                return
            # The same process flushing again, nobody else woken here: a chain of steps, flush at once.
            quick = not s.woken_home and s.last_inline is me and perf_counter() - s.hub_turn < _HUB_TURN
            if quick and s.pending:
                taken: tuple[int, list[bytes]] | None = _take(s)
            else:
                s.flushing = True
                taken = None
        released = False
        try:
            if not quick:
                # Runs a flush woke here have yet to run, or others may have work this process
                # has not seen (their records should join this batch), or this carrier's hub has
                # not had a turn for a while: let every runnable process run first.
                _yield_to_ready(0)
                s.hub_turn = perf_counter()
                with s.lock:
                    taken = _take(s) if s.pending else None
            s.last_inline = me
            if taken is not None:
                s.inline_flushes += 1
                try:
                    released = _flush_taken(j, s, *taken, release=True)
                except StorageError:
                    released = True  # _void gave the turn back
                    raise
        finally:
            if not released:
                _hand_back(s)
        if s.voided:
            err = _void_error(s, lsn)
            if err is not None:
                raise err


def _deferred_kick(s: _Shard) -> None:
    """The kick of an append on the shard's own carrier, sent from its hub a moment later: unless an
    inline flush has taken the records meanwhile (it kicks, if needed, when it hands the turn back)."""
    with s.lock:
        kick = not s.flushing and bool(s.pending or s.closing)
        if not kick:
            s.idle = True
    if kick:
        e.send(s.pid, _KICK)


def _take(s: _Shard) -> tuple[int, list[bytes]]:
    """Under ``s.lock``: take every queued body for one flush (the caller now holds the flush turn)."""
    batch = s.pending
    s.pending = []
    s.flushing = True
    return s.next_lsn - len(batch), batch


def _hand_back(s: _Shard) -> None:
    """Give up the flush turn; kick the idle flusher if records (or a close) wait for it."""
    with s.lock:
        s.flushing = False
        kick = s.idle and bool(s.pending or s.closing)
        if kick:
            s.idle = False
    if kick:
        e.send(s.pid, _KICK)


def _flush_taken(j: Journal, s: _Shard, first: int, batch: list[bytes], release: bool = False) -> bool:
    """Write and sync ``batch`` (the holder of the flush turn), mark it durable and wake its waiters;
    with ``release``, give up the turn too (:func:`_hand_back`, under the same lock).  Returns
    ``release``.

    If the disk fails, nothing more is durable: the error is kept (every later
    append and wait raises it), every waiter is woken, and the error is raised.
    """
    try:
        _flush(j, s, first, batch)
    except _Failed as f:
        _void(j, s, first, f.error)
        raise f.error from f.__cause__
    except BaseException as exc:
        with s.lock:
            s.error = exc
            s.closing = True
            woken = [w for _, _, w in s.waiters]
            s.waiters = []
        _wake(s, [w for w in woken if not callable(w)])
        raise
    last = first + len(batch) - 1
    kick = False
    with s.lock:
        s.durable_lsn = last
        ready = []
        w = s.waiters
        while w and w[0][0] <= last:
            ready.append(heapq.heappop(w)[2])
        if release:
            s.flushing = False
            kick = s.idle and bool(s.pending or s.closing)
            if kick:
                s.idle = False
    if kick:
        e.send(s.pid, _KICK)
    if ready:
        ents = [r for r in ready if not callable(r)]
        if ents:
            _wake(s, ents)
        for r in ready:
            if callable(r):
                r()
    return release


def _flush(j: Journal, s: _Shard, first: int, batch: list[bytes]) -> None:
    """Write ``batch`` as one run of frames at the segment's end (rolling over if it does not fit) and
    ``fdatasync`` it; count the flush."""
    data = _seg.encode_batch(first, batch)
    size = len(data)
    disk = j.disk
    if s.void_after is not None or s.seg_pos + size > s.seg_size:
        try:
            j._new_segment(s, first, max(j.segment_size, _seg.HEADER_SIZE + size), s.void_after)
        except OSError as exc:
            raise _Failed(storage_error(exc, "making a segment in", s.dir)) from exc
        s.void_after = None
    s.in_flight += 1
    if s.in_flight > s.max_in_flight:
        s.max_in_flight = s.in_flight
    t0 = perf_counter()
    try:
        disk.write(s.fd, data)
        disk.fdatasync(s.fd)
    except OSError as exc:
        raise _Failed(storage_error(exc, "writing", s.seg_path)) from exc
    finally:
        s.in_flight -= 1
    dt = perf_counter() - t0
    s.seg_pos += size
    if s.seg_pos > s.seg_size // 2 and s.spare_fd < 0 and not s.spare_pending:
        _start_spare(j, s)
    s.flushes += 1
    s.records += len(batch)
    s.flush_seconds += dt
    if dt > s.flush_seconds_max:
        s.flush_seconds_max = dt


class _Failed(Exception):
    """A flush's write, sync or rollover failed with ``error`` (inside the flush path only)."""

    def __init__(self, error: StorageError) -> None:
        self.error = error


def _void(j: Journal, s: _Shard, first: int, error: StorageError) -> None:
    """A flush from ``first`` failed: void every LSN from ``first`` to the last appended (the batch and
    what queued behind it), tell their waiters ``error``, and give the flush turn back.

    Nothing voided is ever acknowledged: the next flush first makes a new
    segment whose header says the log holds up to ``durable_lsn``, so any of the
    batch's frames that reached the old segment are void at every open, and
    LSNs are never reused.  With an ``on_void`` listener, appends are refused
    (raising ``error``) until it calls :meth:`Journal.resume`.
    """
    kick = False
    with s.lock:
        hi = s.next_lsn - 1
        s.pending = []
        s.voided.append((first, hi, error))
        if len(s.voided) > _VOIDS_KEPT:
            del s.voided[0]
        s.void_after = s.durable_lsn
        s.failures += 1
        s.last_error = error
        woken = [w for _, _, w in s.waiters]  # every waiter's LSN is past durable_lsn: all voided
        s.waiters = []
        if j.on_void is not None:
            s.refusing = error
        s.flushing = False
        kick = s.idle and s.closing
        if kick:
            s.idle = False
        if j.on_void is not None:
            j.on_void(s.index, first, hi, error)  # under the lock: before any append can be refused
    if kick:
        e.send(s.pid, _KICK)
    _wake(s, [w for w in woken if not callable(w)], error)


def _void_error(s: _Shard, lsn: int) -> StorageError | None:
    """The error that voided ``lsn`` of shard ``s`` (None: not voided)."""
    for lo, hi, err in reversed(s.voided):
        if lo <= lsn <= hi:
            return err
        if hi < lsn:
            return None
    return None


def _start_spare(j: Journal, s: _Shard) -> None:
    """Prepare segment ``seg_number + 1`` on a carrier of the ``"blocking"`` dispatcher, off the flush
    path (allocating and zero-filling 16 MiB takes tens of milliseconds); a rollover uses it."""
    s.spare_pending = True
    s.spare_lock.acquire()
    try:
        e.spawn(_prepare_spare, j, s, s.seg_number + 1, j.segment_size, dispatcher=_dispatcher.BLOCKING)
    except BaseException:
        s.spare_pending = False
        s.spare_lock.release()
        raise


def _prepare_spare(j: Journal, s: _Shard, number: int, size: int) -> None:
    """Allocate spare segment ``number`` (zero header: an open deletes it if a crash leaves it unused).
    A failure leaves no spare: the rollover then makes the segment itself (and reports the error)."""
    try:
        fd = j._allocate(s, number, size, None)
        s.spare_number = number
        s.spare_size = size
        s.spare_fd = fd
    except OSError:
        pass
    finally:
        s.spare_pending = False
        s.spare_lock.release()
