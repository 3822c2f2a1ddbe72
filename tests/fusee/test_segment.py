"""fusee.segment: the frame codec, the header, and the pure scanner's laws."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import segment as seg
from fusee.crc32c import crc32c
from fusee.errors import Corrupt

BASE = 7
bodies = st.lists(st.binary(max_size=40), min_size=1, max_size=4)
batches_st = st.lists(bodies, min_size=1, max_size=5)


def build(batches: list[list[bytes]], base: int = BASE, pad: int = 0) -> tuple[bytes, list[int]]:
    """A segment holding ``batches`` from ``base``, then ``pad`` zero bytes; and each batch's start offset."""
    out = bytearray(seg.encode_header(seg.Header(shard=3, base_lsn=base, number=2, size=1 << 20)))
    starts = []
    lsn = base
    for b in batches:
        starts.append(len(out))
        out += seg.encode_batch(lsn, b)
        lsn += len(b)
    return bytes(out) + bytes(pad), starts


def flat(batches: list[list[bytes]], base: int = BASE) -> list[tuple[int, int, bytes]]:
    """The (lsn, batch distance, body) of every frame of ``batches``."""
    out = []
    lsn = base
    for b in batches:
        for i, body in enumerate(b):
            out.append((lsn, i, body))
            lsn += 1
    return out


def triples(scan: seg.Scan) -> list[tuple[int, int, bytes]]:
    """The (lsn, batch distance, body) of what a scan found."""
    return [(f.lsn, f.batch, f.body) for f in scan.frames]


def test_frame_layout_matches_the_spec():
    """A frame is len, crc32c(lsn ++ batch ++ body), lsn, batch (little-endian), then the body."""
    frame = seg.encode_frame(5, 2, b"abc")
    expected = struct.pack("<IIQI", 3, crc32c(struct.pack("<QI", 5, 2) + b"abc"), 5, 2) + b"abc"
    assert expected == frame


def test_batch_is_consecutive_frames_with_distances():
    """encode_batch gives the frames of consecutive LSNs with batch distances 0, 1, 2."""
    expected = seg.encode_frame(9, 0, b"a") + seg.encode_frame(10, 1, b"") + seg.encode_frame(11, 2, b"cc")
    assert expected == seg.encode_batch(9, [b"a", b"", b"cc"])


def test_header_round_trips_in_one_block():
    """The header block is 4 KiB and decodes to what was encoded."""
    h = seg.Header(shard=1, base_lsn=42, number=9, size=1 << 20, after=41)
    block = seg.encode_header(h)
    assert (4096, h) == (len(block), seg.decode_header(block))


def test_damaged_header_is_corrupt_at_offset_zero():
    """A flipped bit in the header raises Corrupt at offset 0 naming the file."""
    data = bytearray(build([[b"x"]])[0])
    data[20] ^= 1
    with pytest.raises(Corrupt) as info:
        seg.scan(bytes(data), "shard-0/1.seg")
    assert ("shard-0/1.seg", 0) == (info.value.path, info.value.offset)


def test_all_zero_segment_has_no_header_and_no_frames():
    """A segment whose creation never became durable (all zeros) scans as empty with no header."""
    assert seg.Scan(None, [], 0) == seg.scan(bytes(8192))


@settings(max_examples=100, deadline=None)
@given(batches_st, st.integers(0, 300))
def test_encode_then_scan_returns_the_frames(batches, pad):
    """Scanning encoded batches (then zero-filled space) returns every frame and ends just past them."""
    data, _ = build(batches, pad=pad)
    result = seg.scan(data)
    assert (flat(batches), len(data) - pad) == (triples(result), result.end)


@settings(max_examples=100, deadline=None)
@given(batches_st, st.data())
def test_truncating_the_last_batch_is_a_torn_tail(batches, data):
    """A cut anywhere inside the last batch (zeros after it) yields the earlier batches and the intact frames."""
    full, starts = build(batches)
    cut = data.draw(st.integers(starts[-1], len(full) - 1))
    torn = full[:cut] + bytes(data.draw(st.integers(0, 64)))
    # A frame is intact if its bytes survived (zeros may happen to restore a cut frame's zero tail).
    whole = []
    for t, end in zip(flat(batches), _frame_ends(batches)):
        if torn[:end] != full[:end]:
            break
        whole.append(t)
    assert whole == triples(seg.scan(torn))
    assert len(whole) >= len(flat(batches[:-1]))


