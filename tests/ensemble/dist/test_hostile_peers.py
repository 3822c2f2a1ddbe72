"""What a careless or hostile peer does to a node: oversized frames, garbage, silence, races."""

from __future__ import annotations

import gevent
import gevent.socket
import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, dist
from ensemble.decide.framing import frame

from ._cluster import B, COOKIE, Child
from ._cluster import closed as _closed


@pytest.fixture
def small_node_a(epmd_port):
    name = dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, max_frame=8192,
                      handshake_timeout=0.5)
    yield name
    dist.stop()


@pytest.fixture
def child_b(epmd_port, small_node_a):
    c = Child(B, COOKIE, epmd_port)
    yield c
    c.close()


def _port() -> int:
    return dist.NODE_STATE.node.port


def test_an_oversized_frame_drops_the_connection_and_the_node_goes_on(small_node_a, child_b):
    me = e.self()
    dist.monitor_nodes(True)
    assert dist.connect(B)
    e.send(("echo", B), ("big", me, 100))
    assert ("big", b"x" * 100) == e.receive(lambda m: m if type(m) is tuple and m[0] == "big" else NOMATCH,
                                            timeout=10)
    e.send(("echo", B), ("big", me, 20_000))  # over this node's 8 KiB: the connection is dropped
    assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else NOMATCH, timeout=10)
    assert TIMEOUT == e.receive(lambda m: m if type(m) is tuple and m[0] == "big" else NOMATCH, timeout=0)
    e.send(("echo", B), ("big", me, 10))  # and it connects again
    assert ("big", b"x" * 10) == e.receive(lambda m: m if type(m) is tuple and m[0] == "big" else NOMATCH,
                                           timeout=10)
    dist.monitor_nodes(False)


def test_a_sender_learns_at_once_that_its_message_is_too_large(small_node_a, child_b):
    from ensemble.decide.framing import FrameTooLarge

    with pytest.raises(FrameTooLarge):
        e.send(("echo", B), b"y" * 20_000)


def test_a_message_the_wire_cannot_carry_raises_at_the_sender_and_the_connection_is_unharmed(
        small_node_a, child_b):
    from ensemble.dist.codec import NotWireData

    me = e.self()
    assert dist.connect(B)
    with pytest.raises(NotWireData):
        e.send(("echo", B), ("fwd", me, lambda: None))
    e.send(("echo", B), ("fwd", me, "still here"))
    assert "still here" == e.receive(timeout=10)
    assert [B] == dist.nodes()


def test_garbage_and_silence_before_the_handshake_are_closed(small_node_a):
    garbage = gevent.socket.create_connection(("127.0.0.1", _port()))
    garbage.sendall(frame(b"\xc1 not msgpack at all"))
    assert _closed(garbage, 5)
    oversized = gevent.socket.create_connection(("127.0.0.1", _port()))
    oversized.sendall((5000).to_bytes(4, "big"))  # over the 4 KiB of the handshake
    assert _closed(oversized, 5)
    silent = gevent.socket.create_connection(("127.0.0.1", _port()))
    assert _closed(silent, 5)  # the handshake timeout (0.5 s) closes it
    wrong = gevent.socket.create_connection(("127.0.0.1", _port()))
    wrong.sendall(frame(b"\x93\xa4name\xa5x@y\x01"))  # a list, not the name tuple: refused
    assert _closed(wrong, 5)
    for s in (garbage, oversized, silent, wrong):
        s.close()
    assert [] == dist.nodes()


def test_two_nodes_dialling_each_other_at_once_keep_one_connection(epmd_port):
    dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port)
    try:
        child = Child(B, COOKIE, epmd_port)
        try:
            me = e.self()
            # B dials A (a message to A's shell name) while A dials B
            e.register("here", me)
            e.send(("echo", B), ("fwd", ("here", "a@127.0.0.1"), "from b"))
            assert dist.connect(B)
            assert "from b" == e.receive(lambda m: m if m == "from b" else NOMATCH, timeout=10)
            assert [B] == dist.nodes()
            e.send(("echo", B), ("ping", me, 1))
            assert e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" else NOMATCH, timeout=10)
        finally:
            child.close()
            e.unregister("here")
    finally:
        dist.stop()


def test_an_operation_that_fails_is_reported_and_the_connection_goes_on(small_node_a, child_b, monkeypatch):
    from ensemble import logger
    from ensemble.dist.node import Node

    reports = []
    old = logger.set_handler(reports.append)

    def broken(self, *args):
        raise RuntimeError("this link fails here")

    monkeypatch.setattr(Node, "_on_link", broken)
    try:
        me = e.self()
        e.send(("echo", B), ("spawn", me, "w"))
        worker = e.receive(lambda m: m[2] if type(m) is tuple and m[0] == "spawned" else NOMATCH, timeout=10)
        e.send(worker, ("link", me))  # B links to us: the link operation fails on this node
        assert e.receive(lambda m: m if type(m) is tuple and m[0] == "linked" else NOMATCH, timeout=10)
        e.send(("echo", B), ("ping", me, 1))  # the connection goes on
        assert e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" else NOMATCH, timeout=10)
        assert [B] == dist.nodes()
    finally:
        logger.set_handler(old)
    failed = [r for r in reports if r["kind"] == "dist_frame_failed"]
    assert failed and failed[0]["op"] == "link" and "this link fails here" in failed[0]["reason"]
