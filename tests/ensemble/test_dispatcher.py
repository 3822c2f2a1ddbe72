"""Dispatchers: pools of carrier threads, and processes talking across carriers."""

from __future__ import annotations

import itertools
import threading

import gevent
import gevent.monkey
import pytest

import ensemble
from ensemble import NOMATCH, TIMEOUT, Badarg, dispatcher

from ._actors import pinger, ponger

WAIT = 5.0
original_sleep = gevent.monkey.get_original("time", "sleep")
original_get_ident = gevent.monkey.get_original("_thread", "get_ident")

_names = itertools.count(1)


@pytest.fixture
def pool_name():
    """A dispatcher name no other test uses; shut down (its threads end) after the test."""
    name = f"test-pool-{next(_names)}"
    yield name
    dispatcher.shutdown(name)


def down_of(ref):
    """Receive the DOWN for monitor ``ref``; answer its reason."""
    msg = ensemble.receive(
        lambda m: m if type(m) is tuple and m[:2] == ("DOWN", ref) else NOMATCH, timeout=WAIT
    )
    assert TIMEOUT is not msg, "no DOWN arrived"
    return msg[4]


def tagged(tag):
    return lambda m: m if type(m) is tuple and m and m[0] == tag else NOMATCH


def take(tag):
    """Receive the next message tagged ``tag``; fail if none comes in time."""
    msg = ensemble.receive(tagged(tag), timeout=WAIT)
    assert TIMEOUT is not msg, f"no {tag!r} message arrived"
    return msg


def report_thread(to):
    ensemble.send(to, ("thread", original_get_ident()))


def thread_of(dispatcher_name):
    """The OS thread id a new process on ``dispatcher_name`` runs on."""
    ensemble.spawn(report_thread, ensemble.self(), dispatcher=dispatcher_name)
    return take("thread")[1]


def echo():
    """Reply ("echo", msg) to (from, msg) until "stop"."""
    while True:
        m = ensemble.receive()
        if m == "stop":
            return
        frm, body = m
        ensemble.send(frm, ("echo", body))


def wait_forever():
    ensemble.receive()


# --------------------------------------------------------------------------
# define, dispatchers, shutdown
# --------------------------------------------------------------------------


def test_dispatchers_lists_default_then_blocking_and_the_others_sorted(pool_name):
    """dispatchers() is "default" first, then every other dispatcher in sorted order."""
    dispatcher.define("zz-" + pool_name, 1)
    dispatcher.define("aa-" + pool_name, 1)
    try:
        names = dispatcher.dispatchers()
        assert "default" == names[0]
        assert "blocking" in names
        assert sorted(names[1:]) == names[1:]
        assert {"aa-" + pool_name, "zz-" + pool_name} <= set(names)
        assert 1 == names.count("default")
    finally:
        dispatcher.shutdown("zz-" + pool_name)
        dispatcher.shutdown("aa-" + pool_name)


def test_define_returns_the_name(pool_name):
    """define(name, size) answers name and the dispatcher is listed."""
    assert pool_name == dispatcher.define(pool_name, 2)
    assert pool_name in dispatcher.dispatchers()


@pytest.mark.parametrize("bad", ["", 42, None, b"bytes", ("t",)])
def test_define_rejects_a_bad_name(bad):
    """A dispatcher name must be a non-empty str."""
    before = dispatcher.dispatchers()
    with pytest.raises(Badarg):
        dispatcher.define(bad, 1)
    assert before == dispatcher.dispatchers()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_define_rejects_a_bad_size(pool_name, bad):
    """A dispatcher size must be a positive int (not a bool)."""
    with pytest.raises(Badarg):
        dispatcher.define(pool_name, bad)
    assert pool_name not in dispatcher.dispatchers()


def test_define_default_is_badarg():
    """"default" cannot be (re)defined."""
    with pytest.raises(Badarg):
        dispatcher.define("default", 4)


def test_redefinition_allowed_until_first_spawn(pool_name):
    """A dispatcher may be redefined (the new size counts) until a process is spawned on it."""
    dispatcher.define(pool_name, 1)
    assert pool_name == dispatcher.define(pool_name, 3)
    threads = [thread_of(pool_name) for _ in range(3)]
    assert 3 == len(set(threads))
    with pytest.raises(Badarg):
        dispatcher.define(pool_name, 2)
    assert 3 == len({thread_of(pool_name) for _ in range(6)})


def test_redefining_started_blocking_is_badarg():
    """Once a process has been spawned on "blocking", define("blocking", n) raises Badarg."""
    thread_of("blocking")
    with pytest.raises(Badarg):
        dispatcher.define("blocking", 2)


