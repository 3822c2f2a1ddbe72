"""Laws and OTP examples for ensemble.decide.gen_statem: results, actions, queues and timers of gen_statem."""

import math
import pickle
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble._terms import Alias
from ensemble.decide.gen_statem import (
    ENTER,
    EVENT,
    HANDLE_EVENT_FUNCTION,
    IGNORE,
    INIT,
    NO_ACTIONS,
    STATE_FUNCTIONS,
    Actions,
    Bad,
    Ignore,
    Init,
    InitError,
    InitStop,
    Mode,
    Queues,
    Stop,
    Timer,
    TimerAction,
    Transition,
    actions_of,
    callback_mode_of,
    calls_enter,
    due,
    enter_timers,
    fire,
    init_of,
    is_event_type,
    last_event,
    next_queues,
    next_timers,
    result_of,
    same_state,
    state_function_name,
    wait_time,
)

from .._hostile import Weird

SETTINGS = settings(max_examples=60, deadline=None)
KINDS = [EVENT, ENTER, INIT]


# -- strategies ------------------------------------------------------------------------

# Halves keep every sum exact, so deadlines compare with ==.
halves = st.integers(0, 40).map(lambda n: n / 2)
signed_halves = st.integers(-40, 40).map(lambda n: n / 2)
ALIASES = [Alias(n, None) for n in range(3)]
froms = st.tuples(st.integers(0, 3), st.sampled_from(ALIASES))
contents = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "", ("t", 1)]), st.none())
names = st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]))
keys = st.one_of(st.sampled_from(["timeout", "state_timeout"]), names.map(lambda n: ("timeout", n)))
rel_times = st.one_of(st.integers(0, 20), halves)
abs_times = st.one_of(st.integers(-20, 20), signed_halves)
event_types = st.one_of(
    st.sampled_from(["cast", "info", "internal", "timeout", "state_timeout"]),
    froms.map(lambda f: ("call", f)),
    names.map(lambda n: ("timeout", n)),
)
cancels = st.sampled_from(["infinity", None, math.inf])


@st.composite
def good_action(draw, kind=EVENT):
    """A well-formed action for ``kind`` and the effect it must have: (action, (what, value))."""
    choices = ["reply", "hibernate", "timer", "cancel", "update", "bare_time", "bare_infinity"]
    if kind != ENTER:
        choices += ["postpone", "next_event"]
    else:
        choices += ["postpone_false"]
    which = draw(st.sampled_from(choices))
    if which == "reply":
        f, v = draw(froms), draw(contents)
        return ("reply", f, v), ("reply", (f, v))
    if which == "hibernate":
        if draw(st.booleans()):
            return "hibernate", ("hibernate", True)
        b = draw(st.booleans())
        return ("hibernate", b), ("hibernate", b)
    if which == "postpone":
        forced = (lambda b: False) if kind == INIT else (lambda b: b)
        if draw(st.booleans()):
            return "postpone", ("postpone", forced(True))
        b = draw(st.booleans())
        return ("postpone", b), ("postpone", forced(b))
    if which == "postpone_false":
        return ("postpone", False), ("postpone", False)
    if which == "next_event":
        t, c = draw(event_types), draw(contents)
        return ("next_event", t, c), ("event", (t, c))
    key = draw(keys)
    if which == "timer":
        c = draw(contents)
        form = draw(st.sampled_from(["3", "rel", "abs"]))
        if form == "3":
            t = draw(rel_times)
            return (key, t, c), ("timer", TimerAction(key, "start", t, c, False))
        if form == "rel":
            t = draw(rel_times)
            opts = draw(st.sampled_from([{}, {"abs": False}]))
            return (key, t, c, opts), ("timer", TimerAction(key, "start", t, c, False))
        t = draw(abs_times)
        return (key, t, c, {"abs": True}), ("timer", TimerAction(key, "start", t, c, True))
    if which == "cancel":
        form = draw(st.sampled_from(["cancel", "time3", "time4"]))
        if form == "cancel":
            return (key, "cancel"), ("timer", TimerAction(key, "cancel"))
        t = draw(cancels)
        if form == "time3":
            return (key, t, draw(contents)), ("timer", TimerAction(key, "cancel"))
        opts = draw(st.sampled_from([{}, {"abs": True}, {"abs": False}]))
        return (key, t, draw(contents), opts), ("timer", TimerAction(key, "cancel"))
    if which == "update":
        c = draw(contents)
        return (key, "update", c), ("timer", TimerAction(key, "update", 0, c))
    if which == "bare_time":
        t = draw(rel_times)
        return t, ("timer", TimerAction("timeout", "start", t, t))
    return "infinity", ("timer", TimerAction("timeout", "cancel"))


