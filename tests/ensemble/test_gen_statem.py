"""gen_statem end to end: results, actions, queues, time-outs, enter calls, stops, reports, sys."""

from __future__ import annotations

from time import monotonic

import pytest
import structlog

import ensemble as e
from ensemble import CallError, StartError, gen_server, gen_statem
from ensemble.decide import gen_statem as statem
from ensemble import sys as esys
from ensemble.gen_statem import GenStatem
from ensemble.decide.receive import NOMATCH
from ensemble._terms import TIMEOUT

WINDOW = 1.0  # how long a test waits for something that must come


# -- helpers ---------------------------------------------------------------------------------


def _kind(etype):
    """A call's event type without its from_ (unpredictable), other types as they are."""
    if type(etype) is tuple and etype[0] == "call":
        return "call"
    return etype


class Scripted(GenStatem):
    """handle_event_function machine: reports each event to ``to`` and answers ``script``'s result."""

    def __init__(self, script, init=("ok", "a", 0), to=None, enter=False):
        self.script = script
        self.init_ret = init
        self.to = to if to is not None else e.self()
        self.state_enter = enter

    def init(self):
        return self.init_ret

    def handle_event(self, etype, content, state, data):
        e.send(self.to, ("seen", _kind(etype), content, state))
        return self.script(etype, content, state, data)

    def terminate(self, reason, state, data):
        e.send(self.to, ("terminate", reason, state, data))


def tagged(tag, timeout=WINDOW):
    """The next message tagged ``tag`` (its other elements), or TIMEOUT."""
    got = e.receive(lambda m: m if type(m) is tuple and m and m[0] == tag else NOMATCH, timeout=timeout)
    return got if got is TIMEOUT else got[1:]


def seen(n, timeout=WINDOW):
    """The next ``n`` events the machine reported, as (type, content, state)."""
    return [tagged("seen", timeout) for _ in range(n)]


def trail(until, timeout=WINDOW):
    """The machine's "seen" and "hibernating" messages in order, up to the event with content ``until``."""

    def mine(m):
        return m if type(m) is tuple and m and m[0] in ("seen", "hibernating") else NOMATCH

    out = []
    while True:
        m = e.receive(mine, timeout=timeout)
        if m is TIMEOUT:
            return out + [m]
        out.append(m[1:] if m[0] == "seen" else "hibernating")
        if m[0] == "seen" and m[2] == until:
            return out


def down(ref, timeout=WINDOW):
    """The reason in the DOWN of monitor ``ref``."""
    def its_down(m):
        return m[4] if type(m) is tuple and len(m) == 5 and m[1] is ref else NOMATCH

    return e.receive(its_down, timeout=timeout)


def start(script, **kw):
    enter = kw.pop("enter", False)
    init = kw.pop("init", ("ok", "a", 0))
    return gen_statem.start(Scripted(script, init=init, enter=enter), **kw)


def on(**answers):
    """A script answering ``answers[content]`` for those contents, keep_state_and_data otherwise."""

    def script(et, c, s, d):
        return answers.get(c, "keep_state_and_data") if type(c) is str else "keep_state_and_data"

    return script


def keep(*actions):
    """A script that keeps state and data with ``actions`` for every event."""
    return lambda et, c, s, d: ("keep_state_and_data", list(actions))


class Door:
    """The OTP code lock as a state_functions machine: unlock with the code, relocks by itself."""

    callback_mode = "state_functions"

    def __init__(self, code="1234", open_for=0.05, watcher=None):
        self.code = code
        self.open_for = open_for
        self.watcher = watcher

    def init(self):
        return ("ok", "locked", {"tries": 0})

    def locked(self, etype, content, data):
        match (etype, content):
            case (("call", from_), ("unlock", code)) if code == self.code:
                relock = ("state_timeout", self.open_for, "lock")
                return ("next_state", "open", data, [("reply", from_, "ok"), relock])
            case (("call", from_), ("unlock", _)):
                return ("keep_state", {"tries": data["tries"] + 1}, ("reply", from_, "wrong"))
            case (("call", from_), "state"):
                return ("keep_state_and_data", [("reply", from_, "locked")])
            case ("cast", ("push", _)):
                return ("keep_state_and_data", "postpone")

    def open(self, etype, content, data):
        match (etype, content):
            case ("state_timeout", "lock"):
                if self.watcher is not None:
                    e.send(self.watcher, ("relocked",))
                return ("next_state", "locked", data)
            case (("call", from_), "state"):
                return ("keep_state_and_data", ("reply", from_, "open"))
            case ("cast", ("push", who)):
                e.send(who, ("pushed", "open"))
                return "keep_state_and_data"


