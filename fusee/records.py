"""The journal's records, and their canonical encoding (docs/journal.md, "Records").

Each record is a frozen, slotted dataclass whose first field is ``run``, the
numeric run ID (an ``int`` >= 0; the string workflow ID appears only in
:class:`Start`).  Times are unix seconds (finite ``int`` or ``float``; they
decode as ``float``).  ``seq`` is the operation's number in call order
(``int`` >= 0).  *Payload* fields (:data:`PAYLOADS`) hold codec values
(:mod:`fusee.codec`: JSON values, tuples, registered dataclasses).

:func:`encode_record` writes a record as one compact UTF-8 JSON object:
``{"t": <kind>, <field>: <value>, ...}`` with the fields in declaration
order and payload fields in the codec's tree form.  The kinds are the class
names in lowercase (:data:`KINDS`).  It raises ``TypeError`` for a field of
the wrong type or a non-record, and :class:`fusee.errors.NotSerializable`
(path ``<field>...``, e.g. ``payload['items'][2]``) for a payload the codec
refuses.  The same record always gives the same bytes.

:func:`decode_record` reads those bytes back (``decode_record(encode_record(r))
== r``, tuples aside, which come back as lists).  It raises ``ValueError`` for
anything malformed: bytes that are not one JSON object, no or an unknown
``"t"``, a missing or extra field, a field of the wrong type or outside its
choices (:data:`STEP_STATUSES`, :data:`WAIT_OUTCOMES`, :data:`VALUE_KINDS`,
:data:`DONE_STATUSES`, :data:`CHILD_STATUSES`, :data:`PARENT_CLOSE`, :data:`OUTCOMES`).  :data:`OPTIONAL` fields
are written only when not ``None`` and read as ``None`` when absent.  It evaluates nothing and unpickles nothing: the only
code it runs is a registered dataclass's constructor (a dataclass name not
registered decodes as :class:`fusee.codec.Unknown`).  The journal turns its
``ValueError`` into :class:`fusee.errors.Corrupt` with the location.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Final, Union

from . import codec
from .errors import NotSerializable

__all__ = [
    "Start",
    "Step",
    "Attempt",
    "Timer",
    "Fired",
    "Signal",
    "Wait",
    "Waited",
    "Value",
    "Cancel",
    "Done",
    "Child",
    "ChildDone",
    "Send",
    "Update",
    "UpdateDone",
    "Awaiting",
    "AsyncStarted",
    "Settled",
    "Paused",
    "Resumed",
    "Chunk",
    "StreamClose",
    "Record",
    "KINDS",
    "PAYLOADS",
    "STEP_STATUSES",
    "WAIT_OUTCOMES",
    "VALUE_KINDS",
    "DONE_STATUSES",
    "CHILD_STATUSES",
    "PARENT_CLOSE",
    "OUTCOMES",
    "OPTIONAL",
    "kind_of",
    "encode_record",
    "check_record",
    "check_step",
    "encode_step",
    "decode_record",
    "new_step",
]

STEP_STATUSES: Final = ("ok", "error")
WAIT_OUTCOMES: Final = ("signal", "timeout")
VALUE_KINDS: Final = ("now", "random", "uuid")
DONE_STATUSES: Final = ("completed", "failed", "cancelled", "terminated", "continued", "timed_out")
CHILD_STATUSES: Final = ("completed", "failed", "cancelled", "terminated", "timed_out", "started")
PARENT_CLOSE: Final = ("terminate", "request_cancel", "abandon")
OUTCOMES: Final = ("ok", "error")  # an UpdateDone's and a Settled's status


@dataclass(frozen=True, slots=True)
class Start:
    """A run began: workflow ID ``id``, type ``wtype`` at ``version``, its ``input`` and IdPolicy (``policy``, plain form).

    Optional (``None`` when absent; not written then, so older journals read the same):
    ``deadline`` when the run times out; ``parent`` the run that started it as a child,
    ``{"shard", "run", "seq", "id", "wait"}`` (its ``Child`` operation; ``wait``: it waits for the end); ``origin`` the run it
    continues as new, ``{"run": <run number>}``.
    """

    run: int
    id: str
    wtype: str
    version: int
    started: float
    input: Any
    policy: Any
    deadline: float | None = None
    parent: Any = None
    origin: Any = None


@dataclass(frozen=True, slots=True)
class Step:
    """Step ``seq`` named ``name`` ended on attempt ``attempt``: ``status`` "ok" (payload = result) or "error" (payload = failure)."""

    run: int
    seq: int
    name: str
    attempt: int
    status: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Attempt:
    """Attempt ``attempt`` of step ``seq`` failed with ``error``; the next is due at ``retry_at``."""

    run: int
    seq: int
    name: str
    attempt: int
    retry_at: float
    error: Any


@dataclass(frozen=True, slots=True)
class Timer:
    """Operation ``seq`` (a sleep named ``name``) set a timer firing at ``fire_at``."""

    run: int
    seq: int
    name: str
    fire_at: float


@dataclass(frozen=True, slots=True)
class Fired:
    """The timer of operation ``seq`` fired."""

    run: int
    seq: int


@dataclass(frozen=True, slots=True)
class Signal:
    """Signal ``name`` arrived with ``payload``; ``dedup`` (str, int or None) makes a resend a no-op."""

    run: int
    name: str
    dedup: Any
    payload: Any


@dataclass(frozen=True, slots=True)
class Wait:
    """Operation ``seq`` waits for signal ``name`` until ``deadline`` (None: no timeout)."""

    run: int
    seq: int
    name: str
    deadline: float | None


@dataclass(frozen=True, slots=True)
class Waited:
    """The wait ``seq`` ended: ``outcome`` "signal" (payload = the signal's value) or "timeout" (payload None)."""

    run: int
    seq: int
    outcome: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Value:
    """Operation ``seq`` recorded a nondeterministic value of ``kind`` ("now", "random", "uuid")."""

    run: int
    seq: int
    kind: str
    value: Any


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancellation was requested with ``reason`` by ``by`` (str or None)."""

    run: int
    reason: Any
    by: str | None


@dataclass(frozen=True, slots=True)
class Done:
    """The run ended with ``status`` at ``finished``: its result, or its failure, as ``payload``."""

    run: int
    status: str
    finished: float
    payload: Any


@dataclass(frozen=True, slots=True)
class Child:
    """Operation ``seq`` started (or attached to) child run ``id`` of type ``wtype`` with ``input``;
    ``parent_close`` (one of :data:`PARENT_CLOSE`) is what the parent's end does to it; ``deadline`` its
    timeout; ``at`` (optional) when the parent asked for it (a run of that ID that ended since was the
    one it attached to)."""

    run: int
    seq: int
    id: str
    wtype: str
    input: Any
    parent_close: str
    deadline: float | None
    at: float | None = None


@dataclass(frozen=True, slots=True)
class ChildDone:
    """The child of operation ``seq`` ended with ``status`` (:data:`CHILD_STATUSES`); ``payload`` is its Done's.

    ``"started"`` (payload None) completes a ``start_child``: the child's Start is durable, nobody waits for its end."""

    run: int
    seq: int
    status: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Send:
    """Operation ``seq`` sent signal ``name`` with ``payload`` to workflow ID ``target`` (dedup ``"<id>/<run>/<seq>"``)."""

    run: int
    seq: int
    target: str
    name: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Update:
    """An update ``name`` with ``payload`` and update ID ``id`` was accepted (its validator passed): its handler
    runs at this place in the journal (a delivery, like a ``Cancel``).  Written by the run's own process."""

    run: int
    id: str
    name: str
    payload: Any


@dataclass(frozen=True, slots=True)
class UpdateDone:
    """The handler of update ``id`` ended: ``status`` "ok" (payload = its result) or "error" (payload = failure)."""

    run: int
    id: str
    status: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Awaiting:
    """Operation ``seq`` (``ctx.step_async`` named ``name``) waits for an outside completion; ``secret`` is the
    random part of its completion token (recorded, so the token survives a crash)."""

    run: int
    seq: int
    name: str
    secret: str


@dataclass(frozen=True, slots=True)
class AsyncStarted:
    """The ``start_fn`` of async operation ``seq`` returned (it is not run again on replay)."""

    run: int
    seq: int


@dataclass(frozen=True, slots=True)
class Settled:
    """Async operation ``seq`` was settled: ``status`` "ok" (``engine.complete``: payload = its value) or "error"
    (``engine.fail``, or ``start_fn`` raised: payload = the failure)."""

    run: int
    seq: int
    status: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Paused:
    """Attempt ``attempt`` of step ``seq`` failed with ``error`` and used up the step's retry budget: the run is
    paused (``Engine.open(on_exhausted="pause")``) until a ``Resumed``."""

    run: int
    seq: int
    name: str
    attempt: int
    error: Any


@dataclass(frozen=True, slots=True)
class Resumed:
    """The paused step ``seq`` is retried with a fresh retry budget (``engine.resume``)."""

    run: int
    seq: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """Chunk number ``index`` (0, 1, 2, ... per stream) of the run's stream ``stream``, holding ``payload``.

    ``step`` ``None``: written by workflow code, operation ``seq`` (``ctx.stream(name).write``), which this
    record completes.  ``step`` a name: written by the body of step ``seq`` of that name while it ran (the
    step's progress, like an ``Attempt``; a re-run body's writes at positions this step recorded already
    are not recorded again)."""

    run: int
    seq: int
    stream: str
    index: int
    step: str | None
    payload: Any


@dataclass(frozen=True, slots=True)
class StreamClose:
    """The run's stream ``stream`` was closed: readers end after its chunks.  ``step`` as in :class:`Chunk`
    (``None``: operation ``seq`` of workflow code, which this completes)."""

    run: int
    seq: int
    stream: str
    step: str | None


Record = Union[
    Start, Step, Attempt, Timer, Fired, Signal, Wait, Waited, Value, Cancel, Done, Child, ChildDone, Send,
    Update, UpdateDone, Awaiting, AsyncStarted, Settled, Paused, Resumed, Chunk, StreamClose,
]

KINDS: Final[dict[str, type]] = {
    cls.__name__.lower(): cls
    for cls in (
        Start, Step, Attempt, Timer, Fired, Signal, Wait, Waited, Value, Cancel, Done, Child, ChildDone, Send,
        Update, UpdateDone, Awaiting, AsyncStarted, Settled, Paused, Resumed, Chunk, StreamClose,
    )
}
"""Each record kind (the ``"t"`` of its encoding) to its class."""

_KIND_OF: Final[dict[type, str]] = {cls: kind for kind, cls in KINDS.items()}


def kind_of(record: Any) -> str:
    """The kind of ``record`` (``"step"`` for a :class:`Step`); ``TypeError`` for a non-record."""
    kind = _KIND_OF.get(type(record))
    if kind is None:
        raise TypeError(f"not a record: {record!r}")
    return kind


# -- field checks ------------------------------------------------------------------------

_Check = Callable[[Any], bool]


def _count(x: Any) -> bool:
    return type(x) is int and x >= 0


def _text(x: Any) -> bool:
    return type(x) is str


def _time(x: Any) -> bool:
    return (type(x) is float and math.isfinite(x)) or (type(x) is int and -(2**63) < x < 2**63)


def _opt_time(x: Any) -> bool:
    return x is None or _time(x)


def _opt_text(x: Any) -> bool:
    return x is None or type(x) is str


def _dedup(x: Any) -> bool:
    return x is None or type(x) in (str, int)


def _among(choices: tuple[str, ...]) -> _Check:
    def check(x: Any) -> bool:
        return type(x) is str and x in choices

    check.__doc__ = " | ".join(map(repr, choices))
    return check


_PAYLOAD: Final = object()  # the marker of a payload field: any codec value

_SCHEMA: Final[dict[type, tuple[tuple[str, Any, str], ...]]] = {
    Start: (
        ("run", _count, "an int >= 0"),
        ("id", _text, "a str"),
        ("wtype", _text, "a str"),
        ("version", _count, "an int >= 0"),
        ("started", _time, "a finite number"),
        ("input", _PAYLOAD, ""),
        ("policy", _PAYLOAD, ""),
        ("deadline", _opt_time, "a finite number or None"),
        ("parent", _PAYLOAD, ""),
        ("origin", _PAYLOAD, ""),
    ),
    Step: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("attempt", _count, "an int >= 0"),
        ("status", _among(STEP_STATUSES), f"one of {STEP_STATUSES}"),
        ("payload", _PAYLOAD, ""),
    ),
    Attempt: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("attempt", _count, "an int >= 0"),
        ("retry_at", _time, "a finite number"),
        ("error", _PAYLOAD, ""),
    ),
    Timer: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("fire_at", _time, "a finite number"),
    ),
    Fired: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
    ),
    Signal: (
        ("run", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("dedup", _dedup, "a str, an int or None"),
        ("payload", _PAYLOAD, ""),
    ),
    Wait: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("deadline", _opt_time, "a finite number or None"),
    ),
    Waited: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("outcome", _among(WAIT_OUTCOMES), f"one of {WAIT_OUTCOMES}"),
        ("payload", _PAYLOAD, ""),
    ),
    Value: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("kind", _among(VALUE_KINDS), f"one of {VALUE_KINDS}"),
        ("value", _PAYLOAD, ""),
    ),
    Cancel: (
        ("run", _count, "an int >= 0"),
        ("reason", _PAYLOAD, ""),
        ("by", _opt_text, "a str or None"),
    ),
    Done: (
        ("run", _count, "an int >= 0"),
        ("status", _among(DONE_STATUSES), f"one of {DONE_STATUSES}"),
        ("finished", _time, "a finite number"),
        ("payload", _PAYLOAD, ""),
    ),
    Child: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("id", _text, "a str"),
        ("wtype", _text, "a str"),
        ("input", _PAYLOAD, ""),
        ("parent_close", _among(PARENT_CLOSE), f"one of {PARENT_CLOSE}"),
        ("deadline", _opt_time, "a finite number or None"),
        ("at", _opt_time, "a finite number or None"),
    ),
    ChildDone: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("status", _among(CHILD_STATUSES), f"one of {CHILD_STATUSES}"),
        ("payload", _PAYLOAD, ""),
    ),
    Send: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("target", _text, "a str"),
        ("name", _text, "a str"),
        ("payload", _PAYLOAD, ""),
    ),
    Update: (
        ("run", _count, "an int >= 0"),
        ("id", _text, "a str"),
        ("name", _text, "a str"),
        ("payload", _PAYLOAD, ""),
    ),
    UpdateDone: (
        ("run", _count, "an int >= 0"),
        ("id", _text, "a str"),
        ("status", _among(OUTCOMES), f"one of {OUTCOMES}"),
        ("payload", _PAYLOAD, ""),
    ),
    Awaiting: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("secret", _text, "a str"),
    ),
    AsyncStarted: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
    ),
    Settled: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("status", _among(OUTCOMES), f"one of {OUTCOMES}"),
        ("payload", _PAYLOAD, ""),
    ),
    Paused: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("name", _text, "a str"),
        ("attempt", _count, "an int >= 0"),
        ("error", _PAYLOAD, ""),
    ),
    Resumed: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
    ),
    Chunk: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("stream", _text, "a str"),
        ("index", _count, "an int >= 0"),
        ("step", _opt_text, "a str or None"),
        ("payload", _PAYLOAD, ""),
    ),
    StreamClose: (
        ("run", _count, "an int >= 0"),
        ("seq", _count, "an int >= 0"),
        ("stream", _text, "a str"),
        ("step", _opt_text, "a str or None"),
    ),
}

