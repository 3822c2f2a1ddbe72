"""The runtime decides nothing itself: each decision goes through its pure module.

Each test wraps one pure function, runs the runtime, and checks the runtime
consulted it and acted on its answer (the answer is altered to prove it).
"""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import callback, childspec, life, order, request, select, signal, statem, supervisor, timer, timers

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
    """receive takes the message select.scan names, with the value it answers."""
    calls = []

    def spy(messages, matcher, start):
        calls.append(start)
        return (len(messages) - 1, "scan decided")  # take the newest instead

    monkeypatch.setattr(select, "scan", spy)
    me = e.self()
    e.send(me, "old")
    e.send(me, "new")
    assert "scan decided" == e.receive(timeout=1)
    monkeypatch.undo()
    assert ["old"] == e.process_info(me, "messages")
    assert [0] == calls


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


DECISIONS = [signal, select, life, timers, callback, request, statem, childspec, order]


@pytest.mark.parametrize("module", DECISIONS, ids=lambda m: m.__name__)
def test_decision_modules_import_nothing_effectful(module):
    """A decision module imports only other decision modules and plain values, nothing effectful."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(module))
    allowed = {m.__name__.rsplit(".", 1)[1] for m in DECISIONS} | {"_terms", "_values"}
    relative = [
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.level > 0 and n.module not in allowed
    ]
    absolute = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    absolute |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    effectful = {"gevent", "greenlet", "threading", "_thread", "time", "os", "socket", "ensemble"}
    assert [] == relative
    assert set() == {m for m in absolute if m.split(".")[0] in effectful}


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
