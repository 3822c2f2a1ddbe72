"""Laws and Erlang examples for ensemble.decide.signal.on_signal."""

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide.signal import (
    EXIT,
    IGNORE,
    KILL,
    KILLED,
    LINK,
    NORMAL,
    SHUTDOWN,
    Deliver,
    Die,
    Ignore,
    is_kill,
    is_normal,
    is_shutdown,
    on_signal,
)

from .._hostile import Weird

SETTINGS = settings(max_examples=100, deadline=None)


class Str(str):
    """A str subclass: equal to "normal" but not exactly the string."""


special = st.sampled_from([NORMAL, KILL, KILLED, SHUTDOWN, "", "Normal"])
reasons = st.one_of(
    special,
    st.text(max_size=8),
    st.integers(),
    st.none(),
    st.booleans(),
    st.tuples(special, st.integers()),
    st.tuples(special),
    st.tuples(special, special, special),
    st.text(max_size=4).map(RuntimeError),
    st.builds(Weird),
    st.sampled_from([Str(NORMAL), Str(KILL)]),
    st.lists(st.integers(), max_size=3),
)
kinds = st.sampled_from([EXIT, LINK])
flags = st.booleans()


def exact(s):
    return type(s) is str


@SETTINGS
@given(kinds, reasons, flags, flags, flags)
def test_total(kind, reason, trapping, self_sent, linked):
    out = on_signal(kind, reason, trapping=trapping, self_sent=self_sent, linked=linked)
    assert True is isinstance(out, (Die, Deliver, Ignore))


@SETTINGS
@given(reasons, flags, flags)
def test_unlinked_link_signal_is_ignored(reason, trapping, self_sent):
    assert IGNORE is on_signal(LINK, reason, trapping=trapping, self_sent=self_sent, linked=False)


@SETTINGS
@given(flags, flags, flags)
def test_exit_kill_always_dies_killed(trapping, self_sent, linked):
    out = on_signal(EXIT, KILL, trapping=trapping, self_sent=self_sent, linked=linked)
    assert Die(KILLED) == out


@SETTINGS
@given(kinds, reasons, flags, flags)
def test_trapping_delivers_the_same_object(kind, reason, self_sent, linked):
    out = on_signal(kind, reason, trapping=True, self_sent=self_sent, linked=linked)
    if kind == LINK and not linked:
        assert IGNORE is out
    elif kind == EXIT and is_kill(reason):
        assert Die(KILLED) == out
    else:
        assert Deliver is type(out)
        assert reason is out.reason


@SETTINGS
@given(kinds, flags, flags)
def test_not_trapping_normal(kind, self_sent, linked):
    out = on_signal(kind, NORMAL, trapping=False, self_sent=self_sent, linked=linked)
    if kind == EXIT and self_sent:
        assert Die(NORMAL) == out
    else:
        assert IGNORE is out


@SETTINGS
@given(kinds, reasons, flags, flags)
def test_not_trapping_other_reason_dies_with_it(kind, reason, self_sent, linked):
    out = on_signal(kind, reason, trapping=False, self_sent=self_sent, linked=linked)
    if kind == LINK and not linked:
        assert IGNORE is out
    elif kind == EXIT and is_kill(reason):
        assert Die(KILLED) == out
    elif is_normal(reason):
        assert (Die(NORMAL) if kind == EXIT and self_sent else IGNORE) == out
    else:
        assert Die is type(out)
        assert reason is out.reason


@SETTINGS
@given(kinds, reasons, flags, flags)
def test_linked_default_is_true(kind, reason, trapping, self_sent):
    a = on_signal(kind, reason, trapping=trapping, self_sent=self_sent)
    b = on_signal(kind, reason, trapping=trapping, self_sent=self_sent, linked=True)
    assert type(a) is type(b)
    if a is not IGNORE:
        assert a.reason is b.reason


@SETTINGS
@given(reasons)
def test_predicates_only_accept_exact_strings(reason):
    assert (exact(reason) and reason == NORMAL) == is_normal(reason)
    assert (exact(reason) and reason == KILL) == is_kill(reason)


@SETTINGS
@given(reasons)
def test_is_shutdown(reason):
    expected = (exact(reason) and reason in (NORMAL, SHUTDOWN)) or (
        type(reason) is tuple
        and len(reason) == 2
        and exact(reason[0])
        and reason[0] == SHUTDOWN
    )
    assert expected == is_shutdown(reason)


# -- Erlang examples (checked against erl) -------------------------------------


