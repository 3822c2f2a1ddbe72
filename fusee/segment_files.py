"""The segment files of one shard's log: recovery (with HEAD), allocation, spare segments, rollover, deletion.

A shard's log is ``<shard dir>/<number>.seg`` files (:mod:`fusee.segment`
format), numbered from 1 and never reused, and the ``HEAD`` file
(:mod:`fusee.directory`) naming the newest segment that may hold records.
:func:`recover` reads them at open; :func:`start` then makes a fresh segment
current, so new frames never follow torn bytes in one file.  A segment is
preallocated to ``segment_size`` bytes and, with ``zero_fill``, zero-filled:
on ext4 a write into merely fallocated space converts an "unwritten" extent, a
metadata change ``fdatasync`` must commit, while a write over written zeros
changes data only.  :func:`new_segment` is the rollover (it uses the spare
segment :func:`start_spare` prepared off the flush path, if any) and gives the
current segment, beside its descriptor, an ``O_DIRECT`` appender where the
disk allows one (:meth:`fusee.disk.Disk.direct_appender`, :mod:`fusee.direct_io`);
:func:`close_current` closes both; :func:`delete_before` drops segments a
checkpoint holds.

Every file operation goes through the shard's :class:`fusee.disk.Disk`.  These
functions run in the holder of the shard's flush turn, or while no flush can
run (open, close); the spare's preparation runs on a carrier of the
``"blocking"`` dispatcher, under ``spare_lock``.
"""

from __future__ import annotations

import os
import re

import ensemble as e
from ensemble import dispatcher as _dispatcher

from . import directory as _dir
from . import segment as _seg
from .journal_shard import ShardState

__all__ = [
    "recover", "read_back", "start", "allocate", "new_segment", "drop_spare", "start_spare", "close_files",
    "close_current", "delete_before",
]

_SEG_NAME = re.compile(r"^(\d+)\.seg$")
_ZEROS = bytes(1 << 20)


def _corrupt(path: str | None, offset: int, why: str) -> Exception:
    from .errors import Corrupt

    return Corrupt(path, offset, why)


def _header_of(data: bytes, path: str) -> "_seg.Header | None":
    """The segment header at the start of ``data``; None if the file is empty or its header block is all
    zeros (never written); :class:`fusee.errors.Corrupt` if it is damaged."""
    block = data[: _seg.HEADER_SIZE]
    if not block.strip(b"\0"):
        return None
    return _seg.decode_header(data, path)


def _numbers(directory: str) -> list[int]:
    """The numbers of the segment files in ``directory``, ascending."""
    return sorted(int(m.group(1)) for f in os.listdir(directory) if (m := _SEG_NAME.match(f)))


def recover(s: ShardState, after: int = 0) -> None:
    """Read shard ``s``'s segments: its records after ``after`` (the checkpoint's LSN), checked whole.

    Sets ``s.recovered``, ``s.places``, ``s.next_lsn``, ``s.durable_lsn``,
    ``s.seg_number``, ``s.head`` and ``s.empties``.  HEAD names the newest
    segment that may hold records: every segment up to it must be there, whole
    (its allocated size, recorded in its header) and in LSN sequence; one past
    it never held an acknowledged frame (a crash while making it, or an unused
    spare) and is deleted.  Anything else missing or cut short is
    :class:`fusee.errors.Corrupt` naming the file.
    """
    assert s.dir is not None
    disk = s.disk
    head = s.head = _dir.read_head(s.dir)
    numbers = _numbers(s.dir)
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


def read_back(s: ShardState, after: int, upto: int) -> list[tuple[int, bytes]]:
    """Shard ``s``'s records ``after + 1 .. upto``, read back from its segment files while the journal is
    open (:meth:`fusee.journal.Journal.read_back`).  ``upto`` is at most the durable LSN and nothing is
    appended meanwhile, so every frame wanted was synced whole.  A segment whose header is still zero
    (a spare) holds nothing; a segment whose header says the log holds less than was read before it
    (a failed flush) voids the frames past that.  :class:`fusee.errors.Corrupt` if a record is missing."""
    assert s.dir is not None
    out: list[tuple[int, bytes]] = []
    for n in _numbers(s.dir):
        p = os.path.join(s.dir, f"{n}.seg")
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:  # deleted meanwhile (a checkpoint holds it)
            continue
        if _header_of(data, p) is None:
            continue
        sc = _seg.scan(data, p)
        assert sc.header is not None
        while out and out[-1][0] > sc.header.prior:  # a failed flush's frames: void
            out.pop()
        out.extend((fr.lsn, fr.body) for fr in sc.frames if after < fr.lsn <= upto)
    lsns = [lsn for lsn, _ in out]
    if lsns != sorted(set(lsns)) or (upto > after and lsns[-1:] != [upto] and s.void_after is None and not s.voided):
        raise _corrupt(s.dir, 0, f"reading back records {after + 1}..{upto}: found {len(lsns)} "
                       f"({lsns[:1]}..{lsns[-1:]}): records are missing")
    return out


def start(s: ShardState) -> None:
    """After :func:`recover`: make a fresh segment current (HEAD names it), then delete the recovered
    segments without a frame (HEAD is past them now).  ``OSError`` on failure."""
    assert s.dir is not None
    disk = s.disk
    new_segment(s, s.next_lsn, s.segment_size)
    for p in s.empties:
        disk.unlink(p)
    if s.empties:
        disk.fsync_dir(s.dir)
    s.empties = []