def expected_actions(effects):
    """The Actions a list of effects must parse to (the model)."""
    replies, events, timers = [], [], []
    postpone = hibernate = None
    for what, value in effects:
        if what == "reply":
            replies.append(value)
        elif what == "event":
            events.append(value)
        elif what == "timer":
            timers.append(value)
        elif what == "postpone":
            postpone = value
        else:
            hibernate = value
    return Actions(tuple(replies), tuple(events), tuple(timers), postpone, hibernate)


def good_list(kind=EVENT):
    return st.lists(good_action(kind), max_size=6)


@st.composite
def bad_action(draw):
    """An action OTP refuses in every kind of callback."""
    key = draw(keys)
    c = draw(contents)
    return draw(
        st.sampled_from(
            [
                None,
                True,
                False,
                b"postpone",
                "soon",
                "Postpone",
                "keep_state",
                -1,
                -0.5,
                math.nan,
                -math.inf,
                (),
                ("unknown", 1),
                frozenset([1]),
                {"abs": True},
                ("reply", (1, ALIASES[0])),
                ("reply", "nobody", c),
                ("reply", (1, 2), c),
                ("reply", (1, ALIASES[0], 3), c),
                ("reply", (1, ALIASES[0]), c, c),
                ("hibernate", 1),
                ("hibernate", None),
                ("hibernate",),
                ("hibernate", True, c),
                ("postpone", 1),
                ("postpone", True, c),
                ("postpone",),
                ("next_event", "bogus", c),
                ("next_event", "enter", c),
                ("next_event", ("call", "nobody"), c),
                ("next_event", ("timeout", [1]), c),
                ("next_event", "cast"),
                ("next_event", "cast", c, c),
                (key,),
                (key, "cancel", c),
                (key, "update"),
                (key, "update", c, {}),
                (key, "cancel", c, {}),
                (key, -1, c),
                (key, -0.5, c, {}),
                (key, -1, c, {"abs": False}),
                (key, math.nan, c),
                (key, math.nan, c, {"abs": True}),
                (key, "soon", c),
                (key, True, c),
                (key, 1, c, {"abs": "yes"}),
                (key, 1, c, {"abs": 1}),
                (key, 1, c, {"other": True}),
                (key, 1, c, [("abs", True)]),
                (key, "infinity", c, {"abs": "yes"}),
                (key, 1, c, {}, c),
                (key, 5),
                (("timeout", [1]), 1, c),
                (("timeout",), 1, c),
                (("timeout", 1, 2), 1, c),
                (("state_timeout", 1), 1, c),
            ]
        )
    )


KEYWORDS = [
    "ok", "stop", "error", "ignore", "next_state", "keep_state", "keep_state_and_data",
    "repeat_state", "repeat_state_and_data", "stop_and_reply", "reply", "postpone", "hibernate",
    "next_event", "timeout", "state_timeout", "cancel", "update", "infinity", "cast", "call",
    "normal",
]
atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(KEYWORDS),
    st.builds(Weird),
)
terms = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner),
        st.tuples(st.sampled_from(KEYWORDS), inner),
        st.tuples(st.sampled_from(KEYWORDS), inner, inner),
        st.tuples(st.sampled_from(KEYWORDS), inner, inner, inner),
        st.tuples(st.sampled_from(KEYWORDS), inner, inner, inner, inner),
        st.dictionaries(st.sampled_from(["abs", "x"]), inner, max_size=2),
    ),
    max_leaves=12,
)


# -- totality ------------------------------------------------------------------------------


@SETTINGS
@given(terms, st.sampled_from(KINDS))
def test_actions_of_is_total(actions, kind):
    """actions_of answers Actions or Bad for any value, never raising."""
    assert type(actions_of(actions, kind)) in (Actions, Bad)


