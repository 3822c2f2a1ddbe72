"""Laws and examples for fusee.codec: JSON values and registered dataclasses to bytes and back."""

from __future__ import annotations

import dataclasses
import enum
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import codec
from fusee.codec import Unknown, decode, encode, register, unregister
from fusee.errors import NotSerializable

SETTINGS = settings(max_examples=100, deadline=None)


@dataclasses.dataclass(frozen=True)
class Item:
    sku: str
    qty: int


@dataclasses.dataclass
class Order:
    id: str
    items: list
    note: object = None
    total: float = dataclasses.field(default=0.0)


@dataclasses.dataclass
class Unregistered:
    x: int


register(Item, name="test.Item")
register(Order)

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    | st.builds(Item, st.text(max_size=8), st.integers())
    | st.builds(Order, st.text(max_size=8), st.lists(inner, max_size=3), inner),
    max_leaves=20,
)


def same(a, b):
    """Equal and of the same types all the way down (so 1 is not True, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


# -- laws ----------------------------------------------------------------------------


@SETTINGS
@given(json_values)
def test_any_json_value_round_trips(v):
    """decode(encode(v)) is v, types, key order and -0.0 included."""
    assert same(v, decode(encode(v)))


@SETTINGS
@given(values)
def test_registered_dataclasses_round_trip_nested(v):
    """Registered dataclasses, nested in values and in each other, come back as equal instances."""
    assert same(v, decode(encode(v)))


@SETTINGS
@given(values)
def test_encode_is_deterministic(v):
    """Encoding a value twice, or encoding its decoded copy, gives the same bytes."""
    once = encode(v)
    assert (once, once) == (encode(v), encode(decode(once)))


@SETTINGS
@given(json_values)
def test_plain_values_encode_as_compact_json(v):
    """A JSON value without reserved keys encodes like json.dumps, compact, unescaped, unsorted."""
    expected = json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if b'"$dc"' in expected or b'"$dict"' in expected:
        return
    assert expected == encode(v)


@SETTINGS
@given(st.lists(json_values, max_size=4))
def test_tuples_come_back_as_lists(xs):
    """A tuple encodes as a JSON array and decodes as a list."""
    assert same(xs, decode(encode(tuple(xs))))


@SETTINGS
@given(st.dictionaries(st.sampled_from(["$dc", "$dict", "fields", "a"]), json_values, max_size=4))
def test_dicts_with_reserved_keys_round_trip(d):
    """A user dict with the keys "$dc" or "$dict" is escaped and comes back as the same dict."""
    assert same(d, decode(encode(d)))


@SETTINGS
@given(st.lists(st.text(max_size=6), max_size=3), st.integers(0, 2))
def test_refusals_name_the_path(keys, which):
    """A set, bytes or NaN deep inside a value is refused with the path to it."""
    bad = [{1, 2}, b"x", math.nan][which]
    value = bad
    for k in reversed(keys):
        value = {k: [value]}
    with pytest.raises(NotSerializable) as info:
        encode(value, root="input")
    expected_path = "input" + "".join(f"[{k!r}][0]" for k in keys)
    assert expected_path == info.value.path


# -- examples ------------------------------------------------------------------------


def test_example_encoding_of_a_dataclass():
    """A registered dataclass is {"$dc": name, "fields": {...}} with its fields in order."""
    expected = b'{"$dc":"test.Item","fields":{"sku":"a\xc3\xa9","qty":2}}'
    assert expected == encode(Item("a\u00e9", 2))


def test_default_name_is_module_and_qualname():
    """A class registered without a name is known as module.qualname."""
    assert Order is codec.registered()[f"{__name__}.Order"]


def test_register_works_as_a_decorator_with_and_without_a_name():
    """@register and @register(name=...) return the class, registered."""

    @register
    @dataclasses.dataclass
    class A:
        x: int

    @register(name="test.B")
    @dataclasses.dataclass
    class B:
        y: int

    try:
        assert (A(1), B(2)) == (decode(encode(A(1))), decode(encode(B(2))))
    finally:
        unregister(A)
        unregister(B)


def test_register_is_idempotent_but_names_are_unique():
    """The same class again is fine; another class under a taken name, or a class renamed, is refused."""

    @dataclasses.dataclass
    class Other:
        x: int

    register(Item, name="test.Item")
    with pytest.raises(ValueError):
        register(Other, name="test.Item")
    with pytest.raises(ValueError):
        register(Item, name="test.Item2")


def test_register_refuses_non_dataclasses():
    """Only dataclass types can be registered."""
    with pytest.raises(TypeError):
        register(int)
    with pytest.raises(TypeError):
        register(Item("a", 1))


@pytest.mark.parametrize(
    ("value", "path", "why_has"),
    [
        ({"items": [1, 2, {3}]}, "input['items'][2]", "a set"),
        ({"b": b"x"}, "input['b']", "bytes"),
        ([math.inf], "input[0]", "inf"),
        ({"n": -math.inf}, "input['n']", "-inf"),
        ({1: "x"}, "input", "keys must be str"),
        (Unregistered(1), "input", "unregistered dataclass"),
        ({"o": object()}, "input['o']", "builtins.object"),
        (Item("a", {2}), "input.qty", "a set"),
        ({"e": enum.Enum("E", "A").A}, "input['e']", "E"),
        ([frozenset()], "input[0]", "frozenset"),
        (["\ud800"], "input[0]", "surrogate"),
    ],
)
def test_refused_values(value, path, why_has):
    """Each refused value raises NotSerializable with its path and a reason."""
    with pytest.raises(NotSerializable) as info:
        encode(value, root="input")
    assert (path, True) == (info.value.path, why_has in info.value.why)


def test_subclasses_of_json_types_are_refused():
    """A str subclass is no str: refused rather than encoded by a foreign method."""

    class S(str):
        pass

    with pytest.raises(NotSerializable) as info:
        encode([S("x")])
    assert "subclass of str" in info.value.why


def test_cycles_are_refused():
    """A list holding itself is refused, not recursed into forever."""
    x: list = []
    x.append(x)
    with pytest.raises(NotSerializable) as info:
        encode(x)
    assert "value[0]" == info.value.path


def test_shared_subvalues_are_no_cycle():
    """The same list twice in a value is fine."""
    shared = [1]
    assert [[1], [1]] == decode(encode([shared, shared]))


def test_unknown_names_decode_as_unknown_and_encode_back():
    """A dataclass name nobody registered decodes as Unknown, which re-encodes to the same bytes."""
    data = b'{"$dc":"gone.Thing","fields":{"a":[1,{"$dc":"test.Item","fields":{"sku":"s","qty":1}}]}}'
    v = decode(data)
    assert (Unknown("gone.Thing", {"a": [1, Item("s", 1)]}), data) == (v, encode(v))


def test_new_field_with_a_default_takes_it_on_decode():
    """An encoding made before a field was added decodes with the field's default."""
    assert Order("o", [], None, 0.0) == decode(b'{"$dc":"%s.Order","fields":{"id":"o","items":[]}}' % __name__.encode())


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"[1] [2]",
        b"NaN",
        b"[Infinity]",
        b'{"a":1,"a":2}',
        b"\xff",
        b'{"$dc":"test.Item"}',
        b'{"$dc":"test.Item","fields":[]}',
        b'{"$dc":1,"fields":{}}',
        b'{"$dc":"test.Item","fields":{"sku":"a","qty":1,"extra":1}}',
        b'{"$dc":"test.Item","fields":{"sku":"a"}}',
        b'{"$dict":{},"x":1}',
        b'{"$dict":[]}',
    ],
)
def test_malformed_bytes_raise_value_error(data):
    """Bytes that are not a strict encoding raise ValueError."""
    with pytest.raises(ValueError):
        decode(data)


