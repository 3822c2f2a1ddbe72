"""supervisor as OTP's: validation, start order, stopping children, strategies, intensity, simple_one_for_one,
auto_shutdown, the API's answers and errors, trees, dispatchers, parents and reports."""

from __future__ import annotations

from time import monotonic

import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, gen_server, logger, supervisor
from ensemble.gen_server import GenServer

HERE = [__name__]  # the modules which_children shows for a child started by a function of this file

# -- helpers ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def reports():
    """Collect every report made while the test runs (also keeps crash reports off stderr)."""
    got = []
    previous = logger.set_handler(got.append)
    yield got
    logger.set_handler(previous)


def sup_reports(reports, context=None):
    """The supervisor reports collected, of ``context`` if given."""
    return [
        r
        for r in list(reports)
        if r["kind"] == "supervisor_report" and (context is None or r["context"] == context)
    ]


def next_tagged(tag, timeout=2.0):
    """Take the oldest tuple message whose first element is ``tag`` (TIMEOUT if none comes)."""

    def matcher(m):
        if type(m) is tuple and m and type(m[0]) is str and m[0] == tag:
            return m
        return NOMATCH

    return e.receive(matcher, timeout=timeout)


def next_event(timeout=2.0):
    """Take the oldest ("started", tag, pid) or ("terminate", tag, reason): answer (kind, tag)."""

    def matcher(m):
        if type(m) is tuple and len(m) == 3 and m[0] in ("started", "terminate"):
            return (m[0], m[1])
        return NOMATCH

    return e.receive(matcher, timeout=timeout)


def events(n, timeout=2.0):
    """The next ``n`` start/terminate events, in arrival order."""
    return [next_event(timeout) for _ in range(n)]


def started(tag, timeout=2.0):
    """Wait for ("started", tag, pid) and answer the pid."""

    def matcher(m):
        if type(m) is tuple and len(m) == 3 and m[0] == "started" and m[1] == tag:
            return m[2]
        return NOMATCH

    got = e.receive(matcher, timeout=timeout)
    assert got is not TIMEOUT, f"{tag!r} did not start"
    return got


def terminated(tag, timeout=2.0):
    """Wait for ("terminate", tag, reason) and answer the reason (TIMEOUT if none comes)."""

    def matcher(m):
        if type(m) is tuple and len(m) == 3 and m[0] == "terminate" and m[1] == tag:
            return m[2]
        return NOMATCH

    return e.receive(matcher, timeout=timeout)


def down_of(ref, timeout=2.0):
    """Wait for the DOWN of monitor ``ref`` and answer its reason."""

    def matcher(m):
        if type(m) is tuple and len(m) == 5 and m[0] == "DOWN" and m[1] is ref:
            return m[4]
        return NOMATCH

    reason = e.receive(matcher, timeout=timeout)
    assert reason is not TIMEOUT, "no DOWN arrived"
    return reason


def go_matcher(m):
    if type(m) is tuple and len(m) == 2 and m[0] == "go":
        return m[1]
    return NOMATCH


class Child(GenServer):
    """A gen_server child: tells its owner ("started", tag, pid) from init and ("terminate", tag, reason).

    Calls: "get", ("put", v).  Casts: "crash" (raises), ("stop", reason).
    """

    def __init__(self, owner, tag, state=0):
        self.owner = owner
        self.tag = tag
        self.initial = state

    def init(self):
        e.send(self.owner, ("started", self.tag, e.self()))
        return ("ok", self.initial)

    def handle_call(self, request, from_, state):
        match request:
            case "get":
                return ("reply", state, state)
            case ("put", v):
                return ("reply", "ok", v)
        return ("reply", ("unknown", request), state)

    def handle_cast(self, request, state):
        match request:
            case "crash":
                raise RuntimeError(f"{self.tag} crashed")
            case ("stop", reason):
                return ("stop", reason, state)
        return ("noreply", state)

    def terminate(self, reason, state):
        e.send(self.owner, ("terminate", self.tag, reason))


def child(owner, tag, trap=True, dispatcher="default", **spec):
    """A spec whose start links a :class:`Child` (trapping exits unless ``trap`` is False)."""

    def start():
        return gen_server.start_link(Child(owner, tag), trap_exit=trap, dispatcher=dispatcher)

    return {"id": tag, "start": start, **spec}


def stubborn(owner, tag):
    """A process trapping exits that tells ("started", tag, pid), then ignores everything, forever."""
    e.trap_exit(True)
    e.send(owner, ("started", tag, e.self()))
    while True:
        msg = e.receive()
        e.send(owner, ("ignored", tag, msg))


def obeying(owner, tag, exit_with="shutdown", hold=False):
    """A trapping process: on an EXIT it tells ("got", tag, msg, its links), waits for ("go", _) if
    ``hold``, then exits with ``exit_with``."""
    e.trap_exit(True)
    e.send(owner, ("started", tag, e.self()))
    msg = e.receive(lambda m: m if type(m) is tuple and len(m) == 3 and m[0] == "EXIT" else NOMATCH)
    e.send(owner, ("got", tag, msg, e.process_info(e.self(), "links")))
    if hold:
        e.receive(go_matcher)
    e.exit(exit_with)


def spawned(fn, *args, **spec):
    """A spec whose start spawn_links ``fn(*args)`` (the id is args[1])."""
    return {"id": args[1], "start": lambda: e.spawn_link(fn, *args), **spec}


def in_process(fn, *args):
    """Run ``fn(*args)`` in a new process that sends ("done", value) to the caller."""
    me = e.self()
    return e.spawn(lambda: e.send(me, ("done", fn(*args))))


ONE = {"strategy": "one_for_one", "intensity": 3, "period": 5}


# -- validation ------------------------------------------------------------------------------

BAD_FLAGS = [
    ("not a dict", ("invalid_flags", "not a dict")),
    ({"strategy": "all_for_none"}, ("invalid_strategy", "all_for_none")),
    ({"intensity": -1}, ("invalid_intensity", -1)),
    ({"intensity": True}, ("invalid_intensity", True)),
    ({"period": 0}, ("invalid_period", 0)),
    ({"auto_shutdown": "sometimes"}, ("invalid_auto_shutdown", "sometimes")),
]


