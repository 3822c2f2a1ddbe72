"""Laws and OTP examples for ensemble.decide.childspec: supervisor flags, child specs, start returns, child operations."""

from __future__ import annotations

import inspect
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import childspec
from ensemble.decide.childspec import (
    AUTO_SHUTDOWNS,
    DEFAULT_FLAGS,
    IGNORED,
    RESTARTS,
    SPEC_KEYS,
    STRATEGIES,
    TYPES,
    Failed,
    Ignored,
    Started,
    check_child,
    check_flags,
    check_specs,
    may,
    shown_spec,
    start_result,
)

from .._hostile import Weird, WeirdInt, WeirdStr, WeirdTuple

SETTINGS = settings(max_examples=100, deadline=None)
FEW = settings(max_examples=30, deadline=None)  # laws over lists of specs: each example is costly to draw


class WeirdDict(dict):
    """A dict subclass whose reads raise."""

    def __getitem__(self, k):
        raise RuntimeError("[] on WeirdDict")

    def get(self, k, default=None):
        raise RuntimeError("get on WeirdDict")

    def items(self):
        raise RuntimeError("items on WeirdDict")

    def __contains__(self, k):
        raise RuntimeError("in on WeirdDict")


class Pid:
    """Stands for the runtime's pid: start_result knows it only through is_pid."""

    def __repr__(self):
        return f"<Pid {id(self):x}>"


def is_pid(x):
    return type(x).__name__ == "Pid"


def start_link():
    """A child start function (never called: the checks do not run it)."""


class Server:
    """A class is a callable start too."""


FIELDS = ["id", "start", "restart", "shutdown", "type", "significant", "modules",
          "strategy", "intensity", "period", "auto_shutdown"]  # fmt: skip
TAGS = list(STRATEGIES + RESTARTS + TYPES + AUTO_SHUTDOWNS) + ["brutal_kill", "infinity", "ok", "error", "ignore", ""]

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
    st.sampled_from([start_link, Server, print]),
)

terms = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(WeirdTuple),
        st.dictionaries(st.sampled_from(FIELDS), inner, max_size=6),
        st.dictionaries(st.sampled_from(FIELDS).map(WeirdStr), inner, max_size=2),
        st.dictionaries(st.sampled_from(FIELDS), inner, max_size=3).map(WeirdDict),
    ),
    max_leaves=6,
)

# -- valid values ---------------------------------------------------------------------------

ids = st.one_of(
    st.text(max_size=5),
    st.integers(),
    st.none(),
    st.tuples(st.text(max_size=2), st.integers()),
    st.lists(st.integers(), max_size=2),
    st.builds(Weird),
    st.just(math.nan),
)
callables = st.sampled_from([start_link, Server, print, lambda: None])
starts = st.one_of(
    callables,
    st.tuples(callables, st.lists(st.integers(), max_size=3).map(tuple)),
    st.tuples(callables, st.lists(st.integers(), max_size=3)),
)
shutdowns = st.one_of(
    st.integers(0, 10**6),
    st.floats(0, 1e6),
    st.sampled_from(["brutal_kill", "infinity"]),
)
good_strategies = st.sampled_from(STRATEGIES)
good_intensities = st.integers(0, 10**6)
good_periods = st.one_of(st.integers(1, 10**6), st.floats(1e-6, 1e6))
good_autos = st.sampled_from(AUTO_SHUTDOWNS)

valid_specs = st.fixed_dictionaries(
    {"id": ids, "start": starts},
    optional={
        "restart": st.sampled_from(RESTARTS),
        "type": st.sampled_from(TYPES),
        "shutdown": shutdowns,
        "significant": st.booleans(),
        "modules": atoms,
        "nonsense": atoms,
    },
)

valid_flags = st.fixed_dictionaries(
    {},
    optional={
        "strategy": good_strategies,
        "intensity": good_intensities,
        "period": good_periods,
        "auto_shutdown": good_autos,
        "nonsense": atoms,
    },
)

# -- faults, in the order they are checked ------------------------------------------------------

