"""Segment files of fusee's journal: the frame codec, the header, and the pure scanner.

A segment is a 4 KiB header block followed by frames (spec §1.7, format 2)::

    header = magic "FUSEESEG" version:u32le shard:u32le base_lsn:u64le number:u64le
             [size:u64le after:u64le]   (format 3 only: the file's allocated size, and the
                                         LSN the log holds up to before this segment)
             crc:u32le (crc32c of the 32 (format 2) or 48 (format 3) bytes before it),
             zero padding to 4096 bytes
    frame  = len:u32le crc:u32le lsn:u64le batch:u32le body[len]
    crc    = crc32c(lsn ++ batch ++ body)

``batch`` is the frame's distance from the first frame of the flush batch it
was written in (0 for the first).  Only one flush is in flight per shard, so a
batch is written only once the batch before it is durable: a valid frame of a
*later* batch after a damaged one proves the damaged one was acknowledged.

:func:`scan` is a pure function over a segment's bytes.  It returns the valid
frames and the offset just past them, stopping at

* the end of the data, or zero-filled (preallocated) space;
* a torn tail: a frame that is incomplete or fails its checksum, with no valid
  frame of a later batch anywhere after it (the never-acknowledged last batch);

and raises :class:`fusee.errors.Corrupt` for a damaged frame that a valid frame
of a later batch follows, for a valid frame out of LSN or batch sequence, and
for a damaged header (unless the whole segment is zero: a segment whose
creation never became durable, reported as ``header=None``).  Whether a torn
tail is acceptable *across* segments (an earlier segment's tail must end where
the next segment's ``base_lsn`` begins) is the journal's check, not scan's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from .crc32c import crc32c, crc32c_raw, fill_frames

__all__ = [
    "MAGIC",
    "VERSION",
    "HEADER_SIZE",
    "FRAME_HEADER",
    "Header",
    "Frame",
    "Scan",
    "encode_header",
    "decode_header",
    "encode_frame",
    "encode_batch",
    "scan",
]

MAGIC = b"FUSEESEG"
VERSION = 3
HEADER_SIZE = 4096
_HEAD = struct.Struct("<8sIIQQ")  # magic version shard base_lsn number (32 bytes)
_SIZE = struct.Struct("<QQ")  # format 3: the allocated size and ``after``, after those 32 bytes
_HEAD_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<IIQI")  # len crc lsn batch (24 bytes)
_LSN_BATCH = struct.Struct("<QI")
FRAME_HEADER = _FRAME.size
#: The largest body a frame may carry (u32 length).
MAX_BODY = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Header:
    """A segment's header block: which shard, the LSN of its first frame, its number, and (format 3) the
    size the file was allocated to and ``after``, the last LSN the log holds before this segment.

    ``after`` is ``base_lsn - 1`` unless a flush failed before this segment was
    made: the failed batch's LSNs (``after + 1 .. base_lsn - 1``) were never
    acknowledged and are void, along with any frame of theirs that reached the
    previous segment.  Both are ``None`` in a format-2 segment."""

    shard: int
    base_lsn: int
    number: int
    size: int | None = None
    after: int | None = None
    version: int = VERSION

    @property
    def prior(self) -> int:
        """The last LSN the log holds before this segment (``after``, or ``base_lsn - 1``)."""
        return self.base_lsn - 1 if self.after is None else self.after


class Frame(NamedTuple):
    """One valid frame: where it starts, its LSN, batch distance and body."""

    offset: int
    lsn: int
    batch: int
    body: bytes


class Scan(NamedTuple):
    """What :func:`scan` found: the header (None for an all-zero segment), the frames, and the end offset."""

    header: Header | None
    frames: list[Frame]
    end: int


def _corrupt(path: str | None, offset: int, why: str) -> Exception:
    from .errors import Corrupt  # lazily: errors.py is another module's

    return Corrupt(path, offset, why)


def encode_header(h: Header) -> bytes:
    """The 4 KiB header block of ``h``."""
    head = _HEAD.pack(MAGIC, h.version, h.shard, h.base_lsn, h.number)
    if h.version >= 3:
        if h.size is None:
            raise ValueError("a format-3 segment header records its size")
        after = h.base_lsn - 1 if h.after is None else h.after
        if not 0 <= after < h.base_lsn:
            raise ValueError(f"after {after} is not below base_lsn {h.base_lsn}")
        head += _SIZE.pack(h.size, after)
    block = head + _HEAD_CRC.pack(crc32c(head))
    return block + bytes(HEADER_SIZE - len(block))


def decode_header(data: bytes, path: str | None = None) -> Header:
    """The header at the start of ``data``; raises Corrupt (offset 0) if it is damaged."""
    if len(data) < HEADER_SIZE:
        raise _corrupt(path, 0, f"segment shorter than its {HEADER_SIZE}-byte header ({len(data)} bytes)")
    magic, version, shard, base_lsn, number = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise _corrupt(path, 0, f"bad segment magic {magic!r}")
    if version not in (2, 3):
        raise _corrupt(path, 0, f"unsupported segment version {version}")
    covered = _HEAD.size + (_SIZE.size if version == 3 else 0)
    (crc,) = _HEAD_CRC.unpack_from(data, covered)
    if crc != crc32c(memoryview(data)[:covered]):
        raise _corrupt(path, 0, "segment header checksum mismatch")
    size, after = _SIZE.unpack_from(data, _HEAD.size) if version == 3 else (None, None)
    if after is not None and after >= base_lsn:
        raise _corrupt(path, 0, f"segment header says after {after} >= base_lsn {base_lsn}")
    return Header(shard, base_lsn, number, size, after, version)


def encode_frame(lsn: int, batch: int, body: bytes) -> bytes:
    """One frame carrying ``body`` at ``lsn``, ``batch`` frames after its batch's first."""
    n = len(body)
    if n > MAX_BODY:
        raise ValueError(f"frame body of {n} bytes exceeds {MAX_BODY}")
    lb = _LSN_BATCH.pack(lsn, batch)
    crc = crc32c(body, crc32c(lb))
    return _FRAME.pack(n, crc, lsn, batch) + body