# -- the door -----------------------------------------------------------------------------------


def test_door_unlocks_with_the_code_and_relocks_on_its_state_timeout():
    """The code lock: a wrong code is refused, the right one opens, the state time-out relocks."""
    door = gen_statem.start(Door(watcher=e.self()))
    assert "wrong" == gen_server.call(door, ("unlock", "0000"))
    assert ("locked", {"tries": 1}) == esys.get_state(door)
    assert "ok" == gen_server.call(door, ("unlock", "1234"))
    assert "open" == gen_server.call(door, "state")
    ref = e.monitor(door)
    assert () == tagged("relocked")
    assert "locked" == gen_server.call(door, "state")
    gen_server.stop(door)
    assert "normal" == down(ref)


def test_door_postpones_a_push_until_it_opens():
    """A push while locked is postponed and handled once the door opens."""
    door = gen_statem.start(Door(open_for=5))
    me = e.self()
    gen_server.cast(door, ("push", me))
    assert "locked" == gen_server.call(door, "state")
    assert "ok" == gen_server.call(door, ("unlock", "1234"))
    assert ("open",) == tagged("pushed")


# -- start and init -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ret, reason",
    [
        (("stop", "no"), "no"),
        (("error", "bad"), "bad"),
        (("ok", "a"), ("bad_return_from_init", ("ok", "a"))),
        (("error", "a", "b"), ("bad_return_from_init", ("error", "a", "b"))),
        (0, ("bad_return_from_init", 0)),
        (("ok", "a", 0, ["soon"]), ("bad_action_from_state_function", "soon")),
    ],
)
def test_a_failed_init_fails_the_start(ret, reason):
    """init's stop, error, bad returns and bad actions fail the start with OTP's reason."""
    with pytest.raises(StartError) as info:
        start(keep(), init=ret)
    assert reason == info.value.reason


def test_init_ignore_and_crash():
    """init answering "ignore" makes start answer it; a crash in init fails it with the exception."""
    assert "ignore" == start(keep(), init="ignore")

    class Crashes(GenStatem):
        def init(self):
            raise ValueError("init")

    with pytest.raises(StartError) as info:
        gen_statem.start(Crashes)
    assert ("ValueError", ("init",)) == (type(info.value.reason).__name__, info.value.reason.args)


def test_init_actions_run_before_any_message():
    """init's next_event and time-out zero come before a message sent right after start."""
    actions = [("next_event", "internal", "first"), ("state_timeout", 0, "zero")]
    p = start(keep(), init=("ok", "a", 0, actions))
    gen_server.cast(p, "later")
    assert [("internal", "first", "a"), ("state_timeout", "zero", "a"), ("cast", "later", "a")] == seen(3)


def test_a_taken_name_and_a_named_machine():
    """start registers the name; a second start with it fails with already_started."""
    p = start(keep(), name="door")
    assert p == e.whereis("door")
    with pytest.raises(StartError) as info:
        start(keep(), name="door")
    assert ("already_started", p) == info.value.reason
    assert "ok" == gen_server.cast("door", "hi")
    assert [("cast", "hi", "a")] == seen(1)


def test_a_bad_callback_mode_fails_the_start():
    """A callback_mode OTP does not know fails the start with bad_return_from_callback_mode."""

    class Odd(Scripted):
        callback_mode = "whatever"

    with pytest.raises(StartError) as info:
        gen_statem.start(Odd(keep()))
    assert ("bad_return_from_callback_mode", "whatever") == info.value.reason


def test_enter_loop_makes_a_process_a_machine():
    """enter_loop turns the calling process into a machine in the given state, with init's actions."""
    me = e.self()
    p = e.spawn(gen_statem.enter_loop, Scripted(keep(), to=me), "s", 7, ("next_event", "internal", "go"))
    assert [("internal", "go", "s")] == seen(1)
    assert ("s", 7) == esys.get_state(p)


def test_enter_loop_with_a_name_it_does_not_hold():
    """enter_loop with a name the process is not registered under exits process_not_registered."""
    machine = Scripted(keep())
    p, ref = e.spawn_monitor(lambda: gen_statem.enter_loop(machine, "s", 0, name="nobody"))
    assert "process_not_registered" == down(ref)


