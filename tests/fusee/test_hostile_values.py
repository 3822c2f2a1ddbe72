"""Hostile values at fusee's edges (issue 11, points 5 and 6).

* the depth limit: a payload nested deeper than ``fusee.codec.MAX_DEPTH`` is refused with
  ``NotSerializable`` naming the path; one at the limit is written and read back;
* decoding never raises ``RecursionError``: damaged or over-deep bodies are ``ValueError``
  (``Corrupt`` in a journal), at any depth of input and of call stack;
* a directory holding a value at the limit opens from a deep call stack;
* the walks with a stack of their own give exactly what the quick ones give (laws);
* a step whose result cannot be serialized names the step and the path inside the result;
* ``@fusee.workflow`` works bare.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusee
from fusee import codec, records
from fusee.codec import MAX_DEPTH, Unknown, decode, encode
from fusee.errors import NotSerializable

from ._kit import SEG


@dataclasses.dataclass
class Box:
    inner: object = None


codec.register(Box, name="test.hostile.Box")


# -- helpers -----------------------------------------------------------------------------------


def stack_depth() -> int:
    f, n = sys._getframe(), 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


def with_room(room: int, fn):
    """``fn()`` called with only about ``room`` frames left before the recursion limit."""
    target = sys.getrecursionlimit() - room

    def down(n):
        return fn() if n <= 0 else down(n - 1)

    return down(target - stack_depth())


def nested(depth: int, kind: str = "list", leaf=0):
    """A value of ``depth`` containers, one inside the other (``kind`` list, tuple, dict, box, mix)."""
    v = leaf
    for i in range(depth):
        k = ["list", "tuple", "dict", "box"][i % 4] if kind == "mix" else kind
        v = {"list": lambda x: [x], "tuple": lambda x: (x,), "dict": lambda x: {"k": x}, "box": Box}[k](v)
    return v


def step_of(kind: str) -> str:
    return {"list": "[0]", "tuple": "[0]", "dict": "['k']", "box": ".inner"}[kind]


def outcome(fn, *args):
    """What ``fn(*args)`` does, comparable: ("ok", value as encoded) or ("ValueError",)."""
    try:
        value = fn(*args)
    except ValueError:  # a RecursionError is no ValueError: it fails the test
        return ("ValueError",)
    return ("ok", json.dumps(value, sort_keys=False))


# -- the depth limit -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["list", "tuple", "dict", "box"])
def test_one_container_past_the_limit_is_refused_with_its_path(kind):
    """MAX_DEPTH (256) containers encode and decode; one more is NotSerializable naming the path to it."""
    assert MAX_DEPTH == 256
    at_limit = nested(MAX_DEPTH, kind)
    assert encode(decode(encode(at_limit))) == encode(at_limit)
    with pytest.raises(NotSerializable) as info:
        encode(nested(MAX_DEPTH + 1, kind), root="input")
    assert info.value.path == "input" + step_of(kind) * MAX_DEPTH
    assert f"deeper than {MAX_DEPTH}" in info.value.why


def test_a_step_record_past_the_limit_names_the_payload_path():
    """The record encoder refuses the over-deep payload too, the path rooted at the field."""
    with pytest.raises(NotSerializable) as info:
        records.encode_record(records.Step(1, 2, "s", 1, "ok", nested(MAX_DEPTH + 1)))
    assert info.value.path == "payload" + "[0]" * MAX_DEPTH


def test_a_hundred_thousand_deep_value_is_refused_not_a_recursion_error():
    """However deep the value, encoding answers NotSerializable (the walk stops at the limit)."""
    deep = nested(100_000)
    with pytest.raises(NotSerializable):
        encode(deep)
    with pytest.raises(NotSerializable):
        records.encode_record(records.Done(1, "completed", 1.0, deep))


def test_decoding_json_past_the_limit_is_a_value_error():
    """A body nesting deeper than encode ever writes is refused with ValueError (Corrupt in a journal)."""
    over = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(ValueError, match="deeper"):
        decode(over)
    body = b'{"t":"done","run":1,"status":"completed","finished":1.0,"payload":' + over + b"}"
    with pytest.raises(ValueError, match="deeper"):
        records.decode_record(body)


# -- decoding never raises RecursionError -------------------------------------------------------


def deep_texts():
    opens = st.sampled_from(["[", '{"a":', '{"$dc":"test.hostile.Box","fields":{"inner":', '{"$dict":{"x":'])
    closes = {"[": "]", '{"a":': "}", '{"$dc":"test.hostile.Box","fields":{"inner":': "}}", '{"$dict":{"x":': "}}"}

    @st.composite
    def build(draw):
        n = draw(st.integers(0, 3000) | st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 2 * MAX_DEPTH + 1]))
        o = draw(opens)
        text = o * n + draw(st.sampled_from(["0", "[]", '"x"', "NaN", ""])) + closes[o] * n
        cut = draw(st.none() | st.integers(0, len(text)))  # a torn or damaged body
        if cut is not None:
            text = text[:cut] + draw(st.sampled_from(["", "]", "}", ",", "x"])) + text[cut:]
        return text.encode()

    return build()


@settings(max_examples=150, deadline=None)
@given(deep_texts(), st.sampled_from([None, 300, 120, 60]))
def test_decode_never_raises_recursion_error(data, room):
    """Any nesting of any length, whole or damaged, from any depth of call stack: a value or ValueError,
    the same as from the top of the stack."""

    def both():
        return (outcome(lambda b: encode(decode(b)).decode(), data), outcome(records.decode_record, data))

    got = both() if room is None else with_room(room, both)
    assert got == both()


@pytest.mark.parametrize("kind", ["list", "dict", "box", "mix"])
def test_a_value_at_the_limit_is_written_and_read_from_a_deep_stack(kind):
    """With 60 frames of stack left, a payload at the limit encodes to the same bytes and decodes."""
    v = nested(MAX_DEPTH, kind)
    rec = records.Step(1, 2, "s", 1, "ok", v)
    want = (encode(v), records.encode_record(rec))

    def there():
        got = (encode(v), records.encode_record(rec))
        back = (encode(decode(got[0])), records.encode_record(records.decode_record(got[1])))
        return got, back

    got, back = with_room(60, there)
    assert (want, want) == (got, back)


# -- the walks with a stack of their own are the quick walks (laws) ----------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6)
json_trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=25,
)
shaped = st.recursive(  # trees with $dc / $dict objects, well-formed or not
    scalars,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["$dc", "$dict", "fields", "inner", "a"]), inner, max_size=3)
    | st.builds(lambda f: {"$dc": "test.hostile.Box", "fields": f}, st.dictionaries(st.sampled_from(["inner", "x"]), inner, max_size=2))
    | st.builds(lambda n, f: {"$dc": n, "fields": f}, st.sampled_from(["nobody", "test.hostile.Box"]), st.dictionaries(st.text(max_size=3), inner, max_size=2))
    | st.builds(lambda d: {"$dict": d}, st.dictionaries(st.text(max_size=3), inner, max_size=2)),
    max_leaves=20,
)


def _result(fn, tree):
    try:
        return ("ok", repr(fn(tree)))
    except ValueError as e:
        return ("ValueError", str(e))


@settings(max_examples=100, deadline=None)
@given(shaped)
def test_from_tree_with_its_own_stack_matches_the_recursive_walk(tree):
    """The same value (types and reprs) or the same ValueError message, for any tree."""
    assert _result(codec._from_tree_iter, tree) == _result(lambda t: codec._from_tree_rec(t, MAX_DEPTH), tree)


@settings(max_examples=100, deadline=None)
@given(json_trees.filter(lambda t: not (type(t) is float and not math.isfinite(t))))
def test_dumps_with_its_own_stack_matches_json_dumps(tree):
    """Byte for byte the text json.dumps writes (compact, unescaped, key order kept), or the same refusal."""
    try:
        want = ("ok", json.dumps(tree, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    except ValueError:
        want = ("ValueError",)
    try:
        got = ("ok", codec._dumps_iter(tree))
    except ValueError:
        got = ("ValueError",)
    assert want == got


json_noise = st.sampled_from(list('[]{}:,"\\ -+.eE0123456789aftrunlsxNIy\t\n') + ["true", "null", "NaN", "-Infinity", "\\u00e9", "\\ud800", "é"])


@st.composite
def json_texts(draw):
    """Valid JSON texts, and texts a few edits away from valid."""
    text = json.dumps(draw(json_trees), ensure_ascii=draw(st.booleans()), indent=draw(st.none() | st.just(1)))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(text)))
        how = draw(st.integers(0, 2))
        noise = draw(json_noise)
        text = text[:at] + (noise if how != 1 else "") + text[at + (how > 0) :]
    return text


def _typed(v):
    """``v`` with each number's type kept visible (1 vs 1.0 vs True), for comparing two readers."""
    if type(v) is list:
        return ["list"] + [_typed(x) for x in v]
    if type(v) is dict:
        return ["dict"] + [[k, _typed(x)] for k, x in v.items()]
    return [type(v).__name__, repr(v)]


