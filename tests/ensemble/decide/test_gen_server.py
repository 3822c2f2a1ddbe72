"""Laws and OTP examples for ensemble.decide.gen_server: what init and callback returns mean."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import gen_server as cb
from ensemble.decide.gen_server import (
    HIBERNATE,
    IGNORE,
    KINDS,
    WAIT_FOREVER,
    Bad,
    Continue,
    InitError,
    InitStop,
    NoReply,
    Reply,
    Start,
    Stop,
    StopReply,
    Wait,
    interpret,
    interpret_init,
)

from .._hostile import Weird, WeirdInt, WeirdStr, WeirdTuple

SETTINGS = settings(max_examples=100, deadline=None)


TAGS = ["ok", "stop", "error", "ignore", "reply", "noreply", "continue", "hibernate", "infinity", "soon", ""]

atoms = st.one_of(
    st.sampled_from(TAGS),
    st.integers(-3, 10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3),
    st.builds(Weird),
    st.sampled_from(TAGS).map(WeirdStr),
    st.integers(0, 5).map(WeirdInt),
    st.lists(st.integers(), max_size=2),
)

terms = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5).map(tuple),
        st.tuples(st.sampled_from(TAGS), inner),
        st.tuples(st.sampled_from(TAGS), inner, inner),
        st.tuples(st.sampled_from(TAGS), inner, inner, inner),
        st.lists(inner, max_size=3).map(WeirdTuple),
    ),
    max_leaves=8,
)

kinds = st.sampled_from(sorted(KINDS))
other_kinds = st.sampled_from(sorted(KINDS - {"call"}))

# (action as returned, the action it means)
good_actions = st.one_of(
    st.integers(0, 10**6).map(lambda n: (n, Wait(n))),
    st.floats(0, 1e6).map(lambda x: (x, Wait(x))),
    st.just(("infinity", WAIT_FOREVER)),
    st.just((None, WAIT_FOREVER)),
    st.just((math.inf, WAIT_FOREVER)),
    st.just(("hibernate", HIBERNATE)),
    terms.map(lambda c: (("continue", c), Continue(c))),
)

bad_actions = st.one_of(
    st.integers(max_value=-1),
    st.floats(max_value=-1e-9),
    st.just(math.nan),
    st.just(-math.inf),
    st.booleans(),
    st.text(max_size=8).filter(lambda s: s not in ("hibernate", "infinity")),
    st.just(("continue",)),
    st.tuples(st.just("continue"), terms, terms),
    st.lists(terms, max_size=2),
    st.builds(Weird),
    st.just(WeirdStr("hibernate")),
    st.just(["continue", 1]),
)

OUTCOMES = (Start, InitStop, InitError, type(IGNORE), Bad, Reply, NoReply, Stop, StopReply)


# -- totality -------------------------------------------------------------------------------


@SETTINGS
@given(terms)
def test_interpret_init_is_total_and_bad_carries_the_very_return(ret):
    """interpret_init never raises; a Bad answer carries ("bad_return_value", ret) with the very ret."""
    outcome = interpret_init(ret)
    assert type(outcome) in (Start, InitStop, InitError, type(IGNORE), Bad)
    if type(outcome) is Bad:
        assert "bad_return_value" == outcome.reason[0]
        assert ret is outcome.reason[1]


@SETTINGS
@given(kinds, terms)
def test_interpret_is_total_and_bad_carries_the_very_return(kind, ret):
    """interpret never raises for any kind; a Bad answer carries ("bad_return_value", ret) with the very ret."""
    outcome = interpret(kind, ret)
    assert type(outcome) in (Reply, NoReply, Stop, StopReply, Bad)
    if type(outcome) is Bad:
        assert "bad_return_value" == outcome.reason[0]
        assert ret is outcome.reason[1]


@pytest.mark.parametrize(
    "ret",
    [Weird(), WeirdTuple(("ok", 1)), (WeirdStr("ok"), 1), ("ok", 1, WeirdInt(3)), ("ok", 1, Weird())],
    ids=["weird", "weird-tuple", "weird-str-tag", "weird-int-timeout", "weird-action"],
)
def test_weird_values_are_bad_everywhere(ret):
    """Values of str/int/tuple subclasses and objects whose operations raise are bad returns, never errors."""
    assert Bad(("bad_return_value", ret)) == interpret_init(ret)
    for kind in sorted(KINDS):
        assert Bad(("bad_return_value", ret)) == interpret(kind, ret)


# -- init: OTP's forms ----------------------------------------------------------------------

STATE = ("some", "state")


@pytest.mark.parametrize(
    "ret, expected",
    [
        (("ok", STATE), Start(STATE, WAIT_FOREVER)),
        (("ok", STATE, 5), Start(STATE, Wait(5))),
        (("ok", STATE, 0), Start(STATE, Wait(0))),
        (("ok", STATE, 0.5), Start(STATE, Wait(0.5))),
        (("ok", STATE, "hibernate"), Start(STATE, HIBERNATE)),
        (("ok", STATE, ("continue", "more")), Start(STATE, Continue("more"))),
        (("ok", STATE, "infinity"), Start(STATE, WAIT_FOREVER)),
        (("ok", STATE, None), Start(STATE, WAIT_FOREVER)),
        (("ok", STATE, math.inf), Start(STATE, WAIT_FOREVER)),
        (("stop", "why"), InitStop("why")),
        (("error", "why"), InitError("why")),
        ("ignore", IGNORE),
    ],
    ids=lambda v: repr(v) if not isinstance(v, cb._Value) else "",
)
def test_init_forms_map_to_their_outcome(ret, expected):
    """Each OTP init return maps to its documented outcome."""
    assert expected == interpret_init(ret)


@pytest.mark.parametrize(
    "ret",
    [
        0,
        STATE,
        None,
        (),
        ("ok",),
        ("ok", STATE, -1),
        ("ok", STATE, -0.5),
        ("ok", STATE, math.nan),
        ("ok", STATE, "soon"),
        ("ok", STATE, ("continue",)),
        ("ok", STATE, ("continue", 1, 2)),
        ("ok", STATE, ["continue", 1]),
        ("ok", STATE, True),
        ("ok", STATE, False),
        ("ok", STATE, 5, "extra"),
        ("stop",),
        ("stop", "why", STATE),
        ("error",),
        ("error", "why", STATE),
        ("ignore",),
        "ok",
        ("reply", 1, STATE),
        ("noreply", STATE),
        ["ok", STATE],
    ],
    ids=repr,
)
def test_bad_init_returns_are_bad_return_value(ret):
    """Anything but OTP's init forms is ("bad_return_value", ret); a bool is an atom, not a timeout."""
    outcome = interpret_init(ret)
    assert Bad(("bad_return_value", ret)) == outcome
    assert ret is outcome.reason[1]


