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
