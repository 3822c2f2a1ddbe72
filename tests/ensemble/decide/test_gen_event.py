"""eventdecide: laws for the event manager's pure decisions.

The laws of interpret_handler_return are in test_gen_event.py (imported
through ensemble.gen_event, which re-exports this very function); here are
the laws of the decisions the manager used to make inline, over any value,
hostile ones included (tests/ensemble/_hostile.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble import gen_event
from ensemble.decide import gen_event as eventdecide
from ensemble.decide.values import same
from ensemble.decide.gen_event import (
    Bad,
    Ok,
    Refuse,
    cast_kind,
    find,
    init_answer,
    interpret_handler_return,
    owner_exit,
    owners_to_unlink,
    reported,
    swap_owner,
    swap_refused,
    terminate_arg,
)

from .._hostile import Weird, WeirdStr

SETTINGS = settings(max_examples=100, deadline=None)


class Pid:
    """A stand-in for the runtime's pid type: only ``type(x) is pid_type`` and identity are read."""


class SubPid(Pid):
    """Not exactly the pid type."""


class Str(str):
    """A str subclass equal to a tag but not exactly a str."""


class Inst(NamedTuple):
    """A handler entry as the manager holds it (only ``id`` and ``owner`` are read)."""

    id: Any
    owner: Any


TAGS = ["ok", "error", "notify", "EXIT", "normal", "stop", "swapped", "remove_handler", ""]
leaf = st.one_of(
    st.none(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from(TAGS),
    st.builds(Str, st.sampled_from(TAGS)),
    st.builds(Weird),
    st.builds(WeirdStr, st.sampled_from(["notify", "EXIT", "error", "normal"])),
    st.builds(Pid),
    st.builds(SubPid),
)
values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=8)
tagged = st.tuples(st.sampled_from(TAGS), st.lists(values, max_size=3)).map(lambda t: (t[0], *t[1]))
anything = st.one_of(values, tagged)
ids = st.one_of(st.integers(min_value=0, max_value=4), st.builds(Weird), st.sampled_from(["a", "b"]))
slots = st.lists(st.one_of(st.none(), st.builds(Inst, ids, st.none())), max_size=6)


def test_gen_event_re_exports_the_decisions():
    """ensemble.gen_event's return forms and interpret_handler_return are eventdecide's own objects."""
    for name in ["KINDS", "Ok", "Reply", "Remove", "Swap", "Refuse", "Bad", "interpret_handler_return"]:
        assert getattr(eventdecide, name) is getattr(gen_event, name), name
    for name in eventdecide.__all__:
        assert hasattr(eventdecide, name), name


@SETTINGS
@given(anything)
def test_law_init_answer_is_ok_or_an_error_with_the_reason(ret):
    """An add keeps init's Ok, and otherwise fails with the refusal's reason or the bad return; never raises."""
    got = init_answer(ret)
    out = interpret_handler_return("init", ret)
    if type(out) is Ok:
        assert type(got) is Ok and got.state is out.state and got.hibernate is out.hibernate
    else:
        assert type(out) in (Refuse, Bad)
        assert type(got) is tuple and 2 == len(got) and "error" == got[0]
        if type(out) is Refuse:
            assert got[1] is ret[1]
        else:
            assert "bad_return_value" == got[1][0] and got[1][1] is ret


@SETTINGS
@given(slots, ids)
def test_law_find_answers_the_first_live_entry_with_that_id(installed, handler_id):
    """find never raises; its index holds a live entry whose id is the same, and none before it does."""
    got = find(installed, handler_id)
    live = [i for i, inst in enumerate(installed) if inst is not None and same(inst.id, handler_id)]
    assert (live[0] if live else None) == got


def test_find_examples():
    w = Weird()
    hs = [None, Inst("a", None), Inst(w, None), Inst("a", None)]
    assert 1 == find(hs, "a")
    assert 2 == find(hs, w), "an id whose == raises still names itself"
    assert None is find(hs, Weird()), "and nothing else"
    assert None is find(hs, None)
    assert None is find([], "a")


