"""Laws and Erlang examples for ensemble.decide.receive.scan."""

import copy
import pickle
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide.receive import NOMATCH, scan

SETTINGS = settings(max_examples=100, deadline=None)

# Matches may produce any value but NOMATCH, falsy ones included.
RESULTS = (None, False, 0, (), "", "yes")

messages = st.lists(st.integers(0, 9), max_size=12)
accepted = st.frozensets(st.integers(0, 9))
containers = st.sampled_from([list, deque])


class Recorder:
    """A deterministic matcher that records what it was called on."""

    def __init__(self, accept, shift=0):
        self.accept = accept
        self.shift = shift
        self.calls = []

    def result(self, m):
        return RESULTS[(m + self.shift) % len(RESULTS)]

    def __call__(self, m):
        self.calls.append(m)
        if m in self.accept:
            return self.result(m)
        return NOMATCH


def first_accepted(msgs, accept, start):
    return next((i for i in range(start, len(msgs)) if msgs[i] in accept), None)


@SETTINGS
@given(messages, accepted, st.integers(0, 14), containers, st.integers(0, 5))
def test_takes_the_first_accepted_at_or_after_start(msgs, accept, start, box, shift):
    matcher = Recorder(accept, shift)
    box_msgs = box(msgs)
    index, value = scan(box_msgs, matcher, start)
    expected = first_accepted(msgs, accept, start)
    assert expected == index
    if expected is None:
        assert len(msgs) == value
        assert msgs[start:] == matcher.calls
    else:
        assert matcher.result(msgs[index]) is value
        assert msgs[start : index + 1] == matcher.calls
    assert msgs == list(box_msgs)


@SETTINGS
@given(messages, accepted, st.integers(0, 14), containers)
def test_never_calls_before_start(msgs, accept, start, box):
    msgs = [("m", i, m) for i, m in enumerate(msgs)]
    seen = []

    def matcher(m):
        seen.append(m[1])
        return m[2] if m[2] in accept else NOMATCH

    scan(box(msgs), matcher, start)
    assert True is all(i >= start for i in seen)
    assert sorted(seen) == seen


@SETTINGS
@given(messages, st.integers(0, 14), containers)
def test_no_matcher_takes_the_message_at_start(msgs, start, box):
    expected = (start, msgs[start]) if start < len(msgs) else (None, len(msgs))
    assert expected == scan(box(msgs), None, start)


@SETTINGS
@given(messages, st.integers(0, 14), containers)
def test_matcher_accepting_everything_is_like_none(msgs, start, box):
    assert scan(box(msgs), None, start) == scan(box(msgs), lambda m: m, start)


@SETTINGS
@given(messages, messages, accepted, containers, st.integers(0, 5))
def test_save_pointer(old, new, accept, box, shift):
    # Earlier mail was all rejected; after new mail arrives, resuming from the
    # returned save pointer gives what a full rescan would give.
    old = [m for m in old if m not in accept]
    mailbox = box(old)
    first = Recorder(accept, shift)
    index, save = scan(mailbox, first, 0)
    assert (None, len(old)) == (index, save)
    mailbox.extend(new)
    resumed = Recorder(accept, shift)
    full = Recorder(accept, shift)
    assert scan(old + new, full, 0) == scan(mailbox, resumed, save)
    # the resumed scan never looked at the rejected ones again
    assert full.calls[len(old) :] == resumed.calls


@SETTINGS
@given(messages, accepted, containers)
def test_repeated_receive_drains_in_order(msgs, accept, box):
    # Taking (removing) each match and rescanning yields the accepted messages
    # in mailbox order and leaves the rejected ones, in order.
    mailbox = box(msgs)
    taken = []
    while True:
        index, _ = scan(mailbox, lambda m: m if m in accept else NOMATCH, 0)
        if index is None:
            break
        taken.append(mailbox[index])
        del mailbox[index]
    assert [m for m in msgs if m in accept] == taken
    assert [m for m in msgs if m not in accept] == list(mailbox)


# -- examples -------------------------------------------------------------------


def test_match_statement_is_the_pattern_language():
    ref = object()
    other = object()

    def matcher(m):
        match m:
            case ("reply", r, value) if r is ref:
                return value
            case _:
                return NOMATCH

    mailbox = deque([("reply", other, 1), "noise", ("reply", ref, None), ("reply", ref, 2)])
    assert (2, None) == scan(mailbox, matcher, 0)
    assert (3, 2) == scan(mailbox, matcher, 3)
    assert (None, 4) == scan(mailbox, matcher, 4)