OPTIONAL: Final[dict[type, frozenset[str]]] = {
    Start: frozenset(("deadline", "parent", "origin")),
    Child: frozenset(("at",)),
}
"""Each record class to its optional fields: written only when not ``None``, read as ``None`` when absent."""

PAYLOADS: Final[dict[str, tuple[str, ...]]] = {
    _KIND_OF[cls]: tuple(name for name, check, _ in fields if check is _PAYLOAD) for cls, fields in _SCHEMA.items()
}
"""Each kind to its payload fields (those holding codec values)."""

_TIMES: Final = frozenset({"started", "retry_at", "fire_at", "deadline", "finished"})

_fast_text = codec._fast_text
_encode_str = codec._encode_str

# Each record class to its fields with the JSON text before each value:
# '{"t":"<kind>","<first>":' for the first, ',"<name>":' for the others.
_FAST: Final[dict[type, tuple[tuple[str, Any, str], ...]]] = {
    cls: tuple(
        (name, check, (f'{{"t":"{_KIND_OF[cls]}",' if i == 0 else ",") + f'"{name}":')
        for i, (name, check, _) in enumerate(fields)
    )
    for cls, fields in _SCHEMA.items()
}


# -- a Step, quickly ------------------------------------------------------------------

_new = object.__new__
_set_run, _set_seq, _set_name, _set_attempt, _set_status, _set_payload = (
    Step.__dict__[f].__set__ for f in ("run", "seq", "name", "attempt", "status", "payload")
)


