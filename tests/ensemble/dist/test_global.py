"""global_ across two nodes in two OS processes: one name, one pid, on every node."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import Badarg, NOMATCH, TIMEOUT, gen_server, global_

from ._cluster import B, COOKIE, WIRES, Child, child_tls


def _registered(name):
    e.send(("echo", B), ("global_register", e.self(), name))
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == "global_registered" else NOMATCH, timeout=10)
    assert got is not TIMEOUT
    return got[1], got[2]


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_name_registered_on_one_node_is_seen_and_reached_from_the_other(node_a, child_b):
    answer, remote = _registered("ledger")
    assert answer == "yes" and remote.node == B
    assert global_.whereis_name("ledger") == remote
    assert "ledger" in global_.registered_names()
    assert "no" == global_.register_name("ledger", e.self())  # taken, by another pid
    ref = e.monitor(("global", "ledger"))
    e.send(("global", "ledger"), "stop")  # the member ends on any message: the name goes with it
    assert ("DOWN", ref, "process", remote, "normal") == e.receive(
        lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=10)
    for _ in range(200):  # the registrar hears the DOWN too: wait on a round trip each time
        if global_.whereis_name("ledger") is None:
            break
    assert global_.whereis_name("ledger") is None
    assert "yes" == global_.register_name("ledger", e.self())
    answer, _ = _registered("ledger")  # now taken by us, on B's side too
    assert answer == "no"
    assert "ok" == global_.unregister_name("ledger")


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_global_name_works_for_gen_server_calls(node_a, child_b):
    class Local(gen_server.GenServer):
        def init(self):
            return ("ok", 1)

        def handle_call(self, request, from_, n):
            return ("reply", ("local", n), n)

    pid = gen_server.start(Local)
    try:
        assert "yes" == global_.register_name("svc", pid)
        assert ("local", 1) == gen_server.call(("global", "svc"), "hi", 10)
    finally:
        global_.unregister_name("svc")
        gen_server.stop(pid)


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_when_partitions_merge_a_clash_keeps_the_lower_pid_and_kills_the_other(node_a, epmd_port, wire):
    from ensemble import rpc

    ours = e.spawn(e.receive)
    assert "yes" == global_.register_name("clash", ours)  # alone: nobody to ask
    child = Child(B, COOKIE, epmd_port, tls=child_tls(wire), env={"CHILD_GLOBAL": "clash"})  # B bound it too, alone
    try:
        ref = e.monitor(("claimant", B))  # connects: the two tables merge
        # a@... sorts before b@...: ours stays on both nodes and B's claimant is killed (its only
        # way to die; noproc if that happened before this monitor reached B)
        assert e.receive(lambda m: m if type(m) is tuple and m[1] == ref else NOMATCH,
                         timeout=10)[4] in ("killed", "noproc")
        assert global_.whereis_name("clash") == ours
        for _ in range(200):  # B's registrar settles too: each look is a round trip
            if rpc.call(B, "tests.ensemble.dist._remote_fns:global_whereis", "clash", timeout=10) == ours:
                break
        assert rpc.call(B, "tests.ensemble.dist._remote_fns:global_whereis", "clash", timeout=10) == ours
    finally:
        child.close()
        global_.unregister_name("clash")
        e.send(ours, "bye")


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_names_go_with_their_node(node_a, epmd_port, wire):
    child = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    try:
        _, remote = _registered("owned_by_b")
        assert global_.whereis_name("owned_by_b") == remote
        ref = e.monitor(remote)
        child.kill()
        e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=10)
        for _ in range(200):
            if global_.whereis_name("owned_by_b") is None:
                break
        assert global_.whereis_name("owned_by_b") is None
    finally:
        child.close()


def test_bad_input(node_a):
    with pytest.raises(Badarg):
        global_.register_name(3, e.self())
    with pytest.raises(Badarg):
        global_.send("nobody_has_this", "x")
    with pytest.raises(Badarg):
        e.send(("global", "nobody_has_this"), "x")
    ref = e.monitor(("global", "nobody_has_this"))
    assert "noproc" == e.receive(lambda m: m if type(m) is tuple and m[1] == ref else NOMATCH, timeout=5)[4]