@SETTINGS
@given(terms)
def test_init_of_is_total(ret):
    """init_of answers one of its five outcomes for any value."""
    assert type(init_of(ret)) in (Init, InitStop, InitError, Ignore, Bad)


@SETTINGS
@given(terms, st.sampled_from([EVENT, ENTER]), terms, terms)
def test_result_of_is_total(ret, kind, state, data):
    """result_of answers a Transition or a Stop for any return, state and data."""
    assert type(result_of(kind, ret, state, data)) in (Transition, Stop)


@SETTINGS
@given(terms, st.booleans())
def test_callback_mode_of_is_total(mode, enter):
    """callback_mode_of answers a Mode or a Bad for any value."""
    assert type(callback_mode_of(mode, enter)) in (Mode, Bad)


@SETTINGS
@given(terms)
def test_is_event_type_and_state_function_name_are_total(x):
    """is_event_type and state_function_name answer for any value."""
    assert type(is_event_type(x)) is bool
    assert state_function_name(x) in (None, x)


def test_same_state_survives_hostile_values():
    """same_state is identity first, and a raising == means different."""
    w = Weird()
    assert True is same_state(w, w)
    assert False is same_state(w, Weird())
    assert False is same_state(1, w)
    assert True is same_state(("a", 1), ("a", 1))


# -- actions -------------------------------------------------------------------------------


@SETTINGS
@given(st.sampled_from(KINDS), st.data())
def test_good_actions_parse_to_their_effects(kind, data):
    """A list of well-formed actions parses to exactly their effects, in order, last flag winning."""
    pairs = data.draw(good_list(kind))
    assert expected_actions([e for _, e in pairs]) == actions_of([a for a, _ in pairs], kind)


@SETTINGS
@given(st.sampled_from(KINDS), st.data())
def test_a_single_action_stands_for_a_list_of_one(kind, data):
    """One action outside a list means the same as the list holding it."""
    action, _ = data.draw(good_action(kind))
    assert actions_of([action], kind) == actions_of(action, kind)


@SETTINGS
@given(good_list(), good_list())
def test_actions_of_a_concatenation_is_then(first, second):
    """Parsing a + b equals parsing a, then b (what an enter call's appended actions rely on)."""
    a = actions_of([x for x, _ in first])
    b = actions_of([x for x, _ in second])
    assert actions_of([x for x, _ in first + second]) == a.then(b)


@SETTINGS
@given(bad_action(), st.sampled_from(KINDS))
def test_every_malformed_action_is_a_bad_action(action, kind):
    """A malformed action answers ("bad_action_from_state_function", action), the very object."""
    out = actions_of(action, kind)
    assert Bad is type(out)
    assert "bad_action_from_state_function" == out.reason[0]
    assert action is out.reason[1]


@SETTINGS
@given(good_list(), bad_action(), good_list())
def test_a_bad_action_keeps_the_replies_read_before_it(before, action, after):
    """The replies before a bad action are still sent (OTP replies as it reads); none after it."""
    out = actions_of([a for a, _ in before] + [action] + [a for a, _ in after])
    assert Bad is type(out)
    assert action is out.reason[1]
    assert expected_actions([e for _, e in before]).replies == out.replies


@SETTINGS
@given(
    st.one_of(
        st.just("postpone"),
        st.just(("postpone", True)),
        st.tuples(st.just("next_event"), event_types, contents),
    ),
    good_list(ENTER),
)
def test_an_enter_call_may_not_postpone_or_insert(action, before):
    """In an enter call postpone and next_event give ("bad_state_enter_action_from_state_function", a)."""
    out = actions_of([a for a, _ in before] + [action], ENTER)
    assert Bad is type(out)
    assert "bad_state_enter_action_from_state_function" == out.reason[0]
    assert action is out.reason[1]
    assert Actions is type(actions_of(action, EVENT))


def test_a_list_inside_the_list_is_a_bad_action():
    """Only the outer list is a list of actions; a list in it is a malformed action."""
    inner = ["hibernate"]
    assert Bad(("bad_action_from_state_function", inner)) == actions_of([inner])


def test_init_actions_force_postpone_false():
    """init's actions may say postpone, but there is no event: postpone is false."""
    assert False is actions_of(["postpone", ("postpone", True)], INIT).postpone
    assert (("internal", 1),) == actions_of(("next_event", "internal", 1), INIT).events