bad_starts = st.one_of(
    st.sampled_from([1, "start_link", None, True, (start_link,), (start_link, 1), (start_link, (), 3),
                     [start_link, ()], (1, ()), ("start_link", []), (start_link, {}), (start_link, "ab")]),
    st.builds(Weird),
    st.just(WeirdTuple((start_link, ()))),
)  # fmt: skip
bad_restarts = st.one_of(
    st.sampled_from(["Permanent", "transient ", "intrinsic", None, 1, True, ("permanent",)]),
    st.sampled_from(RESTARTS).map(WeirdStr),
    st.builds(Weird),
)
bad_types = st.one_of(
    st.sampled_from(["Worker", "sup", None, 0, ("worker",)]),
    st.sampled_from(TYPES).map(WeirdStr),
    st.builds(Weird),
)
bad_shutdowns = st.one_of(
    st.integers(max_value=-1),
    st.floats(max_value=-1e-9),
    st.sampled_from([math.nan, math.inf, -math.inf, True, False, "5", None, "kill", "brutal-kill", (5,)]),
    st.sampled_from(["brutal_kill", "infinity"]).map(WeirdStr),
    st.integers(0, 5).map(WeirdInt),
    st.builds(Weird),
)
bad_significants = st.one_of(
    st.sampled_from([0, 1, None, "true", "false", (True,)]),
    st.builds(Weird),
)


def _delete(key, reason):
    def apply(spec, _value):
        spec.pop(key, None)
        return reason

    return apply


def _set(key, tag):
    def apply(spec, value):
        spec[key] = value
        return (tag, value)

    return apply


# (rank, strategy of bad values, how to put it into a spec and the reason it must give)
CHILD_FAULTS = [
    (st.none(), _delete("id", "missing_id")),
    (st.none(), _delete("start", "missing_start")),
    (bad_starts, _set("start", "invalid_mfa")),
    (bad_restarts, _set("restart", "invalid_restart_type")),
    (bad_types, _set("type", "invalid_child_type")),
    (bad_shutdowns, _set("shutdown", "invalid_shutdown")),
    (bad_significants, _set("significant", "invalid_significant")),
]

FLAG_FAULTS = [
    (st.one_of(st.sampled_from(["one-for-one", "One_for_one", "", None, 1]), good_strategies.map(WeirdStr)),
     "strategy", "invalid_strategy"),
    (st.one_of(st.integers(max_value=-1), st.sampled_from([True, False, 1.0, 0.0, "1", None, math.inf, math.nan]),
               st.integers(0, 3).map(WeirdInt)), "intensity", "invalid_intensity"),
    (st.one_of(st.integers(max_value=0), st.floats(max_value=0.0), st.sampled_from(
        [True, False, "5", None, math.inf, math.nan, -0.0]), st.integers(1, 3).map(WeirdInt)), "period",
     "invalid_period"),
    (st.one_of(st.sampled_from(["Never", "any-significant", "always", None, False]), good_autos.map(WeirdStr)),
     "auto_shutdown", "invalid_auto_shutdown"),
]  # fmt: skip


def expected_full(spec):
    """The full spec check_child must answer for a valid spec: defaults filled, unknown keys gone."""
    kind = spec.get("type", "worker")
    return {
        "id": spec["id"],
        "start": spec["start"],
        "restart": spec.get("restart", "permanent"),
        "shutdown": spec.get("shutdown", "infinity" if kind == "supervisor" else 5),
        "type": kind,
        "significant": spec.get("significant", False),
    }


def full_flags(**kw):
    return {**DEFAULT_FLAGS, **kw}


# -- check_flags ------------------------------------------------------------------------------------------


@SETTINGS
@given(terms)
def test_check_flags_is_total(flags):
    """check_flags never raises: it answers ("ok", dict) or ("error", reason) for any value."""
    answer = check_flags(flags)
    assert tuple is type(answer)
    assert 2 == len(answer)
    assert answer[0] in ("ok", "error")
    if "ok" == answer[0]:
        assert set(DEFAULT_FLAGS) == set(answer[1])


@SETTINGS
@given(valid_flags)
def test_valid_flags_are_filled_with_defaults_and_round_trip(flags):
    """Good flags answer the four keys, given values kept, the rest OTP's defaults; the answer checks as itself."""
    expected = {k: flags.get(k, DEFAULT_FLAGS[k]) for k in DEFAULT_FLAGS}
    answer = check_flags(flags)
    assert ("ok", expected) == answer
    assert answer[1] is not flags
    assert ("ok", expected) == check_flags(answer[1])


