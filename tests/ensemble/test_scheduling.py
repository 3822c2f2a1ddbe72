"""Scheduling on a carrier: a woken process may run straight away, but never starves the hub."""

from __future__ import annotations

import gevent

import ensemble as e
from ensemble import _process


def test_ping_pong_does_not_starve_other_greenlets():
    """Two processes messaging each other without pause still let a gevent greenlet run in between."""
    rounds = 20000
    progress = {"done": 0}

    def pong():
        while True:
            m = e.receive()
            if m == "stop":
                return
            e.send(m, "pong")

    def ping(peer):
        me = e.self()
        for i in range(rounds):
            e.send(peer, me)
            e.receive()
            progress["done"] = i + 1
        e.send(peer, "stop")

    seen = []
    peer = e.spawn(pong)
    pinger = e.spawn(ping, peer)
    gevent.spawn(lambda: seen.append(progress["done"]))
    e.join(pinger, timeout=30)
    assert 1 == len(seen)
    assert seen[0] < rounds, "the greenlet only ran once the ping-pong was over"


def test_handoff_is_bounded_per_carrier():
    """The burst of direct handoffs on one carrier is bounded."""
    assert 1 <= _process.HANDOFF_BURST <= 64


def test_handoff_keeps_message_order_and_replies():
    """Request/reply between many pairs with direct handoff keeps every reply with its request."""
    me = e.self()

    def echo():
        while True:
            m = e.receive()
            if m == "stop":
                return
            src, i = m
            e.send(src, i)

    def client(server, n):
        got = []
        for i in range(n):
            e.send(server, (e.self(), i))
            got.append(e.receive(timeout=5))
        e.send(server, "stop")
        e.send(me, got == list(range(n)))

    for _ in range(8):
        e.spawn(client, e.spawn(echo), 500)
    assert [True] * 8 == [e.receive(timeout=10) for _ in range(8)]


def test_a_wake_no_park_hands_off_to_runs_in_wake_order():
    """A process woken after others, whose waker ends instead of parking, runs after them."""
    ran = []

    def waiter(tag, then=None):
        e.receive()
        ran.append(tag)
        if then is not None:
            e.send(then, "go")  # c is woken after b, and a ends: no park takes c's hint

    c = e.spawn(waiter, "c")
    b = e.spawn(waiter, "b")
    a = e.spawn(waiter, "a", c)

    def waker():
        e.send(a, "go")
        e.send(b, "go")
        e.receive()  # parks: hands the carrier straight to a

    w = e.spawn(waker)  # processes start in spawn order: a, b and c wait already
    for p in (a, b, c):
        e.join(p, timeout=10)
    e.exit(w, "kill")
    assert ran == ["a", "b", "c"]


def test_deliver_many_appends_in_order_and_wakes_once():
    """deliver_many (the distribution reader's hand-over of a run of messages) puts them after
    the mailbox's messages, in order, wakes a parked receive once, starts a hibernated process,
    and drops what goes to a process that has exited."""
    me = e.self()

    def parked():
        first = e.receive()
        e.send(me, ("got", first, e.process_info(e.self(), "messages")))

    p = e.spawn(parked)
    while not _process.in_receive(p):
        gevent.sleep(0)
    _process.deliver_many(p, [1, 2, 3])  # its first mail: the shared empty mailbox gives way
    assert ("got", 1, [2, 3]) == e.receive(timeout=5)

    def sleeper():
        e.hibernate(woken)

    def woken():
        e.send(me, ("woken", e.receive(), e.receive()))

    h = e.spawn(sleeper)
    while e.process_info(h, "status") != "hibernating":
        gevent.sleep(0)
    _process.deliver_many(h, ["a", "b"])
    assert ("woken", "a", "b") == e.receive(timeout=5)

    gone = e.spawn(lambda: None)
    e.join(gone)
    _process.deliver_many(gone, ["x"])
    assert e.process_info(gone) is None


def _readable_watcher(sock):
    return gevent.get_hub().loop.io(sock.fileno(), 1)


def test_a_waiting_reader_hands_off_to_the_process_it_woke():
    """A non-process greenlet that woke a process and waits for I/O switches straight into it:
    the process runs before a hub callback queued earlier; the wait ends once the fd is readable
    (gevent may run that callback before or after the readable fd's watcher)."""
    import socket

    ran = []
    here, there = socket.socketpair()
    try:
        me = e.self()

        def proc():
            e.send(me, "ready")
            ran.append(("proc", e.receive(timeout=5)))
            there.send(b"x")

        p = e.spawn(proc)
        assert e.receive(timeout=5) == "ready"
        assert _process.in_receive(p)
        c = _process.carrier_of_this_thread()

        def reader():
            watcher = _readable_watcher(here)
            gevent.get_hub().loop.run_callback(ran.append, "hub callback")
            e.send(p, "hello")  # from a greenlet that is not a process: p is the handoff hint
            _process.wait_handing_off(c, watcher)
            ran.append(("reader", here.recv(1)))
            assert not watcher.active

        gevent.spawn(reader).get(timeout=5)
        assert ran[0] == ("proc", "hello")  # before the hub callback queued earlier: handed off
        assert sorted(ran[1:], key=repr) == ["hub callback", ("reader", b"x")]  # either order: gevent's
    finally:
        here.close()
        there.close()


def test_a_waiting_reader_with_nobody_woken_waits_through_the_hub():
    """With no process woken, the wait is the hub's own: other callbacks run, then the I/O."""
    import socket

    ran = []
    here, there = socket.socketpair()
    try:
        c = _process.carrier_of_this_thread()

        def reader():
            watcher = _readable_watcher(here)
            gevent.get_hub().loop.run_callback(lambda: (ran.append("hub callback"), there.send(b"y")))
            _process.wait_handing_off(c, watcher)
            ran.append(("reader", here.recv(1)))

        gevent.spawn(reader).get(timeout=5)
        assert ran == ["hub callback", ("reader", b"y")]
    finally:
        here.close()
        there.close()


def test_a_reader_killed_while_it_waits_after_a_handoff_stops_its_watcher():
    """A kill thrown into the waiting reader ends the wait and leaves its watcher stopped."""
    import socket

    here, there = socket.socketpair()
    watchers = []
    try:
        me = e.self()

        def proc():
            e.send(me, "ready")
            e.receive(timeout=5)

        p = e.spawn(proc)
        ref = e.monitor(p)
        assert e.receive(lambda m: m == "ready", timeout=5)
        assert _process.in_receive(p)
        c = _process.carrier_of_this_thread()

        def reader():
            watcher = _readable_watcher(here)
            watchers.append(watcher)
            e.send(p, "wake")
            _process.wait_handing_off(c, watcher)

        g = gevent.spawn(reader)
        assert e.receive(lambda m: m[0] == "DOWN" and m[1] == ref, timeout=5)  # the handoff ran p
        assert watchers[0].active  # the reader still waits for its fd
        g.kill(timeout=5)
        assert g.dead and not watchers[0].active
    finally:
        here.close()
        there.close()
