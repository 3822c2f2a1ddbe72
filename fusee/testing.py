"""fusee's test kit: an engine on virtual time, step mocks, and crash injection at every record boundary.

* :class:`VirtualClock` — a :class:`fusee.engine.Clock` whose time moves only
  when told (:meth:`VirtualClock.advance`, :meth:`VirtualClock.advance_to`);
  a run pausing on a deadline registers with it and is sent ``"fusee_wake"``
  once time passes that deadline.
* :class:`TestEngine` — a :class:`fusee.Engine` (wrapped) on a virtual clock,
  on disk in a temporary directory it deletes on close (or on ``path``).
  :meth:`TestEngine.result` and :meth:`TestEngine.execute` skip virtual time:
  whenever nothing happens for :attr:`TestEngine.idle` real seconds while runs
  pause on virtual deadlines, the clock jumps to the earliest one, so a
  workflow sleeping a day, then a week, ends in milliseconds.
  :meth:`TestEngine.mock_step` replaces a step's body; :meth:`TestEngine.crash`
  emulates a crash in-process and :meth:`TestEngine.reopen` recovers.
* :func:`crash_everywhere` — reruns a scenario with a crash injected right
  after each record becomes durable, and checks that it ends with the same
  result and that no step body ran again once its ``Step`` record was durable.
* :class:`FaultyDisk` — a :class:`fusee.disk.Disk` (``Engine.open(..., disk=)``)
  that fails chosen calls with ``ENOSPC`` or ``EIO``: the Nth write, sync,
  allocation or rename, or every one while the disk is "full".
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT
from ensemble.threads import allocate_lock as _allocate_lock

from . import records as _r
from .disk import OPS, Disk
from .engine import Clock, Engine, IdPolicy, Run, Workflow, open_engine
from .step_context import _takes_step_context

__all__ = [
    "VirtualClock",
    "TestEngine",
    "CrashReport",
    "Trial",
    "crash_everywhere",
    "wait_until",
    "parked_memory",
    "FaultyDisk",
]

_WAKE = "fusee_wake"
SEGMENT_SIZE = 1 << 20  # small segments keep every open (and crash_everywhere's many opens) quick


def _is_wake(m: Any) -> Any:
    return m if m == _WAKE else NOMATCH


# -- virtual time ----------------------------------------------------------------------------


class _Pause:
    """One registered pause: the process and its virtual deadline."""

    __slots__ = ("pid", "at")

    def __init__(self, pid: Any, at: float) -> None:
        self.pid = pid
        self.at = at


class VirtualClock(Clock):
    """Virtual unix time, moved only by :meth:`advance` / :meth:`advance_to` (thread-safe).

    ``now()`` starts at ``start`` (default: the real time at creation) and never
    moves by itself.  ``pause(at)`` (called by a run process on any carrier)
    registers the caller until virtual time reaches ``at`` and waits for a
    ``"fusee_wake"``; whatever wakes it first (a signal, a cancel) ends the
    pause and withdraws the registration, so a stale one never lingers.
    """

    __slots__ = ("_now", "_lock", "_pauses")

    def __init__(self, start: float | None = None) -> None:
        self._now = float(time.time() if start is None else start)
        self._lock = _allocate_lock()
        self._pauses: set[_Pause] = set()

    def now(self) -> float:
        """The virtual unix time."""
        return self._now

    def pause(self, at: float | None) -> None:
        """Park the calling process until a ``"fusee_wake"`` arrives (taken) or virtual time reaches ``at``."""
        if at is None:
            _e.receive(_is_wake)
            return
        entry = _Pause(_e.self(), float(at))
        with self._lock:
            if self._now >= entry.at:
                return
            self._pauses.add(entry)
        try:
            _e.receive(_is_wake)
        finally:
            with self._lock:
                self._pauses.discard(entry)  # gone already if advance woke it (its wake is taken)

    def advance(self, seconds: float) -> float:
        """Move virtual time forward by ``seconds`` (>= 0), waking every pause whose deadline passed; the new time."""
        if not seconds >= 0:
            raise ValueError(f"time only moves forward, not by {seconds!r}")
        with self._lock:
            target = self._now + seconds
        return self.advance_to(target)

    def advance_to(self, t: float) -> float:
        """Move virtual time to ``t`` (never backwards), waking every pause whose deadline passed; the new time."""
        with self._lock:
            if t > self._now:
                self._now = float(t)
            now = self._now
            due = [p for p in self._pauses if p.at <= now]
            for p in due:
                self._pauses.discard(p)
                _e.send(p.pid, _WAKE)  # under the lock: a pause that ends meanwhile finds its wake queued
        return now

    def waiting(self) -> list[float]:
        """The deadlines live processes are paused on, earliest first."""
        with self._lock:
            return sorted(p.at for p in self._pauses if _e.is_alive(p.pid))

    def next_deadline(self) -> float | None:
        """The earliest deadline a live process is paused on, or None."""
        with self._lock:
            live = [p.at for p in self._pauses if _e.is_alive(p.pid)]
        return min(live) if live else None

    def skip(self) -> bool:
        """Jump to the earliest deadline a process is paused on and wake it; False if none pauses."""
        at = self.next_deadline()
        if at is None:
            return False
        self.advance_to(at)
        return True


# -- the engine ------------------------------------------------------------------------------


class _Mocks(dict):
    """``(workflow type, step name) -> body``: the engine's step hook (:data:`fusee.host.StepHook`).
    Every body the engine takes from it (mocked or not: it is consulted for each step body about to
    run) is wrapped to report ``s.key`` to ``on_body`` first, when set."""

    def __init__(self) -> None:
        super().__init__()
        self.on_body: Callable[[str, str], None] | None = None

    def __bool__(self) -> bool:
        return True  # the engine consults mocks only when there are some: always, to count bodies

    def get(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        fn = dict.get(self, key, default)
        on_body = self.on_body
        if on_body is None or fn is None:
            return fn
        takes = _takes_step_context(fn)

        def body(s: Any) -> Any:
            on_body(s.key, s.name)
            return fn(s) if takes else fn()

        return body


class TestEngine:
    """A :class:`fusee.Engine` on a :class:`VirtualClock`, for tests.

    ``path`` None: a fresh temporary directory, deleted on :meth:`close`; else
    that directory (kept).  ``options`` go to :meth:`fusee.Engine.open`
    (parking is off unless ``park_after`` is given).  Every :class:`fusee.Engine` method is available
    (delegated); :meth:`start`, :meth:`run`, :meth:`result` and :meth:`execute`
    wait with virtual-time skipping (see the module docstring).  A context
    manager (:meth:`close` on exit).
    """

    __test__ = False  # not a pytest test class
    idle: float = 0.005  # real seconds without progress before the clock jumps to the next deadline

    def __init__(
        self,
        workflows: Iterable[Workflow] = (),
        shards: int = 1,
        path: str | None = None,
        *,
        clock: VirtualClock | None = None,
        segment_size: int = SEGMENT_SIZE,
        **options: Any,
    ) -> None:
        self.workflows = list(workflows)
        self.shards = shards
        self.clock = clock if clock is not None else VirtualClock()
        self._own_dir = path is None
        self.path = tempfile.mkdtemp(prefix="fusee-test-") if path is None else path
        self._options: dict[str, Any] = {"segment_size": segment_size, **options}
        # Parking is off unless asked for (park_after=...): then a skip also reaches parked runs'
        # wake-ups and the moments waiting runs are due to be parked.
        self._options.setdefault("park_after", None)
        self._mocks = _Mocks()
        self.engine: Engine = self._open()

    def _open(self) -> Engine:
        try:
            return open_engine(
                self.path, self.workflows, self.shards, clock=self.clock, step_hook=self._mocks, **self._options
            )
        except BaseException:
            self._remove_dir()
            raise

    def __getattr__(self, name: str) -> Any:
        eng = self.__dict__.get("engine")
        if eng is None:
            raise AttributeError(name)
        return getattr(eng, name)

    def __repr__(self) -> str:
        return f"<fusee.testing.TestEngine {self.path!r} t={self.clock.now():.3f}>"

    # -- virtual time

    def now(self) -> float:
        """The engine's virtual unix time."""
        return self.clock.now()

    def advance(self, seconds: float) -> float:
        """Move virtual time forward by ``seconds`` (waking the runs it makes due); the new time."""
        return self.clock.advance(seconds)

    def advance_to(self, t: float) -> float:
        """Move virtual time to ``t`` (waking the runs it makes due); the new time."""
        return self.clock.advance_to(t)

    def _progress(self) -> tuple[int, ...]:
        j = self.engine.host.journal
        return tuple(j.durable_lsn(s) for s in range(self.shards))

    def result_of(self, run: Run, timeout: float | None = None) -> Any:
        """:meth:`Run.result`'s wait, skipping virtual time whenever nothing progresses for ``idle`` s.

        ``timeout`` is in real seconds (None: no limit).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = self._progress()
            wait = self.idle if deadline is None else min(self.idle, max(0.0, deadline - time.monotonic()))
            try:
                return self.engine.result_of(run, wait)
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            if self._progress() == seen:
                self._skip()

    def _skip(self) -> bool:
        """Jump to the next virtual deadline: a run paused on the clock, or a parking event (a parked
        run due to wake, a waiting run due to be parked), whichever comes first; False if none."""
        at = self.clock.next_deadline()
        parking = self.engine.next_wakeup() if self.engine.host.parking.park_after is not None else None
        if parking is not None and (at is None or parking < at):
            at = parking
        if at is None:
            return False
        self.clock.advance_to(at)
        if parking is not None:
            self.engine.park_now(False)  # the shards' own ticks are armed in real time
        return True

    # -- the engine API with virtual-time waits

    def start(self, wf: Any, id: str, input: Any = None, id_policy: IdPolicy | None = None, **options: Any) -> Run:
        """:meth:`fusee.Engine.start` (``options``: its keyword options, ``update=`` too); the handle's
        ``result()`` skips virtual time."""
        run = self.engine.start(wf, id, input, id_policy, **options)
        own = self._own(run)
        own.update_result = run.update_result
        return own

    def run(self, id: str) -> Run:
        """:meth:`fusee.Engine.run`; the handle's ``result()`` skips virtual time."""
        return self._own(self.engine.run(id))

    def _own(self, run: Run) -> Run:
        """A handle on the run ``run`` is a handle on, whose waits go through this test engine (skipping
        virtual time)."""
        return Run(self, run._st)  # type: ignore[arg-type]

    def result(self, id: str, timeout: float | None = None) -> Any:
        """The result of the latest run of ``id``, skipping virtual time; ``timeout`` in real seconds."""
        return self.run(id).result(timeout)

    def execute(
        self, wf: Any, id: str, input: Any = None, id_policy: IdPolicy | None = None, timeout: float | None = None
    ) -> Any:
        """Start and wait for the result (skipping virtual time); ``timeout`` in real seconds."""
        return self.start(wf, id, input, id_policy).result(timeout)

    def mock_step(self, wf: Any, step_name: str, fn: Callable[..., Any]) -> None:
        """Run ``fn()`` (or ``fn(s)``) instead of the body of step ``step_name`` of ``wf`` (a workflow or its
        type name), from now on and across :meth:`reopen`."""
        wtype = wf.name if type(wf) is Workflow else wf
        if type(wtype) is not str or type(step_name) is not str:
            raise TypeError(f"mock_step takes a workflow (or its name) and a step name, not {wf!r}, {step_name!r}")
        if not callable(fn):
            raise TypeError(f"a step mock is callable, not {fn!r}")
        self._mocks[(wtype, step_name)] = fn

    # -- lifecycle

    @property
    def closed(self) -> bool:
        """True once the current engine is shut down or crashed (until :meth:`reopen`)."""
        return self.engine.closed

    def crash(self) -> None:
        """Emulate a crash in-process: kill every process of the engine abruptly, drop every record not yet
        durable and close the files (nothing is flushed).  :meth:`reopen` recovers."""
        if not self.engine.closed:
            self.engine.host.abandon()

    def reopen(self) -> "TestEngine":
        """Shut the engine down (if it is open) and open it again on the same directory, clock and mocks."""
        if not self.engine.closed:
            self.engine.shutdown()
        self.engine = self._open()
        return self

    def shutdown(self) -> None:
        """Shut the engine down cleanly (its directory stays: :meth:`reopen` recovers).  Idempotent."""
        self.engine.shutdown()

    def close(self) -> None:
        """Shut the engine down and delete its directory if it made it.  Idempotent."""
        try:
            self.engine.shutdown()
        finally:
            self._remove_dir()

    def _remove_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> "TestEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- crash injection ---------------------------------------------------------------------------