@settings(max_examples=150, deadline=None)
@given(json_texts())
def test_the_reader_with_its_own_stack_reads_as_json_does(text):
    """The same tree as the C decoder (types, key order, duplicate keys refused, NaN refused), or ValueError
    for both."""

    def read(fn):
        try:
            return ("ok", _typed(fn(text)))
        except ValueError:
            return ("ValueError",)

    assert read(codec._decoder.decode) == read(codec._loads_iter)


def _with_cycle(xs):
    xs.append(xs)
    return xs


hostile_values = st.recursive(
    scalars | st.sampled_from([{1}, b"x", math.nan, -math.inf, frozenset(), object, 1j]),
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.lists(inner, max_size=2).map(_with_cycle)
    | st.dictionaries(st.sampled_from(["$dc", "$dict", "a", "b"]) | st.integers(0, 2) | st.none(), inner, max_size=3)
    | st.builds(Box, inner)
    | st.builds(lambda f: Unknown("n", f), st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2)),
    max_leaves=15,
)


@settings(max_examples=100, deadline=None)
@given(hostile_values)
def test_to_tree_walk_matches_the_recursive_walk(value):
    """to_tree (its own stack) gives what the recursive walk it replaced gave: the tree, or the refusal
    with the same path and reason, for values with sets, NaN, bytes, odd keys, cycles and dataclasses."""

    def run(fn):
        try:
            return ("ok", json.dumps(fn(value)))
        except NotSerializable as e:
            return ("refused", e.path, e.why)

    assert run(lambda v: codec.to_tree(v, "value")) == run(lambda v: recursive_tree(v, "value", set()))


