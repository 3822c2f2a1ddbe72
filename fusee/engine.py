"""The fusee engine: workflows as ensemble processes over a per-shard, group-committed journal.

Processes (each shard's on the one carrier of its journal shard,
:meth:`fusee.journal.Journal.home`, beside that shard's flusher, so a step's
round trip to the disk crosses no thread; an in-memory engine's on the
caller's ``"default"`` dispatcher):

* one **shard server** per shard, a ``gen_server`` owning that shard's state:
  the index of runs by workflow ID, run numbers, the ID policy, signal,
  cancel and terminate routing, queries and descriptions.  A workflow ID
  lives on shard ``crc32c(id) % shards``.
* one **run process** per live run, running the workflow function with a
  :class:`Ctx`.  Every record of a run is appended to its shard's journal
  and fed, at once, to the run's :class:`fusee.replay.Machine`; appending
  never waits for the disk.

What waits for the disk: a step body with effects waits until the journal
is durable through the run's gate (``Machine.gate()``); a ``read_only`` step
does not.  ``start``, ``signal`` and ``cancel`` return, and ``result``
reveals a value, only once the record behind it is durable: the shard
server appends and answers with the LSN, and the *caller* waits for it, so
the server never blocks on the disk.

Recovery (:meth:`Engine.open` on a directory): every record of every shard
is decoded, grouped by run into a :class:`fusee.replay.History`, and every
unfinished run's process is started again; its code replays through the
machine (recorded results come back, bodies do not run), then goes on live.
"""

from __future__ import annotations

import inspect
import os
import random as _random
import time
import uuid as _uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT
from ensemble import gen_server as _gs
from ensemble import timer as _timer

from . import concurrency as _concurrency
from . import delay as _delay
from . import durations as _durations
from . import parking as _parking
from . import store as _store
from . import records as r
from .crc32c import crc32c
from .errors import (
    AlreadyExists,
    Busy,
    Cancelled,
    ChildFailed,
    Corrupt,
    DeterminismError,
    Error,
    Failed,
    NotFound,
    NotSerializable,
    StepFailed,
    Terminated,
    TimedOut,
    UnknownWorkflow,
    failure_of,
)
from .journal import DEFAULT_SEGMENT_SIZE, Journal
from .replay import CHILD, SEND, SLEEP, STEP, VALUE, WAIT, History, Machine, Replay, send_dedup
from heapq import heappop as _heappop, heappush as _heappush

__all__ = [
    "Workflow",
    "workflow",
    "Signal",
    "signal",
    "Retry",
    "IdPolicy",
    "StepContext",
    "Ctx",
    "Run",
    "Engine",
    "Clock",
    "shard_of",
]

_WAKE = "fusee_wake"
_DONE = "fusee_done"
RUNNING = "running"
STATUSES = ("running", "completed", "failed", "cancelled", "terminated", "continued", "timed_out")
_CHILD_DONE = "fusee_child_done"  # (tag, parent id, parent run, seq, status, payload): to the parent's shard server
_PARENT_CLOSED = "fusee_parent_closed"  # (tag, child id, parent ref, action): to the child's shard server


# -- time ---------------------------------------------------------------------------------


class Clock:
    """Where an engine's time comes from: wall-clock unix seconds, and how a run waits for a moment.

    ``now()`` is unix seconds.  ``pause(at)`` parks the calling run process until
    a ``"fusee_wake"`` message arrives (taking it) or until ``now() >= at``
    (``at`` None: no deadline).  :class:`fusee.testing.TestEngine` passes a
    virtual clock; this one is the real one.
    """

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def pause(self, at: float | None) -> None:
        timeout = None if at is None else max(0.0, at - time.time())
        _e.receive(_wake, timeout=timeout)


REAL_CLOCK = Clock()


# -- definitions -------------------------------------------------------------------------


class Workflow:
    """A workflow type: ``name``, ``version`` and the function ``fn(ctx, input)``; made by :func:`workflow`."""

    __slots__ = ("name", "version", "fn", "__wrapped__", "__dict__")

    def __init__(self, name: str, version: int, fn: Callable[..., Any]) -> None:
        if type(name) is not str or not name:
            raise TypeError(f"a workflow's name is a non-empty str, not {name!r}")
        if type(version) is not int or version < 0:
            raise TypeError(f"a workflow's version is an int >= 0, not {version!r}")
        if not callable(fn):
            raise TypeError(f"a workflow is a function fn(ctx, input), not {fn!r}")
        self.name = name
        self.version = version
        self.fn = fn
        self.__wrapped__ = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, ctx: "Ctx", input: Any) -> Any:
        return self.fn(ctx, input)

    def __repr__(self) -> str:
        return f"<fusee.workflow {self.name!r} version {self.version}>"


def workflow(
    name: str,
    version: int = 1,
    concurrency: int | None = None,
    key: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Workflow]:
    """Decorate ``def fn(ctx, input)`` as the workflow type ``name`` at ``version``.

    ``concurrency``: at most that many runs of the type at once (of one key, with ``key(input)``
    giving a run's key, a str or int); the others wait in start order, ``queued``
    (:mod:`fusee.concurrency`).
    """
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise ValueError(f"concurrency is None or an int >= 1, not {concurrency!r}")
    if key is not None and (concurrency is None or not callable(key)):
        raise ValueError("key= is a function of the input, and needs concurrency=")

    def define(fn: Callable[..., Any]) -> Workflow:
        wf = Workflow(name, version, fn)
        wf.concurrency = concurrency
        wf.key = key
        return wf

    return define


@dataclass(frozen=True, slots=True)
class Signal:
    """A declared signal name (from :func:`signal`); ``wait_for`` and ``Engine.signal`` take it or its name."""

    name: str


def signal(name: str) -> Signal:
    """Declare the signal ``name``."""
    if type(name) is not str or not name:
        raise TypeError(f"a signal's name is a non-empty str, not {name!r}")
    return Signal(name)


def _signal_name(s: Any) -> str:
    if type(s) is Signal:
        return s.name
    if type(s) is str and s:
        return s
    raise TypeError(f"a signal is a fusee.signal(...) or its name, not {s!r}")


@dataclass(frozen=True, slots=True)
class Retry:
    """How a step retries: ``attempts`` in all (1: no retry); attempt n+1 is due ``min(maximum, initial * factor**(n-1))`` after attempt n failed.

    ``initial`` and ``maximum`` are durations (seconds or strings like ``"1s"``).
    """

    attempts: int = 1
    initial: Any = 1.0
    factor: float = 2.0
    maximum: Any = 60.0

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"Retry.attempts is an int >= 1, not {self.attempts!r}")
        object.__setattr__(self, "initial", _durations.parse(self.initial))
        object.__setattr__(self, "maximum", _durations.parse(self.maximum))
        if type(self.factor) not in (int, float) or not self.factor >= 1:
            raise ValueError(f"Retry.factor is a number >= 1, not {self.factor!r}")

    def delay(self, attempt: int) -> float:
        """Seconds between failed attempt ``attempt`` (1-based) and the next."""
        return float(min(self.maximum, self.initial * self.factor ** (attempt - 1)))


_NO_RETRY = Retry(1)

_ON_RUNNING = ("fail", "attach", "terminate")
_ON_FINISHED = ("fail", "attach", "start_new")


@dataclass(frozen=True, slots=True)
class IdPolicy:
    """What a start does when its workflow ID is taken: by a running run (``on_running``: ``"fail"``,
    ``"attach"``, ``"terminate"`` it and start anew) or a finished one (``on_finished``: ``"fail"``,
    ``"attach"``, ``"start_new"``).  The default fails both ways with :class:`AlreadyExists`;
    :attr:`IdPolicy.ATTACH` attaches to either."""

    on_running: str = "fail"
    on_finished: str = "fail"

    def __post_init__(self) -> None:
        if self.on_running not in _ON_RUNNING:
            raise ValueError(f"IdPolicy.on_running is one of {_ON_RUNNING}, not {self.on_running!r}")
        if self.on_finished not in _ON_FINISHED:
            raise ValueError(f"IdPolicy.on_finished is one of {_ON_FINISHED}, not {self.on_finished!r}")

    def plain(self) -> list[str]:
        """The policy as recorded in ``Start.policy``."""
        return [self.on_running, self.on_finished]


IdPolicy.DEFAULT = IdPolicy()  # type: ignore[attr-defined]
IdPolicy.ATTACH = IdPolicy("attach", "attach")  # type: ignore[attr-defined]
IdPolicy.START_NEW = IdPolicy("fail", "start_new")  # type: ignore[attr-defined]
IdPolicy.TERMINATE = IdPolicy("terminate", "start_new")  # type: ignore[attr-defined]


def shard_of(workflow_id: str, shards: int) -> int:
    """The shard a workflow ID lives on: ``crc32c(utf-8 id) % shards`` (stable across processes)."""
    return crc32c(workflow_id.encode("utf-8", "surrogatepass")) % shards


# -- a run ---------------------------------------------------------------------------------