class _Recorder:
    """Counts the journal's appends (every shard, in append order); with ``limit`` k, every append after
    the k-th freezes its caller for good and the k-th tells ``driver``: the crash point is reached."""

    def __init__(self, journal: Any, limit: int | None, driver: Any) -> None:
        self.real = journal.append
        self.limit = limit
        self.driver = driver
        self.count = 0
        self.last: dict[int, int] = {}  # shard -> highest LSN appended within the limit
        self.lock = _allocate_lock()
        journal.append = self.append

    def append(self, shard: int, body: bytes) -> int:
        with self.lock:
            if self.limit is None or self.count < self.limit:
                lsn = self.real(shard, body)
                self.count += 1
                self.last[shard] = lsn
                if self.count == self.limit:
                    _e.send(self.driver, ("fusee.crash_point", self))
                return lsn
        _e.receive(lambda m: NOMATCH)  # frozen until the crash kills it
        raise AssertionError("unreachable")


@dataclass
class Trial:
    """One crash: after record ``k`` of ``records``; ``durable_steps``: the step keys whose ``Step``
    record survived; ``bodies``: step-body runs per step name (before and after the crash)."""

    k: int
    records: int
    durable_steps: set[str] = field(default_factory=set)
    bodies_before: dict[str, int] = field(default_factory=dict)
    bodies_after: dict[str, int] = field(default_factory=dict)


