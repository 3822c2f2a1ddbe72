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
import random as _random
import time
import uuid as _uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT
from ensemble import gen_server as _gs

from . import durations as _durations
from . import records as r
from .crc32c import crc32c
from .errors import (
    AlreadyExists,
    Busy,
    Cancelled,
    Corrupt,
    DeterminismError,
    Error,
    Failed,
    NotFound,
    NotSerializable,
    StepFailed,
    Terminated,
    UnknownWorkflow,
    failure_of,
)
from .journal import DEFAULT_SEGMENT_SIZE, Journal
from .replay import SLEEP, STEP, VALUE, WAIT, History, Machine, Replay

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
STATUSES = ("running", "completed", "failed", "cancelled", "terminated")


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


def workflow(name: str, version: int = 1) -> Callable[[Callable[..., Any]], Workflow]:
    """Decorate ``def fn(ctx, input)`` as the workflow type ``name`` at ``version``."""

    def define(fn: Callable[..., Any]) -> Workflow:
        return Workflow(name, version, fn)

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
        return ("error", Failed(payload))


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
        try:
            return st.machine.begin(kind, name)
        except DeterminismError as e:
            st.determinism = e
            raise

    def _check_cancel(self) -> None:
        m = self._st.machine
        if m.cancelling:
            c = m.take_cancel()
            if c is not None:
                raise c

    def _pause(self, at: float | None) -> None:
        """Park until woken (a signal or a cancel arrived) or until unix time ``at``."""
        self._st.engine._clock.pause(at)
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

    def on_query(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Answer ``engine.query(id, name, arg)`` with ``fn(arg)`` (read-only: records nothing)."""
        if type(name) is not str:
            raise TypeError(f"a query's name is a str, not {name!r}")
        self._st.queries[name] = fn


def _run_main(state: _RunState) -> None:
    """A run's process: the workflow function, then its ``Done``."""
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

    def init(self) -> Any:
        for st in self._recovered:
            self.runs[st.id] = st
            self.all.append(st)
        for st in self._recovered:
            if st.status == RUNNING:
                self._spawn(st)
        self._recovered = []
        return ("ok", None)

    def _spawn(self, st: _RunState) -> None:
        """Start ``st``'s run process, monitored: if it dies without a ``Done``, :meth:`_died` ends the run."""
        st.pid, ref = _e.spawn_monitor(_run_main, st, dispatcher=self.home)
        self.monitors[ref] = st
        if self.max_live is not None:
            self.live.add(st)

    def handle_info(self, msg: Any, state: Any) -> Any:
        if type(msg) is tuple and len(msg) == 5 and msg[0] == "DOWN":
            st = self.monitors.pop(msg[1], None)
            if st is not None:
                self._died(st, msg[4])
        return ("noreply", state)

    def _died(self, st: _RunState, reason: Any) -> None:
        """A run process exited: if its run is still running, it died of a bug (or a kill) without ending it.

        A ``Done`` already journaled (the process died between appending it and
        ending the run in memory) ends the run as recorded.  Otherwise the run
        fails in memory only, nothing recorded (like a DeterminismError): a
        reopen replays the journal and resumes it.
        """
        self.live.discard(st)
        if st.status != RUNNING:
            return
        done = st.machine.done
        if done is not None:
            st._ended(done.status, st.outcome_of_done(done), st.machine.gate())
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
        return st

    def _start(self, wf: Workflow, id: str, input: Any, policy: IdPolicy) -> tuple[_RunState, int]:
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
        start = r.Start(run, id, wf.name, wf.version, self.engine._clock.now(), input, policy.plain())
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
        lsn = st.append(r.Signal(st.run, name, dedup, value))
        _e.send(st.pid, _WAKE)
        return lsn

    def _cancel(self, id: str, reason: Any) -> int | None:
        st = self._find(id)
        if st.status != RUNNING:
            return None
        if st.machine.history.cancel is not None:
            return st.machine.gate()
        lsn = st.append(r.Cancel(st.run, reason, None))
        _e.send(st.pid, _WAKE)
        return lsn

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


class Engine:
    """A fusee engine: open with :meth:`Engine.open`; a context manager (``shutdown`` on exit)."""

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
    ) -> "Engine":
        """Open the engine on directory ``path`` (``None``: in memory), recovering every unfinished run.

        ``max_live_runs`` (``None``: unbounded) bounds the live, unfinished runs
        per shard: a ``start`` that would exceed it raises :class:`Busy`, with
        nothing recorded.  Raises :class:`Corrupt` (naming file and offset) for a
        damaged acknowledged record.  ``clock`` (default: the real one) is where
        runs' time comes from (:class:`Clock`).
        """
        if max_live_runs is not None and (type(max_live_runs) is not int or max_live_runs < 1):
            raise ValueError(f"max_live_runs is None or an int > 0, not {max_live_runs!r}")
        registry: dict[str, Workflow] = {}
        for wf in workflows:
            if type(wf) is not Workflow:
                raise TypeError(f"workflows are @fusee.workflow functions, not {wf!r}")
            held = registry.get(wf.name)
            if held is not None and held is not wf:
                raise ValueError(f"two workflows named {wf.name!r}")
            registry[wf.name] = wf
        journal = Journal.open(path, shards, segment_size=segment_size, zero_fill=zero_fill)
        engine = cls(journal, registry, shards, max_live_runs)
        if clock is not None:
            engine._clock = clock
        try:
            for shard in range(shards):
                recovered, next_run = engine._recover(shard)
                server = _ShardServer(engine, shard, recovered, next_run)
                engine._servers.append(_gs.start(server, dispatcher=server.home))
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
        for lsn, body in j.recovered(shard):
            try:
                rec = r.decode_record(body)
            except ValueError as e:
                path, offset = j.where(shard, lsn)
                raise Corrupt(path, offset, f"record {lsn}: {e}") from None
            h = histories.get(rec.run)
            if h is None:
                h = histories[rec.run] = History()
                order.append(rec.run)
            try:
                h.add(rec, lsn)
            except ValueError as e:
                path, offset = j.where(shard, lsn)
                raise Corrupt(path, offset, f"record {lsn} does not fit its run: {e}") from None
        states = []
        for run in order:
            h = histories[run]
            start = h.start
            st = _RunState(self, shard, start, Machine(h), self._workflows.get(start.wtype))
            st.start_lsn = h.records[0][0]
            if h.done is not None:
                st._ended(h.done.status, st.outcome_of_done(h.done), h.gate)
                st.finished = h.done.finished
            elif st.wf is None:
                st.fail_unrecorded(UnknownWorkflow(start.wtype, sorted(self._workflows)))
            states.append(st)
        return states, (max(order) + 1 if order else 0)

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

    def _workflow(self, wf: Any) -> Workflow:
        name = wf.name if type(wf) is Workflow else wf
        held = self._workflows.get(name) if type(name) is str else None
        if held is None:
            raise UnknownWorkflow(name, sorted(self._workflows))
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
        kind, value = st.outcome  # type: ignore[misc]
        if kind == "ok":
            return value
        raise value

    # -- the API

    def start(self, wf: Any, id: str, input: Any = None, id_policy: IdPolicy | None = None) -> Run:
        """Start a run of ``wf`` as workflow ID ``id``; returns once its ``Start`` is durable.

        A taken ID does what ``id_policy`` says (default: :class:`AlreadyExists`).
        """
        w = self._workflow(wf)
        shard = self._shard(id)
        policy = IdPolicy.DEFAULT if id_policy is None else id_policy  # type: ignore[attr-defined]
        if type(policy) is not IdPolicy:
            raise TypeError(f"id_policy is a fusee.IdPolicy, not {policy!r}")
        st, lsn = self._call(shard, ("start", w, id, input, policy))
        self._durable(shard, lsn)
        return Run(self, st)

    def execute(self, wf: Any, id: str, input: Any = None, id_policy: IdPolicy | None = None, timeout: float | None = None) -> Any:
        """Start and wait for the result in one call."""
        return self.start(wf, id, input, id_policy).result(timeout)

    def run(self, id: str) -> Run:
        """A handle on the latest run of workflow ID ``id``."""
        return Run(self, self._call(self._shard(id), ("run_of", id)))

    def result(self, id: str, timeout: float | None = None) -> Any:
        """The result of the latest run of ``id`` (see :meth:`Run.result`)."""
        return self.run(id).result(timeout)

    def signal(self, id: str, signal: Any, value: Any = None, dedup: Any = None) -> bool:
        """Send ``signal`` with ``value`` to the run; returns once durable (True), or False if it has ended."""
        name = _signal_name(signal)
        shard = self._shard(id)
        lsn = self._call(shard, ("signal", id, name, value, dedup))
        self._durable(shard, lsn)
        return lsn is not None

    def cancel(self, id: str, reason: Any = None) -> bool:
        """Cancel the run: ``Cancelled`` is raised in it at its next operation; True once durable, False if it has ended."""
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
        """The latest run of ``id``: status, type, version, timestamps, result or error, and its journal records."""
        return self._call(self._shard(id), ("describe", id))

    def list(self, status: str | None = None) -> list[dict[str, Any]]:
        """The latest run of every workflow ID (``status``: only those with it)."""
        out: list[dict[str, Any]] = []
        for shard in range(self.shards):
            out.extend(self._call(shard, ("list", status)))
        return sorted(out, key=lambda d: d["id"])

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
        }

    def shutdown(self) -> None:
        """Stop every run process (they resume at the next open), flush the journal, close.  Idempotent."""
        if self.closed:
            return
        try:
            for pid in self._servers:
                _gs.call(pid, ("stop_runs",), timeout=None)
            for pid in self._servers:
                _gs.stop(pid)
        finally:
            self.closed = True
            self._journal.close()

    close = shutdown

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
