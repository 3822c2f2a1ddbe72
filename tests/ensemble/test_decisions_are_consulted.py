"""The runtime decides nothing itself: each decision goes through its pure module.

Each test wraps one pure function, runs the runtime, and checks the runtime
consulted it and acted on its answer (the answer is altered to prove it).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
from ensemble import application, gen_event, supervisor, timer
from ensemble.decide import application as appdecide
from ensemble.decide import childspec, life, signal
from ensemble.decide import gen_event as eventdecide
from ensemble.decide import receive as select
from ensemble.decide import supervisor as order
from ensemble.decide import timer as timers

from .test_exit_signals import down_of


def test_exit_signals_go_through_signal_on_signal(monkeypatch):
    """exit/2 and link signals are decided by signal.on_signal; its answer is what happens."""
    calls = []
    real = signal.on_signal

    def spy(kind, reason, **kw):
        calls.append((kind, reason))
        if reason == "spared":
            return signal.IGNORE  # overrule: the target must survive
        return real(kind, reason, **kw)

    monkeypatch.setattr(signal, "on_signal", spy)
    p, ref = e.spawn_monitor(e.receive)
    e.exit(p, "spared")
    assert ("exit", "spared") in calls
    assert e.is_alive(p)
    e.exit(p, "doomed")
    assert "doomed" == down_of(ref)
    assert ("exit", "doomed") in calls


def test_receive_goes_through_select_scan(monkeypatch):
    """A receive with a matcher takes the message select.scan names, with the value it answers."""
    calls = []

    def spy(messages, matcher, start):
        calls.append(start)
        return (len(messages) - 1, "scan decided")  # take the newest instead

    monkeypatch.setattr(select, "scan", spy)
    me = e.self()
    e.send(me, "old")
    e.send(me, "new")
    assert "scan decided" == e.receive(lambda m: m, timeout=1)
    monkeypatch.undo()
    assert ["old"] == e.process_info(me, "messages")
    assert [0] == calls


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers() | st.text(max_size=3) | st.none(), min_size=1, max_size=20))
def test_receive_without_a_matcher_takes_what_scan_names(messages):
    """Without a matcher, receive takes the oldest message inline (no scan call, on the hot path):
    exactly the message and value select.scan(mailbox, None, 0) names, leaving the rest in order."""

    def body():
        me = e.self()
        for m in messages:
            e.send(me, m)
        index, value = select.scan(list(messages), None, 0)
        got = e.receive(timeout=1)
        return index, value, got, e.process_info(me, "messages")

    index, value, got, left = e.join(e.spawn(body))
    assert got is value and index == 0
    assert list(messages[1:]) == left


def test_hibernation_goes_through_life(monkeypatch):
    """Waking a hibernating process is life.wakes/life.step's decision."""
    seen = []
    real_wakes = life.wakes

    def spy(state, event):
        seen.append((state, event))
        return real_wakes(state, event)

    monkeypatch.setattr(life, "wakes", spy)
    me = e.self()
    p = e.spawn(lambda: e.hibernate(lambda: e.send(me, e.receive(timeout=1))))
    while e.process_info(p, "status") != "hibernating":
        e.receive(lambda m: select.NOMATCH, timeout=0.001)
    e.send(p, "wake")
    assert "wake" == e.receive(timeout=2)
    assert (life.HIBERNATED, life.MAIL) in seen


def test_a_dead_process_calling_ensemble_goes_through_life_on_call(monkeypatch):
    """What a doomed process's call into ensemble does is life.on_call's answer: overruled, the send happens."""
    seen = []
    real = life.on_call

    def spy(state, raised, handling):
        seen.append((state, raised, handling))
        if raised >= 1 and not handling:
            return life.PROCEED  # overrule PARK: the call goes ahead
        return real(state, raised, handling)

    monkeypatch.setattr(life, "on_call", spy)
    me = e.self()

    def body():
        e.send(me, "ready")
        try:
            e.receive()
        except BaseException:
            pass
        e.send(me, "sent anyway")

    p, ref = e.spawn_monitor(body)
    assert "ready" == e.receive(timeout=5)
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert "sent anyway" == e.receive(lambda m: m if m == "sent anyway" else select.NOMATCH, timeout=5)
    assert (life.DEAD, 1, False) in seen


def test_timers_fire_what_the_table_says_is_due(monkeypatch):
    """The timer server fires exactly what TimerTable.due answers."""
    real_due = timers.TimerTable.due
    fired = []

    def spy(self, now):
        got = real_due(self, now)
        fired.extend(t.payload for t in got)
        return got

    monkeypatch.setattr(timers.TimerTable, "due", spy)
    timer.send_after(0.01, e.self(), "tick")
    assert "tick" == e.receive(timeout=2)
    assert ("send", "tick") in fired


