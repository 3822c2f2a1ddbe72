"""ensemble.timer end to end: the timer server fires, cancels and reads real timers."""

from __future__ import annotations

import math
from time import monotonic

import pytest

import ensemble
from ensemble import TIMEOUT, Badarg, Ref, timer

WAIT = 5.0  # the most any test waits for something that must happen


def down_of(ref):
    """Receive the DOWN for monitor ``ref``; answer its reason."""
    msg = ensemble.receive(
        lambda m: m if type(m) is tuple and m[:2] == ("DOWN", ref) else ensemble.NOMATCH,
        timeout=WAIT,
    )
    assert TIMEOUT is not msg, "no DOWN arrived"
    return msg[4]


def tagged(tag):
    """A matcher taking messages that are tuples starting with ``tag``."""
    return lambda m: m if type(m) is tuple and m and m[0] == tag else ensemble.NOMATCH


def wait_forever():
    ensemble.receive()


def forwarder(to, tag):
    """A process body: forward every message to ``to`` as ``(tag, msg)``."""
    while True:
        to_send = ensemble.receive()
        ensemble.send(to, (tag, to_send))


# --------------------------------------------------------------------------
# send_after
# --------------------------------------------------------------------------


def test_send_after_to_a_pid_arrives_not_before_its_time():
    """send_after(0.2, pid, msg) delivers msg to pid, no earlier than 0.2 s after the call."""
    sh = ensemble.self()
    start = monotonic()
    ref = timer.send_after(0.2, sh, "hello")
    assert isinstance(ref, Ref)
    assert TIMEOUT is ensemble.receive(timeout=0.05)
    assert "hello" == ensemble.receive(timeout=WAIT)
    assert monotonic() - start >= 0.2


def test_send_after_to_another_process():
    """A timer to another process's pid lands in that process's mailbox."""
    sh = ensemble.self()
    p = ensemble.spawn(forwarder, sh, "fwd")
    timer.send_after(0.02, p, "ping")
    assert ("fwd", "ping") == ensemble.receive(timeout=WAIT)


def test_send_after_two_args_sends_to_the_caller():
    """send_after(time, msg) sends msg to the calling process."""
    timer.send_after(0.02, "to me")
    assert "to me" == ensemble.receive(timeout=WAIT)


def test_send_after_zero_fires_at_once():
    """send_after(0, ...) fires on the server's next look at the table."""
    timer.send_after(0, ensemble.self(), "now")
    assert "now" == ensemble.receive(timeout=WAIT)


def test_send_after_to_a_name_looks_it_up_when_it_fires():
    """A timer to a name goes to whoever holds the name when it fires, not when it was armed."""
    sh = ensemble.self()
    a = ensemble.spawn(forwarder, sh, "A", name="timer_test_target")
    b = ensemble.spawn(forwarder, sh, "B")
    timer.send_after(0.1, "timer_test_target", "for the holder")
    ensemble.unregister("timer_test_target")
    ensemble.register("timer_test_target", b)
    assert ("B", "for the holder") == ensemble.receive(timeout=WAIT)
    assert TIMEOUT is ensemble.receive(timeout=0.05)
    assert ensemble.is_alive(a)


def test_send_after_to_a_name_registered_after_arming():
    """A name nobody holds when the timer is armed is fine if someone holds it at fire time."""
    sh = ensemble.self()
    timer.send_after(0.1, "timer_test_late_name", "found")
    ensemble.spawn(forwarder, sh, "late", name="timer_test_late_name")
    assert ("late", "found") == ensemble.receive(timeout=WAIT)


def test_send_after_to_name_node_tuple():
    """A timer to (name, node) of this node reaches the named process."""
    sh = ensemble.self()
    ensemble.spawn(forwarder, sh, "tup", name="timer_test_tuple")
    timer.send_after(0.02, ("timer_test_tuple", ensemble.node()), "via tuple")
    assert ("tup", "via tuple") == ensemble.receive(timeout=WAIT)


def test_send_after_to_an_unregistered_name_is_dropped_and_the_server_carries_on():
    """A timer to a name nobody holds at fire time is dropped; the server lives and fires later timers."""
    timer.send_after(0, ensemble.self(), "server up")
    assert "server up" == ensemble.receive(timeout=WAIT)
    server_before = ensemble.whereis("timer_server")
    timer.send_after(0.01, "timer_test_nobody", "lost")
    timer.send_after(0.1, ensemble.self(), "later")
    assert "later" == ensemble.receive(timeout=WAIT)
    assert TIMEOUT is ensemble.receive(timeout=0.05)
    assert server_before is not None
    assert server_before == ensemble.whereis("timer_server")
    assert True is ensemble.is_alive(server_before)