def test_empty_flags_are_the_defaults_in_a_new_dict():
    """check_flags({}) answers OTP's defaults one_for_one, 1, 5, never, in a dict of its own."""
    snapshot = dict(DEFAULT_FLAGS)
    answer = check_flags({})
    assert ("ok", {"strategy": "one_for_one", "intensity": 1, "period": 5, "auto_shutdown": "never"}) == answer
    assert answer[1] is not DEFAULT_FLAGS
    answer[1]["intensity"] = 99
    assert snapshot == DEFAULT_FLAGS


@SETTINGS
@given(st.data(), valid_flags, st.sets(st.integers(0, len(FLAG_FAULTS) - 1), min_size=1))
def test_flag_faults_answer_the_first_in_check_order(data, flags, which):
    """With faults in several flags, the reason is the earliest of strategy, intensity, period, auto_shutdown."""
    flags = dict(flags)
    reasons = {}
    for i in sorted(which):
        values, key, tag = FLAG_FAULTS[i]
        value = data.draw(values)
        flags[key] = value
        reasons[i] = (tag, value)
    assert ("error", reasons[min(which)]) == check_flags(flags)


@pytest.mark.parametrize("flags", [None, [], ("one_for_one", 1, 5), "one_for_one", 5, Weird()], ids=repr)
def test_non_dict_flags_are_invalid(flags):
    """Flags that are no dict are ("invalid_flags", flags) (OTP's old tuple form is not taken)."""
    answer = check_flags(flags)
    assert ("error", ("invalid_flags", flags)) == answer
    assert flags is answer[1][1]


@pytest.mark.parametrize(
    "flags, reason",
    [
        ({"strategy": "one_for_none"}, ("invalid_strategy", "one_for_none")),
        ({"intensity": -1}, ("invalid_intensity", -1)),
        ({"intensity": True}, ("invalid_intensity", True)),
        ({"intensity": 1.0}, ("invalid_intensity", 1.0)),
        ({"period": 0}, ("invalid_period", 0)),
        ({"period": -5}, ("invalid_period", -5)),
        ({"period": True}, ("invalid_period", True)),
        ({"auto_shutdown": "sometimes"}, ("invalid_auto_shutdown", "sometimes")),
    ],
    ids=repr,
)
def test_flag_errors(flags, reason):
    """Each bad flag gives OTP's reason with the bad value; a bool is neither an intensity nor a period."""
    assert ("error", reason) == check_flags(flags)


def test_otp_design_principles_flags():
    """OTP's example #{strategy => one_for_all, intensity => 1, period => 5} fills in auto_shutdown never."""
    assert ("ok", full_flags(strategy="one_for_all")) == check_flags(
        {"strategy": "one_for_all", "intensity": 1, "period": 5}
    )


def test_unknown_flag_keys_are_ignored():
    """An unknown key, or a key that is no exact str, is ignored and not kept in the answer."""
    assert ("ok", full_flags(intensity=3)) == check_flags({"intensity": 3, "speed": "fast", 1: 2})
    assert ("ok", dict(DEFAULT_FLAGS)) == check_flags({WeirdStr("intensity"): -1})


def test_a_fractional_period_is_seconds():
    """A float period is seconds (OTP wants an integer); zero, NaN and infinity are not periods."""
    assert ("ok", full_flags(period=0.5)) == check_flags({"period": 0.5})
    for p in (0.0, math.nan, math.inf):
        assert "invalid_period" == check_flags({"period": p})[1][0]


# -- check_child ------------------------------------------------------------------------------------------


@SETTINGS
@given(terms)
def test_check_child_is_total(spec):
    """check_child never raises: it answers ("ok", full spec) or ("error", reason) for any value."""
    answer = check_child(spec)
    assert tuple is type(answer)
    assert 2 == len(answer)
    assert answer[0] in ("ok", "error")
    if "ok" == answer[0]:
        assert SPEC_KEYS == tuple(answer[1])


@SETTINGS
@given(valid_specs)
def test_valid_specs_get_their_defaults_and_round_trip(spec):
    """A good spec answers the six keys (given values, the very start, else OTP's defaults); that checks as itself."""
    answer = check_child(spec)
    assert ("ok", expected_full(spec)) == answer
    full = answer[1]
    assert (spec["start"], spec["id"]) == (full["start"], full["id"])
    assert (True, True) == (spec["start"] is full["start"], spec["id"] is full["id"])
    again = check_child(full)
    assert ("ok", full) == again
    assert again[1] is not full