def test_spawn_on_an_unknown_dispatcher_is_badarg_and_spawns_nothing():
    """spawn on an unknown dispatcher raises Badarg; no process appears and the name stays free."""
    before = ensemble.processes()
    with pytest.raises(Badarg):
        ensemble.spawn(wait_forever, name="disp_test_name", dispatcher="no-such-dispatcher")
    with pytest.raises(Badarg):
        ensemble.spawn_monitor(wait_forever, dispatcher="no-such-dispatcher")
    with pytest.raises(Badarg):
        ensemble.spawn(wait_forever, dispatcher=42)
    assert before == ensemble.processes()
    assert None is ensemble.whereis("disp_test_name")
    p = ensemble.spawn(wait_forever, name="disp_test_name")
    assert p == ensemble.whereis("disp_test_name")


def test_a_failed_spawn_does_not_start_the_pool(pool_name):
    """A spawn refused for a taken name leaves the dispatcher unstarted (still redefinable)."""
    ensemble.spawn(wait_forever, name="disp_taken_name")
    dispatcher.define(pool_name, 1)
    with pytest.raises(Badarg):
        ensemble.spawn(wait_forever, name="disp_taken_name", dispatcher=pool_name)
    assert pool_name == dispatcher.define(pool_name, 2)


def test_shutdown_default_is_badarg_and_unknown_is_ignored():
    """shutdown("default") raises Badarg; shutdown of an unknown name does nothing."""
    with pytest.raises(Badarg):
        dispatcher.shutdown("default")
    before = dispatcher.dispatchers()
    assert None is dispatcher.shutdown("never-defined-dispatcher")
    assert before == dispatcher.dispatchers()
    assert "default" in dispatcher.dispatchers()


def test_shutdown_refuses_spawns_but_running_processes_carry_on(pool_name):
    """After shutdown a spawn there is Badarg; a process already there still receives and replies."""
    dispatcher.define(pool_name, 1)
    p = ensemble.spawn(echo, dispatcher=pool_name)
    dispatcher.shutdown(pool_name)
    assert pool_name not in dispatcher.dispatchers()
    with pytest.raises(Badarg):
        ensemble.spawn(wait_forever, dispatcher=pool_name)
    ensemble.send(p, (ensemble.self(), "after shutdown"))
    assert ("echo", "after shutdown") == take("echo")
    assert pool_name == ensemble.process_info(p, "dispatcher")


def test_a_shut_down_carrier_thread_ends_once_its_processes_have(pool_name):
    """Once the last process of a shut-down dispatcher exits, its carrier thread ends."""
    dispatcher.define(pool_name, 1)
    p, mref = ensemble.spawn_monitor(wait_forever, dispatcher=pool_name)
    carrier = p.carrier
    dispatcher.shutdown(pool_name)
    assert False is carrier.wait_stopped(0.05)
    ensemble.exit(p, "kill")
    assert "killed" == down_of(mref)
    assert True is carrier.wait_stopped(WAIT)


def test_carriers_lists_a_pools_threads_once_it_has_started(pool_name):
    dispatcher.define(pool_name, 2)
    assert dispatcher.carriers(pool_name) == []
    pid = ensemble.spawn(ensemble.receive, dispatcher=pool_name)
    assert dispatcher.carriers(pool_name) == [f"{pool_name}-0", f"{pool_name}-1"]
    assert ensemble.process_info(pid, "carrier") in dispatcher.carriers(pool_name)
    assert dispatcher.carriers("default") == ["default"]
    assert dispatcher.carriers("no such dispatcher") == []
    ensemble.exit(pid, "kill")


def test_process_info_dispatcher():
    """process_info(pid, "dispatcher") names the dispatcher the process was spawned on."""
    d = ensemble.spawn(wait_forever)
    b = ensemble.spawn(wait_forever, dispatcher="blocking")
    assert "default" == ensemble.process_info(d, "dispatcher")
    assert "blocking" == ensemble.process_info(b, "dispatcher")
    assert "default" == ensemble.process_info(ensemble.self(), "dispatcher")


# --------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------


def test_a_blocking_process_runs_on_another_os_thread():
    """A process on "blocking" runs on an OS thread other than the main thread; "default" on main."""
    main = threading.get_ident()
    assert main == original_get_ident()
    assert main == thread_of("default")
    assert main != thread_of("blocking")


def test_a_custom_pool_of_two_hands_out_its_threads_round_robin(pool_name):
    """Processes spawned on a size-2 dispatcher land on 2 distinct threads, in turn."""
    dispatcher.define(pool_name, 2)
    threads = [thread_of(pool_name) for _ in range(4)]
    assert 2 == len(set(threads))
    assert [threads[0], threads[1], threads[0], threads[1]] == threads
    assert threading.get_ident() not in threads


