"""Laws and examples for fusee.records: the journal's records and their canonical encoding."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import codec, records
from fusee.errors import NotSerializable
from fusee.records import (
    CHILD_STATUSES,
    OPTIONAL,
    PARENT_CLOSE,
    Child,
    ChildDone,
    Send,
    DONE_STATUSES,
    KINDS,
    STEP_STATUSES,
    VALUE_KINDS,
    WAIT_OUTCOMES,
    Attempt,
    Cancel,
    Done,
    Fired,
    Signal,
    Start,
    Step,
    Timer,
    Value,
    Wait,
    Waited,
    OUTCOMES,
    Update,
    UpdateDone,
    Awaiting,
    AsyncStarted,
    Settled,
    Paused,
    Resumed,
    Chunk,
    StreamClose,
    decode_record,
    encode_record,
    kind_of,
)

SETTINGS = settings(max_examples=100, deadline=None)


@codec.register(name="test.records.Quote")
@dataclasses.dataclass(frozen=True)
class Quote:
    amount: int
    currency: str


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
payloads = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    | st.builds(Quote, st.integers(), st.text(max_size=4)),
    max_leaves=20,
)
counts = st.integers(0, 2**63)
names = st.text(max_size=12)
times = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**40), 2**40).map(float)

any_record = st.one_of(
    st.builds(Start, counts, names, names, counts, times, payloads, payloads),
    st.builds(
        Start, counts, names, names, counts, times, payloads, payloads, st.none() | times, payloads, payloads
    ),
    st.builds(Child, counts, counts, names, names, payloads, st.sampled_from(PARENT_CLOSE), st.none() | times,
              st.none() | times),
    st.builds(ChildDone, counts, counts, st.sampled_from(CHILD_STATUSES), payloads),
    st.builds(Send, counts, counts, names, names, payloads),
    st.builds(Step, counts, counts, names, counts, st.sampled_from(STEP_STATUSES), payloads),
    st.builds(Attempt, counts, counts, names, counts, times, payloads),
    st.builds(Timer, counts, counts, names, times),
    st.builds(Fired, counts, counts),
    st.builds(Signal, counts, names, st.none() | st.text(max_size=8) | counts, payloads),
    st.builds(Wait, counts, counts, names, st.none() | times),
    st.builds(Waited, counts, counts, st.sampled_from(WAIT_OUTCOMES), payloads),
    st.builds(Value, counts, counts, st.sampled_from(VALUE_KINDS), payloads),
    st.builds(Cancel, counts, payloads, st.none() | names),
    st.builds(Done, counts, st.sampled_from(DONE_STATUSES), times, payloads),
    st.builds(Update, counts, names, names, payloads),
    st.builds(UpdateDone, counts, names, st.sampled_from(OUTCOMES), payloads),
    st.builds(Awaiting, counts, counts, names, names),
    st.builds(AsyncStarted, counts, counts),
    st.builds(Settled, counts, counts, st.sampled_from(OUTCOMES), payloads),
    st.builds(Paused, counts, counts, names, counts, payloads),
    st.builds(Resumed, counts, counts),
    st.builds(Chunk, counts, counts, names, counts, st.none() | names, payloads),
    st.builds(StreamClose, counts, counts, names, st.none() | names),
)


# -- laws ----------------------------------------------------------------------------


@SETTINGS
@given(any_record)
def test_every_record_round_trips(r):
    """decode_record(encode_record(r)) == r for every kind and any payload."""
    assert r == decode_record(encode_record(r))


@SETTINGS
@given(any_record)
def test_encoding_is_deterministic(r):
    """The same record, or its decoded copy, always gives the same bytes."""
    once = encode_record(r)
    assert (once, once) == (encode_record(r), encode_record(decode_record(once)))


@SETTINGS
@given(any_record)
def test_encoding_is_a_json_object_with_t_then_fields(r):
    """The body is a JSON object: "t" (the kind) first, then the fields in declaration order."""
    obj = json.loads(encode_record(r))
    optional = OPTIONAL.get(type(r), ())
    expected = ["t"] + [f.name for f in dataclasses.fields(r) if not (f.name in optional and getattr(r, f.name) is None)]
    assert (expected, kind_of(r)) == (list(obj), obj["t"])


@SETTINGS
@given(any_record, st.data())
def test_a_missing_field_raises_value_error(r, data):
    """Dropping any field but an optional one from a body makes it malformed."""
    obj = json.loads(encode_record(r))
    del obj[data.draw(st.sampled_from(sorted(k for k in obj if k not in OPTIONAL.get(type(r), ()))))]
    with pytest.raises(ValueError):
        decode_record(json.dumps(obj).encode())


@SETTINGS
@given(any_record, st.data())
def test_a_field_of_the_wrong_type_raises_value_error(r, data):
    """A non-payload field given a value of the wrong type makes the body malformed."""
    obj = json.loads(encode_record(r))
    fixed = [k for k in obj if k not in records.PAYLOADS[obj["t"]]]
    key = data.draw(st.sampled_from(fixed))
    obj[key] = data.draw(st.sampled_from([[1], {"x": 1}, True, -1, "nope", 1.5]).filter(lambda v: not _fits(key, v)))
    with pytest.raises(ValueError):
        decode_record(json.dumps(obj).encode())


def _fits(key, v):
    """Whether v is, by chance, a valid value for field key (then the test would not be about a wrong type)."""
    if key == "dedup":
        return v in (-1, "nope") and type(v) is not bool
    if key in ("name", "id", "wtype", "by", "target", "secret", "stream", "step"):
        return type(v) is str
    if key in ("started", "retry_at", "fire_at", "deadline", "finished", "at") or (key == "deadline" and v is None):
        return type(v) in (int, float)
    return False


@SETTINGS
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_value_error(data):
    """Any bytes either decode to a record or raise ValueError, nothing else."""
    try:
        r = decode_record(data)
    except ValueError:
        return
    assert type(r) in KINDS.values()


# -- examples ------------------------------------------------------------------------


def test_example_step_encoding():
    """A Step with a dataclass payload, byte for byte."""
    expected = (
        b'{"t":"step","run":7,"seq":2,"name":"quote","attempt":1,"status":"ok",'
        b'"payload":{"$dc":"test.records.Quote","fields":{"amount":30,"currency":"EUR"}}}'
    )
    assert expected == encode_record(Step(7, 2, "quote", 1, "ok", Quote(30, "EUR")))


def test_example_start_encoding():
    """A Start, byte for byte."""
    expected = (
        b'{"t":"start","run":1,"id":"order-1","wtype":"checkout","version":1,'
        b'"started":1700000000.5,"input":{"items":[1,2]},"policy":["fail","fail"]}'
    )
    assert expected == encode_record(Start(1, "order-1", "checkout", 1, 1700000000.5, {"items": [1, 2]}, ["fail", "fail"]))


def test_optional_start_fields_are_left_out_when_none_and_read_back_as_none():
    """A Start without deadline/parent/origin encodes as before them; with them, they follow ``policy``."""
    old = Start(1, "a", "w", 1, 5.0, None, ["fail", "fail"])
    assert b"deadline" not in encode_record(old) and decode_record(encode_record(old)) == old
    new = Start(1, "a", "w", 1, 5.0, None, ["fail", "fail"], 9.0, {"shard": 0, "run": 2, "seq": 3, "id": "p"}, None)
    assert decode_record(encode_record(new)) == new
    assert list(json.loads(encode_record(new)))[-2:] == ["deadline", "parent"]


def test_a_child_without_at_encodes_as_before_it():
    """Child's ``at`` (when the parent asked) is optional: absent when None, so older journals read the same."""
    old = Child(1, 2, "kid", "w", None, "terminate", None)
    assert b'"at"' not in encode_record(old) and decode_record(encode_record(old)) == old
    assert decode_record(b'{"t":"child","run":1,"seq":2,"id":"kid","wtype":"w","input":null,'
                         b'"parent_close":"terminate","deadline":null}') == old
    new = Child(1, 2, "kid", "w", None, "terminate", None, 12.5)
    assert decode_record(encode_record(new)) == new and list(json.loads(encode_record(new)))[-1] == "at"


