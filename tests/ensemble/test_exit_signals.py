"""Exit signals exactly as Erlang: exit/1, exit/2, kill, trapping, and landing where a process is parked."""

from __future__ import annotations

import gevent
import gevent.event
import gevent.lock
import pytest

import ensemble as e
from ensemble import NOMATCH


def down_of(ref, timeout=5):
    """Wait for the DOWN of monitor ``ref`` and answer its reason."""

    def matcher(m):
        match m:
            case ("DOWN", r, "process", _, reason) if r == ref:
                return reason
            case _:
                return NOMATCH

    reason = e.receive(matcher, timeout=timeout)
    assert reason is not e.TIMEOUT, "no DOWN arrived"
    return reason


def parked_forever():
    e.receive()


def test_exit1_ends_the_process_with_its_reason():
    """exit(reason) uncaught ends the process with that reason."""
    p, ref = e.spawn_monitor(lambda: e.exit("bye"))
    assert "bye" == down_of(ref)


def test_exit1_is_catchable():
    """exit/1 raises Exit, which the process may catch and carry on."""

    def body():
        try:
            e.exit("inner")
        except e.Exit as x:
            return ("caught", x.reason)

    assert ("caught", "inner") == e.join(e.spawn(body), timeout=2)


def test_exit1_is_not_an_exception():
    """Exit derives from BaseException: `except Exception` does not swallow it."""
    assert not issubclass(e.Exit, Exception)
    assert not issubclass(e.ExitSignal, Exception)


def test_kill_cannot_be_trapped():
    """exit(pid, "kill") kills a trapping process with reason "killed"."""

    def trapper():
        e.trap_exit(True)
        e.receive()

    p, ref = e.spawn_monitor(trapper, trap_exit=True)
    e.exit(p, "kill")
    assert "killed" == down_of(ref)


def test_trapping_process_gets_exit_message():
    """A trapping process turns an exit signal into ("EXIT", from, reason)."""
    me = e.self()

    def trapper():
        m = e.receive(timeout=5)
        e.send(me, m)

    p = e.spawn(trapper, trap_exit=True)
    e.exit(p, "custom")
    assert ("EXIT", me, "custom") == e.receive(timeout=5)
    assert e.exit_reason(p, timeout=5) == "normal"


def test_normal_signal_is_ignored_by_a_non_trapping_process():
    """exit(pid, "normal") to another non-trapping process does nothing."""
    me = e.self()

    def body():
        e.receive()
        e.send(me, "still alive")

    p = e.spawn(body)
    e.exit(p, "normal")
    e.send(p, "go")
    assert "still alive" == e.receive(timeout=5)


def test_exit_self_normal_kills_yourself():
    """exit(self(), "normal") kills the calling non-trapping process with reason "normal"."""

    def body():
        e.exit(e.self(), "normal")
        return "not reached"

    p, ref = e.spawn_monitor(body)
    assert "normal" == down_of(ref)
    assert None is e.join(p, timeout=1)


def test_exit_self_normal_while_trapping_is_a_message():
    """A trapping process sending itself "normal" gets ("EXIT", self, "normal")."""

    def body():
        e.exit(e.self(), "normal")
        return e.receive(timeout=2)

    p = e.spawn(body, trap_exit=True)
    assert ("EXIT", p, "normal") == e.join(p, timeout=5)


def test_abnormal_signal_kills_a_non_trapping_process():
    """Any reason but "normal" kills a process that does not trap exits."""
    p, ref = e.spawn_monitor(parked_forever)
    e.exit(p, ("shutdown", "because"))
    assert ("shutdown", "because") == down_of(ref)


def test_kill_lands_in_gevent_sleep_and_finally_runs():
    """A signal lands at once on a process parked in gevent.sleep; its finally block runs.

    The process is dead from the kill on: a send from its finally has no effect.
    """
    me = e.self()
    finally_ran = gevent.event.Event()

    def sleeper():
        try:
            e.send(me, "sleeping")
            gevent.sleep(60)
        finally:
            finally_ran.set()
            e.send(me, "finally ran")

    p, ref = e.spawn_monitor(sleeper)
    assert "sleeping" == e.receive(timeout=5)
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert finally_ran.wait(5)
    assert e.TIMEOUT is e.receive(lambda m: m if m == "finally ran" else NOMATCH, timeout=0.2)


