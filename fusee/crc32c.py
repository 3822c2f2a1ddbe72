"""CRC32C (Castagnoli): the checksum of fusee's journal records.

``crc32c(data, value=0)`` chains like :func:`zlib.crc32`: the CRC of ``a + b``
is ``crc32c(b, crc32c(a))``.  It is the iSCSI / ext4 / RFC 3720 CRC
(reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF), so
``crc32c(b"123456789") == 0xE3069283``.  ``zlib.crc32`` uses another
polynomial and gives other values.

Two implementations give identical checksums, one chosen at import time:

* ``"native"``: C through cffi (built from native/crc32c.c at install time,
  loaded with ``ensemble.native.load("crc32c")``), using the SSE4.2
  ``crc32`` instruction when the CPU has it (``HARDWARE``), else a
  slicing-by-8 table in C;
* ``"python"``: the slicing-by-8 table in pure Python below, used when the
  module was not built (no C compiler) or ``ENSEMBLE_PURE_PYTHON=1``.

``IMPLEMENTATION`` says which one runs.  ``data`` is any C-contiguous buffer
(bytes, bytearray, memoryview, array, mmap...); it is read as its raw bytes.
Anything else (str, int, None, list...) raises TypeError; a non-contiguous
memoryview raises BufferError.  ``value`` must be an int in [0, 2**32).
"""

from __future__ import annotations

import operator
import struct
from typing import Callable, Literal

from ensemble import native

_native = native  # the loader under its former name (bench/crc32c.py reads _native.FORCED_PURE)

__all__ = ["crc32c", "crc32c_raw", "fill_frames", "IMPLEMENTATION", "HARDWARE"]

POLY = 0x82F63B78  # CRC-32C, reflected
_MASK = 0xFFFFFFFF


# --------------------------------------------------------------------------
# Pure Python: slicing-by-8
# --------------------------------------------------------------------------


def _tables() -> tuple[tuple[int, ...], ...]:
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ POLY if c & 1 else c >> 1
        t0.append(c)
    tables = [t0]
    for _ in range(7):
        prev = tables[-1]
        tables.append([t0[c & 0xFF] ^ (c >> 8) for c in prev])
    return tuple(tuple(t) for t in tables)


_T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7 = _tables()
_CHUNK = 1 << 16  # bytes unpacked at a time (bounds the temporary tuple)
_UNPACK = struct.Struct(f"<{_CHUNK // 4}I").unpack_from


def _crc32c_py(mv: memoryview, value: int) -> int:
    """CRC32C of the bytes of ``mv`` (format "B", 1-D) chained after ``value``."""
    crc = value ^ _MASK
    t0, t1, t2, t3, t4, t5, t6, t7 = _T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7
    n = len(mv)
    n8 = n - n % 8
    pos = 0
    while pos < n8:
        size = min(_CHUNK, n8 - pos)
        if size == _CHUNK:
            words = _UNPACK(mv, pos)
        else:
            words = struct.unpack_from(f"<{size // 4}I", mv, pos)
        it = iter(words)
        for lo, hi in zip(it, it):
            lo ^= crc
            crc = (t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[lo >> 24]
                   ^ t3[hi & 0xFF] ^ t2[(hi >> 8) & 0xFF] ^ t1[(hi >> 16) & 0xFF] ^ t0[hi >> 24])
        pos += size
    for b in mv[n8:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ _MASK


# --------------------------------------------------------------------------
# Argument checks, shared by both implementations
# --------------------------------------------------------------------------


def _start(value: int) -> int:
    if type(value) is not int:
        value = operator.index(value)  # TypeError for float, str, None...
    if not 0 <= value <= _MASK:
        raise ValueError(f"crc32c: value must be in [0, 2**32), got {value}")
    return value


def _bytes_view(data: object) -> memoryview:
    """``data`` as a 1-D memoryview of unsigned bytes (TypeError if not a buffer)."""
    try:
        mv = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"crc32c: a bytes-like object is required, not {type(data).__name__!r}"
        ) from None
    if not mv.c_contiguous:
        raise BufferError("crc32c: the buffer must be C-contiguous")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


