"""spawn_on and rpc between two nodes in two OS processes: only what ``allow`` lets in runs."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import Badarg, NOMATCH, TIMEOUT, dist, rpc

from ._cluster import B, WIRES


@pytest.fixture(params=WIRES)
def wire(request):
    """Every test here with two nodes runs over TCP and over TLS."""
    return request.param


FNS = "tests.ensemble.dist._remote_fns"


def test_rpc_call_answers_the_value_and_runs_on_the_other_node(node_a, child_b):
    assert 5 == rpc.call(B, f"{FNS}:add", 2, 3, timeout=10)
    assert 7 == rpc.call(B, "operator:add", 3, 4, timeout=10)
    node, pid = rpc.call(B, f"{FNS}:whoami", timeout=10)
    assert node == B and pid.node == B


def test_exceptions_and_exits_come_back_typed(node_a, child_b):
    with pytest.raises(rpc.RpcError) as info:
        rpc.call(B, f"{FNS}:boom", "bad input", timeout=10)
    assert info.value.kind == "exception"
    assert info.value.reason.type_name == "ValueError" and info.value.reason.message == "bad input"
    with pytest.raises(rpc.RpcError) as info:
        rpc.call(B, f"{FNS}:leave", ("shutdown", 1), timeout=10)
    assert (info.value.kind, info.value.reason) == ("exit", ("shutdown", 1))


def test_nothing_outside_allow_runs_and_the_refusal_is_clear(node_a, child_b):
    with pytest.raises(rpc.RpcError) as info:
        rpc.call(B, "os:getpid", timeout=10)
    assert (info.value.kind, info.value.reason) == ("not_allowed", "os:getpid")
    with pytest.raises(dist.SpawnError) as info:
        e.spawn_on(B, "os:system", "echo pwned")
    assert info.value.reason == ("not_allowed", "os:system")
    with pytest.raises(rpc.RpcError) as info:
        rpc.call(B, f"{FNS}:no_such_function", timeout=10)
    assert (info.value.kind, info.value.reason) == ("undefined", f"{FNS}:no_such_function")
    with pytest.raises(Badarg):
        rpc.call(B, "not a function name")


def test_a_module_entry_lets_in_what_the_module_defines_and_no_path_through_another_module(node_a, child_b):
    """B's allow names the module _remote_fns: its own functions run; a function it imported
    (``from operator import mul``) and a path through a module it imported (``e.node``, and so
    ``e.dist.epmd.os.system``) are undefined there, while an entry naming a function itself
    (``operator:add``) lets that one in wherever it is defined."""
    assert rpc.call(B, f"{FNS}:add", 2, 3, timeout=10) == 5
    for name in (f"{FNS}:mul", f"{FNS}:e.node", f"{FNS}:e.dist.epmd.os.getpid"):
        with pytest.raises(rpc.RpcError) as info:
            rpc.call(B, name, 2, 3, timeout=10)
        assert (info.value.kind, info.value.reason) == ("undefined", name)
    assert rpc.call(B, "operator:add", 2, 3, timeout=10) == 5


def test_a_timeout_kills_the_remote_process(node_a, child_b):
    me = e.self()
    with pytest.raises(rpc.RpcError) as info:
        rpc.call(B, f"{FNS}:wait_forever", me, timeout=0.3)
    assert info.value.kind == "timeout"
    waiting = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "waiting" else NOMATCH, timeout=10)
    ref = e.monitor(waiting)  # after the kill: it is gone (noproc), or going (killed)
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=10)
    assert down is not TIMEOUT and down[4] in ("killed", "noproc")


def test_spawn_on_with_link_and_monitor(node_a, child_b):
    pid, ref = e.spawn_on(B, f"{FNS}:linked_then_wait", monitor=True)
    assert pid.node == B
    e.exit(pid, "stop_now")
    assert ("DOWN", ref, "process", pid, "stop_now") == e.receive(
        lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=10)
    e.trap_exit(True)
    try:
        linked = e.spawn_on(B, f"{FNS}:linked_then_wait", link=True)
        e.exit(linked, "going")
        assert ("EXIT", linked, "going") == e.receive(
            lambda m: m if type(m) is tuple and m[0] == "EXIT" and m[1] == linked else NOMATCH, timeout=10)
    finally:
        e.trap_exit(False)


def test_spawn_on_with_monitor_watches_from_before_the_first_step(node_a, child_b):
    pid, ref = e.spawn_on(B, f"{FNS}:leave", "at_once", monitor=True)
    assert ("DOWN", ref, "process", pid, "at_once") == e.receive(
        lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=10)


def test_a_refused_spawn_on_with_monitor_leaves_no_monitor_and_no_down(node_a, child_b):
    from ensemble.dist import SpawnError

    with pytest.raises(SpawnError):
        e.spawn_on(B, "os:getcwd", monitor=True)
    with pytest.raises(SpawnError):
        e.spawn_on("nobody@127.0.0.1", f"{FNS}:add", 1, 1, monitor=True)
    assert e.process_info(e.self(), "monitors") == []
    assert e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" else NOMATCH, timeout=0) is TIMEOUT


def test_rpc_to_an_unreachable_node_and_multicall(node_a, child_b):
    with pytest.raises(rpc.RpcError) as info:
        rpc.call("nobody@127.0.0.1", f"{FNS}:add", 1, 1, timeout=10)
    assert info.value.kind == "noconnection"
    got = rpc.multicall([B, e.node(), "nobody@127.0.0.1"], f"{FNS}:add", 1, 2, timeout=20)
    assert got[0] == ("ok", 3) and got[1] == ("ok", 3)
    assert got[2][0] == "error" and got[2][1].kind == "noconnection"
    assert rpc.cast(B, f"{FNS}:add", 1, 2) is True


def test_rpc_on_this_node_needs_no_distribution():
    assert 3 == rpc.call(e.node(), f"{FNS}:add", 1, 2, timeout=10)


def test_a_call_that_times_out_before_its_spawn_is_answered_kills_the_process_and_leaves_no_message(node_a, child_b):
    """erpc's spawn_request_abandon: with a timeout that passes before the other node has even
    answered the spawn, the process it starts is killed when that answer comes, and neither the
    answer nor a result that raced the kill is left in the caller's mailbox."""
    me = e.self()
    with pytest.raises(rpc.RpcError) as err:
        rpc.call(B, f"{FNS}:wait_forever", me, timeout=0)
    assert err.value.kind == "timeout"
    pid = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "waiting" else NOMATCH, timeout=10)
    ref = e.monitor(pid)
    down = e.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[0] == "DOWN" and m[1] == ref else NOMATCH,
                     timeout=10)
    assert down[4] in ("killed", "noproc")  # noproc: killed before the monitor reached B

    with pytest.raises(rpc.RpcError):
        rpc.call(B, f"{FNS}:add", 1, 2, timeout=0)  # it runs at once on B: its result races nothing
    assert rpc.call(B, f"{FNS}:add", 2, 2, timeout=10) == 4  # answered after the first's result
    from ensemble.dist.node import RESULT, SPAWNED

    stray = e.receive(lambda m: m if type(m) is tuple and m and m[0] in (RESULT, SPAWNED) else NOMATCH, timeout=0)
    assert stray is TIMEOUT
    assert not dist.NODE_STATE.node.abandoned  # both answers came and were dropped
