"""gen_event: laws for interpret_handler_return, and the event manager run end to end.

Handlers report every callback to the test process as a message, so each test
waits on messages (with a timeout), never on time.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, gen_event, logger, sys
from ensemble.gen_event import (
    KINDS,
    Bad,
    HandlerError,
    Installed,
    Ok,
    Refuse,
    Remove,
    Reply,
    Swap,
    interpret_handler_return,
)

from ._hostile import Weird

SETTINGS = settings(max_examples=100, deadline=None)
WAIT = 5.0


# --------------------------------------------------------------------------
# interpret_handler_return: laws
# --------------------------------------------------------------------------


class Str(str):
    """A str subclass: equal to a tag but not exactly the string."""


TAGS = ["ok", "error", "remove_handler", "swap_handler", "hibernate", "stop", "reply", ""]
leaf = st.one_of(
    st.sampled_from(TAGS),
    st.sampled_from([Str("ok"), Str("remove_handler"), Str("hibernate")]),
    st.integers(),
    st.none(),
    st.builds(Weird),
    st.text(max_size=4).map(ValueError),
)
values = st.recursive(
    leaf, lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3).map(tuple), max_leaves=8
)
tagged = st.tuples(st.sampled_from(TAGS), st.lists(values, max_size=6)).map(lambda t: (t[0], *t[1]))
returns = st.one_of(values, tagged)
kinds = st.sampled_from(sorted(KINDS))


@SETTINGS
@given(kinds, returns)
def test_interpret_is_total(kind, ret):
    """Every return of every callback kind has a meaning; interpreting never raises."""
    out = interpret_handler_return(kind, ret)
    assert True is isinstance(out, (Ok, Reply, Remove, Swap, Refuse, Bad))


@SETTINGS
@given(kinds, returns)
def test_bad_forms_name_the_return_itself(kind, ret):
    """A return with no meaning is Bad(("bad_return_value", ret)) with ret itself."""
    out = interpret_handler_return(kind, ret)
    if type(out) is Bad:
        assert "bad_return_value" == out.reason[0]
        assert ret is out.reason[1]


@SETTINGS
@given(kinds, returns)
def test_each_kind_has_only_its_own_outcomes(kind, ret):
    """init never removes or swaps, only a call replies, only init refuses."""
    allowed = {
        "init": (Ok, Refuse, Bad),
        "event": (Ok, Remove, Swap, Bad),
        "info": (Ok, Remove, Swap, Bad),
        "call": (Reply, Remove, Swap, Bad),
    }[kind]
    assert True is isinstance(interpret_handler_return(kind, ret), allowed)


@SETTINGS
@given(values, values, values, values, values)
def test_good_forms_carry_their_values(a, b, c, d, f):
    """Each OTP form maps to its outcome, carrying the very objects returned."""
    for kind in ("event", "info"):
        out = interpret_handler_return(kind, ("ok", a))
        assert (Ok, True, False) == (type(out), out.state is a, out.hibernate)
        assert True is interpret_handler_return(kind, ("ok", a, "hibernate")).hibernate
        assert Remove(None) == interpret_handler_return(kind, "remove_handler")
        sw = interpret_handler_return(kind, ("swap_handler", a, b, c, d))
        carried = (sw.arg is a, sw.state is b, sw.new_id is c, sw.new_handler is d, sw.reply)
        assert (True, True, True, True, None) == carried
    r = interpret_handler_return("call", ("ok", a, b))
    assert (Reply, True, True, False) == (type(r), r.reply is a, r.state is b, r.hibernate)
    assert True is interpret_handler_return("call", ("ok", a, b, "hibernate")).hibernate
    assert True is (interpret_handler_return("call", ("remove_handler", a)).reply is a)
    sw = interpret_handler_return("call", ("swap_handler", a, b, c, d, f))
    assert (True,) * 5 == (sw.reply is a, sw.arg is b, sw.state is c, sw.new_id is d, sw.new_handler is f)
    assert True is (interpret_handler_return("init", ("ok", a)).state is a)
    assert True is (interpret_handler_return("init", ("error", a)).reason is a)


def test_forms_outside_their_callback_are_bad():
    """A reply form in an event, a bare remove in a call, an error outside init are bad returns."""
    cases = [
        ("event", ("ok", 1, 2)),
        ("event", ("remove_handler", 1)),
        ("event", ("error", 1)),
        ("call", ("ok", 1)),
        ("call", "remove_handler"),
        ("call", ("swap_handler", 1, 2, 3, 4)),
        ("init", "remove_handler"),
        ("init", ("ok", 1, "soon")),
        ("event", ("ok", 1, Str("hibernate"))),
        ("event", (Str("ok"), 1)),
        ("info", ("swap_handler", 1, 2, 3, 4, 5)),
        ("event", ["ok", 1]),
        ("init", 42),
    ]
    expected = [Bad(("bad_return_value", r)) for _, r in cases]
    assert expected == [interpret_handler_return(k, r) for k, r in cases]


def test_unknown_kind_is_a_value_error():
    """A kind that is not a handler callback is a programming error."""
    with pytest.raises(ValueError):
        interpret_handler_return("cast", ("ok", 1))


# --------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def reports():
    """Collect the reports of the test (keeping stderr quiet); unlink the test's managers at the end."""
    got = []
    previous = logger.set_handler(got.append)
    yield got
    logger.set_handler(previous)
    for pid in list(e.process_info(e.self(), "links") or ()):
        e.unlink(pid)  # the managers are killed after the test; the test process must not die with them