@dataclass
class CrashReport:
    """What :func:`crash_everywhere` ran: ``boundaries`` (records in the clean run, one crash after each),
    ``cases`` (runs of the case: the clean one, then two per crash), the clean ``result``, and each trial."""

    boundaries: int
    cases: int
    result: Any
    trials: list[Trial]


class _Bodies:
    """Step-body runs, by key and by name (thread-safe: bodies run on shard carriers)."""

    def __init__(self) -> None:
        self.lock = _allocate_lock()
        self.keys: dict[str, int] = {}
        self.names: dict[str, int] = {}

    def __call__(self, key: str, name: str) -> None:
        with self.lock:
            self.keys[key] = self.keys.get(key, 0) + 1
            self.names[name] = self.names.get(name, 0) + 1


def _recovered(engine: Engine) -> Iterator[tuple[str, Any]]:
    """Every record the journal recovered (durable at the crash), each with its run's workflow ID ("?" for
    a run whose Start was not recovered), shard by shard in journal order."""
    j = engine.host.journal
    for shard in range(engine.shards):
        ids: dict[int, str] = {}
        for _lsn, body in j.recovered(shard):
            rec = _r.decode_record(body)
            if type(rec) is _r.Start:
                ids[rec.run] = rec.id
            yield ids.get(rec.run, "?"), rec


