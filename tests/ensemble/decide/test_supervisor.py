"""Laws and OTP examples for ensemble.decide.supervisor: restart or not, restart intensity, restart plans, auto shutdown."""

from __future__ import annotations

import inspect
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import supervisor as order
from ensemble.decide.supervisor import Plan, add_restart, auto_shutdown, restart_needed, restart_plan, stop_order
from ensemble.decide.signal import is_shutdown

from .._hostile import Weird

SETTINGS = settings(max_examples=100, deadline=None)

STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one")
RESTARTS = ("permanent", "transient", "temporary")


class Str(str):
    """A str subclass: equal to "normal" but not exactly the string."""


special = st.sampled_from(["normal", "shutdown", "kill", "killed", "", "Normal"])
reasons = st.one_of(
    special,
    st.text(max_size=6),
    st.integers(),
    st.none(),
    st.tuples(special, st.integers()),
    st.tuples(special),
    st.tuples(special, special, special),
    st.text(max_size=4).map(RuntimeError),
    st.builds(Weird),
    st.sampled_from([Str("normal"), Str("shutdown")]),
    st.lists(special, max_size=2),
)


# -- restart_needed -----------------------------------------------------------------------------


@SETTINGS
@given(reasons)
def test_restart_needed_law(reason):
    """permanent always, temporary never, transient iff the exit is not orderly (signal.is_shutdown)."""
    assert True is restart_needed("permanent", reason)
    assert False is restart_needed("temporary", reason)
    assert (not is_shutdown(reason)) is restart_needed("transient", reason)


@pytest.mark.parametrize(
    "reason, transient",
    [
        ("normal", False),
        ("shutdown", False),
        (("shutdown", "bye"), False),
        (("shutdown", {"why": 1}), False),
        ("killed", True),
        ("kill", True),
        ("boom", True),
        (("shutdown",), True),
        (("shutdown", 1, 2), True),
        (["shutdown", 1], True),
        (Str("normal"), True),
        (ValueError("x"), True),
    ],
    ids=repr,
)
def test_restart_needed_table(reason, transient):
    """OTP's restart key: transient restarts only after another reason than normal, shutdown or {shutdown, T}."""
    assert (True, transient, False) == (
        restart_needed("permanent", reason),
        restart_needed("transient", reason),
        restart_needed("temporary", reason),
    )


@pytest.mark.parametrize("restart", ["intrinsic", "Permanent", None, Str("permanent"), Weird()], ids=repr)
def test_restart_needed_rejects_unknown_types(restart):
    """An unknown restart type is a programming error: ValueError."""
    with pytest.raises(ValueError):
        restart_needed(restart, "boom")


# -- add_restart -----------------------------------------------------------------------------


@st.composite
def histories(draw, floats=False):
    """(earlier restarts newest first, now, intensity, period)."""
    if floats:
        now = draw(st.floats(-1e6, 1e6))
        period = draw(st.floats(1e-3, 1e3))
        ages = draw(st.lists(st.floats(0, 2e3), max_size=8))
    else:
        now = draw(st.integers(-(10**6), 10**6))
        period = draw(st.integers(1, 100))
        ages = draw(st.lists(st.integers(0, 200), max_size=8))
    restarts = tuple(sorted((now - a for a in ages), reverse=True))
    intensity = draw(st.integers(0, 10))
    return restarts, now, intensity, period


@SETTINGS
@given(st.one_of(histories(), histories(floats=True)))
def test_add_restart_keeps_now_and_the_recent_ones(history):
    """The answer is now, then the earlier times at or after now - period, in order; ok iff at most intensity."""
    restarts, now, intensity, period = history
    verdict, kept = add_restart(restarts, now, intensity, period)
    recent = tuple(r for r in restarts if r >= now - period)
    assert (now,) + recent == kept
    assert ("ok" if len(kept) <= intensity else "terminate") == verdict


@SETTINGS
@given(st.one_of(histories(), histories(floats=True)))
def test_add_restart_bounds(history):
    """The answer is a tuple starting with now, at most one longer than before, nothing older than now - period."""
    restarts, now, intensity, period = history
    verdict, kept = add_restart(restarts, now, intensity, period)
    assert tuple is type(kept)
    assert now == kept[0]
    assert 1 <= len(kept) <= len(restarts) + 1
    assert all(r >= now - period for r in kept[1:])
    assert verdict in ("ok", "terminate")


@SETTINGS
@given(st.lists(st.integers(0, 30), max_size=12), st.integers(0, 4), st.integers(1, 20))
def test_terminate_iff_more_than_intensity_restarts_within_period(gaps, intensity, period):
    """Restarting at increasing times: terminate exactly when more than intensity restarts fall within period."""
    restarts: tuple = ()
    now = 0
    times = []
    for gap in gaps:
        now += gap
        times.append(now)
        verdict, restarts = add_restart(restarts, now, intensity, period)
        within = [t for t in times if t >= now - period]
        assert ("terminate" if len(within) > intensity else "ok") == verdict
        assert tuple(reversed(within)) == restarts