@pytest.mark.parametrize("flags, reason", BAD_FLAGS, ids=[repr(r) for _, r in BAD_FLAGS])
def test_bad_flags_fail_start_with_supervisor_data_and_start_nothing(flags, reason):
    """Bad flags raise StartError(("supervisor_data", r)); no process is left and no child start is called."""
    me = e.self()
    spec = {"id": "a", "start": lambda: e.send(me, ("called",))}
    before = e.processes()
    with pytest.raises(e.StartError) as info:
        supervisor.start(flags, [spec])
    assert ("supervisor_data", reason) == info.value.reason
    assert before == e.processes()
    assert TIMEOUT is next_tagged("called", timeout=0)


def start_fn():
    return None


SIG = {"id": "s", "start": start_fn, "restart": "transient", "significant": True}
BAD_SPECS = [
    ({}, [42], ("invalid_child_spec", 42)),
    ({}, [{"start": start_fn}], "missing_id"),
    ({}, [{"id": "a"}], "missing_start"),
    ({}, [{"id": "a", "start": "not callable"}], ("invalid_mfa", "not callable")),
    ({}, [{"id": "a", "start": start_fn, "restart": "sometimes"}], ("invalid_restart_type", "sometimes")),
    ({}, [{"id": "a", "start": start_fn, "type": "boss"}], ("invalid_child_type", "boss")),
    ({}, [{"id": "a", "start": start_fn, "shutdown": -1}], ("invalid_shutdown", -1)),
    ({}, [{"id": "a", "start": start_fn, "significant": "yes"}], ("invalid_significant", "yes")),
    ({}, [SIG], ("bad_combination", (("auto_shutdown", "never"), ("significant", True)))),
    (
        {"auto_shutdown": "any_significant"},
        [{**SIG, "restart": "permanent"}],
        ("bad_combination", (("restart", "permanent"), ("significant", True))),
    ),
    ({}, [{"id": "a", "start": start_fn}, {"id": "a", "start": start_fn}], ("duplicate_child_name", "a")),
]


@pytest.mark.parametrize("flags, specs, reason", BAD_SPECS, ids=[repr(r) for _, _, r in BAD_SPECS])
def test_bad_specs_fail_start_with_start_spec_and_start_nothing(flags, specs, reason):
    """A bad child spec raises StartError(("start_spec", r)); no process is left and no child started."""
    me = e.self()
    good = {"id": "first", "start": lambda: e.send(me, ("called",))}
    before = e.processes()
    with pytest.raises(e.StartError) as info:
        supervisor.start(flags, [good, *specs])
    assert ("start_spec", reason) == info.value.reason
    assert before == e.processes()
    assert TIMEOUT is next_tagged("called", timeout=0)


def test_simple_one_for_one_wants_exactly_one_spec():
    """simple_one_for_one with two specs raises StartError(("start_spec", ("bad_start_spec", specs)))."""
    specs = [{"id": "a", "start": start_fn}, {"id": "b", "start": start_fn}]
    e.self()  # the shell process exists before the count
    before = e.processes()
    with pytest.raises(e.StartError) as info:
        supervisor.start({"strategy": "simple_one_for_one"}, specs)
    assert ("start_spec", ("bad_start_spec", specs)) == info.value.reason
    assert before == e.processes()


@pytest.mark.parametrize("flags, specs, reason", BAD_SPECS[1:-1], ids=[repr(r) for _, _, r in BAD_SPECS[1:-1]])
def test_bad_specs_at_start_child_answer_the_error_and_start_nothing(flags, specs, reason):
    """start_child with a bad spec answers ("error", r); nothing starts and the children stay as they were."""
    me = e.self()
    sup = supervisor.start(flags, [child(me, "a")])
    started("a")
    before = (e.processes(), supervisor.which_children(sup))
    assert ("error", reason) == supervisor.start_child(sup, specs[-1])
    assert before == (e.processes(), supervisor.which_children(sup))


def test_start_child_with_an_id_taken_answers_already_started_or_present():
    """start_child of a running id answers ("already_started", pid); of a stopped one "already_present"."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")])
    pid = started("a")
    assert ("error", ("already_started", pid)) == supervisor.start_child(sup, child(me, "a"))
    assert "ok" == supervisor.terminate_child(sup, "a")
    assert ("error", "already_present") == supervisor.start_child(sup, child(me, "a"))
    assert [("a", None, "worker", HERE)] == supervisor.which_children(sup)


# -- get_childspec ----------------------------------------------------------------------------


def test_get_childspec_fills_the_defaults():
    """get_childspec answers the full spec: permanent, shutdown 5 for a worker, "infinity" for a supervisor."""
    me = e.self()
    w = child(me, "w")
    s = {"id": "s", "start": lambda: supervisor.start_link(ONE, []), "type": "supervisor"}
    sup = supervisor.start(ONE, [w, s])
    defaults = {"restart": "permanent", "significant": False}
    assert (
        ("ok", {"id": "w", "start": w["start"], **defaults, "shutdown": 5, "type": "worker"}),
        ("ok", {"id": "s", "start": s["start"], **defaults, "shutdown": "infinity", "type": "supervisor"}),
    ) == (supervisor.get_childspec(sup, "w"), supervisor.get_childspec(sup, "s"))
    assert ("error", "not_found") == supervisor.get_childspec(sup, "nobody")


def test_get_childspec_by_pid():
    """get_childspec takes a running child's pid as well as its id."""
    me = e.self()
    spec = child(me, "a", shutdown=1)
    sup = supervisor.start(ONE, [spec])
    ok, shown = supervisor.get_childspec(sup, started("a"))
    assert ("ok", "a", 1) == (ok, shown["id"], shown["shutdown"])


# -- starting ---------------------------------------------------------------------------------