class Probe:
    """A handler reporting each callback to ``to``; an event addressed to it says what to answer.

    State: the tuple of events seen.  ``("answer", tag, ret)`` answers ``ret``;
    ``("raise", tag)`` raises ValueError(tag).  A call answers the state,
    unless the request is ``("answer", ret)`` or ``"raise"``.
    """

    def __init__(self, tag, to=None):
        self.tag = tag
        self.to = to if to is not None else e.self()

    def _tell(self, *msg):
        e.send(self.to, msg)

    def _answer(self, event, default):
        match event:
            case ("answer", t, ret) if t == self.tag:
                return ret
            case ("raise", t) if t == self.tag:
                raise ValueError(t)
        return default

    def init(self, args):
        self._tell("init", self.tag, args)
        match args:
            case ("refuse", reason):
                return ("error", reason)
            case "raise":
                raise ValueError("init")
            case "bad":
                return 42
        return ("ok", ())

    def handle_event(self, event, state):
        self._tell("event", self.tag, event)
        return self._answer(event, ("ok", (*state, event)))

    def handle_info(self, msg, state):
        self._tell("info", self.tag, msg)
        return self._answer(msg, ("ok", state))

    def handle_call(self, request, state):
        match request:
            case ("answer", ret):
                return ret
            case "raise":
                raise ValueError("call")
        return ("ok", state, state)

    def terminate(self, arg, state):
        self._tell("terminate", self.tag, arg)
        return ("terminated", self.tag, state)


class Refuser(Probe):
    """A Probe whose init always refuses, with ("refused", args)."""

    def init(self, args):
        return ("error", ("refused", args))


def take(kind, tag, timeout=WAIT):
    """The next message ``(kind, tag, ...)``; fails the test if none comes in time."""
    got = e.receive(lambda m: m if type(m) is tuple and m[:2] == (kind, tag) else NOMATCH, timeout=timeout)
    assert TIMEOUT is not got, f"no {kind} from {tag!r}"
    return got


def take_kind(kind, timeout=WAIT):
    """The next message ``(kind, ...)``; fails the test if none comes in time."""
    got = e.receive(lambda m: m if type(m) is tuple and m[0] == kind else NOMATCH, timeout=timeout)
    assert TIMEOUT is not got, f"no {kind}"
    return got


def none_of(kind, tag=None):
    """No ``(kind, tag, ...)`` message is waiting (or ``(kind, ...)`` with no tag)."""
    n = 1 if tag is None else 2
    want = (kind,) if tag is None else (kind, tag)
    return TIMEOUT is e.receive(lambda m: m if type(m) is tuple and m[:n] == want else NOMATCH, timeout=0)


def manager_with(*tags, **kw):
    """A linked manager with a Probe for each tag, added in order."""
    mgr = gen_event.start_link(**kw)
    for tag in tags:
        assert "ok" == gen_event.add_handler(mgr, tag, Probe(tag))
        take("init", tag)
    return mgr


def owner(mgr, tag, to):
    """A process that adds a supervised Probe, then forwards what it gets until told to exit."""
    gen_event.add_sup_handler(mgr, tag, Probe(tag, to))
    e.send(to, ("added", tag, e.self()))
    while True:
        m = e.receive()
        if type(m) is tuple and m[0] == "exit":
            e.exit(m[1])
        e.send(to, ("owner_got", m))


