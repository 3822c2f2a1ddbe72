"""Laws and examples for ensemble.decide.life."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide.life import (
    DEAD,
    PARK,
    PROCEED,
    RAISE,
    RAISE_LIMIT,
    EVENTS,
    EXIT,
    HIBERNATE,
    HIBERNATED,
    MAIL,
    PASSIVATE,
    PASSIVATED,
    RUNNING,
    SIGNAL,
    STATES,
    is_alive,
    on_call,
    step,
    wakes,
)

SETTINGS = settings(max_examples=120, deadline=None)

known_states = st.sampled_from(sorted(STATES))
known_events = st.sampled_from(sorted(EVENTS))
states = st.one_of(known_states, st.text(max_size=6))
events = st.one_of(known_events, st.text(max_size=6))

TABLE = {
    (RUNNING, HIBERNATE): HIBERNATED,
    (RUNNING, EXIT): DEAD,
    (HIBERNATED, MAIL): RUNNING,
    (HIBERNATED, SIGNAL): RUNNING,
    (HIBERNATED, PASSIVATE): PASSIVATED,
    (HIBERNATED, EXIT): DEAD,
    (PASSIVATED, MAIL): RUNNING,
    (PASSIVATED, SIGNAL): RUNNING,
    (PASSIVATED, EXIT): DEAD,
}


def test_constants():
    assert {"running", "hibernated", "passivated", "dead"} == STATES
    assert {"hibernate", "passivate", "mail", "signal", "exit"} == EVENTS


def test_table_exhaustively():
    for s in STATES:
        for e in EVENTS:
            assert TABLE.get((s, e), s) == step(s, e), (s, e)


@SETTINGS
@given(states, events)
def test_total_and_matches_table(state, event):
    assert TABLE.get((state, event), state) == step(state, event)


@SETTINGS
@given(events)
def test_dead_is_absorbing(event):
    assert DEAD == step(DEAD, event)
    assert False is wakes(DEAD, event)


@SETTINGS
@given(states, st.text(max_size=6).filter(lambda e: e not in EVENTS))
def test_unknown_events_are_identity(state, event):
    assert state == step(state, event)
    assert False is wakes(state, event)


@SETTINGS
@given(st.text(max_size=6).filter(lambda s: s not in STATES), events)
def test_unknown_states_are_identity(state, event):
    assert state == step(state, event)


@SETTINGS
@given(states, events)
def test_wakes_iff_sleeping_becomes_running(state, event):
    expected = state in (HIBERNATED, PASSIVATED) and step(state, event) == RUNNING
    assert expected == wakes(state, event)


@SETTINGS
@given(states)
def test_is_alive(state):
    assert (state != DEAD) == is_alive(state)


@SETTINGS
@given(known_states, st.lists(events, max_size=40))
def test_at_most_one_wake_between_hibernates(start, seq):
    state = start
    wakes_since = 0
    for event in seq:
        if event == HIBERNATE:
            wakes_since = 0
        if wakes(state, event):
            wakes_since += 1
        assert wakes_since <= 1, seq
        state = step(state, event)


@SETTINGS
@given(known_states, st.lists(events, max_size=40))
def test_once_dead_stays_dead(start, seq):
    state = start
    dead = state == DEAD
    for event in seq:
        state = step(state, event)
        dead = dead or state == DEAD
        assert dead == (state == DEAD)


def test_burst_of_mail_wakes_once():
    state = step(RUNNING, HIBERNATE)
    woken = 0
    for event in (MAIL, MAIL, SIGNAL, MAIL):
        woken += wakes(state, event)
        state = step(state, event)
    assert 1 == woken
    assert RUNNING == state


def test_passivation_path():
    state = RUNNING
    for event in (HIBERNATE, PASSIVATE):
        state = step(state, event)
    assert PASSIVATED == state
    assert True is wakes(state, SIGNAL)
    assert RUNNING == step(state, SIGNAL)
    assert DEAD == step(state, EXIT)


def test_running_process_cannot_passivate():
    assert RUNNING == step(RUNNING, PASSIVATE)
    assert False is wakes(RUNNING, MAIL)


# -- on_call: what a dead process's calls into ensemble do ------------------------

raised_counts = st.integers(min_value=0, max_value=3 * RAISE_LIMIT)


@SETTINGS
@given(states, raised_counts, st.booleans())
def test_on_call_a_live_process_proceeds_and_a_dead_one_never_does(state, raised, handling):
    """PROCEED exactly for a state that is not DEAD."""
    assert (on_call(state, raised, handling) == PROCEED) == (state != DEAD)


@SETTINGS
@given(st.booleans())
def test_on_call_the_first_call_of_a_dead_process_raises(handling):
    """The exit signal not yet raised in it: the call raises it."""
    assert RAISE == on_call(DEAD, 0, handling)


@SETTINGS
@given(st.integers(min_value=1, max_value=3 * RAISE_LIMIT))
def test_on_call_a_dead_process_that_swallowed_its_signal_parks(raised):
    """Raised at least once and no exception being handled: the body swallowed it; park for good."""
    assert PARK == on_call(DEAD, raised, False)


@SETTINGS
@given(raised_counts)
def test_on_call_cleanup_while_unwinding_raises_again_up_to_the_limit(raised):
    """While an exception is handled, calls raise again until RAISE_LIMIT raises, then park."""
    assert on_call(DEAD, raised, True) == (RAISE if raised < RAISE_LIMIT else PARK)


def test_on_call_a_dead_process_raises_at_most_raise_limit_times():
    """Whatever the calls, counting each RAISE, the answers end in PARK after RAISE_LIMIT raises."""
    raised = 0
    for _ in range(10 * RAISE_LIMIT):
        if on_call(DEAD, raised, True) == RAISE:
            raised += 1
    assert RAISE_LIMIT == raised
    assert PARK == on_call(DEAD, raised, True) == on_call(DEAD, raised, False)