# --------------------------------------------------------------------------
# Across carriers
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ping_on, pong_on", [("default", "blocking"), ("blocking", "default")]
)
def test_ping_pong_across_carriers(ping_on, pong_on):
    """1000 round trips between a "default" and a "blocking" process all complete."""
    peer = ensemble.spawn(ponger, dispatcher=pong_on)
    ensemble.spawn(pinger, peer, 1000, ensemble.self(), dispatcher=ping_on)
    assert ("done", 1000) == take("done")


def linked_pair(a_on, b_on):
    """Spawn a on ``a_on`` and b on ``b_on`` linked to a; monitor both from the shell."""
    sh = ensemble.self()

    def b_body():
        ensemble.send(sh, ("linked",))
        ensemble.receive()

    def a_body():
        ensemble.spawn_link(b_body, dispatcher=b_on)
        ensemble.receive()

    a, amon = ensemble.spawn_monitor(a_body, dispatcher=a_on)
    take("linked")
    (b,) = [p for p in ensemble.process_info(a, "links")]
    bmon = ensemble.monitor(b)
    return a, amon, b, bmon


@pytest.mark.parametrize("a_on, b_on", [("blocking", "default"), ("default", "blocking")])
def test_links_across_carriers(a_on, b_on):
    """Killing one of two processes linked across carriers kills the other with "killed"."""
    a, amon, b, bmon = linked_pair(a_on, b_on)
    assert b_on == ensemble.process_info(b, "dispatcher")
    ensemble.exit(a, "kill")
    assert "killed" == down_of(amon)
    assert "killed" == down_of(bmon)


def test_link_signal_from_another_carrier_carries_the_reason():
    """A process exiting with a reason on "blocking" kills its linked "default" process with that reason."""
    a, amon, b, bmon = linked_pair("default", "blocking")
    ensemble.exit(b, "boom")
    assert "boom" == down_of(bmon)
    assert "boom" == down_of(amon)


def test_monitors_across_carriers():
    """A shell on default monitors a blocking process, and a blocking process monitors a default one."""
    sh = ensemble.self()
    target = ensemble.spawn(wait_forever)

    def watcher():
        ref = ensemble.monitor(target)
        ensemble.send(sh, ("watching",))
        ensemble.send(sh, ("seen", ensemble.receive(timeout=WAIT), ref))

    w = ensemble.spawn(watcher, dispatcher="blocking")
    wmon = ensemble.monitor(w)
    take("watching")
    ensemble.exit(target, "bye")
    _, down, ref = take("seen")
    assert ("DOWN", ref, "process", target, "bye") == down
    assert "normal" == down_of(wmon)


def test_kill_lands_at_once_on_a_process_parked_in_gevent_sleep_on_another_carrier():
    """exit(pid, "kill") ends a blocking-carrier process parked in gevent.sleep(60) at once; its finally runs.

    The process is dead from the kill on: a send from its finally has no effect.
    """
    sh = ensemble.self()
    finally_ran = threading.Event()

    def sleeper():
        try:
            ensemble.send(sh, ("sleeping",))
            gevent.sleep(60)
            ensemble.send(sh, ("woke",))
        finally:
            finally_ran.set()
            ensemble.send(sh, ("finally",))

    p, mref = ensemble.spawn_monitor(sleeper, dispatcher="blocking")
    take("sleeping")
    ensemble.exit(p, "kill")
    assert "killed" == down_of(mref)
    assert finally_ran.wait(WAIT)
    assert TIMEOUT is ensemble.receive(tagged("finally"), timeout=0.2)
    assert TIMEOUT is ensemble.receive(tagged("woke"), timeout=0)


def test_a_trapping_process_on_another_carrier_gets_exit_messages():
    """A trapping process on "blocking" gets ("EXIT", from, reason) for exit(pid, reason)."""
    sh = ensemble.self()

    def trapper():
        ensemble.send(sh, ("ready",))
        ensemble.send(sh, ("got", ensemble.receive(timeout=WAIT)))

    p = ensemble.spawn(trapper, trap_exit=True, dispatcher="blocking")
    take("ready")
    assert True is ensemble.exit(p, "please")
    assert ("got", ("EXIT", sh, "please")) == take("got")


def test_blocking_sleep_on_blocking_never_delays_default():
    """While a "blocking" process is in the original time.sleep(1.0), 1000 "default" round trips finish first."""
    sh = ensemble.self()

    def sleeper():
        ensemble.send(sh, ("sleeping",))
        original_sleep(1.0)
        ensemble.send(sh, ("slept",))

    ensemble.spawn(sleeper, dispatcher="blocking")
    take("sleeping")
    peer = ensemble.spawn(ponger)
    ensemble.spawn(pinger, peer, 1000, sh)
    first = ensemble.receive(timeout=WAIT)
    second = ensemble.receive(timeout=WAIT)
    assert [("done", 1000), ("slept",)] == [first, second]