def test_children_start_in_order():
    """Children start in the order given; which_children lists them in that order."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a"), child(me, "b"), child(me, "c")])
    assert [("started", "a"), ("started", "b"), ("started", "c")] == events(3)
    assert ["a", "b", "c"] == [c[0] for c in supervisor.which_children(sup)]


def test_start_args_are_applied():
    """A start (fn, args) is called with the args."""
    me = e.self()

    def start(tag, initial):
        return gen_server.start_link(Child(me, tag, initial))

    sup = supervisor.start(ONE, [{"id": "a", "start": (start, ("a", 7))}])
    assert 7 == gen_server.call(started("a"), "get")
    assert 1 == supervisor.count_children(sup)["active"]


def test_a_child_failing_to_start_stops_the_started_ones_in_reverse_order(reports):
    """A child that fails to start: the started ones stop last first, later ones never start, start raises."""
    me = e.self()
    specs = [
        child(me, "a"),
        child(me, "b"),
        {"id": "c", "start": lambda: ("error", "nope")},
        child(me, "d"),
    ]
    with pytest.raises(e.StartError) as info:
        supervisor.start(ONE, specs)
    assert ("shutdown", ("failed_to_start_child", "c", "nope")) == info.value.reason
    assert [("started", "a"), ("started", "b"), ("terminate", "b"), ("terminate", "a")] == events(4)
    assert TIMEOUT is next_event(timeout=0.05)
    assert [("c", "nope")] == [(r["child"]["id"], r["reason"]) for r in sup_reports(reports, "start_error")]


def test_a_child_start_raising_fails_start_with_the_exception():
    """A child start that raises fails the supervisor's start with that very exception."""
    exc = LookupError("no such thing")

    def start():
        raise exc

    with pytest.raises(e.StartError) as info:
        supervisor.start(ONE, [{"id": "x", "start": start}])
    assert ("shutdown", ("failed_to_start_child", "x", exc)) == info.value.reason
    assert exc is info.value.reason[1][2]


def test_a_gen_server_child_refusing_to_start_fails_with_its_reason():
    """A gen_server child whose init stops with r fails the start with ("failed_to_start_child", id, r)."""

    class Refusing(GenServer):
        def init(self):
            return ("stop", "refused")

    with pytest.raises(e.StartError) as info:
        supervisor.start(ONE, [{"id": "r", "start": lambda: gen_server.start_link(Refusing())}])
    assert ("shutdown", ("failed_to_start_child", "r", "refused")) == info.value.reason


@pytest.mark.parametrize("restart, kept", [("permanent", [("a", None, "worker", HERE)]), ("temporary", [])])
def test_a_child_that_ignores_is_kept_unless_temporary(restart, kept):
    """A start answering "ignore" starts no process: the spec stays with pid None, unless temporary."""
    sup = supervisor.start(ONE, [{"id": "a", "start": lambda: "ignore", "restart": restart}])
    assert kept == supervisor.which_children(sup)
    assert ("ok", None) == supervisor.start_child(sup, {"id": "b", "start": lambda: None, "restart": restart})
    assert [*kept, *[("b", None, "worker", HERE) for _ in kept]] == supervisor.which_children(sup)


def test_start_link_links_the_supervisor_to_the_caller():
    """start_link links the supervisor to its caller, and each child to the supervisor."""
    me = e.self()
    e.trap_exit(True)  # the teardown's kill must not reach the test's greenlet
    sup = supervisor.start_link(ONE, [child(me, "a")])
    pid = started("a")
    assert ({me, pid}, [sup]) == (set(e.process_info(sup, "links")), e.process_info(pid, "links"))


def test_a_named_supervisor_answers_by_name():
    """A supervisor started with a name is reachable by it."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")], name="the_sup")
    assert (sup, 1) == (e.whereis("the_sup"), supervisor.count_children("the_sup")["active"])


# -- stopping a child -------------------------------------------------------------------------


def test_terminate_child_unlinks_then_sends_shutdown():
    """A child is unlinked before it gets ("EXIT", sup, "shutdown"); it is stopped and its spec kept."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(obeying, me, "o")])
    pid = started("o")
    assert [sup] == e.process_info(pid, "links")
    assert "ok" == supervisor.terminate_child(sup, "o")
    assert ("got", "o", ("EXIT", sup, "shutdown"), []) == next_tagged("got")
    assert "shutdown" == e.exit_reason(pid, timeout=2)
    assert [("o", None, "worker", HERE)] == supervisor.which_children(sup)


def test_a_trapping_gen_server_child_terminates_with_shutdown(reports):
    """terminate_child runs a trapping gen_server child's terminate with "shutdown"; nothing is reported."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")])
    pid = started("a")
    assert "ok" == supervisor.terminate_child(sup, pid)
    assert "shutdown" == terminated("a", timeout=0)
    assert [] == sup_reports(reports)


def test_a_child_ignoring_shutdown_is_killed_after_its_shutdown_time():
    """A child that traps and never exits is killed once its shutdown time (0.05 s) has passed."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(stubborn, me, "s", shutdown=0.05)])
    pid = started("s")
    t0 = monotonic()
    assert "ok" == supervisor.terminate_child(sup, "s")
    assert monotonic() - t0 >= 0.05
    assert "killed" == e.exit_reason(pid, timeout=0)
    assert ("ignored", "s", ("EXIT", sup, "shutdown")) == next_tagged("ignored", timeout=0)


def test_a_child_killed_after_its_shutdown_time_is_reported(reports):
    """A child killed after its shutdown time is reported as shutdown_error with reason "killed" (OTP)."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(stubborn, me, "s", shutdown=0.05)])
    started("s")
    supervisor.terminate_child(sup, "s")
    assert [("s", "killed")] == [(r["child"]["id"], r["reason"]) for r in sup_reports(reports, "shutdown_error")]


def test_brutal_kill_kills_at_once(reports):
    """shutdown "brutal_kill" kills a trapping child at once: its terminate never runs; nothing reported."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a", shutdown="brutal_kill")])
    pid = started("a")
    assert "ok" == supervisor.terminate_child(sup, "a")
    assert "killed" == e.exit_reason(pid, timeout=0)
    assert TIMEOUT is terminated("a", timeout=0.05)
    assert [] == sup_reports(reports)