class _RunState:
    """One run: identity, machine, status and outcome; shared by its shard server and its process."""

    __slots__ = (
        "engine",
        "shard",
        "id",
        "run",
        "wtype",
        "version",
        "wf",
        "input",
        "machine",
        "status",
        "pid",
        "waiters",
        "done_lsn",
        "outcome",
        "queries",
        "started",
        "finished",
        "start_lsn",
        "determinism",
        "deadline",
        "parent",
        "parents",
        "waiting_since",
        "wake_at",
        "parking",
        "parked",
        "wake_pending",
    )

    def __init__(self, engine: "Engine", shard: int, start: r.Start, machine: Machine, wf: Workflow | None) -> None:
        self.engine = engine
        self.shard = shard
        self.id = start.id
        self.run = start.run
        self.wtype = start.wtype
        self.version = start.version
        self.wf = wf
        self.input = start.input
        self.machine = machine
        self.status = RUNNING
        self.pid: Any = None
        self.waiters: list[Any] = []
        self.done_lsn = 0
        self.outcome: tuple[str, Any] | None = None
        self.queries: dict[str, Callable[[Any], Any]] = {}
        self.started = start.started
        self.finished: float | None = None
        self.start_lsn = 0
        self.determinism: DeterminismError | None = None
        self.deadline: float | None = start.deadline  # when the run times out (None: never)
        self.parent: Any = start.parent  # the recorded parent ref (ctx.child), or None
        # parent refs told when the run ends: the recorded one (if it waits) and those attached since
        self.parents: list[Any] = [start.parent] if start.parent and start.parent.get("wait") else []
        # parking (fusee.parking): waiting since (engine clock) and until (None: no deadline), while paused;
        # ``parking``: its process was told to end; ``parked``: it has, its records stay in ``machine.history``;
        # ``wake_pending``: something woke it while it was parking (load it again at once)
        self.waiting_since: float | None = None
        self.wake_at: float | None = None
        self.parking = False
        self.parked = False
        self.wake_pending = False

    def append(self, rec: Any) -> int:
        """Journal ``rec`` (encoding first: ``NotSerializable`` records nothing) and feed it to the machine."""
        if self.status != RUNNING:
            raise Terminated(f"run {self.run} of {self.id!r} has ended ({self.status})")
        body = r.encode_record(rec)
        lsn = self.engine._journal.append(self.shard, body)
        self.machine.record(rec, lsn)
        return lsn

    def finish(self, status: str, payload: Any, outcome: tuple[str, Any]) -> int:
        """Record the run's ``Done`` and tell those waiting for its result."""
        lsn = self.append(r.Done(self.run, status, self.engine._clock.now(), payload))
        self._ended(status, outcome, lsn)
        if status != "continued":
            _tell_parents(self)
        _close_children(self)
        return lsn

    def fail_unrecorded(self, exc: Error) -> None:
        """End the run in memory only (a DeterminismError: fixed code may resume it after a reopen)."""
        self._ended("failed", ("error", exc), self.machine.gate())

    def _ended(self, status: str, outcome: tuple[str, Any], lsn: int) -> None:
        self.status = status
        self.outcome = outcome
        self.done_lsn = lsn
        self.finished = self.engine._clock.now()
        waiters, self.waiters = self.waiters, []
        for a in waiters:
            _e.send(a, (_DONE, a))

    def outcome_of_done(self, done: r.Done) -> tuple[str, Any]:
        status, payload = done.status, done.payload
        if status == "completed":
            return ("ok", payload)
        if status == "cancelled":
            return ("error", Cancelled(payload))
        if status == "terminated":
            return ("error", Terminated(payload))
        if status == "timed_out":
            return ("error", TimedOut(payload))
        if status == "continued":
            return ("continued", payload)
        return ("error", Failed(payload))


def _parent_ref(st: _RunState, seq: int, wait: bool) -> dict[str, Any]:
    """The ``Start.parent`` of a child begun by operation ``seq`` of ``st``: where its result goes."""
    return {"shard": st.shard, "run": st.run, "seq": seq, "id": st.id, "wait": wait}


def _same_parent(a: Any, b: Any) -> bool:
    """Whether two parent refs name the same parent operation (shard, run, seq, id)."""
    if type(a) is not dict or type(b) is not dict:
        return False
    return all(a.get(k) == b.get(k) for k in ("shard", "run", "seq", "id"))


def _tell_parents(st: _RunState) -> None:
    """Once ``st``'s ``Done`` is durable, tell each waiting parent's shard server (a message) how it ended."""
    parents, st.parents = st.parents, []
    if not parents:
        return
    engine, done = st.engine, st.machine.done
    if done is None:
        return

    def tell() -> None:
        engine._journal.wait_durable(st.shard, st.done_lsn)
        for p in parents:
            if p["shard"] < len(engine._servers):
                _e.send(engine._servers[p["shard"]], (_CHILD_DONE, p["id"], p["run"], p["seq"], done.status, done.payload))

    _e.spawn(tell, dispatcher=engine._journal.home(st.shard))


def _close_children(st: _RunState) -> None:
    """The parent ``st`` ended: once its ``Done`` is durable (a crash must not take back the end that closed
    them), tell the shard server of each child it started and does not abandon."""
    engine = st.engine
    tells = []
    for op in st.machine.history.ops:
        if op.kind != CHILD or op.armed is None or op.armed.parent_close == "abandon":
            continue
        if op.done is not None and op.done.status != "started":
            continue
        rec = op.armed
        shard = shard_of(rec.id, engine.shards)
        if shard < len(engine._servers):
            tells.append((engine._servers[shard], (_PARENT_CLOSED, rec.id, _parent_ref(st, rec.seq, False), rec.parent_close)))
    if not tells:
        return

    def tell() -> None:
        engine._journal.wait_durable(st.shard, st.done_lsn)
        for server, msg in tells:
            _e.send(server, msg)

    _e.spawn(tell, dispatcher=engine._journal.home(st.shard))


class _Deadline(BaseException):
    """Raised in a run past its deadline: it ends ``timed_out`` (not an Exception: code does not catch it)."""


class _ContinueAsNew(BaseException):
    """Raised by :meth:`Ctx.continue_as_new`: the run ends ``continued`` and a new run starts with ``input``."""

    def __init__(self, input: Any) -> None:
        super().__init__(input)
        self.input = input


class StepContext:
    """What a step body ``fn(s)`` gets: ``s.key`` (the idempotency key, stable across retries and
    crashes: ``"<workflow id>/<run>/<seq>"``), ``s.name`` and ``s.attempt`` (1-based)."""

    __slots__ = ("key", "name", "attempt")

    def __init__(self, key: str, name: str, attempt: int) -> None:
        self.key = key
        self.name = name
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"StepContext(key={self.key!r}, name={self.name!r}, attempt={self.attempt})"


_arity_cache: dict[Any, bool] = {}
_FunctionType = type(_signal_name)


def _takes_step_context(fn: Callable[..., Any]) -> bool:
    if type(fn) is _FunctionType:  # the common case: a plain function or lambda, cached by its code
        hit = _arity_cache.get(fn.__code__)
        if hit is not None:
            return hit
    code = getattr(fn, "__code__", None)
    if code is not None and not inspect.ismethod(fn):
        hit = _arity_cache.get(code)
        if hit is None:
            hit = _arity_cache[code] = _signature_takes_one(fn)
        return hit
    return _signature_takes_one(fn)


