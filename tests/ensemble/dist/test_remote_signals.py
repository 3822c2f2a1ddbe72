"""Links, exit signals and monitors between processes of two nodes in two OS processes."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT

from ._cluster import B, WIRES
from ._cluster import spawned_on_b as _spawned
from ._cluster import tagged as _is
from ._cluster import take as _take


@pytest.fixture(params=WIRES)
def wire(request):
    """Every test here with two nodes runs over TCP and over TLS."""
    return request.param


def test_a_remote_process_dying_signals_the_local_process_linked_to_it(node_a, child_b):
    w = _spawned("w1")
    e.trap_exit(True)
    try:
        e.link(w)
        e.send(w, ("die", "boom"))
        assert ("EXIT", w, "boom") == _take(lambda m: _is("EXIT")(m) and m[1] == w)
    finally:
        e.trap_exit(False)


def test_a_local_process_dying_signals_the_remote_process_linked_to_it(node_a, child_b):
    me = e.self()
    w = _spawned("w2")
    e.send(w, ("trap",))
    _take(_is("trapping"))

    def doomed():
        e.link(w)
        e.send(me, "linked")
        e.receive()

    p = e.spawn(doomed)
    _take(lambda m: m == "linked")
    e.exit(p, "shot")
    got = _take(lambda m: _is("worker_got")(m) and _is("EXIT")(m[1]))
    assert got[1][1:] == (p, "shot") and got[1][1].node == e.node()


def test_a_link_made_from_the_remote_side_works_both_ways(node_a, child_b):
    w = _spawned("w3")
    e.trap_exit(True)
    try:
        e.send(w, ("link", e.self()))
        _take(_is("linked"))
        e.send(w, ("die", "remote_reason"))
        assert ("EXIT", w, "remote_reason") == _take(_is("EXIT"))
    finally:
        e.trap_exit(False)


def test_exit_2_to_a_remote_process_and_its_kill(node_a, child_b):
    w = _spawned("w4")
    ref = e.monitor(w)
    e.exit(w, "kill")
    assert ("DOWN", ref, "process", w, "killed") == _take(_is("DOWN"))


def test_a_monitor_of_a_remote_pid_and_of_a_remote_name(node_a, child_b):
    w = _spawned("w5", name="named_worker")
    by_pid = e.monitor(w)
    by_name = e.monitor(("named_worker", B))
    e.send(w, ("die", "bye"))
    downs = {_take(_is("DOWN"))[1:] for _ in range(2)}
    assert downs == {(by_pid, "process", w, "bye"), (by_name, "process", ("named_worker", B), "bye")}


def test_a_dead_or_unknown_remote_target_gives_noproc(node_a, child_b):
    w = _spawned("w6")
    ref = e.monitor(w)
    e.send(w, ("die", "normal"))
    _take(lambda m: _is("DOWN")(m) and m[1] == ref)
    again = e.monitor(w)
    assert ("DOWN", again, "process", w, "noproc") == _take(lambda m: _is("DOWN")(m) and m[1] == again)
    named = e.monitor(("nobody_here", B))
    assert "noproc" == _take(lambda m: _is("DOWN")(m) and m[1] == named)[4]
    e.trap_exit(True)
    try:
        e.link(w)
        assert ("EXIT", w, "noproc") == _take(_is("EXIT"))
    finally:
        e.trap_exit(False)


def test_demonitor_of_a_remote_monitor_means_no_down(node_a, child_b):
    w = _spawned("w7")
    ref = e.monitor(w)
    e.demonitor(ref)
    e.send(w, ("die", "quiet"))
    check = e.monitor(w)  # after the death and on the same connection: its DOWN comes after any other
    _take(lambda m: _is("DOWN")(m) and m[1] == check)
    assert TIMEOUT == e.receive(lambda m: m if _is("DOWN")(m) and m[1] == ref else NOMATCH, timeout=0)


def test_a_killed_node_gives_noconnection_to_links_and_monitors(node_a, child_b):
    w = _spawned("w8")
    e.trap_exit(True)
    try:
        e.link(w)
        ref = e.monitor(w)
        child_b.kill()
        assert ("EXIT", w, "noconnection") == _take(_is("EXIT"))
        assert ("DOWN", ref, "process", w, "noconnection") == _take(_is("DOWN"))
    finally:
        e.trap_exit(False)


def test_links_and_monitors_to_an_unreachable_node_fire_at_once(node_a):
    ref = e.monitor(("svc", "nobody@127.0.0.1"))
    assert ("DOWN", ref, "process", ("svc", "nobody@127.0.0.1"), "noconnection") == _take(_is("DOWN"))


def test_without_distribution_a_remote_name_monitor_fires_noconnection():
    ref = e.monitor(("svc", "elsewhere@host"))
    assert "noconnection" == _take(_is("DOWN"))[4]
    assert ref is not None