def test_infinity_waits_for_the_child():
    """shutdown "infinity" waits as long as the child takes: terminate_child returns only once it exits."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(obeying, me, "o", "shutdown", True, shutdown="infinity")])
    pid = started("o")
    in_process(supervisor.terminate_child, sup, "o")
    assert ("got", "o", ("EXIT", sup, "shutdown"), []) == next_tagged("got")
    assert TIMEOUT is next_tagged("done", timeout=0.15)
    assert e.is_alive(pid)
    e.send(pid, ("go", None))
    assert ("done", "ok") == next_tagged("done")
    assert "shutdown" == e.exit_reason(pid, timeout=0)


def test_a_child_stopping_with_another_reason_is_reported(reports):
    """A child that exits with another reason than "shutdown" when stopped is reported as shutdown_error."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(obeying, me, "o", "went astray")])
    started("o")
    assert "ok" == supervisor.terminate_child(sup, "o")
    assert [("o", "went astray")] == [(r["child"]["id"], r["reason"]) for r in sup_reports(reports, "shutdown_error")]


def test_a_transient_child_exiting_normal_when_stopped_is_not_reported(reports):
    """A transient child that exits "normal" when told to shut down is not reported (OTP)."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(obeying, me, "o", "normal", restart="transient")])
    started("o")
    assert "ok" == supervisor.terminate_child(sup, "o")
    assert [] == sup_reports(reports, "shutdown_error")


def test_a_permanent_child_exiting_normal_when_stopped_is_reported(reports):
    """A permanent child that exits "normal" when told to shut down is reported as shutdown_error normal."""
    me = e.self()
    sup = supervisor.start(ONE, [spawned(obeying, me, "o", "normal")])
    started("o")
    assert "ok" == supervisor.terminate_child(sup, "o")
    assert [("o", "normal")] == [(r["child"]["id"], r["reason"]) for r in sup_reports(reports, "shutdown_error")]


def test_stop_stops_the_children_in_reverse_order(reports):
    """stop(sup) stops the children last started first, each with "shutdown", then the supervisor exits."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a"), child(me, "b"), child(me, "c")])
    events(3)
    ref = e.monitor(sup)
    assert "ok" == supervisor.stop(sup)
    assert [("terminate", "c"), ("terminate", "b"), ("terminate", "a")] == events(3)
    assert "normal" == down_of(ref)
    assert [] == sup_reports(reports)


# -- restarts -----------------------------------------------------------------------------------


def test_a_crashing_gen_server_is_restarted_with_fresh_state():
    """A gen_server child crashing in a cast is restarted: a new pid whose state is the initial one."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")])
    old = started("a")
    assert "ok" == gen_server.call(old, ("put", 5))
    gen_server.cast(old, "crash")
    new = started("a")
    assert (True, 0) == (new is not old, gen_server.call(new, "get"))
    assert isinstance(e.exit_reason(old, timeout=0), RuntimeError)
    assert [("a", new, "worker", HERE)] == supervisor.which_children(sup)


def test_one_for_one_restarts_only_the_failed_child():
    """one_for_one restarts the failed child alone; its siblings keep running untouched."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a"), child(me, "b"), child(me, "c")])
    a, b, c = started("a"), started("b"), started("c")
    gen_server.cast(b, "crash")
    assert ("terminate", "b") == next_event()
    assert ("started", "b") == next_event()
    assert TIMEOUT is next_event(timeout=0.05)
    pids = [pid for _, pid, _, _ in supervisor.which_children(sup)]
    assert (a, c) == (pids[0], pids[2])
    assert pids[1] is not b


def test_one_for_all_stops_the_others_in_reverse_then_starts_all_in_order():
    """one_for_all: the others stop last started first, then all start again in start order."""
    me = e.self()
    flags = {**ONE, "strategy": "one_for_all"}
    sup = supervisor.start(flags, [child(me, "a"), child(me, "b"), child(me, "c"), child(me, "d")])
    events(4)
    b = [pid for i, pid, _, _ in supervisor.which_children(sup) if i == "b"][0]
    gen_server.cast(b, "crash")
    assert [
        ("terminate", "b"),
        ("terminate", "d"),
        ("terminate", "c"),
        ("terminate", "a"),
        ("started", "a"),
        ("started", "b"),
        ("started", "c"),
        ("started", "d"),
    ] == events(8)
    assert TIMEOUT is next_event(timeout=0.05)
    assert 4 == supervisor.count_children(sup)["active"]


def test_one_for_all_stops_the_others_with_shutdown():
    """The siblings one_for_all stops see "shutdown" in their terminate."""
    me = e.self()
    sup = supervisor.start({**ONE, "strategy": "one_for_all"}, [child(me, "a"), child(me, "b")])
    started("a")
    gen_server.cast(started("b"), ("stop", "broken"))
    assert ("broken", "shutdown") == (terminated("b"), terminated("a"))
    pids = [started("a"), started("b")]
    assert pids == [pid for _, pid, _, _ in supervisor.which_children(sup)]


def test_rest_for_one_restarts_the_failed_and_later_ones():
    """rest_for_one: the children after the failed one stop (last first); the failed and those start again."""
    me = e.self()
    flags = {**ONE, "strategy": "rest_for_one"}
    sup = supervisor.start(flags, [child(me, "a"), child(me, "b"), child(me, "c"), child(me, "d")])
    a = started("a")
    b = started("b")
    events(2)
    gen_server.cast(b, "crash")
    assert [
        ("terminate", "b"),
        ("terminate", "d"),
        ("terminate", "c"),
        ("started", "b"),
        ("started", "c"),
        ("started", "d"),
    ] == events(6)
    assert TIMEOUT is next_event(timeout=0.05)
    assert a is supervisor.which_children(sup)[0][1]


def test_a_temporary_sibling_stopped_by_one_for_all_is_dropped():
    """A temporary sibling one_for_all stops is not started again and leaves which_children."""
    me = e.self()
    flags = {**ONE, "strategy": "one_for_all"}
    sup = supervisor.start(flags, [child(me, "a"), child(me, "t", restart="temporary"), child(me, "c")])
    events(3)
    c = supervisor.which_children(sup)[2][1]
    gen_server.cast(c, ("stop", "broken"))
    assert [("terminate", "c", "broken"), ("terminate", "t", "shutdown"), ("terminate", "a", "shutdown")] == [
        next_tagged("terminate") for _ in range(3)
    ]
    assert [("started", "a"), ("started", "c")] == events(2)
    assert TIMEOUT is next_event(timeout=0.05)
    assert ["a", "c"] == [i for i, _, _, _ in supervisor.which_children(sup)]


