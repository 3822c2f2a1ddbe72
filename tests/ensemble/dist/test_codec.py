"""ensemble.dist.codec: every wire value round-trips exactly; anything else is refused clearly.

Laws over a recursive strategy of every wire type, the hostile values (deep, recursive, huge,
NaN, surrogates, subclasses, look-alikes of tags), converters, the path of a refusal, and a
10,000-input fuzz of :func:`decode`: any bytes answer a value or raise ``Undecodable``.
"""

from __future__ import annotations

import ast
import collections
import copy
import enum
import functools
import math
import pathlib
import re
import socket
import struct
import threading
import tracemalloc
from typing import Any, NamedTuple

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgpack import ExtType, Timestamp

from ensemble._terms import Alias, Ref
from ensemble.dist import codec
from ensemble.dist.codec import (
    MAX_DEPTH,
    TAG_CODE,
    CodecError,
    NotWireData,
    RemoteError,
    TooDeep,
    Undecodable,
    WireAlias,
    WirePid,
    WireRef,
    decode,
    encode,
)

from .._hostile import Weird, WeirdInt, WeirdStr

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------ helpers


def same(a: Any, b: Any) -> bool:
    """Exactly the same wire value: same types all the way down, floats bit for bit."""
    if type(a) is not type(b):
        return False
    t = type(a)
    if t is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    if t is list or t is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if t is dict:
        return len(a) == len(b) and all(
            same(k1, k2) and same(v1, v2) for (k1, v1), (k2, v2) in zip(a.items(), b.items())
        )
    if t is set or t is frozenset:
        left = list(b)
        for x in a:
            for i, y in enumerate(left):
                if same(x, y):
                    del left[i]
                    break
            else:
                return False
        return not left
    if t is RemoteError:
        return a.type_name == b.type_name and a.message == b.message and same(a.args, b.args)
    if t is ExtType:
        return a.code == b.code and a.data == b.data
    return a == b


def round_trip(value: Any, **converters: Any) -> Any:
    outs = {k: v for k, v in converters.items() if k.endswith("_out")}
    ins = {k: v for k, v in converters.items() if k.endswith("_in")}
    return decode(encode(value, **outs), **ins)


def nest(n: int, make=lambda v: [v], leaf: Any = 0) -> Any:
    """``leaf`` inside ``n`` containers built by ``make``."""
    v = leaf
    for _ in range(n):
        v = make(v)
    return v


_STEP = re.compile(r"\.keys\(\)\[(?P<k>\d+)\]|\.values\(\)\[(?P<v>\d+)\]|\{#(?P<m>\d+)\}"
                   r"|\.args\[(?P<a>\d+)\]")


def resolve(value: Any, path: str) -> Any:
    """The object a NotWireData path names inside ``value``."""
    assert path.startswith("value")
    rest = path[len("value"):]
    at = 0
    while at < len(rest):
        m = _STEP.match(rest, at)
        if m is None:  # [key]: the shortest literal up to a "]" (a str key may hold "]")
            assert rest[at] == "[", f"bad path step at {rest[at:]!r}"
            end = rest.index("]", at)
            while True:
                try:
                    key = ast.literal_eval(rest[at + 1:end])
                    break
                except (ValueError, SyntaxError):
                    end = rest.index("]", end + 1)
            value = value[key]
            at = end + 1
            continue
        if m["k"] is not None:
            value = list(value)[int(m["k"])]
        elif m["v"] is not None:
            value = list(value.values())[int(m["v"])]
        elif m["m"] is not None:
            value = list(value)[int(m["m"])]
        else:
            value = value.args[int(m["a"])]
        at = m.end()
    return value


# --------------------------------------------------------------------------- strategies

surrogates = st.lists(st.sampled_from(["\ud800", "\udfff", "a", "\u00e9", "\x00", "\U0001f600"]),
                      max_size=4).map("".join)
