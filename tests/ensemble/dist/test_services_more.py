"""rpc, pg and global_ between two nodes in two OS processes, beyond test_rpc/test_pg/test_global:
multicall's one deadline, cast running remotely, pg scopes other than the default and pg.monitor
callers that exit, and global_ registrations that race and global_.send."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import ensemble as e
from ensemble import Badarg, NOMATCH, TIMEOUT, global_, pg, rpc
from ensemble import sys as esys
from ensemble import timer

from ._cluster import B, CHILD, COOKIE, Child

FNS = "tests.ensemble.dist._remote_fns"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _take(pred, timeout=10):
    """The first message ``pred`` accepts; fails the test when none comes in ``timeout``."""
    got = e.receive(lambda m: m if pred(m) else NOMATCH, timeout=timeout)
    assert got is not TIMEOUT, "no such message came"
    return got


def _down(ref, timeout=10):
    return _take(lambda m: type(m) is tuple and len(m) == 5 and m[0] == "DOWN" and m[1] == ref, timeout)


# -- rpc ---------------------------------------------------------------------------------------


def _releaser(delay):
    """Stands for a function that takes ``delay`` seconds: each ``_remote_fns.wait_forever`` that
    reports ``("waiting", pid)`` here is let go (sent a message) ``delay`` seconds later."""
    while True:
        m = e.receive()
        if m == "stop":
            return
        if type(m) is tuple and m[0] == "waiting":
            timer.send_after(delay, ("release", m[1]))
        elif type(m) is tuple and m[0] == "release":
            e.send(m[1], "go")


def _collector(report_to, release_here=False):
    """Like :func:`_releaser`, but lets go none (with ``release_here``: only those of this node,
    at once): reports each other waiting pid to ``report_to``."""
    while True:
        m = e.receive()
        if m == "stop":
            return
        if release_here and m[1].node == e.node():
            e.send(m[1], "go")
        else:
            e.send(report_to, m)


def test_multicall_sends_every_request_before_awaiting_any_answer(node_a, child_b):
    """Both calls are running at once, each waiting for a message only the test sends after it
    saw both start: sequential calls would never get the second one started."""
    me = e.self()
    watcher = e.spawn(_collector, me)
    caller = e.spawn(lambda: e.send(me, ("multicall", rpc.multicall(
        [B, e.node()], f"{FNS}:wait_forever", watcher, timeout=20))))
    try:
        first = _take(lambda m: type(m) is tuple and m[0] == "waiting")[1]
        second = _take(lambda m: type(m) is tuple and m[0] == "waiting")[1]
        assert {first.node, second.node} == {B, e.node()}
        e.send(first, "go")
        e.send(second, "go")
        assert [("ok", None), ("ok", None)] == _take(lambda m: type(m) is tuple and m[0] == "multicall")[1]
    finally:
        e.exit(caller, "kill")
        e.send(watcher, "stop")


def test_multicall_timeout_is_one_deadline_for_all_nodes(node_a, child_b):
    """Timeout T, two calls (one on each node) that each take 0.6*T: both answer, within about
    one T; run one after the other under one deadline the second would time out."""
    t = 1.5
    releaser = e.spawn(_releaser, 0.6 * t)
    try:
        started = time.monotonic()
        got = rpc.multicall([B, e.node()], f"{FNS}:wait_forever", releaser, timeout=t)
        took = time.monotonic() - started
    finally:
        e.send(releaser, "stop")
    assert got == [("ok", None), ("ok", None)]
    assert 0.6 * t <= took < t


def test_multicall_answers_in_node_order_and_kills_what_missed_the_deadline(node_a, child_b):
    """Results come in the order of the nodes (whatever order they arrive in), each typed as
    call's; a call still running at the deadline is an RpcError "timeout" and its process is
    killed, while the fast calls of the same multicall answer."""
    here = e.node()
    got = rpc.multicall([B, here, B, "nobody@127.0.0.1", here], f"{FNS}:whoami", timeout=10)
    assert [r[0] for r in got] == ["ok", "ok", "ok", "error", "ok"]
    assert [got[i][1][0] for i in (0, 1, 2, 4)] == [B, here, B, here]
    assert got[3][1].kind == "noconnection"
    got = rpc.multicall([B, here], f"{FNS}:boom", "bad", timeout=10)
    assert [(r[0], r[1].kind) for r in got] == [("error", "exception")] * 2
    assert (got[0][1].reason.type_name, got[0][1].reason.message) == ("ValueError", "bad")  # from B
    assert isinstance(got[1][1].reason, ValueError)  # raised here: the exception itself
    assert rpc.multicall([], f"{FNS}:whoami", timeout=1) == []
    with pytest.raises(Badarg):
        rpc.multicall([B], "not a function name", timeout=1)

    me = e.self()
    watcher = e.spawn(_collector, me, True)  # the call here ends at once, B's never
    try:
        assert rpc.multicall([B, here, B], f"{FNS}:add", 1, 2, timeout=10) == [("ok", 3)] * 3
        started = time.monotonic()
        got = rpc.multicall([B, here], f"{FNS}:wait_forever", watcher, timeout=0.5)
        took = time.monotonic() - started
        assert got[0][0] == "error" and got[0][1].kind == "timeout" and got[1] == ("ok", None)
        assert 0.5 <= took < 5
        waiting = _take(lambda m: type(m) is tuple and m[0] == "waiting")[1]
        assert waiting.node == B
        assert _down(e.monitor(waiting))[4] in ("killed", "noproc")  # killed, or already gone
    finally:
        e.send(watcher, "stop")
    assert e.receive(lambda m: m if type(m) is tuple and m[0] in ("$ensemble.result", "$ensemble.spawned")
                     else NOMATCH, timeout=0) is TIMEOUT  # nothing of the rpcs is left behind


def test_rpc_cast_runs_the_function_on_the_other_node(node_a, child_b):
    """cast answers True at once, and the function does run there: it reports its pid (of node
    B) to this process, and a process spawned for the cast ends when it is done."""
    me = e.self()
    assert rpc.cast(B, f"{FNS}:wait_forever", me) is True
    remote = _take(lambda m: type(m) is tuple and m[0] == "waiting")[1]
    assert remote.node == B
    ref = e.monitor(remote)
    e.send(remote, "done")  # it returns: its process ends normally
    assert _down(ref)[4] == "normal"
    assert rpc.cast(e.node(), f"{FNS}:wait_forever", me) is True  # on this node too
    local = _take(lambda m: type(m) is tuple and m[0] == "waiting")[1]
    assert local.node == e.node()
    e.send(local, "done")
    assert rpc.cast(B, "os:getpid") is True  # not allowed there: nothing runs, cast says True anyway


# -- pg ----------------------------------------------------------------------------------------

SCOPE = "other_scope"

# Runs _node_child.py as B, but first arranges that when B becomes a node it also starts pg scope
# SCOPE and registers "scoped": ("join", from, group) makes a new process that joins group in
# SCOPE (answering ("scoped_joined", pid)); ("members", from, group) answers B's view:
# ("scoped_members", members in SCOPE, members in the default scope).
_SCOPED_CHILD = f"""
import runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, {REPO!r})
import ensemble as e
from ensemble import dist, pg