@pytest.mark.parametrize(
    "reason, restarted",
    [("normal", False), ("shutdown", False), (("shutdown", "done"), False), ("boom", True)],
    ids=repr,
)
def test_transient_is_restarted_only_after_an_abnormal_exit(reason, restarted):
    """A transient child is restarted after an abnormal exit, kept with no process after an orderly one."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a", restart="transient")])
    pid = started("a")
    ref = e.monitor(pid)
    gen_server.cast(pid, ("stop", reason))
    assert reason == down_of(ref)
    children = supervisor.which_children(sup)
    if restarted:
        new = started("a")
        assert [("a", new, "worker", HERE)] == children
    else:
        assert [("a", None, "worker", HERE)] == children
        assert TIMEOUT is next_tagged("started", timeout=0.05)


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all"])
@pytest.mark.parametrize("reason", ["normal", "boom"])
def test_temporary_is_never_restarted(reason, strategy):
    """A temporary child is never restarted, whatever its exit, nor its siblings; it leaves which_children."""
    me = e.self()
    sup = supervisor.start({**ONE, "strategy": strategy}, [child(me, "a", restart="temporary"), child(me, "b")])
    a = started("a")
    started("b")
    ref = e.monitor(a)
    gen_server.cast(a, ("stop", reason))
    assert reason == down_of(ref)
    assert ["b"] == [i for i, _, _, _ in supervisor.which_children(sup)]
    assert (TIMEOUT, TIMEOUT) == (next_tagged("started", timeout=0.05), terminated("b", timeout=0))


def test_a_permanent_child_exiting_normal_is_restarted():
    """A permanent child is restarted even after a normal exit."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")])
    gen_server.cast(started("a"), ("stop", "normal"))
    new = started("a")
    assert [("a", new, "worker", HERE)] == supervisor.which_children(sup)


# -- restart intensity ------------------------------------------------------------------------------


def test_more_restarts_than_intensity_shut_the_supervisor_down(reports):
    """More than intensity restarts within period: children stop, the supervisor exits "shutdown", reported."""
    me = e.self()
    sup = supervisor.start({**ONE, "intensity": 1, "period": 5}, [child(me, "a"), child(me, "b")])
    a = started("a")
    started("b")
    ref = e.monitor(sup)
    gen_server.cast(a, "crash")
    a = started("a")
    gen_server.cast(a, "crash")
    assert "shutdown" == down_of(ref)
    assert "shutdown" == terminated("b")
    assert TIMEOUT is next_tagged("started", timeout=0)
    shutdowns = sup_reports(reports, "shutdown")
    assert [("reached_max_restart_intensity", "a")] == [(r["reason"], r["child"]["id"]) for r in shutdowns]


def test_intensity_zero_gives_up_at_the_first_exit():
    """With intensity 0 the first exit of a permanent child shuts the supervisor down."""
    me = e.self()
    sup = supervisor.start({**ONE, "intensity": 0}, [child(me, "a")])
    ref = e.monitor(sup)
    gen_server.cast(started("a"), "crash")
    assert "shutdown" == down_of(ref)


def test_restarts_older_than_period_do_not_count():
    """Restarts further apart than period never add up to more than intensity."""
    me = e.self()
    sup = supervisor.start({**ONE, "intensity": 1, "period": 0.05}, [child(me, "a")])
    for _ in range(3):
        gen_server.cast(started("a"), "crash")
        e.receive(lambda m: NOMATCH, timeout=0.1)  # let the period pass (time passing, not synchronisation)
    assert e.is_alive(sup)
    assert 1 == supervisor.count_children(sup)["active"]


def test_a_failing_restart_is_retried_and_counts_against_intensity(reports):
    """A restart whose start fails is reported, retried, and the retry counts: intensity 1 is exceeded."""
    me = e.self()
    calls = []

    def start():
        calls.append(1)
        if len(calls) > 1:
            return ("error", "not now")
        return gen_server.start_link(Child(me, "a"))

    sup = supervisor.start({**ONE, "intensity": 1}, [{"id": "a", "start": start}])
    ref = e.monitor(sup)
    gen_server.cast(started("a"), "crash")
    assert "shutdown" == down_of(ref)
    assert 2 == len(calls)
    terminated_, start_error, shutdown = sup_reports(reports)
    assert (
        ("child_terminated", True),
        ("start_error", "not now"),
        ("shutdown", "reached_max_restart_intensity"),
    ) == (
        (terminated_["context"], isinstance(terminated_["reason"], RuntimeError)),
        (start_error["context"], start_error["reason"]),
        (shutdown["context"], shutdown["reason"]),
    )


def test_a_child_being_restarted_shows_restarting_and_refuses_restart_and_delete():
    """While a failed restart waits for its retry: which_children shows "restarting"; restart/delete refuse."""
    me = e.self()
    calls = []

    def start():
        calls.append(1)
        if len(calls) > 1:
            e.send(me, ("attempt", len(calls)))
            if e.receive(go_matcher, timeout=5) == "fail":
                return ("error", "not yet")
        return gen_server.start_link(Child(me, "a"))

    sup = supervisor.start({**ONE, "intensity": 5}, [{"id": "a", "start": start}])
    gen_server.cast(started("a"), "crash")
    assert ("attempt", 2) == next_tagged("attempt")
    # queued behind the failing attempt, answered before its retry
    reqs = [
        gen_server.send_request(sup, r)
        for r in ("which_children", ("restart_child", "a"), ("delete_child", "a"), "count_children")
    ]
    e.send(sup, ("go", "fail"))
    assert ("attempt", 3) == next_tagged("attempt")
    answers = [gen_server.receive_response(r, timeout=2) for r in reqs]
    assert [
        ("reply", [("a", "restarting", "worker", HERE)]),
        ("reply", ("error", "restarting")),
        ("reply", ("error", "restarting")),
        ("reply", {"specs": 1, "active": 0, "supervisors": 0, "workers": 1}),
    ] == answers
    e.send(sup, ("go", "ok"))
    new = started("a")
    assert [("a", new, "worker", HERE)] == supervisor.which_children(sup)


