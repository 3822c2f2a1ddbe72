"""A doomed process: its exit settles at once, and a body that swallows the signal never runs ensemble again.

Issue 11: nothing acknowledged is ever lost, and a killed process never runs
again.  A kill (or an untrapped link signal, or ``exit(self(), r)``) settles
the exit at once: links and monitors fire, the name is released, ``is_alive``
is False.  A body that catches the :class:`ExitSignal` anyway is parked for
good at its next call into ensemble.
"""

from __future__ import annotations

import itertools
import threading

import gevent
import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, dispatcher

from ._actors import pinger, ponger
from .test_exit_signals import down_of

WAIT = 5.0
#: How long a test listens for a message that must never come.
QUIET = 0.2

_names = itertools.count(1)


@pytest.fixture
def pool():
    """A one-carrier dispatcher of the test's own: its processes share one hub."""
    name = dispatcher.define(f"doom-pool-{next(_names)}", 1)
    yield name
    dispatcher.shutdown(name)


def tagged(tag, pid=None):
    def matcher(m):
        if type(m) is tuple and m and m[0] == tag and (pid is None or m[1] is pid):
            return m
        return NOMATCH

    return matcher


def take(tag):
    m = e.receive(tagged(tag), timeout=WAIT)
    assert m is not TIMEOUT, f"no {tag!r} message arrived"
    return m


def swallow_around_receive(to):
    """Catch everything around receive, and report after each catch."""
    e.send(to, ("ready", e.self()))
    while True:
        try:
            e.receive()
        except BaseException:
            pass
        e.send(to, ("still here", e.self()))


def swallow_in_the_handler(to):
    """Catch everything around receive and send from inside the handler."""
    e.send(to, ("ready", e.self()))
    while True:
        try:
            e.receive()
        except BaseException:
            e.send(to, ("still here", e.self()))


def test_a_kill_swallowed_around_receive_settles_and_the_process_never_runs_again(pool):
    """DOWN arrives, is_alive is False, the name is free, nothing more is sent, and the hub keeps running."""
    me = e.self()
    p, ref = e.spawn_monitor(swallow_around_receive, me, name="swallower", dispatcher=pool)
    take("ready")
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert not e.is_alive(p)
    assert e.whereis("swallower") is None
    assert e.process_info(p) is None
    assert TIMEOUT is e.receive(tagged("still here", p), timeout=QUIET)
    # another process on the same hub (the pool has one carrier) keeps running
    peer = e.spawn(ponger, dispatcher=pool)
    e.spawn(pinger, peer, 20, me, dispatcher=pool)
    assert ("done", 20) == take("done")
    # and the name can be taken again
    q = e.spawn(e.receive, name="swallower")
    assert q is e.whereis("swallower")


def test_a_send_from_the_handler_that_swallows_the_kill_has_no_effect(pool):
    """A call into ensemble while the exit signal is being handled raises it again: nothing is sent."""
    me = e.self()
    p, ref = e.spawn_monitor(swallow_in_the_handler, me, dispatcher=pool)
    take("ready")
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert TIMEOUT is e.receive(tagged("still here", p), timeout=QUIET)
    peer = e.spawn(ponger, dispatcher=pool)
    e.spawn(pinger, peer, 5, me, dispatcher=pool)
    assert ("done", 5) == take("done")


def test_an_untrapped_link_signal_swallowed_around_receive_settles_at_once(pool):
    """A link signal the process does not trap dooms it like a kill: its own links hear at once."""
    me = e.self()

    def middle():
        e.send(me, ("ready", e.self()))
        try:
            e.receive()
        except BaseException:
            pass
        while True:  # spins today: the next receive raises again and again
            try:
                e.receive()
            except BaseException:
                pass

    p, ref = e.spawn_monitor(middle, dispatcher=pool)
    take("ready")
    crasher = e.spawn(lambda: e.receive() and e.exit("boom"))
    with_link = e.spawn(lambda: (e.link(p), e.link(crasher), e.send(me, ("linked",)), e.receive()))
    take("linked")
    e.send(crasher, "go")
    assert "boom" == down_of(ref)
    assert not e.is_alive(with_link)


def test_exit_self_swallowed_settles_at_once():
    """exit(self(), r) swallowed: the exit has already settled; the next call never returns."""
    me = e.self()

    def body():
        try:
            e.exit(e.self(), "bye")
        except BaseException:
            pass
        e.send(me, ("still here", e.self()))

    p, ref = e.spawn_monitor(body)
    assert "bye" == down_of(ref)
    assert TIMEOUT is e.receive(tagged("still here", p), timeout=QUIET)


def test_a_kill_swallowed_around_gevent_sleep_still_sends_the_down():
    """gevent.sleep is not ensemble: the body sleeps on, but its exit has settled and DOWN arrives."""
    me = e.self()
    stop = []

    def sleeper():
        e.send(me, ("ready", e.self()))
        while not stop:
            try:
                gevent.sleep(0.01)
            except BaseException:
                pass

    p, ref = e.spawn_monitor(sleeper)
    take("ready")
    try:
        e.exit(p, "kill")
        assert "killed" == down_of(ref)
        assert not e.is_alive(p)
        # its code still runs (Python cannot stop it): process_info says so
        assert True is e.process_info(p, "exit_pending")
        assert "exiting" == e.process_info(p, "status")
    finally:
        stop.append(True)


def test_a_process_stuck_in_a_native_call_on_blocking_dies_when_the_call_returns():
    """Killed in a native wait: DOWN at once, process_info shows the straggler, then it stops at its next call."""
    me = e.self()
    release = threading.Event()
    done = threading.Event()

    def stuck():
        e.send(me, ("ready", e.self()))
        try:
            release.wait(WAIT)  # a native wait: the carrier's OS thread is blocked
            e.send(me, ("still here", e.self()))
        finally:
            done.set()

    p, ref = e.spawn_monitor(stuck, dispatcher="blocking")
    take("ready")
    try:
        e.exit(p, "kill")
        assert "killed" == down_of(ref)
        assert not e.is_alive(p)
        info = e.process_info(p)
        assert info is not None
        assert "blocking" == info["dispatcher"]
        assert info["carrier"].startswith("blocking-")
        assert True is info["exit_pending"]
        assert "exiting" == info["status"]
        assert [] == info["links"]
        assert True is e.process_info(p, "exit_pending")
        assert "blocking" == e.process_info(p, "dispatcher")
    finally:
        release.set()
    assert done.wait(WAIT)
    assert TIMEOUT is e.receive(tagged("still here", p), timeout=QUIET)


def test_process_info_of_a_live_process_says_no_exit_is_pending():
    """exit_pending is False and carrier names the carrier of a process that is not doomed."""
    p = e.spawn(e.receive)
    assert False is e.process_info(p, "exit_pending")
    assert "default" == e.process_info(p, "carrier")
    assert {"exit_pending", "carrier"} <= set(e.process_info(p))