def _durable_step_keys(engine: Engine) -> set[str]:
    """The keys (``"<id>/<run>/<seq>"``) of every step whose final ``Step`` record the journal recovered."""
    return {f"{id}/{rec.run}/{rec.seq}" for id, rec in _recovered(engine) if type(rec) is _r.Step}


def _durable_chunks(engine: Engine) -> dict[tuple[str, int, str], list[Any]]:
    """Every stream's chunks the journal recovered (durable at the crash), by (workflow ID, run, stream)."""
    out: dict[tuple[str, int, str], list[Any]] = {}
    for id, rec in _recovered(engine):
        if type(rec) is _r.Chunk:
            out.setdefault((id, rec.run, rec.stream), []).append(rec.payload)
    return out


def _stream_now(engine: Engine, id: str, run: int, name: str) -> list[Any] | None:
    """The chunks of stream ``name`` of run ``run`` of ``id`` the engine holds now (None: run not held)."""
    for o in engine.host._objects:
        for st in getattr(o, "all", ()):
            if st.id == id and st.run == run:
                log = st.machine.history.stream(name)
                return [] if log is None else list(log.chunks)
    return None


def _case_main(case: Callable[[TestEngine], Any], engine: TestEngine, driver: Any) -> None:
    """The crashing half of a trial, in a process of its own (so the driver can crash it mid-call)."""
    try:
        outcome = ("ok", case(engine))
    except BaseException as exc:  # noqa: BLE001 - reported to the driver
        outcome = ("error", exc)
    _e.send(driver, ("fusee.case_done", outcome))


