"""A node's life seen from the others: disconnect, nodeup and nodedown, unreachable nodes, a
restarted node's old pids, aliases across nodes, a hostile peer after the handshake, and TLS
that checks the server only (issue 14)."""

from __future__ import annotations

import os
import socket

import gevent
import gevent.socket
import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, dist, gen_server
from ensemble.decide.framing import frame
from ensemble.dist import envelope

from ._cluster import B, CERTS, COOKIE, NODE_CERTS, Child
from ._cluster import closed as _closed
from ._cluster import spawned_on_b as _spawned
from ._cluster import tagged as _is
from ._cluster import take as _take

NODE = NODE_CERTS
ROGUE = (os.path.join(CERTS, "rogue.pem"), os.path.join(CERTS, "rogue.key"), os.path.join(CERTS, "ca.pem"))
NOBODY = "nobody@127.0.0.1"
C = "c@127.0.0.1"


def _round_trip(x):
    """A ping to B's echo and its pong: everything this node sent B before has been carried out
    there (one connection, in order)."""
    e.send(("echo", B), ("ping", e.self(), x))
    return _take(lambda m: _is("pong")(m) and m[3] == x)


def _node_events(m):
    return type(m) is tuple and len(m) == 2 and m[0] in ("nodeup", "nodedown")


# -- 1. disconnect -----------------------------------------------------------------------------


def test_disconnect_gives_noconnection_to_links_and_monitors_and_nodedown_to_watchers(node_a, child_b):
    """``dist.disconnect(B)`` answers True and closes the connection: this process (trapping
    exits) gets ``("EXIT", w, "noconnection")`` for its link to a process on B, its monitors of
    that pid and of a ``(name, B)`` fire DOWN ``"noconnection"``, and both a ``monitor_node``
    and a ``monitor_nodes`` watch get ``("nodedown", B)``.  Disconnecting again answers False.

    (B's services, pg and global, may dial this node again after the disconnect: nothing here
    depends on whether they do.)"""
    w = _spawned("d1", name="d_named")
    dist.monitor_nodes(True)
    e.monitor_node(B)
    e.trap_exit(True)
    try:
        e.link(w)
        by_pid = e.monitor(w)
        by_name = e.monitor(("d_named", B))
        _round_trip("set")  # B holds the link and both monitors
        assert dist.disconnect(B) is True
        assert [] == dist.nodes()
        assert dist.disconnect(B) is False  # not connected any more (B cannot have dialled back yet)
        assert ("EXIT", w, "noconnection") == _take(lambda m: _is("EXIT")(m) and m[1] == w)
        assert ("DOWN", by_pid, "process", w, "noconnection") == _take(lambda m: _is("DOWN")(m) and m[1] == by_pid)
        assert ("DOWN", by_name, "process", ("d_named", B), "noconnection") == _take(
            lambda m: _is("DOWN")(m) and m[1] == by_name)
        assert ("nodedown", B) == _take(lambda m: m == ("nodedown", B))  # monitor_node
        assert ("nodedown", B) == _take(lambda m: m == ("nodedown", B))  # monitor_nodes
    finally:
        e.trap_exit(False)
        dist.monitor_nodes(False)


def test_disconnect_signals_links_on_both_sides_and_the_peer_can_dial_back(node_a, child_b):
    """After ``disconnect``, a local process linked to a process on B (not trapping exits) dies
    with ``"noconnection"``; the process on B, trapping exits, gets ``("EXIT", p,
    "noconnection")`` for the same link and reports it here, over a new connection (a send
    connects): a ``monitor_nodes`` watch sees ``nodedown`` and then ``nodeup``."""
    me = e.self()
    w = _spawned("d2")
    e.send(w, ("trap",))
    _take(_is("trapping"))

    def linked():
        e.link(w)
        e.send(me, "linked")
        e.receive()

    p = e.spawn(linked)
    _take(lambda m: m == "linked")
    watch = e.monitor(p)
    _round_trip("linked")  # B holds the link
    dist.monitor_nodes(True)
    try:
        assert dist.disconnect(B) is True
        assert ("DOWN", watch, "process", p, "noconnection") == _take(lambda m: _is("DOWN")(m) and m[1] == watch)
        assert ("nodedown", B) == _take(_node_events)
        report = _take(lambda m: _is("worker_got")(m) and _is("EXIT")(m[1]))
        assert ("EXIT", p, "noconnection") == report[1]
        assert ("nodeup", B) == _take(_node_events)  # the report came over a new connection
        assert [B] == dist.nodes()
    finally:
        dist.monitor_nodes(False)