ints = st.one_of(
    st.integers(),
    st.integers(-(2**200), 2**200),
    st.integers(2**64 - 3, 2**64 + 3),
    st.integers(-(2**63) - 3, -(2**63) + 3),
)
wire_ids = st.builds(
    lambda cls, node, i, c: cls(node, i, c),
    st.sampled_from([WirePid, WireRef, WireAlias]),
    st.text(max_size=8) | surrogates,
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**32 - 1),
)
# User ExtTypes, including every payload our tags use (b"\x01".."\x08" and identities).
ext_types = st.builds(
    ExtType,
    st.integers(0, 127),
    st.binary(max_size=16) | st.sampled_from([bytes([k]) for k in range(10)]),
)
timestamps = st.builds(Timestamp, st.integers(-(2**63), 2**63 - 1), st.integers(0, 999_999_999))
hashable_leaves = st.one_of(
    st.none(), st.booleans(), ints, st.floats(), st.text(max_size=8), surrogates,
    st.binary(max_size=8), ext_types, timestamps, wire_ids,
)
hashables = st.recursive(
    hashable_leaves,
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=8,
)


def _containers(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(hashables, inner, max_size=4),
        st.sets(hashables, max_size=4),
        st.frozensets(hashables, max_size=4),
        st.builds(RemoteError, st.text(max_size=8), st.text(max_size=8),
                  st.lists(inner, max_size=3).map(tuple)),
    )


wire_values = st.recursive(hashable_leaves | hashables, _containers, max_leaves=25)


# ------------------------------------------------------------------------- round trips


@SETTINGS
@given(wire_values)
def test_every_wire_value_round_trips_exactly(value):
    """Type and value, all the way down: tuples stay tuples, sets sets, ExtTypes ExtTypes."""
    assert same(round_trip(value), value)


def test_same_tells_apart_what_the_round_trip_law_relies_on():
    """The law's equality is strict: a lax one would make the law pass for a broken codec."""
    assert not same((1, 2), [1, 2])
    assert not same({1}, frozenset({1}))
    assert not same(0.0, -0.0)
    assert not same(1, True)
    assert not same(1, 1.0)
    assert not same(ExtType(1, b"\x01"), (1, b"\x01"))
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})
    assert not same(WirePid("n", 1, 0), WireRef("n", 1, 0))
    assert same(float("nan"), float("nan"))


def test_tuples_are_not_lists_and_keys_keep_their_types():
    value = ((1, [2, (3,)]), [(), []], {(1, "a"): (), 1: "int", "1": "str", b"1": "bytes",
                                       None: 0, 1.5: 0, frozenset({2}): {3}, WirePid("n", 1, 2): 0})
    out = round_trip(value)
    assert same(out, value)
    assert type(out[0]) is tuple and type(out[0][1]) is list and type(out[0][1][1]) is tuple


def test_big_ints_round_trip_at_and_beyond_the_64_bit_edges():
    for n in [0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1,
              10**5000, -(10**5000), 2**64 * -1, 255, -256]:
        assert same(round_trip(n), n), n
    assert len(encode(2**64 - 1)) == 9  # still msgpack's own uint64, no tag


def test_floats_round_trip_bit_for_bit():
    for x in [float("nan"), -float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 5e-324, 1e308]:
        assert same(round_trip(x), x)


def test_str_and_bytes_stay_apart_and_lone_surrogates_pass():
    for value in ["x", b"x", "", b"", "\ud800", "a\udfffb", ["\ud83d", b"\xff"]]:
        assert same(round_trip(value), value)


def test_bytearray_and_memoryview_arrive_as_bytes():
    """The one documented exception to the law: msgpack packs them itself, as bin."""
    assert same(round_trip([bytearray(b"ab"), memoryview(b"cd")]), [b"ab", b"cd"])


def test_sets_and_frozensets_round_trip():
    value = {1, "a", (2, 3), frozenset({4, (5,)}), None}
    assert same(round_trip(value), value)
    assert same(round_trip(frozenset()), frozenset())
    assert same(round_trip(set()), set())