def _await_crash_point(rec: _Recorder, k: int, timeout: float) -> None:
    """Wait until append ``k`` happened (then until every append up to it is durable) or the case ended."""
    def match(m: Any) -> Any:
        if type(m) is tuple and len(m) == 2 and (m[0] == "fusee.case_done" or m == ("fusee.crash_point", rec)):
            return m
        return NOMATCH

    got = _e.receive(match, timeout=timeout)
    if got is TIMEOUT:
        raise AssertionError(f"crash after record {k}: the case neither ended nor reached record {k} within {timeout} s")
    if got[0] == "fusee.case_done" and got[1][0] == "error" and rec.count < k:
        raise AssertionError(f"crash after record {k}: the case failed before the crash: {got[1][1]!r}") from got[1][1]


def crash_everywhere(
    case: Callable[[TestEngine], Any],
    workflows: Iterable[Workflow],
    *,
    shards: int = 1,
    start: float | None = None,
    timeout: float = 30.0,
    **options: Any,
) -> CrashReport:
    """Run ``case(engine)`` clean, then once per record boundary k = 1..R with a crash right after record
    k is durable, reopening and running the case again to its end; return a :class:`CrashReport`.

    ``case`` drives one scenario on a :class:`TestEngine` and returns its result;
    it must be re-runnable after a reopen (start with ``IdPolicy.ATTACH`` and
    await the result).  Each trial uses a fresh directory and a clock starting
    at ``start`` (default: now, the same for every trial).  Raises
    AssertionError naming k if a trial's result differs from the clean one, or
    if a step body ran after the reopen although its ``Step`` record was
    durable at the crash.  ``timeout`` (real seconds) bounds each case run.  ``options`` go to every
    :class:`TestEngine` (``on_exhausted="pause"``, say).

    A case may apply updates (``engine.update(..., update_id=...)``: an update sent again after the
    crash is answered from the journal), settle async steps (``engine.complete``: a token whose
    ``Awaiting`` did not survive raises :class:`fusee.errors.InvalidToken`, and ``start_fn`` hands out
    a new one; a settled one raises :class:`fusee.errors.AlreadySettled`) and resume paused runs.
    Streams: every chunk durable at the crash must be there, unchanged and at its offset, once the case
    has run again (AssertionError naming k otherwise); a case may read a stream and return its chunks.
    """
    workflows = list(workflows)
    t0 = time.time() if start is None else float(start)
    with TestEngine(workflows, shards, clock=VirtualClock(t0), **options) as clean:
        rec = _Recorder(clean.engine.host.journal, None, None)
        clean._mocks.on_body = _Bodies()
        result = case(clean)
        boundaries = rec.count
    trials: list[Trial] = []
    for k in range(1, boundaries + 1):
        trials.append(_trial(case, workflows, shards, t0, k, boundaries, result, timeout, options))
    return CrashReport(boundaries, 1 + 2 * boundaries, result, trials)