@pytest.mark.parametrize(
    "action",
    [
        None,
        ("hibernate", 1),
        ("postpone", True, "x"),
        ("reply", (1, 2)),
        -1,
        ("timeout", -1, "x"),
        ("next_event", "bogus", 1),
        ("timeout", "cancel", "x"),
        ("state_timeout", "update"),
        ("state_timeout", 1, "x", {"abs": "yes"}),
        (("timeout", "t"), 1, "x", {"abs": True}, "extra"),
        "soon",
    ],
)
def test_the_spec_examples_of_bad_actions(action):
    """Each malformed action §2.7 lists stops the machine with the bad-action reason."""
    assert Bad(("bad_action_from_state_function", action)) == actions_of(action)


def test_timeout_forms():
    """OTP's time-out forms: bare time, triple, cancel, update, infinity, abs option."""
    assert (TimerAction("timeout", "start", 2, 2),) == actions_of(2).timers
    assert (TimerAction("timeout", "cancel"),) == actions_of("infinity").timers
    assert (TimerAction("timeout", "cancel"),) == actions_of(math.inf).timers
    assert (TimerAction("state_timeout", "start", 0.5, "c"),) == actions_of(
        ("state_timeout", 0.5, "c")
    ).timers
    assert (TimerAction(("timeout", "g"), "start", -3, "c", True),) == actions_of(
        (("timeout", "g"), -3, "c", {"abs": True})
    ).timers
    assert (TimerAction(("timeout", "g"), "cancel"),) == actions_of((("timeout", "g"), "cancel")).timers
    assert (TimerAction("timeout", "cancel"),) == actions_of(("timeout", None, "c")).timers
    assert (TimerAction("state_timeout", "update", 0, "new"),) == actions_of(
        ("state_timeout", "update", "new")
    ).timers


def test_empty_actions_are_no_actions():
    """An empty list is no action at all."""
    assert NO_ACTIONS is actions_of([])
    assert False is NO_ACTIONS.postponing
    assert False is NO_ACTIONS.hibernating


def test_hibernate_last_one_decides():
    """Of several hibernate actions the last decides."""
    assert False is actions_of(["hibernate", ("hibernate", False)]).hibernating
    assert True is actions_of([("hibernate", False), "hibernate"]).hibernating


# -- init ----------------------------------------------------------------------------------


@SETTINGS
@given(contents, contents, good_list(INIT))
def test_init_ok_forms(state, data, pairs):
    """("ok", s, d) and ("ok", s, d, actions) start in s with d and the parsed actions."""
    assert Init(state, data, NO_ACTIONS) == init_of(("ok", state, data))
    expected = Init(state, data, expected_actions([e for _, e in pairs]))
    assert expected == init_of(("ok", state, data, [a for a, _ in pairs]))


@SETTINGS
@given(terms)
def test_init_stop_error_ignore(reason):
    """("stop", r), ("error", r) and "ignore" keep the very reason."""
    assert reason is init_of(("stop", reason)).reason
    assert InitStop is type(init_of(("stop", reason)))
    assert reason is init_of(("error", reason)).reason
    assert InitError is type(init_of(("error", reason)))
    assert IGNORE is init_of("ignore")


@SETTINGS
@given(terms)
def test_anything_else_from_init_is_a_bad_return(ret):
    """Any other init return is ("bad_return_from_init", ret), the very object."""
    out = init_of(ret)
    if type(out) is Bad and out.reason[0] == "bad_return_from_init":
        assert ret is out.reason[1]
    elif type(out) is Bad:
        assert "bad_action_from_state_function" == out.reason[0]
        assert type(ret) is tuple and len(ret) == 4
    else:
        assert type(ret) is tuple or ret == "ignore"


@SETTINGS
@given(bad_action())
def test_a_bad_init_action_fails_the_start(action):
    """A malformed init action answers the bad-action reason."""
    out = init_of(("ok", "s", 0, [action]))
    assert Bad is type(out)
    assert action is out.reason[1]