@SETTINGS
@given(terms, good_actions)
def test_ok_with_any_good_action_starts_with_that_action(state, action):
    """("ok", s, a) for any valid action a starts with the very state s and a's meaning."""
    given_action, meaning = action
    outcome = interpret_init(("ok", state, given_action))
    assert Start == type(outcome)
    assert state is outcome.state
    assert meaning == outcome.action


@SETTINGS
@given(terms, bad_actions)
def test_ok_with_any_bad_action_is_bad(state, action):
    """("ok", s, a) for a value a that is no action is a bad return."""
    ret = ("ok", state, action)
    assert Bad(("bad_return_value", ret)) == interpret_init(ret)


@SETTINGS
@given(terms)
def test_stop_and_error_carry_the_very_reason(reason):
    """("stop", r) and ("error", r) answer InitStop(r) and InitError(r) with the very r."""
    stop = interpret_init(("stop", reason))
    error = interpret_init(("error", reason))
    assert (InitStop, InitError) == (type(stop), type(error))
    assert (True, True) == (reason is stop.reason, reason is error.reason)


def test_none_action_waits_forever():
    """None as an action waits forever, as "infinity" does (spec: nil gives [:Wait nil])."""
    assert Start(STATE, WAIT_FOREVER) == interpret_init(("ok", STATE, None))
    assert NoReply(STATE, WAIT_FOREVER) == interpret("cast", ("noreply", STATE, None))
    assert Reply("r", STATE, WAIT_FOREVER) == interpret("call", ("reply", "r", STATE, None))