def start_owner(mgr, tag):
    """Spawn an owner of a supervised Probe ``tag``; answers its pid once the handler is in."""
    pid = e.spawn(owner, mgr, tag, e.self())
    take("added", tag)
    take("init", tag)
    return pid


def links_of(pid):
    """The processes linked to ``pid``."""
    return e.process_info(pid, "links")


def test_handlers_run_in_order_of_addition():
    """Events reach the handlers in the order they were added; which_handlers lists that order."""
    mgr = manager_with("a", "b", "c")
    assert "ok" == gen_event.sync_notify(mgr, "x")
    got = [e.receive(timeout=WAIT) for _ in range(3)]
    assert [("event", "a", "x"), ("event", "b", "x"), ("event", "c", "x")] == got
    assert ["a", "b", "c"] == gen_event.which_handlers(mgr)


def test_notify_is_async_and_never_fails():
    """notify answers "ok" at once, also for a dead manager or an unknown name; the event arrives."""
    mgr = manager_with("a")
    assert "ok" == gen_event.notify(mgr, "x")
    assert ("event", "a", "x") == take("event", "a")
    assert "ok" == gen_event.notify("nobody_has_this_name", "x")
    gen_event.stop(mgr)
    assert "ok" == gen_event.notify(mgr, "x")


def test_sync_notify_returns_after_every_handler_ran():
    """Once sync_notify answers, every handler has handled the event."""
    mgr = manager_with("a", "b")
    gen_event.sync_notify(mgr, "x")
    assert [("event", "a", "x"), ("event", "b", "x")] == [e.receive(timeout=0), e.receive(timeout=0)]


def test_call_answers_from_one_handler():
    """call reaches only the named handler, whose state the events built."""
    mgr = manager_with("a", "b")
    gen_event.notify(mgr, 1)
    gen_event.sync_notify(mgr, 2)
    assert (1, 2) == gen_event.call(mgr, "b", "state")
    assert "x" == gen_event.call(mgr, "a", ("answer", ("ok", "x", ("set",))))
    assert ("set",) == gen_event.call(mgr, "a", "state")


def test_call_to_no_such_handler_is_bad_module():
    """A call to an id nobody has raises HandlerError("bad_module")."""
    mgr = manager_with("a")
    with pytest.raises(HandlerError) as info:
        gen_event.call(mgr, "zz", "state")
    assert "bad_module" == info.value.reason


def test_crashing_handler_is_removed_and_the_others_carry_on(reports):
    """A handler that raises is terminated with ("error", exc) and reported; the rest keep going."""
    mgr = manager_with("a", "b", "c")
    gen_event.sync_notify(mgr, ("raise", "b"))
    assert ("event", "b", ("raise", "b")) == take("event", "b")
    _, _, arg = take("terminate", "b")
    assert ("error", ValueError, ("b",)) == (arg[0], type(arg[1]), arg[1].args)
    assert ("event", "c", ("raise", "b")) == take("event", "c")  # the same event goes on to c
    assert ["a", "c"] == gen_event.which_handlers(mgr)
    gen_event.sync_notify(mgr, "after")
    assert ("event", "c", "after") == take("event", "c")
    assert none_of("event", "b")
    crash = [r for r in reports if r["kind"] == "gen_event_terminate"]
    assert [("b", ("raise", "b"))] == [(r["handler"], r["last_message"]) for r in crash]
    assert True is e.is_alive(mgr)


def test_bad_return_removes_with_bad_return_value():
    """An unknown return removes the handler with ("error", ("bad_return_value", ret))."""
    mgr = manager_with("a", "b")
    gen_event.sync_notify(mgr, ("answer", "a", "fine"))
    assert ("terminate", "a", ("error", ("bad_return_value", "fine"))) == take("terminate", "a")
    assert ["b"] == gen_event.which_handlers(mgr)


def test_crash_in_a_call_raises_and_removes_the_handler():
    """A handler crashing in handle_call is removed; the call raises HandlerError with the exception."""
    mgr = manager_with("a", "b")
    with pytest.raises(HandlerError) as info:
        gen_event.call(mgr, "a", "raise")
    assert (ValueError, ("call",)) == (type(info.value.reason), info.value.reason.args)
    assert info.value.reason is info.value.__cause__
    with pytest.raises(HandlerError) as info:
        gen_event.call(mgr, "b", ("answer", "nonsense"))
    assert ("bad_return_value", "nonsense") == info.value.reason
    assert [] == gen_event.which_handlers(mgr)