# -- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ret, expected",
    [
        (("next_state", "b", 1), ("b", 1)),
        (("next_state", "b", 1, []), ("b", 1)),
        (("next_state", "a", 1, "hibernate"), ("a", 1)),
        (("keep_state", 1), ("a", 1)),
        (("keep_state", 1, [("hibernate", False)]), ("a", 1)),
        ("keep_state_and_data", ("a", 0)),
        (("keep_state_and_data", []), ("a", 0)),
        (("repeat_state", 1), ("a", 1)),
        (("repeat_state", 1, ["infinity"]), ("a", 1)),
        ("repeat_state_and_data", ("a", 0)),
        (("repeat_state_and_data", [("postpone", False)]), ("a", 0)),
    ],
)
def test_every_transition_result(ret, expected):
    """Each transition result leaves the machine in the state and data it names."""
    p = start(lambda et, c, s, d: ret if c == "go" else "keep_state_and_data")
    gen_server.cast(p, "go")
    assert expected == esys.get_state(p)


@pytest.mark.parametrize(
    "ret, reason, data",
    [
        ("stop", "normal", 0),
        (("stop", "bye"), "bye", 0),
        (("stop", "bye", 9), "bye", 9),
        (("stop", ("shutdown", 1), 9), ("shutdown", 1), 9),
    ],
)
def test_stop_results_terminate_with_the_reason_and_data(ret, reason, data):
    """The stop results run terminate with their reason and data, then exit with the reason."""
    p = start(lambda et, c, s, d: ret)
    ref = e.monitor(p)
    gen_server.cast(p, "stop")
    assert (reason, "a", data) == tagged("terminate")
    assert reason == down(ref)


@pytest.mark.parametrize("with_data", [False, True])
def test_stop_and_reply_answers_then_stops(with_data):
    """stop_and_reply sends its replies (to this caller and another) before it terminates."""
    other = []

    def script(et, c, s, d):
        if c == "hold":
            other.append(et[1])
            return "keep_state_and_data"
        replies = [("reply", et[1], "bye"), ("reply", other[0], "you too")]
        return ("stop_and_reply", "done", replies, 5) if with_data else ("stop_and_reply", "done", replies)

    p = start(script)
    ref = e.monitor(p)
    me = e.self()
    e.spawn(lambda: e.send(me, ("waiter", gen_server.call(p, "hold"))))
    assert [("call", "hold", "a")] == seen(1)
    assert "bye" == gen_server.call(p, "stop")
    assert ("you too",) == tagged("waiter")
    assert ("done", "a", 5 if with_data else 0) == tagged("terminate")
    assert "done" == down(ref)


def test_bad_return_is_seen_by_a_monitor_and_a_caller():
    """A bad return stops with ("bad_return_from_state_function", ret): DOWN and CallError agree."""
    p = start(lambda et, c, s, d: ("keep_state",))
    ref = e.monitor(p)
    with pytest.raises(CallError) as info:
        gen_server.call(p, "x")
    assert ("bad_return_from_state_function", ("keep_state",)) == info.value.reason
    assert ("bad_return_from_state_function", ("keep_state",)) == down(ref)


@pytest.mark.parametrize(
    "action",
    [
        ("timeout", -1, "x"),
        ("hibernate", 1),
        ("next_event", "bogus", 1),
        ("state_timeout", "update"),
        "soon",
        None,
    ],
)
def test_bad_action_is_seen_by_a_monitor_and_a_caller(action):
    """A malformed action stops the machine with ("bad_action_from_state_function", action)."""
    p = start(lambda et, c, s, d: ("keep_state_and_data", [action]))
    ref = e.monitor(p)
    with pytest.raises(CallError) as info:
        gen_server.call(p, "x")
    assert ("bad_action_from_state_function", action) == info.value.reason
    assert ("bad_action_from_state_function", action) == down(ref)


def test_replies_before_a_bad_action_are_sent():
    """OTP replies as it reads the actions: a reply before a bad action still reaches its caller."""
    p = start(lambda et, c, s, d: ("keep_state_and_data", [("reply", et[1], "first"), "soon"]))
    ref = e.monitor(p)
    assert "first" == gen_server.call(p, "x")
    assert ("bad_action_from_state_function", "soon") == down(ref)


def test_a_crash_in_a_state_function():
    """A state function that raises runs terminate with the exception and exits with it."""
    boom = KeyError("boom")

    def script(et, c, s, d):
        raise boom

    p = start(script)
    ref = e.monitor(p)
    with pytest.raises(CallError) as info:
        gen_server.call(p, "x")
    assert boom is info.value.reason
    assert (boom, "a", 0) == tagged("terminate")
    assert boom is down(ref)


