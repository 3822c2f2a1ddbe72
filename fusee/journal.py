"""fusee's journal: per-shard logs of opaque records, group-committed to disk.

Layout: ``<path>/shard-<n>/<segment number>.seg``, each a segment of
:mod:`fusee.segment` (a 4 KiB header, then frames).  LSNs are consecutive
across a shard's segments, from 1.  Every open recovers each shard (scanning
its segments in order), deletes a trailing segment with no valid frame, and
starts a fresh segment numbered after the last, so new frames never follow
torn bytes in one file.  A segment is preallocated to ``segment_size`` bytes
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

from . import segment as _seg

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

    ``home``: the waiter runs on the shard's own carrier (see ``_Shard.woken_home``).
    """

    __slots__ = ("home",)

    def __init__(self, home: bool) -> None:
        self.home = home


def _await_token(tok: _Token, timeout: float | None) -> bool:
    """Wait in a selective receive until ``tok`` is in the caller's mailbox; take it.  False on timeout."""
    return e.receive(lambda m: True if m is tok else NOMATCH, timeout=timeout) is True


def _wake(s: "_Shard", ready: list) -> None:
    """Hand each ready waiter its token (on the shard's carrier; ensemble.send is safe from any thread)."""
    send = e.send
    for p, tok in ready:
        if tok.home:
            s.woken_home += 1
        send(p, tok)


def _corrupt(path: str | None, offset: int, why: str) -> Exception:
    from .errors import Corrupt

    return Corrupt(path, offset, why)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