# -- callbacks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ret, expected",
    [
        (("reply", "r", STATE), Reply("r", STATE, WAIT_FOREVER)),
        (("reply", "r", STATE, 1), Reply("r", STATE, Wait(1))),
        (("reply", "r", STATE, "hibernate"), Reply("r", STATE, HIBERNATE)),
        (("reply", "r", STATE, ("continue", "c")), Reply("r", STATE, Continue("c"))),
        (("reply", "r", STATE, "infinity"), Reply("r", STATE, WAIT_FOREVER)),
        (("noreply", STATE), NoReply(STATE, WAIT_FOREVER)),
        (("noreply", STATE, 0.25), NoReply(STATE, Wait(0.25))),
        (("noreply", STATE, "hibernate"), NoReply(STATE, HIBERNATE)),
        (("noreply", STATE, ("continue", "c")), NoReply(STATE, Continue("c"))),
        (("stop", "why", STATE), Stop("why", STATE)),
        (("stop", "why", "r", STATE), StopReply("why", "r", STATE)),
    ],
    ids=lambda v: repr(v) if not isinstance(v, cb._Value) else "",
)
def test_call_forms_map_to_their_outcome(ret, expected):
    """Each OTP handle_call return maps to its documented outcome."""
    assert expected == interpret("call", ret)


@pytest.mark.parametrize(
    "ret",
    [
        STATE,
        None,
        (),
        ("reply",),
        ("reply", "r"),
        ("reply", "r", STATE, "soon"),
        ("reply", "r", STATE, -1),
        ("reply", "r", STATE, True),
        ("reply", "r", STATE, 1, "extra"),
        ("noreply",),
        ("noreply", STATE, ("continue",)),
        ("noreply", STATE, "soon"),
        ("noreply", STATE, 1, "extra"),
        ("stop",),
        ("stop", "why"),
        ("stop", "why", "r", STATE, "extra"),
        ("ok", STATE),
        "noreply",
    ],
    ids=repr,
)
def test_bad_call_returns_are_bad_return_value(ret):
    """Anything but OTP's handle_call forms is ("bad_return_value", ret)."""
    outcome = interpret("call", ret)
    assert Bad(("bad_return_value", ret)) == outcome
    assert ret is outcome.reason[1]


@pytest.mark.parametrize("kind", sorted(KINDS - {"call"}))
@pytest.mark.parametrize(
    "ret",
    [("reply", "r", STATE), ("reply", "r", STATE, 1), ("stop", "why", "r", STATE)],
    ids=repr,
)
def test_reply_forms_are_bad_outside_call(kind, ret):
    """The reply forms are bad returns from cast, info, continue and timeout callbacks."""
    assert Bad(("bad_return_value", ret)) == interpret(kind, ret)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize(
    "ret, expected",
    [
        (("noreply", STATE), NoReply(STATE, WAIT_FOREVER)),
        (("noreply", STATE, 3), NoReply(STATE, Wait(3))),
        (("stop", "why", STATE), Stop("why", STATE)),
    ],
    ids=repr,
)
def test_common_forms_mean_the_same_in_every_kind(kind, ret, expected):
    """noreply and ("stop", reason, state) mean the same for every callback."""
    assert expected == interpret(kind, ret)


@SETTINGS
@given(kinds, terms)
def test_noreply_law(kind, state):
    """For any kind and state s, ("noreply", s) is NoReply(s, WAIT_FOREVER) with the very s."""
    outcome = interpret(kind, ("noreply", state))
    assert NoReply(state, WAIT_FOREVER) == outcome
    assert state is outcome.state


@SETTINGS
@given(kinds, terms, good_actions)
def test_noreply_with_any_good_action(kind, state, action):
    """For any kind, ("noreply", s, a) with a valid action is NoReply(s, a's meaning)."""
    given_action, meaning = action
    assert NoReply(state, meaning) == interpret(kind, ("noreply", state, given_action))


@SETTINGS
@given(kinds, terms, bad_actions)
def test_any_bad_action_makes_the_return_bad(kind, state, action):
    """A return whose action is no action is bad as a whole, in every kind."""
    for ret in (("noreply", state, action), ("reply", "r", state, action)):
        assert Bad(("bad_return_value", ret)) == interpret(kind, ret)


@SETTINGS
@given(terms, terms, good_actions)
def test_reply_law_for_call(reply, state, action):
    """In handle_call, ("reply", r, s[, a]) is Reply(r, s, action) with the very r and s."""
    given_action, meaning = action
    plain = interpret("call", ("reply", reply, state))
    with_action = interpret("call", ("reply", reply, state, given_action))
    assert Reply(reply, state, WAIT_FOREVER) == plain
    assert Reply(reply, state, meaning) == with_action
    assert (True, True) == (reply is plain.reply, state is plain.state)