def test_user_ext_types_and_timestamps_arrive_unchanged_even_shaped_like_our_tags():
    """Every code a user can give an ExtType, with every payload a tag of ours uses."""
    payloads = [bytes([k]) for k in range(10)] + [codec._IDENTITY.pack(6, 1, 0) + b"n@h", b""]
    values = [ExtType(code, p) for code in range(128) for p in payloads]
    out = round_trip(values)
    assert same(out, values)
    assert all(type(x) is ExtType for x in out)
    ts = Timestamp(1_700_000_000, 5)
    assert same(round_trip([ts, (ts,)]), [ts, (ts,)])


def test_no_user_ext_type_can_carry_our_tag_code():
    """Why tags need no escaping: ExtType refuses our code (if it ever accepts it, this fails)."""
    assert TAG_CODE < 0
    with pytest.raises(ValueError):
        ExtType(TAG_CODE, b"\x01")


def test_wire_ids_are_immutable_distinct_kinds_and_checked():
    p = WirePid("a@h", 1, 2)
    assert p == WirePid("a@h", 1, 2) and hash(p) == hash(WirePid("a@h", 1, 2))
    assert p != WireRef("a@h", 1, 2) and p != ("a@h", 1, 2)
    with pytest.raises(AttributeError):
        p.id = 3
    for bad in [(1, 1, 0), ("n", -1, 0), ("n", 2**64, 0), ("n", 1, 2**32), ("n", True, 0)]:
        with pytest.raises(ValueError):
            WirePid(*bad)


# ---------------------------------------------------------------------------- converters