@SETTINGS
@given(st.data(), valid_specs, st.sets(st.integers(0, len(CHILD_FAULTS) - 1), min_size=1))
def test_child_faults_answer_the_first_in_check_order(data, spec, which):
    """With several faults, the reason is the earliest of id, start, mfa, restart, type, shutdown, significant."""
    spec = dict(spec)
    reasons = {}
    for i in sorted(which, reverse=True):  # a later fault must not undo an earlier one (set start, then drop it)
        values, apply = CHILD_FAULTS[i]
        reasons[i] = apply(spec, data.draw(values))
    assert ("error", reasons[min(which)]) == check_child(spec)


@pytest.mark.parametrize("spec", [None, [], ("ch3", start_link), "ch3", 1, Weird(), WeirdTuple()], ids=repr)
def test_non_dict_spec_is_invalid(spec):
    """A spec that is no dict is ("invalid_child_spec", spec), the very value."""
    answer = check_child(spec)
    assert ("error", ("invalid_child_spec", spec)) == answer
    assert spec is answer[1][1]


def test_otp_docs_child_spec():
    """OTP's ch3 spec: given keys kept, modules dropped (Python has no code replacement)."""
    spec = {"id": "ch3", "start": (start_link, []), "restart": "permanent", "shutdown": "brutal_kill",
            "type": "worker", "modules": ["ch3"]}  # fmt: skip
    expected = {"id": "ch3", "start": (start_link, []), "restart": "permanent", "shutdown": "brutal_kill",
                "type": "worker", "significant": False}  # fmt: skip
    assert ("ok", expected) == check_child(spec)


def test_shutdown_defaults_by_type():
    """Shutdown defaults to 5 seconds for a worker and to "infinity" for a supervisor (OTP: 5000 ms / infinity)."""
    worker = check_child({"id": "w", "start": start_link})[1]
    sup = check_child({"id": "s", "start": start_link, "type": "supervisor"})[1]
    assert (5, "worker", "permanent", False) == (worker["shutdown"], worker["type"], worker["restart"],
                                                  worker["significant"])  # fmt: skip
    assert ("infinity", "supervisor") == (sup["shutdown"], sup["type"])
    assert 0 == check_child({"id": "s", "start": start_link, "type": "supervisor", "shutdown": 0})[1]["shutdown"]


def test_missing_keys():
    """A spec without id is "missing_id" (even without start); with id but no start, "missing_start"."""
    assert ("error", "missing_id") == check_child({})
    assert ("error", "missing_id") == check_child({"start": start_link})
    assert ("error", "missing_start") == check_child({"id": "a"})
    assert ("ok", expected_full({"id": None, "start": start_link})) == check_child({"id": None, "start": start_link})


@pytest.mark.parametrize(
    "start",
    [start_link, Server, print, (start_link, ()), (start_link, [1, 2]), (Server, ("a",))],
    ids=repr,
)
def test_good_starts(start):
    """A start is a callable, or (callable, args) with args a tuple or list."""
    answer = check_child({"id": 1, "start": start})
    assert "ok" == answer[0]
    assert start is answer[1]["start"]


@pytest.mark.parametrize(
    "start",
    [1, "start_link", None, (start_link,), (start_link, 1), (start_link, (), {}), [start_link, ()], ((), ())],
    ids=repr,
)
def test_bad_starts(start):
    """Anything else is ("invalid_mfa", start)."""
    assert ("error", ("invalid_mfa", start)) == check_child({"id": 1, "start": start})


@pytest.mark.parametrize("shutdown", [0, 5, 0.25, 10**9, "brutal_kill", "infinity"], ids=repr)
def test_good_shutdowns(shutdown):
    """Shutdown is seconds >= 0, "brutal_kill" or "infinity"."""
    assert shutdown == check_child({"id": 1, "start": start_link, "shutdown": shutdown})[1]["shutdown"]


@pytest.mark.parametrize("shutdown", [-1, -0.5, math.nan, math.inf, True, False, "5", None, "kill"], ids=repr)
def test_bad_shutdowns(shutdown):
    """A negative, non-finite or non-numeric shutdown, or a bool, is ("invalid_shutdown", s)."""
    answer = check_child({"id": 1, "start": start_link, "shutdown": shutdown})
    assert ("error", "invalid_shutdown") == (answer[0], answer[1][0])
    assert shutdown is answer[1][1]


