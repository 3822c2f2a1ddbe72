"""A dispatcher of OS processes: ``dispatcher.define(name, processes=n)`` (issue 14).

Its carriers are carrier nodes, local OS processes that ensemble starts on first use and stops
with the dispatcher; a spawn there runs an importable function in another OS process, linked
and monitored like any process of another node.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import subprocess
import sys

import gevent.select
import pytest

import ensemble as e
from ensemble import dispatcher
from ensemble.decide.carrier_nodes import NotImportable
from ensemble.dist.os_carriers import OsPool
from ensemble.dist.wire_types import WireFunction

from . import _os_fns
from ._cluster import B

_names = itertools.count()
WAIT = 30.0  # carrier nodes start a Python each: generous on a loaded machine


@pytest.fixture
def cpu(node_a):
    name = f"cpu{next(_names)}"
    dispatcher.define(name, processes=2)
    yield name
    dispatcher.shutdown(name)


def _pool(name: str) -> OsPool:
    from ensemble import _pools

    return _pools.POOLS[name]


def _wait_exit(os_pid: int, timeout: float = WAIT) -> bool:
    """Wait (on a pidfd, no polling) until the OS process ``os_pid`` has exited."""
    try:
        fd = os.pidfd_open(os_pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = gevent.select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def _got(tag: str):
    return e.receive(lambda m: m if type(m) is tuple and m and m[0] == tag else e.NOMATCH, timeout=WAIT)


# -- define ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [{}, {"size": 2, "processes": 2}, {"processes": 0},
                                    {"processes": -1}, {"processes": 1.5}, {"processes": True}])
def test_define_takes_exactly_one_positive_count(kwargs):
    with pytest.raises(e.Badarg):
        dispatcher.define("cpu-bad", **kwargs)
    assert "cpu-bad" not in dispatcher.dispatchers()


def test_a_started_dispatcher_of_processes_cannot_be_redefined(cpu):
    e.spawn(_os_fns.report_pid, e.self(), "here", dispatcher=cpu)
    assert _got("here") is not e.TIMEOUT
    assert cpu in dispatcher.dispatchers()
    with pytest.raises(e.Badarg):
        dispatcher.define(cpu, processes=3)


# -- spawning there -------------------------------------------------------------------------


def test_processes_run_in_other_os_processes_round_robin(cpu):
    for i in range(4):
        e.spawn(_os_fns.report_pid, e.self(), "here", dispatcher=cpu)
    got = [_got("here") for _ in range(4)]
    assert e.TIMEOUT not in got
    os_pids = [g[1] for g in got]
    assert os.getpid() not in os_pids
    assert len(set(os_pids)) == 2, "two carrier nodes, each given two processes"
    nodes = {g[2] for g in got}
    assert len(nodes) == 2 and e.node() not in nodes
    for g in got:
        assert g[3].node == g[2], "the process's pid is a pid of its carrier node"
    assert nodes <= set(e.nodes())


def test_the_carriers_are_the_dispatchers_size(node_a):
    name = f"cpu{next(_names)}"
    dispatcher.define(name, processes=3)
    try:
        assert dispatcher.carriers(name) == []
        for i in range(6):
            e.spawn(_os_fns.report_pid, e.self(), "here", dispatcher=name)
        got = [_got("here") for _ in range(6)]
        assert len({g[1] for g in got}) == 3
        assert sorted(dispatcher.carriers(name)) == sorted({g[2] for g in got})
    finally:
        dispatcher.shutdown(name)


@pytest.mark.parametrize("fn", [lambda: None, _os_fns.crash.__get__(1), _os_fns.Unimportable()])
def test_a_function_not_found_by_name_is_refused_and_nothing_runs(cpu, fn):
    with pytest.raises(NotImportable):
        e.spawn(fn, dispatcher=cpu)


def test_a_nested_function_is_refused(cpu):
    def nested():
        return None

    with pytest.raises(e.Badarg):
        e.spawn(nested, dispatcher=cpu)


def test_a_name_cannot_be_given(cpu):
    with pytest.raises(e.Badarg):
        e.spawn(_os_fns.report_pid, e.self(), "x", dispatcher=cpu, name="worker")
    assert e.whereis("worker") is None


def test_a_value_the_wire_cannot_carry_raises_at_the_spawn(cpu):
    with pytest.raises(Exception) as info:
        e.spawn(_os_fns.report_pid, e.self(), object(), dispatcher=cpu)
    assert not isinstance(info.value, SystemExit)
    e.spawn(_os_fns.report_pid, e.self(), "after", dispatcher=cpu)
    assert _got("after") is not e.TIMEOUT, "the connection is unharmed"


def test_trap_exit_and_state_options_reach_the_process(cpu):
    e.spawn(_os_fns.options, e.self(), dispatcher=cpu, trap_exit=True, state={"n": 1})
    assert _got("options") == ("options", True, {"n": 1})
    e.spawn(_os_fns.options, e.self(), dispatcher=cpu)
    assert _got("options") == ("options", False, "no state cell")


def test_functions_partials_and_registered_values_cross_to_a_carrier_node(cpu):
    e.spawn(_os_fns.apply, e.self(), functools.partial(_os_fns.shift, 10), _os_fns.Point(1, 2),
            dispatcher=cpu)
    assert _got("applied") == ("applied", _os_fns.Point(11, 2))


def test_a_function_arrives_only_where_it_is_let_in(child_b):
    # b's allow does not name _os_fns: there the function is a WireFunction, which b forwards
    # back as it came; here (allow nothing, b not trusted) it is a WireFunction too.
    e.send(("echo", B), ("fwd", e.self(), ("fn", _os_fns.crash)))
    got = _got("fn")
    assert got == ("fn", WireFunction("tests.ensemble.dist._os_fns:crash"))
    with pytest.raises(e.Badarg):
        got[1]("x")


# -- links, monitors, exit signals ----------------------------------------------------------


def test_a_crash_there_reaches_a_link_here(cpu):
    e.trap_exit(True)
    try:
        pid = e.spawn_link(_os_fns.crash, "boom", dispatcher=cpu)
        got = e.receive(lambda m: m if type(m) is tuple and m[0] == "EXIT" and m[1] == pid else e.NOMATCH,
                        timeout=WAIT)
        assert got is not e.TIMEOUT
        reason = got[2]
        assert getattr(reason, "type_name", None) == "ValueError" and "boom" in str(reason)
    finally:
        e.trap_exit(False)


def test_spawn_monitor_is_in_place_before_the_process_runs(cpu):
    pid, ref = e.spawn_monitor(_os_fns.crash, "at once", dispatcher=cpu)
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else e.NOMATCH,
                     timeout=WAIT)
    assert down[3] == pid
    reason = down[4]
    assert getattr(reason, "type_name", None) == "ValueError", f"the crash itself, not noproc: {reason!r}"


def test_monitor_and_kill_across_the_carrier(cpu):
    pid, ref = e.spawn_monitor(_os_fns.wait_for_message, e.self(), dispatcher=cpu)
    waiting = _got("waiting")
    assert waiting[1] == pid
    e.exit(pid, "kill")
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else e.NOMATCH,
                     timeout=WAIT)
    assert down == ("DOWN", ref, "process", pid, "killed")


def test_messages_reach_the_process_there(cpu):
    pid = e.spawn(_os_fns.wait_for_message, e.self(), dispatcher=cpu)
    assert _got("waiting")[1] == pid
    e.send(pid, ("hello", [1, 2, 3]))
    assert _got("got") == ("got", ("hello", [1, 2, 3]))


def test_a_worker_pool_spreads_its_batches_over_the_carrier_nodes(cpu):
    from constellation import worker_pool

    config = worker_pool.new(size=2, prefetch=50, initial_state=_os_fns.no_state,
                             handle_batch=functools.partial(_os_fns.sum_batch, e.self()),
                             dispatcher=cpu, timeout=WAIT)
    pool = worker_pool.start(config)
    worker_pool.push(pool, list(range(1000)))
    worker_pool.stop(pool)  # drains every accepted event
    batches = []
    while sum(b[2] for b in batches) < 1000:
        got = _got("batch")
        assert got is not e.TIMEOUT
        batches.append(got)
    assert sum(b[3] for b in batches) == sum(range(1000)), "every event handled once"
    assert all(b[2] <= 50 for b in batches), "no batch over prefetch"
    os_pids = {b[1] for b in batches}
    assert len(os_pids) == 2 and os.getpid() not in os_pids


def test_a_pool_with_a_handler_not_found_by_name_does_not_start(cpu):
    from constellation import worker_pool

    config = worker_pool.new(size=1, prefetch=5, initial_state=lambda slot: None,
                             handle_batch=_os_fns.sum_batch, dispatcher=cpu, timeout=WAIT)
    with pytest.raises(worker_pool.ActorStart):
        worker_pool.start(config)


# -- the carrier nodes' lives -----------------------------------------------------------------


def test_a_killed_carrier_node_gives_noconnection_and_is_replaced(cpu):
    pid, ref = e.spawn_monitor(_os_fns.wait_for_message, e.self(), dispatcher=cpu)
    _, _, os_pid = _got("waiting")
    old_nodes = {c.node for c in _pool(cpu).carriers}
    os.kill(os_pid, signal.SIGKILL)
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else e.NOMATCH,
                     timeout=WAIT)
    assert down == ("DOWN", ref, "process", pid, "noconnection")
    for _ in range(2):  # each carrier's turn comes: the dead one is started again
        e.spawn(_os_fns.report_pid, e.self(), "again", dispatcher=cpu)
    got = [_got("again") for _ in range(2)]
    assert os_pid not in {g[1] for g in got}
    new_nodes = {c.node for c in _pool(cpu).carriers}
    assert len(new_nodes - old_nodes) == 1, "the dead carrier came back under a new name"


def test_shutdown_stops_the_carrier_nodes_and_their_processes(node_a):
    name = f"cpu{next(_names)}"
    dispatcher.define(name, processes=2)
    pid, ref = e.spawn_monitor(_os_fns.wait_for_message, e.self(), dispatcher=name)
    _, _, os_pid = _got("waiting")
    dispatcher.shutdown(name)
    assert _wait_exit(os_pid)
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else e.NOMATCH,
                     timeout=WAIT)
    assert down == ("DOWN", ref, "process", pid, "noconnection")
    assert name not in dispatcher.dispatchers()
    with pytest.raises(e.Badarg):
        e.spawn(_os_fns.report_pid, e.self(), "x", dispatcher=name)


def test_only_the_parent_may_spawn_on_a_carrier_node(cpu, child_b):
    e.spawn(_os_fns.report_pid, e.self(), "here", dispatcher=cpu)
    carrier = _got("here")[2]
    e.send(("echo", B), ("spawn_on", e.self(), carrier, "tests.ensemble.dist._os_fns:crash", ["x"]))
    got = _got("spawn_on")
    assert got == ("spawn_on", ("refused", ("not_allowed", "tests.ensemble.dist._os_fns:crash")))


_PARENT_SCRIPT = r"""
import os, sys
sys.path.insert(0, {root!r})
import ensemble as e
from ensemble import dispatcher

def square(parent, x):  # defined in __main__: the carrier loads this script as __mp_main__
    e.send(parent, ("square", os.getpid(), x * x))

if __name__ == "__main__":
    dispatcher.define("cpu", processes=2)
    for x in (3, 4):
        e.spawn(square, e.self(), x, dispatcher="cpu")
    got = sorted(e.receive(timeout=60) for _ in range(2))
    print(" ".join(str(g[1]) for g in got), flush=True)
    print(got[0][2], got[1][2], flush=True)
    e.receive()  # wait to be killed
"""


def test_carrier_nodes_run_main_functions_and_die_with_a_killed_parent(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = tmp_path / "parent.py"
    script.write_text(_PARENT_SCRIPT.format(root=root))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        os_pids = [int(p) for p in parent.stdout.readline().split()]
        assert parent.stdout.readline().split() == ["9", "16"]
        assert len(os_pids) == 2 and parent.pid not in os_pids
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=WAIT)
    for os_pid in os_pids:
        assert _wait_exit(os_pid), f"carrier node {os_pid} outlived its SIGKILLed parent"
