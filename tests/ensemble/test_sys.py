"""sys on a gen_server: state, status, suspend and resume, statistics, trace, terminate, unknown requests."""

from __future__ import annotations

import pytest
import structlog

import ensemble as e
from ensemble import _gen, gen_server, logger, sys

from .test_gen_server import BadlyFormatted, Formatted, Server, next_tagged, wait_for


@pytest.fixture
def reports():
    """Collect every report made while the test runs (the previous handler is restored)."""
    got = []
    previous = logger.set_handler(got.append)
    yield got
    logger.set_handler(previous)


def test_get_state():
    """get_state answers the server's state, by pid and by name."""
    pid = gen_server.start(Server(init=("ok", {"n": 1})), name="stateful")
    assert ({"n": 1}, {"n": 1}) == (sys.get_state(pid), sys.get_state("stateful", timeout=1))


def test_replace_state():
    """replace_state sets the state to fn(state) and answers it; the server goes on with it."""
    pid = gen_server.start(Server(init=("ok", 1)))
    assert (2, 2, 2) == (sys.replace_state(pid, lambda s: s + 1), sys.get_state(pid), gen_server.call(pid, "get"))


def test_replace_state_with_a_raising_fn_keeps_the_state():
    """A raising fn makes replace_state fail with ("callback_failed", exc); the state and server stay."""
    exc = LookupError("no")
    pid = gen_server.start(Server(init=("ok", 1)))

    def fn(state):
        raise exc

    with pytest.raises(e.CallError) as info:
        sys.replace_state(pid, fn)
    assert ("callback_failed", True) == (info.value.reason[0], info.value.reason[1] is exc)
    assert (1, True) == (sys.get_state(pid), e.is_alive(pid))


def test_get_status():
    """get_status answers pid, name, module, status, parent (the server itself when unlinked) and state."""
    pid = gen_server.start(Server(init=("ok", 5)), name="status")
    assert {
        "pid": pid,
        "name": "status",
        "module": "Server",
        "status": "running",
        "parent": pid,
        "state": 5,
    } == sys.get_status(pid)


def test_get_status_parent_of_a_linked_server_is_its_starter():
    """A server started with start_link has its starter as parent."""
    e.trap_exit(True)  # the teardown's kill must not reach the test's greenlet
    pid = gen_server.start_link(Server())
    assert e.self() == sys.get_status(pid)["parent"]


def test_get_status_state_goes_through_format_status():
    """get_status shows the state as format_status shows it, and as it is when format_status raises."""
    a = gen_server.start(Formatted(init=("ok", 5)))
    b = gen_server.start(BadlyFormatted(init=("ok", 5)))
    assert (("formatted", 5), 5) == (sys.get_status(a)["state"], sys.get_status(b)["state"])


def test_get_status_of_a_server_entered_by_enter_loop():
    """A process that entered the loop has its spawner as parent and no name."""
    me = e.self()
    pid = e.spawn(lambda: gen_server.enter_loop(Server(), "entered"))
    status = sys.get_status(pid)
    assert (pid, None, me, "entered") == (status["pid"], status["name"], status["parent"], status["state"])


def test_suspend_holds_calls_but_not_sys():
    """A suspended server lets calls time out but answers sys; resume serves what waited."""
    pid = gen_server.start(Server(init=("ok", 1)))
    assert "ok" == sys.suspend(pid)
    with pytest.raises(e.CallError) as info:
        gen_server.call(pid, "get", timeout=0.05)
    assert "timeout" == info.value.reason
    req = gen_server.send_request(pid, ("put", 2))
    gen_server.cast(pid, ("put", 3))
    assert (1, "suspended") == (sys.get_state(pid), sys.get_status(pid)["status"])
    assert "timeout" == gen_server.wait_response(req, timeout=0.05)
    assert "ok" == sys.resume(pid)
    assert ("reply", "ok") == gen_server.wait_response(req, timeout=2)
    assert (3, "running") == (gen_server.call(pid, "get"), sys.get_status(pid)["status"])


def test_terminate_works_while_suspended():
    """sys.terminate stops a suspended server: terminate runs with the reason."""
    pid = gen_server.start(Server(e.self()))
    sys.suspend(pid)
    assert "ok" == sys.terminate(pid, "shutdown")
    assert ("terminate", "shutdown", 0) == next_tagged("terminate", timeout=0)
    assert "shutdown" == e.exit_reason(pid, timeout=0)