def test_exit_in_a_state_function_terminates_with_its_reason():
    """ensemble.exit(reason) inside a state function terminates with that reason."""

    def script(et, c, s, d):
        e.exit("leaving")

    p = start(script)
    ref = e.monitor(p)
    gen_server.cast(p, "x")
    assert ("leaving", "a", 0) == tagged("terminate")
    assert "leaving" == down(ref)


def test_terminate_crashing_changes_the_exit_reason():
    """A terminate that raises makes its exception the exit reason."""
    oops = RuntimeError("oops")

    class Bad(Scripted):
        def terminate(self, reason, state, data):
            raise oops

    p = gen_statem.start(Bad(lambda et, c, s, d: ("stop", "bye")))
    ref = e.monitor(p)
    gen_server.cast(p, "x")
    assert oops is down(ref)


def test_gen_server_stop_runs_terminate():
    """gen_server.stop (a system terminate) runs terminate with the reason, last state and data."""
    p = start(lambda et, c, s, d: ("next_state", "b", 3))
    gen_server.cast(p, "x")
    assert "ok" == gen_server.stop(p, "shutdown")
    assert ("shutdown", "b", 3) == tagged("terminate")


def test_a_trapping_machine_terminates_when_its_parent_exits():
    """With trap_exit, the parent's EXIT runs terminate with the parent's reason."""
    me = e.self()

    def parent():
        p = gen_statem.start_link(Scripted(keep(), to=me), trap_exit=True)
        e.send(me, ("machine", p))
        e.receive()

    boss = e.spawn(parent)
    (p,) = tagged("machine")
    ref = e.monitor(p)
    e.exit(boss, "retire")
    assert ("retire", "a", 0) == tagged("terminate")
    assert "retire" == down(ref)


# -- state_functions mode -------------------------------------------------------------------


class Phases:
    """state_functions machine whose first event moves (with an event) to the state its data names."""

    callback_mode = "state_functions"

    def init(self):
        return ("ok", "first", "nowhere")

    def first(self, etype, content, data):
        return ("next_state", data, data, ("next_event", "internal", "arrive"))


@pytest.mark.parametrize("target", ["nowhere", "terminate", "_private"])
def test_a_state_without_a_function_stops_the_machine(target):
    """A state with no method (or naming a reserved one) stops with ("undefined_state_function", state)."""

    class M(Phases):
        def init(self):
            return ("ok", "first", target)

        def terminate(self, reason, state, data):  # a state named "terminate" must not call this
            return None

        def _private(self, *args):
            return "keep_state_and_data"

    p = gen_statem.start(M())
    ref = e.monitor(p)
    with pytest.raises(CallError) as info:
        gen_server.call(p, "go")
    assert ("undefined_state_function", target) == info.value.reason
    assert ("undefined_state_function", target) == down(ref)


def test_state_functions_with_state_enter_in_the_mode():
    """callback_mode = [mode, "state_enter"] turns enter calls on; the enter gets the old state."""
    me = e.self()

    class M:
        callback_mode = ["state_functions", "state_enter"]

        def init(self):
            return ("ok", "one", [])

        def one(self, etype, content, data):
            e.send(me, ("seen", _kind(etype), content, "one"))
            if etype == "enter":
                return "keep_state_and_data"
            return ("next_state", "two", data)

        def two(self, etype, content, data):
            e.send(me, ("seen", _kind(etype), content, "two"))
            return "keep_state_and_data"

    p = gen_statem.start(M)
    gen_server.cast(p, "go")
    assert [("enter", "one", "one"), ("cast", "go", "one"), ("enter", "one", "two")] == seen(3)


# -- queues: postpone and next_event ------------------------------------------------------------


def test_postponed_events_are_retried_after_a_state_change_only():
    """Postponed events stay while the state stays, and come first (in order) after a change."""

    def script(et, c, s, d):
        if s == "a" and c.startswith("p"):
            return ("keep_state_and_data", "postpone")
        if c == "go":
            return ("next_state", "b", d)
        return "keep_state_and_data"

    p = start(script)
    for c in ["p1", "p2", "stay", "go", "after"]:
        gen_server.cast(p, c)
    assert [
        ("cast", "p1", "a"),
        ("cast", "p2", "a"),
        ("cast", "stay", "a"),
        ("cast", "go", "a"),
        ("cast", "p1", "b"),
        ("cast", "p2", "b"),
        ("cast", "after", "b"),
    ] == seen(7)