def new_step(run: int, seq: int, name: str, attempt: int, status: str, payload: Any) -> Step:
    """``Step(run, seq, name, attempt, status, payload)``, built in half the time (one per step): the
    slots are set directly rather than through the frozen dataclass's ``__init__``.  The same object."""
    rec = _new(Step)
    _set_run(rec, run)
    _set_seq(rec, seq)
    _set_name(rec, name)
    _set_attempt(rec, attempt)
    _set_status(rec, status)
    _set_payload(rec, payload)
    return rec


_start_setters = tuple(
    Start.__dict__[f].__set__
    for f in ("run", "id", "wtype", "version", "started", "input", "policy", "deadline", "parent", "origin")
)


def new_start(
    run: int, id: str, wtype: str, version: int, started: float, input: Any, policy: Any,
    deadline: Any, parent: Any, origin: Any,
) -> Start:
    """``Start(run, id, wtype, version, started, input, policy, deadline, parent, origin)`` (once per run),
    built as :func:`new_step` builds a Step: its slots set directly.  The same object."""
    rec = _new(Start)
    s_run, s_id, s_wtype, s_version, s_started, s_input, s_policy, s_deadline, s_parent, s_origin = _start_setters
    s_run(rec, run)
    s_id(rec, id)
    s_wtype(rec, wtype)
    s_version(rec, version)
    s_started(rec, started)
    s_input(rec, input)
    s_policy(rec, policy)
    s_deadline(rec, deadline)
    s_parent(rec, parent)
    s_origin(rec, origin)
    return rec