def test_signal_lands_in_a_gevent_lock_wait():
    """A process blocked on a gevent lock dies of an exit signal at once."""
    lock = gevent.lock.Semaphore(0)
    me = e.self()

    def waiter():
        e.send(me, "waiting")
        lock.acquire()

    p, ref = e.spawn_monitor(waiter)
    assert "waiting" == e.receive(timeout=5)
    e.exit(p, "stop")
    assert "stop" == down_of(ref)


def test_signal_lands_in_a_socket_wait():
    """A process blocked reading a socket dies of an exit signal at once."""
    from gevent import socket

    a, b = socket.socketpair()
    me = e.self()

    def reader():
        e.send(me, "reading")
        a.recv(10)

    try:
        p, ref = e.spawn_monitor(reader)
        assert "reading" == e.receive(timeout=5)
        e.exit(p, "stop")
        assert "stop" == down_of(ref)
    finally:
        a.close()
        b.close()


def test_except_in_body_does_not_stop_a_signal():
    """`except Exception` around a parked wait does not catch the exit signal."""
    me = e.self()

    def body():
        try:
            e.send(me, "ready")
            e.receive()
        except Exception:  # noqa: BLE001 - the point of the test
            e.send(me, "caught")
        return "survived"

    p, ref = e.spawn_monitor(body)
    assert "ready" == e.receive(timeout=5)
    e.exit(p, "boom")
    assert "boom" == down_of(ref)
    assert e.TIMEOUT is e.receive(lambda m: m if m == "caught" else NOMATCH, timeout=0)


def test_swallowed_signal_kills_at_next_receive():
    """A process that swallows the signal with `except BaseException` is dead already; its next receive never returns.

    Its exit settled with the signal; a send from the handler has no effect.
    """
    me = e.self()
    swallowed = gevent.event.Event()

    def body():
        try:
            e.send(me, "ready")
            gevent.sleep(60)
        except BaseException:
            swallowed.set()
        e.receive(timeout=10)
        e.send(me, "after receive")

    p, ref = e.spawn_monitor(body)
    assert "ready" == e.receive(timeout=5)
    e.exit(p, "die")
    assert "die" == down_of(ref)
    assert swallowed.wait(5)
    assert e.TIMEOUT is e.receive(timeout=0.2)
    assert not e.is_alive(p) and e.process_info(p) is None


def test_swallowed_signal_kills_when_the_function_returns():
    """A process that swallows the signal and returns still exits with the signal's reason."""
    me = e.self()

    def body():
        try:
            e.send(me, "ready")
            gevent.sleep(60)
        except BaseException:
            pass
        return "value"

    p, ref = e.spawn_monitor(body)
    assert "ready" == e.receive(timeout=5)
    e.exit(p, "die")
    assert "die" == down_of(ref)
    with pytest.raises(e.Exit) as info:
        e.join(p, timeout=1)
    assert "die" == info.value.reason


def test_signal_to_a_process_before_it_starts():
    """A process killed before it ever ran does not run its function."""
    me = e.self()
    p, ref = e.spawn_monitor(lambda: e.send(me, "ran"))
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert e.TIMEOUT is e.receive(timeout=0)


def test_pending_signal_acted_on_before_looking_at_mailbox():
    """A doomed process never takes another message."""
    me = e.self()

    def body():
        e.send(me, "ready")
        try:
            gevent.sleep(60)
        except BaseException:
            pass
        m = e.receive(timeout=0)
        e.send(me, ("took", m))

    p, ref = e.spawn_monitor(body)
    assert "ready" == e.receive(timeout=5)
    e.send(p, "mail")
    e.exit(p, "die")
    assert "die" == down_of(ref)
    assert [] == e.process_info(e.self(), "messages")


def test_exit2_on_a_dead_pid_is_ignored():
    """exit/2 to a process that has exited does nothing and answers True."""
    p = e.spawn(lambda: None)
    e.join(p, timeout=2)
    assert True is e.exit(p, "kill")


def test_exit2_needs_a_pid():
    """exit/2 with something that is not a pid raises Badarg."""
    with pytest.raises(e.Badarg):
        e.exit("name", "kill")


def test_trap_exit_answers_the_previous_flag():
    """trap_exit(flag) answers the previous flag."""

    def body():
        return [e.trap_exit(True), e.trap_exit(False), e.trap_exit(True)]

    assert [False, True, False] == e.join(e.spawn(body), timeout=2)


def test_exit_reason_of_crash_is_the_exception():
    """A crash's reason is the exception object; join re-raises it."""
    err = ValueError("bad")

    def body():
        raise err

    p, ref = e.spawn_monitor(body)
    assert err is down_of(ref)
    with pytest.raises(ValueError) as info:
        e.join(p, timeout=1)
    assert err is info.value