def test_suspended_trapping_server_still_ends_with_its_parent():
    """A suspended trapping server still takes its parent's EXIT and terminates with its reason."""
    me = e.self()

    def parent():
        pid = gen_server.start_link(Server(me), trap_exit=True)
        sys.suspend(pid)
        e.send(me, ("server", pid))
        wait_for("die")
        e.exit("shutdown")

    p = e.spawn(parent)
    _, pid = next_tagged("server")
    e.send(p, "die")
    assert ("terminate", "shutdown", 0) == next_tagged("terminate")
    assert "shutdown" == e.exit_reason(pid, timeout=2)


def test_statistics_count_messages_in():
    """statistics True starts counting taken messages (not system ones), "get" reads, False stops."""
    pid = gen_server.start(Server(e.self()))
    assert "no_statistics" == sys.statistics(pid, "get")
    assert "ok" == sys.statistics(pid, True)
    gen_server.cast(pid, ("put", 1))
    gen_server.cast(pid, ("put", 2))
    e.send(pid, "an info")
    gen_server.call(pid, "get")
    sys.get_state(pid)
    stats = sys.statistics(pid, "get")
    assert ({"start_time", "current_time", "messages_in"}, 4) == (set(stats), stats["messages_in"])
    assert stats["start_time"] <= stats["current_time"]
    assert "ok" == sys.statistics(pid, False)
    assert "no_statistics" == sys.statistics(pid, "get")


def test_trace_reports_each_message(reports):
    """trace True makes a sys_trace report (level debug) for each message taken; False stops it."""
    pid = gen_server.start(Server())
    assert "ok" == sys.trace(pid, True)
    gen_server.cast(pid, ("put", 1))
    e.send(pid, "an info")
    gen_server.call(pid, "get")
    assert "ok" == sys.trace(pid, False)
    gen_server.call(pid, "get")
    traces = [r for r in reports if r["kind"] == "sys_trace"]
    assert [
        ("debug", repr(pid), ("cast", ("put", 1))),
        ("debug", repr(pid), ("info", "an info")),
        ("debug", repr(pid), ("call", "get")),
    ] == [(r["level"], r["pid"], r["event"]) for r in traces]


def test_trace_reports_reach_structlog():
    """With the default handler, sys_trace reports are structlog events at level debug, the event as report_event."""
    pid = gen_server.start(Server())
    with structlog.testing.capture_logs() as logs:
        sys.trace(pid, True)
        gen_server.cast(pid, ("put", 1))
        gen_server.call(pid, "get")
    assert [("debug", ("cast", ("put", 1))), ("debug", ("call", "get"))] == [
        (r["log_level"], r["report_event"]) for r in logs if r["event"] == "sys_trace"
    ]


def test_unknown_system_message_is_refused():
    """An unknown system request answers ("error", ("unknown_system_msg", req)); sys raises it as CallError."""
    pid = gen_server.start(Server())
    assert ("error", ("unknown_system_msg", "bogus")) == _gen.call(pid, "bogus", label=_gen.SYSTEM)
    reasons = []
    for fn, arg in ((sys.statistics, "bogus"), (sys.trace, "yes")):
        with pytest.raises(e.CallError) as info:
            fn(pid, arg)
        reasons.append(info.value.reason)
    assert [
        ("unknown_system_msg", ("statistics", "bogus")),
        ("unknown_system_msg", ("trace", "yes")),
    ] == reasons
    assert True is e.is_alive(pid)


def test_sys_on_a_dead_or_busy_server_fails_like_a_call():
    """sys fails with "noproc" for a dead server and "timeout" for a busy one."""
    me = e.self()
    dead = gen_server.start(Server())
    gen_server.stop(dead)
    busy = gen_server.start(Server())
    gen_server.cast(busy, ("block", me))
    wait_for("blocked")
    reasons = []
    for dest in (dead, busy):
        with pytest.raises(e.CallError) as info:
            sys.get_state(dest, timeout=0.05)
        reasons.append(info.value.reason)
    assert ["noproc", "timeout"] == reasons
    e.send(busy, "unblock")
