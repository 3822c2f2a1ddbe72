"""ensemble.dist.wire_types: registered types and constants, and functions, by name."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ensemble import Badarg
from ensemble.dist import functions, wire_types
from ensemble.dist.wire_types import WireFunction, WireStruct, named_in, named_out

from . import _os_fns


@dataclass(frozen=True)
class Point:
    x: int
    y: int


class Opaque:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return type(other) is Opaque and (self.a, self.b) == (other.a, other.b)


wire_types.register(Point)
wire_types.register(Opaque, "tests:Opaque", to_fields=lambda o: (o.a, o.b))
SENTINEL = wire_types.register_constant(object(), "tests:SENTINEL")


def _allow_all(name):
    return functions.resolve(name)


def _allow_none(name):
    return None


def _round_trip(value, resolve=_allow_all):
    name, fields = named_out(value)
    return named_in(name, fields, resolve)


def test_a_registered_dataclass_comes_back_equal():
    assert _round_trip(Point(1, 2)) == Point(1, 2)
    assert named_out(Point(1, 2)) == ("T:" + __name__ + ":Point", (1, 2))


def test_a_registered_class_with_its_own_fields_comes_back_equal():
    assert _round_trip(Opaque([1], "x")) == Opaque([1], "x")


def test_a_constant_comes_back_as_the_very_object():
    assert _round_trip(SENTINEL) is SENTINEL


def test_an_unregistered_value_is_not_named():
    assert named_out(object()) is None
    assert named_out(Opaque) is None


def test_a_function_crosses_by_name_and_arrives_only_if_let_in():
    assert _round_trip(_os_fns.crash) is _os_fns.crash
    refused = _round_trip(_os_fns.crash, _allow_none)
    assert refused == WireFunction("tests.ensemble.dist._os_fns:crash")
    with pytest.raises(Badarg):
        refused("x")


def test_a_lambda_or_nested_function_is_not_named():
    def nested():
        return None

    assert named_out(lambda: None) is None
    assert named_out(nested) is None


def test_a_partial_crosses_with_its_arguments():
    p = functools.partial(_os_fns.crunch, "parent", rounds=3)
    back = _round_trip(p)
    assert type(back) is functools.partial
    assert (back.func, back.args, back.keywords) == (_os_fns.crunch, ("parent",), {"rounds": 3})


@given(st.text(max_size=40), st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5)), max_size=4))
def test_any_name_and_fields_from_a_peer_decode_to_a_value(name, fields):
    value = named_in(name, tuple(fields), _allow_none)
    assert value is not None


def test_unknown_names_and_refused_fields_arrive_as_wire_named_and_travel_on_as_they_came():
    for name, fields in [("T:nowhere:Thing", (1,)), ("T:" + __name__ + ":Point", (1,)),
                         ("C:nowhere", ()), ("T:functools:partial", ("not callable", (), {})),
                         ("X:odd", (1, 2))]:
        value = named_in(name, fields, _allow_all)
        assert value == WireStruct(name, fields)
        assert named_out(value) == (name, fields)
    refused = named_in("F:tests.ensemble.dist._os_fns:crash", (), _allow_none)
    assert named_out(refused) == ("F:tests.ensemble.dist._os_fns:crash", ())


def test_registration_refusals():
    with pytest.raises(Badarg):
        wire_types.register(Opaque)  # not a dataclass, no to_fields
    with pytest.raises(Badarg):
        wire_types.register(Point, "another-name")
    with pytest.raises(Badarg):
        wire_types.register_constant(object(), "tests:SENTINEL")
    assert wire_types.register(Point) is Point  # the same registration again: a no-op
