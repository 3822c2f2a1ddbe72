"""gen_server as OTP's: start, the loop's order, calls, casts, infos, stop, parents, reports, async requests."""

from __future__ import annotations

import pytest
import structlog

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, gen_server
from ensemble.gen_server import GenServer

# -- helpers ------------------------------------------------------------------------------


def next_tagged(tag, timeout=2.0):
    """Take the oldest tuple message whose first element is ``tag`` (TIMEOUT if none comes)."""

    def matcher(m):
        if type(m) is tuple and m and type(m[0]) is str and m[0] == tag:
            return m
        return NOMATCH

    return e.receive(matcher, timeout=timeout)


def wait_status(pid, status, steps=400):
    """Poll process_info(pid, "status") until it is ``status`` (bounded: about 2 s); answer the last seen."""
    seen = None
    for _ in range(steps):
        seen = e.process_info(pid, "status")
        if seen == status:
            return seen
        e.receive(lambda m: NOMATCH, timeout=0.005)
    return seen


def wait_for(value):
    """Block the running process until exactly ``value`` arrives."""
    return e.receive(lambda m: m if type(m) is type(value) and m == value else NOMATCH)


class Server(GenServer):
    """A server that does what each request says and tells its owner about callbacks.

    init: ``init`` option (a return, or a function of the server answering one).
    Calls: "get", ("put", v), ("return", ret), ("raise", exc), ("exit", r), "hold"
    (answer later), "reply_via" (a helper process answers), ("block", who),
    "call_self", ("spawn_link", reason).  Casts: ("put", v), ("return", ret),
    ("release", v) (answer the held call), ("block", who); others are told.
    Infos, but ("stop_info", reason) which stops, and terminate are told to the owner.
    """

    def __init__(self, owner=None, init=("ok", 0), terminate_raises=None):
        self.owner = owner
        self.init_ret = init
        self.terminate_raises = terminate_raises
        self.held = None

    def tell(self, *msg):
        if self.owner is not None:
            e.send(self.owner, msg)

    def init(self):
        ret = self.init_ret
        return ret(self) if callable(ret) else ret

    def handle_call(self, request, from_, state):
        match request:
            case "get":
                return ("reply", state, state)
            case ("put", v):
                return ("reply", "ok", v)
            case ("return", ret):
                return ret
            case ("raise", exc):
                raise exc
            case ("exit", reason):
                e.exit(reason)
            case "hold":
                self.held = from_
                return ("noreply", state)
            case "reply_via":
                e.spawn(gen_server.reply, from_, "from helper")
                return ("noreply", state)
            case ("block", who):
                e.send(who, "blocked")
                wait_for("unblock")
                return ("reply", "unblocked", state)
            case "call_self":
                try:
                    gen_server.call(e.self(), "get")
                except e.CallError as err:
                    return ("reply", err.reason, state)
            case ("spawn_link", reason):
                return ("reply", e.spawn_link(e.exit, reason), state)
        return ("reply", ("unknown", request), state)

    def handle_cast(self, request, state):
        match request:
            case ("put", v):
                return ("noreply", v)
            case ("return", ret):
                return ret
            case ("release", v):
                gen_server.reply(self.held, v)
                self.tell("replied")
                return ("noreply", state)
            case ("block", who):
                e.send(who, "blocked")
                wait_for("unblock")
                return ("noreply", state)
        self.tell("cast", request)
        return ("noreply", state)

    def handle_info(self, msg, state):
        if type(msg) is tuple and len(msg) == 2 and msg[0] == "stop_info":
            return ("stop", msg[1], state)
        self.tell("info", msg)
        return ("noreply", state)

    def terminate(self, reason, state):
        self.tell("terminate", reason, state)
        if self.terminate_raises is not None:
            raise self.terminate_raises


class TimeoutServer(Server):
    """A Server with handle_timeout, which tells ("timeout", state)."""

    def handle_timeout(self, state):
        self.tell("timeout", state)
        return ("noreply", state)


def blocked_init(server):
    """An init that tells its pid and then never returns."""
    server.tell("init", e.self())
    e.receive(lambda m: NOMATCH)


def raising_init(server):
    raise LookupError("init failed")


# -- start ----------------------------------------------------------------------------------


def test_start_returns_the_pid_after_init_returned():
    """start answers the pid only after init returned: init's message is already waiting, under the name."""
    me = e.self()

    def init(server):
        server.tell("init", e.self(), e.whereis("ordered"))
        return ("ok", 0)

    pid = gen_server.start(Server(me, init=init), name="ordered")
    assert ("init", pid, pid) == e.receive(timeout=0)
    assert pid is e.whereis("ordered")


@pytest.mark.parametrize("make", [lambda: Server, lambda: Server()], ids=["class", "instance"])
def test_start_with_a_class_or_an_instance(make):
    """start takes a server class (instantiated with no arguments) or an instance."""
    pid = gen_server.start(make())
    assert ("ok", 5) == (gen_server.call(pid, ("put", 5)), gen_server.call(pid, "get"))


def test_init_timeout_runs_handle_timeout():
    """("ok", s, t) runs handle_timeout(s) once t seconds pass with no message."""
    gen_server.start(TimeoutServer(e.self(), init=("ok", "s0", 0.02)))
    assert ("timeout", "s0") == next_tagged("timeout")