# -- the API ------------------------------------------------------------------------------------


def test_terminate_restart_and_delete_a_child():
    """terminate_child keeps the spec; restart_child starts it again; delete_child removes a stopped one."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a"), child(me, "b")])
    a = started("a")
    started("b")
    assert ("error", "running") == supervisor.restart_child(sup, "a")
    assert ("error", "running") == supervisor.delete_child(sup, "a")
    assert "ok" == supervisor.terminate_child(sup, "a")
    assert [("a", None, "worker", HERE)] == supervisor.which_children(sup)[:1]
    ok, again = supervisor.restart_child(sup, "a")
    assert ("ok", again) == ("ok", started("a"))
    assert again is not a
    assert "ok" == supervisor.terminate_child(sup, "a")
    assert "ok" == supervisor.delete_child(sup, "a")
    assert (["b"], ("error", "not_found")) == (
        [i for i, _, _, _ in supervisor.which_children(sup)],
        supervisor.get_childspec(sup, "a"),
    )


def test_operations_on_an_unknown_child_answer_not_found():
    """terminate_child, restart_child, delete_child and get_childspec of an unknown id answer not_found."""
    sup = supervisor.start(ONE, [])
    assert [("error", "not_found")] * 4 == [
        supervisor.terminate_child(sup, "x"),
        supervisor.restart_child(sup, "x"),
        supervisor.delete_child(sup, "x"),
        supervisor.get_childspec(sup, "x"),
    ]


def test_start_child_adds_a_child_at_the_end():
    """start_child starts a new child, answers ("ok", pid), and lists it last."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a")])
    started("a")
    ok, pid = supervisor.start_child(sup, child(me, "b"))
    assert ("ok", pid) == ("ok", started("b"))
    assert ["a", "b"] == [i for i, _, _, _ in supervisor.which_children(sup)]


def test_start_child_failing_answers_the_error_and_keeps_nothing():
    """start_child whose start fails answers ("error", reason) and keeps no spec."""
    sup = supervisor.start(ONE, [])
    assert ("error", "nope") == supervisor.start_child(sup, {"id": "x", "start": lambda: ("error", "nope")})
    assert ([], ("error", "not_found")) == (supervisor.which_children(sup), supervisor.get_childspec(sup, "x"))


def test_terminate_child_of_a_temporary_child_removes_it():
    """terminate_child of a temporary child removes its spec."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "t", restart="temporary")])
    started("t")
    assert "ok" == supervisor.terminate_child(sup, "t")
    assert [] == supervisor.which_children(sup)


def test_which_children_and_count_children():
    """which_children shows id, pid or None, type, modules; count_children counts specs, active, types."""
    me = e.self()
    specs = [
        child(me, "w1"),
        {"id": "s", "type": "supervisor", "start": lambda: supervisor.start_link(ONE, [])},
        child(me, "w2"),
    ]
    sup = supervisor.start(ONE, specs)
    w1, w2 = started("w1"), started("w2")
    assert "ok" == supervisor.terminate_child(sup, "w2")
    [c1, c2, c3] = supervisor.which_children(sup)
    assert (("w1", w1, "worker", HERE), "s", "supervisor", ("w2", None, "worker", HERE)) == (c1, c2[0], c2[2], c3)
    assert e.is_alive(c2[1])
    assert {"specs": 3, "active": 2, "supervisors": 1, "workers": 2} == supervisor.count_children(sup)
    assert not e.is_alive(w2)


# -- simple_one_for_one ---------------------------------------------------------------------------


def dyn_start(owner, base, *extra):
    """A simple_one_for_one template's start: a Child tagged with all its args."""
    return gen_server.start_link(Child(owner, (base, *extra)), trap_exit=True)


def simple(owner, **spec):
    flags = {"strategy": "simple_one_for_one", "intensity": 3, "period": 5}
    return supervisor.start(flags, [{"id": "tpl", "start": (dyn_start, (owner, "base")), **spec}])


def test_simple_one_for_one_starts_children_with_the_args_appended():
    """start_child(sup, args) calls the template's start with args appended; the children have no id."""
    me = e.self()
    sup = simple(me)
    assert [] == supervisor.which_children(sup)
    _, p1 = supervisor.start_child(sup, ("x",))
    _, p2 = supervisor.start_child(sup, ("y", 2))
    assert (p1, p2) == (started(("base", "x")), started(("base", "y", 2)))
    assert [(None, p1, "worker", HERE), (None, p2, "worker", HERE)] == supervisor.which_children(sup)
    assert {"specs": 1, "active": 2, "supervisors": 0, "workers": 2} == supervisor.count_children(sup)
    ok, spec = supervisor.get_childspec(sup, p1)
    assert ("ok", "tpl") == (ok, spec["id"])


def test_simple_one_for_one_terminate_child_by_pid():
    """Under simple_one_for_one terminate_child takes a pid; the child goes; an id is not_found."""
    me = e.self()
    sup = simple(me)
    _, p1 = supervisor.start_child(sup, ("x",))
    _, p2 = supervisor.start_child(sup, ("y",))
    assert ("error", "not_found") == supervisor.terminate_child(sup, "tpl")
    assert "ok" == supervisor.terminate_child(sup, p1)
    assert "shutdown" == terminated(("base", "x"))
    assert [(None, p2, "worker", HERE)] == supervisor.which_children(sup)
    assert ("error", "not_found") == supervisor.terminate_child(sup, p1)


def test_simple_one_for_one_restarts_a_child_alone_with_its_args():
    """A crashing dynamic child is restarted alone, with the same args."""
    me = e.self()
    sup = simple(me)
    _, p1 = supervisor.start_child(sup, ("x",))
    _, p2 = supervisor.start_child(sup, ("y",))
    assert (p1, p2) == (started(("base", "x")), started(("base", "y")))
    gen_server.cast(p1, "crash")
    new = started(("base", "x"))
    assert TIMEOUT is next_tagged("started", timeout=0.05)
    assert {p2, new} == {pid for _, pid, _, _ in supervisor.which_children(sup)}
    assert e.is_alive(p2)


