"""Laws for ensemble.decide.allow: what another node may run here."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import allow

# r"[a-z][a-z0-9_]{0,6}", built from characters (st.from_regex draws the same names at twice the cost)
idents = st.tuples(
    st.sampled_from(string.ascii_lowercase), st.text(string.ascii_lowercase + string.digits + "_", max_size=6)
).map("".join)
modules = st.lists(idents, min_size=1, max_size=3).map(".".join)
functions = st.lists(idents, min_size=1, max_size=2).map(".".join)


@settings(max_examples=300, deadline=None)
@given(modules, functions, st.lists(modules, max_size=3))
def test_a_module_entry_lets_in_its_own_functions_only(module, function, others):
    name = f"{module}:{function}"
    assert allow.allowed(allow.check_policy([module]), name)
    assert not allow.allowed(allow.check_policy(()), name)  # by default nothing
    listed = allow.check_policy(others)
    assert allow.allowed(listed, name) == (module in others)
    assert not allow.allowed(allow.check_policy([module + "x"]), name)  # not a prefix match
    assert not allow.allowed(allow.check_policy([module.split(".")[0] + ".zz"]), name)


@settings(max_examples=300, deadline=None)
@given(modules, functions, functions)
def test_a_function_entry_lets_in_that_function_only(module, function, other):
    policy = allow.check_policy([f"{module}:{function}"])
    assert allow.allowed(policy, f"{module}:{function}")
    assert allow.allowed(policy, f"{module}:{other}") == (other == function)


@given(st.text(max_size=40))
def test_any_text_is_a_name_or_refused_cleanly(text):
    try:
        module, function = allow.parse(text)
    except allow.BadFunctionName:
        assert not allow.allowed(lambda name: True, text)  # a predicate never sees a bad name
        return
    assert f"{module}:{function}" == text


def test_a_predicate_counts_only_when_it_answers_true():
    assert allow.allowed(allow.check_policy(lambda name: name.startswith("ok.")), "ok.m:f")
    assert not allow.allowed(allow.check_policy(lambda name: 1), "ok.m:f")  # truthy is not True
    assert not allow.allowed(allow.check_policy(lambda name: 1 / 0), "ok.m:f")


def test_bad_policies_and_names_are_refused():
    for bad in ["os", b"os", 3, [3], ["not a module"], ["m:f:g"]]:
        with pytest.raises((TypeError, allow.BadFunctionName)):
            allow.check_policy(bad)
    for bad in ["os", "os:", ":f", "os:system()", "os:__class__", "a b:c", None]:
        with pytest.raises(allow.BadFunctionName):
            allow.parse(bad)


@settings(max_examples=300, deadline=None)
@given(modules, functions)
def test_a_name_let_in_by_its_module_alone_is_held_to_the_modules_own_functions(module, function):
    """by_module_only: true exactly when a listed policy lets the name in through its module entry
    alone (an entry naming the function itself, or a predicate, takes the name as it is)."""
    name = f"{module}:{function}"
    assert allow.by_module_only(allow.check_policy([module]), name)
    assert not allow.by_module_only(allow.check_policy([module, name]), name)
    assert not allow.by_module_only(allow.check_policy([name]), name)
    assert not allow.by_module_only(allow.check_policy(lambda n: True), name)