@SETTINGS
@given(other_kinds, terms, terms, terms)
def test_reply_forms_law_outside_call(kind, reply, state, reason):
    """Outside handle_call every reply form is a bad return, whatever its contents."""
    for ret in (("reply", reply, state), ("reply", reply, state, 0), ("stop", reason, reply, state)):
        assert Bad(("bad_return_value", ret)) == interpret(kind, ret)


@SETTINGS
@given(kinds, terms, terms)
def test_stop_law(kind, reason, state):
    """For any kind, ("stop", r, s) is Stop(r, s) with the very r and s."""
    outcome = interpret(kind, ("stop", reason, state))
    assert Stop(reason, state) == outcome
    assert (True, True) == (reason is outcome.reason, state is outcome.state)


# -- the answers themselves ----------------------------------------------------------------


def test_answers_are_immutable():
    """An answer's fields cannot be set."""
    outcome = Start(1, WAIT_FOREVER)
    with pytest.raises(AttributeError):
        outcome.state = 2
    assert 1 == outcome.state


def test_answers_of_different_types_are_not_equal():
    """Answers with equal fields but different types differ."""
    assert InitStop("r") != InitError("r")
    assert Stop("r", 1) != StopReply("r", None, 1)


def test_equal_answers_hash_equal():
    """Equal answers have equal hashes (Python's hash contract)."""
    assert hash(Wait(5)) == hash(Wait(5.0))
    assert hash(Start([1], WAIT_FOREVER)) == hash(Start([1], WAIT_FOREVER))


plain_terms = st.recursive(
    st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.none(), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple)),
    max_leaves=8,
)


plain_actions = st.one_of(
    st.integers(0, 10**6),
    st.floats(0, 1e6),
    st.sampled_from(["infinity", "hibernate", None, math.inf]),
    plain_terms.map(lambda c: ("continue", c)),
)


@SETTINGS
@given(plain_terms, plain_actions)
def test_equal_answers_hash_equal_law(state, action):
    """Answers built from equal (not identical) states and actions, hashable or not, are equal and hash alike."""
    a = interpret_init(("ok", state, action))
    b = interpret_init(("ok", copy.deepcopy(state), copy.deepcopy(action)))
    assert (a, hash(a)) == (b, hash(b))


# -- plain: the loop's fast answer for the two commonest returns -------------------------------------

returns = st.one_of(
    terms,
    st.tuples(st.sampled_from(["reply", "noreply", "stop", WeirdStr("reply")]), terms),
    st.tuples(st.sampled_from(["reply", "noreply", "stop", WeirdStr("noreply")]), terms, terms),
    st.tuples(st.just("reply"), terms, terms, good_actions | bad_actions),
)


@settings(max_examples=200, deadline=None)
@given(kinds, returns)
def test_plain_answers_only_where_interpret_answers_the_same(kind, ret):
    """Where plain answers, interpret answers Reply/NoReply with the same reply, state and
    WAIT_FOREVER; where it answers None, interpret still decides; plain never raises."""
    got = cb.plain(kind, ret)
    outcome = cb.interpret(kind, ret)
    if got is None:
        return
    answer, state = got
    assert outcome.action == cb.WAIT_FOREVER and outcome.state is state
    if answer is cb.NO_REPLY:
        assert type(outcome) is cb.NoReply
    else:
        assert type(outcome) is cb.Reply and outcome.reply is answer


def test_plain_answers_the_two_commonest_returns():
    assert ("r", 1) == cb.plain("call", ("reply", "r", 1))
    assert (cb.NO_REPLY, 2) == cb.plain("cast", ("noreply", 2))
    assert (cb.NO_REPLY, 2) == cb.plain("call", ("noreply", 2))
    assert None is cb.plain("cast", ("reply", "r", 1))  # a reply is only good for a call
    assert None is cb.plain("call", ("reply", "r", 1, "hibernate"))  # with an action: interpret
    assert None is cb.plain("call", ("stop", "normal", 1))
    assert "NO_REPLY" == repr(cb.NO_REPLY)