def test_disconnect_of_a_node_not_connected_answers_false(node_a):
    """``disconnect`` of a node never connected (or of this node itself) answers False and
    changes nothing."""
    assert dist.disconnect(NOBODY) is False
    assert dist.disconnect(node_a) is False
    assert [] == dist.nodes()


def test_disconnect_when_not_a_node_answers_false():
    """Without ``dist.start`` there is nothing to disconnect: False."""
    assert e.node() == "nonode@nohost"
    assert dist.disconnect(B) is False


# -- 2. monitor_nodes ---------------------------------------------------------------------------


def test_monitor_nodes_tells_nodeup_and_nothing_once_turned_off(node_a, child_b, epmd_port):
    """``monitor_nodes(True)``: ``("nodeup", B)`` when B connects.  After ``monitor_nodes(False)``
    this process hears nothing of B going down and of another node C coming up, while a process
    still watching hears both (the proof that there was something to hear)."""
    me = e.self()

    def watcher():
        dist.monitor_nodes(True)
        e.send(me, "watching")
        while True:
            e.send(me, ("seen", e.receive()))

    e.spawn(watcher)
    _take(lambda m: m == "watching")
    dist.monitor_nodes(True)
    assert dist.connect(B)
    assert ("nodeup", B) == _take(_node_events)
    assert ("seen", ("nodeup", B)) == _take(lambda m: m == ("seen", ("nodeup", B)))
    dist.monitor_nodes(False)
    assert dist.disconnect(B) is True
    c = Child(C, COOKIE, epmd_port)
    try:
        assert dist.connect(C)
        _take(lambda m: m == ("seen", ("nodedown", B)))
        _take(lambda m: m == ("seen", ("nodeup", C)))
        assert TIMEOUT == e.receive(lambda m: m if _node_events(m) else NOMATCH, timeout=0)
    finally:
        c.close()


# -- 3. an unreachable node -----------------------------------------------------------------------


def test_a_link_and_a_monitor_to_a_pid_of_a_node_that_cannot_be_reached_fire_at_once(node_a, child_b):
    """A pid of B, once B is killed and cannot be reached: linking to it gives this process
    (trapping exits) ``("EXIT", w, "noconnection")`` and monitoring it fires DOWN
    ``"noconnection"``, without waiting for anything from B."""
    w = _spawned("u1")
    e.monitor_node(B)
    child_b.kill()
    _take(lambda m: m == ("nodedown", B))
    e.trap_exit(True)
    try:
        e.link(w)
        assert ("EXIT", w, "noconnection") == _take(lambda m: _is("EXIT")(m) and m[1] == w)
        ref = e.monitor(w)
        assert ("DOWN", ref, "process", w, "noconnection") == _take(lambda m: _is("DOWN")(m) and m[1] == ref)
    finally:
        e.trap_exit(False)
    assert [] == dist.nodes()


# -- 4. creation numbers ----------------------------------------------------------------------------