# -- encode / decode -----------------------------------------------------------------


def encode_record(record: Record) -> bytes:
    """The canonical encoding of ``record``: compact UTF-8 JSON ``{"t": kind, ...fields}``."""
    t = type(record)
    if t is Step:  # the common record, written directly
        run, seq, name, attempt, status = record.run, record.seq, record.name, record.attempt, record.status
        if (
            type(run) is int
            and run >= 0
            and type(seq) is int
            and seq >= 0
            and type(name) is str
            and type(attempt) is int
            and attempt >= 0
            and type(status) is str
            and (status == "ok" or status == "error")
        ):
            payload = _fast_text(record.payload)
            if payload is not None:
                try:
                    return (
                        f'{{"t":"step","run":{run:d},"seq":{seq:d},"name":{_encode_str(name)},'
                        f'"attempt":{attempt:d},"status":"{status}","payload":{payload}}}'
                    ).encode("utf-8")
                except (UnicodeEncodeError, ValueError):
                    pass  # a lone surrogate, or an int too long for str(): the full path says so
    else:
        fast = _FAST.get(t)
        if fast is not None:
            body = _encode_fast(record, fast)
            if body is not None:
                return body
    return _encode_full(record)


def encode_step(run: int, seq: int, name: str, attempt: int, payload: Any) -> bytes:
    """``encode_record(Step(run, seq, name, attempt, "ok", payload))`` for a step the engine recorded (its
    run, seq and attempt are ints >= 0 of its own): the same bytes, without checking those again."""
    text = _fast_text(payload)
    if text is not None and type(name) is str:
        try:
            return (
                f'{{"t":"step","run":{run:d},"seq":{seq:d},"name":{_encode_str(name)},'
                f'"attempt":{attempt:d},"status":"ok","payload":{text}}}'
            ).encode("utf-8")
        except (UnicodeEncodeError, ValueError):
            pass  # a lone surrogate: the full path says so
    return encode_record(Step(run, seq, name, attempt, "ok", payload))