class LocalPid:
    """A stand-in for the runtime's pid: the codec knows it only through the converters."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other):
        raise AssertionError("the codec compared a pid")

    __hash__ = object.__hash__


def test_converters_are_asked_and_their_answers_used():
    asked, built = [], []

    def pid_out(o):
        asked.append(o)
        return ("me@host", o.n, 7) if type(o) is LocalPid else None

    def pid_in(node, n, creation):
        built.append((node, n, creation))
        return ("pid", node, n, creation)

    p = LocalPid(42)
    data = encode(("call", p, [p], {"k": 1.5}), pid_out=pid_out)
    # only the pids: native values and tuples never reach a converter
    assert len(asked) == 2 and all(a is p for a in asked)
    assert decode(data, pid_in=pid_in) == ("call", ("pid", "me@host", 42, 7),
                                           [("pid", "me@host", 42, 7)], {"k": 1.5})
    assert built == [("me@host", 42, 7)] * 2
    assert decode(data) == ("call", WirePid("me@host", 42, 7), [WirePid("me@host", 42, 7)],
                            {"k": 1.5})


def test_refs_and_aliases_go_through_their_converters_or_as_they_are():
    r, a = Ref(5, "n@h"), Alias(6, owner=None)
    assert decode(encode([r, a])) == [WireRef("n@h", 5, 0), WireAlias(a.node, 6, 0)]
    out = decode(
        encode([r, a], ref_out=lambda o: ("x@h", o._n, 3), alias_out=lambda o: ("y@h", o._n, 4)),
        ref_in=lambda *f: ("ref", *f),
        alias_in=lambda *f: ("alias", *f),
    )
    assert out == [("ref", "x@h", 5, 3), ("alias", "y@h", 6, 4)]
    # A converter answering None leaves the value to the codec.
    assert decode(encode(r, ref_out=lambda o: None)) == WireRef("n@h", 5, 0)


def test_out_converters_recognize_the_runtimes_own_types_by_answering():
    """An object only ref_out or alias_out knows (a remote reference of the runtime) travels."""

    class RemoteRef:
        pass

    rr = RemoteRef()
    out = decode(encode([rr], pid_out=lambda o: None,
                        alias_out=lambda o: ("z@h", 9, 1) if o is rr else None))
    assert out == [WireAlias("z@h", 9, 1)]


def test_a_converter_answering_garbage_fails_at_the_sender():
    for answer in [("n", -1, 0), (1, 2, 3), ("n", 1), "n", ("n", 2**64, 0)]:
        with pytest.raises(CodecError, match="pid_out answered"):
            encode([LocalPid(1)], pid_out=lambda o, a=answer: a)


def test_an_in_converter_that_raises_arrives_as_undecodable():
    boom = RuntimeError("no such node")

    def pid_in(*fields):
        raise boom

    with pytest.raises(Undecodable) as info:
        decode(encode(WirePid("n", 1, 0)), pid_in=pid_in)
    assert info.value.__cause__ is boom


@SETTINGS
@given(st.lists(st.integers(0, 2**64 - 1), max_size=5, unique=True), st.integers(0, 2**32 - 1))
def test_pids_through_converters_round_trip(ids, creation):
    pids = [LocalPid(i) for i in ids]
    by_id = {p.n: p for p in pids}
    out = round_trip(
        (pids, {i: p for i, p in zip(ids, pids)}),
        pid_out=lambda o: ("me@h", o.n, creation) if type(o) is LocalPid else None,
        pid_in=lambda node, n, c: by_id[n] if (node, c) == ("me@h", creation) else None,
    )
    assert type(out) is tuple
    assert all(a is b for a, b in zip(out[0], pids))
    assert all(out[1][i] is by_id[i] for i in ids)


# --------------------------------------------------------------------------- exceptions


class AppError(Exception):
    class Inner(Exception):
        pass


def test_exceptions_arrive_as_remote_errors_with_name_message_and_args():
    out = round_trip([ValueError("boom"), AppError.Inner("x", 3), KeyboardInterrupt()])
    assert [type(e) for e in out] == [RemoteError] * 3
    assert (out[0].type_name, out[0].message, out[0].args) == ("ValueError", "boom", ("boom",))
    assert out[1].type_name == f"{__name__}.AppError.Inner"
    assert out[1].message == "('x', 3)" and out[1].args == ("x", 3)
    assert out[2].type_name == "KeyboardInterrupt"
    assert str(out[0]) == "ValueError: boom"
    with pytest.raises(RemoteError):
        raise out[0]


def test_args_that_are_not_wire_data_travel_as_their_repr():
    f = lambda: 0  # noqa: E731
    inner = KeyError("k")
    out = round_trip(RuntimeError("failed", f, [1, object], inner, (2, {3})))
    assert out.args[0] == "failed" and out.args[1] == repr(f)
    assert out.args[2].startswith("[1, <class 'object'>")
    assert same(out.args[3], RemoteError("KeyError", "'k'", ("k",)))
    assert same(out.args[4], (2, {3}))


def test_exceptions_among_their_own_args_travel_as_reprs_not_forever():
    e = ValueError("x")
    e.args = ("x", [e])
    out = round_trip(e)
    assert out.args[0] == "x" and isinstance(out.args[1], str)
    a, b = KeyError("a"), KeyError("b")
    a.args, b.args = (b,), (a,)
    assert round_trip(a).type_name == "KeyError"


def test_an_exception_whose_str_raises_still_travels():
    class Bad(Exception):
        def __str__(self):
            raise RuntimeError("no")

    class NoRepr:
        def __repr__(self):
            raise RuntimeError("no")

    out = round_trip(Bad(NoRepr()))
    assert out.message.startswith("<unprintable") and out.message.endswith(".Bad>")
    assert out.args[0].startswith("<unrepresentable") and out.args[0].endswith(".NoRepr>")


def test_a_remote_error_is_forwarded_unchanged():
    err = RemoteError("pkg.Error", "it broke", ("it broke", (1, WirePid("n", 1, 0))))
    assert same(round_trip(err), err)
    assert same(round_trip(round_trip(err)), err)
    assert same(copy.copy(err), err)


# --------------------------------------------------------------------- refusals and paths


class Point(NamedTuple):
    x: int
    y: int


class Color(enum.IntEnum):
    RED = 1


def _gen():
    yield 1


@pytest.mark.parametrize(
    "bad",
    [lambda: 0, object(), _gen(), threading.Lock(), Point(1, 2), Color.RED,
     collections.OrderedDict(a=1), collections.defaultdict(list), WeirdStr("s"), WeirdInt(3),
     Weird(), LocalPid(1), Ref, 1j, range(3), Ellipsis],
    ids=lambda b: type(b).__name__,
)
def test_what_is_not_wire_data_is_refused_naming_its_type_and_place(bad):
    value = [1, {"k": ("a", bad)}]
    with pytest.raises(NotWireData) as info:
        encode(value)
    err = info.value
    assert isinstance(err, TypeError) and isinstance(err, CodecError)
    assert err.path == "value[1]['k'][1]"
    assert resolve(value, err.path) is bad
    assert type(bad).__qualname__ in err.type_name and err.type_name in str(err)


def test_a_ref_whose_fields_the_wire_cannot_carry_is_refused():
    for bad in [Ref(2**64, "n@h"), Ref(-1, "n@h"), Ref(1, b"n@h")]:
        with pytest.raises(NotWireData) as info:
            encode({"r": [bad]})
        assert info.value.path == "value['r'][0]" and info.value.type_name == "ensemble._terms.Ref"


def test_a_socket_is_refused():
    with socket.socket() as s:
        with pytest.raises(NotWireData, match=r"socket.* at value\[0\]"):
            encode([s])


def test_subclasses_of_wire_types_are_refused_with_a_hint():
    with pytest.raises(NotWireData, match=r"subclass of tuple: send tuple\(x\)"):
        encode(Point(1, 2))


def test_an_object_that_pickle_could_carry_is_still_refused():
    """No pickle, ever: __reduce__ does not make a value wire data."""

    class Reducible:
        def __reduce__(self):
            return (int, (1,))

    with pytest.raises(NotWireData):
        encode({"x": Reducible()})


def test_paths_into_keys_sets_and_unusual_keys():
    f = lambda: 0  # noqa: E731
    cases = [
        ({f: 1}, "value.keys()[0]"),
        ({"a": 1, (1,): [f]}, "value.values()[1][0]"),
        ({"a": {1, f}}, None),  # a set member: its index depends on iteration order
        ([[], {"x": (0, [1, f])}], "value[1]['x'][1][1]"),
        ({3: f}, "value[3]"),
        ({None: [f]}, "value[None][0]"),
    ]
    for value, path in cases:
        with pytest.raises(NotWireData) as info:
            encode(value)
        if path is not None:
            assert info.value.path == path
        assert resolve(value, info.value.path) is f


_BAD = object()


@SETTINGS
@given(st.recursive(
    hashable_leaves | st.just(_BAD),
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=2) | st.integers() | hashables, inner, max_size=3),
    max_leaves=12,
))
def test_encode_refuses_exactly_the_values_holding_something_else_and_points_at_it(value):
    def holds_bad(v):
        if v is _BAD:
            return True
        if type(v) in (list, tuple):
            return any(holds_bad(x) for x in v)
        if type(v) is dict:
            return any(holds_bad(x) for x in v.values())
        return False

    if holds_bad(value):
        with pytest.raises(NotWireData) as info:
            encode(value)
        assert resolve(value, info.value.path) is _BAD
    else:
        assert same(round_trip(value), value)


def test_a_refused_value_leaves_no_state_behind():
    good = ("call", [1, 2], {"k": (3,)})
    before = encode(good)
    with pytest.raises(NotWireData):
        encode(("call", [1, lambda: 0]))
    assert encode(good) == before


# -------------------------------------------------------------------------------- depth


@pytest.mark.parametrize("make", [lambda v: [v], lambda v: (v,), lambda v: {"k": v},
                                  lambda v: frozenset({v})],
                         ids=["list", "tuple", "dict", "frozenset"])
def test_max_depth_is_where_encode_stops(make):
    """MAX_DEPTH containers pack; one more is TooDeep at the sender, located."""
    ok = nest(MAX_DEPTH, make)
    data = encode(ok)
    out = decode(data)
    for _ in range(MAX_DEPTH):  # as deep as it went (compared without recursion)
        out = next(iter(out.values())) if type(out) is dict else next(iter(out))
    assert out == 0
    with pytest.raises(TooDeep) as info:
        encode(nest(MAX_DEPTH + 1, make))
    assert "MAX_DEPTH" in str(info.value)


def test_tagged_values_count_their_tag_level():
    """An empty tuple's tag sits one level down (like a list's items); a pid is a leaf."""
    encode(nest(MAX_DEPTH - 1, leaf=()))
    encode(nest(MAX_DEPTH, leaf=WirePid("n", 1, 0)))
    encode(nest(MAX_DEPTH, leaf=2**100))
    encode(nest(MAX_DEPTH, leaf=[]))
    with pytest.raises(TooDeep):
        encode(nest(MAX_DEPTH, leaf=()))
    with pytest.raises(TooDeep):
        encode(nest(MAX_DEPTH, leaf=ValueError()))


@pytest.mark.parametrize("make", [lambda v: [v], lambda v: (v,), lambda v: {0: v},
                                  lambda v: [{"a": (1, v)}]], ids=["list", "tuple", "dict", "mix"])
def test_ten_thousand_deep_is_too_deep_not_a_recursion_error(make):
    with pytest.raises(TooDeep):
        encode(nest(10_000, make))


def test_recursive_containers_are_refused_as_such():
    lst: list = [1]
    lst.append(lst)
    d: dict = {}
    d["me"] = [d]
    for value, path in [(lst, "value[1]"), (d, "value['me'][0]"), ((0, [lst]), "value[1][0][1]")]:
        with pytest.raises(TooDeep, match="contains itself") as info:
            encode(value)
        assert info.value.path == path


def test_max_depth_is_msgpacks_own_bound():
    """1024 from msgpack 1.2 on, where packer and unpacker agree (it was 511 for the packer)."""
    assert MAX_DEPTH == 1024 or msgpack.version < (1, 2)


UNPACK_DEPTH = 1024  # msgpack's unpack stack, the same in every msgpack 1.x


def test_frames_deeper_than_the_unpack_stack_are_undecodable():
    assert decode(b"\x91" * UNPACK_DEPTH + b"\x00") is not None
    with pytest.raises(Undecodable):
        decode(b"\x91" * (UNPACK_DEPTH + 1) + b"\x00")
    tuple_level = b"\x92\xd4\x80\x01"  # [tuple tag, ...]
    assert decode(tuple_level * (UNPACK_DEPTH - 1) + b"\x91\xd4\x80\x01") is not None
    with pytest.raises(Undecodable):
        decode(tuple_level * UNPACK_DEPTH + b"\x91\xd4\x80\x01")
    with pytest.raises(Undecodable):
        decode(b"\x81\xc0" * 100_000 + b"\xc0")  # maps, 100,000 deep


# ------------------------------------------------------------------------ hostile frames


def ident(kind: int, node: bytes = b"n@h", n: int = 1, c: int = 0) -> bytes:
    payload = codec._IDENTITY.pack(kind, n, c) + node
    return b"\xc7" + bytes([len(payload)]) + b"\x80" + payload


HOSTILE_FRAMES = {
    "empty": b"",
    "truncated array": b"\x93\x01",
    "trailing data": b"\x01\x02",
    "reserved byte": b"\xc1",
    "bad utf-8": b"\xa2\xff\xfe",
    "unknown tag kind": b"\x91\xd4\x80\x63",
    "empty tag": b"\x91\xc7\x00\x80",
    "long tag": b"\x91\xd5\x80\x01\x01",
    "tag at the top": b"\xd4\x80\x01",
    "tag not at the head": b"\x92\x01\xd4\x80\x01",
    "two tags": b"\x92\xd4\x80\x01\xd4\x80\x01",
    "tag as a map key": b"\x81\xd4\x80\x01\x01",
    "tag as a map value": b"\x81\x01\xd4\x80\x01",
    "other reserved code": b"\xd4\xfb\x01",
    "bad timestamp": b"\xd5\xff\x00\x00",
    "short identity": b"\xd4\x80\x06",
    "identity, kind 9": ident(9),
    "identity, bad utf-8 node": ident(6, b"\xff"),
    "big int without bytes": b"\xd4\x80\x05",
    "list as a map key": b"\x81\x91\x01\x02",
    "map as a map key": b"\x81\x80\x02",
    "unhashable set member": b"\x92\xd4\x80\x02\x90",
    "unhashable frozenset member": b"\x92\xd4\x80\x03\x80",
    "exception without message": b"\x92\xd4\x80\x04\xa1E",
    "exception with an int name": b"\x93\xd4\x80\x04\x01\xa0",
    "array of 4G elements": b"\xdd\xff\xff\xff\xff",
    "map of 4G pairs": b"\xdf\xff\xff\xff\xff",
    "bin of 4 GiB": b"\xc6\xff\xff\xff\xff",
    "str of 4 GiB": b"\xdb\xff\xff\xff\xff",
    "ext of 4 GiB": b"\xc9\xff\xff\xff\xff\x05",
}


@pytest.mark.parametrize("data", HOSTILE_FRAMES.values(), ids=HOSTILE_FRAMES.keys())
def test_hostile_frames_are_undecodable_cheaply(data):
    tracemalloc.start()
    try:
        with pytest.raises(Undecodable):
            decode(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize("data", [None, "text", 5, [b"\x01"], object()], ids=repr)
def test_what_is_not_bytes_is_undecodable_too(data):
    with pytest.raises(Undecodable):
        decode(data)


def test_any_bytes_like_input_decodes():
    data = encode(("t", [1]))
    for view in [bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]]:
        assert same(decode(view), ("t", [1]))


def test_threads_encode_and_decode_at_once_without_sharing_state():
    """Each call keeps its own state (dispatchers run processes on several OS threads)."""
    errors = []

    def work(k: int) -> None:
        def pid_out(o):
            return ("n", o.n + k, k) if type(o) is LocalPid else None

        try:
            for i in range(300):
                value = (k, i, [LocalPid(i)], {(k,): {i}})
                out = decode(encode(value, pid_out=pid_out), pid_in=lambda nd, n, c: (nd, n - c))
                assert same(out, (k, i, [("n", i)], {(k,): {i}})), out
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_well_formed_tags_decode():
    assert decode(b"\x93\xd4\x80\x01\x01\xa1a") == (1, "a")
    assert decode(ident(6, b"n@h", 5, 2)) == WirePid("n@h", 5, 2)
    assert decode(b"\xd5\x80\x05\xff") == -1  # a big int tag holding a small int still decodes
    assert decode(b"\xd4\x05\x01") == ExtType(5, b"\x01")


# ---------------------------------------------------------------------------------- fuzz

# Pieces of frames, weighted toward our tags, so random joins reach the tag paths.
_PIECES = [
    b"\xd4\x80\x01", b"\xd4\x80\x02", b"\xd4\x80\x03", b"\xd4\x80\x04", b"\xd5\x80\x05\x01",
    ident(6), ident(7), ident(8), b"\x90", b"\x91", b"\x92", b"\x93", b"\x80", b"\x81",
    b"\x82", b"\x01", b"\xa1x", b"\xc4\x01z", b"\xc0", b"\xc3",
    b"\xcb" + struct.pack(">d", math.nan),
    b"\xd4\x05\x01", b"\xd6\xff\x00\x00\x00\x01", b"\xdc\x00\x02", b"\xc7\x00\x80", b"\xff",
]
@functools.cache
def _corpus() -> list[bytes]:
    """Valid frames of every kind, to cut, splice and corrupt (made on first use, not at import)."""
    return [
        encode(v)
        for v in [
            ("call", WirePid("a@h", 1, 2), WireRef("a@h", 3, 0), {"k": [1, 2.5, "x"]}),
            {(1, "a"): {2, 3}, frozenset({4}): [WireAlias("b@h", 5, 6)], None: b"bytes"},
            RemoteError("ValueError", "boom", ("boom", (1,), [2**70])),
            [ExtType(1, b"\x01"), Timestamp(1, 2), -(2**100), float("nan"), "\ud800", (), set()],
            nest(40, lambda v: (v, [v] if isinstance(v, int) else {}, 1)),
            nest(30, lambda v: {"k": (v,)}),
        ]
    ]


def _frame(draw: bytes) -> bytes:
    """A frame from one drawn byte string (one draw keeps hypothesis's own cost low)."""
    mode, rest = draw[0] % 3, draw[1:]
    if mode == 0:  # any bytes
        return rest
    if mode == 1:  # a join of pieces
        return b"".join(_PIECES[b % len(_PIECES)] for b in rest)
    corpus = _corpus()
    base = corpus[rest[0] % len(corpus)] if rest else corpus[0]  # a corrupted valid frame
    at = int.from_bytes(rest[1:3], "little") % (len(base) + 1) if len(rest) > 2 else 0
    cut = rest[3] % 4 if len(rest) > 3 else 0
    return base[:at] + rest[4:] + base[at + cut:]


frames = st.binary(min_size=1, max_size=32).map(_frame)


@settings(max_examples=10_000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frames)
def test_decoding_any_bytes_answers_a_value_or_undecodable(data):
    """A node's reader can never be crashed by its peer's bytes: and what decodes is wire data."""
    try:
        value = decode(data)
    except Undecodable:
        return
    assert same(round_trip(value), value)


# ------------------------------------------------------------------------------ purity


def test_the_codec_imports_only_msgpack_the_stdlib_and_values():
    """Pure: no I/O, no runtime, and never pickle."""
    tree = ast.parse(pathlib.Path(codec.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported <= {"__future__", "struct", "typing", "msgpack", ".._terms"}, imported
    assert "pickle" not in pathlib.Path(codec.__file__).read_text().replace("never pickle", "")


# ----------------------------------------------------------- Encoder and decoder, built once


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.text(max_size=5), st.tuples(st.integers())), max_size=5))
def test_an_encoder_answers_what_encode_answers(value):
    enc = codec.Encoder()
    assert enc.encode(value) == codec.encode(value)
    assert codec.decoder().decode(enc.encode(value)) == codec.decode(codec.encode(value))