def test_next_event_is_inserted_before_queued_and_postponed_events():
    """Inserted events run first, in the order given, then the retried postponed ones, then the mailbox."""

    def script(et, c, s, d):
        if c == "held":
            return ("keep_state_and_data", ("postpone", True)) if s == "a" else "keep_state_and_data"
        if c == "go":
            return ("next_state", "b", d, [("next_event", "internal", 1), ("next_event", "info", 2)])
        return "keep_state_and_data"

    p = start(script)
    for c in ["held", "go", "mail"]:
        gen_server.cast(p, c)
    assert [
        ("cast", "held", "a"),
        ("cast", "go", "a"),
        ("internal", 1, "b"),
        ("info", 2, "b"),
        ("cast", "held", "b"),
        ("cast", "mail", "b"),
    ] == seen(6)


def test_a_postponed_call_is_answered_after_the_state_changes():
    """A call postponed in one state is answered in the next, by a reply action."""

    def script(et, c, s, d):
        if c == "ask" and s == "a":
            return ("keep_state_and_data", "postpone")
        if c == "ask":
            return ("keep_state_and_data", ("reply", et[1], s))
        return ("next_state", "b", d)

    p = start(script)
    me = e.self()
    e.spawn(lambda: e.send(me, ("answer", gen_server.call(p, "ask"))))
    assert [("call", "ask", "a")] == seen(1)
    gen_server.cast(p, "go")
    assert ("b",) == tagged("answer")


def test_info_and_plain_messages_are_info_events():
    """A plain message is an info event, a gen_server cast a cast event."""
    p = start(keep())
    e.send(p, ("$gen_cast",))
    e.send(p, "hello")
    assert [("info", ("$gen_cast",), "a"), ("info", "hello", "a")] == seen(2)


# -- time-outs --------------------------------------------------------------------------------


def test_an_event_timeout_fires_when_no_event_comes():
    """("timeout", t, content) delivers a timeout event with the content when nothing else comes."""
    p = start(on(arm=("keep_state_and_data", ("timeout", 0.02, "idle"))))
    gen_server.cast(p, "arm")
    assert [("cast", "arm", "a"), ("timeout", "idle", "a")] == seen(2)


def test_an_event_timeout_is_cancelled_by_any_event():
    """Any event cancels the event time-out: only the later sentinel time-out fires."""

    def script(et, c, s, d):
        if c == "arm":
            return ("keep_state_and_data", ("timeout", 0.08, "idle"))
        if c == "poke":
            return ("keep_state_and_data", (("timeout", "sentinel"), 0.2, "done"))
        return "keep_state_and_data"

    p = start(script)
    gen_server.cast(p, "arm")
    gen_server.cast(p, "poke")
    assert [("cast", "arm", "a"), ("cast", "poke", "a"), (("timeout", "sentinel"), "done", "a")] == seen(3)


def test_a_bare_number_is_an_event_timeout_with_itself_as_content():
    """A bare time is ("timeout", t, t); "infinity" cancels it."""
    p = start(lambda et, c, s, d: ("keep_state_and_data", [0.02] if c == "arm" else []))
    gen_server.cast(p, "arm")
    assert [("cast", "arm", "a"), ("timeout", 0.02, "a")] == seen(2)


def test_a_zero_event_timeout_comes_before_mail_but_not_with_events_queued():
    """Time-out zero beats a message already sent; an event time-out with events queued is dropped."""

    def script(et, c, s, d):
        if c == "zero":
            return ("keep_state_and_data", ("timeout", 0, "z"))
        if c == "busy":
            return ("keep_state_and_data", [("next_event", "internal", "queued"), ("timeout", 0, "dropped")])
        return "keep_state_and_data"

    p = start(script)
    for c in ["zero", "busy", "mail"]:
        gen_server.cast(p, c)
    assert [
        ("cast", "zero", "a"),
        ("timeout", "z", "a"),
        ("cast", "busy", "a"),
        ("internal", "queued", "a"),
        ("cast", "mail", "a"),
    ] == seen(5)


def test_a_state_timeout_survives_events_but_not_a_state_change():
    """A state time-out outlives events in its state and is cancelled by a state change."""

    def script(et, c, s, d):
        if c == "arm":
            return ("keep_state_and_data", ("state_timeout", 0.06, "st"))
        if c == "arm_then_leave":
            return ("keep_state_and_data", [("state_timeout", 0.08, "never"), (("timeout", "end"), 0.2, "ok")])
        if c == "leave":
            return ("next_state", "b", d)
        return "keep_state_and_data"

    p = start(script)
    gen_server.cast(p, "arm")
    gen_server.cast(p, "poke")
    assert [("cast", "arm", "a"), ("cast", "poke", "a"), ("state_timeout", "st", "a")] == seen(3)
    gen_server.cast(p, "arm_then_leave")
    gen_server.cast(p, "leave")
    assert [
        ("cast", "arm_then_leave", "a"),
        ("cast", "leave", "a"),
        (("timeout", "end"), "ok", "b"),
    ] == seen(3)