def test_timers_fire_in_deadline_order():
    """Timers armed out of order arrive in the order of their deadlines."""
    sh = ensemble.self()
    for t in (0.15, 0.05, 0.1, 0.0):
        timer.send_after(t, sh, t)
    assert [0.0, 0.05, 0.1, 0.15] == [ensemble.receive(timeout=WAIT) for _ in range(4)]


# --------------------------------------------------------------------------
# start_timer, cancel_timer, read_timer
# --------------------------------------------------------------------------


def test_start_timer_sends_timeout_ref_msg():
    """start_timer delivers ("timeout", ref, msg) with the ref it returned."""
    ref = timer.start_timer(0.02, ensemble.self(), "tick")
    assert ("timeout", ref, "tick") == ensemble.receive(timeout=WAIT)


def test_cancel_timer_answers_seconds_left_then_false_and_nothing_arrives():
    """cancel_timer answers 0 < left <= time the first time, False the second; the message never comes."""
    ref = timer.send_after(0.3, ensemble.self(), "cancelled")
    left = timer.cancel_timer(ref)
    assert 0 < left <= 0.3
    assert False is timer.cancel_timer(ref)
    assert TIMEOUT is ensemble.receive(timeout=0.45)


def test_cancel_timer_of_a_fired_timer_is_false():
    """Once a timer has fired, cancel_timer and read_timer answer False."""
    ref = timer.send_after(0.01, ensemble.self(), "fired")
    assert "fired" == ensemble.receive(timeout=WAIT)
    assert False is timer.read_timer(ref)
    assert False is timer.cancel_timer(ref)


def test_read_timer_answers_time_left_and_cancels_nothing():
    """read_timer answers 0 < left <= time, shrinking, and the timer still fires."""
    ref = timer.send_after(0.2, ensemble.self(), "still fires")
    first = timer.read_timer(ref)
    assert 0 < first <= 0.2
    assert TIMEOUT is ensemble.receive(timeout=0.05)
    second = timer.read_timer(ref)
    assert 0 <= second < first
    assert "still fires" == ensemble.receive(timeout=WAIT)


def test_cancel_timer_async_sends_the_answer():
    """cancel_timer(async_=True) answers "ok" and sends ("cancel_timer", ref, left)."""
    ref = timer.send_after(1.0, ensemble.self(), "never")
    assert "ok" == timer.cancel_timer(ref, async_=True)
    tag, got_ref, left = ensemble.receive(timeout=WAIT)
    assert ("cancel_timer", ref) == (tag, got_ref)
    assert 0 < left <= 1.0
    assert "ok" == timer.cancel_timer(ref, async_=True)
    assert ("cancel_timer", ref, False) == ensemble.receive(timeout=WAIT)


def test_read_timer_async_sends_the_answer():
    """read_timer(async_=True) answers "ok" and sends ("read_timer", ref, left)."""
    ref = timer.send_after(1.0, ensemble.self(), "never")
    assert "ok" == timer.read_timer(ref, async_=True)
    tag, got_ref, left = ensemble.receive(timeout=WAIT)
    assert ("read_timer", ref) == (tag, got_ref)
    assert 0 < left <= 1.0
    timer.cancel(ref)


def test_info_false_answers_ok_and_sends_nothing():
    """info=False answers "ok" (sync and async) and sends no answer; the cancel still happens."""
    ref = timer.send_after(1.0, ensemble.self(), "never")
    assert "ok" == timer.read_timer(ref, info=False)
    assert "ok" == timer.read_timer(ref, async_=True, info=False)
    assert "ok" == timer.cancel_timer(ref, async_=True, info=False)
    assert TIMEOUT is ensemble.receive(timeout=0.05)
    assert False is timer.read_timer(ref)
    assert "ok" == timer.cancel_timer(ref, info=False)


def test_cancel_and_read_timer_reject_a_non_ref():
    """cancel_timer/read_timer of something that is not a ref raise Badarg."""
    with pytest.raises(Badarg):
        timer.cancel_timer("not a ref")
    with pytest.raises(Badarg):
        timer.read_timer(42)


# --------------------------------------------------------------------------
# abs, Badarg
# --------------------------------------------------------------------------


def test_abs_deadline_in_the_past_fires_at_once():
    """abs=True with a deadline already passed fires at once."""
    timer.send_after(timer.monotonic_time() - 1.0, ensemble.self(), "overdue", abs=True)
    assert "overdue" == ensemble.receive(timeout=WAIT)