def test_remove_handler_from_an_event_and_a_call():
    """"remove_handler" terminates the handler with "remove_handler"; a call's reply still arrives."""
    mgr = manager_with("a", "b", "c")
    gen_event.sync_notify(mgr, ("answer", "a", "remove_handler"))
    assert ("terminate", "a", "remove_handler") == take("terminate", "a")
    assert "bye" == gen_event.call(mgr, "b", ("answer", ("remove_handler", "bye")))
    assert ("terminate", "b", "remove_handler") == take("terminate", "b")
    assert ["c"] == gen_event.which_handlers(mgr)


def test_swap_from_a_handler_takes_the_old_place():
    """A returned swap terminates the old handler and inits the new one with terminate's result, in place."""
    mgr = manager_with("a", "b", "c")
    gen_event.sync_notify(mgr, "seen")
    new = Probe("b2")
    gen_event.sync_notify(mgr, ("answer", "b", ("swap_handler", "bye", ("s",), "b2", new)))
    assert ("terminate", "b", "bye") == take("terminate", "b")
    assert ("init", "b2", ("terminated", "b", ("s",))) == take("init", "b2")
    assert ["a", "b2", "c"] == gen_event.which_handlers(mgr)
    gen_event.sync_notify(mgr, "next")
    assert ("event", "b2", "next") == take("event", "b2")


def test_swap_from_a_call_answers_the_reply():
    """A call answering the swap form replies, then the new handler stands in the old one's place."""
    mgr = manager_with("a", "b")
    ret = ("swap_handler", "r", "why", ("s",), "a2", Probe("a2"))
    assert "r" == gen_event.call(mgr, "a", ("answer", ret))
    assert ("terminate", "a", "why") == take("terminate", "a")
    assert ("init", "a2", ("terminated", "a", ("s",))) == take("init", "a2")
    assert ["a2", "b"] == gen_event.which_handlers(mgr)


def test_swap_handler_passes_terminate_result_to_the_new_init():
    """swap_handler: old terminate(reason) result goes to the new init; the order is kept."""
    mgr = manager_with("a", "b")
    assert "ok" == gen_event.swap_handler(mgr, "a", "swap", "a2", Probe("a2"))
    assert ("terminate", "a", "swap") == take("terminate", "a")
    assert ("init", "a2", ("terminated", "a", ())) == take("init", "a2")
    assert ["a2", "b"] == gen_event.which_handlers(mgr)


def test_swap_of_a_missing_handler_adds_the_new_one_with_error():
    """With no old handler the new one is added last and its init gets "error" (OTP's rule)."""
    mgr = manager_with("a")
    assert "ok" == gen_event.swap_handler(mgr, "zz", "swap", "n", Probe("n"))
    assert ("init", "n", "error") == take("init", "n")
    assert ["a", "n"] == gen_event.which_handlers(mgr)


def test_swap_to_a_taken_id_changes_nothing():
    """Swapping to an id another handler holds raises already_added and leaves the old handler."""
    mgr = manager_with("a", "b")
    with pytest.raises(HandlerError) as info:
        gen_event.swap_handler(mgr, "a", "swap", "b", Probe("b"))
    assert "already_added" == info.value.reason
    assert ["a", "b"] == gen_event.which_handlers(mgr)
    assert none_of("terminate")


def test_swap_whose_new_init_fails_raises_and_the_old_is_gone():
    """A new handler refusing in swap_handler raises its reason; the old one was already terminated."""
    mgr = manager_with("a", "b")
    with pytest.raises(HandlerError) as info:
        gen_event.swap_handler(mgr, "a", "swap", "a2", Refuser("a2"))
    assert ("refused", ("terminated", "a", ())) == info.value.reason
    assert ["b"] == gen_event.which_handlers(mgr)


