"""fusee.crc32c: CRC32C (Castagnoli), native or pure Python, same checksums.

Known vectors (the CRC catalogue's check value and the RFC 3720 iSCSI
vectors), zlib.crc32-style chaining, the accepted inputs, and a hypothesis
law: the C implementation (hardware and portable table paths) equals the
pure-Python one.  .ci/run runs this file twice: normally and with
ENSEMBLE_PURE_PYTHON=1, where ``crc32c`` is the pure-Python one.
"""

from __future__ import annotations

import array
import importlib
import importlib.util
import os
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble import _native
from fusee import crc32c as mod
from fusee.crc32c import IMPLEMENTATION, crc32c

IMPLS = [pytest.param(mod.crc32c_python, id="python")]
if mod.crc32c_native is not None:
    IMPLS.append(pytest.param(mod.crc32c_native, id="native"))



def _built():
    """ensemble._native_crc32c if it was built, even under ENSEMBLE_PURE_PYTHON=1
    (the law below holds whichever implementation fusee.crc32c picked)."""
    if importlib.util.find_spec("ensemble._native_crc32c") is None:
        return None
    return importlib.import_module("ensemble._native_crc32c")


BUILT = _built()
needs_native = pytest.mark.skipif(
    BUILT is None, reason="ensemble._native_crc32c is not built (no C compiler at install time?)"
)

VECTORS = [
    (b"", 0x00000000),
    (b"a", 0xC1D04330),
    (b"123456789", 0xE3069283),  # the standard check value
    # RFC 3720 (iSCSI), appendix B.4
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


def test_implementation_is_the_expected_one():
    assert IMPLEMENTATION in ("native", "python")
    if _native.FORCED_PURE:
        assert IMPLEMENTATION == "python" and crc32c is mod.crc32c_python
    elif _native.load("crc32c") is not None:
        assert IMPLEMENTATION == "native" and crc32c is mod.crc32c_native
    assert (IMPLEMENTATION == "native") == (mod.crc32c_native is not None)
    assert isinstance(mod.HARDWARE, bool)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("data, expected", VECTORS, ids=lambda v: f"{v:#010x}" if isinstance(v, int) else None)
def test_known_vectors(impl, data, expected):
    assert impl(data) == expected


@pytest.mark.parametrize("data, expected", VECTORS)
def test_known_vectors_with_the_chosen_implementation(data, expected):
    assert crc32c(data) == expected


@pytest.mark.parametrize("impl", IMPLS)
def test_it_is_not_zlib_crc32(impl):
    assert impl(b"123456789") != zlib.crc32(b"123456789") == 0xCBF43926


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 65, 4096, 65536 + 13, 3 * 65536 + 8])
def test_chaining_equals_one_shot(impl, size):
    data = os.urandom(size)
    for cut in sorted({0, size // 3, size // 2, size - 1 if size else 0, size}):
        assert impl(data[cut:], impl(data[:cut])) == impl(data), cut
    # byte by byte, for the short ones
    if size <= 65:
        v = 0
        for i in range(size):
            v = impl(data[i:i + 1], v)
        assert v == impl(data)


@pytest.mark.parametrize("impl", IMPLS)
def test_buffer_kinds_give_the_same_checksum(impl):
    data = os.urandom(1000) + b"123456789"
    want = impl(data)
    assert impl(bytearray(data)) == want
    assert impl(memoryview(data)) == want
    assert impl(memoryview(bytearray(data))) == want
    # a slice, at an odd offset (unaligned for the word loops)
    assert impl(memoryview(data)[3:]) == impl(data[3:])
    assert impl(memoryview(data)[-9:]) == 0xE3069283
    # a view of another format is read as its raw bytes
    words = array.array("I", range(100))
    assert impl(memoryview(words)) == impl(words.tobytes())
    assert impl(words) == impl(words.tobytes())
    # a 2-D view, C-contiguous
    assert impl(memoryview(data[:1000]).cast("B", (10, 100))) == impl(data[:1000])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("bad", ["123456789", 123, None, 1.5, [1, 2, 3], object()])
def test_bad_input_type_raises_type_error(impl, bad):
    with pytest.raises(TypeError):
        impl(bad)


@pytest.mark.parametrize("impl", IMPLS)
def test_non_contiguous_view_is_refused(impl):
    with pytest.raises(BufferError):
        impl(memoryview(b"abcdefgh")[::2])


@pytest.mark.parametrize("impl", IMPLS)
def test_start_value_is_checked(impl):
    assert impl(b"", 0xFFFFFFFF) == 0xFFFFFFFF
    assert impl(b"x", True) == impl(b"x", 1)
    for bad in (-1, 1 << 32, 1 << 70):
        with pytest.raises(ValueError):
            impl(b"x", bad)
    for bad in (1.0, "0", None):
        with pytest.raises(TypeError):
            impl(b"x", bad)


@needs_native
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=2048), value=st.integers(0, 0xFFFFFFFF),
       offset=st.integers(0, 7))
