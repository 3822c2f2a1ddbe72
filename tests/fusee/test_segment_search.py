"""fusee.segment: the torn-tail search on garbage is quick, and finds exactly what the offset-by-offset search finds.

Recovery looks for a valid frame of a *later* batch after a damaged frame
(docs/journal.md, "Recovery"): found, the damage is Corrupt; not found, a torn
tail.  These laws hold the quick search (``_later_batch_after``: candidates by
``bytes.find`` of the lsn's high bytes, runs of zeros skipped) to the plain one
it replaced (``reference`` below, offset by offset), and count the work it does
on a 16 MiB segment of garbage.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import segment as seg
from fusee.errors import Corrupt

U64 = (1 << 64) - 1
MIB = 1 << 20


def reference(data: memoryview, start: int, limit: int, size: int, next_lsn: int) -> int | None:
    """The search as it was: every offset, the field checks, then the checksum (the law's oracle)."""
    lsn_at = struct.Struct("<QI").unpack_from
    for off in range(start, min(limit, size - seg.FRAME_HEADER + 1)):
        lsn, batch = lsn_at(data, off + 8)
        if lsn <= next_lsn or batch > lsn or lsn - batch <= next_lsn:
            continue
        if lsn - next_lsn > (limit - start) // seg.FRAME_HEADER:
            continue
        if seg._frame_at(data, off, size) is not None:
            return off
    return None


def header(base: int = 1) -> bytes:
    return seg.encode_header(seg.Header(shard=0, base_lsn=base, number=1, size=16 * MIB))


# next_lsn values around the byte boundaries of a u64, where the lsn's high bytes take several values
boundaries = st.sampled_from([0, 1, 7, 250, 255, 256, 65_530, 65_535, 2**24 - 3, 2**32 - 2, 2**56 - 5, U64 - 40, U64 - 1])
next_lsns = boundaries | st.integers(0, 5000) | st.integers(0, U64 - 1)


@st.composite
def searches(draw):
    """A segment's bytes after its header (valid frames near ``next_lsn``, garbage, zero runs, lsn-like
    fields), and where to search from, to, and for which ``next_lsn``."""
    next_lsn = draw(next_lsns)
    body = bytearray()
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["frame", "frame", "garbage", "zeros", "field"]))
        if kind == "frame":
            lsn = min(U64, max(0, next_lsn + draw(st.integers(-3, 60))))
            batch = draw(st.integers(0, 6) | st.integers(0, 0xFFFFFFFF))
            frame = bytearray(seg.encode_frame(lsn, batch, draw(st.binary(max_size=12))))
            if draw(st.booleans()):  # damage it somewhere (or not)
                at = draw(st.integers(0, len(frame) - 1))
                frame[at] ^= 1 << draw(st.integers(0, 7))
            body += frame
        elif kind == "garbage":
            body += draw(st.binary(max_size=40))
        elif kind == "zeros":
            body += bytes(draw(st.integers(1, 300)))
        else:  # eight bytes that read as an lsn in (or just out of) range, then a batch distance
            lsn = min(U64, max(0, next_lsn + draw(st.integers(-2, 40))))
            body += struct.pack("<QI", lsn, draw(st.integers(0, 3)))
    data = header() + bytes(body) + bytes(draw(st.integers(0, 30)))
    size = len(data)
    nonzero = len(data.rstrip(b"\0"))
    limit = draw(st.sampled_from([nonzero, size]) | st.integers(seg.HEADER_SIZE, size))
    start = draw(st.integers(seg.HEADER_SIZE, max(seg.HEADER_SIZE, limit)))
    return data, start, limit, size, next_lsn


@settings(max_examples=150, deadline=None)
@given(searches())
def test_the_quick_search_finds_what_the_offset_by_offset_search_finds(case):
    """For any bytes, range and next_lsn: the same first offset of a valid later-batch frame, or None."""
    data, start, limit, size, next_lsn = case
    mv = memoryview(data)
    assert reference(mv, start, limit, size, next_lsn) == seg._later_batch_after(mv, start, limit, size, next_lsn)


@settings(max_examples=150, deadline=None)
@given(searches(), st.data())
def test_a_later_batch_frame_placed_anywhere_is_found_first(case, data):
    """A valid frame of a later batch written into the bytes at any offset: both searches agree on it."""
    raw, start, limit, size, next_lsn = case
    if next_lsn >= U64 - 8:
        next_lsn = 5
    frame = seg.encode_frame(next_lsn + data.draw(st.integers(1, 4)), 0, data.draw(st.binary(max_size=6)))
    at = data.draw(st.sampled_from([len(raw)]) | st.integers(seg.HEADER_SIZE, len(raw)))
    raw = raw[:at] + frame + raw[at:]
    size = len(raw)
    # the end of the non-zero bytes, the end of the data, or just past the frame's first byte (the edges)
    limit = data.draw(st.sampled_from([len(raw.rstrip(b"\0")), size, at + 1]))
    start = min(start, at)
    mv = memoryview(raw)
    found = seg._later_batch_after(mv, start, limit, size, next_lsn)
    assert reference(mv, start, limit, size, next_lsn) == found
    if (limit - start) // seg.FRAME_HEADER >= 4 and at < limit:  # a candidate, so something is found
        assert found is not None and found <= at