def test_returned_swap_that_fails_is_reported_and_tells_the_owner(reports):
    """A handler's own swap to a refusing handler is reported; the owner hears the new id failed."""
    mgr = gen_event.start()
    gen_event.add_sup_handler(mgr, "a", Probe("a"))
    gen_event.sync_notify(mgr, ("answer", "a", ("swap_handler", "x", ("s",), "r", Refuser("r"))))
    assert ("terminate", "a", "x") == take("terminate", "a")
    assert ("gen_event_EXIT", "a", ("swapped", "r", e.self())) == take("gen_event_EXIT", "a")
    refused = ("refused", ("terminated", "a", ("s",)))
    assert ("gen_event_EXIT", "r", ("error", refused)) == take("gen_event_EXIT", "r")
    assert [] == gen_event.which_handlers(mgr)
    assert [("a", "r", refused)] == [
        (r["handler"], r["new_handler"], r["reason"]) for r in reports if r["kind"] == "gen_event_swap_failed"
    ]
    assert mgr not in links_of(e.self())


def test_swap_sup_handler_makes_the_caller_the_owner():
    """swap_sup_handler: the old owner hears ("swapped", new, caller); the caller owns the new handler."""
    mgr = gen_event.start_link()
    first = start_owner(mgr, "a")
    assert "ok" == gen_event.swap_sup_handler(mgr, "a", "swap", "a2", Probe("a2"))
    got = take_kind("owner_got")
    assert ("owner_got", ("gen_event_EXIT", "a", ("swapped", "a2", e.self()))) == got
    assert mgr not in links_of(first)  # its last supervised handler went
    gen_event.sync_notify(mgr, ("answer", "a2", "remove_handler"))
    assert ("gen_event_EXIT", "a2", "normal") == take("gen_event_EXIT", "a2")


def test_owner_exit_removes_its_handlers_with_stop_reason():
    """An owner exiting removes its handlers with ("stop", reason); the others get its EXIT."""
    mgr = manager_with("b")
    pid = start_owner(mgr, "a")
    assert mgr in links_of(pid)
    e.send(pid, ("exit", "boom"))
    assert ("terminate", "a", ("stop", "boom")) == take("terminate", "a")
    assert ("info", "b", ("EXIT", pid, "boom")) == take("info", "b")
    assert ["b"] == gen_event.which_handlers(mgr)


def test_removed_sup_handler_tells_its_owner_why():
    """An owner hears gen_event_EXIT with "normal" for remove_handler and ("error", r) for a crash."""
    mgr = gen_event.start()
    gen_event.add_sup_handler(mgr, "a", Probe("a"))
    gen_event.add_sup_handler(mgr, "b", Probe("b"))
    gen_event.sync_notify(mgr, ("answer", "a", "remove_handler"))
    assert ("gen_event_EXIT", "a", "normal") == take("gen_event_EXIT", "a")
    gen_event.sync_notify(mgr, ("raise", "b"))
    _, _, (tag, exc) = take("gen_event_EXIT", "b")
    assert ("error", ValueError) == (tag, type(exc))
    assert mgr not in links_of(e.self())


def test_stop_terminates_handlers_and_tells_owners_shutdown():
    """stop: every terminate gets "stop"; owners hear "shutdown" and are not linked to the dead manager."""
    mgr = gen_event.start()
    gen_event.add_handler(mgr, "a", Probe("a"))
    gen_event.add_sup_handler(mgr, "b", Probe("b"))
    assert "ok" == gen_event.stop(mgr)
    terminates = [take_kind("terminate"), take_kind("terminate")]
    assert [("terminate", "a", "stop"), ("terminate", "b", "stop")] == terminates
    assert ("gen_event_EXIT", "b", "shutdown") == take("gen_event_EXIT", "b")
    assert False is e.is_alive(mgr)


def test_non_normal_stop_terminates_with_stop_and_reason():
    """A stop with another reason gives each terminate ("stop", reason)."""
    mgr = gen_event.start()
    gen_event.add_handler(mgr, "a", Probe("a"))
    assert "ok" == gen_event.stop(mgr, "shutdown")
    assert ("terminate", "a", ("stop", "shutdown")) == take("terminate", "a")


def test_delete_handler_answers_terminate_and_sends_no_exit():
    """delete_handler answers terminate's value (default reason "delete") and tells no owner."""
    mgr = gen_event.start()
    gen_event.add_sup_handler(mgr, "a", Probe("a"))
    gen_event.sync_notify(mgr, "x")
    assert ("terminated", "a", ("x",)) == gen_event.delete_handler(mgr, "a")
    assert ("terminate", "a", "delete") == take("terminate", "a")
    gen_event.sync_notify(mgr, "y")
    assert none_of("gen_event_EXIT")
    assert mgr not in links_of(e.self())


