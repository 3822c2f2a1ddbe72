"""What the observer needed from ensemble: process_info's ``current_function`` and ``memory``, and
``application.get_supervisor`` (with ensemble.decide.info's choice of the current frame)."""

from __future__ import annotations

import sys

import gevent
from hypothesis import given
from hypothesis import strategies as st

import ensemble as e
from ensemble import application, gen_server, supervisor
from ensemble.decide import info as decide_info


def waits_here():
    e.receive()


def wait_status(p, wanted, timeout=5.0):
    """Wait (on ensemble's own clock, no sleep as synchronisation) until ``p``'s status is ``wanted``."""
    deadline = gevent.get_hub().loop.now() + timeout
    while e.process_info(p, "status") != wanted:
        assert gevent.get_hub().loop.now() < deadline, e.process_info(p)
        e.dispatcher.yield_()
    return p


def test_current_function_is_the_process_own_code_past_receive():
    """A process parked in receive shows the function that called receive, with its line."""
    p = wait_status(e.spawn(waits_here), "waiting")
    module, qualname, line = e.process_info(p, "current_function")
    assert (module, qualname) == (__name__, "waits_here")
    assert line == waits_here.__code__.co_firstlineno + 1


def test_current_function_on_another_carrier_and_for_the_caller():
    p = wait_status(e.spawn(waits_here, dispatcher="blocking"), "waiting")
    assert (__name__, "waits_here") == e.process_info(p, "current_function")[:2]
    assert (__name__, "test_current_function_on_another_carrier_and_for_the_caller") == e.process_info(e.self(), "current_function")[:2]


def test_a_hibernated_process_has_no_current_function():
    p = e.spawn(lambda: e.hibernate(waits_here))
    wait_status(p, "hibernating")
    assert e.process_info(p, "current_function") is None
    assert e.process_info(p, "memory") > 0


def waits_for_stop():
    e.receive(lambda m: m if m == "stop" else e.NOMATCH)


def test_memory_grows_with_the_mailbox():
    """The estimate counts the mailbox and its messages (shallowly)."""
    p = wait_status(e.spawn(waits_for_stop), "waiting")
    empty = e.process_info(p, "memory")
    assert empty >= sys.getsizeof(p)
    for i in range(1000):
        e.send(p, "x" * 100 + str(i))
    assert 1000 == e.process_info(p, "message_queue_len")
    assert e.process_info(p, "memory") > empty + 1000 * 100
    assert {"current_function", "memory"} <= set(e.process_info(p))
    e.send(p, "stop")
    e.join(p)


def test_process_info_of_a_dead_process_is_still_none():
    p = e.spawn(lambda: None)
    e.join(p)
    assert e.process_info(p, "memory") is None and e.process_info(p, "current_function") is None


frames = st.lists(st.tuples(st.sampled_from(["ensemble._process", "gevent.hub", "greenlet", "app.db", "ensemble.gen_server",
                                             "ensemble._gen", "threading", "__main__"]),
                            st.text(max_size=5), st.integers(0, 500)) | st.integers() | st.none(), max_size=8)


@given(frames)
def test_the_current_frame_is_the_innermost_outside_the_plumbing(fs):
    """The answer is the first well-formed frame outside the runtime, else the first well-formed one, else None."""
    got = decide_info.current_function(fs)
    well = [f for f in fs if type(f) is tuple and len(f) == 3]
    if not well:
        assert got is None
        return
    own = [f for f in well if not decide_info.is_runtime_module(f[0])]
    assert got == (own[0] if own else well[0])


def test_which_modules_are_plumbing():
    assert decide_info.is_runtime_module("ensemble._process") and decide_info.is_runtime_module("gevent._hub_local")
    assert not decide_info.is_runtime_module("ensemble.gen_server") and not decide_info.is_runtime_module("app")
    assert not decide_info.is_runtime_module(None)


class Idle(gen_server.GenServer):
    def init(self):
        return ("ok", None)


def test_get_supervisor_answers_the_top_process_of_a_running_application():
    """OTP's application:get_supervisor/1: the pid start answered while it runs; None otherwise."""
    tops = []

    def start():
        tops.append(supervisor.start_link({"strategy": "one_for_one"}, [{"id": "w", "start": lambda: gen_server.start_link(Idle())}]))
        return tops[-1]

    application.load({"name": "observed", "start": start})
    application.load({"name": "observed_lib"})
    try:
        assert application.get_supervisor("observed") is None
        application.start("observed")
        application.start("observed_lib")
        assert tops[-1] is application.get_supervisor("observed")
        assert application.get_supervisor("observed_lib") is None
        assert application.get_supervisor("never_loaded") is None
    finally:
        application.stop("observed")
        application.stop("observed_lib")
    assert application.get_supervisor("observed") is None