def test_simple_one_for_one_refuses_restart_and_delete():
    """restart_child and delete_child answer ("error", "simple_one_for_one")."""
    sup = simple(e.self())
    _, pid = supervisor.start_child(sup, ("x",))
    assert [("error", "simple_one_for_one")] * 4 == [
        supervisor.restart_child(sup, "tpl"),
        supervisor.delete_child(sup, "tpl"),
        supervisor.restart_child(sup, pid),
        supervisor.delete_child(sup, pid),
    ]


def test_simple_one_for_one_children_all_get_shutdown_together_on_stop():
    """On stop every dynamic child is sent "shutdown" before any has exited; all then exit."""
    me = e.self()
    flags = {"strategy": "simple_one_for_one", "intensity": 3, "period": 5}
    tpl = {"id": "tpl", "start": (lambda tag: e.spawn_link(obeying, me, tag, "shutdown", True), ())}
    sup = supervisor.start(flags, [tpl])
    pids = [supervisor.start_child(sup, (tag,))[1] for tag in ("x", "y", "z")]
    assert pids == [started(tag) for tag in ("x", "y", "z")]  # each traps exits by now
    refs = [e.monitor(p) for p in pids]
    stopper = in_process(supervisor.stop, sup)
    got = sorted(next_tagged("got")[1] for _ in pids)  # each holds its exit until released
    assert ["x", "y", "z"] == got
    assert e.is_alive(stopper)
    for p in pids:
        e.send(p, ("go", None))
    assert ["shutdown"] * 3 == [down_of(r) for r in refs]
    assert ("done", "ok") == next_tagged("done")


def test_simple_one_for_one_children_are_killed_under_one_shutdown_time():
    """Dynamic children ignoring shutdown are all killed after one shutdown time, not one each."""
    me = e.self()
    flags = {"strategy": "simple_one_for_one", "intensity": 3, "period": 5}
    tpl = {"id": "tpl", "start": (lambda tag: e.spawn_link(stubborn, me, tag), ()), "shutdown": 0.2}
    sup = supervisor.start(flags, [tpl])
    pids = [supervisor.start_child(sup, (tag,))[1] for tag in ("x", "y", "z")]
    assert pids == [started(tag) for tag in ("x", "y", "z")]  # each traps exits by now
    t0 = monotonic()
    assert "ok" == supervisor.stop(sup)
    elapsed = monotonic() - t0
    assert ["killed"] * 3 == [e.exit_reason(p, timeout=0) for p in pids]
    assert 0.2 <= elapsed < 0.5  # three shutdown times would be 0.6 s


def test_simple_one_for_one_children_killed_after_the_shutdown_time_are_reported(reports):
    """Dynamic children killed after the shutdown time are reported as shutdown_error "killed" (OTP)."""
    me = e.self()
    flags = {"strategy": "simple_one_for_one", "intensity": 3, "period": 5}
    tpl = {"id": "tpl", "start": (lambda tag: e.spawn_link(stubborn, me, tag), ()), "shutdown": 0.05}
    sup = supervisor.start(flags, [tpl])
    for tag in ("x", "y"):
        supervisor.start_child(sup, (tag,))
        started(tag)
    assert "ok" == supervisor.stop(sup)
    assert {"killed"} == {r["reason"] for r in sup_reports(reports, "shutdown_error")}


# -- auto_shutdown ---------------------------------------------------------------------------------


def test_any_significant_shuts_down_when_a_significant_child_exits_normally():
    """any_significant: a significant transient child exiting normally shuts the supervisor down."""
    me = e.self()
    flags = {**ONE, "auto_shutdown": "any_significant"}
    sup = supervisor.start(flags, [child(me, "s", restart="transient", significant=True), child(me, "b")])
    s = started("s")
    started("b")
    ref = e.monitor(sup)
    gen_server.cast(s, ("stop", "normal"))
    assert "shutdown" == down_of(ref)
    assert "shutdown" == terminated("b")


def test_any_significant_restarts_a_crashing_significant_transient_child():
    """any_significant: a significant transient child crashing is restarted, no shutdown."""
    me = e.self()
    flags = {**ONE, "auto_shutdown": "any_significant"}
    sup = supervisor.start(flags, [child(me, "s", restart="transient", significant=True)])
    gen_server.cast(started("s"), "crash")
    new = started("s")
    assert [("s", new, "worker", HERE)] == supervisor.which_children(sup)


def test_a_non_significant_child_exiting_does_not_shut_down():
    """any_significant: a transient child that is not significant exiting normally changes nothing."""
    me = e.self()
    flags = {**ONE, "auto_shutdown": "any_significant"}
    specs = [child(me, "t", restart="transient"), child(me, "s", restart="transient", significant=True)]
    sup = supervisor.start(flags, specs)
    t = started("t")
    ref = e.monitor(t)
    gen_server.cast(t, ("stop", "normal"))
    assert "normal" == down_of(ref)
    assert 1 == supervisor.count_children(sup)["active"]


def test_all_significant_shuts_down_after_the_last_significant_child():
    """all_significant: the supervisor shuts down only when the last significant child has exited."""
    me = e.self()
    flags = {**ONE, "auto_shutdown": "all_significant"}
    specs = [
        child(me, "s1", restart="transient", significant=True),
        child(me, "s2", restart="temporary", significant=True),
    ]
    sup = supervisor.start(flags, specs)
    s1, s2 = started("s1"), started("s2")
    ref = e.monitor(sup)
    r1 = e.monitor(s1)
    gen_server.cast(s1, ("stop", "normal"))
    assert "normal" == down_of(r1)
    assert [("s1", None, "worker", HERE), ("s2", s2, "worker", HERE)] == supervisor.which_children(sup)
    gen_server.cast(s2, ("stop", "normal"))
    assert "shutdown" == down_of(ref)


