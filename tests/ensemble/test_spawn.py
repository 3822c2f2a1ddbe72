"""Spawning, joining, actors, state, hibernation, the shell, process_info and crash reports."""

from __future__ import annotations

import gevent
import pytest
import structlog

import ensemble as e
from ensemble import NOMATCH

from .test_exit_signals import down_of


def wait_forever():
    e.receive()


# -- spawn and join ---------------------------------------------------------


def test_join_returns_the_function_value():
    """join returns what the process's function returned."""
    assert 6 == e.join(e.spawn(lambda a, b: a * b, 2, 3), timeout=2)


def test_join_of_exit_normal_returns_none():
    """A process that calls exit("normal") joins as None."""
    assert None is e.join(e.spawn(lambda: e.exit("normal")), timeout=2)


def test_join_raises_exit_for_a_non_exception_reason():
    """join raises Exit(reason) for a process that ended with a reason that is not an exception."""
    p = e.spawn(lambda: e.exit(("shutdown", 1)))
    with pytest.raises(e.Exit) as info:
        e.join(p, timeout=2)
    assert ("shutdown", 1) == info.value.reason


def test_join_timeout_raises_timeout_error():
    """join with a timeout raises TimeoutError while the process still runs."""
    p = e.spawn(wait_forever)
    with pytest.raises(TimeoutError):
        e.join(p, timeout=0.01)


def test_exit_reason_answers_reason_or_timeout():
    """exit_reason answers the reason, or TIMEOUT while the process runs."""
    p = e.spawn(wait_forever)
    assert e.TIMEOUT is e.exit_reason(p, timeout=0.01)
    e.exit(p, "stop")
    assert "stop" == e.exit_reason(p, timeout=2)


def test_join_from_a_plain_greenlet():
    """join works from a greenlet that is not a process, without making it one."""
    p = e.spawn(lambda: "done")
    g = gevent.spawn(e.join, p, 2)
    assert "done" == g.get(timeout=5)


def test_join_from_inside_a_process_is_killable():
    """A process parked in join still dies at once of an exit signal."""
    target = e.spawn(wait_forever)
    joiner, ref = e.spawn_monitor(e.join, target)
    while e.process_info(joiner, "status") is None:
        pass
    gevent.sleep(0)
    e.exit(joiner, "kill")
    assert "killed" == down_of(ref)


def test_join_from_a_process_leaves_its_mail_alone():
    """A process waiting in join is not disturbed by messages arriving meanwhile: join returns
    once the target exits, and every message is still there, in order."""
    me = e.self()

    def target():
        e.receive()
        return "value"

    def joiner(t):
        got = e.join(t)
        e.send(me, ("joined", got, e.process_info(e.self(), "messages")))

    t = e.spawn(target)
    j = e.spawn(joiner, t)
    e.receive(lambda m: NOMATCH, timeout=0.01)  # j waits in join
    assert "running" == e.process_info(j, "status")  # as before: join waits for no message
    for i in range(3):
        e.send(j, ("mail", i))
        e.receive(lambda m: NOMATCH, timeout=0.001)
    e.send(t, "go")
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == "joined" else NOMATCH, timeout=5)
    assert got == ("joined", "value", [("mail", 0), ("mail", 1), ("mail", 2)])


def test_join_from_a_process_times_out_while_mail_arrives():
    """join's timeout in a process holds however many messages wake it meanwhile."""
    me = e.self()
    t = e.spawn(wait_forever)

    def joiner():
        try:
            e.join(t, timeout=0.05)
        except TimeoutError:
            e.send(me, ("timed_out", e.is_alive(t)))

    j = e.spawn(joiner)
    while e.is_alive(j):
        e.send(j, "noise")
        e.receive(lambda m: NOMATCH, timeout=0.002)
    assert ("timed_out", True) == e.receive(lambda m: m if type(m) is tuple else NOMATCH, timeout=5)
    e.exit(t, "kill")


def test_spawn_unknown_option_or_non_callable_is_badarg():
    """spawn refuses a non-callable and an unknown dispatcher, spawning nothing."""
    before = e.processes()
    with pytest.raises(e.Badarg):
        e.spawn(42)
    with pytest.raises(e.Badarg):
        e.spawn(wait_forever, dispatcher="nope", name="not-taken")
    assert before == e.processes()
    assert None is e.whereis("not-taken")