def test_a_message_first_keeps_the_timeout_from_firing():
    """A message taken before the timeout elapses cancels it: its callback's return has no timeout."""

    def init(server):
        gen_server.cast(e.self(), ("put", "cast first"))
        return ("ok", "s0", 0.02)

    pid = gen_server.start(TimeoutServer(e.self(), init=init))
    assert "cast first" == gen_server.call(pid, "get")
    assert TIMEOUT is next_tagged("timeout", timeout=0.2)


def test_a_message_rearms_the_timeout():
    """The timeout that fires is the one the last callback returned, and it fires once."""

    def init(server):
        gen_server.cast(e.self(), ("return", ("noreply", "re-armed", 0.02)))
        return ("ok", "s0", 0.02)

    gen_server.start(TimeoutServer(e.self(), init=init))
    assert ("timeout", "re-armed") == next_tagged("timeout")
    assert TIMEOUT is next_tagged("timeout", timeout=0.1)


def test_timeout_goes_to_handle_info_without_handle_timeout():
    """A server with no handle_timeout gets handle_info("timeout", state)."""
    pid = gen_server.start(Server(e.self(), init=("ok", "s0", 0.02)))
    assert ("info", "timeout") == next_tagged("info")
    assert "s0" == gen_server.call(pid, "get")


def test_call_return_timeout_runs_handle_timeout():
    """("reply", r, s, t) answers, then runs handle_timeout(s) after t."""
    pid = gen_server.start(TimeoutServer(e.self()))
    assert "r" == gen_server.call(pid, ("return", ("reply", "r", "after call", 0.02)))
    assert ("timeout", "after call") == next_tagged("timeout")


def test_a_huge_integer_timeout_is_a_long_wait():
    """("ok", s, 10**400) is a valid (very long) timeout: the server serves calls."""
    pid = gen_server.start(TimeoutServer(e.self(), init=("ok", "s0", 10**400)))
    with structlog.testing.capture_logs():
        try:
            answer = gen_server.call(pid, "get", timeout=2)
        except e.CallError as err:
            answer = err.reason
    assert "s0" == answer


def test_init_hibernate_then_serves_a_call():
    """("ok", s, "hibernate") hibernates at once; a call wakes it with its state."""
    pid = gen_server.start(Server(init=("ok", 3, "hibernate")))
    assert "hibernating" == wait_status(pid, "hibernating")
    assert 3 == gen_server.call(pid, "get")


def test_reply_with_hibernate_hibernates():
    """("reply", r, s, "hibernate") answers and hibernates; the next call is served with s."""
    pid = gen_server.start(Server())
    assert "r" == gen_server.call(pid, ("return", ("reply", "r", 8, "hibernate")))
    assert "hibernating" == wait_status(pid, "hibernating")
    assert 8 == gen_server.call(pid, "get")


class ContinueServer(GenServer):
    """Records continues and infos in its state; c1 continues with c2; "stop" stops."""

    def __init__(self, owner=None):
        self.owner = owner

    def init(self):
        e.send(e.self(), "early")  # waits in the mailbox before the loop starts
        return ("ok", [], ("continue", "c1"))

    def handle_continue(self, c, state):
        state = state + [("continue", c)]
        if c == "c1":
            return ("noreply", state, ("continue", "c2"))
        if c == "stop":
            return ("stop", "from continue", state)
        return ("noreply", state)

    def handle_info(self, msg, state):
        return ("noreply", state + [("info", msg)])

    def handle_call(self, request, from_, state):
        if request == "continue_stop":
            return ("reply", "ok", state, ("continue", "stop"))
        return ("reply", state, state)

    def terminate(self, reason, state):
        e.send(self.owner, ("terminate", reason, state))


def test_continue_runs_before_any_message():
    """A continue from init (and one it continues with) runs before a message already waiting."""
    pid = gen_server.start(ContinueServer())
    assert [("continue", "c1"), ("continue", "c2"), ("info", "early")] == gen_server.call(pid, "get")


def test_continue_may_stop_the_server():
    """A handle_continue may stop: terminate runs and the server exits with the reason."""
    pid = gen_server.start(ContinueServer(e.self()))
    assert "ok" == gen_server.call(pid, "continue_stop")
    assert "from continue" == e.exit_reason(pid, timeout=2)
    state = [("continue", "c1"), ("continue", "c2"), ("info", "early"), ("continue", "stop")]
    assert ("terminate", "from continue", state) == next_tagged("terminate")


def test_init_stop_fails_start_and_exits_with_reason():
    """("stop", r) from init raises StartError(r); the process exited with r."""

    def init(server):
        server.tell("init", e.self())
        return ("stop", "no thanks")

    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(e.self(), init=init))
    assert "no thanks" == info.value.reason
    _, pid = next_tagged("init", timeout=0)
    assert "no thanks" == e.exit_reason(pid, timeout=2)


def test_init_error_fails_start_and_exits_normal():
    """("error", r) from init raises StartError(r); the process exited "normal"."""

    def init(server):
        server.tell("init", e.self())
        return ("error", "bad config")

    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(e.self(), init=init))
    assert "bad config" == info.value.reason
    _, pid = next_tagged("init", timeout=0)
    assert "normal" == e.exit_reason(pid, timeout=2)


def test_init_ignore_answers_ignore():
    """"ignore" from init makes start answer "ignore"; the process exited "normal" and freed its name."""

    def init(server):
        server.tell("init", e.self())
        return "ignore"

    assert "ignore" == gen_server.start(Server(e.self(), init=init), name="ignored")
    _, pid = next_tagged("init", timeout=0)
    assert ("normal", None) == (e.exit_reason(pid, timeout=2), e.whereis("ignored"))