def test_generic_timeouts_survive_state_changes_and_are_named():
    """Generic time-outs run on across state changes; each name is its own timer."""

    def script(et, c, s, d):
        if c == "arm":
            return ("keep_state_and_data", [(("timeout", 1), 0.1, "one"), (("timeout", 2), 0.06, "two")])
        if c == "leave":
            return ("next_state", "b", d)
        return "keep_state_and_data"

    p = start(script)
    gen_server.cast(p, "arm")
    gen_server.cast(p, "leave")
    assert [
        ("cast", "arm", "a"),
        ("cast", "leave", "a"),
        (("timeout", 2), "two", "b"),
        (("timeout", 1), "one", "b"),
    ] == seen(4)


def test_cancel_forms_stop_their_timers():
    """(key, "cancel") and an "infinity" time cancel; a later sentinel shows nothing else fired."""

    def script(et, c, s, d):
        if c == "arm":
            return ("keep_state_and_data", [("state_timeout", 0.06, "st"), (("timeout", "g"), 0.06, "g")])
        if c == "cancel":
            return (
                "keep_state_and_data",
                [
                    ("state_timeout", "cancel"),
                    (("timeout", "g"), "infinity", "x"),
                    (("timeout", "sentinel"), 0.15, "done"),
                ],
            )
        return "keep_state_and_data"

    p = start(script)
    gen_server.cast(p, "arm")
    gen_server.cast(p, "cancel")
    assert [("cast", "arm", "a"), ("cast", "cancel", "a"), (("timeout", "sentinel"), "done", "a")] == seen(3)


def test_update_changes_the_content_and_keeps_the_deadline():
    """(key, "update", content) changes a running timer's content; on none it fires at once."""

    def script(et, c, s, d):
        if c == "arm":
            return ("keep_state_and_data", ("state_timeout", 0.08, "old"))
        if c == "update":
            return ("keep_state_and_data", [("state_timeout", "update", "new"), (("timeout", 1), "update", "0")])
        return "keep_state_and_data"

    p = start(script)
    for c in ["arm", "update", "mail"]:
        gen_server.cast(p, c)
    assert [
        ("cast", "arm", "a"),
        ("cast", "update", "a"),
        (("timeout", 1), "0", "a"),
        ("cast", "mail", "a"),
        ("state_timeout", "new", "a"),
    ] == seen(5)


def test_an_absolute_timeout_is_a_deadline():
    """{"abs": True} makes the time a monotonic deadline; one in the past fires before later mail."""
    soon = monotonic() + 0.08

    arm = [("state_timeout", soon, "abs", {"abs": True}), (("timeout", "past"), -1, "late", {"abs": True})]
    p = start(on(arm=("keep_state_and_data", arm)))
    gen_server.cast(p, "arm")
    gen_server.cast(p, "mail")
    got = seen(4)
    assert [
        ("cast", "arm", "a"),
        (("timeout", "past"), "late", "a"),
        ("cast", "mail", "a"),
        ("state_timeout", "abs", "a"),
    ] == got
    assert True is (monotonic() >= soon)


def test_a_hibernating_machine_still_gets_its_timeouts(monkeypatch):
    """A machine that hibernates with a time-out pending is woken for it, and keeps its data."""
    me = e.self()
    real = gen_statem.hibernate

    def spy(fn, *args):
        e.send(me, ("hibernating",))
        return real(fn, *args)

    monkeypatch.setattr(gen_statem, "hibernate", spy)

    def script(et, c, s, d):
        if c == "sleep":
            return ("keep_state", 42, [("state_timeout", 0.05, "wake"), "hibernate"])
        return "keep_state_and_data"

    p = start(script)
    gen_server.cast(p, "sleep")
    assert [("cast", "sleep", "a"), "hibernating", ("state_timeout", "wake", "a")] == trail("wake")
    assert ("a", 42) == esys.get_state(p)


def test_hibernate_after_idle_keeps_timers(monkeypatch):
    """hibernate_after hibernates an idle machine; its pending time-out still fires."""
    me = e.self()
    real = gen_statem.hibernate

    def spy(fn, *args):
        e.send(me, ("hibernating",))
        return real(fn, *args)

    monkeypatch.setattr(gen_statem, "hibernate", spy)
    p = start(on(arm=("keep_state_and_data", (("timeout", "g"), 0.1, "g"))), hibernate_after=0.01)
    gen_server.cast(p, "arm")
    got = trail("g")
    while got[0] == "hibernating":  # it may have been idle long enough before "arm" came
        got = got[1:]
    assert [("cast", "arm", "a"), "hibernating", (("timeout", "g"), "g", "a")] == got