def test_a_pid_of_an_earlier_run_gives_noproc_to_a_link_and_a_monitor(node_a, epmd_port):
    """B is killed and started again under the same name: the pid of its earlier run's echo
    names no process, although a process of the new run has the same number: a monitor of it
    fires DOWN ``"noproc"`` and a link to it gives this process (trapping exits)
    ``("EXIT", old, "noproc")``; the new echo, linked too, is untouched."""
    first = Child(B, COOKIE, epmd_port)
    old = _round_trip("first")[2]
    e.monitor_node(B)
    first.kill()
    _take(lambda m: m == ("nodedown", B))
    second = Child(B, COOKIE, epmd_port)
    e.trap_exit(True)
    try:
        assert second.creation != first.creation
        new = _round_trip("second")[2]
        assert new != old and new.id == old.id  # only the creation tells them apart
        ref = e.monitor(old)
        assert ("DOWN", ref, "process", old, "noproc") == _take(lambda m: _is("DOWN")(m) and m[1] == ref)
        e.link(old)
        assert ("EXIT", old, "noproc") == _take(lambda m: _is("EXIT")(m) and m[1] == old)
        e.link(new)
        _round_trip("after")  # B has carried out the link to the new echo: no exit for it
        assert TIMEOUT == e.receive(lambda m: m if _is("EXIT")(m) else NOMATCH, timeout=0)
        e.unlink(new)
    finally:
        e.trap_exit(False)
        second.close()


# -- 5. aliases across nodes ----------------------------------------------------------------------


def test_a_remote_process_sends_through_an_alias_until_unalias(node_a, child_b):
    """An alias of this process travels to B in a message and B's echo sends through it: the
    message arrives, and the alias that comes back in a message is equal to itself.  After
    ``unalias`` a message B sends through it is dropped: a message B's echo sends after it to
    this process's pid arrives alone (one sender's messages arrive in order)."""
    me = e.self()
    a = e.alias()
    e.send(("echo", B), ("fwd", a, ("via", "alias")))
    assert ("via", "alias") == _take(_is("via"))
    e.send(("echo", B), ("fwd", me, ("back", a)))
    assert a == _take(_is("back"))[1]
    assert e.unalias(a) is True
    e.send(("echo", B), ("fwd", a, ("dropped",)))
    e.send(("echo", B), ("fwd", me, ("after",)))
    _take(_is("after"))
    assert TIMEOUT == e.receive(lambda m: m if _is("dropped")(m) else NOMATCH, timeout=0)


# -- 6. a hostile peer after the handshake ----------------------------------------------------------


def _raw_peer(port: int, me: str, peer: str, cookie: str):
    """A raw socket that dialled ``port`` as node ``me`` and went through the handshake (the
    node acked): open, for whatever the test sends next."""
    from ensemble.decide import framing, handshake
    from ensemble.dist import codec

    sock = gevent.socket.create_connection(("127.0.0.1", port))
    state, first = handshake.initiate(me, 7, peer, cookie, "c" * 32)
    sock.sendall(b"".join(framing.frame(codec.encode(m)) for m in first))
    buf = bytearray()
    with gevent.Timeout(10):
        while True:
            data = sock.recv(4096)
            assert data, "the node closed the connection during the handshake"
            buf += data
            frames, used = framing.split(buf, framing.HANDSHAKE_LIMIT)
            del buf[:used]
            for f in frames:
                state, out, done = handshake.initiator_step(state, codec.decode(f))
                sock.sendall(b"".join(framing.frame(codec.encode(m)) for m in out))
                assert not isinstance(done, handshake.Failed), done
                if isinstance(done, handshake.Done):
                    return sock


#: Frames a raw peer sends after the handshake, and the reason the node reports for each.
BAD_FRAMES = {
    # an operation whose body is no msgpack (0xc1 is never used)
    "undecodable": (frame(envelope.op(b"\xc1")), "undecodable"),
    "not_an_envelope": (frame(bytes([9]) + b"no envelope starts so"), "bad_envelope"),
    # the header of a frame over the default max_frame (64 MiB): refused before its payload
    "oversized": ((64 * 2**20 + 1).to_bytes(4, "big"), "frame_too_large"),
}