def test_present_none_is_not_a_default():
    """A key given as None is checked as None, not taken as absent."""
    assert ("error", ("invalid_restart_type", None)) == check_child({"id": 1, "start": start_link, "restart": None})
    assert ("error", ("invalid_significant", None)) == check_child(
        {"id": 1, "start": start_link, "significant": None}
    )


def test_only_exact_str_keys_are_read():
    """A key that is a str subclass is not the key: its spec misses the id."""
    assert ("error", "missing_id") == check_child({WeirdStr("id"): 1, "start": start_link})


def test_weird_dict_subclass_is_read_as_a_dict():
    """A dict subclass is a spec; its overridden reads are never used."""
    spec = WeirdDict({"id": "a", "start": start_link})
    assert ("ok", expected_full({"id": "a", "start": start_link})) == check_child(spec)


# -- check_specs -------------------------------------------------------------------------------------------

unique_valid_specs = st.lists(valid_specs, max_size=4, unique_by=lambda s: repr(s["id"])).map(
    lambda specs: [{**s, "id": (i, s["id"])} for i, s in enumerate(specs)]
)
any_flags = st.builds(
    lambda s, a: full_flags(strategy=s, auto_shutdown=a),
    st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"]),
    st.sampled_from(["any_significant", "all_significant"]),
)


def allowed(spec):
    """The spec with its significance made legal under any auto_shutdown but never."""
    if spec.get("significant") and spec.get("restart", "permanent") == "permanent":
        return {**spec, "restart": "transient"}
    return spec


@SETTINGS
@given(st.one_of(terms, st.lists(terms, max_size=4)), st.sampled_from(STRATEGIES), st.sampled_from(AUTO_SHUTDOWNS))
def test_check_specs_is_total(specs, strategy, auto):
    """check_specs never raises for any value or list of values and any full flags."""
    answer = check_specs(specs, full_flags(strategy=strategy, auto_shutdown=auto))
    assert tuple is type(answer)
    assert answer[0] in ("ok", "error")


@FEW
@given(unique_valid_specs, any_flags, st.booleans())
def test_good_specs_answer_their_full_specs_in_order(specs, flags, as_tuple):
    """Good specs with distinct ids answer [check_child(s) ...] in the given order, as a list."""
    specs = [allowed(s) for s in specs]
    given_specs = tuple(specs) if as_tuple else specs
    assert ("ok", [expected_full(s) for s in specs]) == check_specs(given_specs, flags)


@FEW
@given(unique_valid_specs, any_flags, st.data())
def test_the_first_bad_child_wins(specs, flags, data):
    """The error is the first bad child's, in the given order."""
    specs = [allowed(s) for s in specs]
    at = data.draw(st.integers(0, len(specs)))
    values, apply = data.draw(st.sampled_from(CHILD_FAULTS))
    bad = dict(data.draw(valid_specs))
    reason = apply(bad, data.draw(values))
    specs = specs[:at] + [bad] + specs[at:] + [{"start": start_link}]  # a later missing_id loses
    assert ("error", reason) == check_specs(specs, flags)


@FEW
@given(valid_specs, st.sampled_from(STRATEGIES[:3]))
def test_significant_under_never_is_a_bad_combination(spec, strategy):
    """A significant child under auto_shutdown never is a bad combination, whatever its restart type."""
    spec = {**spec, "significant": True}
    expected = ("error", ("bad_combination", (("auto_shutdown", "never"), ("significant", True))))
    assert expected == check_specs([spec], full_flags(strategy=strategy))


@FEW
@given(valid_specs, good_autos.filter(lambda a: a != "never"))
def test_permanent_significant_is_a_bad_combination(spec, auto):
    """A permanent significant child is a bad combination under any_significant and all_significant."""
    spec = {**spec, "significant": True, "restart": "permanent"}
    expected = ("error", ("bad_combination", (("restart", "permanent"), ("significant", True))))
    assert expected == check_specs([spec], full_flags(auto_shutdown=auto))


@FEW
@given(unique_valid_specs.filter(lambda s: len(s) > 0), any_flags, st.data())
def test_a_repeated_id_is_a_duplicate_child_name(specs, flags, data):
    """A second spec with an id already seen is ("duplicate_child_name", id)."""
    specs = [allowed(s) for s in specs]
    first = data.draw(st.sampled_from(specs))
    twin = {**data.draw(valid_specs), "id": first["id"], "significant": False}
    specs = specs + [twin]
    assert ("error", ("duplicate_child_name", first["id"])) == check_specs(specs, flags)


