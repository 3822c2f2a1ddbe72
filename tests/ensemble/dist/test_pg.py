"""pg across two nodes in two OS processes: members reach every node, leave on exit and nodedown."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import Badarg, NOMATCH, pg

from ._cluster import B, COOKIE, WIRES, Child, child_tls


@pytest.fixture
def scope(node_a):
    pid = pg.start()
    yield pid
    ref = e.monitor(pid)
    e.exit(pid, "kill")
    e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=5)


def _event(ref, what, timeout=10):
    got = e.receive(lambda m: m if type(m) is tuple and len(m) == 4 and m[0] == ref and m[1] == what else NOMATCH,
                    timeout=timeout)
    assert got is not e.TIMEOUT, f"no {what} event"
    return got


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_members_joined_before_a_node_connects_reach_it_and_leave_with_it(scope, epmd_port, wire):
    local = e.spawn(e.receive)
    pg.join("workers", [local, local])  # twice: must leave twice
    ref, members = pg.monitor("workers")
    assert members == [local, local]
    child = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    try:
        me = e.self()
        e.send(("echo", B), ("pg_join", me, "workers"))
        remote = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "pg_joined" else NOMATCH, timeout=10)
        assert _event(ref, "join")[3] == [remote]
        assert pg.get_members("workers") == [local, local, remote]  # local first
        assert pg.get_local_members("workers") == [local, local]
        assert "workers" in pg.which_groups()
        e.send(remote, "go")  # the remote member exits: it leaves everywhere
        assert _event(ref, "leave")[3] == [remote]
        assert pg.get_members("workers") == [local, local]
        e.send(("echo", B), ("pg_join", me, "workers"))
        again = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "pg_joined" else NOMATCH, timeout=10)
        _event(ref, "join")
        child.kill()  # nodedown: its members are dropped
        assert _event(ref, "leave")[3] == [again]
        assert pg.get_members("workers") == [local, local]
    finally:
        child.close()
    assert "ok" == pg.leave("workers", local)
    assert _event(ref, "leave")[3] == [local]
    assert pg.get_members("workers") == [local]
    e.send(local, "bye")  # a local member that exits leaves its groups
    assert _event(ref, "leave")[3] == [local]
    assert pg.get_members("workers") == [] and "workers" not in pg.which_groups()
    assert "ok" == pg.demonitor("workers", ref)


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_node_that_connects_later_learns_our_members(scope, epmd_port, wire):
    from ensemble import rpc

    local = e.spawn(e.receive)
    pg.join("late", local)
    child = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    try:
        members = []
        for _ in range(200):  # eventual (B asks for our members at nodeup): each try is a round trip
            members = rpc.call(B, "tests.ensemble.dist._remote_fns:pg_members", "late", timeout=10)
            if members:
                break
        assert members == [local]  # our pid, back as itself
    finally:
        child.close()
        e.send(local, "bye")


def test_pg_takes_local_processes_only(scope):
    with pytest.raises(Badarg):
        pg.join("g", "not a pid")
    with pytest.raises(Badarg):
        pg.join("g", [])