def test_init_examples():
    """§2.7's init examples."""
    assert Bad(("bad_return_from_init", ("error", "a", "b"))) == init_of(("error", "a", "b"))
    assert Bad(("bad_return_from_init", 0)) == init_of(0)
    assert Bad(("bad_return_from_init", ("ok", "s"))) == init_of(("ok", "s"))
    assert IGNORE is pickle.loads(pickle.dumps(IGNORE))


# -- results -------------------------------------------------------------------------------


@SETTINGS
@given(contents, contents, contents, contents, good_list())
def test_event_results(state, data, new_state, new_data, pairs):
    """Every result form of a state callback, with its actions and the repeat flag."""
    raw = [a for a, _ in pairs]
    acts = expected_actions([e for _, e in pairs])
    cases = [
        (("next_state", new_state, new_data), Transition(new_state, new_data)),
        (("next_state", new_state, new_data, raw), Transition(new_state, new_data, acts)),
        (("keep_state", new_data), Transition(state, new_data)),
        (("keep_state", new_data, raw), Transition(state, new_data, acts)),
        ("keep_state_and_data", Transition(state, data)),
        (("keep_state_and_data", raw), Transition(state, data, acts)),
        (("repeat_state", new_data), Transition(state, new_data, NO_ACTIONS, True)),
        (("repeat_state", new_data, raw), Transition(state, new_data, acts, True)),
        ("repeat_state_and_data", Transition(state, data, NO_ACTIONS, True)),
        (("repeat_state_and_data", raw), Transition(state, data, acts, True)),
    ]
    for ret, expected in cases:
        assert expected == result_of(EVENT, ret, state, data), ret


@SETTINGS
@given(contents, contents, terms, contents)
def test_stop_results(state, data, reason, new_data):
    """stop, ("stop", r), ("stop", r, d) terminate with the reason and data."""
    assert Stop("normal", state, data) == result_of(EVENT, "stop", state, data)
    out = result_of(EVENT, ("stop", reason), state, data)
    assert Stop is type(out) and reason is out.reason and data is out.data and () == out.replies
    out = result_of(ENTER, ("stop", reason, new_data), state, data)
    assert Stop is type(out) and reason is out.reason and new_data is out.data


@SETTINGS
@given(contents, contents, contents, st.lists(st.tuples(froms, contents), max_size=4))
def test_stop_and_reply(state, data, new_data, replies):
    """stop_and_reply sends its replies in order, then stops; one reply may stand alone."""
    raw = [("reply", f, v) for f, v in replies]
    assert Stop("r", state, data, tuple(replies)) == result_of(
        EVENT, ("stop_and_reply", "r", raw), state, data
    )
    assert Stop("r", state, new_data, tuple(replies)) == result_of(
        ENTER, ("stop_and_reply", "r", raw, new_data), state, data
    )
    if replies:
        f, v = replies[0]
        assert Stop("r", state, data, ((f, v),)) == result_of(
            EVENT, ("stop_and_reply", "r", ("reply", f, v)), state, data
        )


@SETTINGS
@given(st.lists(st.tuples(froms, contents), max_size=3), st.one_of(bad_action(), st.just("postpone")))
def test_a_bad_reply_in_stop_and_reply(replies, bad):
    """A non-reply in stop_and_reply's list stops with ("bad_reply_action_from_state_function", r)."""
    raw = [("reply", f, v) for f, v in replies] + [bad]
    out = result_of(EVENT, ("stop_and_reply", "r", raw), "s", 0)
    assert Stop is type(out)
    assert "bad_reply_action_from_state_function" == out.reason[0]
    assert bad is out.reason[1]
    assert tuple(replies) == out.replies


@SETTINGS
@given(terms, terms, terms)
def test_bad_returns_keep_the_very_return(ret, state, data):
    """A return of no known form stops with ("bad_return_from_state_function", ret), the very object."""
    out = result_of(EVENT, ret, state, data)
    if type(out) is Stop and type(out.reason) is tuple and len(out.reason) == 2:
        if out.reason[0] == "bad_return_from_state_function":
            assert ret is out.reason[1]
            assert state is out.state and data is out.data


@SETTINGS
@given(contents, good_list(), bad_action())
def test_a_bad_action_in_a_result_stops_with_the_new_data(new_data, before, action):
    """A bad action stops in the old state with the data the return named, after earlier replies."""
    raw = [a for a, _ in before] + [action]
    out = result_of(EVENT, ("next_state", "b", new_data, raw), "a", 0)
    assert Stop is type(out)
    assert action is out.reason[1]
    assert ("a", new_data) == (out.state, out.data)
    assert expected_actions([e for _, e in before]).replies == out.replies