def encode_batch(first_lsn: int, bodies: list[bytes]) -> bytes:
    """The frames of one flush batch: ``bodies`` at consecutive LSNs from ``first_lsn``."""
    if len(bodies) == 1:  # the common case under low load: one frame, one CRC call, no buffer to fill
        body = bodies[0]
        covered = _LSN_BATCH.pack(first_lsn, 0) + body
        return _FRAME.pack(len(body), crc32c_raw(0, covered, len(covered)), first_lsn, 0) + body
    # Laid out with zero checksums, then every checksum written in one call (:func:`fusee.crc32c.fill_frames`:
    # natively, the GIL is given up once per batch, not once per frame: each give-up let another carrier in).
    parts = []
    pack = _FRAME.pack
    lsn = first_lsn
    for i, body in enumerate(bodies):
        parts.append(pack(len(body), 0, lsn, i))
        parts.append(body)
        lsn += 1
    buf = bytearray().join(parts)
    fill_frames(buf)
    return bytes(buf)


def _frame_at(data: memoryview, off: int, limit: int) -> tuple[int, int, int] | None:
    """``(lsn, batch, length)`` of a checksum-valid frame at ``off`` ending by ``limit``, else None."""
    if off + FRAME_HEADER > limit:
        return None
    n, crc, lsn, batch = _FRAME.unpack_from(data, off)
    end = off + FRAME_HEADER + n
    if end > limit:
        return None
    if crc != crc32c(data[off + FRAME_HEADER : end], crc32c(data[off + 8 : off + FRAME_HEADER])):
        return None
    return lsn, batch, n


def _later_batch_after(data: memoryview, start: int, limit: int, size: int, next_lsn: int) -> int | None:
    """Offset of a valid frame of a batch later than the damaged one, searched from ``start``.

    Frames start before ``limit`` (the end of the non-zero bytes) and end by
    ``size``.  The damaged frame sits at ``next_lsn``; its batch began at the
    previous frame's batch or at ``next_lsn`` itself, so a valid frame
    whose batch began after ``next_lsn`` belongs to a later batch.  Frames of
    the damaged frame's own batch prove nothing (a torn write may persist
    pages out of order).

    The answer is the first offset whose fields pass :func:`_plausible` and
    whose frame is checksum-valid.  It is found without looking at every
    offset: a plausible ``lsn`` lies in ``(next_lsn, next_lsn + most]``, so
    its high bytes take one of a few values (:func:`_lsn_prefixes`), and only
    the places where those bytes occur (``bytes.find``, in C) are candidates;
    a candidate whose ``lsn`` is zero sits in a run of zeros, and every offset
    whose ``lsn`` lies inside that run is skipped at once.
    """
    stop = min(limit, size - FRAME_HEADER + 1)  # candidate offsets: [start, stop)
    most = (limit - start) // FRAME_HEADER  # a later frame is at most this many LSNs on
    if start >= stop or most < 1 or next_lsn >= _U64:
        return None
    buf = data.tobytes()
    unpack = _LSN_BATCH.unpack_from
    best = stop  # the first valid offset found so far (stop: none)
    for low, prefix in _lsn_prefixes(next_lsn + 1, min(next_lsn + most, _U64), _PREFIX_CHOICES):
        # ``prefix`` is the lsn field's bytes from its ``low``-th: at offset off + 8 + low
        shift = 8 + low
        width = len(prefix)
        zero = not prefix.strip(b"\0")
        q = start + shift
        end = best + 15  # the lsn field of an offset before ``best`` ends by best - 1 + 16
        while True:
            q = buf.find(prefix, q, end)
            if q < 0:
                break
            off = q - shift
            lsn, batch = unpack(buf, off + 8)
            if _plausible(lsn, batch, next_lsn, most):
                if _frame_at(data, off, size) is not None:
                    best = off
                    break
            elif zero and lsn == 0:
                # bytes off+8 .. q+width are zero: so is the lsn of every offset whose lsn ends in this run
                q = _zeros_end(buf, q + width) - width + 1
                continue
            q += 1
    return best if best < stop else None


