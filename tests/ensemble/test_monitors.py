"""Monitors: DOWN messages, noproc, monitors by name, demonitor and flush."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import NOMATCH

from .test_exit_signals import down_of


def wait_forever():
    e.receive()


def test_down_carries_ref_pid_and_reason():
    """The watcher gets ("DOWN", ref, "process", pid, reason)."""
    p = e.spawn(wait_forever)
    ref = e.monitor(p)
    e.exit(p, "gone")
    assert ("DOWN", ref, "process", p, "gone") == e.receive(timeout=5)


def test_monitor_dead_process_gives_noproc_at_once():
    """Monitoring a process that has exited delivers a "noproc" DOWN at once."""
    p = e.spawn(lambda: None)
    e.join(p, timeout=2)
    ref = e.monitor(p)
    assert ("DOWN", ref, "process", p, "noproc") == e.receive(timeout=0)


def test_monitor_by_name_shows_name_and_node():
    """A monitor by name shows (name, node) in its DOWN instead of the pid."""
    p = e.spawn(wait_forever, name="watched")
    ref = e.monitor("watched")
    e.exit(p, "die")
    assert ("DOWN", ref, "process", ("watched", e.node()), "die") == e.receive(timeout=5)


def test_monitor_unknown_name_gives_noproc_at_once():
    """Monitoring a name nobody holds gives a "noproc" DOWN with (name, node) at once."""
    ref = e.monitor("nobody")
    assert ("DOWN", ref, "process", ("nobody", e.node()), "noproc") == e.receive(timeout=0)


def test_monitor_by_name_and_node_tuple():
    """monitor((name, node)) on this node monitors the named process."""
    p = e.spawn(wait_forever, name="tupled")
    ref = e.monitor(("tupled", e.node()))
    e.exit(p, "x")
    assert ("DOWN", ref, "process", ("tupled", e.node()), "x") == e.receive(timeout=5)


def test_every_monitor_call_makes_a_new_monitor():
    """Two monitors on one process give two DOWNs with distinct refs."""
    p = e.spawn(wait_forever)
    r1, r2 = e.monitor(p), e.monitor(p)
    assert r1 != r2
    e.exit(p, "x")
    got = {e.receive(timeout=5)[1], e.receive(timeout=5)[1]}
    assert {r1, r2} == got


def test_demonitor_stops_the_down():
    """After demonitor no DOWN for that ref arrives."""
    p = e.spawn(wait_forever)
    ref = e.monitor(p)
    assert True is e.demonitor(ref)
    e.exit(p, "x")
    e.exit_reason(p, timeout=5)
    assert e.TIMEOUT is e.receive(timeout=0.05)


def test_demonitor_flush_removes_a_delivered_down():
    """demonitor(ref, flush=True) also removes a DOWN already in the mailbox, and only that one."""
    p = e.spawn(wait_forever)
    ref = e.monitor(p)
    e.send(e.self(), "keep me")
    e.exit(p, "x")
    e.exit_reason(p, timeout=5)
    while e.process_info(e.self(), "message_queue_len") < 2:
        e.receive(lambda m: NOMATCH, timeout=0.01)
    assert True is e.demonitor(ref, flush=True)
    assert ["keep me"] == e.process_info(e.self(), "messages")


def test_monitors_are_one_way():
    """The watched process is not affected by its watcher's death."""
    me = e.self()

    def watched():
        e.receive(lambda m: m if m == "go" else NOMATCH)
        e.send(me, "watched alive")

    w = e.spawn(watched)

    def watcher():
        e.monitor(w)
        e.exit("watcher dies")

    assert "watcher dies" == e.exit_reason(e.spawn(watcher), timeout=5)
    e.send(w, "go")
    assert "watched alive" == e.receive(timeout=5)


def test_spawn_monitor_is_in_place_before_the_function_runs():
    """spawn_monitor gets the DOWN even for a function that ends at once."""
    p, ref = e.spawn_monitor(lambda: e.exit("instant"))
    assert "instant" == down_of(ref)


def test_monitor_shows_in_process_info_both_sides():
    """monitors and monitored_by list the monitor on each side."""
    p = e.spawn(wait_forever)
    e.monitor(p)
    me = e.self()
    assert [("process", p)] == e.process_info(me, "monitors")
    assert [me] == e.process_info(p, "monitored_by")


def test_monitor_bad_target_is_badarg():
    """monitor of something that is neither pid nor name raises Badarg."""
    with pytest.raises(e.Badarg):
        e.monitor(42)
    with pytest.raises(e.Badarg):
        e.demonitor("not a ref")


def test_down_for_dead_watcher_is_dropped():
    """A monitor held by a process that died is dropped: the target keeps no watcher."""
    target = e.spawn(wait_forever)

    def watcher():
        e.monitor(target)

    e.join(e.spawn(watcher), timeout=2)
    assert [] == e.process_info(target, "monitored_by")