@pytest.mark.parametrize("ret", [0, ("ok",), ("ok", 1, "soon"), ("ok", 1, True)], ids=repr)
def test_bad_init_return_fails_start(ret):
    """A bad init return raises StartError(("bad_return_value", ret)); the process exited with it."""

    def init(server):
        server.tell("init", e.self())
        return ret

    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(e.self(), init=init))
    assert ("bad_return_value", ret) == info.value.reason
    _, pid = next_tagged("init", timeout=0)
    assert ("bad_return_value", ret) == e.exit_reason(pid, timeout=2)


def test_init_raising_fails_start_with_the_exception():
    """An exception from init raises StartError with that very exception as reason."""
    exc = LookupError("init failed")

    def init(server):
        raise exc

    with structlog.testing.capture_logs():
        with pytest.raises(e.StartError) as info:
            gen_server.start(Server(init=init))
    assert exc is info.value.reason


def test_init_exit_fails_start_with_the_reason():
    """exit(r) in init raises StartError(r)."""
    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(init=lambda s: e.exit("went away")))
    assert "went away" == info.value.reason


def test_taken_name_fails_start_with_already_started():
    """A taken name raises StartError(("already_started", holder)) and starts nothing."""
    me = e.self()
    holder = gen_server.start(Server(), name="taken")
    before = e.processes()
    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(me, init=lambda s: (s.tell("init"), ("ok", 0))[1]), name="taken")
    assert ("already_started", holder) == info.value.reason
    assert before == e.processes()
    assert TIMEOUT is next_tagged("init", timeout=0)


def test_init_timeout_kills_the_process_and_frees_the_name():
    """An init slower than timeout raises StartError("timeout"); the process is dead and the name free."""
    with pytest.raises(e.StartError) as info:
        gen_server.start(Server(e.self(), init=blocked_init), name="slow", timeout=0.05)
    assert "timeout" == info.value.reason
    _, pid = next_tagged("init", timeout=0)
    assert (False, None, "killed") == (e.is_alive(pid), e.whereis("slow"), e.exit_reason(pid, timeout=0))


FAILING_INITS = {
    "stop": lambda s: ("stop", "no"),
    "error": lambda s: ("error", "no"),
    "bad_return": lambda s: "no",
    "raise": raising_init,
    "exit": lambda s: e.exit("no"),
    "timeout": blocked_init,
}


@pytest.mark.parametrize("init", FAILING_INITS.values(), ids=FAILING_INITS.keys())
def test_failed_start_link_does_not_kill_a_non_trapping_caller(init):
    """A failed start_link raises StartError in a non-trapping caller, which lives on."""

    def caller():
        try:
            gen_server.start_link(Server(init=init), timeout=0.05)
        except e.StartError:
            pass
        wait_for("finish")
        return "survived"

    with structlog.testing.capture_logs():
        p = e.spawn(caller)
        e.send(p, "finish")
        assert "survived" == e.join(p, timeout=2)


@pytest.mark.parametrize("init", FAILING_INITS.values(), ids=FAILING_INITS.keys())
def test_failed_start_link_leaves_no_exit_message_in_a_trapping_caller(init):
    """After a failed start_link a trapping caller's mailbox holds no EXIT."""

    def caller():
        e.trap_exit(True)
        try:
            gen_server.start_link(Server(init=init), timeout=0.05)
        except e.StartError:
            return ("failed", e.process_info(e.self(), "messages"))
        return ("started", None)

    with structlog.testing.capture_logs():
        assert ("failed", []) == e.join(e.spawn(caller), timeout=2)


def test_start_link_links_the_caller():
    """start_link links the server to its caller."""
    e.trap_exit(True)  # the teardown's kill must not reach the test's greenlet
    pid = gen_server.start_link(Server())
    assert ([e.self()], [pid]) == (e.process_info(pid, "links"), e.process_info(e.self(), "links"))


def test_negative_hibernate_after_is_badarg():
    """A negative hibernate_after raises Badarg before anything starts."""
    before = e.processes()
    with pytest.raises(e.Badarg):
        gen_server.start(Server(), hibernate_after=-1)
    assert before == e.processes()


def test_initial_call_and_ancestors():
    """process_info shows the initial call (module, "Class.init", 0) and the starter chain as ancestors."""
    me = e.self()
    pid = gen_server.start(Server())
    assert ((Server.__module__, "Server.init", 0), [me]) == (
        e.process_info(pid, "initial_call"),
        e.process_info(pid, "ancestors"),
    )

    def starter():
        return gen_server.start_link(Server()), e.self()

    child, parent = e.join(e.spawn(starter), timeout=2)
    assert [parent, me] == e.process_info(child, "ancestors")


# -- call -------------------------------------------------------------------------------------


def test_call_answers_the_reply():
    """A call answers handle_call's reply and the state carries over."""
    pid = gen_server.start(Server())
    assert ["ok", 42, 42] == [
        gen_server.call(pid, ("put", 42)),
        gen_server.call(pid, "get"),
        gen_server.call(pid, "get", timeout=None),
    ]


def test_call_by_name_and_name_node():
    """A call reaches a server by its name and by (name, node)."""
    gen_server.start(Server(init=("ok", "named")), name="by_name")
    assert ("named", "named") == (
        gen_server.call("by_name", "get"),
        gen_server.call(("by_name", e.node()), "get"),
    )


def test_delayed_reply_from_another_process():
    """("noreply", s) leaves the call open; reply(from_, v) from another process answers it."""
    pid = gen_server.start(Server())
    assert "from helper" == gen_server.call(pid, "reply_via")