def check_step(name: str, payload: Any) -> None:
    """:func:`check_record` for ``Step(run, seq, name, attempt, "ok", payload)`` whose run, seq and attempt
    are the engine's own (ints >= 0): only ``name`` and ``payload`` can be refused."""
    if type(payload) is int:  # _trivial's first case, inlined
        if -_BIG < payload < _BIG and type(name) is str and name.isascii():
            return
    elif _trivial(payload, 1) and type(name) is str and name.isascii():
        return
    encode_record(Step(0, 0, name, 1, "ok", payload))


def check_record(record: Record) -> None:
    """Raise what :func:`encode_record` would raise for ``record`` (``TypeError``, ``NotSerializable``), or
    nothing: an in-memory journal keeps no bytes, so a record whose fields pass their checks and whose
    payloads are plainly fine (:func:`_trivial`: an int, a short ASCII str, None, a bool, a small list of
    those or a small dict of them under ASCII keys) is not encoded at all; anything else is, the bytes dropped."""
    if type(record) is Step:
        run, seq, attempt, status, payload = record.run, record.seq, record.attempt, record.status, record.payload
        if (
            type(run) is int
            and run >= 0
            and type(seq) is int
            and seq >= 0
            and type(record.name) is str
            and type(attempt) is int
            and attempt >= 0
            and (status == "ok" or status == "error")
            and type(status) is str
            and _trivial(payload, 1)
            and record.name.isascii()
        ):
            return
    elif type(record) is Done:  # once per run
        run, status, finished = record.run, record.status, record.finished
        if (
            type(run) is int
            and 0 <= run < _BIG
            and type(status) is str
            and status in DONE_STATUSES
            and ((type(finished) is float and math.isfinite(finished)) or (type(finished) is int and -(2**63) < finished < 2**63))
            and _trivial(record.payload, 1)
        ):
            return
    elif type(record) is Start:  # once per run: the checks of its _SCHEMA entry (the loop below), spelled out
        run, id, wtype, version, started, deadline = (
            record.run, record.id, record.wtype, record.version, record.started, record.deadline
        )
        if (
            type(run) is int
            and 0 <= run < _BIG
            and type(id) is str
            and id.isascii()
            and type(wtype) is str
            and wtype.isascii()
            and type(version) is int
            and 0 <= version < _BIG
            and ((type(started) is float and math.isfinite(started)) or (type(started) is int and -(2**63) < started < 2**63))
            and (
                deadline is None
                or (type(deadline) is float and math.isfinite(deadline))
                or (type(deadline) is int and -(2**63) < deadline < 2**63)
            )
            and _trivial(record.input, 1)
            and _trivial(record.policy, 1)
            and _trivial(record.parent, 1)
            and _trivial(record.origin, 1)
        ):
            return
    else:
        fields = _SCHEMA.get(type(record))
        if fields is not None:
            for name, check, _ in fields:
                x = getattr(record, name)
                if check is _PAYLOAD:
                    if not _trivial(x, 1):
                        break
                elif not check(x) or (type(x) is str and not x.isascii()) or (type(x) is int and not -_BIG < x < _BIG):
                    break
            else:
                return
    encode_record(record)