def _trial(
    case: Callable[[TestEngine], Any],
    workflows: list[Workflow],
    shards: int,
    t0: float,
    k: int,
    boundaries: int,
    expected: Any,
    timeout: float,
    options: dict[str, Any] | None = None,
) -> Trial:
    """One crash after record ``k``: run to the crash, reopen, run to the end, check."""
    trial = Trial(k, boundaries)
    with TestEngine(workflows, shards, clock=VirtualClock(t0), **(options or {})) as eng:
        before = _Bodies()
        eng._mocks.on_body = before
        driver = _e.self()
        rec = _Recorder(eng.engine.host.journal, k, driver)
        case_pid = _e.spawn(_case_main, case, eng, driver)
        try:
            _await_crash_point(rec, k, timeout)
            j = eng.engine.host.journal
            for shard, lsn in rec.last.items():
                j.wait_durable(shard, lsn)
        finally:
            _e.exit(case_pid, "kill")
            _e.exit_reason(case_pid)
            eng.crash()
        _e.receive(lambda m: m if type(m) is tuple and m[:1] == ("fusee.crash_point",) else NOMATCH, timeout=0)
        _e.receive(lambda m: m if type(m) is tuple and m[:1] == ("fusee.case_done",) else NOMATCH, timeout=0)
        after = _Bodies()
        eng._mocks.on_body = after
        eng.reopen()
        trial.durable_steps = _durable_step_keys(eng.engine)
        durable_chunks = _durable_chunks(eng.engine)
        try:
            got = case(eng)
        except Exception as exc:
            raise AssertionError(
                f"crash after record {k} of {boundaries}: the case raised {exc!r} after the reopen"
            ) from exc
        trial.bodies_before, trial.bodies_after = dict(before.names), dict(after.names)
        if got != expected:
            raise AssertionError(
                f"crash after record {k} of {boundaries}: the case returned {got!r}, the clean run {expected!r}"
            )
        for (id, run, name), chunks in durable_chunks.items():
            now = _stream_now(eng.engine, id, run, name)
            if now is not None and now[: len(chunks)] != chunks:
                raise AssertionError(
                    f"crash after record {k} of {boundaries}: stream {name!r} of run {run} of {id!r} changed chunks "
                    f"that were durable at the crash: {chunks!r} then {now[: len(chunks)]!r}"
                )
        again = sorted(key for key in after.keys if key in trial.durable_steps)
        if again:
            raise AssertionError(
                f"crash after record {k} of {boundaries}: step bodies ran again after the reopen although "
                f"their Step records were durable: {again}"
            )
    return trial


# -- waiting on an engine's state, and the parked-memory measurement ----------------------------