def crc32c_python(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C of ``data`` chained after ``value``, in pure Python (always available)."""
    return _crc32c_py(_bytes_view(data), _start(value))


# --------------------------------------------------------------------------
# The implementation chosen at import time
# --------------------------------------------------------------------------

_c = native.load("crc32c")
_fill_native: Callable[[bytearray], int] | None = None  # fill_frames in C, when the module has it

crc32c_native: Callable[..., int] | None
IMPLEMENTATION: Literal["native", "python"]
HARDWARE: bool  # the native module uses the CPU's crc32 instruction

if _c is not None:
    _update = _c.lib.crc32c_update
    _from_buffer = _c.ffi.from_buffer

    def crc32c_native(data: bytes | bytearray | memoryview, value: int = 0) -> int:
        """CRC32C of ``data`` chained after ``value``, in C (this name is None without it)."""
        if type(value) is not int or not 0 <= value <= _MASK:
            value = _start(value)
        if type(data) is bytes:  # cffi passes bytes as char* without a copy
            return _update(value, data, len(data))
        mv = _bytes_view(data)
        return _update(value, _from_buffer(mv), mv.nbytes)

    crc32c = crc32c_native
    #: ``crc32c_raw(value, data, len(data))``: CRC32C of ``bytes`` chained after ``value`` (an int in
    #: [0, 2**32)), unchecked: the journal's per-frame call (:func:`fusee.segment.encode_batch`).
    crc32c_raw: Callable[[int, bytes, int], int] = _update
    if hasattr(_c.lib, "crc32c_fill_frames"):  # a module built before it was added lacks it
        _fill = _c.lib.crc32c_fill_frames

        def _fill_c(buf: bytearray) -> int:
            """:func:`fill_frames_python` in one C call (the GIL given up once for the whole batch)."""
            n = _fill(_from_buffer(buf), len(buf))
            if n < 0:
                raise ValueError("fill_frames: a frame's length runs past the end of the buffer")
            return n

        _fill_native = _fill_c

    IMPLEMENTATION = "native"
    HARDWARE = bool(_c.lib.crc32c_hw())
else:
    crc32c_native = None
    crc32c = crc32c_python

    def crc32c_raw(value: int, data: bytes, n: int) -> int:  # type: ignore[misc]
        """:func:`crc32c_python` of ``data`` (``n`` its length) chained after ``value``."""
        return _crc32c_py(memoryview(data), _start(value))
    IMPLEMENTATION = "python"
    HARDWARE = False


_FRAME_LEN = struct.Struct("<I")
_FRAME_CRC = struct.Struct("<I")


def fill_frames_python(buf: bytearray) -> int:
    """Write the checksum of each journal frame laid out in ``buf`` (``len:u32le crc:u32le lsn:u64le
    batch:u32le body[len]``, see :mod:`fusee.segment`): ``crc32c`` of the 12 bytes of lsn and batch then
    the body, in place.  Returns the number of frames; ValueError if a frame's length runs past the end
    (nothing after the frames before it is written)."""
    mv = memoryview(buf)
    off, n, size = 0, 0, len(buf)
    while off + 20 <= size:
        (length,) = _FRAME_LEN.unpack_from(mv, off)
        end = off + 20 + length
        if end > size:
            raise ValueError("fill_frames: a frame's length runs past the end of the buffer")
        _FRAME_CRC.pack_into(mv, off + 4, crc32c(mv[off + 8 : end]))
        off = end
        n += 1
    if off != size:
        raise ValueError("fill_frames: a frame's length runs past the end of the buffer")
    return n


fill_frames: Callable[[bytearray], int] = fill_frames_python if _fill_native is None else _fill_native