@pytest.mark.parametrize("bad", sorted(BAD_FRAMES))
def test_a_bad_frame_after_the_handshake_drops_the_connection_and_is_reported(node_a, bad):
    """A raw peer that passed the handshake sends an undecodable frame, a frame that is no
    envelope, or the header of a frame over ``max_frame``: the node closes the connection,
    ``monitor_nodes`` watchers see the peer go, the report ``dist_connection_dropped`` names
    the peer and the reason, and the same peer can connect again."""
    from ensemble import logger

    data, reason = BAD_FRAMES[bad]
    peer = "mallory@127.0.0.1"
    port = dist.NODE_STATE.node.port
    reports = []
    old = logger.set_handler(reports.append)
    dist.monitor_nodes(True)
    try:
        sock = _raw_peer(port, peer, node_a, COOKIE)
        assert ("nodeup", peer) == _take(_node_events)
        sock.sendall(data)
        assert _closed(sock, 5)
        sock.close()
        assert ("nodedown", peer) == _take(_node_events)
        again = _raw_peer(port, peer, node_a, COOKIE)  # the node goes on accepting it
        assert ("nodeup", peer) == _take(_node_events)
        again.shutdown(socket.SHUT_WR)  # an orderly close: the node reads the end of the stream
        assert _closed(again, 5)
        again.close()
        assert ("nodedown", peer) == _take(_node_events)
    finally:
        dist.monitor_nodes(False)
        logger.set_handler(old)
    dropped = [r for r in reports if r["kind"] == "dist_connection_dropped"]
    assert len(dropped) == 1, reports  # the orderly close of the second connection is not reported
    assert dropped[0]["peer"] == peer and dropped[0]["node"] == node_a
    assert reason in dropped[0]["reason"]
    if reason == "frame_too_large":
        assert str(64 * 2**20 + 1) in dropped[0]["reason"]


def test_an_oversized_frame_from_a_real_node_is_reported(epmd_port):
    """A node with ``max_frame`` 8 KiB gets a 20 KB message from B: the connection is dropped
    and reported as ``("frame_too_large", size)`` with B as the peer."""
    from ensemble import logger

    name = dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, max_frame=8192)
    reports = []
    old = logger.set_handler(reports.append)
    try:
        child = Child(B, COOKIE, epmd_port)
        try:
            me = e.self()
            e.monitor_node(B)
            e.send(("echo", B), ("big", me, 20_000))
            assert ("nodedown", B) == _take(lambda m: m == ("nodedown", B))
            assert TIMEOUT == e.receive(lambda m: m if _is("big")(m) else NOMATCH, timeout=0)
        finally:
            child.close()
    finally:
        logger.set_handler(old)
        dist.stop()
    dropped = [r for r in reports if r["kind"] == "dist_connection_dropped" and "frame_too_large" in r["reason"]]
    assert len(dropped) == 1, reports
    assert dropped[0]["peer"] == B and dropped[0]["node"] == name


# -- 7. TLS that checks the server only -------------------------------------------------------------


def test_two_nodes_over_tls_without_mutual_authentication_send_and_call(epmd_port):
    """Both nodes in TLS with ``mutual=False`` (the dialler checks the server's certificate, the
    server asks none): they connect, a message goes and comes back, and a gen_server call
    across answers."""
    dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, tls=dist.TLS(*NODE, mutual=False))
    child = Child(B, COOKIE, epmd_port, tls=(*NODE, "server-only"))
    try:
        assert dist.connect(B)
        assert B == _round_trip("tls")[1]
        assert 5 == gen_server.call(("counter", B), ("add", 5), 10)
        assert 5 == gen_server.call(("counter", B), "get", 10)
        assert [B] == dist.nodes()
    finally:
        child.close()
        dist.stop()


def test_without_mutual_authentication_the_dialler_still_refuses_an_untrusted_server(epmd_port):
    """``mutual=False`` drops only the server's demand for a client certificate: a dialler
    still refuses a server whose certificate its authority did not sign."""
    dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, tls=dist.TLS(*NODE, mutual=False))
    child = Child(B, COOKIE, epmd_port, tls=(*ROGUE, "server-only"))
    try:
        assert dist.connect(B) is False
        assert [] == dist.nodes()
    finally:
        child.close()
        dist.stop()


