"""How a byte stream between two nodes is cut into frames: a 4-byte big-endian length, then that
many bytes of payload.

Pure: :func:`frame` makes one frame, :func:`split` finds the whole frames at the start of a
buffer.  A frame announcing more than the limit is refused as soon as its header arrives (before
its payload is read or buffered): :class:`FrameTooLarge`, after which the connection is dropped.
Before the handshake the limit is :data:`HANDSHAKE_LIMIT`; after it, the node's ``max_frame``.
"""

from __future__ import annotations

from struct import Struct

__all__ = ["HEADER", "HANDSHAKE_LIMIT", "MAX_LIMIT", "FrameTooLarge", "frame", "split", "length_header",
           "unpack_length"]

_LENGTH = Struct(">I")
#: ``length_header(n)``: the 4 header bytes of a frame of ``n`` bytes of payload (``n`` not
#: checked: for senders that have checked it, or that build a frame from pieces).
length_header = _LENGTH.pack
#: ``unpack_length(buffer, at)``: ``(n,)``, the length a header at ``buffer[at:]`` announces.
unpack_length = _LENGTH.unpack_from
#: Bytes of a frame's length header.
HEADER = _LENGTH.size
#: The largest payload before the handshake has finished.
HANDSHAKE_LIMIT = 4096
#: The largest payload the header can announce (and so the largest ``max_frame``).
MAX_LIMIT = 2**32 - 1


class FrameTooLarge(ValueError):
    """A frame's header announced ``size`` bytes, more than the ``limit`` of the connection."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a frame of {size:,} bytes is over the limit of {limit:,}")
        self.size = size
        self.limit = limit


def frame(payload: bytes, limit: int = MAX_LIMIT) -> bytes:
    """``payload`` as one frame: its length (4 bytes, big-endian), then itself.

    Raises :class:`FrameTooLarge` when ``payload`` is over ``limit`` (so a sender learns it
    before the peer would drop the connection for it).
    """
    n = len(payload)
    if n > limit:
        raise FrameTooLarge(n, limit)
    return _LENGTH.pack(n) + payload


def split(buffer: bytes | bytearray | memoryview, limit: int) -> tuple[list[bytes], int]:
    """The whole frames at the start of ``buffer`` and how many bytes they took.

    ``([payload, ...], consumed)``: the caller drops ``buffer[:consumed]`` and keeps the rest
    (a partial frame) for when more bytes come.  Raises :class:`FrameTooLarge` as soon as a
    header announces more than ``limit`` bytes, whether or not its payload has arrived.
    """
    end = len(buffer)
    if end < HEADER:
        return [], 0
    unpack = _LENGTH.unpack_from
    (n,) = unpack(buffer, 0)
    if n > limit:
        raise FrameTooLarge(n, limit)
    if HEADER + n > end:  # the first frame is not whole yet: nothing to copy (a big frame
        return [], 0  # arriving in many reads is not copied once per read)
    data = buffer if type(buffer) is bytes else bytes(buffer)  # slices of bytes are bytes
    frames: list[bytes] = []
    append = frames.append
    at = 0
    while end - at >= HEADER:
        (n,) = unpack(data, at)
        if n > limit:
            raise FrameTooLarge(n, limit)
        start = at + HEADER
        stop = start + n
        if stop > end:
            break
        append(data[start:stop])
        at = stop
    return frames, at
