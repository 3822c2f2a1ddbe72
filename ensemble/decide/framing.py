"""How a byte stream between two nodes is cut into frames: a 4-byte big-endian length, then that
many bytes of payload.

Pure: :func:`frame` makes one frame, :func:`split` finds the whole frames at the start of a
buffer.  A frame announcing more than the limit is refused as soon as its header arrives (before
its payload is read or buffered): :class:`FrameTooLarge`, after which the connection is dropped.
Before the handshake the limit is :data:`HANDSHAKE_LIMIT`; after it, the node's ``max_frame``.
"""

from __future__ import annotations

from struct import Struct

__all__ = ["HEADER", "HANDSHAKE_LIMIT", "MAX_LIMIT", "FrameTooLarge", "frame", "split"]

_LENGTH = Struct(">I")
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
    view = memoryview(buffer)
    end = len(view)
    frames: list[bytes] = []
    at = 0
    while end - at >= HEADER:
        (n,) = _LENGTH.unpack_from(view, at)
        if n > limit:
            raise FrameTooLarge(n, limit)
        if end - at - HEADER < n:
            break
        start = at + HEADER
        frames.append(bytes(view[start : start + n]))
        at = start + n
    return frames, at