def test_an_encoder_goes_on_after_a_value_it_refuses():
    enc = codec.Encoder()
    with pytest.raises(codec.NotWireData) as info:
        enc.encode([1, (2, object())])
    assert info.value.path == "value[1][1]"
    assert enc.encode([1, (2, 3)]) == codec.encode([1, (2, 3)])
    assert enc.encode("\udcff") == codec.encode("\udcff")  # a lone surrogate: the slow path


def test_an_encoder_used_again_inside_its_own_hook_is_not_corrupted():
    """A converter that encodes with the same encoder (so the shared packer is in use) gets a
    packer of its own, and both values come out whole."""
    inner: list[bytes] = []

    class Thing:
        pass

    def pid_out(o):
        if type(o) is Thing:
            inner.append(enc.encode([9, 9, 9]))
            return ("n@h", 1, 2)
        return None

    enc = codec.Encoder(pid_out=pid_out)
    out = enc.encode([1, Thing(), 2])
    assert inner == [codec.encode([9, 9, 9])]
    assert codec.decode(out) == [1, codec.WirePid("n@h", 1, 2), 2]
    assert enc.busy == [0]


def test_a_decoder_refuses_a_stray_tag_and_goes_on():
    d = codec.decoder()
    stray = b"\x92\x01" + codec.encode((1,))[1:4]  # a list whose second item is a tuple's tag
    with pytest.raises(codec.Undecodable):
        d.decode(stray)
    assert d.open_tags == [0] or d.decode(codec.encode((1, 2))) == (1, 2)
    assert d.decode(codec.encode((1, 2))) == (1, 2)