def test_decode_takes_bytes_like_only():
    """A str is refused with TypeError."""
    with pytest.raises(TypeError):
        decode("[]")  # type: ignore[arg-type]


def test_decode_accepts_bytearray_and_memoryview():
    """Any bytes-like body decodes."""
    assert ([1], [1]) == (decode(bytearray(b"[1]")), decode(memoryview(b"[1]")))


def test_all_lists_public_names():
    """Every name in __all__ exists."""
    assert [] == [n for n in codec.__all__ if not hasattr(codec, n)]


# -- the fast encoding path agrees with the full one ----------------------------------


def _full_or_error(v):
    try:
        return ("ok", codec.dumps_tree(codec.to_tree(v, "value"), "value"))
    except NotSerializable as e:
        return ("refused", e.path, e.why)
    except ValueError as e:
        return ("ValueError", str(e))


def _encode_or_error(v):
    try:
        return ("ok", codec.encode(v))
    except NotSerializable as e:
        return ("refused", e.path, e.why)
    except ValueError as e:
        return ("ValueError", str(e))


odd_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    | st.sampled_from([b"x", {1}, "\ud800", -0.0, 1e308, 2**64]) | st.just(5000).map(lambda n: 10**n),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.sampled_from(["$dc", "$dict", "fields", "a", "\ud800"]) | st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(odd_values | values)
def test_encode_fast_path_matches_the_full_path(v):
    """encode gives exactly dumps_tree(to_tree(v)), or the same refusal with the same path."""
    assert _encode_or_error(v) == _full_or_error(v)