@SETTINGS
@given(st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.integers(0, 4)))
def test_law_a_swap_is_refused_only_onto_another_handlers_id(old, taken):
    """Refused exactly when the new id names a handler that is not the one swapped out."""
    assert (taken is not None and taken != old) is swap_refused(old, taken)
    assert swap_refused(old, None) is False
    if old is not None:
        assert swap_refused(old, old) is False


@SETTINGS
@given(values, values)
def test_law_a_swapped_in_handler_keeps_the_old_owner_only_when_none_was_asked(requested, old_owner):
    """False keeps the old owner (None with no old handler); any other request is the owner, by identity."""
    assert swap_owner(False, old_owner) is old_owner
    if requested is not False:
        assert swap_owner(requested, old_owner) is requested


@SETTINGS
@given(anything)
def test_law_only_a_notify_pair_is_an_event(request):
    """A cast is an event exactly when it is ("notify", event) with the exact str tag; never raises."""
    expected = (
        type(request) is tuple and len(request) == 2 and type(request[0]) is str and request[0] == "notify"
    )
    assert ("event" if expected else "info") == cast_kind(request)


@SETTINGS
@given(anything)
def test_law_an_owner_exit_is_an_exit_tuple_from_exactly_a_pid(msg):
    """owner_exit answers (pid, reason), by identity, for ("EXIT", pid, reason) only; never raises."""
    got = owner_exit(msg, Pid)
    if type(msg) is tuple and len(msg) == 3 and type(msg[0]) is str and msg[0] == "EXIT" and type(msg[1]) is Pid:
        assert got[0] is msg[1] and got[1] is msg[2]
    else:
        assert got is None


def test_owner_exit_examples():
    p, r = Pid(), Weird()
    got = owner_exit(("EXIT", p, r), Pid)
    assert got[0] is p and got[1] is r
    assert None is owner_exit(("EXIT", SubPid(), r), Pid)
    assert None is owner_exit((Str("EXIT"), p, r), Pid)
    assert None is owner_exit((WeirdStr("EXIT"), p, r), Pid)
    assert None is owner_exit(("EXIT", p), Pid)


@SETTINGS
@given(anything)
def test_law_terminate_gets_stop_after_normal_else_stop_and_the_reason(reason):
    """The manager's "normal" stop gives "stop"; any other reason ("stop", reason), by identity; never raises."""
    got = terminate_arg(reason)
    if type(reason) is str and reason == "normal":
        assert "stop" == got
    else:
        assert type(got) is tuple and "stop" == got[0] and got[1] is reason


@SETTINGS
@given(anything)
def test_law_only_an_error_removal_is_reported(why):
    """A removal is reported as a crash exactly for ("error", ...) with the exact str tag; never raises."""
    expected = type(why) is tuple and len(why) > 0 and type(why[0]) is str and why[0] == "error"
    assert expected is reported(why)


def test_reported_examples():
    assert True is reported(("error", Weird()))
    assert False is reported("normal")
    assert False is reported("shutdown")
    assert False is reported(("swapped", "b", None))
    assert False is reported(())
    assert False is reported((Str("error"), 1))


owners = st.lists(st.one_of(st.builds(Pid), st.builds(SubPid), st.none(), st.builds(Weird)), min_size=1, max_size=4)


@SETTINGS
@given(owners, st.data())
def test_law_an_owner_is_unlinked_once_when_its_last_handler_went(pool, data):
    """Unlinked: each pid owner of ``before`` that is not the parent and holds nothing now, once, in order."""
    index = st.integers(0, len(pool) - 1)  # indices: sampled_from would hash the hostile values
    before = tuple(Inst(i, pool[data.draw(index)]) for i in range(data.draw(st.integers(0, 5))))
    kept = [pool[i] for i in data.draw(st.lists(index, max_size=4))]
    parent = data.draw(st.one_of(st.none(), index.map(lambda i: pool[i])))
    got = owners_to_unlink(before, kept, parent, Pid)
    expected: list = []
    for inst in before:
        o = inst.owner
        if type(o) is Pid and o is not parent and all(k is not o for k in kept) and all(x is not o for x in expected):
            expected.append(o)
    assert len(expected) == len(got) and all(a is b for a, b in zip(expected, got))
    assert [] == owners_to_unlink(list(before), [], None, Pid), "a state that is not a tuple holds no owners"