def test_trap_exit_option_at_spawn():
    """spawn(trap_exit=True) starts a trapping process."""
    p = e.spawn(wait_forever, trap_exit=True)
    assert True is e.process_info(p, "trap_exit")


def test_pids_are_distinct_and_printable():
    """Each process has its own pid, printed Erlang-style."""
    a, b = e.spawn(wait_forever), e.spawn(wait_forever)
    assert a != b
    assert repr(a).startswith("<0.") and repr(a).endswith(".0>")


# -- actors and state --------------------------------------------------------


def test_spawn_actor_folds_messages_into_state():
    """spawn_actor loops state = handler(state, msg); state(pid) reads it from outside."""
    me = e.self()

    def handler(state, msg):
        if msg == "report":
            e.send(me, state)
            return state
        return state + msg

    p = e.spawn_actor(handler, 0)
    for i in range(1, 5):
        e.send(p, i)
    e.send(p, "report")
    assert 10 == e.receive(timeout=2)
    assert 10 == e.state(p)


def test_spawn_actor_crash_keeps_last_good_state():
    """A raising handler ends the actor with the exception; the state keeps its last good value."""

    def handler(state, msg):
        if msg == "boom":
            raise RuntimeError("boom")
        return msg

    p = e.spawn_actor(handler, "initial")
    ref = e.monitor(p)
    e.send(p, "good")
    e.send(p, "boom")
    reason = down_of(ref)
    assert isinstance(reason, RuntimeError)
    assert "good" == p.state


def test_state_set_and_update_inside_a_process():
    """set_state and update_state change the process's state and answer it."""

    def body():
        a = e.set_state([1])
        b = e.update_state(lambda s, x: s + [x], 2)
        return a, b, e.state()

    assert ([1], [1, 2], [1, 2]) == e.join(e.spawn(body, state=None), timeout=2)


def test_state_of_a_process_without_a_state_cell_is_badarg():
    """state(pid) of a process that is not an actor (no spawn_actor, no state=, no set_state) raises Badarg."""
    p = e.spawn(e.receive)
    with pytest.raises(e.Badarg, match="state"):
        e.state(p)
    assert None is e.state(e.spawn(e.receive, state=None))  # an explicit state cell holding None


def test_state_of_a_gen_server_is_badarg():
    """A gen_server keeps its state in its loop: sys.get_state reads it, state(pid) raises Badarg."""
    from ensemble import gen_server

    class Srv:
        def init(self):
            return ("ok", 7)

    p = gen_server.start(Srv())
    with pytest.raises(e.Badarg):
        e.state(p)


def test_state_of_dead_process_is_badarg():
    """state(pid) of a process that has exited raises Badarg."""
    p = e.spawn(lambda: None)
    e.join(p, timeout=2)
    with pytest.raises(e.Badarg):
        e.state(p)


# -- hibernation ---------------------------------------------------------------


def test_hibernate_keeps_identity_and_wakes_on_mail():
    """A hibernating process keeps pid, name and links, and the next message runs its function."""
    me = e.self()

    def resume(tag):
        e.send(me, (tag, e.self(), e.receive(timeout=2)))

    def body():
        e.link(me)
        e.hibernate(resume, "woke")

    e.trap_exit(True)
    p = e.spawn(body, name="sleepy")
    while e.process_info(p, "status") != "hibernating":
        e.receive(lambda m: NOMATCH, timeout=0.001)
    assert p is e.whereis("sleepy")
    assert [me] == e.process_info(p, "links")
    e.send(p, "hello")
    assert ("woke", p, "hello") == e.receive(timeout=2)


def test_hibernate_with_mail_waiting_wakes_at_once():
    """A message already waiting wakes a hibernating process at once."""
    me = e.self()

    def body():
        e.send(e.self(), "already here")
        e.hibernate(lambda: e.send(me, e.receive(timeout=1)))

    e.spawn(body)
    assert "already here" == e.receive(timeout=2)


def test_hibernating_process_dies_of_a_signal():
    """An exit signal to a hibernating process ends it with that reason."""
    p, ref = e.spawn_monitor(lambda: e.hibernate(wait_forever))
    while e.process_info(p, "status") != "hibernating":
        e.receive(lambda m: NOMATCH, timeout=0.001)
    e.exit(p, "wake and die")
    assert "wake and die" == down_of(ref)