def recursive_tree(value, path, active):
    """The recursive to_tree fusee had before (the law's oracle)."""
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        if math.isfinite(value):
            return value
        raise NotSerializable(value, f"a float {value!r}: NaN and infinities are not JSON", path)
    if t in (list, tuple, dict, Unknown) or t in codec._by_class:
        if id(value) in active:
            raise NotSerializable(value, "a cycle (a container holding itself)", path)
        active.add(id(value))
        if t is list or t is tuple:
            out = [recursive_tree(x, f"{path}[{i}]", active) for i, x in enumerate(value)]
        elif t is dict:
            out = {}
            for k, v in value.items():
                if type(k) is not str:
                    raise NotSerializable(k, f"a key {k!r} of type {type(k).__qualname__}: keys must be str", path)
                out[k] = recursive_tree(v, f"{path}[{k!r}]", active)
            if "$dc" in out or "$dict" in out:
                out = {"$dict": out}
        elif t is Unknown:
            out = {"$dc": value.name, "fields": {k: recursive_tree(v, f"{path}.{k}", active) for k, v in value.fields.items()}}
        else:
            fields = {
                f.name: recursive_tree(getattr(value, f.name), f"{path}.{f.name}", active)
                for f in dataclasses.fields(value)
                if f.init
            }
            out = {"$dc": codec._by_class[t], "fields": fields}
        active.discard(id(value))
        return out
    raise NotSerializable(value, codec._what(value), path)