def wait_until(cond: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Return once ``cond()`` is true, looking again every 2 ms (yielding to other greenlets);
    ``TimeoutError`` naming ``what`` after ``timeout`` seconds.

    For states only an engine's metrics show (runs parked, runs waiting);
    wait on a result or a message where there is one.
    """
    import gevent

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout} s")
        gevent.sleep(0.002)


def parked_memory(n: int, shards: int = 4, trace_memory: bool = True) -> dict[str, Any]:
    """Start ``n`` runs (in memory) that sleep to one instant, park them all, then wake them all at once.

    Returns ``runs_parked`` (from ``metrics()`` once all are parked), ``finished``,
    the seconds spent starting (until all wait), parking, and waking (until every
    result is in), and, with ``trace_memory``, ``bytes_per_loaded_run`` and
    ``bytes_per_parked_run``: Python allocations traced (``tracemalloc``, which
    slows everything about 2x) while they all wait loaded, and once parked, minus
    an empty engine, per run.
    """
    import gc
    import tracemalloc

    from .engine import workflow

    @workflow("fusee.bench.parked")
    def sleeper(ctx: Any, at: float) -> int:
        ctx.sleep_until("instant", at)
        return 1

    def traced() -> int:
        if not trace_memory:
            return 0
        gc.collect()
        return tracemalloc.get_traced_memory()[0]

    clock = VirtualClock(1_000_000.0)
    if trace_memory:
        tracemalloc.start()
    try:
        engine = Engine.open(None, [sleeper], shards=shards, park_after=None, clock=clock)
        try:
            _warm_carriers(engine, min(n, 1024))
            empty = traced()
            t0 = time.perf_counter()
            at = clock.now() + 3600.0
            for i in range(n):
                engine.start(sleeper, f"p{i}", at)
            wait_until(lambda: engine.metrics()["runs_waiting"] == n, what=f"{n} runs waiting")
            loaded = traced()
            t1 = time.perf_counter()
            engine.park_now(True)
            wait_until(lambda: engine.metrics()["runs_parked"] == n, what=f"{n} runs parked")
            m = engine.metrics()
            parked = traced()
            t2 = time.perf_counter()
            clock.advance_to(at)  # the instant comes: every parked run is due at once
            engine.park_now(False)
            done = sum(1 for i in range(n) if engine.result(f"p{i}", timeout=600) == 1)
            t3 = time.perf_counter()
        finally:
            engine.shutdown()
    finally:
        if trace_memory:
            tracemalloc.stop()
    out: dict[str, Any] = {
        "runs": n,
        "runs_parked": m["runs_parked"],
        "finished": done,
        "start_seconds": t1 - t0,
        "park_seconds": t2 - t1,
        "wake_seconds": t3 - t2,
    }
    if trace_memory:
        out["bytes_per_loaded_run"] = (loaded - empty) / n if n else 0.0
        out["bytes_per_parked_run"] = (parked - empty) / n if n else 0.0
    return out


def _warm_carriers(engine: Engine, k: int) -> None:
    """Start ``k`` processes at once on each shard's dispatcher and let them end: the caches a carrier
    keeps whatever runs on it (the greenlets of ended processes, kept for the next ones) are then at the
    size they reach under load, so a baseline taken now counts them and a per-run figure does not."""
    homes = {engine.host.home(shard) for shard in range(engine.shards)}
    for home in homes:
        pids = [_e.spawn(_e.receive, dispatcher=home) for _ in range(k)]
        for p in pids:
            _e.send(p, "end")
        for p in pids:
            _e.join(p)


# -- a disk that fails -----------------------------------------------------------------------


class FaultyDisk(Disk):
    """A :class:`fusee.disk.Disk` that fails chosen operations (:data:`fusee.disk.OPS`) with an ``OSError``.

    ``fail_at(op, n, errno)`` fails the ``n``-th call of ``op`` from now (1: the
    next), once; ``fail_all(errno, ops)`` fails every call of ``ops`` until
    :meth:`heal`.  ``calls[op]`` counts the calls made (failed ones included),
    so a test can first count a scenario's calls and then fail each one in turn.
    Thread-safe: journals call it from their shards' carriers.
    """

    def __init__(self) -> None:
        self._lock = _allocate_lock()
        self.calls: dict[str, int] = {op: 0 for op in OPS}
        self._once: dict[tuple[str, int], int] = {}
        self._always: tuple[int, frozenset[str]] | None = None
        self.failed: list[tuple[str, int]] = []  # (op, errno) of each injected failure, in order

    def fail_at(self, op: str, n: int, errno: int) -> None:
        """Fail the ``n``-th call of ``op`` from now (1: the next one) with ``errno``, once."""
        if op not in OPS:
            raise ValueError(f"op is one of {OPS}, not {op!r}")
        with self._lock:
            self._once[(op, self.calls[op] + n)] = errno

    def fail_all(self, errno: int, ops: Iterable[str] = OPS) -> None:
        """Fail every call of ``ops`` with ``errno`` until :meth:`heal`."""
        self._always = (errno, frozenset(ops))

    def heal(self) -> None:
        """Stop failing (scheduled one-off failures are dropped too)."""
        with self._lock:
            self._always = None
            self._once.clear()

    def _check(self, op: str, what: str, torn: Callable[[], Any] | None = None) -> None:
        """Count a call of ``op``; raise if it is to fail (after ``torn()``: a failed write writes half)."""
        with self._lock:
            self.calls[op] += 1
            code = self._once.pop((op, self.calls[op]), None)
            always = self._always
            if code is None and always is not None and op in always[1]:
                code = always[0]
            if code is not None:
                self.failed.append((op, code))
        if code is not None:
            if torn is not None:
                torn()
            raise OSError(code, f"{os.strerror(code)} (injected: {op} #{self.calls[op]})", what)

    def write(self, fd: int, data: Any) -> None:
        self._check("write", f"fd {fd}", lambda: super(FaultyDisk, self).write(fd, memoryview(data)[: len(data) // 2]))
        super().write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        self._check("write", f"fd {fd}", lambda: super(FaultyDisk, self).pwrite(fd, data[: len(data) // 2], offset))
        super().pwrite(fd, data, offset)

    def fdatasync(self, fd: int) -> None:
        self._check("fdatasync", f"fd {fd}")
        super().fdatasync(fd)

    def write_durable(self, fd: int, data: bytes, offset: int) -> None:
        """A journal flush: a ``write`` then an ``fdatasync``, each failing as chosen (a failed write writes half)."""
        self.pwrite(fd, data, offset)
        self.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._check("fsync", f"fd {fd}")
        super().fsync(fd)

    def allocate(self, fd: int, size: int) -> None:
        self._check("allocate", f"fd {fd}")
        super().allocate(fd, size)

    def rename(self, src: str, dst: str) -> None:
        self._check("rename", dst)
        super().rename(src, dst)

    def mkdir(self, path: str) -> None:
        self._check("mkdir", path)
        super().mkdir(path)