def test_abs_deadline_in_the_future_fires_at_that_deadline():
    """abs=True fires at the given monotonic deadline, not before."""
    deadline = timer.monotonic_time() + 0.1
    ref = timer.start_timer(deadline, ensemble.self(), "at deadline", abs=True)
    assert ("timeout", ref, "at deadline") == ensemble.receive(timeout=WAIT)
    assert timer.monotonic_time() >= deadline


@pytest.mark.parametrize("bad", [-0.001, -1, "1", None, True, False, math.nan, math.inf, [1]])
def test_bad_time_is_badarg(bad):
    """A negative, non-number, bool or non-finite time raises Badarg and arms nothing."""
    with pytest.raises(Badarg):
        timer.send_after(bad, ensemble.self(), "x")
    with pytest.raises(Badarg):
        timer.start_timer(bad, ensemble.self(), "x")
    with pytest.raises(Badarg):
        timer.apply_after(bad, print)
    assert TIMEOUT is ensemble.receive(timeout=0.02)


@pytest.mark.parametrize("bad", [0, -1, "1", True, math.nan])
def test_bad_interval_period_is_badarg(bad):
    """An interval period must be a finite number > 0."""
    with pytest.raises(Badarg):
        timer.send_interval(bad, ensemble.self(), "x")
    with pytest.raises(Badarg):
        timer.apply_interval(bad, print)


def test_bad_destination_and_callable_are_badarg():
    """A destination that is not a pid/name/(name, node), or a non-callable, raises Badarg."""
    with pytest.raises(Badarg):
        timer.send_after(0.01, 42, "x")
    with pytest.raises(Badarg):
        timer.start_timer(0.01, ("a", "b", "c"), "x")
    with pytest.raises(Badarg):
        timer.apply_after(0.01, "not callable")
    with pytest.raises(Badarg):
        timer.exit_after(0.01, "name", "reason")


# --------------------------------------------------------------------------
# apply_after, intervals
# --------------------------------------------------------------------------


def report_from(to, tag):
    ensemble.send(to, (tag, ensemble.self()))


def test_apply_after_runs_fn_in_a_new_process():
    """apply_after(time, fn, *args) runs fn(*args) in a new process after time."""
    sh = ensemble.self()
    start = monotonic()
    timer.apply_after(0.1, report_from, sh, "applied")
    tag, pid = ensemble.receive(timeout=WAIT)
    assert "applied" == tag
    assert monotonic() - start >= 0.1
    assert sh != pid
    assert ensemble.whereis("timer_server") != pid


def test_send_interval_fires_at_fixed_deadlines():
    """send_interval's k-th tick arrives no earlier than start + k * period; cancel stops it."""
    period = 0.05
    sh = ensemble.self()
    start = monotonic()
    ref = timer.send_interval(period, sh, "tick")
    arrivals = []
    for _ in range(5):
        assert "tick" == ensemble.receive(timeout=WAIT)
        arrivals.append(monotonic())
    assert "ok" == timer.cancel(ref)
    for k, at in enumerate(arrivals, start=1):
        assert at >= start + k * period, f"tick {k} came early"
    assert False is timer.read_timer(ref)
    # A tick already taken from the table as cancel ran may still land; no more than one.
    stragglers = 0
    while ensemble.receive(timeout=3 * period) is not TIMEOUT:
        stragglers += 1
    assert stragglers <= 1


def test_send_interval_two_args_sends_to_the_caller():
    """send_interval(time, msg) ticks to the calling process."""
    ref = timer.send_interval(0.02, "self tick")
    assert ["self tick", "self tick"] == [ensemble.receive(timeout=WAIT) for _ in range(2)]
    assert "ok" == timer.cancel(ref)


def interval_owner(to, period):
    timer.send_interval(period, to, "itick")
    ensemble.receive(lambda m: m if m == "stop" else ensemble.NOMATCH)


def test_send_interval_stops_when_the_starting_process_exits():
    """An interval ends with the process that started it: after its DOWN, no more ticks."""
    period = 0.1
    sh = ensemble.self()
    owner, mref = ensemble.spawn_monitor(interval_owner, sh, period)
    assert "itick" == ensemble.receive(timeout=WAIT)
    assert "itick" == ensemble.receive(timeout=WAIT)
    ensemble.send(owner, "stop")  # right after a tick: the next one is ~period away
    assert "normal" == down_of(mref)
    while ensemble.receive(lambda m: m if m == "itick" else ensemble.NOMATCH, timeout=0) is not TIMEOUT:
        pass  # ticks queued before the DOWN
    assert TIMEOUT is ensemble.receive(timeout=3 * period)