def test_an_unknown_that_could_not_be_read_back_is_refused():
    """An Unknown whose name is no str, or whose fields are no dict of str keys, would not decode: refused."""
    for bad in (Unknown(5, {}), Unknown("n", [1]), Unknown("n", {1: 2})):  # type: ignore[arg-type]
        with pytest.raises(NotSerializable):
            encode(bad)
    assert decode(encode(Unknown("n", {"a": [1]}))) == Unknown("n", {"a": [1]})


# -- a directory holding a value at the limit opens from a deep stack ---------------------------


@fusee.workflow("hostile.echo")
def echo(ctx, value):
    return ctx.step("keep", lambda: value)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_directory_holding_a_value_at_the_limit_opens_from_a_deep_stack(tmp_path, checkpoint):
    """Start input, step result and Done payload at MAX_DEPTH, written to the journal (or a checkpoint);
    Engine.open called with 250 frames of stack left recovers the run and its result."""
    path = str(tmp_path / "data")
    deep = nested(MAX_DEPTH, "mix")
    with fusee.Engine.open(path, workflows=[echo], shards=1, segment_size=SEG, checkpoint_on_shutdown=checkpoint) as eng:
        eng.start(echo, "deep", deep).result(timeout=30)

    def reopen():
        eng = fusee.Engine.open(path, workflows=[echo], shards=1, segment_size=SEG)
        try:
            return encode(eng.result("deep", timeout=30))
        finally:
            eng.shutdown()

    assert with_room(250, reopen) == encode(deep)


# -- point 6: clear errors at the edges ---------------------------------------------------------


@fusee.workflow("hostile.unserializable")
def unserializable(ctx, _):
    try:
        ctx.step("charge", lambda: {"items": [1, 2, {3}]})
    except NotSerializable as e:
        return {"path": e.path, "message": str(e)}
    return None


def test_a_step_result_that_cannot_be_serialized_names_the_step_and_the_path():
    """NotSerializable at ctx.step: its path is inside the result, its message names the step."""
    with fusee.Engine.open(None, workflows=[unserializable]) as eng:
        got = eng.start(unserializable, "u", None).result(timeout=30)
    assert got["path"] == "result['items'][2]"
    assert "step 'charge'" in got["message"] and "a set" in got["message"]


def test_a_step_result_too_deep_names_the_step_and_the_path():
    """The depth limit reads the same at a step: the path inside the result to the container too deep."""

    @fusee.workflow("hostile.too_deep")
    def too_deep(ctx, _):
        try:
            ctx.step("build", lambda: {"tree": nested(MAX_DEPTH)})
        except NotSerializable as e:
            return [e.path, str(e)]

    with fusee.Engine.open(None, workflows=[too_deep]) as eng:
        path, message = eng.start(too_deep, "d", None).result(timeout=30)
    assert path == "result['tree']" + "[0]" * (MAX_DEPTH - 1)
    assert "step 'build'" in message


def bare_body(ctx, x):
    return ctx.step("double", lambda: x * 2)


def test_workflow_works_bare_named_after_the_function():
    """@fusee.workflow without arguments: a workflow named by the function's __qualname__, version 1."""

    @fusee.workflow
    def doubler(ctx, x):
        return ctx.step("double", lambda: x * 2)

    assert isinstance(doubler, fusee.Workflow)
    assert (doubler.name, doubler.version) == (doubler.fn.__qualname__, 1)
    assert doubler.name.endswith("doubler")
    with fusee.Engine.open(None, workflows=[doubler]) as eng:
        assert eng.start(doubler, "b", 21).result(timeout=30) == 42


def test_workflow_with_arguments_and_no_name_is_named_after_the_function():
    """@fusee.workflow(version=2): the function's __qualname__ again, at that version; a bad name is a
    TypeError at the decorator."""
    wf = fusee.workflow(version=2)(bare_body)
    assert (wf.name, wf.version) == ("bare_body", 2)
    assert fusee.workflow("named", version=3)(bare_body).name == "named"
    for bad in (5, "", b"x"):
        with pytest.raises(TypeError):
            fusee.workflow(bad)