def _signature_takes_one(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 1 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _wake(m: Any) -> Any:
    return m if m == _WAKE else NOMATCH


class Ctx:
    """What workflow code gets: durable operations numbered by call order (see the module docstring)."""

    __slots__ = ("_st",)

    def __init__(self, state: _RunState) -> None:
        self._st = state

    @property
    def workflow_id(self) -> str:
        """The run's workflow ID."""
        return self._st.id

    @property
    def run_id(self) -> int:
        """The run's number (unique within its shard's journal)."""
        return self._st.run

    def __repr__(self) -> str:
        return f"<fusee.Ctx {self._st.id!r} run {self._st.run}>"

    # -- machinery

    def _begin(self, kind: str, name: Any) -> Any:
        st = self._st
        if st.determinism is not None:
            raise st.determinism
        if st.status != RUNNING:
            raise Terminated(None)
        if st.parking:  # unwinding to park (a finally in workflow code): record nothing
            raise _Parked()
        if st.deadline is not None and st.engine._clock.now() >= st.deadline:
            raise _Deadline()
        try:
            return st.machine.begin(kind, name)
        except DeterminismError as e:
            st.determinism = e
            raise

    def _check_cancel(self) -> None:
        """Raise a recorded, undelivered cancel here; end the run (``_Deadline``) if its deadline passed."""
        st = self._st
        if st.deadline is not None and st.engine._clock.now() >= st.deadline:
            raise _Deadline()
        m = st.machine
        if m.cancelling:
            c = m.take_cancel()
            if c is not None:
                raise c

    def _pause(self, at: float | None) -> None:
        """Park until woken (a signal or a cancel arrived) or until unix time ``at``.

        While paused the run may be parked (fusee.parking): its shard server
        sets ``parking`` and wakes it, and it ends here with ``_Parked``
        (nothing recorded; a wake loads it again and it replays to here).
        """
        st = self._st
        engine = st.engine
        if st.deadline is not None and (at is None or at > st.deadline):
            at = st.deadline  # wake at the run's deadline (then _check_cancel ends it)
        if st.parking:
            raise _Parked()
        st.waiting_since = engine._clock.now()
        st.wake_at = at
        if engine._parks:
            _e.send(engine._servers[st.shard], (_WAITING, st))
        try:
            engine._clock.pause(at)
        finally:
            st.waiting_since = None
        if st.parking:
            raise _Parked()
        while _e.receive(_wake, timeout=0) is not TIMEOUT:  # drain the wakes that piled up
            pass

    # -- operations

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        retry: Retry | None = None,
        read_only: bool = False,
    ) -> Any:
        """Run ``fn()`` (or ``fn(s)``, ``s.key`` the idempotency key) once, durably; on replay return what it returned.

        A failed attempt is recorded with when the next is due; when ``retry``'s
        attempts run out, :class:`StepFailed` is raised here.  A body with effects
        starts only once the run's earlier records are durable; a ``read_only``
        body does not wait.  A result that cannot be serialized raises
        :class:`NotSerializable` here, with nothing recorded.
        """
        if type(name) is not str:
            raise TypeError(f"a step's name is a str, not {name!r}")
        if retry is None:
            retry = _NO_RETRY
        elif type(retry) is not Retry:
            raise TypeError(f"retry is a fusee.Retry, not {retry!r}")
        op = self._begin(STEP, name)
        if type(op) is Replay:
            return op.result()
        st = self._st
        m = st.machine
        seq = op.seq
        attempt = op.attempts + 1
        retry_at = op.retry_at
        engine = st.engine
        if engine._mocks:
            fn = engine._mocks.get((st.wtype, name), fn)
        takes = _takes_step_context(fn)
        journal = engine._journal
        clock = engine._clock
        while True:
            if retry_at is not None:
                while True:
                    self._check_cancel()
                    if clock.now() >= retry_at:
                        break
                    self._pause(retry_at)
            if not read_only and journal.path is not None:  # in memory, every append is durable at once
                journal.wait_durable(st.shard, m.gate())
            try:
                if takes:
                    value = fn(StepContext(f"{st.id}/{st.run}/{seq}", name, attempt))
                else:
                    value = fn()
            except Exception as exc:
                failure = failure_of(exc)
                if attempt >= retry.attempts:
                    st.append(r.Step(st.run, seq, name, attempt, "error", failure))
                    self._check_cancel()
                    raise StepFailed(name, failure) from exc
                retry_at = clock.now() + retry.delay(attempt)
                st.append(r.Attempt(st.run, seq, name, attempt, retry_at, failure))
                attempt += 1
                continue
            st.append(r.Step(st.run, seq, name, attempt, "ok", value))
            self._check_cancel()  # a cancel recorded while the body ran lands here, as on replay
            return value

    def sleep(self, name: str, d: Any) -> None:
        """Sleep durably for ``d`` (seconds or a string like ``"5m"``): a ``Timer`` record, then ``Fired``."""
        seconds = _durations.parse(d)
        clock = self._st.engine._clock
        self._sleep(name, lambda: clock.now() + seconds)

    def sleep_until(self, name: str, unix_seconds: float) -> None:
        """Sleep durably until the unix time ``unix_seconds``."""
        if type(unix_seconds) not in (int, float):
            raise TypeError(f"sleep_until takes unix seconds, not {unix_seconds!r}")
        self._sleep(name, lambda: float(unix_seconds))

    def _sleep(self, name: str, at_of: Callable[[], float]) -> None:
        if type(name) is not str:
            raise TypeError(f"a sleep's name is a str, not {name!r}")
        op = self._begin(SLEEP, name)
        if type(op) is Replay:
            return None
        st = self._st
        clock = st.engine._clock
        if op.armed:
            at = op.at
        else:
            at = at_of()
            st.append(r.Timer(st.run, op.seq, name, at))
        while True:
            self._check_cancel()
            if clock.now() >= at:
                st.append(r.Fired(st.run, op.seq))
                return None
            self._pause(at)

    def wait_for(self, signal: Any, timeout: Any = None) -> Any:
        """The next value of ``signal`` (a :func:`signal` or its name), or ``None`` once ``timeout`` passes.

        Signals sent before the wait are kept, in order; a timeout is recorded.
        """
        name = _signal_name(signal)
        seconds = None if timeout is None else _durations.parse(timeout)
        op = self._begin(WAIT, name)
        if type(op) is Replay:
            return op.result()
        st = self._st
        m = st.machine
        clock = st.engine._clock
        if op.armed:
            deadline = op.at
        else:
            deadline = None if seconds is None else clock.now() + seconds
            st.append(r.Wait(st.run, op.seq, name, deadline))
        while True:
            self._check_cancel()
            sig = m.signal_for(name)
            if sig is not None:
                st.append(r.Waited(st.run, op.seq, "signal", sig.payload))
                return sig.payload
            if deadline is not None and clock.now() >= deadline:
                st.append(r.Waited(st.run, op.seq, "timeout", None))
                return None
            self._pause(deadline)

    def _value(self, kind: str, make: Callable[[], Any]) -> Any:
        op = self._begin(VALUE, kind)
        if type(op) is Replay:
            return op.value
        st = self._st
        v = make()
        st.append(r.Value(st.run, op.seq, kind, v))
        return v

    def now(self) -> float:
        """The unix time, recorded (replay sees the same)."""
        return self._value("now", self._st.engine._clock.now)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._value("random", _random.random)

    def uuid(self) -> str:
        """A random UUID4 string, recorded."""
        return self._value("uuid", lambda: str(_uuid.uuid4()))

    # -- composition: children, messages between runs, continue-as-new

    def child(
        self, wf: Any, id: str, input: Any = None, parent_close: str = "terminate", timeout: Any = None
    ) -> Any:
        """Run workflow ``wf`` (a Workflow or its type name) as child run ``id`` and return its result.

        The child may live on another shard.  Its outcome is recorded in this
        journal (``Child``, then ``ChildDone``) and replays the same; a child
        that fails, is cancelled or terminated, or times out (``timeout``: a
        duration) raises :class:`ChildFailed`.  A running run with that ID is
        attached to.  ``parent_close`` says what this run's end does to the
        child if it still runs: ``"terminate"``, ``"request_cancel"`` or ``"abandon"``.
        """
        op = self._child_op(wf, id, input, parent_close, timeout, True)
        if type(op) is Replay:
            return op.result()
        st = self._st
        h = st.machine.history
        while True:
            self._check_cancel()
            got = h.op(op.seq)
            if got is not None and got.done is not None:
                st.machine._handed += 1  # the completion is handed out here, as on replay
                from .replay import _replay_of

                return _replay_of(got).result()
            self._pause(None)

    def start_child(
        self, wf: Any, id: str, input: Any = None, parent_close: str = "terminate", timeout: Any = None
    ) -> None:
        """Start child run ``id`` (see :meth:`child`) and return once its ``Start`` is durable, not waiting for
        its end (attaching if a run with that ID is running).  Records ``Child`` then ``ChildDone("started")``."""
        op = self._child_op(wf, id, input, parent_close, timeout, False)
        if type(op) is Replay:
            return None
        st = self._st
        st.append(r.ChildDone(st.run, op.seq, "started", None))
        return None

    def _child_op(self, wf: Any, id: str, input: Any, parent_close: str, timeout: Any, wait: bool) -> Any:
        """Begin a child operation: its Replay, or (live) the Live op once ``Child`` is recorded and the child's
        shard server has started or attached it (its ``Start`` durable).  Idempotent on replay: a recorded
        ``Child`` without its ``ChildDone`` asks again (start if missing, attach if running, the outcome if ended)."""
        st = self._st
        engine = st.engine
        w = engine._workflow(wf)
        shard = engine._shard(id)
        if parent_close not in r.PARENT_CLOSE:
            raise ValueError(f"parent_close is one of {r.PARENT_CLOSE}, not {parent_close!r}")
        seconds = None if timeout is None else _durations.parse(timeout)
        op = self._begin(CHILD, id)
        if type(op) is Replay:
            return op
        if op.armed:
            rec = st.machine.history.op(op.seq).armed
        else:
            deadline = None if seconds is None else engine._clock.now() + seconds
            rec = r.Child(st.run, op.seq, id, w.name, input, parent_close, deadline)
            st.append(rec)
        if engine._journal.path is not None:  # the Child first: a crash then finds it and asks again
            engine._journal.wait_durable(st.shard, st.machine.gate())
        lsn = engine._call(shard, ("child", rec, _parent_ref(st, op.seq, wait)))
        engine._durable(shard, lsn)
        return op

    def signal_workflow(self, id: str, signal: Any, value: Any = None) -> None:
        """Send ``signal`` with ``value`` to the run of workflow ID ``id``, durably and exactly once.

        Recorded here (``Send``), and durable, before it is delivered; delivered with dedup
        :func:`fusee.replay.send_dedup` (redelivered after a crash, the target
        keeps one).  Returns once the target's ``Signal`` is durable (or the
        target does not exist or has ended: then it is dropped).
        """
        name = _signal_name(signal)
        if type(id) is not str:
            raise TypeError(f"a workflow ID is a str, not {id!r}")
        op = self._begin(SEND, id)
        if type(op) is Replay:
            return None
        st = self._st
        rec = r.Send(st.run, op.seq, id, name, value)
        st.append(rec)
        journal = st.engine._journal
        if journal.path is not None:  # the Send first (and what led to it): a crash never takes back a delivered signal
            journal.wait_durable(st.shard, st.machine.gate())
        _deliver_send(st.engine, st.id, rec)
        return None

    def continue_as_new(self, input: Any = None) -> None:
        """End this run (``Done`` ``"continued"`` with ``input``) and start a new run of the same type and ID
        with ``input`` and a fresh journal; ``result`` follows to the last run.  Does not return."""
        r.encode_record(r.Done(self._st.run, "continued", 0.0, input))  # NotSerializable: raised here
        raise _ContinueAsNew(input)

    def on_query(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Answer ``engine.query(id, name, arg)`` with ``fn(arg)`` (read-only: records nothing)."""
        if type(name) is not str:
            raise TypeError(f"a query's name is a str, not {name!r}")
        self._st.queries[name] = fn


def _deliver_send(engine: "Engine", sender: str, rec: r.Send) -> None:
    """Deliver a ``Send`` as a signal to its target (dedup from the sender's id, run and seq); wait till durable.
    A target that does not exist is not an error (the signal is dropped)."""
    shard = shard_of(rec.target, engine.shards)
    try:
        lsn = engine._call(shard, ("signal", rec.target, rec.name, rec.payload, send_dedup(sender, rec.run, rec.seq)))
    except NotFound:
        return
    engine._durable(shard, lsn)


class _Parked(BaseException):
    """Raised in a paused run told to park: its process ends, nothing recorded (not an Exception:
    workflow code's ``except Exception`` does not catch it)."""


_WAITING = "fusee_waiting"
_TICK = "fusee_park_tick"


def _run_main(state: _RunState) -> None:
    """A run's process: the workflow function, then its ``Done`` (or, parked, nothing)."""
    try:
        _run_body(state)
    except _Parked:
        pass


def _run_body(state: _RunState) -> None:
    ctx = Ctx(state)
    try:
        try:
            value = state.wf.fn(ctx, state.input)  # type: ignore[union-attr]
        except DeterminismError as exc:
            state.fail_unrecorded(state.determinism or exc)
            return
        except Terminated:
            if state.status != RUNNING:
                return
            raise
        except Cancelled as exc:
            if state.determinism is not None:
                state.fail_unrecorded(state.determinism)
                return
            state.finish("cancelled", exc.reason, ("error", exc))
            return
        except _Deadline:
            state.finish("timed_out", state.deadline, ("error", TimedOut(state.deadline)))
            return
        except _ContinueAsNew as c:
            state.engine._call(state.shard, ("continue", state, c.input))
            return
        except Exception as exc:
            if state.determinism is not None:
                state.fail_unrecorded(state.determinism)
                return
            failure = failure_of(exc)
            state.finish("failed", failure, ("error", Failed(failure)))
            return
        if state.determinism is not None:
            state.fail_unrecorded(state.determinism)
            return
        try:
            state.finish("completed", value, ("ok", value))
        except NotSerializable as exc:
            failure = failure_of(exc)
            state.finish("failed", failure, ("error", Failed(failure)))
    except Terminated:
        if state.status == RUNNING:
            raise


# -- the shard server --------------------------------------------------------------------


class _ShardServer(_gs.GenServer):
    """A shard's state: runs by workflow ID, run numbers, and every request routed to a run."""

    def __init__(self, engine: "Engine", shard: int, recovered: list[_RunState], next_run: int) -> None:
        self.engine = engine
        self.shard = shard
        self.home = engine._journal.home(shard)
        self.runs: dict[str, _RunState] = {}
        self.all: list[_RunState] = []
        self.next_run = next_run
        self._recovered = recovered
        self.max_live = engine._max_live_runs
        self.live: set[_RunState] = set()  # kept only when max_live bounds it; pruned lazily
        self.monitors: dict[Any, _RunState] = {}  # monitor ref -> the run whose process it watches
        # parking (fusee.parking): paused loaded runs that said so, parked runs' wake-ups, one timer
        self.waiting: set[_RunState] = set()
        self.wakeups: list[tuple[float, int, _RunState]] = []  # heap of (wake_at, run, parked run)
        self.timer_at: float | None = None
        self.parks = 0
        self.loads = 0

    def init(self) -> Any:
        for st in self._recovered:
            self.runs[st.id] = st
            self.all.append(st)
        self._recovered = []  # their processes start at _resume, once every shard's server is up
        return ("ok", None)

    def _resume(self) -> None:
        """After every shard's server started (``Engine.open``): start the recovered runs' processes, start the
        next run of a chain whose ``continued`` end was recorded but whose new run was not, and redeliver the
        ``Send`` records of unfinished runs (their targets deduplicate).  A waiting parent re-asks its children
        as its code replays to their ``Child`` operations (:meth:`Ctx._child_op`)."""
        for st in list(self.runs.values()):
            if st.status == "continued":
                self._continue(st, st.outcome[1])  # type: ignore[index]
        for st in list(self.all):
            if st.status != RUNNING or st.pid is not None or st.parked:
                continue
            self._spawn(st)
            sends = st.machine.history.sends
            if sends:
                engine, sender = self.engine, st.id
                _e.spawn(lambda sends=sends: [_deliver_send(engine, sender, s) for s in sends], dispatcher=self.home)

    def _deliver(self, st: _RunState, rec: Any) -> int:
        """Record ``rec`` (a Signal, Cancel or ChildDone) in running run ``st`` and wake it: every wake-up of a
        run passes here (so a parked run is loaded again).  Returns the record's LSN."""
        lsn = st.append(rec)
        self._ensure_loaded(st)
        return lsn

    def _child_done(self, id: str, run: int, seq: int, status: str, payload: Any) -> None:
        """A child of operation ``seq`` of run ``run`` of ``id`` ended: record its ``ChildDone`` (once)."""
        st = self.runs.get(id)
        if st is None or st.run != run or st.status != RUNNING:
            return
        op = st.machine.history.op(seq)
        if op is None or op.kind != CHILD or op.done is not None:
            return
        self._deliver(st, r.ChildDone(run, seq, status, payload))

    def _child(self, rec: r.Child, parent: dict[str, Any]) -> int:
        """Start child ``rec.id`` for ``parent`` (idempotent): a running run of that ID is attached to, one this
        parent started already is taken as is (ended: its outcome is sent at once); else a new run starts.
        Returns the LSN of the child's ``Start``."""
        cur = self.runs.get(rec.id)
        if cur is not None and (cur.status == RUNNING or _same_parent(cur.parent, parent)):
            st = cur
        else:
            wf = self.engine._workflow(rec.wtype)
            st, _ = self._start(wf, rec.id, rec.input, IdPolicy("attach", "start_new"), rec.deadline, parent)
        if parent.get("wait"):
            if st.status == RUNNING:
                if not any(_same_parent(p, parent) for p in st.parents):
                    st.parents.append(parent)
            elif st.status != "continued":
                st.parents = [parent]
                _tell_parents(st)
        return st.start_lsn

    def _parent_closed(self, id: str, parent: dict[str, Any], action: str) -> None:
        """The parent that started run ``id`` ended: terminate or cancel it (``action``) if it still runs."""
        st = self.runs.get(id)
        if st is None or st.status != RUNNING or not _same_parent(st.parent, parent):
            return
        reason = f"parent {parent['id']!r} ended (parent_close={action})"
        if action == "terminate":
            self._terminate(id, reason)
        elif action == "request_cancel":
            self._cancel(id, reason)

    def _continue(self, st: _RunState, input: Any) -> _RunState:
        """End ``st`` ``continued`` (unless recorded already) and start the next run of its ID with ``input``,
        the same type, deadline and parent; its waiting parents move to the new run."""
        if st.status == RUNNING:
            r.encode_record(r.Start(0, st.id, st.wtype, 0, 0.0, input, None))  # NotSerializable: nothing recorded
            st.finish("continued", input, ("continued", input))
        if self.runs.get(st.id) is not st:
            return self.runs[st.id]
        wf = self.engine._workflow(st.wtype)
        new, _ = self._start(wf, st.id, input, IdPolicy("fail", "start_new"), st.deadline, st.parent, {"run": st.run})
        for sig in st.machine.history.unconsumed:  # signals that raced the end go on to the new run, not lost
            self._deliver(new, r.Signal(new.run, sig.name, sig.dedup, sig.payload))
        for p in st.parents:
            if not any(_same_parent(p, q) for q in new.parents):
                new.parents.append(p)
        st.parents = []
        return new

    def _successor(self, st: _RunState) -> _RunState:
        """The run that follows ``st`` (which continued as new): the latest run of its ID."""
        return self._find(st.id)

    def _spawn(self, st: _RunState) -> None:
        """Start ``st``'s run process, monitored: if it dies without a ``Done``, :meth:`_died` ends the run."""
        st.pid, ref = _e.spawn_monitor(_run_main, st, dispatcher=self.home)
        self.monitors[ref] = st
        if self.max_live is not None:
            self.live.add(st)

    def handle_info(self, msg: Any, state: Any) -> Any:
        if type(msg) is tuple and msg and msg[0] == _CHILD_DONE:
            self._child_done(*msg[1:])
        elif type(msg) is tuple and msg and msg[0] == _PARENT_CLOSED:
            self._parent_closed(*msg[1:])
        elif type(msg) is tuple and len(msg) == 5 and msg[0] == "DOWN":
            st = self.monitors.pop(msg[1], None)
            if st is not None:
                self._died(st, msg[4])
        elif type(msg) is tuple and len(msg) == 2 and msg[0] == _WAITING:
            self._waiting(msg[1])
        elif msg == _TICK:
            self.timer_at = None
            self._park_tick()
        return ("noreply", state)

    # -- parking (decisions: fusee.parking)

    def _waiting(self, st: _RunState) -> None:
        """A loaded run paused: note it, and have the timer look at it when it may be parked."""
        if st.status != RUNNING or st.parking or st.pid is None or st.waiting_since is None:
            return
        self.waiting.add(st)
        e = self.engine
        if e._memory_budget is not None:
            self._arm(e._clock.now())
        elif e._park_after is not None:
            self._arm(st.waiting_since + e._park_after)

    def _arm(self, at: float) -> None:
        """Have a tick arrive at engine time ``at`` (unless one is due no later)."""
        if self.timer_at is not None and self.timer_at <= at:
            return
        self.timer_at = at
        _timer.send_after(max(0.0, at - self.engine._clock.now()), _e.self(), _TICK)

    def _park_tick(self, force: bool = False) -> None:
        """Load the parked runs now due, park the waiting runs :func:`fusee.parking.to_park` picks
        (``force``: every waiting run), forget runs past retention; arm the next tick."""
        e = self.engine
        now = e._clock.now()
        if force:
            self.waiting.update(st for st in self.all if st.pid is not None and st.waiting_since is not None)
        while self.wakeups and self.wakeups[0][0] <= now:
            at, _, st = _heappop(self.wakeups)
            if st.parked and st.wake_at == at:
                self._load(st)
        for st in [st for st in self.waiting if st.status != RUNNING or st.waiting_since is None or st.parking]:
            self.waiting.discard(st)
        ws = [_parking.Waiting(st, st.waiting_since, _parking.run_bytes(len(st.machine.history))) for st in self.waiting]
        budget = e._memory_budget
        if force:
            chosen = [w.key for w in ws]
        else:
            loaded = 0
            if budget is not None:
                budget = budget // e.shards
                loaded = sum(
                    _parking.run_bytes(len(st.machine.history)) for st in self.all if st.pid is not None and st.status == RUNNING
                )
            chosen = _parking.to_park(now, e._park_after, budget, loaded, ws)
        for st in chosen:
            self._park(st)
        if e._retention is not None:
            self._forget(now)
        nxt = _parking.next_check(e._park_after, [w for w in ws if w.key in self.waiting])
        if self.wakeups:
            nxt = self.wakeups[0][0] if nxt is None else min(nxt, self.wakeups[0][0])
        if nxt is not None:
            self._arm(nxt)

    def _park(self, st: _RunState) -> None:
        """Tell a paused run's process to end (it raises ``_Parked`` in ``Ctx._pause``); :meth:`_died` parks it."""
        self.waiting.discard(st)
        st.parking = True
        _e.send(st.pid, _WAKE)

    def _parked_now(self, st: _RunState) -> None:
        """A parking run's process has ended: keep its history, or load it again if woken meanwhile."""
        st.parking = False
        st.pid = None
        if st.status != RUNNING:
            return
        if st.wake_pending:
            st.wake_pending = False
            self._spawn_again(st)
            return
        st.parked = True
        self.parks += 1
        if st.wake_at is not None:
            _heappush(self.wakeups, (st.wake_at, st.run, st))
            self._arm(st.wake_at)

    def _load(self, st: _RunState) -> None:
        """Load a parked run again: a new process replays its history (as recovery does)."""
        if not st.parked or st.status != RUNNING:
            return
        st.parked = False
        self._spawn_again(st)

    def _spawn_again(self, st: _RunState) -> None:
        self.loads += 1
        st.machine = Machine(st.machine.history)
        self._spawn(st)

    def _ensure_loaded(self, st: _RunState) -> None:
        """Wake ``st`` (something for it was just recorded): load it if parked, else wake its process."""
        if st.parked:
            self._load(st)
        elif st.parking:
            st.wake_pending = True
        elif st.pid is not None:
            _e.send(st.pid, _WAKE)

    def _forget(self, now: float) -> None:
        """Drop the finished runs past ``retention`` (``result`` gives NotFound)."""
        keep = self.engine._retention
        gone = [st for st in self.all if st.status != RUNNING and _parking.expired(st.finished, now, keep)]
        if gone:
            dead = set(gone)
            self.all = [st for st in self.all if st not in dead]
            for st in gone:
                if self.runs.get(st.id) is st:
                    del self.runs[st.id]

    def _park_now(self, force: bool) -> None:
        """(Tests, bench) run the parking decision now; ``force`` parks every paused run."""
        self._park_tick(force)

    def _parking_stats(self) -> dict[str, int]:
        loaded = sum(1 for st in self.all if st.pid is not None and st.status == RUNNING)
        waiting = sum(1 for st in self.all if st.pid is not None and st.waiting_since is not None)
        parked = sum(1 for st in self.all if st.parked and st.status == RUNNING)
        return {"parked": parked, "loaded": loaded, "waiting": waiting, "parks": self.parks, "loads": self.loads}

    def _checkpoint(self) -> _store.Checkpoint:
        """This shard's checkpoint at the journal's last LSN (runs stopped): every unfinished run's
        records, and each retained finished run's ``Start`` and ``Done``."""
        e = self.engine
        now = e._clock.now()
        out: list[tuple[int, Any]] = []
        for st in self.all:
            h = st.machine.history
            recs = h.records
            if h.done is None:
                out.extend(recs)
            elif not _parking.expired(st.finished, now, e._retention):
                out.append(recs[0])
                out.append(recs[-1])
        out.sort(key=lambda p: p[0])
        bodies = [(lsn, r.encode_record(rec)) for lsn, rec in out]
        return _store.Checkpoint(self.shard, e._journal.last_lsn(self.shard), self.next_run, bodies)

    def _died(self, st: _RunState, reason: Any) -> None:
        """A run process exited: if its run is still running, it died of a bug (or a kill) without ending it.

        A ``Done`` already journaled (the process died between appending it and
        ending the run in memory) ends the run as recorded.  Otherwise the run
        fails in memory only, nothing recorded (like a DeterminismError): a
        reopen replays the journal and resumes it.
        """
        if st.parking:
            self._parked_now(st)
            return
        self.live.discard(st)
        if st.status != RUNNING:
            return
        done = st.machine.done
        if done is not None:
            st._ended(done.status, st.outcome_of_done(done), st.machine.gate())
            if done.status != "continued":
                _tell_parents(st)
            st.finished = done.finished
            return
        try:
            shown = repr(reason)
        except Exception:  # a broken __repr__ must not keep the run running
            shown = object.__repr__(reason)
        st.fail_unrecorded(
            Failed({"type": "RunProcessDied", "message": f"the run's process died: {shown}", "reason": shown})
        )

    def _check_busy(self, ending: _RunState | None) -> None:
        """Raise :class:`Busy` if one more live run would exceed ``max_live_runs`` (nothing recorded);
        ``ending`` is a running run this start terminates first, so its place is freed."""
        live = self.live
        if len(live) < self.max_live:  # type: ignore[operator]
            return
        for st in [st for st in live if st.status != RUNNING]:
            live.discard(st)
        n = len(live) - (1 if ending is not None and ending in live else 0)
        if n >= self.max_live:  # type: ignore[operator]
            raise Busy(self.shard)

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        try:
            reply = ("ok", getattr(self, "_" + request[0])(*request[1:]))
        except Exception as exc:
            reply = ("error", exc)
        return ("reply", reply, state)

    def _find(self, id: str) -> _RunState:
        st = self.runs.get(id)
        if st is None:
            raise NotFound(id)
        keep = self.engine._retention
        if keep is not None and st.status != RUNNING and _parking.expired(st.finished, self.engine._clock.now(), keep):
            self._forget(self.engine._clock.now())
            raise NotFound(id)
        return st

    def _start(
        self,
        wf: Workflow,
        id: str,
        input: Any,
        policy: IdPolicy,
        deadline: float | None = None,
        parent: Any = None,
        origin: Any = None,
    ) -> tuple[_RunState, int]:
        cur = self.runs.get(id)
        ending = None
        if cur is not None:
            action = policy.on_running if cur.status == RUNNING else policy.on_finished
            if action == "fail":
                raise AlreadyExists(id, f"run {cur.run}, {cur.status}")
            if action == "attach":
                return cur, cur.start_lsn
            if action == "terminate":
                ending = cur
        if self.max_live is not None:
            self._check_busy(ending)  # before any terminate: a Busy start records nothing
        run = self.next_run
        start = r.Start(
            run, id, wf.name, wf.version, self.engine._clock.now(), input, policy.plain(), deadline, parent, origin
        )
        body = r.encode_record(start)  # NotSerializable: nothing recorded, nothing terminated
        if ending is not None:
            self._terminate(id, "terminated by a new start (IdPolicy terminate)")
        self.next_run = run + 1
        st = _RunState(self.engine, self.shard, start, Machine(), wf)
        lsn = self.engine._journal.append(self.shard, body)
        st.machine.record(start, lsn)
        st.start_lsn = lsn
        self.runs[id] = st
        self.all.append(st)
        self._spawn(st)
        return st, lsn

    def _run_of(self, id: str) -> _RunState:
        return self._find(id)

    def _watch(self, st: _RunState, a: Any) -> bool:
        if st.status != RUNNING:
            return True
        st.waiters.append(a)
        return False

    def _signal(self, id: str, name: str, value: Any, dedup: Any) -> int | None:
        st = self._find(id)
        if st.status != RUNNING:
            return None
        return self._deliver(st, r.Signal(st.run, name, dedup, value))

    def _cancel(self, id: str, reason: Any) -> int | None:
        st = self._find(id)
        if st.status != RUNNING:
            return None
        if st.machine.history.cancel is not None:
            return st.machine.gate()
        return self._deliver(st, r.Cancel(st.run, reason, None))

    def _terminate(self, id: str, reason: Any) -> int | None:
        st = self._find(id)
        if st.status != RUNNING:
            return None
        r.encode_record(r.Done(st.run, "terminated", 0.0, reason))  # NotSerializable: nothing recorded
        lsn = st.finish("terminated", reason, ("error", Terminated(reason)))
        if st.pid is not None:
            _e.exit(st.pid, "kill")
        return lsn

    def _query(self, id: str, name: str, arg: Any) -> Any:
        st = self._find(id)
        fn = st.queries.get(name)
        if fn is None:
            raise Error(f"run {id!r} answers no query {name!r} (it answers: {sorted(st.queries)})")
        return fn(arg)

    def _describe(self, id: str) -> dict[str, Any]:
        st = self._find(id)
        return _describe(st)

    def _list(self, status: str | None) -> list[dict[str, Any]]:
        return [
            {"id": st.id, "run": st.run, "type": st.wtype, "status": st.status, "shard": st.shard}
            for st in self.runs.values()
            if status is None or st.status == status
        ]

    def _counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for st in self.all:
            out[st.status] = out.get(st.status, 0) + 1
        return out

    def _stop_runs(self) -> None:
        for ref in list(self.monitors):  # a run stopped for shutdown resumes at the next open: not a death
            _e.demonitor(ref, flush=True)
        self.monitors.clear()
        pids = [st.pid for st in self.all if st.pid is not None and st.status == RUNNING]
        for pid in pids:
            _e.exit(pid, "kill")
        for pid in pids:
            _e.exit_reason(pid, timeout=5)


def _describe(st: _RunState) -> dict[str, Any]:
    h = st.machine.history
    return {
        "id": st.id,
        "run": st.run,
        "type": st.wtype,
        "version": st.version,
        "status": st.status,
        "shard": st.shard,
        "input": st.input,
        "started": st.started,
        "finished": st.finished,
        "result": st.outcome[1] if st.outcome and st.outcome[0] == "ok" else None,
        "error": st.outcome[1] if st.outcome and st.outcome[0] == "error" else None,
        "journal": [(lsn, rec) for lsn, rec in h.records],
        "parked": st.parked and st.status == RUNNING,
    }


# -- the public face -----------------------------------------------------------------------


class Run:
    """A handle on one run: ``id``, ``run`` (its number); :meth:`result` waits for its end."""

    __slots__ = ("engine", "id", "run", "_st")

    def __init__(self, engine: "Engine", st: _RunState) -> None:
        self.engine = engine
        self.id = st.id
        self.run = st.run
        self._st = st

    def __repr__(self) -> str:
        return f"<fusee.Run {self.id!r} run {self.run}>"

    @property
    def status(self) -> str:
        """``"running"``, ``"completed"``, ``"failed"``, ``"cancelled"`` or ``"terminated"``."""
        return self._st.status

    def result(self, timeout: float | None = None) -> Any:
        """The run's value once its ``Done`` is durable; raises what it ended with, ``TimeoutError`` after ``timeout``."""
        return self.engine._result_of(self._st, timeout)


class _Following(Run):
    """A handle on a run started through its slot or delay run (``run`` is that run's number):
    ``id`` is the run's own; :attr:`status` and :meth:`result` follow to it (``"queued"`` or
    ``"delayed"`` until it exists)."""

    __slots__ = ()

    def __init__(self, engine: "Engine", st: _RunState, id: str) -> None:
        super().__init__(engine, st)
        self.id = id

    @property
    def status(self) -> str:
        return self.engine.describe(self.id)["status"]

    def result(self, timeout: float | None = None) -> Any:
        return self.engine.result(self.id, timeout)


def _builtin_workflows() -> list[Workflow]:
    """The workflow types every engine has: ``fusee.queued``, ``fusee.concurrency``, ``fusee.delay``."""
    return _concurrency.workflows() + _delay.workflows()


class Engine:
    """A fusee engine: open with :meth:`Engine.open`; a context manager (``shutdown`` on exit)."""

    # parking and retention (set by open; see fusee.parking): defaults for engines made otherwise
    _parks = False
    _park_after: float | None = None
    _memory_budget: int | None = None
    _retention: float | None = None
    _checkpoints: list[Any] | None = None
    _checkpoint_on_shutdown = False
    _recovery: dict[str, int] = {"log_records": 0, "checkpoint_records": 0}

    def __init__(
        self, journal: Journal, workflows: dict[str, Workflow], shards: int, max_live_runs: int | None = None
    ) -> None:
        self._journal = journal
        self._workflows = workflows
        self.shards = shards
        self._max_live_runs = max_live_runs
        self._servers: list[Any] = []
        self.closed = False
        self._clock: Clock = REAL_CLOCK
        # (workflow type, step name) -> the body to run instead (fusee.testing.TestEngine.mock_step)
        self._mocks: dict[tuple[str, str], Callable[..., Any]] = {}

    @classmethod
    def open(
        cls,
        path: str | None,
        workflows: Iterable[Workflow] = (),
        shards: int = 4,
        *,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        zero_fill: bool = True,
        max_live_runs: int | None = None,
        clock: Clock | None = None,
        park_after: float | None = 60.0,
        memory_budget: int | None = None,
        retention: float | None = None,
        checkpoint_on_shutdown: bool = True,
    ) -> "Engine":
        """Open the engine on directory ``path`` (``None``: in memory), recovering every unfinished run.

        ``max_live_runs`` (``None``: unbounded) bounds the live, unfinished runs
        per shard: a ``start`` that would exceed it raises :class:`Busy`, with
        nothing recorded.  Raises :class:`Corrupt` (naming file and offset) for a
        damaged acknowledged record.  ``clock`` (default: the real one) is where
        runs' time comes from (:class:`Clock`).

        Parking (:mod:`fusee.parking`): a run paused (sleep, signal wait, retry
        backoff) for ``park_after`` seconds (``None``: never) is unloaded, its
        records kept; whatever wakes it loads it again.  ``memory_budget``
        (bytes, estimated, split evenly over the shards; ``None``: none) parks
        the longest-waiting runs early.  ``retention`` (seconds; ``None``:
        forever): a finished run is forgotten that long after it ended
        (``result`` raises :class:`NotFound`).  A directory's clean
        :meth:`shutdown` writes checkpoints (unless ``checkpoint_on_shutdown``
        is False), read back here (:mod:`fusee.store`).
        """
        if max_live_runs is not None and (type(max_live_runs) is not int or max_live_runs < 1):
            raise ValueError(f"max_live_runs is None or an int > 0, not {max_live_runs!r}")
        for name, v in (("park_after", park_after), ("retention", retention)):
            if v is not None and (type(v) not in (int, float) or not v >= 0):
                raise ValueError(f"{name} is None or a number of seconds >= 0, not {v!r}")
        if memory_budget is not None and (type(memory_budget) is not int or memory_budget < 0):
            raise ValueError(f"memory_budget is None or an int >= 0 (bytes), not {memory_budget!r}")
        checkpoints: list[Any] = [None] * shards if type(shards) is int and shards > 0 else []
        if path is not None:
            for shard in range(len(checkpoints)):
                d = os.path.join(path, f"shard-{shard}")
                if os.path.isdir(d):
                    checkpoints[shard] = _store.load(d, shard)
        registry: dict[str, Workflow] = {}
        for wf in workflows:
            if type(wf) is not Workflow:
                raise TypeError(f"workflows are @fusee.workflow functions, not {wf!r}")
            held = registry.get(wf.name)
            if held is not None and held is not wf:
                raise ValueError(f"two workflows named {wf.name!r}")
            registry[wf.name] = wf
        for wf in _builtin_workflows():  # fusee.queued, fusee.concurrency, fusee.delay: in every engine
            if wf.name in registry:
                raise ValueError(f"{wf.name!r} is a built-in workflow type of fusee")
            registry[wf.name] = wf
        journal = Journal.open(
            path, shards, segment_size=segment_size, zero_fill=zero_fill, after=[cp.lsn if cp else 0 for cp in checkpoints]
        )
        engine = cls(journal, registry, shards, max_live_runs)
        if clock is not None:
            engine._clock = clock
        engine._park_after = None if park_after is None else float(park_after)
        engine._memory_budget = memory_budget
        engine._parks = park_after is not None or memory_budget is not None
        engine._retention = None if retention is None else float(retention)
        engine._checkpoints = checkpoints
        engine._checkpoint_on_shutdown = bool(checkpoint_on_shutdown)
        engine._recovery = {"log_records": 0, "checkpoint_records": 0}
        try:
            for shard in range(shards):
                recovered, next_run = engine._recover(shard)
                server = _ShardServer(engine, shard, recovered, next_run)
                engine._servers.append(_gs.start(server, dispatcher=server.home))
            for pid in engine._servers:
                _gs.call(pid, ("resume",), timeout=None)
        except BaseException:
            for pid in engine._servers:
                _gs.stop(pid)
            journal.close()
            raise
        return engine

    def _recover(self, shard: int) -> tuple[list[_RunState], int]:
        j = self._journal
        histories: dict[int, History] = {}
        order: list[int] = []
        cp = self._checkpoints[shard] if self._checkpoints else None
        logged = j.recovered(shard)
        feed = logged if cp is None else cp.records + logged
        self._recovery["log_records"] += len(logged)
        self._recovery["checkpoint_records"] += len(feed) - len(logged)

        def where(lsn: int) -> tuple[str | None, int]:
            """The file and offset of a recovered record (a checkpoint's: the checkpoint, offset 0)."""
            try:
                return j.where(shard, lsn)
            except ValueError:
                return (os.path.join(j.path or "", f"shard-{shard}", _store.NAMES[0]), 0)

        for lsn, body in feed:
            try:
                rec = r.decode_record(body)
            except ValueError as e:
                path, offset = where(lsn)
                raise Corrupt(path, offset, f"record {lsn}: {e}") from None
            h = histories.get(rec.run)
            if h is None:
                h = histories[rec.run] = History()
                order.append(rec.run)
            try:
                h.add(rec, lsn)
            except ValueError as e:
                path, offset = where(lsn)
                raise Corrupt(path, offset, f"record {lsn} does not fit its run: {e}") from None
        states = []
        for run in order:
            h = histories[run]
            start = h.start
            st = _RunState(self, shard, start, Machine(h), self._workflows.get(start.wtype))
            st.start_lsn = h.records[0][0]
            if h.done is not None:
                if _parking.expired(h.done.finished, self._clock.now(), self._retention):
                    continue  # retention ended: forgotten
                st._ended(h.done.status, st.outcome_of_done(h.done), h.gate)
                st.finished = h.done.finished
            elif st.wf is None:
                st.fail_unrecorded(UnknownWorkflow(start.wtype, self._user_workflows()))
            states.append(st)
        next_run = max(order) + 1 if order else 0
        return states, (max(next_run, cp.next_run) if cp is not None else next_run)

    # -- plumbing

    def _call(self, shard: int, request: tuple) -> Any:
        if self.closed:
            raise Error("the engine is shut down")
        kind, value = _gs.call(self._servers[shard], request, timeout=None)
        if kind == "error":
            raise value
        return value

    def _shard(self, id: str) -> int:
        if type(id) is not str:
            raise TypeError(f"a workflow ID is a str, not {id!r}")
        return shard_of(id, self.shards)

    def _user_workflows(self) -> list[str]:
        """The names of the workflow types registered at open (the built-in ``fusee.*`` ones aside)."""
        return sorted(n for n in self._workflows if not n.startswith("fusee."))

    def _workflow(self, wf: Any) -> Workflow:
        name = wf.name if type(wf) is Workflow else wf
        held = self._workflows.get(name) if type(name) is str else None
        if held is None:
            raise UnknownWorkflow(name, self._user_workflows())
        return held

    def _durable(self, shard: int, lsn: int | None) -> None:
        if lsn:
            self._journal.wait_durable(shard, lsn)

    def _result_of(self, st: _RunState, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        if st.status == RUNNING:
            a = _e.alias()
            try:
                if not self._call(st.shard, ("watch", st, a)):
                    msg = (_DONE, a)
                    got = _e.receive(lambda m: m if m == msg else NOMATCH, timeout=timeout)
                    if got is TIMEOUT:
                        raise TimeoutError(f"run {st.id!r} has not ended within {timeout} s")
            finally:
                _e.unalias(a)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._journal.wait_durable(st.shard, st.done_lsn, timeout=left):
            raise TimeoutError(f"the end of run {st.id!r} is not durable within {timeout} s")
        if st.status == "continued":  # follow the chain to its last run
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._result_of(self._call(st.shard, ("successor", st)), left)
        kind, value = st.outcome  # type: ignore[misc]
        if kind == "ok":
            return value
        raise value

    # -- the API

    def start(
        self,
        wf: Any,
        id: str,
        input: Any = None,
        id_policy: IdPolicy | None = None,
        *,
        delay: Any = None,
        at: float | None = None,
        timeout: Any = None,
    ) -> Run:
        """Start a run of ``wf`` as workflow ID ``id``; returns once its ``Start`` is durable.

        A taken ID does what ``id_policy`` says (default: :class:`AlreadyExists`).  ``delay`` (a
        duration) or ``at`` (unix seconds): the run starts then, through the delay run
        ``fusee.delay/<id>``.  A type with a concurrency limit starts its slot
        ``fusee.queued/<id>``; ``id_policy`` then applies to the slot's (or delay run's) ID.
        ``timeout`` (a duration): the run's deadline, recorded in its ``Start``; past it the run ends
        ``timed_out`` and its result raises :class:`TimedOut`.
        """
        w = self._workflow(wf)
        shard = self._shard(id)
        policy = IdPolicy.DEFAULT if id_policy is None else id_policy  # type: ignore[attr-defined]
        if type(policy) is not IdPolicy:
            raise TypeError(f"id_policy is a fusee.IdPolicy, not {policy!r}")
        if delay is not None or at is not None or getattr(w, "concurrency", None) is not None:
            return self._start_via(w, id, input, policy, delay, at, timeout)
        deadline = None if timeout is None else self._clock.now() + _durations.parse(timeout)
        st, lsn = self._call(shard, ("start", w, id, input, policy, deadline))
        self._durable(shard, lsn)
        return Run(self, st)

    def _start_via(
        self, w: Workflow, id: str, input: Any, policy: IdPolicy, delay: Any, at: Any, timeout: Any = None
    ) -> Run:
        """Start ``w`` as ``id`` through its slot and/or delay run (:func:`fusee.concurrency.start_plan`);
        ``timeout``, the run's own, counts from when the run itself starts."""
        limit = getattr(w, "concurrency", None)
        key_fn = getattr(w, "key", None)
        key = _concurrency.key_of(key_fn(input)) if limit is not None and key_fn is not None else None
        due = None
        if delay is not None or at is not None:
            d = None if delay is None else _durations.parse(delay)
            due = _delay.due_at(self._clock.now(), d, at)
        seconds = None if timeout is None else _durations.parse(timeout)
        order = self._clock.now() if due is None else due  # a delayed start queues by its due time
        wtype, via, via_input = _concurrency.start_plan(w.name, id, input, limit, key, due, seconds, order)
        shard = self._shard(via)
        st, lsn = self._call(shard, ("start", self._workflows[wtype], via, via_input, policy))
        self._durable(shard, lsn)
        return _Following(self, st, id)

    def execute(
        self,
        wf: Any,
        id: str,
        input: Any = None,
        id_policy: IdPolicy | None = None,
        timeout: float | None = None,
        *,
        delay: Any = None,
        at: float | None = None,
        run_timeout: Any = None,
    ) -> Any:
        """Start and wait for the result in one call (``timeout``: how long to wait here; ``run_timeout``:
        the run's own deadline, as ``start(timeout=)``)."""
        return self.start(wf, id, input, id_policy, delay=delay, at=at, timeout=run_timeout).result(timeout)

    def run(self, id: str) -> Run:
        """A handle on the latest run of workflow ID ``id``."""
        return Run(self, self._call(self._shard(id), ("run_of", id)))

    def result(self, id: str, timeout: float | None = None) -> Any:
        """The result of the latest run of ``id`` (see :meth:`Run.result`).

        While ``id``'s run does not exist yet (a queued or delayed start) this follows its slot or
        delay run to the run it starts; a start withdrawn before it ran raises what ended that
        slot or delay run (:class:`Cancelled`).
        """
        st = self._lookup(id)
        if st is not None and st.status == RUNNING:
            return self._result_of(st, timeout)
        via = self._via(id, st)
        if via is None:
            if st is None:
                raise NotFound(id)
            return self._result_of(st, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            value = self._result_of(via, timeout)
        except TimeoutError:
            raise
        except Error as exc:
            value, failure = None, exc
        else:
            failure = None
        own = self._lookup(id)
        if own is not None and own is not st:  # the run exists now: its own outcome, exactly
            return self._result_of(own, None if deadline is None else max(0.0, deadline - time.monotonic()))
        if failure is not None:
            raise failure
        return value

    def _lookup(self, id: str) -> _RunState | None:
        """The latest run of ``id``, or None."""
        try:
            return self._call(self._shard(id), ("run_of", id))
        except NotFound:
            return None

    def _descends(self, st: _RunState, via: _RunState) -> bool:
        """Whether run ``st`` was started by run ``via``, directly or through its parents (delay -> slot -> run)."""
        p = getattr(st, "parent", None)
        for _ in range(3):
            if type(p) is not dict:
                return False
            if p.get("id") == via.id and p.get("run") == via.run:
                return True
            pid = p.get("id")
            anc = self._lookup(pid) if type(pid) is str else None
            if anc is None or anc.run != p.get("run"):
                return False
            p = getattr(anc, "parent", None)
        return False

    def _via(self, id: str, own: _RunState | None) -> _RunState | None:
        """The slot or delay run standing for ``id``'s run: one that runs (the slot first); else, when
        ``id`` has no run (``own`` None), the latest of them that ended; else None."""
        found = [x for x in (self._lookup(_concurrency.slot_id(id)), self._lookup(_delay.delay_id(id))) if x is not None]
        for x in found:
            if x.status == RUNNING and (own is None or not self._descends(own, x)):
                return x
        if own is None and found:
            return max(found, key=lambda x: x.started)
        return None

    def signal(self, id: str, signal: Any, value: Any = None, dedup: Any = None) -> bool:
        """Send ``signal`` with ``value`` to the run; returns once durable (True), or False if it has ended."""
        name = _signal_name(signal)
        shard = self._shard(id)
        lsn = self._call(shard, ("signal", id, name, value, dedup))
        self._durable(shard, lsn)
        return lsn is not None

    def cancel(self, id: str, reason: Any = None) -> bool:
        """Cancel the run: ``Cancelled`` is raised in it at its next operation; True once durable, False if it has ended.

        A start that waits (queued behind a limit, or delayed) is withdrawn: its slot or delay run
        is cancelled instead, and the run never starts.
        """
        st = self._lookup(id)
        if st is None or st.status != RUNNING:
            via = self._via(id, st)
            if via is not None:
                id = via.id
        shard = self._shard(id)
        lsn = self._call(shard, ("cancel", id, reason))
        self._durable(shard, lsn)
        return lsn is not None

    def terminate(self, id: str, reason: Any = None) -> bool:
        """End the run at once (no compensation); True once durable, False if it had ended."""
        shard = self._shard(id)
        lsn = self._call(shard, ("terminate", id, reason))
        self._durable(shard, lsn)
        return lsn is not None

    def query(self, id: str, name: str, arg: Any = None) -> Any:
        """Ask the run's ``on_query(name, fn)`` handler: ``fn(arg)``."""
        return self._call(self._shard(id), ("query", id, name, arg))

    def describe(self, id: str) -> dict[str, Any]:
        """The latest run of ``id``: status, type, version, timestamps, result or error, and its journal records.

        A start that waits shows as status ``"queued"`` (behind a limit) or ``"delayed"``, with
        ``"via"`` the slot or delay run's ID (``"at"``: when a delayed start is due), no run number
        and no journal; one withdrawn before it ran shows that run's end (``"cancelled"``).
        """
        st = self._lookup(id)
        if st is None or st.status != RUNNING:
            via = self._via(id, st)
            if via is not None:
                return self._describe_via(id, via)
        return self._call(self._shard(id), ("describe", id))

    def _describe_via(self, id: str, via: _RunState) -> dict[str, Any]:
        d = self._call(self._shard(via.id), ("describe", via.id))
        wtype, input, at = _concurrency.following(d["type"], d["input"])
        status = d["status"]
        if status == RUNNING:
            status = "queued" if d["type"] == _concurrency.SLOT_TYPE else "delayed"
        return {
            "id": id,
            "run": None,
            "type": wtype,
            "version": None,
            "status": status,
            "shard": self._shard(id),
            "input": input,
            "started": d["started"],
            "finished": d["finished"],
            "result": d["result"],
            "error": d["error"],
            "journal": [],
            "via": via.id,
            "at": at,
        }

    def list(self, status: str | None = None) -> list[dict[str, Any]]:
        """The latest run of every workflow ID (``status``: only those with it).

        A start that waits behind a limit or a delay is listed under its own ID as ``"queued"`` or
        ``"delayed"`` (as :meth:`describe` shows it), beside its slot or delay run.
        """
        out: list[dict[str, Any]] = []
        for shard in range(self.shards):
            out.extend(self._call(shard, ("list", None)))
        by_id = {d["id"]: d for d in out}
        for d in out:
            if d["status"] != RUNNING or d["type"] not in (_concurrency.SLOT_TYPE, _delay.DELAY_TYPE):
                continue
            id = d["id"].split("/", 1)[1]
            own = by_id.get(id)
            if own is not None and own["status"] == RUNNING:
                continue
            try:
                w = self.describe(id)
            except NotFound:
                continue
            by_id[id] = {k: w[k] for k in ("id", "run", "type", "status", "shard")}
        return sorted((d for d in by_id.values() if status is None or d["status"] == status), key=lambda d: d["id"])

    def metrics(self) -> dict[str, Any]:
        """Runs by status, and the journal's flush statistics (records per flush, flush latency)."""
        runs = {s: 0 for s in STATUSES}
        for shard in range(self.shards):
            for k, v in self._call(shard, ("counts",)).items():
                runs[k] = runs.get(k, 0) + v
        j = self._journal.metrics()
        return {
            "runs": runs,
            "records": j["records"],
            "flushes": j["flushes"],
            "records_per_flush": j["records_per_flush"],
            "flush_seconds_mean": j["flush_seconds_mean"],
            "flush_seconds_max": j["flush_seconds_max"],
            "inline_flushes": j["inline_flushes"],
            "journal": j,
            **self._parking_metrics(),
        }

    def _parking_metrics(self) -> dict[str, Any]:
        """``runs_parked`` (unloaded, records kept), ``runs_loaded`` (unfinished with a process),
        ``runs_waiting`` (loaded and paused), ``parks``/``loads`` (counts since open), and what the
        open recovered (``recovered_log_records``, ``recovered_checkpoint_records``)."""
        out = {"runs_parked": 0, "runs_loaded": 0, "runs_waiting": 0, "parks": 0, "loads": 0}
        keys = {"parked": "runs_parked", "loaded": "runs_loaded", "waiting": "runs_waiting", "parks": "parks", "loads": "loads"}
        for shard in range(self.shards):
            for k, v in self._call(shard, ("parking_stats",)).items():
                out[keys[k]] += v
        out["recovered_log_records"] = self._recovery["log_records"]
        out["recovered_checkpoint_records"] = self._recovery["checkpoint_records"]
        return out

    def _park_now(self, force: bool = True) -> None:
        """(Tests, benchmarks) run every shard's parking decision now; ``force``: park every paused run."""
        for shard in range(self.shards):
            self._call(shard, ("park_now", force))

    def _checkpoint_all(self) -> list[int]:
        """Write every shard's checkpoint (runs stopped) once the journal is durable through it; its LSNs."""
        lsns = []
        for shard, pid in enumerate(self._servers):
            kind, cp = _gs.call(pid, ("checkpoint",), timeout=None)
            if kind == "error":
                raise cp
            if cp.lsn:
                self._journal.wait_durable(shard, cp.lsn)
            _store.write(os.path.join(self._journal.path, f"shard-{shard}"), cp)
            lsns.append(cp.lsn)
        return lsns

    def shutdown(self) -> None:
        """Stop every run process (they resume at the next open), flush the journal, close.  Idempotent.

        On a directory, then write each shard's checkpoint (two copies,
        :mod:`fusee.store`) and delete the log segments it covers: the next
        open replays nothing from the log.
        """
        if self.closed:
            return
        lsns: list[int] = []
        try:
            for pid in self._servers:
                _gs.call(pid, ("stop_runs",), timeout=None)
            if self._checkpoint_on_shutdown and self._journal.path is not None and self._servers:
                lsns = self._checkpoint_all()
            for pid in self._servers:
                _gs.stop(pid)
        finally:
            self.closed = True
            self._journal.close()
        for shard, lsn in enumerate(lsns):
            self._journal.delete_before(shard, lsn)

    close = shutdown

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