class Journal:
    """Per-shard, group-committed logs of opaque byte bodies.  Open with :meth:`Journal.open`."""

    def __init__(self, path: str | None, shards: int, segment_size: int, zero_fill: bool) -> None:
        if type(shards) is not int or shards < 1:
            raise ValueError(f"shards must be a positive int, not {shards!r}")
        if segment_size < _seg.HEADER_SIZE + _seg.FRAME_HEADER:
            raise ValueError(f"segment_size {segment_size} is too small")
        self.path = path
        self.segment_size = segment_size
        self.zero_fill = zero_fill
        self.closed = False
        self._shards = [_Shard(i) for i in range(shards)]
        self._seq = itertools.count()
        self._dispatchers: list[str] = []

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        path: str | None,
        shards: int,
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        zero_fill: bool = True,
        after: list[int] | None = None,
    ) -> "Journal":
        """Open (recovering) the journal at ``path`` with ``shards`` shards; ``None`` keeps it in memory.

        Raises :class:`fusee.errors.Corrupt` (naming the file and offset) for a
        damaged acknowledged record.  Starts a fresh segment per shard and, per
        shard, a dispatcher of one carrier (:meth:`home`) with the shard's flusher.
        ``after[n]`` (default 0) is the LSN of shard ``n``'s checkpoint: its log
        may begin at ``after[n] + 1`` (earlier segments deleted), and records at
        or before it are not recovered (the checkpoint holds them).
        """
        j = cls(path, shards, segment_size, zero_fill)
        if path is None:
            return j
        os.makedirs(path, exist_ok=True)
        for s in j._shards:
            s.dir = os.path.join(path, f"shard-{s.index}")
            os.makedirs(s.dir, exist_ok=True)
            j._recover(s, after[s.index] if after else 0)
        for s in j._shards:
            j._new_segment(s, s.next_lsn, segment_size)
        _fsync_dir(path)
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
        assert s.dir is not None
        numbers = sorted(int(m.group(1)) for f in os.listdir(s.dir) if (m := _SEG_NAME.match(f)))
        scans: list[tuple[int, str, _seg.Scan]] = []
        for n in numbers:
            p = os.path.join(s.dir, f"{n}.seg")
            with open(p, "rb") as f:
                data = f.read()
            scans.append((n, p, _seg.scan(data, p)))
        # A trailing segment with no valid frame (never used, or its creation never became durable) goes.
        while scans and not scans[-1][2].frames:
            n, p, sc = scans[-1]
            if sc.header is not None and len(scans) > 1:
                prev = scans[-2][2]
                expected = prev.frames[-1].lsn + 1 if prev.frames else (prev.header.base_lsn if prev.header else 1)
                if sc.header.base_lsn != expected:
                    break  # let the checks below report the gap
            os.unlink(p)
            scans.pop()
        next_lsn = after + 1
        prev_path, prev_end = None, 0
        for n, p, sc in scans:
            h = sc.header
            if h is None:
                raise _corrupt(p, 0, "segment header is missing (all zeros) but later segments exist")
            if h.shard != s.index:
                raise _corrupt(p, 0, f"segment belongs to shard {h.shard}, found in shard {s.index}")
            if h.number != n:
                raise _corrupt(p, 0, f"segment header says number {h.number}")
            if prev_path is None and h.base_lsn <= next_lsn:
                next_lsn = h.base_lsn  # segments before a checkpoint not deleted (yet): skip their records
            if h.base_lsn > next_lsn and prev_path is not None:
                raise _corrupt(
                    prev_path,
                    prev_end,
                    f"records {next_lsn}..{h.base_lsn - 1} are missing or damaged "
                    f"(the next segment begins at lsn {h.base_lsn})",
                )
            if h.base_lsn != next_lsn:
                raise _corrupt(p, 0, f"segment begins at lsn {h.base_lsn}, expected {next_lsn}")
            s.recovered.extend((fr.lsn, fr.body) for fr in sc.frames if fr.lsn > after)
            if sc.frames:
                s.places.append((h.base_lsn, p, [fr.offset for fr in sc.frames]))
            next_lsn = h.base_lsn + len(sc.frames)
            prev_path, prev_end = p, sc.end
        next_lsn = max(next_lsn, after + 1)
        s.next_lsn = next_lsn
        s.durable_lsn = next_lsn - 1
        s.seg_number = scans[-1][0] if scans else 0  # a deleted trailing segment's number is reused

    def _allocate(self, s: _Shard, number: int, size: int, header: bytes | None) -> int:
        """Create segment file ``number`` of ``size`` bytes, allocated (zero-filled unless ``zero_fill`` is
        off), with ``header`` (or a zero one), synced with its directory; its open fd."""
        assert s.dir is not None
        p = os.path.join(s.dir, f"{number}.seg")
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            if hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError:
                    os.ftruncate(fd, size)
            else:
                os.ftruncate(fd, size)
            if self.zero_fill:
                left = size
                while left > 0:
                    left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])
            if header is not None:
                os.pwrite(fd, header, 0)
            os.fsync(fd)  # size and extents: the last metadata change this file sees
            _fsync_dir(s.dir)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _new_segment(self, s: _Shard, base_lsn: int, size: int) -> None:
        """Make segment ``seg_number + 1``, beginning at ``base_lsn`` and at least ``size`` bytes, current:
        the spare prepared off the flush path if there is one big enough, else one made now."""
        if s.spare_pending:  # a spare is being prepared: wait for it (a native wait, rare)
            with s.spare_lock:
                pass
        number = s.seg_number + 1
        header = _seg.encode_header(_seg.Header(s.index, base_lsn, number))
        if s.spare_fd >= 0 and s.spare_number == number and s.spare_size >= size:
            fd, size = s.spare_fd, s.spare_size
            s.spare_fd = -1
            try:
                os.pwrite(fd, header, 0)
                os.fdatasync(fd)  # the header is durable before any frame of this segment is acknowledged
            except BaseException:
                os.close(fd)
                raise
            s.spares_used += 1
        else:
            self._drop_spare(s)
            fd = self._allocate(s, number, size, header)
        os.lseek(fd, _seg.HEADER_SIZE, os.SEEK_SET)
        if s.fd >= 0:
            os.close(s.fd)
        s.fd = fd
        assert s.dir is not None
        s.seg_path = os.path.join(s.dir, f"{number}.seg")
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
                os.unlink(os.path.join(s.dir, f"{s.spare_number}.seg"))
            except FileNotFoundError:
                pass

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
            os.unlink(p)
            gone += 1
        if gone:
            _fsync_dir(s.dir)
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
        if s.error is not None and s.durable_lsn < lsn:
            raise s.error
        return True

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
            "segments": [s.seg_number for s in shards],
        }

    def close(self) -> None:
        """Flush what is pending, stop the flushers and close the files.  Idempotent."""
        if self.closed:
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
        except BaseException:
            return  # the disk failed: recorded in s.error, every waiter woken
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
                released = _flush_taken(j, s, *taken, release=True)
        finally:
            if not released:
                _hand_back(s)


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
    if s.seg_pos + size > s.seg_size:
        j._new_segment(s, first, max(j.segment_size, _seg.HEADER_SIZE + size))
    s.in_flight += 1
    if s.in_flight > s.max_in_flight:
        s.max_in_flight = s.in_flight
    t0 = perf_counter()
    try:
        fd = s.fd
        done = os.write(fd, data)
        if done != size:  # a short write (rare: a signal, a full disk): write the rest
            view = memoryview(data)[done:]
            while view:
                view = view[os.write(fd, view) :]
        os.fdatasync(fd)
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