def interval_applier(to, period):
    ref = timer.apply_interval(period, report_from, to, "applied")
    ensemble.send(to, ("ref", ref))
    ensemble.receive()


def test_apply_interval_spawns_repeatedly_until_cancelled():
    """apply_interval runs fn in a new process each period; cancel stops it."""
    sh = ensemble.self()
    ensemble.spawn(interval_applier, sh, 0.03)
    _, ref = ensemble.receive(tagged("ref"), timeout=WAIT)
    pids = [ensemble.receive(tagged("applied"), timeout=WAIT)[1] for _ in range(3)]
    assert "ok" == timer.cancel(ref)
    assert 3 == len(set(pids))
    assert False is timer.read_timer(ref)


def test_apply_interval_stops_when_the_starting_process_exits():
    """apply_interval ends with its caller: after the caller's DOWN nothing more is applied."""
    period = 0.1
    sh = ensemble.self()
    owner, mref = ensemble.spawn_monitor(interval_applier, sh, period)
    ensemble.receive(tagged("ref"), timeout=WAIT)
    assert "applied" == ensemble.receive(tagged("applied"), timeout=WAIT)[0]
    ensemble.exit(owner, "kill")  # right after an application
    assert "killed" == down_of(mref)
    while ensemble.receive(tagged("applied"), timeout=0) is not TIMEOUT:
        pass
    assert TIMEOUT is ensemble.receive(timeout=3 * period)


# --------------------------------------------------------------------------
# exit_after, kill_after
# --------------------------------------------------------------------------


def test_exit_after_kills_the_target_with_the_reason():
    """exit_after(time, pid, reason) makes pid exit with reason."""
    p, mref = ensemble.spawn_monitor(wait_forever)
    timer.exit_after(0.05, p, "timed out")
    assert "timed out" == down_of(mref)


def test_exit_after_to_a_trapping_process_is_an_exit_message_from_the_server():
    """A trapping target of exit_after gets ("EXIT", timer_server, reason)."""
    sh = ensemble.self()

    def trapper():
        ensemble.send(sh, ("got", ensemble.receive()))

    p = ensemble.spawn(trapper, trap_exit=True)
    timer.exit_after(0.02, p, "please stop")
    _, msg = ensemble.receive(tagged("got"), timeout=WAIT)
    assert ("EXIT", ensemble.whereis("timer_server"), "please stop") == msg


def test_exit_after_two_args_targets_the_caller():
    """exit_after(time, reason) ends the calling process with reason."""

    def body():
        timer.exit_after(0.02, "my own end")
        ensemble.receive()

    _p, mref = ensemble.spawn_monitor(body)
    assert "my own end" == down_of(mref)


def test_kill_after_kills_even_a_trapping_process():
    """kill_after(time, pid) kills pid with "killed", trapping or not."""
    p, mref = ensemble.spawn_monitor(wait_forever, trap_exit=True)
    timer.kill_after(0.02, p)
    assert "killed" == down_of(mref)


def test_kill_after_one_arg_kills_the_caller():
    """kill_after(time) kills the calling process."""

    def body():
        timer.kill_after(0.02)
        ensemble.receive()

    _p, mref = ensemble.spawn_monitor(body)
    assert "killed" == down_of(mref)


def test_cancel_answers_ok_and_the_exit_never_comes():
    """cancel(ref) answers "ok", also for an unknown ref, and a cancelled exit_after never lands."""
    p, mref = ensemble.spawn_monitor(wait_forever)
    ref = timer.exit_after(0.1, p, "never")
    assert "ok" == timer.cancel(ref)
    assert "ok" == timer.cancel(ref)
    assert "ok" == timer.cancel(ensemble.make_ref())
    assert TIMEOUT is ensemble.receive(timeout=0.25)
    assert True is ensemble.is_alive(p)


# --------------------------------------------------------------------------
# Timers end with their processes; the server
# --------------------------------------------------------------------------


def wait_read_timer_false(ref, bound=2.0):
    """read_timer(ref) after polling in receive(timeout=0.01) steps, for at most ``bound`` s."""
    deadline = monotonic() + bound
    left = timer.read_timer(ref)
    while left is not False and monotonic() < deadline:
        ensemble.receive(lambda m: ensemble.NOMATCH, timeout=0.01)
        left = timer.read_timer(ref)
    return left