@SETTINGS
@given(st.sampled_from(["a", "b", 1, ("s", 1)]), contents, good_list(ENTER))
def test_enter_calls(state, data, pairs):
    """An enter call may name its own state, not another; a repeat from it acts as keep."""
    raw = [a for a, _ in pairs]
    acts = expected_actions([e for _, e in pairs])
    assert Transition(state, data, acts) == result_of(ENTER, ("next_state", state, data, raw), state, 0)
    ret = ("next_state", "other", data)
    assert Stop(("bad_state_enter_return_from_state_function", ret), state, 0) == result_of(
        ENTER, ret, state, 0
    )
    assert Transition(state, data, acts, False) == result_of(ENTER, ("repeat_state", data, raw), state, 0)
    assert Transition(state, 0, NO_ACTIONS, False) == result_of(ENTER, "repeat_state_and_data", state, 0)


def test_result_examples():
    """Forms that look right but are not: wrong arity, lists, a tuple of actions."""
    for ret in [("next_state", "s"), ["keep_state", 1], ("keep_state_and_data",), ("stop",), None, "ok"]:
        assert Stop(("bad_return_from_state_function", ret), "s", 0) == result_of(EVENT, ret, "s", 0)
    actions = ("postpone", "hibernate")  # a tuple is one action, and this one is malformed
    out = result_of(EVENT, ("keep_state", 1, actions), "s", 0)
    assert ("bad_action_from_state_function", actions) == out.reason


def test_calls_enter():
    """An enter call runs when enabled and the state changed or repeats."""
    assert [False, False, False, False, False, True, True, True] == [
        calls_enter(e, c, r) for e in (False, True) for c in (False, True) for r in (False, True)
    ]


# -- queues --------------------------------------------------------------------------------


@st.composite
def queue_case(draw):
    ids = iter(range(1000))
    postponed = tuple(next(ids) for _ in range(draw(st.integers(0, 4))))
    inserted = tuple(next(ids) for _ in range(draw(st.integers(0, 4))))
    queue = tuple(next(ids) for _ in range(draw(st.integers(0, 4))))
    event = next(ids)
    return draw(st.booleans()), draw(st.booleans()), event, postponed, inserted, queue


@SETTINGS
@given(queue_case())
def test_no_event_is_lost_or_duplicated(case):
    """postponed + queue after equals postponed + inserted + queue before, plus the event if postponed."""
    changed, postpone, event, postponed, inserted, queue = case
    out = next_queues(*case)
    before = Counter(postponed + inserted + queue + ((event,) if postpone else ()))
    assert before == Counter(out.postponed + out.queue)


@SETTINGS
@given(queue_case())
def test_postponed_events_retry_only_after_a_state_change(case):
    """No change: the postponed stay (plus this event); a change: they come right after the inserted ones."""
    changed, postpone, event, postponed, inserted, queue = case
    out = next_queues(*case)
    held = postponed + ((event,) if postpone else ())
    if changed:
        assert Queues((), inserted + held + queue) == out
    else:
        assert Queues(held, inserted + queue) == out


@SETTINGS
@given(queue_case())
def test_inserted_events_come_first_in_the_order_given(case):
    """The queue starts with the inserted events, in order."""
    out = next_queues(*case)
    inserted = case[4]
    assert inserted == out.queue[: len(inserted)]


def test_no_event_to_postpone_at_init():
    """Without an event (init) postpone adds nothing."""
    assert Queues((1,), (2, 3)) == next_queues(False, True, None, [1], [2], [3])


# -- timers --------------------------------------------------------------------------------


timer_maps = st.dictionaries(keys, st.builds(Timer, signed_halves, contents), max_size=4)
timer_actions = st.lists(
    st.one_of(
        st.builds(TimerAction, keys, st.just("start"), halves, contents, st.just(False)),
        st.builds(TimerAction, keys, st.just("start"), signed_halves, contents, st.just(True)),
        st.builds(TimerAction, keys, st.just("cancel")),
        st.builds(TimerAction, keys, st.just("update"), st.just(0), contents),
    ),
    max_size=6,
)