def test_kinds_are_lowercase_class_names():
    """KINDS maps each lowercase class name to its class."""
    expected = ["start", "step", "attempt", "timer", "fired", "signal", "wait", "waited", "value", "cancel", "done"]
    expected += ["child", "childdone", "send"]
    expected += ["update", "updatedone", "awaiting", "asyncstarted", "settled", "paused", "resumed"]
    expected += ["chunk", "streamclose"]
    assert expected == list(KINDS)
    assert all(KINDS[k].__name__.lower() == k for k in KINDS)


def test_records_are_frozen_and_slotted():
    """Records cannot be changed and have no __dict__."""
    r = Fired(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seq = 3  # type: ignore[misc]
    assert not hasattr(r, "__dict__")


def test_integer_times_decode_as_floats():
    """A time written as an integer comes back as a float."""
    r = decode_record(b'{"t":"timer","run":1,"seq":0,"name":"pause","fire_at":5}')
    assert (Timer(1, 0, "pause", 5.0), float) == (r, type(r.fire_at))


def test_tuples_in_payloads_come_back_as_lists():
    """A tuple payload decodes as a list."""
    assert [1, 2] == decode_record(encode_record(Done(1, "completed", 0.0, (1, 2)))).payload


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'"step"',
        b"{}",
        b'{"t":"nope","run":1}',
        b'{"t":7,"run":1}',
        b'{"t":"fired","run":1}',
        b'{"t":"fired","run":1,"seq":2,"extra":0}',
        b'{"t":"fired","run":-1,"seq":2}',
        b'{"t":"fired","run":true,"seq":2}',
        b'{"t":"fired","run":1.0,"seq":2}',
        b'{"t":"step","run":1,"seq":0,"name":"a","attempt":1,"status":"maybe","payload":null}',
        b'{"t":"waited","run":1,"seq":0,"outcome":"late","payload":null}',
        b'{"t":"value","run":1,"seq":0,"kind":"clock","value":1}',
        b'{"t":"done","run":1,"status":"ok","finished":1.0,"payload":null}',
        b'{"t":"timer","run":1,"seq":0,"name":"a","fire_at":"soon"}',
        b'{"t":"timer","run":1,"seq":0,"name":"a","fire_at":1e999}',
        b'{"t":"wait","run":1,"seq":0,"name":"a","deadline":NaN}',
        b'{"t":"fired","run":1,"seq":2,"seq":2}',
        b'{"t":"step","run":1,"seq":0,"name":"a","attempt":1,"status":"ok","payload":{"$dc":"x"}}',
        b"\x80",
        b"",
    ],
)
def test_malformed_bodies_raise_value_error(body):
    """Each malformed body raises ValueError, never anything else."""
    with pytest.raises(ValueError):
        decode_record(body)