# -- state enter calls --------------------------------------------------------------------------


def test_state_enter_calls_and_repeat_state():
    """Enter calls run on the first state (old = itself), on a change and on a repeat, not on keep."""

    def script(et, c, s, d):
        if et == "enter":
            return "keep_state_and_data"
        return {
            "keep": "keep_state_and_data",
            "same": ("next_state", s, d),
            "repeat": "repeat_state_and_data",
            "move": ("next_state", "b", d),
        }[c]

    p = start(script, enter=True)
    for c in ["keep", "same", "repeat", "move"]:
        gen_server.cast(p, c)
    assert [
        ("enter", "a", "a"),
        ("cast", "keep", "a"),
        ("cast", "same", "a"),
        ("cast", "repeat", "a"),
        ("enter", "a", "a"),
        ("cast", "move", "a"),
        ("enter", "a", "b"),
    ] == seen(7)


def test_repeat_state_does_not_retry_postponed_events():
    """repeat_state re-runs the enter call but the state did not change: postponed events wait."""

    def script(et, c, s, d):
        if et == "enter":
            return "keep_state_and_data"
        if c == "held" and s == "a":
            return ("keep_state_and_data", "postpone")
        if c == "repeat":
            return ("repeat_state", d + 1)
        if c == "move":
            return ("next_state", "b", d)
        return "keep_state_and_data"

    p = start(script, enter=True)
    for c in ["held", "repeat", "move"]:
        gen_server.cast(p, c)
    assert [
        ("enter", "a", "a"),
        ("cast", "held", "a"),
        ("cast", "repeat", "a"),
        ("enter", "a", "a"),
        ("cast", "move", "a"),
        ("enter", "a", "b"),
        ("cast", "held", "b"),
    ] == seen(7)
    assert ("b", 1) == esys.get_state(p)


def test_enter_actions_follow_the_transitions():
    """An enter call's data and time-outs count; it keeps the event time-out its transition set."""

    def script(et, c, s, d):
        if et == "enter" and s == "b":
            return ("keep_state", d + ["entered"], ("state_timeout", 0.02, "from_enter"))
        if et == "enter":
            return "keep_state_and_data"
        if c == "move":
            return ("next_state", "b", d, ("timeout", 0.04, "from_transition"))
        return "keep_state_and_data"

    p = start(script, init=("ok", "a", []), enter=True)
    gen_server.cast(p, "move")
    assert [
        ("enter", "a", "a"),
        ("cast", "move", "a"),
        ("enter", "a", "b"),
        ("state_timeout", "from_enter", "b"),
    ] == seen(4)
    assert ("b", ["entered"]) == esys.get_state(p)


@pytest.mark.parametrize(
    "enter_ret, reason",
    [
        (("next_state", "c", 0), ("bad_state_enter_return_from_state_function", ("next_state", "c", 0))),
        (("keep_state_and_data", "postpone"), ("bad_state_enter_action_from_state_function", "postpone")),
        (
            ("keep_state_and_data", ("next_event", "internal", 1)),
            ("bad_state_enter_action_from_state_function", ("next_event", "internal", 1)),
        ),
        (("keep_state_and_data", "soon"), ("bad_action_from_state_function", "soon")),
    ],
)
def test_an_enter_call_may_not_change_state_postpone_or_insert(enter_ret, reason):
    """An enter call naming another state, postponing or inserting stops the machine with OTP's reason."""

    def script(et, c, s, d):
        if et == "enter":
            return enter_ret if s == "b" else "keep_state_and_data"
        return ("next_state", "b", d)

    p = start(script, enter=True)
    ref = e.monitor(p)
    gen_server.cast(p, "move")
    assert (reason, "b", 0) == tagged("terminate")
    assert reason == down(ref)


# -- reports ----------------------------------------------------------------------------------


def test_an_abnormal_stop_is_reported_with_last_event_state_data_reason():
    """A non-orderly stop logs gen_statem_terminate with the last event, state, data and reason."""
    p = start(lambda et, c, s, d: ("stop", "broken", d + 1))
    ref = e.monitor(p)
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(CallError):
            gen_server.call(p, "why")
        assert "broken" == down(ref)
    reports = [r for r in logs if r.get("event") == "gen_statem_terminate"]
    assert 1 == len(reports)
    r = reports[0]
    shown = (r["last_event"], r["state"], r["data"], r["reason"], r["pid"])
    assert (("call", "why"), "a", 1, "broken", repr(p)) == shown