_BIG = 10**300  # an int this small always has a str() (the limit is 4,300 digits)


def _trivial(x: Any, depth: int) -> bool:
    """Whether payload ``x`` is one the codec surely takes: None, a bool, an int of at most 300 digits,
    an ASCII str of under 256 characters, or (``depth`` 1) a list of at most 16 such or a dict of at most
    16 such under ASCII keys."""
    t = type(x)
    if t is int:
        return -_BIG < x < _BIG
    if x is None or t is bool:
        return True
    if t is str:
        return len(x) < 256 and x.isascii()
    if t is dict and depth and len(x) <= 16:
        for k, v in x.items():
            if type(k) is not str or len(k) >= 256 or not k.isascii() or not _trivial(v, 0):
                return False
        return True
    if t is list and depth and len(x) <= 16:
        for v in x:
            if not _trivial(v, 0):
                return False
        return True
    return False


def _encode_fast(record: Any, fields: tuple[tuple[str, Any, str], ...]) -> bytes | None:
    """``record``'s encoding when every field passes its check and every payload is plain JSON; else ``None``."""
    parts = []
    optional = OPTIONAL.get(type(record), ())
    for name, check, prefix in fields:
        x = getattr(record, name)
        if x is None and name in optional:
            continue
        if check is not _PAYLOAD and not check(x):
            return None
        text = _fast_text(x)
        if text is None:
            return None
        parts.append(prefix)
        parts.append(text)
    parts.append("}")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError:
        return None