def test_supervisor_restarts_by_order_restart_plan(monkeypatch):
    """The supervisor's restarts follow order.restart_plan: overruled, one_for_all acts as one_for_one."""
    plans = []
    real = order.restart_plan

    def spy(strategy, children, failed):
        plans.append(strategy)
        return real("one_for_one", children, failed)

    monkeypatch.setattr(order, "restart_plan", spy)
    me = e.self()

    def worker(tag):
        e.send(me, ("up", tag, e.self()))
        e.receive()
        raise RuntimeError("crash")

    sup = supervisor.start(
        {"strategy": "one_for_all", "intensity": 5},
        [{"id": "a", "start": lambda: e.spawn_link(worker, "a")},
         {"id": "b", "start": lambda: e.spawn_link(worker, "b")}],
    )
    ups = [e.receive(timeout=5) for _ in range(2)]
    a = [pid for (_, tag, pid) in ups if tag == "a"][0]
    b = [pid for (_, tag, pid) in ups if tag == "b"][0]
    e.send(a, "crash")
    assert ("up", "a") == e.receive(timeout=5)[:2]
    assert ["one_for_all"] == plans
    assert e.is_alive(b), "the plan said one_for_one, so b must not be restarted"
    supervisor.stop(sup)


def test_supervisor_validates_through_childspec(monkeypatch):
    """supervisor.start refuses what childspec.check_flags refuses, with its reason."""
    monkeypatch.setattr(childspec, "check_flags", lambda flags: ("error", ("vetoed", flags)))
    with pytest.raises(e.StartError) as info:
        supervisor.start({}, [])
    assert ("supervisor_data", ("vetoed", {})) == info.value.reason


# -- application: the controller and its masters carry out appdecide's answers ---------


@pytest.fixture
def _unload_all():
    """After the test: stop and unload every application."""
    yield
    for name in reversed(application.which_applications()):
        application.stop(name)
    for name in application.loaded_applications():
        application.unload(name)


def test_application_load_checks_through_appdecide_check_spec(monkeypatch, _unload_all):
    """load keeps what appdecide.check_spec answers: overruled, another env is loaded."""
    real = appdecide.check_spec
    monkeypatch.setattr(appdecide, "check_spec", lambda spec: {**real(spec), "env": {"decided": True}})
    assert "a" == application.load({"name": "a", "env": {"given": True}})
    assert {"decided": True} == application.get_all_env("a")


def test_application_start_is_refused_by_appdecide_start_refusal(monkeypatch, _unload_all):
    """A start is refused with appdecide.start_refusal's reason, whatever it is."""
    application.load({"name": "a"})
    monkeypatch.setattr(appdecide, "start_refusal", lambda *a, **kw: ("vetoed", a[0]))
    with pytest.raises(application.ApplicationError) as info:
        application.start("a")
    assert ("vetoed", "a") == info.value.reason


def test_application_restart_types_go_through_appdecide(monkeypatch, _unload_all):
    """A restart type is refused when appdecide.restart_type_refusal says so, a known one too."""
    application.load({"name": "a"})
    monkeypatch.setattr(appdecide, "restart_type_refusal", lambda t: ("no", t))
    with pytest.raises(application.ApplicationError) as info:
        application.start("a", "temporary")
    assert ("no", "temporary") == info.value.reason
    with pytest.raises(application.ApplicationError):
        application.ensure_all_started("a", "permanent")


def test_application_ensure_all_started_starts_appdecide_start_order(monkeypatch, _unload_all):
    """ensure_all_started starts what appdecide.start_order lists, in its order."""
    for n in ["a", "b", "c"]:
        application.load({"name": n})
    monkeypatch.setattr(appdecide, "start_order", lambda name, loaded, running: ["c", "a"])
    assert ["c", "a"] == application.ensure_all_started("b")
    assert ["c", "a"] == application.which_applications()


def test_application_start_phases_go_on_by_appdecide_phase_ok(monkeypatch, _unload_all):
    """A start phase answer is judged by appdecide.phase_ok: overruled, "fine" lets the start go on."""
    application.load({"name": "a", "start_phases": [("p", None)], "start_phase": lambda *a: "fine"})
    monkeypatch.setattr(appdecide, "phase_ok", lambda answer: answer == "fine")
    assert "ok" == application.start("a")
    assert application.started("a")


def test_application_start_reads_the_top_through_appdecide_interpret_start(monkeypatch, _unload_all):
    """What start answered is read by appdecide.interpret_start: told it is no pid, the start is a bad return."""
    application.load({"name": "a", "start": lambda: e.spawn(lambda: None)})
    monkeypatch.setattr(appdecide, "interpret_start", lambda ret, pid_type: None)
    with pytest.raises(application.ApplicationError) as info:
        application.start("a")
    assert "bad_return" == info.value.reason[0]


def test_application_get_key_answers_appdecide_key_value(monkeypatch, _unload_all):
    """get_key answers what appdecide.key_value answers."""
    application.load({"name": "a", "vsn": "1"})
    monkeypatch.setattr(appdecide, "key_value", lambda spec, env, key: ("decided", key))
    assert ("decided", "vsn") == application.get_key("a", "vsn")