def test_receive_ok_tuple():
    # receive {ok, X} -> X end, with mailbox [{other}, {ok, 1}, {ok, 2}]
    def matcher(m):
        match m:
            case ("ok", x):
                return x
            case _:
                return NOMATCH

    assert (1, 1) == scan(deque([("other",), ("ok", 1), ("ok", 2)]), matcher, 0)


def test_false_and_zero_are_matches():
    assert (0, False) == scan([1], lambda m: False, 0)
    assert (0, 0) == scan(deque([1]), lambda m: 0, 0)
    assert (0, None) == scan([1], lambda m: None, 0)


def test_empty_mailbox():
    assert (None, 0) == scan(deque(), lambda m: m, 0)
    assert (None, 0) == scan(deque(), None, 0)


def test_start_past_the_end_reports_length():
    assert (None, 2) == scan(deque([1, 2]), lambda m: m, 5)
    assert (None, 2) == scan(deque([1, 2]), None, 5)


def test_negative_start_raises():
    with pytest.raises(ValueError):
        scan([1], None, -1)
    with pytest.raises(ValueError):
        scan([1], lambda m: m, -1)


def test_matcher_exception_propagates_and_stops():
    calls = []

    def matcher(m):
        calls.append(m)
        if m == "bad":
            raise KeyError(m)
        return NOMATCH

    with pytest.raises(KeyError):
        scan(deque(["a", "bad", "c"]), matcher, 0)
    assert ["a", "bad"] == calls


def test_nomatch_is_a_singleton():
    assert "NOMATCH" == repr(NOMATCH)
    assert NOMATCH is type(NOMATCH)()
    assert NOMATCH is copy.copy(NOMATCH)
    assert NOMATCH is pickle.loads(pickle.dumps(NOMATCH))


@given(st.lists(st.integers(0, 9), max_size=30), st.integers(0, 29), st.lists(st.integers(10, 19), min_size=1, max_size=5))
def test_messages_appended_while_the_matcher_runs_are_scanned_too(msgs, at, arriving):
    """A sender on another thread may append while the matcher runs (a deque then refuses to go on
    iterating): the scan goes on from where it was, looks at each message once, and sees the new ones."""
    box = deque(msgs)
    seen = []
    pending = list(arriving)

    def matcher(m):
        seen.append(m)
        if len(seen) > at and pending:  # an arrival, mid-scan
            box.append(pending.pop(0))
        return m if m >= 10 else NOMATCH

    i, v = scan(box, matcher)
    first_new = len(msgs) if len(msgs) > at else None
    if first_new is None:  # no message to be scanning when arrivals could happen
        assert (i, v) == (None, len(msgs)) and seen == msgs
    else:
        assert (i, v) == (len(msgs), arriving[0])
        assert seen == msgs + [arriving[0]]


class _AppendsWhenReadFromTheRight(deque):
    """A mailbox a sender appends to just as the scan starts reading its unseen tail from the right."""

    def __init__(self, items, arriving):
        super().__init__(items)
        self.arriving = list(arriving)

    def __reversed__(self):
        if self.arriving:
            self.append(self.arriving.pop(0))
        return super().__reversed__()


@given(st.lists(st.integers(0, 9), min_size=4, max_size=40), st.integers(2, 3), st.lists(st.integers(10, 19), max_size=3))
def test_a_deep_save_pointer_reads_only_the_new_tail_even_when_an_append_moves_the_end(msgs, new, arriving):
    """The unseen tail of a deep mailbox is read from the right end; an append racing that read
    neither skips nor repeats a message: each is offered to the matcher once, in order."""
    start = len(msgs)
    box = _AppendsWhenReadFromTheRight(msgs + [5] * new, arriving)
    seen = []

    def matcher(m):
        seen.append(m)
        return m if m >= 10 else NOMATCH

    i, v = scan(box, matcher, start)
    if arriving:
        assert (i, v) == (start + new, arriving[0]) and seen == [5] * new + [arriving[0]]
    else:
        assert (i, v) == (None, start + new) and seen == [5] * new