# -- a bug found on the way: the loser of a simultaneous connect answers False -------------------


def _frames(sock, buf: bytearray, n: int) -> list:
    """The next ``n`` handshake messages on ``sock`` (decoded); frames after them in the same read
    (the node's first frames once the handshake is done: services saying hello) are dropped."""
    from ensemble.decide import framing
    from ensemble.dist import codec

    got: list = []
    with gevent.Timeout(10):
        while True:
            frames, used = framing.split(buf, framing.HANDSHAKE_LIMIT)
            del buf[:used]
            got.extend(codec.decode(f) for f in frames[: n - len(got)])
            if len(got) >= n:
                return got
            data = sock.recv(4096)
            assert data, "closed"
            buf += data


def test_connect_that_loses_a_simultaneous_connect_answers_true_once_the_other_connection_is_up(
        node_a, epmd_port):
    """Node z (a raw peer whose name sorts after a's, registered with epmd) dials this node and,
    before it has answered the challenge, this node dials z: z answers ``("status", "nok")``
    (of two simultaneous connects the higher name's goes on).  Then z finishes its own
    handshake: the nodes are connected, and ``connect(z)`` answers True, as Erlang's
    ``net_kernel:connect_node`` does when the other side's connection wins."""
    from ensemble.decide import framing, handshake
    from ensemble.dist import codec, epmd

    z = "z@127.0.0.1"
    me = e.self()
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    registration = epmd.register("z", listener.getsockname()[1], epmd_port=epmd_port)
    dialled = gevent.socket.create_connection(("127.0.0.1", dist.NODE_STATE.node.port))
    try:
        state, first = handshake.initiate(z, 7, node_a, COOKIE, "c" * 32)
        dialled.sendall(b"".join(framing.frame(codec.encode(m)) for m in first))
        buf = bytearray()
        status, challenge = _frames(dialled, buf, 2)
        state, _, _ = handshake.initiator_step(state, status)
        state, reply, _ = handshake.initiator_step(state, challenge)  # held back for now
        e.spawn(lambda: e.send(me, ("connected", dist.connect(z))))
        with gevent.Timeout(10):
            incoming, _ = listener.accept()
        try:
            (name,) = _frames(incoming, bytearray(), 1)
            assert name[:2] == ("name", node_a)
            incoming.sendall(framing.frame(codec.encode(("status", "nok"))))
        finally:
            incoming.close()
        # a connect that waits for z's connection answers only after it is up: give it a moment
        early = e.receive(lambda m: m if _is("connected")(m) else NOMATCH, timeout=0.3)
        dialled.sendall(b"".join(framing.frame(codec.encode(m)) for m in reply))
        (ack,) = _frames(dialled, buf, 1)
        assert isinstance(handshake.initiator_step(state, ack)[2], handshake.Done)
        got = early if early is not TIMEOUT else _take(_is("connected"))
        assert z in dist.nodes()  # the nodes are connected (z's connection won)
        assert ("connected", True) == got
    finally:
        dialled.close()
        registration.close()
        listener.close()


def test_connect_right_after_disconnect_answers_true(node_a, child_b):
    """Right after a disconnect the peer may still hold its end (it answers a new dial "alive") or be
    dialling back itself (it answers "nok"): connect waits for that and answers True every time, and
    nothing here is reported as a fault."""
    from ensemble import logger

    reports = []
    old = logger.set_handler(reports.append)
    try:
        for _ in range(10):
            assert dist.connect(B)
            assert dist.disconnect(B)
            assert dist.connect(B)
    finally:
        logger.set_handler(old)
    assert [B] == dist.nodes()
    assert not [r for r in reports if r.get("kind") in ("dist_connection_dropped", "dist_handshake_failed")], reports