def test_native_equals_python(data, value, offset):
    """The law of issue 6: native and fallback agree on any bytes and start."""
    want = mod.crc32c_python(data, value)
    lib, ffi = BUILT.lib, BUILT.ffi
    assert lib.crc32c_update(value, data, len(data)) == want
    # at every alignment (the C loops step to an 8-byte boundary first)
    buf = ffi.from_buffer(bytes(offset) + data)
    assert lib.crc32c_update(value, buf + offset, len(data)) == want
    # the C table path, which the SSE4.2 path hides on x86
    assert lib.crc32c_portable(value, buf + offset, len(data)) == want
    if mod.crc32c_native is not None:  # and the wrapper fusee.crc32c uses
        assert mod.crc32c_native(memoryview(bytes(offset) + data)[offset:], value) == want


# -- fill_frames: every checksum of a flush batch in one call ----------------------------------

_FRAME = struct.Struct("<IIQI")


def _layout(bodies, first_lsn=1):
    """Frames with zero checksums, as fusee.segment.encode_batch lays them out before filling."""
    return bytearray(b"".join(_FRAME.pack(len(b), 0, first_lsn + i, i) + b for i, b in enumerate(bodies)))


def _expected(bodies, first_lsn=1):
    out = b""
    for i, b in enumerate(bodies):
        lb = struct.pack("<QI", first_lsn + i, i)
        out += _FRAME.pack(len(b), mod.crc32c_python(lb + b), first_lsn + i, i) + b
    return out


FILLS = [pytest.param(mod.fill_frames_python, id="python")]
if BUILT is not None and hasattr(BUILT.lib, "crc32c_fill_frames"):
    def _native_fill(buf):
        n = BUILT.lib.crc32c_fill_frames(BUILT.ffi.from_buffer(buf), len(buf))
        if n < 0:
            raise ValueError("past the end")
        return n
    FILLS.append(pytest.param(_native_fill, id="native"))


@pytest.mark.parametrize("fill", FILLS)
@settings(max_examples=200, deadline=None)
@given(bodies=st.lists(st.binary(max_size=300), max_size=20), first=st.integers(0, 2**63))
def test_fill_frames_writes_each_frames_checksum(fill, bodies, first):
    """Native and fallback write the same checksums, each the frame's own (what encode_frame computes)."""
    buf = _layout(bodies, first)
    assert fill(buf) == len(bodies)
    assert bytes(buf) == _expected(bodies, first)


@pytest.mark.parametrize("fill", FILLS)
@given(bodies=st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=5), cut=st.integers(1, 19))
def test_fill_frames_refuses_a_frame_running_past_the_end(fill, bodies, cut):
    """A layout whose last frame is cut short (a caller's bug) raises ValueError, whatever the cut."""
    buf = _layout(bodies)
    with pytest.raises(ValueError):
        fill(buf[: len(buf) - cut])


def test_fill_frames_is_the_native_one_when_built():
    if mod.crc32c_native is not None and hasattr(BUILT.lib, "crc32c_fill_frames"):
        assert mod.fill_frames is not mod.fill_frames_python
    else:
        assert mod.fill_frames is mod.fill_frames_python