def test_a_timer_to_a_pid_is_cancelled_when_the_pid_exits():
    """send_after/start_timer to a pid end when the pid exits: read_timer answers False."""
    p, mref = ensemble.spawn_monitor(wait_forever)
    ref1 = timer.send_after(5.0, p, "too late")
    ref2 = timer.start_timer(5.0, p, "too late")
    assert 0 < timer.read_timer(ref1) <= 5.0
    ensemble.exit(p, "stop")
    assert "stop" == down_of(mref)
    assert False is wait_read_timer_false(ref1)
    assert False is wait_read_timer_false(ref2)


def test_a_timer_to_an_already_dead_pid_is_cancelled():
    """A timer armed to a pid that has already exited is dropped at once."""
    p, mref = ensemble.spawn_monitor(lambda: None)
    assert "normal" == down_of(mref)
    ref = timer.send_after(5.0, p, "nobody")
    assert False is wait_read_timer_false(ref)


def test_a_timer_armed_by_an_exiting_process_to_another_pid_survives():
    """A one-shot's lifetime follows its destination, not the process that armed it."""
    sh = ensemble.self()

    def armer():
        timer.send_after(0.1, sh, "outlived my maker")

    _p, mref = ensemble.spawn_monitor(armer)
    assert "normal" == down_of(mref)
    assert "outlived my maker" == ensemble.receive(timeout=WAIT)


def test_the_timer_server_is_a_process_registered_as_timer_server():
    """The timer server is a live, exit-trapping process named "timer_server" on its own dispatcher."""
    timer.send_after(0, ensemble.self(), "start it")
    assert "start it" == ensemble.receive(timeout=WAIT)
    server = ensemble.whereis("timer_server")
    assert ensemble.Pid is type(server)
    assert True is ensemble.is_alive(server)
    assert server in ensemble.processes()
    assert "timer_server" == ensemble.process_info(server, "registered_name")
    assert True is ensemble.process_info(server, "trap_exit")
    assert "ensemble.timer" == ensemble.process_info(server, "dispatcher")
    assert "ensemble.timer" in ensemble.dispatcher.dispatchers()


def test_the_timer_server_traps_a_plain_exit_signal():
    """An exit signal other than kill does not stop the timer server (it traps exits)."""
    timer.send_after(0, ensemble.self(), "start it")
    assert "start it" == ensemble.receive(timeout=WAIT)
    server = ensemble.whereis("timer_server")
    ensemble.exit(server, "shutdown please")
    timer.send_after(0.05, ensemble.self(), "still serving")
    assert "still serving" == ensemble.receive(timeout=WAIT)
    assert server == ensemble.whereis("timer_server")


def test_a_timer_armed_right_after_killing_the_server_fires():
    """A timer armed just after exit(timer_server, "kill") fires (a new server serves it)."""
    timer.send_after(0, ensemble.self(), "start it")
    assert "start it" == ensemble.receive(timeout=WAIT)
    server = ensemble.whereis("timer_server")
    mref = ensemble.monitor(server)
    ensemble.exit(server, "kill")
    timer.send_after(0.05, ensemble.self(), "new server")
    assert "killed" == down_of(mref)
    assert "new server" == ensemble.receive(timeout=0.5)
    new = ensemble.whereis("timer_server")
    assert new is not None
    assert server != new


def test_a_timer_armed_after_the_killed_server_is_gone_fires_on_a_new_server():
    """Once the killed server's DOWN is in, the next timer starts a new "timer_server" and fires."""
    timer.send_after(0, ensemble.self(), "start it")
    assert "start it" == ensemble.receive(timeout=WAIT)
    server = ensemble.whereis("timer_server")
    mref = ensemble.monitor(server)
    ensemble.exit(server, "kill")
    assert "killed" == down_of(mref)
    timer.send_after(0.05, ensemble.self(), "new server")
    assert "new server" == ensemble.receive(timeout=WAIT)
    new = ensemble.whereis("timer_server")
    assert new is not None
    assert server != new


def test_pending_timers_survive_a_killed_timer_server():
    """A timer pending when the timer server is killed still fires."""
    timer.send_after(0, ensemble.self(), "start it")
    assert "start it" == ensemble.receive(timeout=WAIT)
    timer.send_after(0.1, ensemble.self(), "pending")
    server = ensemble.whereis("timer_server")
    mref = ensemble.monitor(server)
    ensemble.exit(server, "kill")
    assert "killed" == down_of(mref)
    assert "pending" == ensemble.receive(timeout=0.6)
