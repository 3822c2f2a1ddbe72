"""The epmd wire (ensemble.decide.epmd_wire): round trips, known bytes, and decoders that only
ever answer or raise EpmdProtocolError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import epmd_wire as w
from ensemble.decide.epmd_wire import (
    Alive2Req,
    Alive2Resp,
    EpmdError,
    EpmdProtocolError,
    InvalidName,
    NamesReq,
    NamesResp,
    NodeEntry,
    Port2Req,
    Port2Resp,
)

# -- strategies ------------------------------------------------------------------------------------

names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\n"), min_size=1, max_size=80
).filter(lambda s: len(s.encode("utf-8")) <= w.MAX_NAME_BYTES)
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
entries = st.builds(
    NodeEntry,
    name=names,
    port=u16,
    node_type=u8,
    protocol=u8,
    highest_version=u16,
    lowest_version=u16,
    extra=st.binary(max_size=64),
)
requests = st.one_of(st.builds(Alive2Req, entries), st.builds(Port2Req, names), st.just(NamesReq()))
alive2_responses = st.one_of(
    st.builds(Alive2Resp, u8, u32, st.just(True)), st.builds(Alive2Resp, u8, u16, st.just(False))
)
port2_responses = st.one_of(st.builds(Port2Resp, st.just(0), entries), st.builds(Port2Resp, st.integers(1, 255)))
names_responses = st.builds(NamesResp, u32, st.lists(st.tuples(names, u16), max_size=8).map(tuple))

# -- round trips -----------------------------------------------------------------------------------


@given(requests)
def test_a_request_round_trips(req) -> None:
    data = w.encode_request(req)
    n = w.request_length(data[:2])
    assert n == len(data) - 2
    assert w.decode_request(data[2:]) == req


@given(alive2_responses)
def test_an_alive2_response_round_trips(resp) -> None:
    data = w.encode_alive2_response(resp)
    assert w.alive2_response_size(data[0]) == len(data)
    assert w.decode_alive2_response(data) == resp


@given(port2_responses)
def test_a_port2_response_round_trips(resp) -> None:
    assert w.decode_port2_response(w.encode_port2_response(resp)) == resp


@given(names_responses)
def test_a_names_response_round_trips(resp) -> None:
    assert w.decode_names_response(w.encode_names_response(resp)) == resp


# -- bytes as epmd writes them (taken from the real epmd of OTP 25) --------------------------------


def test_known_bytes() -> None:
    alive = w.encode_request(Alive2Req(NodeEntry("a", 1111)))
    assert alive == b"\x00\x0e" + bytes([120]) + b"\x04\x57" + b"M\x00" + b"\x00\x06\x00\x05" + b"\x00\x01a" + b"\x00\x00"
    assert w.encode_request(Port2Req("a")) == b"\x00\x02za"
    assert w.encode_request(NamesReq()) == b"\x00\x01n"
    # what epmd answered: ALIVE2_X_RESP for version 6, ALIVE2_RESP for version 5, a taken name
    assert w.decode_alive2_response(bytes.fromhex("76006b0f6885")) == Alive2Resp(0, 0x6B0F6885, True)
    assert w.decode_alive2_response(bytes.fromhex("79000003")) == Alive2Resp(0, 3, False)
    assert w.decode_alive2_response(bytes.fromhex("760100000063")) == Alive2Resp(1, 99, True)
    assert w.decode_port2_response(bytes.fromhex("770004574d00000600050001610000")) == Port2Resp(0, NodeEntry("a", 1111))
    assert w.decode_port2_response(bytes.fromhex("7701")) == Port2Resp(1)
    got = w.decode_names_response(b"\x00\x00\x8fgname b at port 2222\nname a at port 1111\n")
    assert got == NamesResp(36711, (("b", 2222), ("a", 1111)))


def test_decoders_accept_what_epmd_accepts() -> None:
    assert w.decode_request(b"zname\0") == Port2Req("name")  # old clients NUL-terminate
    assert w.decode_request(b"nanything") == NamesReq()  # epmd looks at the tag only
    assert w.decode_names_response(b"\x00\x00\x11\x11") == NamesResp(0x1111, ())
    assert w.decode_names_response(b"\0\0\0\1name a at port b at port 7\n").names == (("a at port b", 7),)


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, why",
    [
        ("x" * 256, "256 bytes"),
        ("é" * 128, "256 bytes"),
        ("bad\udcffname", "UTF-8"),
        ("", "empty"),
        ("a\0b", "NUL"),
        ("a\nb", "newline"),
        (b"bytes", "str"),
    ],
)
def test_an_invalid_name_is_refused_at_encode(name, why) -> None:
    for make in (lambda: NodeEntry(name, 1), lambda: Port2Req(name), lambda: NamesResp(1, ((name, 1),))):
        with pytest.raises(InvalidName, match=why):
            make()
    assert issubclass(InvalidName, ValueError) and issubclass(InvalidName, EpmdError)


def test_a_name_of_255_bytes_is_fine() -> None:
    req = Port2Req("é" * 127 + "x")
    assert w.decode_request(w.encode_request(req)[2:]) == req


@pytest.mark.parametrize(
    "make",
    [
        lambda: NodeEntry("a", 65536),
        lambda: NodeEntry("a", -1),
        lambda: NodeEntry("a", 1, node_type=256),
        lambda: NodeEntry("a", 1, extra=b"x" * (w.MAX_EXTRA_BYTES + 1)),
        lambda: NodeEntry("a", 1, extra="str"),
        lambda: Alive2Resp(0, 1 << 16, extended=False),
        lambda: Alive2Resp(0, 1 << 32),
        lambda: Port2Resp(0),
        lambda: Port2Resp(1, NodeEntry("a", 1)),
    ],
)
def test_values_the_wire_cannot_carry_are_refused(make) -> None:
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize(
    "decode, data",
    [
        (w.decode_request, b""),
        (w.decode_request, b"\x01"),
        (w.decode_request, b"z"),  # no name
        (w.decode_request, b"z\xff\xfe"),  # not UTF-8
        (w.decode_request, b"za\0b"),  # a NUL inside
        (w.decode_request, w.encode_request(Alive2Req(NodeEntry("abc", 1)))[2:-1]),  # truncated
        (w.decode_request, w.encode_request(Alive2Req(NodeEntry("abc", 1)))[2:] + b"!"),  # trailing
        (w.decode_alive2_response, b""),
        (w.decode_alive2_response, b"v\x00\x00\x00\x00"),
        (w.decode_alive2_response, b"y\x00\x00"),
        (w.decode_alive2_response, b"w\x00\x00\x01"),
        (w.decode_port2_response, b"w"),
        (w.decode_port2_response, b"y\x01"),
        (w.decode_port2_response, b"w\x01\x00"),
        (w.decode_port2_response, w.encode_port2_response(Port2Resp(0, NodeEntry("a", 1)))[:-1]),
        (w.decode_names_response, b"\x00\x00"),
        (w.decode_names_response, b"\x00\x00\x00\x01name a at port 1"),  # unfinished line
        (w.decode_names_response, b"\x00\x00\x00\x01name a at port x\n"),
        (w.decode_names_response, b"\x00\x00\x00\x01nom a at port 1\n"),
        (w.decode_names_response, b"\x00\x00\x00\x01name  at port 1\n"),  # empty name
        (w.decode_names_response, b"\x00\x00\x00\x01name a at port 99999999999\n"),
        (w.decode_names_response, b"\x00\x00\x00\x01name \xff at port 1\n"),
    ],
)
def test_malformed_input_raises_the_protocol_error(decode, data) -> None:
    with pytest.raises(EpmdProtocolError):
        decode(data)


@pytest.mark.parametrize("header", [b"", b"\x00", b"\x00\x00", struct.pack(">H", w.MAX_REQUEST_LENGTH + 1), b"\x00\x01\x02"])
def test_a_bad_request_length_is_refused(header) -> None:
    with pytest.raises(EpmdProtocolError):
        w.request_length(header)


def test_an_unknown_alive2_tag_has_no_size() -> None:
    with pytest.raises(EpmdProtocolError, match="got tag 119"):
        w.alive2_response_size(119)


# -- arbitrary bytes -------------------------------------------------------------------------------

DECODERS = (
    w.decode_request,
    w.decode_alive2_response,
    w.decode_port2_response,
    w.decode_names_response,
    w.request_length,
)
TAGS = bytes([w.ALIVE2_REQ, w.PORT2_REQ, w.NAMES_REQ, w.ALIVE2_X_RESP, w.ALIVE2_RESP, w.PORT2_RESP, 0, 0])


@settings(max_examples=2_000, deadline=None)
@given(st.binary(max_size=64), st.sampled_from(TAGS))
def test_a_decoder_fed_arbitrary_bytes_answers_or_raises_the_protocol_error(data, tag) -> None:
    """Each decoder also gets the bytes behind a tag it knows (or, for NAMES, behind a port), so
    the paths past the first byte are exercised too."""
    tagged = bytes([tag]) + data
    for decode, candidate in [(d, c) for d in DECODERS for c in (data, tagged)] + [
        (w.decode_names_response, b"\x00\x00\x00\x01" + data)
    ]:
        try:
            value = decode(candidate)
        except EpmdProtocolError:
            continue
        if decode is w.decode_request:  # what decodes is a value the encoder takes back
            assert w.decode_request(w.encode_request(value)[2:]) == value