_U64 = (1 << 64) - 1
#: How many values the lsn's high bytes may take before a shorter prefix is searched for.
_PREFIX_CHOICES = 8


def _plausible(lsn: int, batch: int, next_lsn: int, most: int) -> bool:
    """Whether a frame with ``lsn`` and ``batch`` could be one of a batch later than ``next_lsn``'s,
    at most ``most`` LSNs on (the frames that fit in what is left): the checks before any checksum."""
    return next_lsn < lsn and batch <= lsn and lsn - batch > next_lsn and lsn - next_lsn <= most


def _lsn_prefixes(lo: int, hi: int, choices: int) -> list[tuple[int, bytes]]:
    """``(low, prefix)`` pairs: every u64 in ``[lo, hi]`` has, from its ``low``-th little-endian byte
    on, one of the ``prefix`` bytes; ``low`` is the least for which at most ``choices`` prefixes do
    (8, with the one empty prefix, when none does)."""
    for low in range(8):
        first, last = lo >> (8 * low), hi >> (8 * low)
        if last - first < choices:
            return [(low, v.to_bytes(8 - low, "little")) for v in range(first, last + 1)]
    return [(8, b"")]


_ZERO_BLOCKS = tuple(bytes(1 << i) for i in range(16, -1, -1))


def _zeros_end(buf: bytes, pos: int) -> int:
    """The first offset at or after ``pos`` whose byte is not zero (``len(buf)`` if none)."""
    for block in _ZERO_BLOCKS:
        step = len(block)
        while buf.startswith(block, pos):
            pos += step
    return pos


def scan(data: bytes | bytearray | memoryview, path: str | None = None) -> Scan:
    """Scan one segment's bytes: its header, its valid frames, and the offset just past them.

    Pure: reads nothing but ``data``; ``path`` only names the file in errors.
    Raises :class:`fusee.errors.Corrupt` with the offset of the damage for a
    damaged acknowledged frame (a valid frame of a later batch follows it), a
    frame out of sequence, or a damaged header.
    """
    mv = memoryview(data).cast("B")
    size = len(mv)
    # The last non-zero byte bounds everything: zero-filled space holds no frame.
    limit = len(bytes(mv).rstrip(b"\0")) if size else 0
    if limit == 0:
        return Scan(None, [], 0)
    header = decode_header(mv, path)
    frames: list[Frame] = []
    off = HEADER_SIZE
    next_lsn = header.base_lsn
    prev_batch = -1  # batch distance of the previous frame; -1 before the first
    while off < limit:  # a frame starting in zero-filled space is no frame
        got = _frame_at(mv, off, size)
        if got is None:
            later = _later_batch_after(mv, off + 1, limit, size, next_lsn)
            if later is not None:
                raise _corrupt(
                    path,
                    off,
                    f"damaged frame at lsn {next_lsn} inside an acknowledged batch "
                    f"(a later batch follows at offset {later})",
                )
            break  # a torn tail: the never-acknowledged last batch
        lsn, batch, n = got
        if lsn != next_lsn:
            raise _corrupt(path, off, f"frame has lsn {lsn}, expected {next_lsn}")
        if batch != 0 and batch != prev_batch + 1:
            raise _corrupt(path, off, f"frame at lsn {lsn} has batch distance {batch} after {prev_batch}")
        end = off + FRAME_HEADER + n
        frames.append(Frame(off, lsn, batch, bytes(mv[off + FRAME_HEADER : end])))
        prev_batch = batch
        next_lsn = lsn + 1
        off = end
    return Scan(header, frames, off)