def test_delete_of_no_such_handler_is_module_not_found():
    """delete_handler of an unknown id raises HandlerError("module_not_found")."""
    mgr = manager_with("a")
    with pytest.raises(HandlerError) as info:
        gen_event.delete_handler(mgr, "zz", "why")
    assert "module_not_found" == info.value.reason


def test_the_link_stays_while_the_owner_has_a_handler_or_is_the_parent():
    """The owner's link goes with its last supervised handler, never for the start_link parent."""
    mgr = gen_event.start()
    gen_event.add_sup_handler(mgr, "a", Probe("a"))
    gen_event.add_sup_handler(mgr, "b", Probe("b"))
    gen_event.delete_handler(mgr, "a")
    assert mgr in links_of(e.self())
    gen_event.delete_handler(mgr, "b")
    assert mgr not in links_of(e.self())
    linked = gen_event.start_link()
    gen_event.add_sup_handler(linked, "a", Probe("a"))
    gen_event.delete_handler(linked, "a")
    assert linked in links_of(e.self())


def test_add_handler_errors():
    """add_handler raises already_added, init's ("error", r) reason, its exception, or a bad return."""
    mgr = manager_with("a")
    reasons = []
    for tag, args in [("a", None), ("r", ("refuse", "nope")), ("x", "raise"), ("y", "bad")]:
        with pytest.raises(HandlerError) as info:
            gen_event.add_handler(mgr, tag, Probe(tag), args)
        reasons.append(info.value.reason)
    assert ["already_added", "nope", ValueError, ("bad_return_value", 42)] == [
        type(r) if isinstance(r, Exception) else r for r in reasons
    ]
    assert ["a"] == gen_event.which_handlers(mgr)


def test_refused_sup_handler_leaves_no_link():
    """A supervised handler whose init refuses does not link the caller."""
    mgr = gen_event.start()
    with pytest.raises(HandlerError):
        gen_event.add_sup_handler(mgr, "r", Probe("r"), ("refuse", "no"))
    assert mgr not in links_of(e.self())


def test_other_messages_go_to_handle_info():
    """A plain message reaches each handler's handle_info; a handler without one ignores it."""

    class Bare:
        def init(self, args):
            return ("ok", 0)

        def handle_event(self, event, n):
            return ("ok", n + 1)

        def handle_call(self, request, n):
            return ("ok", n, n)

    mgr = manager_with("a")
    gen_event.add_handler(mgr, "bare", Bare())
    e.send(mgr, "ping")
    assert ("info", "a", "ping") == take("info", "a")
    gen_event.notify(mgr, "x")
    assert 1 == gen_event.call(mgr, "bare", "count")
    assert ["a", "bare"] == gen_event.which_handlers(mgr)


def test_handle_info_answers_like_handle_event():
    """handle_info's "remove_handler" removes the handler, as from handle_event."""
    mgr = manager_with("a", "b")
    e.send(mgr, ("answer", "a", "remove_handler"))
    assert ("terminate", "a", "remove_handler") == take("terminate", "a")
    assert ["b"] == gen_event.which_handlers(mgr)


def test_an_exception_in_terminate_is_ignored():
    """terminate raising does not hurt the manager; delete_handler answers ("EXIT", exc)."""

    class BadEnd(Probe):
        def terminate(self, arg, state):
            raise RuntimeError("end")

    mgr = manager_with("a")
    gen_event.add_handler(mgr, "bad", BadEnd("bad"))
    tag, exc = gen_event.delete_handler(mgr, "bad")
    assert ("EXIT", RuntimeError) == (tag, type(exc))
    assert ["a"] == gen_event.which_handlers(mgr)


def test_sys_get_state_shows_the_installed_handlers():
    """sys.get_state on a manager answers its handlers as Installed records, in order."""
    mgr = manager_with("a", "b")
    gen_event.sync_notify(mgr, "x")
    state = sys.get_state(mgr)
    assert [("a", ("x",), None), ("b", ("x",), None)] == [(i.id, i.state, i.owner) for i in state]
    assert [Installed, Installed] == [type(i) for i in state]


def test_sys_replace_state_reaches_the_handlers():
    """sys.replace_state can rewrite a handler's state, which its next call sees."""
    mgr = manager_with("a")
    sys.replace_state(mgr, lambda hs: tuple(h._replace(state=("new",)) for h in hs))
    assert ("new",) == gen_event.call(mgr, "a", "state")