def test_reply_returns_its_value_and_sends_to_the_alias():
    """reply(from_, v) returns v and sends (alias, v); a malformed from_ is Badarg."""
    a = e.alias()
    assert 3 == gen_server.reply((e.self(), a), 3)
    assert (a, 3) == e.receive(timeout=1)
    with pytest.raises(e.Badarg):
        gen_server.reply(None, 1)


def test_stop_with_reply_replies_then_stops():
    """("stop", reason, reply, state) answers the caller, runs terminate and exits with reason."""
    pid = gen_server.start(Server(e.self()))
    assert "bye" == gen_server.call(pid, ("return", ("stop", "done", "bye", 7)))
    assert ("terminate", "done", 7) == next_tagged("terminate", timeout=0)
    assert "done" == e.exit_reason(pid, timeout=2)


def test_stop_without_reply_fails_the_caller_with_reason():
    """("stop", reason, state) from handle_call runs terminate and the caller fails with reason."""
    pid = gen_server.start(Server(e.self()))
    request = ("return", ("stop", ("shutdown", "asked"), 7))
    with pytest.raises(e.CallError) as info:
        gen_server.call(pid, request)
    assert (("shutdown", "asked"), request) == (info.value.reason, info.value.request)
    assert ("terminate", ("shutdown", "asked"), 7) == next_tagged("terminate", timeout=0)


@pytest.mark.parametrize(
    "ret", [0, ("reply", 1), ("noreply", 0, "soon"), ("reply", 1, 0, -1), ("ok", 0)], ids=repr
)
def test_bad_call_return_fails_the_caller(ret):
    """A bad handle_call return stops the server; the caller fails with ("bad_return_value", ret)."""
    pid = gen_server.start(Server(e.self()))
    with structlog.testing.capture_logs():
        with pytest.raises(e.CallError) as info:
            gen_server.call(pid, ("return", ret))
    assert ("bad_return_value", ret) == info.value.reason
    assert ret is info.value.reason[1]
    assert ("terminate", ("bad_return_value", ret), 0) == next_tagged("terminate", timeout=0)


def test_raising_callback_fails_the_caller_with_the_exception():
    """A handle_call that raises runs terminate with the exception; the caller fails with it."""
    exc = ValueError("boom")
    pid = gen_server.start(Server(e.self()))
    with structlog.testing.capture_logs():
        with pytest.raises(e.CallError) as info:
            gen_server.call(pid, ("raise", exc))
    assert exc is info.value.reason
    _, reason, state = next_tagged("terminate", timeout=0)
    assert (True, 0) == (reason is exc, state)
    assert exc is e.exit_reason(pid, timeout=2)


def test_exit_in_a_callback_stops_with_its_reason():
    """exit(r) in handle_call runs terminate with r; the caller fails with r."""
    pid = gen_server.start(Server(e.self()))
    with structlog.testing.capture_logs():
        with pytest.raises(e.CallError) as info:
            gen_server.call(pid, ("exit", "custom"))
    assert "custom" == info.value.reason
    assert ("terminate", "custom", 0) == next_tagged("terminate", timeout=0)


def test_call_to_a_dead_pid_or_unknown_name_is_noproc():
    """A call to a dead pid, an unknown name or a name on another node fails with "noproc"."""
    pid = gen_server.start(Server())
    gen_server.stop(pid)
    reasons = []
    for dest in (pid, "nobody_here", ("nobody_here", e.node()), ("x", "other@host")):
        with pytest.raises(e.CallError) as info:
            gen_server.call(dest, "get")
        reasons.append((info.value.reason, info.value.request))
    assert [("noproc", "get")] * 4 == reasons


def test_call_to_a_non_address_is_badarg():
    """A call to something that is no pid or name raises Badarg."""
    with pytest.raises(e.Badarg):
        gen_server.call(42, "get")


def test_calling_self_fails():
    """A process calling itself fails with "calling_self", in a server and in the shell."""
    pid = gen_server.start(Server())
    assert "calling_self" == gen_server.call(pid, "call_self")
    with pytest.raises(e.CallError) as info:
        gen_server.call(e.self(), "get")
    assert "calling_self" == info.value.reason


def late_reply_is_dropped():
    """Time out a call, let the server answer late; answer what is left in the caller (messages, monitors)."""
    pid = gen_server.start(Server(e.self()))
    with pytest.raises(e.CallError) as info:
        gen_server.call(pid, "hold", timeout=0.05)
    gen_server.cast(pid, ("release", "late"))
    replied = next_tagged("replied")
    me = e.self()
    return info.value.reason, replied, e.process_info(me, "messages"), e.process_info(me, "monitors")


def test_call_timeout_drops_the_late_reply_in_the_shell():
    """A call from the test's greenlet times out with "timeout"; the late reply never reaches its mailbox."""
    assert ("timeout", ("replied",), [], []) == late_reply_is_dropped()


def test_call_timeout_drops_the_late_reply_in_a_process():
    """A call from a spawned process times out with "timeout"; the late reply never reaches its mailbox."""
    assert ("timeout", ("replied",), [], []) == e.join(e.spawn(late_reply_is_dropped), timeout=5)


def call_and_wait(pid, timeout):
    try:
        return gen_server.call(pid, "hold", timeout=timeout)
    except e.CallError as err:
        return err.reason


def receive_and_wait(pid, timeout):
    return gen_server.receive_response(gen_server.send_request(pid, "hold"), timeout=timeout)


