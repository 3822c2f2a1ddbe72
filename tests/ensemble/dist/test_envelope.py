"""Laws for ensemble.dist.envelope: every envelope parses back to what made it; any bytes parse
or are refused with BadEnvelope."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.dist import envelope as env

bodies = st.binary(max_size=40)
ids = st.integers(0, 2**64 - 1)
creations = st.integers(0, 2**32 - 1)
names = st.text(min_size=1, max_size=60).filter(lambda n: 0 < len(n.encode("utf-8", "surrogatepass")) <= 255)


@given(ids, creations, bodies)
def test_a_send_parses_back(id, creation, body):
    payload = env.send(id, creation, body)
    form, to, c, at = env.parse(payload)
    assert (form, to, c, payload[at:]) == (env.SEND, id, creation, body)


@given(ids, creations, bodies)
def test_an_alias_parses_back(n, creation, body):
    payload = env.alias(n, creation, body)
    assert env.parse(payload)[:3] == (env.ALIAS, n, creation)
    assert payload[env.parse(payload)[3]:] == body


@given(names, bodies)
def test_a_message_to_a_name_parses_back_or_goes_as_an_operation(name, body):
    header = env.named_header(name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        assert header is None  # lone surrogates: the operation's tuple carries it
        return
    form, to, c, at = env.parse(env.send_named(name, body))
    assert (form, to, c, (header + body)[at:]) == (env.SEND_NAMED, name, 0, body)


@given(bodies)
def test_an_operation_parses_back(body):
    payload = env.op(body)
    assert env.parse(payload) == (env.OP, None, 0, 1) and payload[1:] == body


def test_names_that_no_header_carries():
    assert env.named_header("") is None
    assert env.named_header("x" * 256) is None
    assert env.named_header("\udcff") is None
    with pytest.raises(ValueError):
        env.send_named("", b"")


@settings(max_examples=1_000, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_parse_or_are_refused(data):
    try:
        form, to, creation, at = env.parse(data)
    except env.BadEnvelope:
        return
    assert form in (env.OP, env.SEND, env.SEND_NAMED, env.ALIAS) and 0 < at <= len(data)


@pytest.mark.parametrize("data", [b"", b"\x01" + b"\x00" * 11, b"\x02", b"\x02\x00", b"\x02\x05abc",
                                  b"\x02\x02\xff\xfe", b"\x04rest", b"\xffrest"])
def test_malformed_headers_are_refused(data):
    with pytest.raises(env.BadEnvelope):
        env.parse(data)