def last_for(actions, key):
    found = [a for a in actions if a.key == key]
    return found[-1] if found else None


@SETTINGS
@given(timer_maps, timer_actions, st.booleans(), st.booleans(), signed_halves)
def test_event_timeout_only_from_this_transition_and_only_if_nothing_is_queued(
    timers, actions, changed, queued, now
):
    """The event time-out runs iff its last action starts or updates it and no event is queued."""
    out = next_timers(timers, actions, changed=changed, queued=queued, now=now)
    last = last_for(actions, "timeout")
    expected = not queued and last is not None and last.op != "cancel"
    assert expected == ("timeout" in out)
    if expected:
        deadline = None  # the event cancelled the running one: only these actions count
        for a in actions:
            if a.key == "timeout":
                if a.op == "cancel":
                    deadline = None
                elif a.op == "start":
                    deadline = a.time if a.absolute else now + a.time
                elif deadline is None:
                    deadline = now  # update of a stopped time-out: time 0
        assert Timer(deadline, last.content) == out["timeout"]


@SETTINGS
@given(timer_maps, timer_actions, st.booleans(), st.booleans(), signed_halves)
def test_state_timeout_is_cancelled_by_a_state_change(timers, actions, changed, queued, now):
    """Without actions on it the state time-out survives iff the state did not change."""
    actions = [a for a in actions if a.key != "state_timeout"]
    out = next_timers(timers, actions, changed=changed, queued=queued, now=now)
    if changed or "state_timeout" not in timers:
        assert "state_timeout" not in out
    else:
        assert timers["state_timeout"] == out["state_timeout"]


@SETTINGS
@given(timer_maps, timer_actions, st.booleans(), st.booleans(), signed_halves)
def test_generic_timeouts_survive_state_changes(timers, actions, changed, queued, now):
    """A generic time-out no action names is kept as it was, state change or not."""
    out = next_timers(timers, actions, changed=changed, queued=queued, now=now)
    for key, t in timers.items():
        if type(key) is tuple and last_for(actions, key) is None:
            assert t == out[key]


@SETTINGS
@given(timer_maps, timer_actions, st.booleans(), signed_halves)
def test_the_last_start_or_cancel_for_a_key_wins(timers, actions, changed, now):
    """After a start a timer runs to now + time (or the abs time) with its content; a cancel removes it."""
    out = next_timers(timers, actions, changed=changed, queued=False, now=now)
    for key in {a.key for a in actions}:
        last = last_for(actions, key)
        if last.op == "cancel":
            assert key not in out
        elif last.op == "start":
            deadline = last.time if last.absolute else now + last.time
            assert Timer(deadline, last.content) == out[key]


@SETTINGS
@given(timer_maps, keys, contents, st.booleans(), signed_halves)
def test_update_keeps_a_running_deadline_or_starts_time_zero(timers, key, content, changed, now):
    """update changes a running timer's content only; on a stopped one it starts a time-out of time 0."""
    update = [TimerAction(key, "update", 0, content)]
    out = next_timers(timers, update, changed=changed, queued=False, now=now)
    survives = key in timers and key != "timeout" and not (changed and key == "state_timeout")
    deadline = timers[key].deadline if survives else now
    assert Timer(deadline, content) == out[key]


@SETTINGS
@given(timer_maps, timer_actions, st.booleans(), st.booleans(), signed_halves)
def test_next_timers_does_not_touch_its_input(timers, actions, changed, queued, now):
    """The timers given are not changed; a new dict is answered."""
    before = dict(timers)
    out = next_timers(timers, actions, changed=changed, queued=queued, now=now)
    assert before == timers
    assert out is not timers


@SETTINGS
@given(timer_maps, timer_actions, timer_actions, st.booleans(), st.booleans(), signed_halves)
def test_enter_timers_append_to_the_transition(timers, first, second, changed, queued, now):
    """An enter call's time-outs act as if appended to its transition's actions."""
    step = next_timers(timers, first, changed=changed, queued=queued, now=now)
    assert next_timers(timers, first + second, changed=changed, queued=queued, now=now) == enter_timers(
        step, second, queued=queued, now=now
    )