@FEW
@given(st.lists(valid_specs, max_size=4))
def test_simple_one_for_one_wants_exactly_one_spec(specs):
    """Under simple_one_for_one, specs other than exactly one are ("bad_start_spec", specs), the very value."""
    specs = [{**s, "id": i, "significant": False} for i, s in enumerate(specs)]
    answer = check_specs(specs, full_flags(strategy="simple_one_for_one"))
    if 1 == len(specs):
        assert ("ok", [expected_full(specs[0])]) == answer
    else:
        assert ("error", ("bad_start_spec", specs)) == answer
        assert specs is answer[1][1]


@pytest.mark.parametrize("specs", [None, {"id": 1, "start": start_link}, "specs", 3, Weird(), WeirdTuple()], ids=repr)
def test_specs_must_be_a_list_or_tuple(specs):
    """Specs that are no list or tuple are ("invalid_child_spec", specs)."""
    assert ("error", ("invalid_child_spec", specs)) == check_specs(specs, dict(DEFAULT_FLAGS))


def test_checks_go_child_by_child():
    """As OTP's check_startspec: a first child's bad combination wins over a later child's bad field."""
    flags = dict(DEFAULT_FLAGS)
    specs = [{"id": "a", "start": start_link, "restart": "transient", "significant": True},
             {"id": "b", "start": 1}]  # fmt: skip
    assert "bad_combination" == check_specs(specs, flags)[1][0]
    specs = [{"id": "a", "start": start_link}, {"id": "a", "start": 1}]
    assert ("error", ("invalid_mfa", 1)) == check_specs(specs, flags)


def test_bad_start_spec_is_checked_after_the_children():
    """A bad child under simple_one_for_one is reported before the spec count."""
    flags = full_flags(strategy="simple_one_for_one")
    assert ("error", "missing_id") == check_specs([{}, {}], flags)
    assert ("error", ("bad_start_spec", [])) == check_specs([], flags)


def test_duplicates_compare_by_value_and_identity():
    """Ids are the same when equal or identical (a NaN id twice is a duplicate; a Weird id never equals another)."""
    flags = dict(DEFAULT_FLAGS)
    nan, weird = math.nan, Weird()
    assert ("error", ("duplicate_child_name", ("x", 1))) == check_specs(
        [{"id": ("x", 1), "start": print}, {"id": ("x", 1), "start": print}], flags
    )
    assert "duplicate_child_name" == check_specs([{"id": nan, "start": print}, {"id": nan, "start": print}],
                                                 flags)[1][0]  # fmt: skip
    assert "duplicate_child_name" == check_specs([{"id": weird, "start": print}, {"id": weird, "start": print}],
                                                 flags)[1][0]  # fmt: skip
    assert "ok" == check_specs([{"id": Weird(), "start": print}, {"id": Weird(), "start": print}], flags)[0]
    assert "ok" == check_specs([{"id": [1], "start": print}, {"id": [2], "start": print}], flags)[0]


def test_otp_significant_examples():
    """OTP: a transient or temporary significant child is fine once auto_shutdown is set."""
    for auto in ("any_significant", "all_significant"):
        for restart in ("transient", "temporary"):
            spec = {"id": "job", "start": start_link, "restart": restart, "significant": True}
            assert "ok" == check_specs([spec], full_flags(auto_shutdown=auto))[0]


# -- shown_spec -----------------------------------------------------------------------------------------


@FEW
@given(valid_specs)
def test_shown_spec_is_the_full_spec_in_a_new_dict(spec):
    """get_childspec's answer has the six keys in order, equals the full spec, and checks as itself."""
    full = check_child(spec)[1]
    shown = shown_spec(full)
    assert SPEC_KEYS == tuple(shown)
    assert full == shown
    assert shown is not full
    assert ("ok", full) == check_child(shown)


def test_shown_spec_drops_anything_else():
    """Runtime bookkeeping kept beside the spec is not shown."""
    full = check_child({"id": "a", "start": print})[1]
    assert full == shown_spec({**full, "pid": Pid(), "state": "running"})


# -- start_result -------------------------------------------------------------------------------------------


