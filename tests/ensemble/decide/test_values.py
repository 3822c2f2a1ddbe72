"""_values.same: the one guarded equality, its laws, and that the former copies are gone."""

from __future__ import annotations

import ast
import pathlib

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide.values import same

from .._hostile import Weird, WeirdInt, WeirdStr

SETTINGS = settings(max_examples=100, deadline=None)
ROOT = pathlib.Path(__file__).resolve().parents[3]


class Truthy:
    """An object whose == answers a non-bool that is truthy."""

    def __eq__(self, other):
        return 1

    __hash__ = object.__hash__


class NoTruth:
    """An object whose == answers something with no truth value (numpy-like)."""

    def __eq__(self, other):
        return Weird()

    __hash__ = object.__hash__


plain = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.floats(allow_nan=True))
hostile = st.one_of(st.builds(Weird), st.builds(WeirdStr, st.text(max_size=2)), st.builds(WeirdInt, st.integers()),
                    st.builds(Truthy), st.builds(NoTruth))
anything = st.one_of(plain, hostile, st.lists(plain, max_size=3).map(tuple))


@SETTINGS
@given(anything, anything)
def test_law_same_never_raises_and_answers_a_bool(a, b):
    """Any two values: a bool, no exception."""
    assert type(same(a, b)) is bool


@SETTINGS
@given(anything)
def test_law_same_is_reflexive_by_identity(a):
    """Every value is the same as itself, NaN and hostile ones included."""
    assert same(a, a) is True


@SETTINGS
@given(plain, plain)
def test_law_same_is_equality_for_plain_values(a, b):
    """For values whose == behaves, same is ``a is b or a == b``."""
    assert (a is b or a == b) is same(a, b)


def test_same_examples():
    assert same(Truthy(), 0) is True, "a truthy non-bool answer counts as its truth value"
    assert same(NoTruth(), 0) is False, "an answer with no truth value means not the same"
    assert same(Weird(), Weird()) is False
    assert same(float("nan"), float("nan")) is False
    assert same(1, 1.0) is True


def _guarded_eq_copies(path: pathlib.Path) -> list:
    """Functions of ``path`` that are a copy of same: a ``try`` whose body answers ``a == b`` (bool()'d or not)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef) or len(node.args.args) != 2:
            continue
        for t in ast.walk(node):
            if isinstance(t, ast.Try) and any(isinstance(h.type, ast.Name) and h.type.id == "Exception"
                                               for h in t.handlers):
                compares = [c for s in t.body for c in ast.walk(s)
                            if isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.Eq)
                            and all(isinstance(x, ast.Name) for x in [c.left, *c.comparators])]
                if compares:
                    found.append(node.name)
                    break
    return found


def test_the_guarded_equality_is_defined_once_in_the_three_packages():
    """No module of ensemble/, constellation/ or fusee/ holds its own copy of same: fusee.replay's
    name check (type, then same) and constellation's error equality call it."""
    copies = {}
    for package in ["ensemble", "constellation", "fusee"]:
        for path in sorted((ROOT / package).rglob("*.py")):
            names = _guarded_eq_copies(path)
            if names:
                copies[str(path.relative_to(ROOT))] = names
    assert {"ensemble/decide/values.py": ["same"]} == copies


def test_the_copy_finder_finds_a_copy(tmp_path):
    """The finder above can fail: a hand-written guarded == is reported by its function's name."""
    path = tmp_path / "m.py"
    path.write_text("def eq(a, b):\n    try:\n        return bool(a == b)\n    except Exception:\n        return False\n")
    assert ["eq"] == _guarded_eq_copies(path)
