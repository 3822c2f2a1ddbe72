"""The run machine: what one run's journal says each operation of its code resolves to.

Pure, no I/O and no clock (the caller passes ``now``, unix seconds): the
engine feeds a run's records in (:meth:`History.from_records` at recovery,
:meth:`Machine.record` for each record it appends live) and asks, for each
operation the workflow code starts, what to do (spec §1.5, §3.1-§3.5, §3.8).

Operations are numbered by call order (``seq`` 0, 1, 2, ...) and have a
*kind* and a *name*; the journal knows an operation by the records carrying
its ``seq``:

=========  ===================================  ==============================  =========
kind       name                                 begun / in progress             completed
=========  ===================================  ==============================  =========
``step``   the step's name                      ``Attempt`` (a failed attempt)  ``Step``
``sleep``  the sleep's name                     ``Timer`` (armed, ``fire_at``)  ``Fired``
``wait``   the signal's name                    ``Wait`` (armed, ``deadline``)  ``Waited``
``value``  ``"now"`` / ``"random"`` / ``"uuid"``  -                             ``Value``
``child``  the child's workflow ID              ``Child`` (started, ``deadline``) ``ChildDone``
``send``   the target's workflow ID             -                             ``Send``
``async``  the async step's name                ``Awaiting`` (token secret),    ``Settled``
                                                ``AsyncStarted`` (start_fn ran)
``chunk``  the stream's name                    -                               ``Chunk`` (``step`` None)
``close``  the stream's name                    -                               ``StreamClose`` (``step`` None)
=========  ===================================  ==============================  =========

**Streams.**  A run's streams are indexed by name (:meth:`History.stream`): its chunks in journal
order (a ``Chunk``'s ``index`` is the stream's length when it is added, so a chunk's place never
changes), and whether (and by which record) it was closed; nothing follows a close.  A chunk written by
workflow code is operation ``chunk`` (a completion, replayed to its index: never recorded twice); a
chunk written by a step body is that step's progress (``step`` names it: no delivery, like an
``Attempt``), and :meth:`History.step_chunks` counts them per stream, so a body run again (after a
crash or a failed attempt) skips the writes at the positions its earlier runs recorded
(:func:`step_write`: the recorded prefix is kept).  ``StreamClose`` likewise, as operation ``close``
or a step's progress.

A step's progress also holds ``Paused`` (a failed attempt that used up the retry budget: the run is
paused) and ``Resumed`` (retry with a fresh budget) records, in order with its ``Attempt`` records.

**Updates.**  An ``Update`` is a delivery numbered in journal order (like the ``Cancel``); its handler
runs at its place: the code asks :meth:`Machine.update_due` at each *check point* of operation
``seq`` (once the operation is numbered, before it takes its completion or the cancel, and at every
wake-up while it waits), and an update is due there when its turn comes before both the operation's
completion (or the operation has none yet) and an undelivered cancel.  The handler's operations take
the next numbers.  :meth:`Machine.number` then :meth:`Machine.resolve` are :meth:`Machine.begin` in
two halves, so the code can run due updates between them.  ``UpdateDone`` (the handler's outcome)
is no delivery: it is indexed by update ID (:meth:`History.update_outcome`).

A child's outcome is its ``ChildDone``: ``"completed"`` replays its result, any
other status raises :class:`~fusee.errors.ChildFailed` ``(id, failure, status)``
(:func:`child_failure`).  A ``Send`` replays to ``None`` (the engine delivers it
to its target as a signal with dedup :func:`send_dedup`).

:meth:`Machine.begin` answers :class:`Replay` (the completion is recorded:
hand it back) or :class:`Live` (run it, going on from what is recorded:
failed attempts, an armed timer or wait); a recorded operation of another
kind or name at that position raises :class:`~fusee.errors.DeterminismError`
``(position, (kind, name) recorded, (kind, name) begun)``.

*Deliveries* are the completions (``Step``, ``Fired``, ``Waited``,
``Value``) and the run's first ``Cancel``, numbered in journal order by
``turn``: the engine hands them to the code one at a time in that order
(sequential code gets them in order by itself; parallel branches hold a
:class:`Replay` until every earlier turn was handed out).

Cancel is delivered at its place in the journal: the operation the code is
blocked on when the ``Cancel`` is recorded, or else the next one it begins,
raises :class:`~fusee.errors.Cancelled` (once; later operations, the
compensation, go on normally).  On replay that is the first operation begun
whose completion is not recorded before the ``Cancel``.

**Journal order decides, live as on replay.**  Live code takes what is
already recorded in the order it was recorded, exactly as replay will: when
an operation's completion and the run's ``Cancel`` may both be recorded
(a child's ``ChildDone`` recorded by the shard server, a ``Step`` or a
``ChildDone("started")`` appended while a cancel came in), the live code
asks :meth:`Machine.next_for` (``"completion"`` if the completion has the
lower LSN, ``"cancel"`` if the ``Cancel`` does, ``None`` if neither is
recorded) and never decides by a fixed order of checks; :meth:`Machine.begin`
decides by the same function on replay.  Only a record counts: a ``Signal``
received before the ``Cancel`` does not complete a wait (its ``Waited`` would
follow the ``Cancel``), nor does a timer's time having come (its ``Fired``
would follow it).

Signals are received in journal order, deduplicated by ``dedup`` (a later
``Signal`` with a ``dedup`` already seen is ignored; ``None`` never
deduplicates).  A ``Waited`` with outcome ``"signal"`` consumes the oldest
unconsumed signal with its wait's name; signals sent before the wait are
kept.  Received = consumed + unconsumed, in order, always.

The *gate* is the LSN of the run's most recent record: a step body with
effects starts only once the journal is durable through it; ``read_only``
steps don't wait.

Every record is checked as it is added, before anything changes: a record
the history cannot hold (a ``Fired`` without its ``Timer``, a second
completion, a record after ``Done``, LSNs out of order, ...) raises
``ValueError`` saying which, and leaves the history as it was; a value that
is not a record raises ``TypeError``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Iterable

from ensemble.decide.values import same

from . import records as r
from .errors import Cancelled, ChildFailed, DeterminismError, StepFailed

__all__ = [
    "STEP",
    "SLEEP",
    "WAIT",
    "VALUE",
    "CHILD",
    "SEND",
    "ASYNC",
    "CHUNK",
    "CLOSE",
    "KINDS",
    "child_failure",
    "send_dedup",
    "async_token",
    "parse_token",
    "token_matches",
    "Op",
    "Replay",
    "Live",
    "Pending",
    "History",
    "step_progress",
    "StreamLog",
    "step_write",
    "Machine",
    "COMPLETION",
    "CANCEL",
]

STEP: Final = "step"
SLEEP: Final = "sleep"
WAIT: Final = "wait"
VALUE: Final = "value"
CHILD: Final = "child"
SEND: Final = "send"
ASYNC: Final = "async"
CHUNK: Final = "chunk"
CLOSE: Final = "close"
KINDS: Final = frozenset((STEP, SLEEP, WAIT, VALUE, CHILD, SEND, ASYNC, CHUNK, CLOSE))

# what an operation takes next (Machine.next_for), by journal order
COMPLETION: Final = "completion"
CANCEL: Final = "cancel"

_STEP_STATUSES: Final = frozenset(("ok", "error"))
_WAIT_OUTCOMES: Final = frozenset(("signal", "timeout"))
_DONE_STATUSES: Final = frozenset(r.DONE_STATUSES)
_CHILD_STATUSES: Final = frozenset(r.CHILD_STATUSES)
_OUTCOMES: Final = frozenset(r.OUTCOMES)


def _is_int(x: Any) -> bool:
    return type(x) is int


def _is_time(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


# -- answers ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Op:
    """What the journal knows of operation ``seq``: its identity, progress and completion.

    ``attempts`` are its ``Attempt`` records in order (a step); ``armed`` its
    ``Timer`` or ``Wait``; ``done`` its completion record and ``turn`` that
    delivery's number (both ``None`` while it is not completed).
    """

    seq: int
    kind: str
    name: Any
    attempts: tuple = ()
    armed: Any = None
    done: Any = None
    turn: int | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """Operation ``seq``'s recorded completion, delivery number ``turn``: hand it back.

    ``outcome`` is ``"ok"`` or ``"error"`` (a step), ``"fired"`` (a sleep),
    ``"signal"`` or ``"timeout"`` (a wait), ``"value"`` (a value); ``value``
    is what the code gets (``None`` for a fired sleep or a timed-out wait);
    ``error`` the :class:`~fusee.errors.StepFailed` a failed step raises.
    """

    seq: int
    kind: str
    name: Any
    outcome: str
    value: Any = None
    error: StepFailed | ChildFailed | None = None
    turn: int = 0

    def result(self) -> Any:
        """The value the operation returns to the code, or raise its error."""
        if self.error is not None:
            raise self.error
        return self.value


@dataclass(frozen=True, slots=True)
class Live:
    """Operation ``seq`` has no recorded completion: run it, going on from what is recorded.

    A step: ``attempts`` failed attempts are recorded, the next is number
    ``attempts + 1``, due at ``retry_at`` (the last attempt's, else ``None``).
    A sleep or wait: ``armed`` when its ``Timer`` or ``Wait`` is recorded (do
    not record it again), with ``at`` its ``fire_at`` or ``deadline``.
    A step's retry budget counts from attempt ``base`` + 1 (the attempt that last paused, once
    resumed; 0: none), and ``paused`` says its last failed attempt paused the run and no
    ``Resumed`` followed.  An async step: ``armed`` once its ``Awaiting`` is recorded, ``started``
    once its ``AsyncStarted`` is.
    """

    seq: int
    kind: str
    name: Any
    attempts: int = 0
    retry_at: float | None = None
    armed: bool = False
    at: float | None = None
    base: int = 0
    paused: bool = False
    started: bool = False


@dataclass(frozen=True, slots=True)
class Pending:
    """An armed sleep or wait of operation ``seq`` not yet completed; ``at`` is when it ends (``None``: never)."""

    seq: int
    kind: str
    name: Any
    at: float | None


# -- history ---------------------------------------------------------------------------


def _identity(rec: Any) -> tuple[str, Any] | None:
    """The (kind, name) a record says its operation has, or ``None`` if it does not say."""
    t = type(rec)
    if t is r.Step or t is r.Attempt:
        return (STEP, rec.name)
    if t is r.Timer:
        return (SLEEP, rec.name)
    if t is r.Wait:
        return (WAIT, rec.name)
    if t is r.Value:
        return (VALUE, rec.kind)
    if t is r.Child:
        return (CHILD, rec.id)
    if t is r.Send:
        return (SEND, rec.target)
    if t is r.Awaiting:
        return (ASYNC, rec.name)
    if t is r.Paused:
        return (STEP, rec.name)
    if t is r.Chunk:
        return (CHUNK, rec.stream) if rec.step is None else (STEP, rec.step)
    if t is r.StreamClose:
        return (CLOSE, rec.stream) if rec.step is None else (STEP, rec.step)
    return None


class StreamLog:
    """One stream of a run as its records say: ``chunks`` (payloads) and ``lsns`` in order (a chunk's
    offset is its index), ``closed`` (the ``StreamClose``'s LSN, or ``None``), ``by_step`` (a step's ``seq`` -> the
    indexes of the chunks that step's bodies recorded, in order) and ``closed_by`` (the ``seq`` of the step
    whose body closed it; ``None``: workflow code did, or it is open)."""

    __slots__ = ("chunks", "lsns", "closed", "by_step", "closed_by")

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.lsns: list[int] = []
        self.closed: int | None = None
        self.by_step: dict[int, list[int]] = {}
        self.closed_by: int | None = None  # the seq of the step whose body closed it (None: code, or open)

    def __len__(self) -> int:
        return len(self.chunks)

    def since(self, offset: int, limit: int | None = None) -> list[tuple[int, Any]]:
        """The ``(lsn, payload)`` of the chunks from ``offset`` on (at most ``limit``), in order."""
        end = len(self.chunks) if limit is None else min(len(self.chunks), offset + limit)
        return list(zip(self.lsns[offset:end], self.chunks[offset:end]))


def step_write(log: "StreamLog | None", seq: int, written: int, close: bool = False) -> str:
    """What a step body's write (``close``: its close) does, pure: the body of step ``seq`` made
    ``written`` writes to this stream before it in this run of the body.  ``"skip"``: its earlier runs
    recorded this position already (a chunk: the ``written``-th of the step's; a close: the step closed
    it); ``"closed"``: the stream is closed (a write is refused; a close is a no-op); else ``"record"``."""
    if log is None:
        return "record"
    if close:
        return "skip" if log.closed is not None else "record"
    if written < len(log.by_step.get(seq, ())):
        return "skip"
    if log.closed is not None:
        return "closed"
    return "record"


def step_progress(attempts: tuple) -> tuple[int, float | None, int, bool, bool]:
    """What an operation's progress records (``Op.attempts``: ``Attempt``, ``Paused``, ``Resumed``,
    ``AsyncStarted`` in journal order) say: ``(failed attempts, the last one's retry_at (None after a
    pause), base, paused, started)`` -- ``base`` is the attempt number of the pause last resumed (the
    retry budget counts from there), ``paused`` whether the last pause has no ``Resumed`` yet."""
    n = 0
    retry_at = None
    base = 0
    paused = False
    started = False
    for rec in attempts:
        t = type(rec)
        if t is r.Attempt:
            n += 1
            retry_at = rec.retry_at
        elif t is r.Paused:
            n += 1
            retry_at = None
            paused = True
        elif t is r.Resumed:
            paused = False
            base = n
        elif t is r.AsyncStarted:
            started = True
    return (n, retry_at, base, paused, started)


def child_failure(id: str, status: str, payload: Any) -> ChildFailed:
    """The error a parent gets for child ``id`` that ended ``status`` (not ``"completed"``) with ``payload``.

    A failed child's payload is its failure already; for the other ends the
    failure is ``{"type": "Cancelled"|"Terminated"|"TimedOut", "message", "reason": payload}``.
    """
    if status == "failed":
        return ChildFailed(id, payload, status)
    kind = {"cancelled": "Cancelled", "terminated": "Terminated", "timed_out": "TimedOut"}.get(status, status)
    return ChildFailed(id, {"type": kind, "message": f"the child run was {status}", "reason": payload}, status)


def send_dedup(sender_id: str, run: int, seq: int) -> str:
    """The dedup key of the signal a run's ``Send`` (operation ``seq`` of run ``run`` of ``sender_id``) delivers."""
    return f"fusee.send/{sender_id}/{run}/{seq}"