def test_enter_call_keeps_the_transitions_event_timeout():
    """enter_timers does not cancel the event time-out its transition set."""
    step = next_timers({}, [TimerAction("timeout", "start", 1, "x")], changed=True, queued=False, now=0)
    assert {"timeout": Timer(1, "x")} == enter_timers(step, [], queued=False, now=0.5)


def test_a_huge_time_never_comes_due():
    """A time too large for a float gives a deadline of infinity."""
    huge = actions_of(("state_timeout", 10**400, "x")).timers
    out = next_timers({}, huge, changed=False, queued=False, now=0.0)
    assert Timer(math.inf, "x") == out["state_timeout"]
    assert None is wait_time(out, 0.0)


@SETTINGS
@given(timer_maps, signed_halves)
def test_due_names_the_earliest_due_timer(timers, now):
    """due answers the timer with the least deadline, if that deadline has come; else None."""
    key = due(timers, now)
    if not timers or min(t.deadline for t in timers.values()) > now:
        assert None is key
    else:
        assert min(t.deadline for t in timers.values()) == timers[key].deadline


def test_due_breaks_ties_in_start_order():
    """Of time-outs due at the same time the one started first goes first."""
    acts = actions_of([(("timeout", "b"), 0, 1), ("state_timeout", 0, 2), (("timeout", "a"), 0, 3)]).timers
    timers = next_timers({}, acts, changed=False, queued=False, now=5.0)
    order = []
    while (key := due(timers, 5.0)) is not None:
        event, timers = fire(timers, key)
        order.append(event)
    assert [(("timeout", "b"), 1), ("state_timeout", 2), (("timeout", "a"), 3)] == order


@SETTINGS
@given(timer_maps, signed_halves)
def test_wait_time_is_time_to_the_earliest_deadline(timers, now):
    """wait_time is None without timers, else the time to the earliest deadline (0 when due)."""
    expected = None if not timers else max(min(t.deadline for t in timers.values()) - now, 0.0)
    assert expected == wait_time(timers, now)


@SETTINGS
@given(timer_maps.filter(bool), st.data())
def test_fire_delivers_the_timer_and_removes_it(timers, data):
    """fire answers the event (key, content) and the other timers, untouched."""
    key = data.draw(st.sampled_from(sorted(timers, key=repr)))
    event, rest = fire(timers, key)
    assert (key, timers[key].content) == event
    assert {k: v for k, v in timers.items() if k != key} == rest


# -- modes, names, reports -------------------------------------------------------------------


def test_callback_modes():
    """OTP's callback_mode() forms, with state_enter from the mode or the start option."""
    assert Mode(HANDLE_EVENT_FUNCTION, False) == callback_mode_of(HANDLE_EVENT_FUNCTION)
    assert Mode(STATE_FUNCTIONS, True) == callback_mode_of([STATE_FUNCTIONS, "state_enter"])
    assert Mode(STATE_FUNCTIONS, True) == callback_mode_of(STATE_FUNCTIONS, True)
    assert Mode(HANDLE_EVENT_FUNCTION, True) == callback_mode_of(("state_enter", HANDLE_EVENT_FUNCTION))
    for bad in ["state_enter", ["state_enter"], "handle_event", None, [], [STATE_FUNCTIONS, "x"]]:
        assert Bad(("bad_return_from_callback_mode", bad)) == callback_mode_of(bad)


def test_state_function_names():
    """A state names a method only if it is a public identifier and not another callback."""
    assert ["locked", "open", None, None, None, None, None, None] == [
        state_function_name(s)
        for s in ["locked", "open", "init", "terminate", "_private", "no way", 1, ("a",)]
    ]


def test_last_event_shows_a_call_by_its_tag():
    """A report shows a call as ("call", request), other events as they are."""
    assert ("call", "req") == last_event((("call", (1, ALIASES[0])), "req"))
    assert (("timeout", "g"), 1) == last_event((("timeout", "g"), 1))
    assert ("cast", "x") == last_event(("cast", "x"))
    assert None is last_event(None)


def test_results_are_immutable_values():
    """Result objects are frozen and compare by value."""
    t = Transition("s", 1)
    with pytest.raises(AttributeError):
        t.state = "x"
    assert Transition("s", 1) == t
    assert hash(Stop("r", "s", 1)) == hash(Stop("r", "s", 1))