def test_decode_never_unpickles():
    """A pickle is just malformed bytes."""
    import pickle

    with pytest.raises(ValueError):
        decode_record(pickle.dumps(Fired(1, 2)))


def test_unregistered_dataclass_names_decode_as_unknown():
    """A payload naming a class not registered here decodes as codec.Unknown, not an error."""
    r = decode_record(b'{"t":"signal","run":1,"name":"s","dedup":null,"payload":{"$dc":"gone.X","fields":{"a":1}}}')
    assert Signal(1, "s", None, codec.Unknown("gone.X", {"a": 1})) == r


def test_refused_payload_names_the_field_path():
    """A payload the codec refuses raises NotSerializable with the field's path."""
    with pytest.raises(NotSerializable) as info:
        encode_record(Step(1, 0, "a", 1, "ok", {"items": [0, {1}]}))
    assert "payload['items'][1]" == info.value.path


def test_lone_surrogate_in_a_payload_names_the_field():
    """A string UTF-8 refuses is reported at its field's path."""
    with pytest.raises(NotSerializable) as info:
        encode_record(Value(1, 0, "uuid", ["ok", "\udc00"]))
    assert "value[1]" == info.value.path


@pytest.mark.parametrize(
    "r",
    [
        Fired(-1, 0),
        Fired(True, 0),
        Step(1, 0, "a", 1, "maybe", None),
        Timer(1, 0, "a", float("nan")),
        Wait(1, 0, 3, None),  # type: ignore[arg-type]
        Signal(1, "s", 1.5, None),
        Cancel(1, None, 3),  # type: ignore[arg-type]
    ],
)
def test_encode_refuses_fields_of_the_wrong_type(r):
    """encode_record raises TypeError for a non-payload field of the wrong type."""
    with pytest.raises(TypeError):
        encode_record(r)


def test_encode_refuses_non_records():
    """Only records encode."""
    with pytest.raises(TypeError):
        encode_record({"t": "fired", "run": 1, "seq": 0})  # type: ignore[arg-type]


def test_all_lists_public_names():
    """Every name in __all__ exists."""
    assert [] == [n for n in records.__all__ if not hasattr(records, n)]


# -- the fast encoding path agrees with the full one ----------------------------------

odd_payloads = st.recursive(
    scalars
    | st.sampled_from([float("nan"), float("inf"), b"x", {1, 2}, "\ud800", True, 0.0, -0.0, 1e308]) | st.just(5000).map(lambda n: 10**n)
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=6),
    lambda inner: st.lists(inner, max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.sampled_from(["$dc", "$dict", "fields", "a", "\u00e9", "\ud800"]) | st.text(max_size=4), inner, max_size=4)
    | st.builds(Quote, st.integers(), st.text(max_size=4)),
    max_leaves=20,
)
odd_names = names | st.sampled_from(["\ud800", "\u2028", '"\\', "\x00\x1f"])
odd_counts = counts | st.sampled_from([-1, True, 1.0]) | st.just(5000).map(lambda n: 10**n)