def test_add_restart_stops_at_the_first_old_time():
    """As OTP's lists:takewhile: the list is newest first, so the first time too old ends it."""
    assert ("ok", (10, 9)) == add_restart((9, 1, 8), 10, 5, 5)


def test_otp_intensity_examples():
    """OTP defaults (intensity 1, period 5): one restart is fine, a second within 5 s terminates, later it is fine."""
    verdict, r = add_restart((), 100, 1, 5)
    assert ("ok", (100,)) == (verdict, r)
    assert ("terminate", (103, 100)) == add_restart(r, 103, 1, 5)
    assert ("terminate", (105, 100)) == add_restart(r, 105, 1, 5)  # exactly period old still counts
    assert ("ok", (106,)) == add_restart(r, 106, 1, 5)
    assert ("terminate", (7,)) == add_restart((), 7, 0, 5)  # intensity 0: no restart at all
    assert ("ok", (0.5, 0.25)) == add_restart([0.25], 0.5, 2, 1)  # a list of earlier times works too


# -- restart_plan -------------------------------------------------------------------------------


@st.composite
def families(draw):
    """(children (id, restart, running) in start order, index of the failed child, which is not running)."""
    kinds = draw(st.lists(st.tuples(st.sampled_from(RESTARTS), st.booleans()), min_size=1, max_size=7))
    names = draw(st.lists(st.text(max_size=2), min_size=len(kinds), max_size=len(kinds), unique=True))
    ids = [name if i % 2 else i for i, name in enumerate(names)]  # ints and strs: never equal
    children = [(child_id, restart, running) for child_id, (restart, running) in zip(ids, kinds)]
    at = draw(st.integers(0, len(children) - 1))
    failed_id, restart, _ = children[at]
    children[at] = (failed_id, restart, False)
    return children, at


def affected_of(strategy, children, at):
    if strategy in ("one_for_one", "simple_one_for_one"):
        return [children[at]]
    if strategy == "one_for_all":
        return list(children)
    return list(children[at:])


@SETTINGS
@given(families())
def test_restart_plan_laws(family):
    """Any strategy: start within affected, in start order; stop: running siblings reversed; drop: temporaries."""
    children, at = family
    failed = children[at][0]
    position = {c[0]: i for i, c in enumerate(children)}
    running = {c[0] for c in children if c[2]}
    for strategy in STRATEGIES:
        plan = restart_plan(strategy, children, failed)
        affected = affected_of(strategy, children, at)
        siblings = [c for c in affected if c[0] != failed]

        assert set() == set(plan.start) - {c[0] for c in affected}
        assert failed not in plan.stop
        assert set() == set(plan.stop) - running
        assert sorted(plan.start, key=position.get) == list(plan.start)
        assert sorted(plan.stop, key=position.get, reverse=True) == list(plan.stop)
        assert [c[0] for c in siblings if c[1] == "temporary"] == list(plan.drop)
        assert set() == set(plan.start) & set(plan.drop)
        assert (children[at][1] != "temporary") == (failed in plan.start)
        # and nothing affected is forgotten
        assert [c[0] for c in siblings if c[2]][::-1] == list(plan.stop)
        assert [c[0] for c in affected if c[1] != "temporary"] == list(plan.start)


@SETTINGS
@given(families())
def test_each_strategy_touches_its_own_children(family):
    """one_for_one restarts the failed child alone; rest_for_one leaves earlier ones be; one_for_all touches all."""
    children, at = family
    failed_id, restart, _ = children[at]
    alone = Plan((), () if restart == "temporary" else (failed_id,), ())
    assert alone == restart_plan("one_for_one", children, failed_id)
    assert alone == restart_plan("simple_one_for_one", children, failed_id)

    rest = restart_plan("rest_for_one", children, failed_id)
    earlier = {c[0] for c in children[:at]}
    assert set() == earlier & (set(rest.stop) | set(rest.start) | set(rest.drop))

    everything = restart_plan("one_for_all", children, failed_id)
    everyone = {c[0] for c in children} - ({failed_id} if restart == "temporary" else set())
    assert everyone == set(everything.start) | set(everything.drop)
    assert {c[0] for c in children if c[2]} == set(everything.stop)


CHILDREN = [("a", "permanent", True), ("b", "permanent", False), ("c", "transient", True), ("d", "temporary", True)]