@pytest.mark.parametrize("wait", [call_and_wait, receive_and_wait], ids=["call", "receive_response"])
def test_a_reply_racing_the_timeout_is_not_left_behind(monkeypatch, wait):
    """A reply landing between the timeout and the alias's release is taken or dropped, never left queued."""
    from ensemble import _process

    server = Server()
    pid = gen_server.start(server)
    me = e.self()
    original = _process.receive

    def racing(matcher=None, *, timeout=None):
        got = original(matcher, timeout=timeout)
        if got is TIMEOUT and e.self() is me and server.held is not None:
            gen_server.reply(server.held, "just now")  # as if from another carrier, right in the gap
            server.held = None
        return got

    monkeypatch.setattr(_process, "receive", racing)
    answer = wait(pid, 0.05)
    monkeypatch.undo()
    assert (True, []) == (answer in ("timeout", "just now", ("reply", "just now")), e.process_info(me, "messages"))


def test_server_killed_mid_call_fails_the_caller_with_killed():
    """A server killed while serving a call makes the call fail with "killed"."""
    pid = gen_server.start(Server())

    def killer():
        wait_for("blocked")
        e.exit(pid, "kill")

    k = e.spawn(killer)
    with pytest.raises(e.CallError) as info:
        gen_server.call(pid, ("block", k), timeout=5)
    assert "killed" == info.value.reason
    assert [] == e.process_info(e.self(), "messages")


# -- cast and info ----------------------------------------------------------------------------


def test_cast_reaches_handle_cast():
    """cast answers "ok" and handle_cast gets the request."""
    pid = gen_server.start(Server(e.self()))
    assert "ok" == gen_server.cast(pid, "hello")
    assert ("cast", "hello") == next_tagged("cast")


def test_cast_never_fails():
    """cast answers "ok" for a dead pid, an unknown name, another node and a non-address."""
    pid = gen_server.start(Server())
    gen_server.stop(pid)
    dests = (pid, "nobody_here", ("nobody_here", "other@host"), 42, ("x",), (["x"], e.node()))
    assert ["ok"] * len(dests) == [gen_server.cast(d, "hello") for d in dests]


def test_handle_info_gets_plain_and_lookalike_messages():
    """Plain messages and ones merely looking like protocol messages go to handle_info, in order."""
    pid = gen_server.start(Server(e.self()))
    sent = ["plain", ("$gen_cast", "a", "b"), ("$gen_call", "x"), ("system", "x"), ("EXIT", "x", "y"), (1,)]
    sent += [("$gen_cast", 1, 2, 3), ("$gen_call", 1, 2, 3)]
    for m in sent:
        e.send(pid, m)
    assert 0 == gen_server.call(pid, "get")
    assert [("info", m) for m in sent] == [next_tagged("info", timeout=0) for _ in sent]


def test_an_empty_tuple_goes_to_handle_info():
    """The message () goes to handle_info like any other."""
    pid = gen_server.start(Server(e.self()))
    e.send(pid, ())
    with structlog.testing.capture_logs():
        try:
            state = gen_server.call(pid, "get", timeout=2)
        except e.CallError as err:
            state = err
    assert (0, ("info", ())) == (state, next_tagged("info", timeout=0))


def test_exit_from_a_non_parent_goes_to_handle_info():
    """A trapping server gets an EXIT from a linked process that is not its parent in handle_info."""
    pid = gen_server.start(Server(e.self()), trap_exit=True)
    child = gen_server.call(pid, ("spawn_link", "child done"))
    assert ("info", ("EXIT", child, "child done")) == next_tagged("info")
    assert True is e.is_alive(pid)


def test_unlinked_server_treats_the_starters_exit_as_info():
    """A trapping server started with start (no link) is its own parent: an EXIT from its starter is an info."""
    me = e.self()
    pid = gen_server.start(Server(me), trap_exit=True)
    e.exit(pid, "shutdown")
    with structlog.testing.capture_logs():
        try:
            state = gen_server.call(pid, "get", timeout=2)
        except e.CallError as err:
            state = err
    assert (0, ("info", ("EXIT", me, "shutdown"))) == (state, next_tagged("info", timeout=0))


# -- stop -------------------------------------------------------------------------------------


def test_stop_runs_terminate_with_normal():
    """stop(dest) answers "ok" once the server exited; terminate ran with "normal"."""
    pid = gen_server.start(Server(e.self()), name="stopped")
    assert "ok" == gen_server.stop("stopped")
    assert ("terminate", "normal", 0) == next_tagged("terminate", timeout=0)
    assert ("normal", None) == (e.exit_reason(pid, timeout=0), e.whereis("stopped"))


@pytest.mark.parametrize("reason", ["shutdown", ("shutdown", 1), "custom"], ids=repr)
def test_stop_with_a_reason(reason):
    """stop(dest, reason) runs terminate with reason and the server exits with it."""
    pid = gen_server.start(Server(e.self()))
    with structlog.testing.capture_logs():
        assert "ok" == gen_server.stop(pid, reason)
    assert ("terminate", reason, 0) == next_tagged("terminate", timeout=0)
    assert reason == e.exit_reason(pid, timeout=0)


def test_stop_of_a_dead_server_is_noproc():
    """stop of a dead pid or an unknown name fails with "noproc"."""
    pid = gen_server.start(Server())
    gen_server.stop(pid)
    reasons = []
    for dest in (pid, "nobody_here"):
        with pytest.raises(e.CallError) as info:
            gen_server.stop(dest)
        reasons.append(info.value.reason)
    assert ["noproc", "noproc"] == reasons


