"""Registered names, sends to every kind of destination, and aliases."""

from __future__ import annotations

import pytest

import ensemble as e

from .test_exit_signals import down_of


def wait_forever():
    e.receive()


def test_register_whereis_unregister():
    """register, whereis, registered and unregister agree."""
    p = e.spawn(wait_forever)
    assert True is e.register("worker", p)
    assert p is e.whereis("worker")
    assert "worker" in e.registered()
    assert "worker" == e.process_info(p, "registered_name")
    assert True is e.unregister("worker")
    assert None is e.whereis("worker")
    assert None is e.process_info(p, "registered_name")


def test_name_released_when_process_exits():
    """A name is released when its process exits and may be taken again."""
    p = e.spawn(wait_forever, name="temp")
    e.exit(p, "kill")
    e.exit_reason(p, timeout=5)
    assert None is e.whereis("temp")
    q = e.spawn(wait_forever, name="temp")
    assert q is e.whereis("temp")


@pytest.mark.parametrize("bad_name", [3, None, "undefined", ("a", "b")])
def test_register_bad_name_is_badarg(bad_name):
    """A name that is not a str, or "undefined", is refused."""
    p = e.spawn(wait_forever)
    with pytest.raises(e.Badarg):
        e.register(bad_name, p)


def test_register_taken_name_dead_pid_or_named_pid_is_badarg():
    """A taken name, a dead process and a process that has a name are each refused."""
    p = e.spawn(wait_forever, name="first")
    q = e.spawn(wait_forever)
    with pytest.raises(e.Badarg):
        e.register("first", q)
    with pytest.raises(e.Badarg):
        e.register("second", p)
    dead = e.spawn(lambda: None)
    e.join(dead, timeout=2)
    with pytest.raises(e.Badarg):
        e.register("third", dead)


def test_unregister_unknown_is_badarg():
    """unregister of a name nobody holds raises Badarg."""
    with pytest.raises(e.Badarg):
        e.unregister("nobody-here")


def test_spawn_with_taken_name_spawns_nothing():
    """spawn with a taken name raises Badarg and no process is added."""
    e.spawn(wait_forever, name="taken")
    before = e.processes()
    with pytest.raises(e.Badarg):
        e.spawn(wait_forever, name="taken")
    assert before == e.processes()


def test_name_given_at_spawn_is_in_place_before_the_function_runs():
    """A process spawned with a name can look itself up by name at its first step."""
    p = e.spawn(lambda: e.whereis("early") is e.self(), name="early")
    assert True is e.join(p, timeout=2)


def test_send_to_name_pid_and_name_node():
    """send works with a pid, a registered name and (name, node)."""
    me = e.self()

    def echo():
        for _ in range(3):
            e.send(me, e.receive())

    e.spawn(echo, name="echo")
    p = e.whereis("echo")
    assert "a" == e.send(p, "a")
    e.send("echo", "b")
    e.send(("echo", e.node()), "c")
    assert ["a", "b", "c"] == [e.receive(timeout=2) for _ in range(3)]


def test_send_to_unregistered_name_is_badarg():
    """A message to a plain name nobody holds raises Badarg."""
    with pytest.raises(e.Badarg):
        e.send("nobody", "hi")


def test_send_to_unregistered_name_node_is_dropped():
    """A message to (name, node) that names nobody is dropped, as Erlang's is."""
    assert "hi" == e.send(("nobody", e.node()), "hi")
    assert "hi" == e.send(("somebody", "other@host"), "hi")


def test_send_to_dead_pid_is_dropped():
    """A message to a process that has exited is dropped silently."""
    p = e.spawn(lambda: None)
    e.join(p, timeout=2)
    assert "late" == e.send(p, "late")


def test_send_to_bad_destination_is_badarg():
    """A destination that is no pid, name or alias raises Badarg."""
    with pytest.raises(e.Badarg):
        e.send(42, "x")


def test_alias_delivers_while_active():
    """A message to an alias arrives while it is active, and is dropped after unalias."""

    def owner():
        a = e.alias()
        e.send(parent, ("alias", a))
        first = e.receive(timeout=5)
        was_active = e.unalias(a)
        e.send(parent, "unaliased")
        late = e.receive(timeout=0.2)
        return first, was_active, e.unalias(a), late

    parent = e.self()
    p = e.spawn(owner)
    _, a = e.receive(timeout=5)
    e.send(a, "via alias")
    assert "unaliased" == e.receive(timeout=5)
    e.send(a, "too late")
    assert ("via alias", True, False, e.TIMEOUT) == e.join(p, timeout=5)


def test_alias_of_dead_owner_drops():
    """A message to the alias of a process that has exited is dropped."""
    me = e.self()
    p = e.spawn(lambda: e.send(me, e.alias()))
    a = e.receive(timeout=5)
    e.join(p, timeout=2)
    assert "x" == e.send(a, "x")


def test_registered_name_monitor_down_after_unregister_keeps_pid():
    """A monitor by name follows the process found at monitor time."""
    p = e.spawn(wait_forever, name="moving")
    ref = e.monitor("moving")
    e.unregister("moving")
    e.exit(p, "bye")
    assert "bye" == down_of(ref)