def test_exit_kill_to_a_trapping_process_kills_it():
    # process_flag(trap_exit, true), exit(P, kill) -> P dies with killed
    assert Die(KILLED) == on_signal(EXIT, KILL, trapping=True, self_sent=False)


def test_exit_self_kill_dies_killed():
    assert Die(KILLED) == on_signal(EXIT, KILL, trapping=False, self_sent=True)


def test_exit_normal_from_another_process_is_ignored():
    assert IGNORE is on_signal(EXIT, NORMAL, trapping=False, self_sent=False)


def test_exit_self_normal_kills_yourself():
    assert Die(NORMAL) == on_signal(EXIT, NORMAL, trapping=False, self_sent=True)


def test_exit_self_normal_while_trapping_is_a_message():
    assert Deliver(NORMAL) == on_signal(EXIT, NORMAL, trapping=True, self_sent=True)


def test_linked_process_exiting_normally_is_ignored():
    assert IGNORE is on_signal(LINK, NORMAL, trapping=False, self_sent=False)


def test_linked_exit_normal_while_trapping_is_a_message():
    assert Deliver(NORMAL) == on_signal(LINK, NORMAL, trapping=True, self_sent=False)


def test_link_signal_kill_is_an_ordinary_reason():
    # a linked process that did exit(kill) propagates kill, not killed
    assert Die(KILL) == on_signal(LINK, KILL, trapping=False, self_sent=False)
    assert Deliver(KILL) == on_signal(LINK, KILL, trapping=True, self_sent=False)


def test_link_signal_killed_propagates():
    assert Die(KILLED) == on_signal(LINK, KILLED, trapping=False, self_sent=False)
    assert Deliver(KILLED) == on_signal(LINK, KILLED, trapping=True, self_sent=False)


def test_shutdown():
    assert Die(SHUTDOWN) == on_signal(EXIT, SHUTDOWN, trapping=False, self_sent=False)
    assert Deliver(SHUTDOWN) == on_signal(EXIT, SHUTDOWN, trapping=True, self_sent=False)


def test_unlinked_kill_is_dropped():
    assert IGNORE is on_signal(LINK, KILL, trapping=False, self_sent=False, linked=False)


def test_linked_is_ignored_for_exit():
    assert Die("boom") == on_signal(EXIT, "boom", trapping=False, self_sent=False, linked=False)


def test_exception_reason_is_kept():
    exc = ValueError("x")
    out = on_signal(LINK, exc, trapping=False, self_sent=False)
    assert exc is out.reason


def test_unknown_kind_raises():
    with pytest.raises(ValueError):
        on_signal("exits", NORMAL, trapping=False, self_sent=False)


def test_is_shutdown_examples():
    assert True is is_shutdown(("shutdown", {"why": 1}))
    assert True is is_shutdown(NORMAL)
    assert True is is_shutdown(SHUTDOWN)
    assert False is is_shutdown(("shutdown",))
    assert False is is_shutdown(("shutdown", 1, 2))
    assert False is is_shutdown(["shutdown", 1])
    assert False is is_shutdown(KILLED)
    assert False is is_shutdown(Weird())


# -- outcome objects ------------------------------------------------------------


def test_outcomes_are_values():
    assert Die("x") == Die("x")
    assert Die("x") != Die("y")
    assert Die("x") != Deliver("x")
    assert hash(Die(("a", 1))) == hash(Die(("a", 1)))
    assert "Die('killed')" == repr(Die(KILLED))
    assert "Deliver(('shutdown', 1))" == repr(Deliver((SHUTDOWN, 1)))
    assert "IGNORE" == repr(IGNORE)


def test_outcome_equality_survives_weird_reasons():
    w = Weird()
    assert Die(w) == Die(w)
    assert Die(w) != Die(Weird())


def test_outcomes_are_immutable():
    d = Die("x")
    with pytest.raises(AttributeError):
        d.reason = "y"
    with pytest.raises(AttributeError):
        d.other = 1
    assert "x" == d.reason


def test_ignore_is_a_singleton():
    assert IGNORE is Ignore()
    assert IGNORE is pickle.loads(pickle.dumps(IGNORE))
    assert Die(("a", 1)) == pickle.loads(pickle.dumps(Die(("a", 1))))


def test_outcomes_work_with_match():
    match on_signal(EXIT, KILL, trapping=True, self_sent=False):
        case Die(reason):
            got = reason
        case _:
            got = None
    assert KILLED == got