def _encode_full(record: Record) -> bytes:
    """The canonical encoding, the long way: every field checked, payloads walked (errors name their path)."""
    kind = kind_of(record)
    tree: dict[str, Any] = {"t": kind}
    optional = OPTIONAL.get(type(record), ())
    for name, check, want in _SCHEMA[type(record)]:
        x = getattr(record, name)
        if x is None and name in optional:
            continue
        if check is _PAYLOAD:
            tree[name] = codec.to_tree(x, name)
        elif check(x):
            tree[name] = x
        else:
            raise TypeError(f"{kind}.{name} must be {want}, not {x!r}")
    try:
        return codec.dumps_tree(tree, kind)
    except NotSerializable as e:  # a lone surrogate: name the field, not the record
        for name, _, _ in _SCHEMA[type(record)]:
            if name not in tree:
                continue
            where = codec._bad_text(tree[name], name)
            if where:
                raise NotSerializable(e.value, e.why, where) from None
        raise


def decode_record(body: bytes | bytearray | memoryview) -> Record:
    """The record :func:`encode_record` wrote as ``body``; ``ValueError`` if malformed."""
    try:
        tree = codec._read_tree(body)
    except TypeError as e:
        raise ValueError(str(e)) from None
    if type(tree) is not dict:
        raise ValueError(f"a record is a JSON object, not {type(tree).__name__}")
    kind = tree.get("t")
    cls = KINDS.get(kind) if type(kind) is str else None
    if cls is None:
        raise ValueError(f"unknown record kind {kind!r}")
    schema = _SCHEMA[cls]
    optional = OPTIONAL.get(cls, frozenset())
    known = {name for name, _, _ in schema}
    if len(tree) != len(schema) + 1 and (
        not optional or any(k != "t" and k not in known for k in tree) or any(n not in tree for n in known - optional)
    ):
        missing = [name for name in known - optional if name not in tree]
        extra = [k for k in tree if k != "t" and k not in known]
        raise ValueError(f"{kind} record: missing {missing}, unexpected {extra}")
    args = []
    for name, check, want in schema:
        if name not in tree:
            if name in optional:
                args.append(None)
                continue
            raise ValueError(f"{kind} record: missing field {name!r}")
        x = tree[name]
        if check is _PAYLOAD:
            args.append(codec.from_tree(x))
        elif check(x):
            args.append(float(x) if name in _TIMES and x is not None else x)
        else:
            raise ValueError(f"{kind}.{name} must be {want}, not {x!r}")
    return cls(*args)