def allocate(s: ShardState, number: int, size: int, header: "_seg.Header | None") -> int:
    """Create segment file ``number`` of ``size`` bytes, allocated (zero-filled unless ``zero_fill`` is
    off), with ``header`` (or a zero one), synced with its directory; its open fd.  On failure nothing
    is left: the file is deleted and the ``OSError`` raised."""
    assert s.dir is not None
    disk = s.disk
    p = os.path.join(s.dir, f"{number}.seg")
    disk.unlink(p)  # a file of this number is a leftover of a failed attempt: it never held a record
    fd = disk.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    try:
        disk.allocate(fd, size)
        if s.zero_fill:
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


def new_segment(s: ShardState, base_lsn: int, size: int, after: int | None = None) -> None:
    """Make segment ``seg_number + 1``, beginning at ``base_lsn`` (the log holding up to ``after``,
    default ``base_lsn - 1``) and at least ``size`` bytes, current: the spare prepared off the flush
    path if there is one big enough, else one made now.  HEAD names it before any frame goes in.
    On failure (``OSError``) no new file is left and the current segment stays current."""
    if s.spare_pending:  # a spare is being prepared: wait for it (a native wait, rare)
        with s.spare_lock:
            pass
    assert s.dir is not None
    disk = s.disk
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
        drop_spare(s)
        fd = allocate(s, number, size, _seg.Header(s.index, base_lsn, number, size, after))
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
    try:
        direct = disk.direct_appender(p, _seg.HEADER_SIZE, size)
    except OSError:
        direct = None  # the buffered way works wherever the file does
    close_current(s)
    s.fd = fd
    s.direct = direct
    s.seg_path = p
    s.seg_number = number
    s.seg_pos = _seg.HEADER_SIZE
    s.seg_size = size


def drop_spare(s: ShardState) -> None:
    """Close and delete the shard's unused spare segment, if any (a crash leaves it to the next open,
    whose recovery deletes a trailing segment without a header)."""
    if s.spare_fd >= 0 and s.dir is not None:
        os.close(s.spare_fd)
        s.spare_fd = -1
        try:
            s.disk.unlink(os.path.join(s.dir, f"{s.spare_number}.seg"))
        except OSError:
            pass  # left for the next open, which deletes a segment past HEAD


def start_spare(s: ShardState) -> None:
    """Prepare segment ``seg_number + 1`` on a carrier of the ``"blocking"`` dispatcher, off the flush
    path (allocating and zero-filling 16 MiB takes tens of milliseconds); a rollover uses it."""
    s.spare_pending = True
    s.spare_lock.acquire()
    try:
        e.spawn(_prepare_spare, s, s.seg_number + 1, s.segment_size, dispatcher=_dispatcher.BLOCKING)
    except BaseException:
        s.spare_pending = False
        s.spare_lock.release()
        raise


def _prepare_spare(s: ShardState, number: int, size: int) -> None:
    """Allocate spare segment ``number`` (zero header: an open deletes it if a crash leaves it unused).
    A failure leaves no spare: the rollover then makes the segment itself (and reports the error)."""
    try:
        fd = allocate(s, number, size, None)
        s.spare_number = number
        s.spare_size = size
        s.spare_fd = fd
    except OSError:
        pass
    finally:
        s.spare_pending = False
        s.spare_lock.release()


def close_files(s: ShardState, keep_spares: bool) -> None:
    """Close the shard's segment files, once no flush can run (an unused spare segment is deleted, or,
    with ``keep_spares``, left on disk as a crash leaves it: the next open deletes it)."""
    if s.spare_pending:
        with s.spare_lock:
            pass
    if keep_spares and s.spare_fd >= 0:
        os.close(s.spare_fd)
        s.spare_fd = -1
    drop_spare(s)
    close_current(s)


def close_current(s: ShardState) -> None:
    """Close the current segment's descriptors (its ``O_DIRECT`` appender's too), if open."""
    if s.direct is not None:
        s.direct.close()
        s.direct = None
    if s.fd >= 0:
        os.close(s.fd)
        s.fd = -1


def delete_before(s: ShardState, lsn: int, closed: bool) -> int:
    """Delete the shard's oldest segments whose every record is at or before ``lsn`` (a checkpoint
    holds them); never the segment being written to unless ``closed``.  Returns how many went.

    Deletes in number order and stops at the first segment it keeps, so the
    log left is contiguous; a kept segment's records up to ``lsn`` are
    skipped at the next open (``Journal.open(after=...)``).  Deleting the
    segment HEAD names first moves HEAD past it (the next segment is yet to
    be made, the checkpoint holds up to ``lsn``).
    """
    if s.dir is None:
        return 0
    bases: list[tuple[int, str, int | None]] = []
    for n in _numbers(s.dir):
        p = os.path.join(s.dir, f"{n}.seg")
        with open(p, "rb") as f:
            head = f.read(_seg.HEADER_SIZE)
        try:
            base = _seg.decode_header(head, p).base_lsn
        except Exception:
            base = None
        bases.append((n, p, base))
    gone = 0
    disk = s.disk
    for i, (n, p, base) in enumerate(bases):
        if not closed and p == s.seg_path:
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
