"""A node's frame handling fuzzed: any payload is carried out, refused (the connection would be
dropped), or reported as a failed operation; nothing else, and the node goes on.  (The decoder
alone takes 10,000 inputs in test_codec.py; the whole node here, 750 frames and 250 streams, to stay fast.)"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ensemble as e
from ensemble.decide import handshake
from ensemble.decide import framing
from ensemble.dist import codec, envelope
from ensemble.dist.node import NODE_STATE, _BadEnvelope

from ._cluster import COOKIE, raw_handshake

OPS = ["send", "send_named", "alias", "link", "unlink", "exit", "monitor", "monitor_named",
       "demonitor", "down", "spawn", "spawned", "bogus"]

leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.text(max_size=8),
                   st.binary(max_size=8), st.floats(allow_nan=True))
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=4).map(tuple),
                      max_leaves=10)
envelopes = st.tuples(st.sampled_from(OPS)).flatmap(
    lambda op: st.lists(values, max_size=6).map(lambda rest: (op[0], *rest)))
bodies = st.one_of(values.map(codec.encode), st.binary(max_size=16))
payloads = st.one_of(
    st.binary(max_size=64),
    envelopes.map(lambda env: envelope.op(codec.encode(env))),
    values.map(lambda v: envelope.op(codec.encode(v))),
    st.builds(envelope.send, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), bodies),
    st.builds(envelope.alias, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), bodies),
    st.builds(lambda name, body: (envelope.named_header(name) or b"\x02\x01x") + body,
              st.sampled_from(["fuzz_sink", "nobody", "x"]), bodies),
    # a message to a name cut short, right after a whole one (the receiver's header cache)
    st.builds(lambda k: envelope.named_header("fuzz_sink")[:k], st.integers(0, 10)),
)


class _Quiet:
    """A connection stand-in: what a peer that is not a valid node name would be (nothing routes)."""

    peer = "fuzzer"


@settings(max_examples=750, deadline=None, suppress_health_check=list(HealthCheck))
@given(payloads)
def test_any_frame_is_handled_refused_or_reported(node_for_fuzz, payload):
    node = NODE_STATE.node
    try:
        node.on_frame(_Quiet(), payload)
    except (codec.CodecError, _BadEnvelope):
        pass  # the connection would be dropped: that is the answer to such a frame


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(payloads, max_size=8), st.integers(0, 3))
def test_a_stream_of_frames_is_handled_as_each_frame_alone(node_for_fuzz, items, cut):
    """on_bytes (the reader's loop, with its hot path) carries out frames as on_frame does:
    whole frames only, in order, and a frame it refuses ends the stream there."""
    node = NODE_STATE.node
    me = e.self()
    if e.whereis("fuzz_sink") is None:
        e.register("fuzz_sink", me)
    stream = b"".join(framing.frame(p) for p in items)
    data = stream[: len(stream) - cut] if cut < len(stream) else stream
    try:
        used = node.on_bytes(_Quiet(), data, 1 << 20)
    except (codec.CodecError, _BadEnvelope, framing.FrameTooLarge):
        return  # the connection would be dropped
    assert used <= len(data) and data[:used] == stream[:used]
    assert len(data) - used < framing.HEADER or framing.split(data[used:], 1 << 20) == ([], 0)
    while e.receive(timeout=0) is not e.TIMEOUT:
        pass


def test_the_node_still_accepts_a_node_after_the_fuzz(node_for_fuzz):
    """After every payload above, the node still goes through a handshake to the end."""
    got = raw_handshake(NODE_STATE.node.port, "after@127.0.0.1", e.node(), COOKIE)
    assert any(isinstance(d, handshake.Done) for d in got)