def test_orderly_stops_are_not_reported():
    """normal, shutdown and ("shutdown", x) stops log no terminate report."""
    with structlog.testing.capture_logs() as logs:
        for reason in ["normal", "shutdown", ("shutdown", 1)]:
            p = start(lambda et, c, s, d, r=reason: ("stop", r))
            ref = e.monitor(p)
            gen_server.cast(p, "x")
            assert reason == down(ref)
    assert [] == [r for r in logs if r.get("event") == "gen_statem_terminate"]


def test_the_report_and_get_status_go_through_format_status():
    """format_status decides what the terminate report and sys.get_status show."""

    class Secret(Scripted):
        def format_status(self, status):
            return {**status, "data": "hidden"}

    p = gen_statem.start(Secret(on(die=("stop", "broken"))))
    assert ("a", "hidden") == esys.get_status(p)["state"]
    ref = e.monitor(p)
    with structlog.testing.capture_logs() as logs:
        gen_server.cast(p, "die")
        assert "broken" == down(ref)
    (r,) = [r for r in logs if r.get("event") == "gen_statem_terminate"]
    assert ("hidden", ("cast", "die")) == (r["data"], r["last_event"])


# -- sys ------------------------------------------------------------------------------------------


def test_sys_get_state_and_replace_state():
    """sys sees (state, data); replace_state sets both, and the machine goes on in the new state."""
    p = start(lambda et, c, s, d: "keep_state_and_data")
    assert ("a", 0) == esys.get_state(p)
    assert ("b", 5) == esys.replace_state(p, lambda sd: ("b", sd[1] + 5))
    gen_server.cast(p, "x")
    assert [("cast", "x", "b")] == seen(1)


def test_sys_replace_state_refuses_a_non_pair_and_the_machine_is_unharmed():
    """A replace_state result that is not (state, data) is refused; the state is kept."""
    p = start(keep())
    with pytest.raises(CallError) as info:
        esys.replace_state(p, lambda sd: "not a pair")
    assert ("bad_state", "not a pair") == info.value.reason
    assert ("a", 0) == esys.get_state(p)


def test_sys_suspend_holds_events_and_timeouts_until_resume():
    """A suspended machine takes no events (nor time-outs) until resumed."""
    p = start(on(arm=("keep_state_and_data", ("state_timeout", 0, "st"))))
    assert "ok" == esys.suspend(p)
    gen_server.cast(p, "arm")
    assert ("a", 0) == esys.get_state(p)
    assert TIMEOUT is tagged("seen", timeout=0.05)
    assert "ok" == esys.resume(p)
    assert [("cast", "arm", "a"), ("state_timeout", "st", "a")] == seen(2)


# -- the runtime consults ensemble.decide.gen_statem -----------------------------------------------


def test_results_go_through_statem_result_of(monkeypatch):
    """The runtime carries out statem.result_of's answer, not its own reading of the return."""
    real = statem.result_of

    def overruled(kind, ret, state, data):
        if ret == "keep_state_and_data" and kind == statem.EVENT:
            return statem.Transition("overruled", data)
        return real(kind, ret, state, data)

    monkeypatch.setattr(statem, "result_of", overruled)
    p = start(lambda et, c, s, d: "keep_state_and_data")
    gen_server.cast(p, "x")
    assert ("overruled", 0) == esys.get_state(p)


def test_queues_and_timers_go_through_statem(monkeypatch):
    """The runtime's queue is statem.next_queues's answer and its timers statem.next_timers's."""
    real_queues = statem.next_queues
    calls = []

    def extra(changed, postpone, event, postponed, inserted, queue):
        out = real_queues(changed, postpone, event, postponed, inserted, queue)
        if event == ("cast", "x"):
            return statem.Queues(out.postponed, out.queue + (("internal", "added"),))
        return out

    real_timers = statem.next_timers

    def spy(timers, actions, **kw):
        calls.append(kw["changed"])
        return real_timers(timers, actions, **kw)
    monkeypatch.setattr(statem, "next_queues", extra)
    monkeypatch.setattr(statem, "next_timers", spy)
    p = start(keep())
    gen_server.cast(p, "x")
    assert [("cast", "x", "a"), ("internal", "added", "a")] == seen(2)
    assert [True, False, False] == calls
