"""Laws for ensemble.decide.framing: frames survive any cutting of the stream; big ones are refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide.framing import HANDSHAKE_LIMIT, HEADER, FrameTooLarge, frame, split

payloads = st.lists(st.binary(max_size=300), max_size=12)


@settings(max_examples=150, deadline=None)
@given(payloads, st.lists(st.integers(1, 64), min_size=1, max_size=40))
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(items, cuts):
    """Feeding the stream in arbitrary pieces yields exactly the payloads sent, in order."""
    stream = b"".join(frame(p) for p in items)
    buffer = bytearray()
    got: list[bytes] = []
    at, i = 0, 0
    while at < len(stream):
        step = cuts[i % len(cuts)]
        i += 1
        buffer += stream[at : at + step]
        at += step
        frames, consumed = split(buffer, 1000)
        got.extend(frames)
        del buffer[:consumed]
    assert items == got and not buffer


@given(st.binary(max_size=HEADER - 1))
def test_less_than_a_header_is_no_frame_yet(partial):
    assert ([], 0) == split(partial, 10)


def test_a_header_over_the_limit_is_refused_before_its_payload_arrives():
    header_only = frame(b"x" * (HANDSHAKE_LIMIT + 1))[:HEADER]
    with pytest.raises(FrameTooLarge) as info:
        split(header_only, HANDSHAKE_LIMIT)
    assert (info.value.size, info.value.limit) == (HANDSHAKE_LIMIT + 1, HANDSHAKE_LIMIT)
    assert "4,097 bytes is over the limit of 4,096" in str(info.value)


def test_frames_before_an_oversized_one_are_not_handed_out_by_that_call():
    """split raises as soon as it meets the oversized header: the caller drops the connection."""
    with pytest.raises(FrameTooLarge):
        split(frame(b"ok") + frame(b"y" * 20), 10)


def test_a_sender_learns_its_payload_is_too_large():
    with pytest.raises(FrameTooLarge):
        frame(b"z" * 11, limit=10)
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert ([b""], 4) == split(frame(b""), 0)


@settings(max_examples=250, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 300))
def test_any_bytes_either_split_or_are_refused(data, limit):
    """Arbitrary bytes never make split raise anything but FrameTooLarge, and what it answers
    re-frames to the consumed prefix."""
    try:
        frames, consumed = split(data, limit)
    except FrameTooLarge as e:
        assert e.size > limit
        return
    assert b"".join(frame(f) for f in frames) == data[:consumed]
    assert all(len(f) <= limit for f in frames)