# -- trees, dispatchers, parents ---------------------------------------------------------------------


def test_killing_the_top_of_a_tree_stops_every_leaf():
    """Killing the top supervisor of a tree brings down the nested supervisor and every leaf."""
    me = e.self()
    mid_flags = {**ONE, "strategy": "one_for_all"}
    mid = [child(me, "m1"), child(me, "m2", trap=False)]
    specs = [
        child(me, "l1"),
        {"id": "mid", "type": "supervisor", "start": lambda: supervisor.start_link(mid_flags, mid)},
        child(me, "l2", trap=False),
    ]
    top = supervisor.start(ONE, specs)
    leaves = [started(t) for t in ("l1", "m1", "m2", "l2")]
    mid = supervisor.which_children(top)[1][1]
    assert [("m1", leaves[1], "worker", HERE), ("m2", leaves[2], "worker", HERE)] == supervisor.which_children(mid)
    refs = [e.monitor(p) for p in [*leaves, mid]]
    e.exit(top, "kill")
    # l1 traps: its parent's "killed"; l2 does not: the link's "killed"; mid stops m1 and m2 with "shutdown"
    assert ["killed", "shutdown", "shutdown", "killed", "killed"] == [down_of(r) for r in refs]
    assert TIMEOUT is next_tagged("started", timeout=0.05)


def test_stopping_the_top_of_a_tree_stops_it_depth_first_in_reverse():
    """stop(top) stops the tree last started first, a nested supervisor's children before later ones."""
    me = e.self()
    mid = [child(me, "m1"), child(me, "m2")]
    specs = [
        child(me, "l1"),
        {"id": "mid", "type": "supervisor", "start": lambda: supervisor.start_link(ONE, mid)},
        child(me, "l2"),
    ]
    top = supervisor.start(ONE, specs)
    events(4)
    assert "ok" == supervisor.stop(top)
    assert [("terminate", "l2"), ("terminate", "m2"), ("terminate", "m1"), ("terminate", "l1")] == events(4)


def test_a_nested_supervisor_is_restarted_with_its_children():
    """A nested supervisor that dies is restarted by its parent, starting its own children again."""
    me = e.self()
    specs = [{"id": "mid", "type": "supervisor", "start": lambda: supervisor.start_link(ONE, [child(me, "m1")])}]
    top = supervisor.start(ONE, specs)
    m1 = started("m1")
    mid = supervisor.which_children(top)[0][1]
    e.exit(mid, "kill")
    assert "killed" == e.exit_reason(m1, timeout=2)
    new_m1 = started("m1")
    new_mid = supervisor.which_children(top)[0][1]
    assert (True, [("m1", new_m1, "worker", HERE)]) == (new_mid is not mid, supervisor.which_children(new_mid))


def test_a_child_on_the_blocking_dispatcher_is_restarted_there():
    """A gen_server child on the "blocking" dispatcher crashes and is restarted, again on "blocking"."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "b", dispatcher="blocking")])
    old = started("b")
    assert "blocking" == e.process_info(old, "dispatcher")
    assert "ok" == gen_server.call(old, ("put", 3))
    gen_server.cast(old, "crash")
    assert isinstance(terminated("b"), RuntimeError)
    new = started("b")
    assert ("blocking", 0) == (e.process_info(new, "dispatcher"), gen_server.call(new, "get"))
    assert [("b", new, "worker", HERE)] == supervisor.which_children(sup)
    assert "ok" == supervisor.terminate_child(sup, "b")
    assert "shutdown" == terminated("b")


def test_a_linked_supervisor_dies_with_its_parent_and_takes_its_children():
    """A supervisor started with start_link exits with its parent's reason after stopping its children."""
    me = e.self()

    def parent():
        sup = supervisor.start_link(ONE, [child(me, "a"), child(me, "b")])
        e.send(me, ("sup", sup))
        e.receive(go_matcher)
        e.exit("parent gone")

    p = e.spawn(parent)
    _, sup = next_tagged("sup")
    a, b = started("a"), started("b")
    refs = [e.monitor(x) for x in (sup, a, b)]
    e.send(p, ("go", None))
    assert [("terminate", "b"), ("terminate", "a")] == events(2)
    assert ["parent gone", "shutdown", "shutdown"] == [down_of(r) for r in refs]


# -- reports -------------------------------------------------------------------------------------


def test_an_abnormal_exit_is_reported_as_child_terminated(reports):
    """A child's abnormal exit is reported: child_terminated, its reason, the child's id, pid, restart, type."""
    me = e.self()
    supervisor.start(ONE, [child(me, "a")], name="reporting_sup")
    pid = started("a")
    gen_server.cast(pid, ("stop", "boom"))
    started("a")
    [r] = sup_reports(reports)
    assert ("child_terminated", "reporting_sup", "boom", "error") == (
        r["context"],
        r["supervisor"],
        r["reason"],
        r["level"],
    )
    assert {"id": "a", "pid": repr(pid), "restart": "permanent", "shutdown": 5, "type": "worker"} == r["child"]


@pytest.mark.parametrize("reason", ["normal", "shutdown", ("shutdown", "done")], ids=repr)
def test_an_orderly_exit_of_a_transient_child_is_not_reported(reports, reason):
    """A transient child's orderly exit is no child_terminated report."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "a", restart="transient")])
    pid = started("a")
    ref = e.monitor(pid)
    gen_server.cast(pid, ("stop", reason))
    assert reason == down_of(ref)
    assert [("a", None, "worker", HERE)] == supervisor.which_children(sup)
    assert [] == sup_reports(reports)


def test_a_temporary_child_crashing_is_reported(reports):
    """A temporary child's abnormal exit is reported as child_terminated, though it is not restarted."""
    me = e.self()
    sup = supervisor.start(ONE, [child(me, "t", restart="temporary")])
    pid = started("t")
    ref = e.monitor(pid)
    gen_server.cast(pid, ("stop", "boom"))
    assert "boom" == down_of(ref)
    assert [] == supervisor.which_children(sup)
    assert [("child_terminated", "boom")] == [(r["context"], r["reason"]) for r in sup_reports(reports)]