def test_stop_times_out_while_the_server_is_busy():
    """stop with a timeout fails with "timeout" while the server is busy; the server stops once free."""
    me = e.self()
    pid = gen_server.start(Server(me))
    gen_server.cast(pid, ("block", me))
    assert "blocked" == wait_for("blocked")
    with pytest.raises(e.CallError) as info:
        gen_server.stop(pid, timeout=0.05)
    assert "timeout" == info.value.reason
    e.send(pid, "unblock")
    assert "normal" == e.exit_reason(pid, timeout=2)
    assert [] == e.process_info(me, "monitors")


def test_stop_fails_with_the_reason_terminate_raised():
    """When terminate raises, the server exits with that exception and stop fails with it."""
    exc = RuntimeError("terminate failed")
    pid = gen_server.start(Server(terminate_raises=exc))
    with structlog.testing.capture_logs():
        with pytest.raises(e.CallError) as info:
            gen_server.stop(pid)
    assert (True, True) == (exc is info.value.reason, exc is e.exit_reason(pid, timeout=2))


# -- the parent -------------------------------------------------------------------------------


def server_under_parent(me, trap_exit):
    """A parent process: start_link a server, tell its pid, exit with the reason sent to it."""
    pid = gen_server.start_link(Server(me), trap_exit=trap_exit)
    e.send(me, ("server", pid))
    reason = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "die" else NOMATCH)
    e.exit(reason)


def test_trapping_server_terminates_when_its_parent_exits():
    """A trapping server whose parent exits runs terminate with the parent's reason and exits with it."""
    me = e.self()
    parent = e.spawn(server_under_parent, me, True)
    _, pid = next_tagged("server")
    e.send(parent, ("die", "shutdown"))
    assert ("terminate", "shutdown", 0) == next_tagged("terminate")
    assert "shutdown" == e.exit_reason(pid, timeout=2)


def test_non_trapping_server_dies_with_its_parent_without_terminate():
    """A server not trapping exits dies with its parent's reason; terminate does not run."""
    me = e.self()
    parent = e.spawn(server_under_parent, me, False)
    _, pid = next_tagged("server")
    e.send(parent, ("die", "crashed"))
    assert "crashed" == e.exit_reason(pid, timeout=2)
    assert TIMEOUT is next_tagged("terminate", timeout=0)


# -- hibernate_after ---------------------------------------------------------------------------


def test_hibernate_after_idle_and_still_serves():
    """hibernate_after hibernates an idle server; it still serves calls with its state."""
    pid = gen_server.start(Server(), hibernate_after=0.02)
    assert "ok" == gen_server.call(pid, ("put", 11))
    assert "hibernating" == wait_status(pid, "hibernating")
    assert 11 == gen_server.call(pid, "get")
    assert "hibernating" == wait_status(pid, "hibernating")
    assert "ok" == gen_server.call(pid, ("put", 12))
    assert 12 == gen_server.call(pid, "get")


# -- terminate reports -----------------------------------------------------------------------


class Formatted(Server):
    """A Server whose format_status wraps the state."""

    def format_status(self, status):
        return {**status, "state": ("formatted", status["state"])}


class BadlyFormatted(Server):
    """A Server whose format_status raises."""

    def format_status(self, status):
        raise RuntimeError("cannot format")


def terminate_reports(logs):
    return [r for r in logs if r["event"] == "gen_server_terminate"]


def test_abnormal_stop_in_a_call_is_reported():
    """An abnormal stop logs gen_server_terminate: last message ("call", req), formatted state, reason."""
    request = ("return", ("stop", "broken", 7))
    with structlog.testing.capture_logs() as logs:
        pid = gen_server.start(Formatted(), name="reported")
        with pytest.raises(e.CallError):
            gen_server.call(pid, request)
    reports = terminate_reports(logs)
    assert 1 == len(reports)
    r = reports[0]
    assert ("error", repr(pid), "reported", ("call", request), ("formatted", 7), "broken") == (
        r["log_level"],
        r["pid"],
        r["name"],
        r["last_message"],
        r["state"],
        r["reason"],
    )


def test_abnormal_stops_in_a_cast_an_info_and_a_stop_are_reported():
    """A cast is shown as ("cast", req), an info as the message itself, a stop as its system message."""
    with structlog.testing.capture_logs() as logs:
        a = gen_server.start(Server())
        gen_server.cast(a, ("return", ("stop", "cast broke", 1)))
        e.exit_reason(a, timeout=2)
        b = gen_server.start(Server())
        e.send(b, ("stop_info", "info broke"))
        e.exit_reason(b, timeout=2)
        c = gen_server.start(Server())
        gen_server.stop(c, "stop broke")
    assert [
        (("cast", ("return", ("stop", "cast broke", 1))), "cast broke"),
        (("stop_info", "info broke"), "info broke"),
        (("system", ("terminate", "stop broke")), "stop broke"),
    ] == [(r["last_message"], r["reason"]) for r in terminate_reports(logs)]


@pytest.mark.parametrize("reason", ["normal", "shutdown", ("shutdown", "x")], ids=repr)
def test_orderly_stops_are_not_reported(reason):
    """A stop with "normal", "shutdown" or ("shutdown", x) logs no report."""
    with structlog.testing.capture_logs() as logs:
        pid = gen_server.start(Server())
        gen_server.cast(pid, ("return", ("stop", reason, 0)))
        assert reason == e.exit_reason(pid, timeout=2)
    assert [] == terminate_reports(logs)