# -- gen_event: the manager carries out eventdecide's answers ----------------------------


class _Counter(gen_event.Handler):
    def handle_event(self, event, n):
        return ("ok", n + 1)

    def handle_call(self, request, n):
        return ("ok", n, n)


def test_gen_event_handler_returns_go_through_eventdecide(monkeypatch):
    """A handler's return means what eventdecide.interpret_handler_return says: overruled, "ok" removes it."""
    real = eventdecide.interpret_handler_return

    def spy(kind, ret):
        if kind == "event":
            return eventdecide.Remove(None)
        return real(kind, ret)

    mgr = gen_event.start()
    gen_event.add_handler(mgr, "c", _Counter(), 0)
    monkeypatch.setattr(eventdecide, "interpret_handler_return", spy)
    gen_event.sync_notify(mgr, "x")
    assert [] == gen_event.which_handlers(mgr)
    gen_event.stop(mgr)


def test_gen_event_ids_are_found_by_eventdecide_find(monkeypatch):
    """Which handler an id names is eventdecide.find's answer: overruled, every call goes to the first."""
    mgr = gen_event.start()
    gen_event.add_handler(mgr, "a", _Counter(), 10)
    gen_event.add_handler(mgr, "b", _Counter(), 20)
    monkeypatch.setattr(eventdecide, "find", lambda installed, handler_id: 0 if installed else None)
    assert 10 == gen_event.call(mgr, "b", "get")
    monkeypatch.undo()
    assert 20 == gen_event.call(mgr, "b", "get")
    gen_event.stop(mgr)


def test_gen_event_terminate_gets_eventdecide_terminate_arg(monkeypatch):
    """What terminate gets when the manager stops is eventdecide.terminate_arg's answer."""
    me = e.self()

    class Told(gen_event.Handler):
        def terminate(self, arg, state):
            e.send(me, ("terminated", arg))

    mgr = gen_event.start()
    gen_event.add_handler(mgr, "t", Told())
    monkeypatch.setattr(eventdecide, "terminate_arg", lambda reason: ("decided", reason))
    gen_event.stop(mgr)
    assert ("terminated", ("decided", "normal")) == e.receive(timeout=5)


def test_gen_event_casts_are_routed_by_eventdecide_cast_kind(monkeypatch):
    """A notify is an event only if eventdecide.cast_kind says so: overruled, it goes to handle_info."""
    me = e.self()

    class Seen(gen_event.Handler):
        def handle_event(self, event, state):
            e.send(me, ("event", event))
            return ("ok", state)

        def handle_info(self, msg, state):
            e.send(me, ("info", msg))
            return ("ok", state)

    mgr = gen_event.start()
    gen_event.add_handler(mgr, "s", Seen())
    monkeypatch.setattr(eventdecide, "cast_kind", lambda request: "info")
    gen_event.notify(mgr, "x")
    got = e.receive(timeout=5)
    assert "info" == got[0]
    monkeypatch.undo()
    gen_event.stop(mgr)


def test_application_masters_act_on_appdecide_master_event(monkeypatch, _unload_all):
    """A master does what appdecide.master_event says: told a plain message means STOP, it stops the application."""
    from ensemble import sys as e_sys

    me = e.self()
    application.load({"name": "a", "start": lambda: (e.spawn_link(e.receive), "st"),
                      "stop": lambda state: e.send(me, ("stopped", state))})
    application.start("a")
    real = appdecide.master_event
    monkeypatch.setattr(appdecide, "master_event",
                        lambda msg, mref, controller: appdecide.STOP if msg == "please stop" else real(msg, mref, controller))
    master = e_sys.get_state(e.whereis("application_controller")).running["a"].master
    e.send(master, "please stop")
    assert ("stopped", "st") == e.receive(timeout=5)
    assert [] == application.which_applications()


def test_application_controller_acts_on_appdecide_controller_event(monkeypatch, _unload_all):
    """The controller does what appdecide.controller_event says: told a plain message is a tree exit, it records it."""
    from ensemble import sys as e_sys

    application.load({"name": "a", "start": lambda: e.spawn_link(e.receive)})
    application.start("a")
    master = e_sys.get_state(e.whereis("application_controller")).running["a"].master
    real = appdecide.controller_event
    monkeypatch.setattr(appdecide, "controller_event",
                        lambda msg, masters: ("told", master, "exited", "decided") if msg == "nudge" else real(msg, masters))
    e.send("application_controller", "nudge")
    assert [("a", "decided")] == application.exits()
    assert [] == application.which_applications()
    monkeypatch.undo()
    ref = e.monitor(master)
    e.exit(master, "kill")  # it was told nothing: end it (the controller ignores its EXIT, a master it forgot)
    assert "killed" == down_of(ref)
