"""ensemble.threads (a native lock, the OS thread's id) and the carrier's scheduling in ensemble.dispatcher
(yield_, call_soon): what fusee's journal builds on instead of reaching into gevent."""

from __future__ import annotations

import itertools

import gevent
import gevent.monkey
import pytest

import ensemble
from ensemble import NOMATCH, TIMEOUT, dispatcher, threads

from .test_monkeypatched import run_script

WAIT = 5.0
_names = itertools.count(1)


@pytest.fixture
def carrier():
    """A dispatcher of one carrier no other test uses; shut down after the test."""
    name = dispatcher.define(f"test-threads-{next(_names)}", 1)
    yield name
    dispatcher.shutdown(name)


def take(tag):
    m = ensemble.receive(lambda m: m if type(m) is tuple and m[0] == tag else NOMATCH, timeout=WAIT)
    assert m is not TIMEOUT, f"no {tag!r} message"
    return m


def test_exported_with_their_contracts():
    assert "threads" in ensemble.__all__ and ensemble.threads is threads
    assert {"allocate_lock", "get_ident"} <= set(threads.__all__)
    assert {"yield_", "call_soon"} <= set(dispatcher.__all__)
    for f in (threads.allocate_lock, dispatcher.yield_, dispatcher.call_soon):
        assert (f.__doc__ or "").strip(), f


def test_allocate_lock_is_a_native_lock():
    original = gevent.monkey.get_original("_thread", "allocate_lock")
    lock = threads.allocate_lock()
    assert type(lock) is type(original())
    assert lock.acquire(False) and not lock.acquire(False)
    lock.release()
    assert threads.allocate_lock() is not lock


def test_get_ident_is_the_os_threads_and_tells_carriers_apart(carrier):
    assert threads.get_ident() == gevent.monkey.get_original("_thread", "get_ident")()
    me = ensemble.self()
    ensemble.spawn(lambda: ensemble.send(me, ("ident", threads.get_ident())), dispatcher=carrier)
    ensemble.spawn(lambda: ensemble.send(me, ("ident", threads.get_ident())), dispatcher=carrier)
    a, b = take("ident")[1], take("ident")[1]
    assert a == b != threads.get_ident()


def test_under_monkey_patching_lock_and_ident_are_still_native():
    """After patch_all, threading's lock and id are gevent's; ensemble.threads' still exclude and tell
    apart OS threads (the carriers)."""
    line = run_script("""
        import _thread
        from ensemble import dispatcher, threads
        assert _thread.allocate_lock is not monkey.get_original("_thread", "allocate_lock")  # patched
        pool = dispatcher.define("patched-pool", 1)
        lock = threads.allocate_lock()
        lock.acquire()
        def other():
            got = lock.acquire(False)  # another OS thread: a native lock excludes it
            ensemble.send(sh, ("other", got, threads.get_ident(), original_get_ident()))
        ensemble.spawn(other, dispatcher=pool)
        _, held, ident, real = take("other")
        lock.release()
        ensemble.spawn(other, dispatcher=pool)
        _, free, _, _ = take("other")
        print("RESULT", held, free, ident == real, ident != threads.get_ident(),
              threads.get_ident() == original_get_ident(),
              type(lock) is type(monkey.get_original("_thread", "allocate_lock")()))
    """)
    assert line == "RESULT False True True True True True"


def test_yield_lets_the_runnable_processes_of_the_carrier_run_first(carrier):
    me = ensemble.self()

    def caller(use_yield):
        seen = []
        for i in range(3):
            ensemble.spawn(seen.append, i, dispatcher=carrier)  # the same (only) carrier: runnable
        if use_yield:
            dispatcher.yield_()
        seen.append("caller")
        ensemble.send(me, ("seen", use_yield, seen))

    ensemble.spawn(caller, True, dispatcher=carrier)
    assert take("seen")[2] == [0, 1, 2, "caller"]
    ensemble.spawn(caller, False, dispatcher=carrier)
    assert take("seen")[2][0] == "caller"


def test_yield_with_nothing_runnable_returns(carrier):
    for _ in range(3):
        dispatcher.yield_()
    me = ensemble.self()
    ensemble.spawn(lambda: (dispatcher.yield_(), ensemble.send(me, ("back",))), dispatcher=carrier)
    take("back")