def test_format_status_raising_reports_the_unformatted_state():
    """When format_status raises, the report shows the state as it is."""
    with structlog.testing.capture_logs() as logs:
        pid = gen_server.start(BadlyFormatted())
        with pytest.raises(e.CallError):
            gen_server.call(pid, ("return", ("stop", "broken", 7)))
    assert [(7, "broken")] == [(r["state"], r["reason"]) for r in terminate_reports(logs)]


def test_bad_returns_and_raising_callbacks_are_reported():
    """A bad return is reported with ("bad_return_value", ret), a raising callback with the exception."""
    exc = KeyError("lost")
    with structlog.testing.capture_logs() as logs:
        a = gen_server.start(Server())
        gen_server.cast(a, ("return", None))
        e.exit_reason(a, timeout=2)
        b = gen_server.start(Server())
        with pytest.raises(e.CallError):
            gen_server.call(b, ("raise", exc))
    reasons = [r["reason"] for r in terminate_reports(logs)]
    assert (2, ("bad_return_value", None), True) == (len(reasons), reasons[0], reasons[-1] is exc)


# -- asynchronous requests --------------------------------------------------------------------


def test_send_request_and_wait_response():
    """send_request then wait_response answers ("reply", v) and releases its monitor."""
    pid = gen_server.start(Server(init=("ok", 4)))
    req = gen_server.send_request(pid, "get")
    assert ("reply", 4) == gen_server.wait_response(req, timeout=2)
    assert [] == e.process_info(e.self(), "monitors")


def test_send_request_and_receive_response():
    """send_request then receive_response answers ("reply", v)."""
    pid = gen_server.start(Server(init=("ok", 4)))
    req = gen_server.send_request(pid, "get")
    assert ("reply", 4) == gen_server.receive_response(req, timeout=2)


def test_check_response_on_a_received_message():
    """check_response answers ("reply", v) for the reply message and "no_reply" for others."""
    pid = gen_server.start(Server(init=("ok", 4)))
    req = gen_server.send_request(pid, "get")
    msg = e.receive(timeout=2)
    assert ("no_reply", ("reply", 4)) == (
        gen_server.check_response("other", req),
        gen_server.check_response(msg, req),
    )
    assert [] == e.process_info(e.self(), "monitors")


def test_collection_answers_each_request_with_its_label():
    """A collection answers each request with its label and the rest; then "no_request"."""
    a = gen_server.start(Server(init=("ok", "A")))
    b = gen_server.start(Server(init=("ok", "B")))
    coll = gen_server.send_request(a, "get", "label a", gen_server.reqids_new())
    coll = gen_server.send_request(b, "get", "label b", coll)
    assert 2 == gen_server.reqids_size(coll)
    first, label1, rest = gen_server.wait_response(coll, timeout=2)
    second, label2, rest = gen_server.receive_response(rest, timeout=2)
    assert {(("reply", "A"), "label a"), (("reply", "B"), "label b")} == {(first, label1), (second, label2)}
    assert (0, "no_request") == (gen_server.reqids_size(rest), gen_server.wait_response(rest, timeout=0))
    assert [] == e.process_info(e.self(), "monitors")


def test_collection_without_delete_keeps_the_request():
    """With delete false the answered request stays in the collection that comes back."""
    pid = gen_server.start(Server(init=("ok", 1)))
    coll = gen_server.send_request(pid, "get", "only", gen_server.reqids_new())
    answer, label, rest = gen_server.wait_response(coll, timeout=2, delete=False)
    assert (("reply", 1), "only", coll) == (answer, label, rest)


def test_check_response_with_a_collection():
    """check_response answers (answer, label, rest) for a collection's reply."""
    pid = gen_server.start(Server(init=("ok", 1)))
    coll = gen_server.send_request(pid, "get", "lbl", gen_server.reqids_new())
    msg = e.receive(timeout=2)
    answer, label, rest = gen_server.check_response(msg, coll)
    assert (("reply", 1), "lbl", 0) == (answer, label, gen_server.reqids_size(rest))
    assert "no_request" == gen_server.check_response(msg, rest)


def test_receive_response_timeout_abandons_the_request():
    """receive_response's timeout abandons the request: the late reply never arrives."""
    pid = gen_server.start(Server(e.self()))
    req = gen_server.send_request(pid, "hold")
    assert "timeout" == gen_server.receive_response(req, timeout=0.05)
    gen_server.cast(pid, ("release", "late"))
    assert ("replied",) == next_tagged("replied")
    assert ([], []) == (e.process_info(e.self(), "messages"), e.process_info(e.self(), "monitors"))


def test_receive_response_timeout_abandons_a_collection():
    """receive_response's timeout on a collection abandons all its requests."""
    pid = gen_server.start(Server(e.self()))
    coll = gen_server.send_request(pid, "hold", "held", gen_server.reqids_new())
    assert "timeout" == gen_server.receive_response(coll, timeout=0.05)
    gen_server.cast(pid, ("release", "late"))
    assert ("replied",) == next_tagged("replied")
    assert ([], []) == (e.process_info(e.self(), "messages"), e.process_info(e.self(), "monitors"))


def test_wait_response_timeout_keeps_the_request():
    """wait_response's timeout keeps the request, so a later wait gets the late reply."""
    pid = gen_server.start(Server(e.self()))
    req = gen_server.send_request(pid, "hold")
    assert "timeout" == gen_server.wait_response(req, timeout=0.05)
    gen_server.cast(pid, ("release", "late"))
    assert ("reply", "late") == gen_server.wait_response(req, timeout=2)