@settings(max_examples=100, deadline=None)
@given(st.integers(0, U64), st.integers(0, 2**40), st.integers(1, 16))
def test_lsn_prefixes_cover_the_range_with_the_longest_prefix(lo, width, choices):
    """Every u64 in [lo, hi] has one of the prefixes from its ``low``-th byte; there are at most ``choices``
    of them, and one byte fewer would need more."""
    hi = min(U64, lo + width)
    pairs = seg._lsn_prefixes(lo, hi, choices)
    low = pairs[0][0]
    assert all(p[0] == low for p in pairs)
    prefixes = {p[1] for p in pairs}
    samples = {lo, hi, (lo + hi) // 2} | {min(hi, lo + i) for i in range(0, 600, 7)}
    assert all(x.to_bytes(8, "little")[low:] in prefixes for x in samples)
    assert len(pairs) <= choices or low == 8
    if 0 < low < 8:
        assert (hi >> (8 * (low - 1))) - (lo >> (8 * (low - 1))) >= choices


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 70_000), st.binary(max_size=20), st.integers(0, 300))
def test_zeros_end_is_the_first_nonzero_byte(head, zeros, tail, pos):
    """_zeros_end gives the first offset at or after ``pos`` whose byte is not zero (the end if none)."""
    buf = head + bytes(zeros) + tail
    pos = min(pos, len(buf))
    expected = next((i for i in range(pos, len(buf)) if buf[i] != 0), len(buf))
    assert expected == seg._zeros_end(buf, pos)


# -- the work done on garbage ------------------------------------------------------------------


class _Counted:
    """Stands in for a struct.Struct or a function, counting the field reads or checksums it does."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        return self.inner(*args)

    def unpack_from(self, *args):
        self.calls += 1
        return self.inner.unpack_from(*args)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
def counted(monkeypatch):
    """(field reads, checksums) the scanner does from here on."""
    reads = _Counted(seg._LSN_BATCH)
    sums = _Counted(seg.crc32c)
    monkeypatch.setattr(seg, "_LSN_BATCH", reads)
    monkeypatch.setattr(seg, "crc32c", sums)
    return reads, sums


def test_a_16_mib_segment_of_garbage_scans_without_visiting_every_offset(counted):
    """A valid header, then 16 MiB of random bytes: a torn tail at the first frame, found by a handful of
    field reads and checksums (the offset-by-offset search read 16 million; ~11 s, now ~0.03 s)."""
    data = header() + random.Random(11).randbytes(16 * MIB - seg.HEADER_SIZE)
    result = seg.scan(data, "garbage.seg")
    reads, sums = counted
    assert (result.frames, result.end) == ([], seg.HEADER_SIZE)
    assert reads.calls <= 16, reads.calls
    assert sums.calls <= 8, sums.calls


def test_a_torn_batch_of_zero_pages_is_skipped_run_by_run(counted):
    """Valid frames, then a torn batch of which only some pages reached the disk (zeros between them):
    the zero runs cost a field read each, not one per offset."""
    good = seg.encode_batch(1, [b"a", b"bb"])
    rng = random.Random(5)
    torn = bytearray(8 * MIB)
    for page in (3, 700, 1500, 2047):  # the pages that were written
        torn[page * 4096 : (page + 1) * 4096] = rng.randbytes(4096)
    data = header() + good + bytes(torn) + bytes(MIB)
    result = seg.scan(data)
    reads, sums = counted
    assert [(f.lsn, f.batch) for f in result.frames] == [(1, 0), (2, 1)]
    assert reads.calls <= 64, reads.calls
    assert sums.calls <= 16, sums.calls


def test_a_later_batch_behind_megabytes_of_garbage_is_still_corrupt():
    """Damage followed, after 2 MiB of garbage and zeros, by a valid frame of a later batch: Corrupt at the
    damaged frame, naming where the later batch is."""
    first = seg.encode_batch(1, [b"a"])
    damaged = bytearray(seg.encode_batch(2, [b"b", b"c"]))
    damaged[seg.FRAME_HEADER] ^= 0x40  # the body of lsn 2
    filler = random.Random(3).randbytes(MIB) + bytes(MIB)
    later = seg.encode_batch(4, [b"d"])
    data = header() + first + bytes(damaged) + filler + later
    at = seg.HEADER_SIZE + len(first)
    with pytest.raises(Corrupt) as info:
        seg.scan(data, "s.seg")
    assert info.value.offset == at
    assert f"offset {len(data) - len(later)}" in info.value.why
