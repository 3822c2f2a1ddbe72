"""Two nodes in two OS processes on 127.0.0.1: connect, send, order, cookie, nodedown, creation."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import TIMEOUT, dist

from ._cluster import B, COOKIE, WIRES, Child, child_tls, raw_handshake

def _pong(x):
    return lambda m: m if type(m) is tuple and m[0] == "pong" and m[3] == x else e.NOMATCH


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_send_to_a_name_on_another_node_and_answer_to_the_pid_that_came_back(node_a, child_b):
    me = e.self()
    e.send(("echo", B), ("ping", me, 1))
    got = e.receive(_pong(1), timeout=10)
    assert got is not TIMEOUT, "no answer from the other node"
    _, node, echo, _ = got
    assert node == B and echo.node == B and isinstance(echo, e.Pid)
    assert [B] == dist.nodes() == e.nodes()
    e.send(echo, ("ping", me, 2))  # the pid that crossed the wire routes back to its process
    assert e.receive(_pong(2), timeout=10)[2] == echo
    ref = e.make_ref()
    e.send(echo, ("ping", me, ref))  # a reference comes back equal to itself
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" and m[3] == ref else e.NOMATCH, timeout=10)
    assert got is not TIMEOUT and got[3] == ref and type(got[3]) is type(ref)


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_messages_from_one_process_to_another_arrive_in_send_order(node_a, child_b):
    me = e.self()
    assert dist.connect(B)
    for i in range(500):
        e.send(("echo", B), ("fwd", me, ("n", i)))
    got = [e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "n" else e.NOMATCH, timeout=10)
           for _ in range(500)]
    assert list(range(500)) == got


def test_a_wrong_cookie_never_connects(node_a, epmd_port):
    other = Child(B, "another-cookie", epmd_port)
    try:
        assert dist.connect(B) is False
        assert [] == dist.nodes()
        e.send(("echo", B), ("ping", e.self(), 3))  # dropped: no connection can be made
        assert TIMEOUT == e.receive(_pong(3), timeout=0.5)
    finally:
        other.close()


def test_a_dialler_with_a_wrong_cookie_is_refused_and_reported(node_a):
    """A peer that speaks the handshake with another cookie gets no ack, is closed, and the
    accepting node reports it; nothing of it reaches a process."""
    from ensemble import logger
    from ensemble.decide import handshake

    reports = []
    old = logger.set_handler(reports.append)
    try:
        got = raw_handshake(dist.NODE_STATE.node.port, "mallory@127.0.0.1", node_a, "not-the-cookie")
    finally:
        logger.set_handler(old)
    assert not any(isinstance(d, handshake.Done) for d in got)  # never acked
    assert [] == dist.nodes()
    refused = [r for r in reports if r["kind"] == "dist_handshake_failed"]
    assert refused and refused[0]["side"] == "accept" and "bad_cookie" in refused[0]["reason"]


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_killed_node_is_seen_down_by_node_monitors(node_a, child_b):
    assert dist.connect(B)
    dist.monitor_nodes(True)
    e.monitor_node(B)
    child_b.kill()
    assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else e.NOMATCH, timeout=10)
    assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else e.NOMATCH, timeout=10)
    assert [] == dist.nodes()
    dist.monitor_nodes(False)


def test_monitor_node_of_an_unreachable_node_fires_at_once(node_a):
    e.monitor_node("nobody@127.0.0.1")
    assert ("nodedown", "nobody@127.0.0.1") == e.receive(timeout=10)


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_monitor_node_is_in_place_when_it_returns(node_a, child_b):
    """A disconnect right after monitor_node gives that watch its nodedown, and the watch does not
    connect the node again afterwards (the watch used to be put in place later, by a greenlet that
    dialled the node back)."""
    assert dist.connect(B)
    e.monitor_node(B)
    assert dist.disconnect(B)
    assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else e.NOMATCH, timeout=10)
    dist.monitor_nodes(True)  # a connection made from here on would say nodeup
    try:
        e.monitor_node("nobody@127.0.0.1")  # a later dial's answer: after any stray one for B
        assert ("nodedown", "nobody@127.0.0.1") == e.receive(
            lambda m: m if m in (("nodedown", "nobody@127.0.0.1"), ("nodeup", B)) else e.NOMATCH, timeout=10)
        assert B not in dist.nodes()
    finally:
        dist.monitor_nodes(False)


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_monitor_node_false_removes_one_watch(node_a, child_b):
    """monitor_node(node, False) takes back one watch: two watches and one removal, one nodedown."""
    assert dist.connect(B)
    e.monitor_node(B)
    e.monitor_node(B)
    e.monitor_node(B, False)
    assert dist.disconnect(B)
    down = lambda m: m if m == ("nodedown", B) else e.NOMATCH  # noqa: E731
    assert ("nodedown", B) == e.receive(down, timeout=10)
    assert TIMEOUT == e.receive(down, timeout=0)  # connection_lost tells every watch at once


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_pid_of_an_earlier_run_names_no_process(node_a, epmd_port, wire):
    me = e.self()
    first = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    e.send(("echo", B), ("ping", me, 4))
    old_echo = e.receive(_pong(4), timeout=10)[2]
    e.monitor_node(B)
    first.kill()
    assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else e.NOMATCH, timeout=10)
    second = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    try:
        assert second.creation != first.creation
        e.send(old_echo, ("ping", me, 5))  # the old run's pid: dropped on arrival
        e.send(("echo", B), ("ping", me, 6))  # sent after it, on the same connection
        new_echo = e.receive(_pong(6), timeout=10)[2]
        assert new_echo != old_echo
        assert TIMEOUT == e.receive(_pong(5), timeout=0)  # it would have come before 6
    finally:
        second.close()


def test_start_refuses_a_second_node_and_bad_names(node_a):
    with pytest.raises(dist.DistError):
        dist.start("again@127.0.0.1")
    assert e.node() == "a@127.0.0.1"


def test_a_second_node_of_the_same_name_is_refused_and_leaves_nothing_open(epmd_port):
    """Node B runs in a child: starting another b here fails at epmd (NameTaken), this process
    stays nonode@nohost, and a node can still be started here afterwards."""
    from ensemble.dist import epmd

    child = Child(B, COOKIE, epmd_port)
    try:
        with pytest.raises(epmd.NameTaken):
            dist.start(B, cookie=COOKIE, epmd_port=epmd_port)
        assert e.node() == "nonode@nohost" and dist.NODE_STATE.node is None
        assert dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port) == "a@127.0.0.1"
        try:
            assert dist.connect(B)  # the b that was there first is the one reached
        finally:
            dist.stop()
    finally:
        child.close()