def scoped():
    while True:
        m = e.receive()
        if m[0] == "join":
            member = e.spawn(e.receive)
            pg.join(m[2], member, scope={SCOPE!r})
            e.send(m[1], ("scoped_joined", member))
        elif m[0] == "members":
            e.send(m[1], ("scoped_members", pg.get_members(m[2], scope={SCOPE!r}), pg.get_members(m[2])))

def start():
    pg.start({SCOPE!r})
    e.register("scoped", e.spawn(scoped))

dist.on_start(start)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class ScopedChild(Child):
    """Node B (tests/ensemble/dist/_node_child.py) that also runs pg scope SCOPE."""

    def __init__(self, epmd_port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SCOPED_CHILD, CHILD, B, COOKIE, str(epmd_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        line = self._readline()
        assert line.startswith("ready "), line
        self.creation = int(line.split()[1])


def _stop_scope(pid):
    ref = e.monitor(pid)
    e.exit(pid, "kill")
    _down(ref, 5)


@pytest.fixture
def scopes(node_a):
    """The default scope and SCOPE on this node: their pids."""
    default, other = pg.start(), pg.start(SCOPE)
    yield default, other
    _stop_scope(other)
    _stop_scope(default)


def _event(ref, what, timeout=10):
    return _take(lambda m: type(m) is tuple and len(m) == 4 and m[0] == ref and m[1] == what, timeout)


def _b_view(group, expect):
    """B's view of ``group`` (members in SCOPE, in the default scope), once it is ``expect``:
    consistency is eventual, so ask again (a round trip each time) until it is, or 200 times."""
    got = None
    for _ in range(200):
        e.send(("scoped", B), ("members", e.self(), group))
        got = _take(lambda m: type(m) is tuple and m[0] == "scoped_members")[1:]
        if got == expect:
            break
    return got


def test_a_scope_other_than_the_default_is_separate_on_both_nodes(scopes, epmd_port):
    """Joins, leaves, members, groups and monitors of scope SCOPE are its own, on this node and on
    B: the default scope's group of the same name is another group, and B's members of each
    reach this node in their own scope only (and drop from it when B goes down)."""
    in_other, in_default, only_other = e.spawn(e.receive), e.spawn(e.receive), e.spawn(e.receive)
    assert "ok" == pg.join("g", in_other, scope=SCOPE)
    assert "ok" == pg.join("g", in_default)
    assert "ok" == pg.join("just_there", only_other, SCOPE)
    ref_o, members_o = pg.monitor("g", SCOPE)
    ref_d, members_d = pg.monitor("g")
    assert (members_o, members_d) == ([in_other], [in_default])
    assert "just_there" in pg.which_groups(SCOPE) and "just_there" not in pg.which_groups()
    assert pg.get_members("just_there") == [] and pg.get_local_members("g", SCOPE) == [in_other]
    child = ScopedChild(epmd_port)
    try:
        me = e.self()
        e.send(("scoped", B), ("join", me, "g"))
        remote_o = _take(lambda m: type(m) is tuple and m[0] == "scoped_joined")[1]
        assert _event(ref_o, "join")[3] == [remote_o]
        e.send(("echo", B), ("pg_join", me, "g"))  # B joins g in the default scope
        remote_d = _take(lambda m: type(m) is tuple and m[0] == "pg_joined")[1]
        assert _event(ref_d, "join")[3] == [remote_d]
        assert pg.get_members("g", SCOPE) == [in_other, remote_o]
        assert pg.get_members("g") == [in_default, remote_d]
        assert pg.get_local_members("g", SCOPE) == [in_other] and pg.get_local_members("g") == [in_default]
        # B sees the same split: its own first, then ours
        assert _b_view("g", ([remote_o, in_other], [remote_d, in_default])) == (
            [remote_o, in_other], [remote_d, in_default])
        assert "not_joined" == pg.leave("g", in_other)  # not in the default scope's g
        assert "ok" == pg.leave("g", in_other, SCOPE)
        assert _event(ref_o, "leave")[3] == [in_other]
        assert _b_view("g", ([remote_o], [remote_d, in_default])) == ([remote_o], [remote_d, in_default])
        assert pg.get_members("g") == [in_default, remote_d]
        child.kill()  # B's members drop from each scope, each seen by that scope's monitor
        assert _event(ref_o, "leave")[3] == [remote_o]
        assert _event(ref_d, "leave")[3] == [remote_d]
        assert pg.get_members("g", SCOPE) == [] and pg.get_members("g") == [in_default]
    finally:
        child.close()
        for p in (in_other, in_default, only_other):
            e.send(p, "bye")
    # no join was told twice (once by B's join, again by the exchange of members at nodeup)
    assert e.receive(lambda m: m if type(m) is tuple and len(m) == 4 and m[0] in (ref_o, ref_d)
                     and m[1] == "join" else NOMATCH, timeout=0) is TIMEOUT


def _watcher(report_to, group, scope):
    """pg.monitor ``group`` twice, report both refs, then end at the first message."""
    ref1, _ = pg.monitor(group, scope)
    ref2, _ = pg.monitor(group, scope)
    e.send(report_to, ("watching", e.self(), ref1, ref2))
    e.receive()


def _watchers(scope_pid, group):
    """The (pid, ref) subscriptions ``group`` has in the scope (its state, as sys shows it)."""
    return set(esys.get_state(scope_pid).watchers.get(group, ()))


def test_a_pg_monitor_caller_that_exits_stops_watching(scopes):
    """The scope monitors each pg.monitor caller: one that exits is taken off its groups'
    watchers (and no longer monitored), so later joins are sent to it no more; pg.demonitor
    takes off one subscription and its monitor, the others stay."""
    default, other = scopes
    for scope_pid, scope in ((default, pg.DEFAULT_SCOPE), (other, SCOPE)):
        me = e.self()
        w = e.spawn(_watcher, me, "watched", scope)
        _, _, ref1, ref2 = _take(lambda m: type(m) is tuple and m[0] == "watching" and m[1] == w)
        assert _watchers(scope_pid, "watched") == {(w, ref1), (w, ref2)}
        assert e.process_info(scope_pid, "monitors").count(("process", w)) == 2
        ref_w = e.monitor(w)
        e.send(w, "exit now")
        assert _down(ref_w)[4] == "normal"
        # the scope's DOWN for w was queued when w exited, before this call: it is handled first
        member = e.spawn(e.receive)
        assert "ok" == pg.join("watched", member, scope)
        assert _watchers(scope_pid, "watched") == set()
        assert ("process", w) not in e.process_info(scope_pid, "monitors")
        assert "watched" not in esys.get_state(scope_pid).watchers

        mine, _ = pg.monitor("watched", scope)
        other_ref, _ = pg.monitor("watched", scope)
        assert e.process_info(scope_pid, "monitors").count(("process", me)) == 2
        assert "ok" == pg.demonitor("watched", mine, scope)
        assert _watchers(scope_pid, "watched") == {(me, other_ref)}
        assert e.process_info(scope_pid, "monitors").count(("process", me)) == 1
        assert "ok" == pg.leave("watched", member, scope)
        assert _event(other_ref, "leave")[3] == [member]
        assert "ok" == pg.demonitor("watched", other_ref, scope)
        assert _watchers(scope_pid, "watched") == set()
        assert ("process", me) not in e.process_info(scope_pid, "monitors")
        e.send(member, "bye")
    assert e.receive(lambda m: m if type(m) is tuple and len(m) == 4 and m[1] in ("join", "leave")
                     else NOMATCH, timeout=0) is TIMEOUT  # nothing came under a ref no longer held


# -- global_ -----------------------------------------------------------------------------------


def _register_racer(report_to, name):
    e.receive()  # the start signal
    e.send(report_to, ("a_registered", name, global_.register_name(name, e.self()), e.self()))
    e.receive()


def test_concurrent_registrations_from_two_nodes_have_exactly_one_winner(node_a, child_b):
    """For each of several names, B registers it (for a process of its own) while three
    processes here register it too, all at once (they find it locked, by each other and by B,
    and back off): exactly one "yes" per name, and both nodes bind the name to that winner."""
    me = e.self()
    e.send(("echo", B), ("ping", me, "up"))  # connected first: each registration locks both nodes
    _take(lambda m: type(m) is tuple and m[0] == "pong")
    names = [f"race{i}" for i in range(8)]
    racers = [e.spawn(_register_racer, me, n) for n in names for _ in range(3)]
    for n in names:
        e.send(("echo", B), ("global_register", me, n))
    for r in racers:
        e.send(r, "go")
    answers = {n: [] for n in names}
    b_answers = []  # B's echo registers the names one after another: its answers in name order
    for _ in range(len(names) * 4):
        m = _take(lambda m: type(m) is tuple and m[0] in ("a_registered", "global_registered"), 30)
        if m[0] == "a_registered":
            answers[m[1]].append((m[2], m[3]))
        else:
            b_answers.append((m[1], m[2]))
    try:
        assert len(b_answers) == len(names)
        for n, b_answer in zip(names, b_answers):
            tries = answers[n] + [b_answer]
            winners = [pid for answer, pid in tries if answer == "yes"]
            assert len(winners) == 1 and sorted(a for a, _ in tries) == ["no", "no", "no", "yes"], (n, tries)
            # every registrar bound it before the winner heard "yes"
            assert global_.whereis_name(n) == winners[0]
            assert rpc.call(B, f"{FNS}:global_whereis", n, timeout=10) == winners[0]
    finally:
        for n in names:
            global_.unregister_name(n)
        for r in racers:
            e.send(r, "bye")
        for _, pid in b_answers:
            e.send(pid, "bye")


def test_global_send_delivers_to_the_bound_process_and_refuses_an_unknown_name(node_a, child_b):
    """global_.send reaches the process a name is bound to, on either node, and answers its
    pid; a name bound to nothing raises Badarg (global:send exits with badarg), before and
    after the name's life."""
    me = e.self()
    e.send(("echo", B), ("ping", me, 0))
    echo_b = _take(lambda m: type(m) is tuple and m[0] == "pong")[2]
    with pytest.raises(Badarg):
        global_.send("echo_b", ("ping", me, 1))
    assert "yes" == global_.register_name("echo_b", echo_b)  # B's echo, bound from here
    try:
        assert global_.send("echo_b", ("ping", me, 2)) == echo_b
        assert ("pong", B, echo_b, 2) == _take(lambda m: type(m) is tuple and m[0] == "pong")
        assert "yes" == global_.register_name("me_here", me)
        # B sends to our global name: its echo forwards to ("global", "me_here"), resolved there
        assert global_.send("echo_b", ("fwd", ("global", "me_here"), "via B")) == echo_b
        assert "via B" == _take(lambda m: m == "via B")
    finally:
        global_.unregister_name("echo_b")
        global_.unregister_name("me_here")
    with pytest.raises(Badarg):
        global_.send("echo_b", ("ping", me, 3))
    assert e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" else NOMATCH, timeout=0) is TIMEOUT