@SETTINGS
@given(terms)
def test_start_result_is_total(ret):
    """start_result never raises and answers Started, IGNORED or Failed; Failed of a non-error is the very value."""
    answer = start_result(ret, is_pid)
    assert type(answer) in (Started, Ignored, Failed)
    if type(answer) is Failed:
        is_error = type(ret) is tuple and len(ret) == 2 and type(ret[0]) is str and "error" == ret[0]
        assert (ret[1] if is_error else ret) is answer.reason


def test_start_result_examples():
    """OTP's do_start_child_i: a pid or ("ok", pid) starts; None or "ignore" ignores; the rest fails."""
    p = Pid()
    assert Started(p) == start_result(p, is_pid)
    assert Started(p) == start_result(("ok", p), is_pid)
    assert IGNORED is start_result(None, is_pid)
    assert IGNORED is start_result("ignore", is_pid)
    assert Failed("boom") == start_result(("error", "boom"), is_pid)
    for other in [("ok", "not a pid"), ("ok", p, "extra"), "ok", ("ignore",), ["ok", p], 0, False, (p,)]:
        answer = start_result(other, is_pid)
        assert Failed(other) == answer
        assert other is answer.reason


def test_start_result_asks_is_pid():
    """What is a pid is is_pid's say alone."""
    assert Started(42) == start_result(("ok", 42), lambda x: x == 42)
    assert Failed(Pid) == start_result(Pid, lambda x: False)
    assert IGNORED is start_result(None, lambda x: True)
    assert Failed(("error", None)) != start_result(("error", None), is_pid)
    assert Failed(None) == start_result(("error", None), is_pid)


def test_start_answers_are_values():
    """Answers compare by type and field, hash alike when equal, print as built, pickle, and match."""
    p = Pid()
    assert Started(p) == Started(p)
    assert Started(1) != Failed(1)
    assert Failed(("a", 1)) == Failed(("a", 1))
    assert hash(Failed(("a", 1))) == hash(Failed(("a", 1)))
    assert hash(Failed([1])) == hash(Failed([1]))
    w = Weird()
    assert Failed(w) == Failed(w)
    assert Failed(w) != Failed(Weird())
    assert "Failed('boom')" == repr(Failed("boom"))
    assert "Started(1)" == repr(Started(1))
    assert "IGNORED" == repr(IGNORED)
    assert IGNORED is Ignored()
    assert IGNORED is pickle.loads(pickle.dumps(IGNORED))
    assert Failed(("a", 1)) == pickle.loads(pickle.dumps(Failed(("a", 1))))
    match start_result(("error", "why"), is_pid):
        case Failed(reason):
            got = reason
        case _:
            got = None
    assert "why" == got


def test_start_answers_are_immutable():
    """No field can be set or removed, and no new one added."""
    f = Failed("x")
    with pytest.raises(AttributeError):
        f.reason = "y"
    with pytest.raises(AttributeError):
        del f.reason
    with pytest.raises(AttributeError):
        Started(1).other = 2
    with pytest.raises(AttributeError):
        IGNORED.x = 1
    assert "x" == f.reason


# -- may -------------------------------------------------------------------------------------------


def test_may_table():
    """OTP's handle_call: simple_one_for_one first, then not_found, running, restarting; only a stopped child may."""
    for op in ("restart_child", "delete_child"):
        for strategy in STRATEGIES:
            for state in (None, "running", "restarting", "stopped"):
                child = None if state is None else {"state": state, "id": "c"}
                if strategy == "simple_one_for_one":
                    expected = "simple_one_for_one"
                elif state is None:
                    expected = "not_found"
                elif state == "stopped":
                    expected = None
                else:
                    expected = state
                assert (op, strategy, state, expected) == (op, strategy, state, may(op, child, strategy))


def test_may_rejects_unknown_operations_and_states():
    """An unknown operation or child state is a programming error: ValueError."""
    with pytest.raises(ValueError):
        may("terminate_child", None, "one_for_one")
    with pytest.raises(ValueError):
        may("restart_child", {"state": "dead"}, "one_for_one")


# -- purity -------------------------------------------------------------------------------------------


def test_every_export_exists_and_functions_have_docstrings():
    """Each name in __all__ exists; each public function and class states its contract."""
    for name in childspec.__all__:
        value = getattr(childspec, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert (value.__doc__ or "").strip(), name