def test_call_soon_runs_after_the_runnable_processes_on_the_callers_thread(carrier):
    me = ensemble.self()

    def caller():
        order = []
        here = threads.get_ident()

        def callback(tag, n):
            order.append((tag, n, threads.get_ident() == here))
            ensemble.send(me, ("order", order))

        ensemble.spawn(order.append, "runnable", dispatcher=carrier)
        dispatcher.call_soon(callback, "callback", 1)
        order.append("caller")  # call_soon returns at once
        ensemble.receive(lambda m: NOMATCH, timeout=1.0)  # the caller waits; others run

    ensemble.spawn(caller, dispatcher=carrier)
    assert take("order")[1] == ["caller", "runnable", ("callback", 1, True)]


def test_call_soon_callbacks_run_in_call_order_and_an_error_does_not_stop_the_hub(carrier):
    me = ensemble.self()

    def boom():
        raise RuntimeError("a callback's error")

    def caller():
        dispatcher.call_soon(ensemble.send, me, ("cb", 1))
        dispatcher.call_soon(boom)
        dispatcher.call_soon(ensemble.send, me, ("cb", 2))

    ensemble.spawn(caller, dispatcher=carrier)
    assert [take("cb")[1], take("cb")[1]] == [1, 2]
    ensemble.spawn(lambda: ensemble.send(me, ("alive",)), dispatcher=carrier)  # the carrier goes on
    take("alive")


def test_yield_runs_woken_processes_and_scheduled_greenlets_first(carrier):
    """A process woken by a message and a gevent greenlet already scheduled both run before the
    yielding process resumes, in the order they were made runnable."""
    me = ensemble.self()

    def caller():
        order = []

        def waiter():
            ensemble.receive()
            order.append("woken")

        w = ensemble.spawn(waiter, dispatcher=carrier)
        ensemble.receive(lambda m: NOMATCH, timeout=0.01)  # w parks in its receive
        ensemble.send(w, "go")  # w is runnable now
        gevent.spawn(order.append, "greenlet")  # a switch already scheduled
        dispatcher.yield_()
        order.append("caller")
        ensemble.send(me, ("order", order))

    ensemble.spawn(caller, dispatcher=carrier)
    assert take("order")[1] == ["woken", "greenlet", "caller"]


@pytest.mark.parametrize("reason, trap", [("kill", False), ("shutdown", False), ("shutdown", True)])
def test_an_exit_signal_while_yielded_lands_there(carrier, reason, trap):
    """A process doomed while it waits in yield_ dies there: the code after the yield never
    runs, its finally blocks do; a trapping one gets the EXIT message and goes on."""
    log: list = []

    def victim(killer):
        ensemble.trap_exit(trap)
        try:
            ensemble.send(killer, ensemble.self())  # the killer is runnable before we yield
            dispatcher.yield_()
            log.append(("after", ensemble.receive(timeout=0)))
        finally:
            log.append("finally")  # a call into ensemble here would raise again: none

    def killer():
        ensemble.exit(ensemble.receive(), reason)  # the victim, waiting in yield_

    k = ensemble.spawn(killer, dispatcher=carrier)
    ensemble.spawn_monitor(victim, k, dispatcher=carrier)
    down = take("DOWN")
    if trap:
        assert down[4] == "normal"
        assert log == [("after", ("EXIT", k, "shutdown")), "finally"]
    else:
        assert down[4] == ("killed" if reason == "kill" else reason)
        assert log == ["finally"]


def test_an_exception_thrown_into_a_yield_cancels_its_resume(carrier):
    """An exception thrown into a process waiting in yield_ (a gevent Timeout does that) ends the
    yield; the yield's resume never switches into the process's next wait."""
    import gevent.event

    me = ensemble.self()
    later = gevent.event.AsyncResult()

    def victim():
        g = gevent.getcurrent()
        dispatcher.call_soon(g.throw, KeyError("thrown"))  # runs before the yield's resume
        try:
            dispatcher.yield_()
        except KeyError as e:
            caught = e.args[0]
        else:
            caught = None
        ensemble.send(me, ("caught", caught))
        try:
            got = later.get(timeout=WAIT)  # a raw gevent wait: a stale resume would break it
        except BaseException as e:  # noqa: BLE001 - reported to the test
            got = repr(e)
        ensemble.send(me, ("got", got))

    ensemble.spawn(victim, dispatcher=carrier)
    assert take("caught")[1] == "thrown"
    ensemble.receive(lambda m: NOMATCH, timeout=0.05)  # the victim's carrier has run its callbacks
    later.set("value")
    assert take("got")[1] == "value"


def test_yield_from_a_greenlet_that_is_not_a_process():
    """A plain gevent greenlet yields too (through gevent), and gets no shell process."""
    order = []

    def plain():
        gevent.spawn(order.append, "other")
        dispatcher.yield_()
        order.append("plain")

    gevent.spawn(plain).join(timeout=WAIT)
    assert order == ["other", "plain"]