_TOKEN_PREFIX: Final = "fz1"


def async_token(id: str, run: int, seq: int, secret: str) -> str:
    """The completion token of async operation ``seq`` of run ``run`` of workflow ID ``id`` whose ``Awaiting``
    recorded ``secret``: ``"fz1.<run>.<seq>.<id, base64url without padding>.<secret>"`` (opaque to users)."""
    wid = base64.urlsafe_b64encode(id.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")
    return f"{_TOKEN_PREFIX}.{run}.{seq}.{wid}.{secret}"


def parse_token(token: Any) -> tuple[str, int, int, str] | None:
    """``(id, run, seq, secret)`` of a token :func:`async_token` made, or ``None`` if ``token`` is not one."""
    if type(token) is not str or len(token) > 8192 or not token.isascii():
        return None
    parts = token.split(".")
    if len(parts) != 5 or parts[0] != _TOKEN_PREFIX:
        return None
    _, run, seq, wid, secret = parts
    if not (run.isdigit() and seq.isdigit() and secret and len(run) < 20 and len(seq) < 20):
        return None
    try:
        raw = base64.urlsafe_b64decode(wid + "=" * (-len(wid) % 4))
        id = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return None
    if async_token(id, int(run), int(seq), secret) != token:  # the one spelling: no padding, no leading zeros
        return None
    return (id, int(run), int(seq), secret)


def token_matches(awaiting: Any, secret: Any) -> bool:
    """Whether ``secret`` is the one ``awaiting`` (an ``Awaiting`` record, or None) recorded (constant time)."""
    if type(awaiting) is not r.Awaiting or type(secret) is not str or type(awaiting.secret) is not str:
        return False
    return hmac.compare_digest(awaiting.secret.encode("utf-8", "surrogatepass"), secret.encode("utf-8", "surrogatepass"))


_OP_RECORDS: Final = (
    "Step", "Attempt", "Timer", "Fired", "Wait", "Waited", "Value", "Child", "ChildDone", "Send",
    "Awaiting", "AsyncStarted", "Settled", "Paused", "Resumed", "Chunk", "StreamClose",
)
_RUN_RECORDS: Final = ("Start", "Signal", "Cancel", "Done", "Update", "UpdateDone")
_KIND_NAMES: Final = {getattr(r, kind): kind for kind in _OP_RECORDS + _RUN_RECORDS}
_OP_KINDS: Final = frozenset(_OP_RECORDS)


class History:
    """One run's records in journal order, indexed: append-only, checked as they come."""

    __slots__ = (
        "_lsns",
        "_records",
        "_start",
        "_ops",
        "_turns",
        "_signals",
        "_dedups",
        "_unconsumed",
        "_consumed",
        "_cancel",
        "_cancel_turn",
        "_done",
        "_children",
        "_updates",
        "_update_turns",
        "_update_index",
        "_update_done",
        "_paused",
        "_streams",
        "_adding",
    )

    def __init__(self) -> None:
        self._children = False  # a child operation is recorded (child_ops has something to find)
        self._lsns: list[int] = []
        self._records: list[Any] = []
        self._start: Any = None
        # Each operation's Op; a step completed by its first record is kept as the
        # pair (its Step, its turn) and made an Op when first asked for (see _op).
        self._ops: dict[int, Any] = {}
        self._turns = 0
        self._signals: list[Any] = []
        self._dedups: dict[Any, None] = {}  # signal dedup keys seen (an ordered set: 64 B empty, a set 216)
        self._unconsumed: dict[Any, deque[int]] = {}
        self._consumed: list[tuple[int, int]] = []  # (seq of the Waited, index of the signal)
        self._cancel: Any = None
        self._cancel_turn: int | None = None
        self._done: Any = None
        self._updates: list[Any] = []  # the Update records, in journal order
        self._update_turns: list[int] = []  # each one's delivery number
        self._update_index: dict[str, int] = {}  # update ID -> its place in _updates
        self._update_done: dict[str, tuple[Any, int]] = {}  # update ID -> (its UpdateDone, its index in _records)
        self._paused: dict[int, int] = {}  # seq of a step whose last failed attempt paused the run -> that attempt
        self._streams: dict[str, StreamLog] = {}  # the run's streams by name (Chunk, StreamClose)
        self._adding = 0  # the LSN of the record being added (its apply reads it)

    @classmethod
    def from_records(cls, records_with_lsn: Iterable[tuple[int, Any]]) -> "History":
        """The history of ``(lsn, record)`` pairs in journal order; ``ValueError`` names the first bad one."""
        h = cls()
        for i, pair in enumerate(records_with_lsn):
            if type(pair) is not tuple or len(pair) != 2:
                raise TypeError(f"record {i}: expected an (lsn, record) pair, got {pair!r}")
            lsn, rec = pair
            try:
                h.add(rec, lsn)
            except ValueError as e:
                raise ValueError(f"record {i} (lsn {lsn!r}): {e}") from None
        return h

    # -- adding ----------------------------------------------------------------------

    def add(self, rec: Any, lsn: int) -> None:
        """Append ``rec``, journaled at ``lsn``; raise (changing nothing) if it cannot follow."""
        kind = _KIND_NAMES.get(type(rec))
        if kind is None:
            raise TypeError(f"not a fusee record: {rec!r}")
        if type(lsn) is not int or lsn < 0:
            raise ValueError(f"an LSN is an int >= 0, got {lsn!r}")
        if self._lsns and lsn <= self._lsns[-1]:
            raise ValueError(f"LSN {lsn} does not follow {self._lsns[-1]}: journal order is LSN order")
        if self._done is not None:
            raise ValueError(f"a {kind} record after the run's Done")
        if self._start is None:
            if kind != "Start":
                raise ValueError(f"a run's first record is its Start, not a {kind}")
        elif kind == "Start":
            raise ValueError("a second Start for the run")
        elif rec.run != self._start.run:
            raise ValueError(f"a record of run {rec.run!r} in the history of run {self._start.run!r}")
        if kind == "Step":  # the common record: a step completing an operation not yet begun
            seq = rec.seq
            status = rec.status
            if (
                type(seq) is int
                and seq >= 0
                and seq not in self._ops
                and type(status) is str
                and (status == "ok" or status == "error")
            ):
                self._ops[seq] = (rec, self._turns)
                self._turns += 1
                self._lsns.append(lsn)
                self._records.append(rec)
                return
        apply = self._check_op(rec, kind) if kind in _OP_KINDS else self._check_run(rec, kind)
        self._adding = lsn
        apply()
        self._lsns.append(lsn)
        self._records.append(rec)

    def add_step(self, rec: Any, lsn: int) -> None:
        """:meth:`add` for the ``Step`` a live step just recorded (once per step): its operation is new (the
        machine numbered it, nothing was recorded for it), the run is open, its LSN the journal's latest;
        only what could still be wrong is checked, else it goes the long way (:meth:`add`)."""
        seq = rec.seq
        if (
            type(rec) is r.Step
            and self._done is None
            and self._start is not None
            and rec.run == self._start.run
            and seq not in self._ops
            and type(lsn) is int
            and self._lsns
            and lsn > self._lsns[-1]
        ):
            self._ops[seq] = (rec, self._turns)
            self._turns += 1
            self._lsns.append(lsn)
            self._records.append(rec)
            return
        self.add(rec, lsn)

    def _check_run(self, rec: Any, kind: str):
        """Check a run-wide record; return what adds it."""
        if kind == "Start":

            def apply() -> None:
                self._start = rec

        elif kind == "Signal":

            def apply() -> None:
                d = rec.dedup
                if d is not None:
                    if d in self._dedups:
                        return
                    self._dedups[d] = None
                self._unconsumed.setdefault(rec.name, deque()).append(len(self._signals))
                self._signals.append(rec)

            try:
                hash(rec.dedup)
                hash(rec.name)
            except TypeError:
                raise ValueError(f"a Signal's name and dedup must be hashable: {rec!r}") from None
        elif kind == "Update":
            if type(rec.id) is not str or rec.id in self._update_index:
                raise ValueError(f"an Update's id is a str not seen before in the run, got {rec.id!r}")
            if type(rec.name) is not str:
                raise ValueError(f"an Update's name is a str, got {rec.name!r}")

            def apply() -> None:
                self._update_index[rec.id] = len(self._updates)
                self._updates.append(rec)
                self._update_turns.append(self._turns)
                self._turns += 1

        elif kind == "UpdateDone":
            if type(rec.id) is not str or rec.id not in self._update_index:
                raise ValueError(f"an UpdateDone for update {rec.id!r} without its Update")
            if rec.id in self._update_done:
                raise ValueError(f"a second UpdateDone for update {rec.id!r}")
            if type(rec.status) is not str or rec.status not in _OUTCOMES:
                raise ValueError(f"an UpdateDone's status is 'ok' or 'error', got {rec.status!r}")

            def apply() -> None:
                self._update_done[rec.id] = (rec, len(self._records))

        elif kind == "Cancel":

            def apply() -> None:
                if self._cancel is None:
                    self._cancel = rec
                    self._cancel_turn = self._turns
                    self._turns += 1

        else:  # Done
            if type(rec.status) is not str or rec.status not in _DONE_STATUSES:
                raise ValueError(f"a Done's status is one of {sorted(_DONE_STATUSES)}, got {rec.status!r}")

            def apply() -> None:
                self._done = rec

        return apply

    def _check_op(self, rec: Any, kind: str):
        """Check a record of one operation; return what adds it."""
        seq = rec.seq
        if not _is_int(seq) or seq < 0:
            raise ValueError(f"a {kind}'s seq is an int >= 0, got {seq!r}")
        op = self._op(seq)
        ident = _identity(rec)
        if ident is not None and op is not None and (op.kind != ident[0] or not _same(op.name, ident[1])):
            raise ValueError(f"a {kind} for operation {seq}, recorded as {op.kind} {op.name!r}, names {ident!r}")
        if op is not None and op.done is not None:
            raise ValueError(f"a {kind} for operation {seq}, already completed by a {type(op.done).__name__}")
        stream_apply = None
        if kind == "Chunk" or kind == "StreamClose":
            stream_apply = self._check_stream(rec, kind, op)
        elif kind in ("Timer", "Wait", "Value", "Child", "Send", "Awaiting") and op is not None:
            raise ValueError(f"a {kind} for operation {seq}, already begun")
        if kind in ("AsyncStarted", "Settled") and (op is None or op.kind != ASYNC or op.armed is None):
            raise ValueError(f"a {kind} for operation {seq} without its Awaiting")
        if kind == "AsyncStarted" and any(type(a) is r.AsyncStarted for a in op.attempts):  # type: ignore[union-attr]
            raise ValueError(f"a second AsyncStarted for operation {seq}")
        if kind == "Settled" and (type(rec.status) is not str or rec.status not in _OUTCOMES):
            raise ValueError(f"a Settled's status is 'ok' or 'error', got {rec.status!r}")
        if kind == "Awaiting" and type(rec.secret) is not str:
            raise ValueError(f"an Awaiting's secret is a str, got {rec.secret!r}")
        if kind in ("Attempt", "Paused") and seq in self._paused:
            raise ValueError(f"a {kind} for operation {seq}, paused and not resumed")
        if kind == "Resumed" and seq not in self._paused:
            raise ValueError(f"a Resumed for operation {seq}, which is not paused")
        if kind == "Step" and seq in self._paused:
            raise ValueError(f"a Step for operation {seq}, paused and not resumed")
        if kind == "Fired" and (op is None or op.kind != SLEEP):
            raise ValueError(f"a Fired for operation {seq} without its Timer")
        if kind == "Waited" and (op is None or op.kind != WAIT):
            raise ValueError(f"a Waited for operation {seq} without its Wait")
        if kind == "ChildDone" and (op is None or op.kind != CHILD):
            raise ValueError(f"a ChildDone for operation {seq} without its Child")
        if kind == "ChildDone" and (type(rec.status) is not str or rec.status not in _CHILD_STATUSES):
            raise ValueError(f"a ChildDone's status is one of {sorted(_CHILD_STATUSES)}, got {rec.status!r}")
        if kind == "Child" and rec.deadline is not None and not _is_time(rec.deadline):
            raise ValueError(f"a Child's deadline is a time in seconds or None, got {rec.deadline!r}")
        if kind == "Timer" and not _is_time(rec.fire_at):
            raise ValueError(f"a Timer's fire_at is a time in seconds, got {rec.fire_at!r}")
        if kind == "Wait" and rec.deadline is not None and not _is_time(rec.deadline):
            raise ValueError(f"a Wait's deadline is a time in seconds or None, got {rec.deadline!r}")
        if kind == "Attempt" and rec.retry_at is not None and not _is_time(rec.retry_at):
            raise ValueError(f"an Attempt's retry_at is a time in seconds or None, got {rec.retry_at!r}")
        if kind == "Step" and (type(rec.status) is not str or rec.status not in _STEP_STATUSES):
            raise ValueError(f"a Step's status is 'ok' or 'error', got {rec.status!r}")
        queue = None
        if kind == "Waited":
            if type(rec.outcome) is not str or rec.outcome not in _WAIT_OUTCOMES:
                raise ValueError(f"a Waited's outcome is 'signal' or 'timeout', got {rec.outcome!r}")
            if rec.outcome == "signal":
                queue = self._unconsumed.get(op.name)
                if not queue:
                    raise ValueError(f"a Waited for operation {seq} took a signal {op.name!r} never received")
        if op is None:
            op = Op(seq, *ident)  # type: ignore[misc]  (Fired/Waited have op set: checked above)

        def apply() -> None:
            if stream_apply is not None:
                stream_apply()
                if rec.step is not None:  # a step body's: the step's progress, no delivery
                    if seq not in self._ops:
                        self._ops[seq] = op
                    return
            # Op is frozen: build the next one positionally (dataclasses.replace is slow).
            if kind == "Attempt" or kind == "Paused" or kind == "Resumed" or kind == "AsyncStarted":
                new = Op(op.seq, op.kind, op.name, op.attempts + (rec,), op.armed, op.done, op.turn)
                if kind == "Paused":
                    self._paused[seq] = rec.attempt
                elif kind == "Resumed":
                    del self._paused[seq]
            elif kind == "Timer" or kind == "Wait" or kind == "Child" or kind == "Awaiting":
                new = Op(op.seq, op.kind, op.name, op.attempts, rec, op.done, op.turn)
                if kind == "Child":
                    self._children = True
            else:  # a completion: Step, Fired, Waited, Value, ChildDone, Send, Settled, Chunk, StreamClose
                if queue is not None:
                    self._consumed.append((seq, queue.popleft()))
                new = Op(op.seq, op.kind, op.name, op.attempts, op.armed, rec, self._turns)
                self._turns += 1
            self._ops[seq] = new

        return apply

    def _check_stream(self, rec: Any, kind: str, op: Op | None):
        """Check a ``Chunk`` or ``StreamClose`` (``op``: what its ``seq`` knows, its identity checked already);
        return what adds it to its stream."""
        name = rec.stream
        if type(name) is not str:
            raise ValueError(f"a {kind}'s stream is a str, got {name!r}")
        if rec.step is None:
            if op is not None:
                raise ValueError(f"a {kind} for operation {rec.seq}, already begun")
        elif type(rec.step) is not str:
            raise ValueError(f"a {kind}'s step is a str or None, got {rec.step!r}")
        log = self._streams.get(name)
        if log is not None and log.closed is not None:
            raise ValueError(f"a {kind} for stream {name!r}, closed before")
        size = 0 if log is None else len(log)
        if kind == "Chunk" and (type(rec.index) is not int or rec.index != size):
            raise ValueError(f"a Chunk's index is the stream's length ({size}), got {rec.index!r}")

        def apply() -> None:
            lg = self._streams.get(name)
            if lg is None:
                lg = self._streams[name] = StreamLog()
            at = self._adding
            if kind == "Chunk":
                lg.chunks.append(rec.payload)
                lg.lsns.append(at)
                if rec.step is not None:
                    lg.by_step.setdefault(rec.seq, []).append(rec.index)
            else:
                lg.closed = at
                if rec.step is not None:
                    lg.closed_by = rec.seq

        return apply

    def _op(self, seq: Any) -> Op | None:
        """Operation ``seq``'s Op (made and kept on first ask for a step stored as its bare completion)."""
        op = self._ops.get(seq)
        if type(op) is tuple:
            rec, turn = op
            op = self._ops[seq] = Op(seq, STEP, rec.name, (), None, rec, turn)
        return op

    # -- reading ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> tuple[tuple[int, Any], ...]:
        """Every ``(lsn, record)`` in journal order."""
        return tuple(zip(self._lsns, self._records))

    @property
    def gate(self) -> int:
        """The LSN of the run's most recent record (0 when there is none)."""
        return self._lsns[-1] if self._lsns else 0

    @property
    def start(self) -> Any:
        """The run's ``Start`` record (``None`` for an empty history)."""
        return self._start

    @property
    def turns(self) -> int:
        """How many deliveries are recorded (completions and the cancel)."""
        return self._turns

    def op(self, seq: int) -> Op | None:
        """What the journal knows of operation ``seq`` (``None``: nothing)."""
        return self._op(seq)

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every operation the journal knows, by ``seq``."""
        return tuple(self._op(s) for s in sorted(self._ops))

    def attempts(self, seq: int) -> tuple[int, float | None]:
        """Failed attempts recorded for step ``seq`` (``Attempt`` and ``Paused``) and the last one's
        ``retry_at`` (None after a pause; ``(0, None)``: none)."""
        op = self._op(seq)
        if op is None or not op.attempts:
            return (0, None)
        n, retry_at, _, _, _ = step_progress(op.attempts)
        return (n, retry_at)

    # signals

    @property
    def received(self) -> tuple:
        """The ``Signal`` records received, deduplicated, in journal order."""
        return tuple(self._signals)

    @property
    def consumed(self) -> tuple:
        """The signals consumed by ``Waited`` records, in the order they were consumed."""
        return tuple(self._signals[i] for _, i in self._consumed)

    @property
    def unconsumed(self) -> tuple:
        """The signals received and not consumed, in journal order."""
        taken = {i for _, i in self._consumed}
        return tuple(s for i, s in enumerate(self._signals) if i not in taken)

    def signal_for(self, name: Any) -> Any:
        """The signal a wait for ``name`` takes now: the oldest unconsumed one so named, or ``None``."""
        try:
            queue = self._unconsumed.get(name)
        except TypeError:
            return None
        return self._signals[queue[0]] if queue else None

    # cancel and end

    @property
    def cancel(self) -> Any:
        """The run's first ``Cancel`` record, or ``None``."""
        return self._cancel

    @property
    def cancel_turn(self) -> int | None:
        """The cancel's delivery number, or ``None``."""
        return self._cancel_turn

    @property
    def done(self) -> Any:
        """The run's ``Done`` record, or ``None`` while it runs."""
        return self._done

    @property
    def finished(self) -> bool:
        """Whether a ``Done`` is recorded."""
        return self._done is not None

    # timers

    def pending_timers(self) -> tuple[Pending, ...]:
        """Armed sleeps and waits not completed, by ``seq`` (a wait without a deadline has ``at`` ``None``)."""
        out = []
        for s in sorted(self._ops):
            op = self._ops[s]
            if type(op) is tuple:  # a completed step
                continue
            if op.armed is not None and op.done is None and op.kind != CHILD and op.kind != ASYNC:
                at = op.armed.fire_at if op.kind == SLEEP else op.armed.deadline
                out.append(Pending(s, op.kind, op.name, at))
        return tuple(out)

    def due(self, now: float) -> tuple[Pending, ...]:
        """The pending timers whose time has come by ``now``."""
        return tuple(p for p in self.pending_timers() if p.at is not None and p.at <= now)

    # children and sends

    def child_ops(self) -> tuple[Op, ...]:
        """Every child operation the journal knows (completed or not), by ``seq``."""
        if not self._children:
            return ()
        found = [op for op in self._ops.values() if type(op) is not tuple and op.kind == CHILD]
        found.sort(key=lambda op: op.seq)
        return tuple(found)

    def pending_children(self) -> tuple[Any, ...]:
        """The ``Child`` records of child operations begun and not completed, by ``seq``."""
        out = []
        for s in sorted(self._ops):
            op = self._ops[s]
            if type(op) is not tuple and op.kind == CHILD and op.done is None:
                out.append(op.armed)
        return tuple(out)

    @property
    def sends(self) -> tuple[Any, ...]:
        """The run's ``Send`` records, in journal order."""
        return tuple(rec for rec in self._records if type(rec) is r.Send)

    # updates

    @property
    def updates(self) -> tuple[Any, ...]:
        """The run's ``Update`` records, in journal order."""
        return tuple(self._updates)

    def has_update(self, id: Any) -> bool:
        """Whether an ``Update`` with update ID ``id`` is recorded."""
        return type(id) is str and id in self._update_index

    def update_outcome(self, id: Any) -> tuple[Any, int] | None:
        """Update ``id``'s ``UpdateDone`` and its LSN, or ``None`` (not recorded, or not ended)."""
        got = self._update_done.get(id) if type(id) is str else None
        if got is None:
            return None
        rec, i = got
        return (rec, self._lsns[i])

    # pauses

    @property
    def paused(self) -> int | None:
        """The ``seq`` of a step whose last failed attempt paused the run (no ``Resumed`` yet, not completed),
        unless a ``Cancel`` is recorded (the cancel lands there: the run is not waiting for a resume);
        else ``None``."""
        if not self._paused or self._cancel is not None:
            return None
        return min(self._paused)

    # streams

    def stream(self, name: Any) -> StreamLog | None:
        """The run's stream ``name`` (its chunks, LSNs, close), or ``None`` if nothing of it is recorded."""
        return self._streams.get(name) if type(name) is str else None

    @property
    def streams(self) -> tuple[str, ...]:
        """The names of the run's streams, in the order their first record came."""
        return tuple(self._streams)

    def step_chunks(self, seq: int, name: str) -> int:
        """How many chunks of stream ``name`` the bodies of step ``seq`` recorded."""
        log = self._streams.get(name)
        return 0 if log is None else len(log.by_step.get(seq, ()))

    # async steps

    def awaiting(self, seq: Any) -> Any:
        """Async operation ``seq``'s ``Awaiting`` record (its token's secret), or ``None``."""
        op = self._op(seq) if type(seq) is int else None
        if op is None or op.kind != ASYNC:
            return None
        return op.armed


# -- machine ---------------------------------------------------------------------------


class Machine:
    """A run's code walking its history: numbers operations and says, for each, replay or live."""

    __slots__ = ("history", "_next", "_handed", "_cancel_delivered", "_upd")

    def __init__(self, history: History | None = None) -> None:
        self.history = History() if history is None else history
        self._next = 0
        self._handed = 0  # deliveries handed out (replays, updates and the cancel)
        self._cancel_delivered = False
        self._upd = 0  # updates handed out (their handlers started), in journal order

    @property
    def next_seq(self) -> int:
        """The number the next operation takes."""
        return self._next

    @property
    def replaying(self) -> bool:
        """Whether some recorded delivery is not yet handed out (hold live completions until it is)."""
        return self._handed < self.history.turns

    def record(self, rec: Any, lsn: int) -> None:
        """Add a record the engine appended at ``lsn`` (see :meth:`History.add`)."""
        self.history.add(rec, lsn)

    def gate(self) -> int:
        """The LSN a step body with effects waits to be durable before it runs."""
        return self.history.gate

    def take_cancel(self) -> Cancelled | None:
        """If a cancel is recorded and not yet delivered, deliver it: the error to raise, else ``None``."""
        c = self.history.cancel
        if c is None or self._cancel_delivered:
            return None
        self._cancel_delivered = True
        self._handed += 1
        return Cancelled(c.reason)

    @property
    def cancelling(self) -> bool:
        """Whether a cancel is recorded and not yet delivered."""
        return self.history.cancel is not None and not self._cancel_delivered

    def next_for(self, seq: int) -> str | None:
        """What begun operation ``seq`` takes next, by journal order: :data:`COMPLETION`, :data:`CANCEL` or ``None``.

        :data:`CANCEL` if a cancel is recorded and not yet delivered and the
        operation's completion is not recorded before it (not recorded at all,
        or recorded after the ``Cancel``); else :data:`COMPLETION` if its
        completion is recorded; else ``None`` (nothing yet: wait).  Pure: it
        hands nothing out (:meth:`take_cancel`, :meth:`take`).

        The rule, live and on replay alike: take what is recorded in the order
        it was recorded.  :meth:`begin` decides by this same function, so live
        code that asks it (rather than checking for a cancel, or for a
        completion, first) lands a cancel exactly where replay will.
        """
        op = self.history._op(seq)
        return self._decide(op)

    def _decide(self, op: Op | None) -> str | None:
        h = self.history
        done = op is not None and op.turn is not None
        if h._cancel is not None and not self._cancel_delivered:
            if not done or h._cancel_turn < op.turn:  # type: ignore[union-attr, operator]
                return CANCEL
        return COMPLETION if done else None

    def settle(self, seq: int) -> Cancelled | None:
        """Live operation ``seq`` has just recorded its own completion (a ``Step``): hand it out, as
        :meth:`take` would, and answer ``None``; unless an undelivered cancel is recorded before it:
        then deliver that cancel and answer it (to raise).  The same decision as :meth:`next_for`,
        without building the delivery the live code already holds."""
        if self.history._cancel is not None and not self._cancel_delivered:
            if self.next_for(seq) == CANCEL:
                return self.take_cancel()
        self._handed += 1
        return None

    def take(self, seq: int) -> Replay:
        """Hand out begun operation ``seq``'s recorded completion (live code, once :meth:`next_for` says
        :data:`COMPLETION`): its :class:`Replay`, counted as handed out as on replay."""
        op = self.history._op(seq)
        if op is None or op.turn is None:
            raise ValueError(f"operation {seq} has no recorded completion to take")
        self._handed += 1
        return _replay_of(op)

    # -- updates

    @property
    def updates_pending(self) -> bool:
        """Whether a recorded ``Update`` is not yet handed out (its handler not started)."""
        return self._upd < len(self.history._updates)

    def update_due(self, seq: int | None) -> Any:
        """The ``Update`` whose handler starts now, at a check point of begun operation ``seq`` (``None``:
        of no operation), or ``None``: the first update not handed out, if its turn comes before the
        operation's completion (or the operation has none recorded) and before an undelivered cancel.
        Pure: :meth:`take_update` hands it out."""
        h = self.history
        i = self._upd
        if i >= len(h._updates):
            return None
        t = h._update_turns[i]
        if h._cancel is not None and not self._cancel_delivered and h._cancel_turn < t:  # type: ignore[operator]
            return None
        if seq is not None:
            op = h._op(seq)
            if op is not None and op.turn is not None and op.turn < t:
                return None
        return h._updates[i]

    def take_update(self) -> Any:
        """Hand out the first update not handed out (its handler starts): its ``Update`` record."""
        h = self.history
        if self._upd >= len(h._updates):
            raise ValueError("no recorded update to take")
        rec = h._updates[self._upd]
        self._upd += 1
        self._handed += 1
        return rec

    # -- beginning operations

    def number(self, kind: str, name: Any) -> int:
        """The first half of :meth:`begin`: number the operation and check it against the journal
        (:class:`~fusee.errors.DeterminismError`); deliver nothing.  :meth:`resolve` is the second."""
        if type(kind) is not str or kind not in KINDS:
            raise ValueError(f"an operation's kind is one of {sorted(KINDS)}, got {kind!r}")
        seq = self._next
        self._next = seq + 1
        op = self.history._op(seq)
        if op is not None and (op.kind != kind or not _same(op.name, name)):
            raise DeterminismError(seq, (op.kind, op.name), (kind, name))
        return seq

    def resolve(self, seq: int, kind: str, name: Any) -> Replay | Live:
        """The second half of :meth:`begin` for operation ``seq`` of ``kind`` and ``name`` (numbered by
        :meth:`number`): raise the cancel if it comes first (:meth:`next_for`), else its :class:`Replay`
        (handed out) or :class:`Live`."""
        h = self.history
        op = h._op(seq)
        if h._cancel is not None and not self._cancel_delivered and self._decide(op) == CANCEL:  # journal order
            raise self.take_cancel()  # type: ignore[misc]
        if op is None:
            return Live(seq, kind, name)
        if op.done is None:
            n, retry_at, base, paused, started = step_progress(op.attempts)
            armed = op.armed
            at = None
            if armed is not None and kind != ASYNC:
                at = armed.fire_at if kind == SLEEP else armed.deadline  # a Child's too
            return Live(seq, kind, name, n, retry_at, armed is not None, at, base, paused, started)
        self._handed += 1
        return _replay_of(op)

    def begin_new(self, kind: str, name: Any) -> Replay | Live | int:
        """:meth:`begin`, except that an operation the journal knows nothing of (the live case, once per
        step) is answered with its ``seq`` alone, not a :class:`Live` with nothing recorded in it."""
        seq = self._next
        h = self.history
        if (
            seq not in h._ops
            and (h._cancel is None or self._cancel_delivered)
            and type(kind) is str
            and kind in KINDS
            and self._upd >= len(h._updates)
        ):
            self._next = seq + 1
            return seq
        return self.begin(kind, name)

    def begin(self, kind: str, name: Any) -> Replay | Live:
        """Number the operation the code starts and say what it resolves to.

        Raises :class:`~fusee.errors.DeterminismError` if the journal recorded
        another kind or name at this position, :class:`~fusee.errors.Cancelled`
        if a cancel is delivered here (:meth:`next_for` says :data:`CANCEL`: the
        cancel is recorded before the operation's completion, or the completion
        is not recorded); either way the operation took its number.
        """
        return self.resolve(self.number(kind, name), kind, name)

    def pending_timers(self) -> tuple[Pending, ...]:
        """See :meth:`History.pending_timers`."""
        return self.history.pending_timers()

    def due(self, now: float) -> tuple[Pending, ...]:
        """See :meth:`History.due`."""
        return self.history.due(now)

    def signal_for(self, name: Any) -> Any:
        """See :meth:`History.signal_for`."""
        return self.history.signal_for(name)

    @property
    def finished(self) -> bool:
        """Whether the run's ``Done`` is recorded."""
        return self.history.finished

    @property
    def done(self) -> Any:
        """The run's ``Done`` record, or ``None``."""
        return self.history.done


def _same(a: Any, b: Any) -> bool:
    """Names compare equal by type and value (``1`` is not ``True``); a name whose ``==``
    misbehaves is not the same (:func:`ensemble.decide.values.same`)."""
    return type(a) is type(b) and same(a, b)


def _replay_of(op: Op) -> Replay:
    """The delivery of a completed operation."""
    d = op.done
    t = type(d)
    if t is r.Step:
        if d.status == "ok":
            return Replay(op.seq, op.kind, op.name, "ok", d.payload, None, op.turn)  # type: ignore[arg-type]
        return Replay(op.seq, op.kind, op.name, "error", None, StepFailed(op.name, d.payload), op.turn)  # type: ignore[arg-type]
    if t is r.Fired:
        return Replay(op.seq, op.kind, op.name, "fired", None, None, op.turn)  # type: ignore[arg-type]
    if t is r.Waited:
        value = d.payload if d.outcome == "signal" else None
        return Replay(op.seq, op.kind, op.name, d.outcome, value, None, op.turn)  # type: ignore[arg-type]
    if t is r.ChildDone:
        if d.status == "completed" or d.status == "started":
            value = d.payload if d.status == "completed" else None
            return Replay(op.seq, op.kind, op.name, d.status, value, None, op.turn)  # type: ignore[arg-type]
        err = child_failure(op.name, d.status, d.payload)  # type: ignore[arg-type]
        return Replay(op.seq, op.kind, op.name, d.status, None, err, op.turn)  # type: ignore[arg-type]
    if t is r.Send:
        return Replay(op.seq, op.kind, op.name, "sent", None, None, op.turn)  # type: ignore[arg-type]
    if t is r.Chunk:
        return Replay(op.seq, op.kind, op.name, "written", d.index, None, op.turn)  # type: ignore[arg-type]
    if t is r.StreamClose:
        return Replay(op.seq, op.kind, op.name, "closed", None, None, op.turn)  # type: ignore[arg-type]
    if t is r.Settled:
        if d.status == "ok":
            return Replay(op.seq, op.kind, op.name, "ok", d.payload, None, op.turn)  # type: ignore[arg-type]
        return Replay(op.seq, op.kind, op.name, "error", None, StepFailed(op.name, d.payload), op.turn)  # type: ignore[arg-type]
    return Replay(op.seq, op.kind, op.name, "value", d.value, None, op.turn)  # type: ignore[arg-type]