odd_record = st.one_of(
    st.builds(Start, odd_counts, odd_names, odd_names, odd_counts, times | st.sampled_from([2**63, 5, True]), odd_payloads, odd_payloads),
    st.builds(Step, odd_counts, odd_counts, odd_names, odd_counts, st.sampled_from(STEP_STATUSES + ("OK", None)), odd_payloads),
    st.builds(Attempt, counts, counts, odd_names, counts, times | st.just(float("nan")), odd_payloads),
    st.builds(Timer, counts, odd_counts, odd_names, times),
    st.builds(Fired, odd_counts, counts),
    st.builds(Signal, counts, odd_names, st.none() | st.text(max_size=8) | counts | st.just(1.5), odd_payloads),
    st.builds(Wait, counts, counts, names, st.none() | times | st.just("soon")),
    st.builds(Waited, counts, counts, st.sampled_from(WAIT_OUTCOMES), odd_payloads),
    st.builds(Value, counts, counts, st.sampled_from(VALUE_KINDS), odd_payloads),
    st.builds(Cancel, counts, odd_payloads, st.none() | odd_names | st.just(3)),
    st.builds(Done, counts, st.sampled_from(DONE_STATUSES), times, odd_payloads),
)


def _outcome(f, *args):
    try:
        return ("ok", f(*args))
    except NotSerializable as e:
        return ("refused", e.path, e.why)
    except (TypeError, ValueError) as e:
        return (type(e).__name__, str(e))


@settings(max_examples=300, deadline=None)
@given(odd_record)
def test_encode_record_fast_path_matches_the_full_path(r):
    """The fast encoding gives the full path's bytes, or its very error (same path), for any record."""
    assert _outcome(encode_record, r) == _outcome(records._encode_full, r)


def test_cyclic_and_deep_payloads_take_the_full_path():
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotSerializable) as info:
        encode_record(Step(1, 2, "s", 1, "ok", {"a": [loop]}))
    assert info.value.path == "payload['a'][0][0]"
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert encode_record(Step(1, 2, "s", 1, "ok", deep)) == records._encode_full(Step(1, 2, "s", 1, "ok", deep))


# -- check_record: what an in-memory journal does instead of encoding ----------------------------

_hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.just(10**5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.just("\udc80"),
    st.just("é" * 300),
    st.sets(st.integers(), max_size=2),
    st.binary(max_size=3),
    st.lists(st.one_of(st.integers(), st.text(max_size=3), st.just("\udc80"), st.floats()), max_size=20),
    st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.just("\udc80")),
                    st.one_of(st.integers(), st.text(max_size=3), st.none(), st.just(float("nan"))), max_size=20),
)


def _raised(fn, *args):
    try:
        fn(*args)
    except Exception as exc:  # the error's type and path are what must agree
        return (type(exc), getattr(exc, "path", None))
    return None


@settings(max_examples=200, deadline=None)
@given(payload=_hostile, name=st.one_of(st.text(max_size=4), st.just("\udc80")), run=st.one_of(st.integers(-1, 3), st.just("1")))
def test_check_record_refuses_exactly_what_encode_record_refuses(payload, name, run):
    """check_record (in memory: no bytes kept) raises what encode_record would, and nothing when it would not."""
    recs = [
        Step(run, 0, name, 1, "ok", payload),
        records.new_step(0, 3, name, 1, "ok", payload),
        Start(run, name, "t", 1, 1.0, payload, ["fail", "fail"], None, {"shard": 0, "id": name}, None),
        Done(run, "completed", 2.0, payload),
        Signal(0, name, None, payload),
    ]
    for rec in recs:
        assert _raised(records.check_record, rec) == _raised(records.encode_record, rec), rec
    assert _raised(records.check_step, name, payload) == _raised(records.encode_record, Step(0, 0, name, 1, "ok", payload))


def test_new_step_is_the_same_step():
    a, b = records.new_step(1, 2, "s", 1, "ok", [1]), Step(1, 2, "s", 1, "ok", [1])
    assert (type(a), a, hash(records.new_step(1, 2, "s", 1, "ok", 5))) == (Step, b, hash(Step(1, 2, "s", 1, "ok", 5)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seq = 3  # type: ignore[misc]


@settings(max_examples=150, deadline=None)
@given(payload=_hostile, name=st.one_of(st.text(max_size=4), st.just("\udc80")), seq=st.integers(0, 2**70))
def test_encode_step_writes_what_encode_record_writes(payload, name, seq):
    """encode_step (a step the engine recorded) gives the bytes encode_record gives, or raises the same."""
    def both(fn, *args):
        try:
            return ("ok", fn(*args))
        except Exception as exc:
            return (type(exc), getattr(exc, "path", None))

    assert both(records.encode_step, 3, seq, name, 2, payload) == both(
        records.encode_record, Step(3, seq, name, 2, "ok", payload)
    )