def test_hibernating_trapping_process_wakes_on_exit_signal():
    """A trapping hibernating process wakes with ("EXIT", from, reason) in its mailbox."""
    me = e.self()
    p = e.spawn(lambda: e.hibernate(lambda: e.send(me, e.receive(timeout=1))), trap_exit=True)
    while e.process_info(p, "status") != "hibernating":
        e.receive(lambda m: NOMATCH, timeout=0.001)
    e.exit(p, "poke")
    assert ("EXIT", me, "poke") == e.receive(timeout=2)


def test_hibernate_outside_a_process_is_badarg():
    """hibernate from the shell raises Badarg."""
    with pytest.raises(e.Badarg):
        e.hibernate(print)


# -- the shell ----------------------------------------------------------------------


def test_shell_gets_a_process_on_first_use():
    """A greenlet that is not a process gets one the first time it calls self()."""

    def plain():
        before = [p for p in e.processes()]
        me = e.self()
        return me in e.processes(), me not in before, me is e.self()

    assert (True, True, True) == gevent.spawn(plain).get(timeout=5)


def test_shell_process_ends_with_its_greenlet():
    """The shell process of a gevent greenlet ends when the greenlet does."""

    def plain():
        return e.self()

    g = gevent.spawn(plain)
    shell = g.get(timeout=5)
    assert "normal" == e.exit_reason(shell, timeout=2)


def test_shell_killed_by_link_raises_in_the_greenlet():
    """A shell linked to a crashing process sees ExitSignal where it is parked."""

    def plain():
        e.spawn_link(lambda: e.exit("crash"))
        try:
            e.receive(timeout=5)
        except e.ExitSignal as sig:
            return ("signal", sig.reason)

    assert ("signal", "crash") == gevent.spawn(plain).get(timeout=5)


def test_flush_prints_and_removes_messages(capsys):
    """flush() prints each pending message of the shell and removes it."""
    me = e.self()
    e.send(me, "one")
    e.send(me, ("two", 2))
    assert ["one", ("two", 2)] == e.flush()
    assert "Shell got 'one'\nShell got ('two', 2)\n" == capsys.readouterr().out
    assert [] == e.process_info(me, "messages")


# -- process_info -------------------------------------------------------------------


def test_process_info_all_keys():
    """process_info answers every documented key."""

    def body(parent):
        e.receive(lambda m: NOMATCH)

    me = e.self()
    p = e.spawn(body, me, name="informed", dispatcher="default")
    e.send(p, "a")
    gevent.sleep(0)
    info = e.process_info(p)
    assert {
        "registered_name",
        "status",
        "message_queue_len",
        "messages",
        "links",
        "monitors",
        "monitored_by",
        "trap_exit",
        "initial_call",
        "ancestors",
        "dispatcher",
        "carrier",
        "exit_pending",
        "current_function",
        "memory",
    } == set(info)
    assert "informed" == info["registered_name"]
    assert "default" == info["dispatcher"]
    assert (__name__, "test_process_info_all_keys.<locals>.body", 1) == info["initial_call"]
    assert [me] == info["ancestors"]


def test_process_info_status_waiting_and_running():
    """A process parked in receive is "waiting"; the one asking is "running"."""
    p = e.spawn(wait_forever)
    while e.process_info(p, "status") != "waiting":
        e.receive(lambda m: NOMATCH, timeout=0.001)
    assert "waiting" == e.process_info(p, "status")
    assert "running" == e.process_info(e.self(), "status")


def test_process_info_messages_and_queue_len():
    """messages and message_queue_len show what waits, oldest first."""
    p = e.spawn(lambda: e.receive(lambda m: NOMATCH))
    e.send(p, 1)
    e.send(p, 2)
    assert [1, 2] == e.process_info(p, "messages")
    assert 2 == e.process_info(p, "message_queue_len")


def test_process_info_dead_and_unknown_key():
    """A dead pid answers None; an unknown key raises Badarg."""
    p = e.spawn(lambda: None)
    e.join(p, timeout=2)
    assert None is e.process_info(p)
    assert None is e.process_info(p, "status")
    with pytest.raises(e.Badarg):
        e.process_info(e.self(), "heap_size")


def test_ancestors_record_the_spawning_chain():
    """ancestors lists the spawning process, then its ancestors."""

    def child():
        return e.process_info(e.self(), "ancestors")

    def parent():
        return e.join(e.spawn(child), timeout=2), e.self()

    me = e.self()
    ancestors, parent_pid = e.join(e.spawn_link(parent), timeout=2)
    assert [parent_pid, me] == ancestors


