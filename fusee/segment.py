"""Segment files of fusee's journal: the frame codec, the header, and the pure scanner.

A segment is a 4 KiB header block followed by frames (spec §1.7, format 2)::

    header = magic "FUSEESEG" version:u32le shard:u32le base_lsn:u64le number:u64le
             crc:u32le (crc32c of the 32 bytes before it), zero padding to 4096 bytes
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

from .crc32c import crc32c

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
VERSION = 2
HEADER_SIZE = 4096
_HEAD = struct.Struct("<8sIIQQ")  # magic version shard base_lsn number (32 bytes)
_HEAD_CRC = struct.Struct("<I")
_FRAME = struct.Struct("<IIQI")  # len crc lsn batch (24 bytes)
_LSN_BATCH = struct.Struct("<QI")
FRAME_HEADER = _FRAME.size
#: The largest body a frame may carry (u32 length).
MAX_BODY = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Header:
    """A segment's header block: which shard, the LSN of its first frame, its number."""

    shard: int
    base_lsn: int
    number: int
    version: int = VERSION


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
    block = head + _HEAD_CRC.pack(crc32c(head))
    return block + bytes(HEADER_SIZE - len(block))


def decode_header(data: bytes, path: str | None = None) -> Header:
    """The header at the start of ``data``; raises Corrupt (offset 0) if it is damaged."""
    if len(data) < HEADER_SIZE:
        raise _corrupt(path, 0, f"segment shorter than its {HEADER_SIZE}-byte header ({len(data)} bytes)")
    magic, version, shard, base_lsn, number = _HEAD.unpack_from(data, 0)
    (crc,) = _HEAD_CRC.unpack_from(data, _HEAD.size)
    if magic != MAGIC:
        raise _corrupt(path, 0, f"bad segment magic {magic!r}")
    if crc != crc32c(memoryview(data)[: _HEAD.size]):
        raise _corrupt(path, 0, "segment header checksum mismatch")
    if version != VERSION:
        raise _corrupt(path, 0, f"unsupported segment version {version}")
    return Header(shard, base_lsn, number, version)


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
    if len(bodies) == 1:  # the common case under low load: one frame, no buffer to grow
        body = bodies[0]
        return _FRAME.pack(len(body), crc32c(body, crc32c(_LSN_BATCH.pack(first_lsn, 0))), first_lsn, 0) + body
    out = bytearray()
    pack = _FRAME.pack_into
    lbpack = _LSN_BATCH.pack
    for i, body in enumerate(bodies):
        lsn = first_lsn + i
        at = len(out)
        out += bytes(FRAME_HEADER)
        out += body
        pack(out, at, len(body), crc32c(body, crc32c(lbpack(lsn, i))), lsn, i)
    return bytes(out)


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
    """
    lsn_at = _LSN_BATCH.unpack_from
    for off in range(start, min(limit, size - FRAME_HEADER + 1)):
        lsn, batch = lsn_at(data, off + 8)
        if lsn <= next_lsn or batch > lsn or lsn - batch <= next_lsn:
            continue
        if lsn - next_lsn > (limit - start) // FRAME_HEADER:
            continue  # cannot be that many frames in what is left
        if _frame_at(data, off, size) is not None:
            return off
    return None


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