@pytest.mark.parametrize(
    "strategy, expected",
    [
        ("one_for_one", Plan((), ("b",), ())),
        ("simple_one_for_one", Plan((), ("b",), ())),
        ("one_for_all", Plan(("d", "c", "a"), ("a", "b", "c"), ("d",))),
        ("rest_for_one", Plan(("d", "c"), ("b", "c"), ("d",))),
    ],
)
def test_otp_strategy_examples(strategy, expected):
    """OTP's strategies when b of a, b, c, d (temporary) dies: b alone, all, or b and the rest; d is dropped."""
    assert expected == restart_plan(strategy, CHILDREN, "b")


def test_a_stopped_temporary_sibling_is_dropped_and_a_stopped_sibling_is_not_stopped():
    """A sibling without a process is not stopped but is restarted; a temporary one is dropped even if not running."""
    children = [("x", "temporary", False), ("y", "permanent", False), ("z", "transient", False)]
    assert Plan((), ("y", "z"), ("x",)) == restart_plan("one_for_all", children, "y")


def test_restart_plan_rejects_unknown_strategies_and_ids():
    """An unknown strategy or failed id is a programming error: ValueError."""
    with pytest.raises(ValueError):
        restart_plan("one_for_some", CHILDREN, "b")
    with pytest.raises(ValueError):
        restart_plan("one_for_one", CHILDREN, "zz")
    with pytest.raises(ValueError):
        restart_plan("one_for_one", [], "a")


def test_restart_plan_ids_compare_by_identity_or_equality():
    """Ids are found by identity or ==, and an id whose == raises is found by identity alone."""
    w = Weird()
    children = [(Weird(), "permanent", True), (w, "permanent", False), ((1, 2), "permanent", True)]
    plan = restart_plan("rest_for_one", children, w)
    assert ((1, 2),) == plan.stop
    assert w is plan.start[0]
    children = [("a", "permanent", True), ((1, 2), "transient", False)]
    assert Plan((), ((1, 2),), ()) == restart_plan("one_for_one", children, (1, 2))


def test_plan_is_a_value():
    """Plans compare by fields, hash alike when equal, print, pickle, match, and cannot change."""
    p = Plan(["c"], ["b", "c"], [])
    assert Plan(("c",), ("b", "c"), ()) == p
    assert Plan(("c",), ("b",), ()) != p
    assert (("c",), ("b", "c"), ()) == (p.stop, p.start, p.drop)
    assert hash(Plan(("c",), ("b", "c"), ())) == hash(p)
    assert hash(Plan(([1],), (), ())) == hash(Plan(([1],), (), ()))
    assert "Plan(stop=('c',), start=('b', 'c'), drop=())" == repr(p)
    assert p == pickle.loads(pickle.dumps(p))
    assert p != ("c", ("b", "c"), ())
    match p:
        case Plan(stop, start, drop):
            got = (stop, start, drop)
    assert (("c",), ("b", "c"), ()) == got
    with pytest.raises(AttributeError):
        p.stop = ()
    with pytest.raises(AttributeError):
        del p.start
    with pytest.raises(AttributeError):
        p.other = 1


# -- auto_shutdown --------------------------------------------------------------------------------


@pytest.mark.parametrize("exited", [True, False])
@pytest.mark.parametrize("others", [True, False])
def test_auto_shutdown_table(exited, others):
    """OTP's do_auto_shutdown: never no; any_significant iff significant; all_significant iff the last significant."""
    assert False is auto_shutdown("never", exited, others)
    assert exited is auto_shutdown("any_significant", exited, others)
    assert (exited and not others) is auto_shutdown("all_significant", exited, others)


def test_auto_shutdown_rejects_unknown_modes():
    """An unknown mode is a programming error: ValueError."""
    with pytest.raises(ValueError):
        auto_shutdown("always", True, False)


# -- stop_order ---------------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.one_of(st.integers(), st.text(max_size=2), st.builds(Weird)), max_size=10))
def test_stop_order_is_reverse_start_order(ids):
    """Children stop in reverse start order: a new list, the very ids."""
    stopped = stop_order(ids)
    assert list is type(stopped)
    assert len(ids) == len(stopped)
    assert all(a is b for a, b in zip(ids[::-1], stopped))
    assert ["c", "b", "a"] == stop_order(("a", "b", "c"))
    assert [3, 2, 1] == stop_order(iter([1, 2, 3]))


def test_every_export_exists_and_functions_have_docstrings():
    """Each name in __all__ exists; each public function and class states its contract."""
    for name in order.__all__:
        value = getattr(order, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert (value.__doc__ or "").strip(), name


def test_nan_and_infinite_times_do_not_raise():
    """add_restart is arithmetic only: odd times give an answer, never an exception."""
    assert "terminate" == add_restart((math.nan,), 1.0, 0, 5)[0]
    assert ("ok", (1.0,)) == add_restart((math.nan,), 1.0, 1, 5)