def _frame_ends(batches: list[list[bytes]]) -> list[int]:
    """The offset just past each frame of build(batches)."""
    ends, off = [], seg.HEADER_SIZE
    for b in batches:
        for body in b:
            off += seg.FRAME_HEADER + len(body)
            ends.append(off)
    return ends


@settings(max_examples=100, deadline=None)
@given(batches_st.filter(lambda b: len(b) >= 2), st.data())
def test_bit_flip_in_an_earlier_batch_is_corrupt_at_its_frame(batches, data):
    """Flipping any bit of a frame in an earlier batch raises Corrupt at that frame's offset."""
    full, starts = build(batches)
    ends = _frame_ends(batches)
    at = data.draw(st.integers(seg.HEADER_SIZE, starts[-1] - 1))
    bit = data.draw(st.integers(0, 7))
    frame_start = max([seg.HEADER_SIZE] + [e for e in ends if e <= at])
    damaged = bytearray(full)
    damaged[at] ^= 1 << bit
    with pytest.raises(Corrupt) as info:
        seg.scan(bytes(damaged), "s.seg")
    assert ("s.seg", frame_start) == (info.value.path, info.value.offset)


@settings(max_examples=100, deadline=None)
@given(batches_st, st.data())
def test_bit_flip_in_the_last_batch_is_a_torn_tail(batches, data):
    """Flipping a bit in the last batch, with nothing after it, yields the frames before the damaged one."""
    full, starts = build(batches)
    ends = _frame_ends(batches)
    at = data.draw(st.integers(starts[-1], len(full) - 1))
    damaged = bytearray(full)
    damaged[at] ^= 1 << data.draw(st.integers(0, 7))
    whole = [t for t, end in zip(flat(batches), ends) if end <= at]
    assert whole == triples(seg.scan(bytes(damaged)))


def test_bit_flip_in_the_last_batch_with_a_valid_batch_after_is_corrupt():
    """A damaged batch that a valid later batch follows was acknowledged: Corrupt at its offset."""
    full, starts = build([[b"a"], [b"b", b"c"], [b"d"]])
    damaged = bytearray(full)
    damaged[starts[1] + seg.FRAME_HEADER] ^= 0x10  # the body of lsn 8
    with pytest.raises(Corrupt) as info:
        seg.scan(bytes(damaged))
    assert starts[1] == info.value.offset


def test_frames_of_the_same_batch_after_damage_do_not_prove_acknowledgement():
    """Valid frames of the damaged frame's own batch after it leave a torn tail, not Corrupt."""
    full, starts = build([[b"a"], [b"b", b"c", b"d"]])
    damaged = bytearray(full)
    damaged[starts[1] + seg.FRAME_HEADER] ^= 0x01
    assert [(BASE, 0, b"a")] == triples(seg.scan(bytes(damaged)))


def test_zero_filled_space_ends_the_scan():
    """Frames followed by preallocated zeros scan to the end of the last frame."""
    full, _ = build([[b"a", b"b"]])
    result = seg.scan(full + bytes(1 << 16))
    assert ([(BASE, 0, b"a"), (BASE + 1, 1, b"b")], len(full)) == (triples(result), result.end)


def test_body_ending_in_zero_bytes_survives_the_zero_fill():
    """A last frame whose body ends in zero bytes is still found before the zero-filled space."""
    full, _ = build([[b"x\0\0\0"]])
    assert [(BASE, 0, b"x\0\0\0")] == triples(seg.scan(full + bytes(100)))


def test_frame_out_of_lsn_sequence_is_corrupt():
    """A checksum-valid frame at the wrong LSN raises Corrupt at its offset."""
    head = seg.encode_header(seg.Header(0, 1, 1, 1 << 20))
    first = seg.encode_frame(1, 0, b"a")
    data = head + first + seg.encode_frame(3, 0, b"b")
    with pytest.raises(Corrupt) as info:
        seg.scan(data)
    assert seg.HEADER_SIZE + len(first) == info.value.offset


@settings(max_examples=100, deadline=None)
@given(bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=30), first=st.integers(1, 2**40))
def test_batch_equals_its_frames_one_by_one(bodies, first):
    """encode_batch (every checksum filled in one call) gives exactly the frames encode_frame gives."""
    assert seg.encode_batch(first, bodies) == b"".join(
        seg.encode_frame(first + i, i, b) for i, b in enumerate(bodies))