def test_request_to_an_unknown_name_answers_noproc():
    """A request to a name nobody holds answers ("error", ("noproc", name))."""
    req = gen_server.send_request("nobody_here", "get")
    assert ("error", ("noproc", "nobody_here")) == gen_server.wait_response(req, timeout=2)


def test_request_to_a_dying_server_answers_its_reason():
    """A request whose server stops without replying answers ("error", (reason, server))."""
    pid = gen_server.start(Server())
    req = gen_server.send_request(pid, ("return", ("stop", "shutdown", 0)))
    assert ("error", ("shutdown", pid)) == gen_server.receive_response(req, timeout=2)


# -- multi_call and abcast -------------------------------------------------------------------


def test_multi_call_on_this_node():
    """multi_call with no nodes calls this node's server: ([(node, reply)], [])."""
    gen_server.start(Server(init=("ok", 5)), name="mc")
    assert ([(e.node(), 5)], []) == gen_server.multi_call("mc", "get")


def test_multi_call_with_an_unknown_node():
    """A node that is not this one is a bad node."""
    gen_server.start(Server(init=("ok", 5)), name="mc")
    assert ([(e.node(), 5)], ["other@host"]) == gen_server.multi_call(
        "mc", "get", nodes=[e.node(), "other@host"], timeout=2
    )


def test_multi_call_bad_nodes_for_no_server_or_a_failing_one():
    """This node is bad when nobody holds the name or the server fails the call."""
    assert ([], [e.node()]) == gen_server.multi_call("nobody_here", "get")
    gen_server.start(Server(), name="failing")
    with structlog.testing.capture_logs():
        assert ([], [e.node()]) == gen_server.multi_call("failing", ("return", ("stop", "no", 0)))


class _Slow(GenServer):
    """Answers each call after ``seconds`` (the slowness is the point here)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def init(self):
        return ("ok", 0)

    def handle_call(self, request, from_, n):
        e.receive(lambda m: NOMATCH, timeout=self.seconds)
        return ("reply", n + 1, n + 1)


def test_multi_call_timeout_is_one_deadline_for_the_whole_call():
    """Two requests to one server that answers each after 0.6 s, under a timeout of 1 s: the first
    answers, the second (due at 1.2 s) is a bad node; a timeout per node would wait for both."""
    gen_server.start(_Slow(0.6), name="slow_mc")
    me = e.node()
    assert ([(me, 1)], [me]) == gen_server.multi_call("slow_mc", "bump", nodes=[me, me], timeout=1.0)


def test_multi_call_needs_a_name():
    """multi_call with a pid raises Badarg."""
    pid = gen_server.start(Server())
    with pytest.raises(e.Badarg):
        gen_server.multi_call(pid, "get")


def test_abcast_casts_to_the_name_on_each_node():
    """abcast answers "abcast" and the local server gets the cast; other nodes are ignored."""
    gen_server.start(Server(), name="ab")
    assert "abcast" == gen_server.abcast("ab", ("put", 9))
    assert "abcast" == gen_server.abcast("ab", ("put", 10), nodes=[e.node(), "other@host"])
    assert "abcast" == gen_server.abcast("nobody_here", ("put", 11))
    assert 10 == gen_server.call("ab", "get")


# -- enter_loop ----------------------------------------------------------------------------------


def test_enter_loop_makes_a_process_a_server():
    """A registered process entering the loop under its name serves calls with the given state."""
    me = e.self()

    def body():
        e.register("entered", e.self())
        e.send(me, ("ready",))
        gen_server.enter_loop(Server(me), 42, name="entered")

    p = e.spawn(body)
    next_tagged("ready")
    assert (42, "ok", 43) == (
        gen_server.call("entered", "get"),
        gen_server.call(p, ("put", 43)),
        gen_server.call("entered", "get"),
    )
    assert "ok" == gen_server.stop(p)
    assert ("terminate", "normal", 43) == next_tagged("terminate", timeout=0)


def test_enter_loop_with_a_timeout_action():
    """enter_loop's action is honoured: a timeout runs handle_timeout."""
    me = e.self()
    e.spawn(lambda: gen_server.enter_loop(TimeoutServer(me), "entered state", 0.02))
    assert ("timeout", "entered state") == next_tagged("timeout")


def test_enter_loop_under_a_name_not_held_exits():
    """enter_loop with a name the process is not registered under exits "process_not_registered"."""
    p = e.spawn(lambda: gen_server.enter_loop(Server(), 0, name="not_mine"))
    assert ("process_not_registered", None) == (e.exit_reason(p, timeout=2), e.whereis("not_mine"))


def test_enter_loop_with_a_bad_action_exits():
    """enter_loop with a bad action exits ("bad_return_value", action)."""
    p = e.spawn(lambda: gen_server.enter_loop(Server(), 0, "soon"))
    assert ("bad_return_value", "soon") == e.exit_reason(p, timeout=2)


# -- the defaults of GenServer ------------------------------------------------------------------


def test_genserver_defaults():
    """GenServer's defaults: state None, unknown calls stop with ("bad_call", req), casts ("bad_cast", req)."""
    with structlog.testing.capture_logs():
        a = gen_server.start(GenServer)
        e.send(a, "dropped")
        with pytest.raises(e.CallError) as info:
            gen_server.call(a, "anything")
        assert ("bad_call", "anything") == info.value.reason
        b = gen_server.start(GenServer())
        gen_server.cast(b, "something")
        assert ("bad_cast", "something") == e.exit_reason(b, timeout=2)