def test_start_adds_the_given_handlers():
    """start(handlers=...) adds (id, handler[, args]) entries in order before it answers."""
    mgr = gen_event.start(name="ev_mgr", handlers=[("a", Probe("a")), ("b", Probe("b"), "args")])
    assert [("init", "a", None), ("init", "b", "args")] == [take("init", "a"), take("init", "b")]
    assert ["a", "b"] == gen_event.which_handlers("ev_mgr")
    assert mgr is e.whereis("ev_mgr")


def test_start_fails_when_a_given_handler_fails():
    """A given handler refusing fails start with ("handler_failed", id, reason); the added ones stop."""
    with pytest.raises(e.StartError) as info:
        gen_event.start(handlers=[("a", Probe("a")), ("b", Probe("b"), ("refuse", "nope"))])
    assert ("handler_failed", "b", "nope") == info.value.reason
    assert ("terminate", "a", "stop") == take("terminate", "a")


def test_the_manager_traps_exits():
    """An exit signal to the manager becomes an EXIT message for the handlers; the manager lives."""
    mgr = manager_with("a")
    pid = e.spawn(e.exit, mgr, "boom")  # not the parent: the parent's EXIT would stop the manager
    assert ("info", "a", ("EXIT", pid, "boom")) == take("info", "a")
    assert True is e.is_alive(mgr)


def test_the_parent_exit_stops_the_manager():
    """When the start_link parent exits, each handler terminates with ("stop", reason)."""
    me = e.self()

    def parent():
        mgr = gen_event.start_link()
        gen_event.add_handler(mgr, "a", Probe("a", me))
        e.send(me, ("mgr", mgr))
        e.exit("boom")

    e.spawn(parent)
    mgr = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "mgr" else NOMATCH, timeout=WAIT)
    ref = e.monitor(mgr)
    assert ("terminate", "a", ("stop", "boom")) == take("terminate", "a")
    assert ("DOWN", ref, "process", mgr, "boom") == e.receive(
        lambda m: m if type(m) is tuple and m[:2] == ("DOWN", ref) else NOMATCH, timeout=WAIT
    )


def test_owner_that_started_the_manager_unlinked_only_loses_its_handler():
    """A process that start()ed the manager and owns a sup handler exits: only its handler goes."""
    me = e.self()

    def starter():
        mgr = gen_event.start()
        gen_event.add_handler(mgr, "b", Probe("b", me))
        gen_event.add_sup_handler(mgr, "a", Probe("a", me))
        e.send(me, ("mgr", mgr))
        e.exit("boom")

    pid = e.spawn(starter)
    mgr = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "mgr" else NOMATCH, timeout=WAIT)
    got = e.receive(
        lambda m: m if type(m) is tuple and m[:2] in (("info", "b"), ("terminate", "b")) else NOMATCH,
        timeout=WAIT,
    )
    assert ("info", "b", ("EXIT", pid, "boom")) == got
    assert True is e.is_alive(mgr)


def test_hibernate_answer_keeps_the_handler():
    """("ok", state, "hibernate") keeps the handler and its state across the manager's hibernation."""
    mgr = manager_with("a")
    gen_event.sync_notify(mgr, ("answer", "a", ("ok", ("kept",), "hibernate")))
    assert ("kept",) == gen_event.call(mgr, "a", "state")


def test_handler_base_class_defaults():
    """Handler's defaults: state is init's args, events are ignored, an unknown call removes it."""
    mgr = gen_event.start()
    gen_event.add_handler(mgr, "h", gen_event.Handler, 7)
    gen_event.sync_notify(mgr, "x")
    e.send(mgr, "ping")
    assert [7] == [i.state for i in sys.get_state(mgr)]
    with pytest.raises(HandlerError) as info:
        gen_event.call(mgr, "h", "what")
    assert ("bad_call", "what") == info.value.reason
    assert [] == gen_event.which_handlers(mgr)


def test_calls_to_a_dead_manager_fail_as_calls():
    """A manager that is gone makes the client functions raise CallError("noproc")."""
    mgr = gen_event.start()
    gen_event.stop(mgr)
    with pytest.raises(e.CallError) as info:
        gen_event.which_handlers(mgr)
    assert "noproc" == info.value.reason