def test_is_alive():
    """is_alive is True while running and False after exit."""
    p = e.spawn(wait_forever)
    assert True is e.is_alive(p)
    e.exit(p, "kill")
    e.exit_reason(p, timeout=2)
    assert False is e.is_alive(p)


# -- crash reports -------------------------------------------------------------------


def test_crash_produces_a_crash_report():
    """An uncaught exception logs a crash report with the initial call and ancestors."""

    def crasher():
        raise KeyError("lost")

    with structlog.testing.capture_logs() as logs:
        p, ref = e.spawn_monitor(crasher)
        down_of(ref)
    reports = [r for r in logs if r["event"] == "crash_report"]
    assert 1 == len(reports)
    report = reports[0]
    assert "error" == report["log_level"]
    assert repr(p) == report["pid"]
    assert (__name__, "test_crash_produces_a_crash_report.<locals>.crasher", 0) == report[
        "initial_call"
    ]
    assert [repr(e.self())] == report["ancestors"]
    assert isinstance(report["reason"], KeyError)


def test_exit_and_signals_are_not_crash_reports():
    """exit(reason), exit signals and normal ends log no crash report."""
    with structlog.testing.capture_logs() as logs:
        e.exit_reason(e.spawn(lambda: e.exit("deliberate")), timeout=2)
        p = e.spawn(wait_forever)
        e.exit(p, "kill")
        e.exit_reason(p, timeout=2)
        e.join(e.spawn(lambda: 1), timeout=2)
    assert [] == [r for r in logs if r["event"] == "crash_report"]


def test_main_greenlet_waits_on_another_carrier_without_loop_exit():
    """The app's hub keeps running while the shell waits, with no timeout, on another carrier.

    No timeout on purpose: a timeout's timer would itself keep the hub's loop
    alive and hide a LoopExit (pytest-timeout bounds the test instead).
    """
    from gevent import monkey

    real_sleep = monkey.get_original("time", "sleep")
    me = e.self()

    def slow():
        real_sleep(0.05)
        e.send(me, "from blocking")
        return "joined"

    p = e.spawn(slow, dispatcher="blocking")
    assert "from blocking" == e.receive()
    assert "joined" == e.join(e.spawn(slow, dispatcher="blocking"))
    assert "from blocking" == e.receive()
    assert "joined" == e.join(p)


# -- the greenlets of ended processes, reused --------------------------------------------------


def _greenlet_of_a_process(fn=None):
    """The greenlet a new process ran in (after ``fn()`` there, if given), the process ended."""
    import greenlet

    def body():
        if fn is not None:
            fn()
        return greenlet.getcurrent()

    got = []
    e.join(e.spawn(lambda: got.append(body())))
    return got[0]


def test_a_process_greenlet_runs_the_next_process_once_its_own_has_ended():
    """Sequential spawns on one carrier reuse one greenlet (a new greenlet maps a frame stack)."""
    import greenlet

    seen = set()
    for _ in range(50):
        e.join(e.spawn(lambda: seen.add(id(greenlet.getcurrent()))))
    assert len(seen) <= 2


def test_a_reused_greenlet_starts_with_empty_context_variables():
    """A context variable set by an ended process is not seen by the next one in its greenlet."""
    import contextvars

    var = contextvars.ContextVar("ensemble_test_var", default="unset")
    seen = []
    me = e.self()

    def setter():
        var.set("left behind")
        e.send(me, "set")

    def reader():
        seen.append(var.get())

    for _ in range(5):
        e.join(e.spawn(setter))
        assert e.receive(timeout=5) == "set"
        e.join(e.spawn(reader))
    assert seen == ["unset"] * 5


def test_a_greenlet_something_still_refers_to_is_not_reused():
    """A process whose greenlet someone kept (a raw gevent wait, a stored reference, a gevent.local
    value) leaves that greenlet alone: the next process runs in another one."""
    import gevent.local

    kept = []
    g = _greenlet_of_a_process(lambda: kept.append(__import__("greenlet").getcurrent()))
    assert not any(_greenlet_of_a_process() is g for _ in range(5))

    local = gevent.local.local()
    h = _greenlet_of_a_process(lambda: setattr(local, "value", "mine"))
    values = []
    for _ in range(5):
        other = _greenlet_of_a_process(lambda: values.append(getattr(local, "value", None)))
        assert other is not h
    assert values == [None] * 5
