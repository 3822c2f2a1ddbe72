"""Schedules: ``engine.schedule(name, workflow, cron=... | every=..., input=..., overlap=...)`` (spec §2.7).

Built from runs, like delays and limits: nothing of it touches the journal's format.

* The schedule is a **coordinator run** ``fusee.schedule/<name>`` (type ``fusee.schedule``) whose
  input is its :class:`State` (a JSON object).  It waits on one durable wait, ``wait_for("event",
  timeout=<until the next due time>)``: a timeout is a due time (it then records ``ctx.now()``), a
  signal an event (pause, resume, trigger, or a fired run that ended).  The decisions are pure
  (:func:`on_event`, :func:`on_due`, :func:`on_alive`); it continues as new every
  :data:`EVENTS_PER_RUN` events, and survives crashes and parking like any run.
* Each fire starts a run of the workflow under the ID ``<name>@<time>`` (:func:`run_id`: the due
  time in UTC, ``2024-05-01T09:30:00Z``), deterministic, so a fire replayed after a crash asks for
  the same run again (idempotent) and never starts a second one.  The run is started by a small
  **wrapper run** ``fusee.scheduled/<run id>`` (a child of the schedule that outlives it) that runs
  it as its own child (through its concurrency slot, if the type is limited), and tells the schedule
  when it ended with a durable signal: what the overlap policies wait for.
* ``engine.schedules()`` and :meth:`Schedule.describe` read the state from the coordinator's journal
  (:func:`state_of`, the same transitions folded over the recorded events, then the events
  delivered and not yet taken), so they work while it is parked, and show a pause at once.

Semantics (Temporal's, where it has them):

* ``cron=``: 5 fields (:mod:`fusee.cron`) in UTC, or in ``timezone=`` (an IANA name);
  ``every=``: a duration (:mod:`fusee.durations`, at least 1 s), at multiples of it since the unix
  epoch (``every="1h"`` fires on the hour), as Temporal's intervals.
* ``overlap=``: ``"skip"`` (the default): a due time while a run of this schedule still runs is
  skipped; ``"buffer_one"``: one is kept and started as soon as that run ends, the rest skipped;
  ``"allow"``: every due time starts a run.
* **Missed times** (the engine was down, or the schedule's run was late): on waking, every due time
  within ``catchup_window`` (default one year, at least 10 s, as Temporal's) of now is taken, oldest first, each
  through the overlap policy (with ``skip``, one run starts for a whole backlog); older ones are
  missed.  At most :data:`MAX_CATCHUP` are taken per wake-up; the rest are missed.
* **Pause** stops fires (a buffered start is dropped); times that pass while paused are not caught
  up; **resume** goes on with the first due time after it.  **Trigger** starts a run now (ID from
  the trigger's time), paused or not, through the overlap policy.  **Delete** ends the coordinator
  (terminated); runs it started go on.  ``engine.cancel`` of the coordinator ends it too.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone as _tz
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final
from zoneinfo import ZoneInfo

from . import concurrency as _concurrency
from . import cron as _cron
from . import durations as _durations
from . import records as r
from .behalf import run_child
from .errors import Cancelled, ChildFailed, Error, NotFound
from .run_state import RUNNING
from .workflow import IdPolicy, Workflow

if TYPE_CHECKING:
    from .engine import Engine
    from .host import Host

__all__ = [
    "SCHEDULE_TYPE",
    "RUN_TYPE",
    "EVENT",
    "OVERLAPS",
    "Spec",
    "State",
    "Schedule",
    "schedule_id",
    "run_id",
    "wrapper_id",
    "stamp",
    "make_spec",
    "check_spec",
    "new_state",
    "wake_at",
    "needs_check",
    "on_event",
    "on_due",
    "on_alive",
    "state_of",
    "summary",
    "create",
    "handle",
    "listing",
    "workflows",
]

#: The coordinator's workflow type (ID ``fusee.schedule/<name>``).
SCHEDULE_TYPE: Final = "fusee.schedule"
#: The wrapper's workflow type (ID ``fusee.scheduled/<run id>``): starts one fired run, tells its end.
RUN_TYPE: Final = "fusee.scheduled"
#: The signal the coordinator waits for (every event: pause, resume, trigger, ended).
EVENT: Final = "event"
#: The overlap policies.
OVERLAPS: Final = ("skip", "buffer_one", "allow")
#: The default catch-up window (seconds): one year, as Temporal.
DEFAULT_CATCHUP: Final = 365 * 86400.0
#: Due times taken per wake-up at most (a longer backlog: the rest are missed).
MAX_CATCHUP: Final = 100
#: The recent fires a state keeps (for listing, and so one instant never fires twice).
RECENT: Final = 10
#: Events a coordinator run takes before it continues as new (a few records each).
EVENTS_PER_RUN: Final = 200
#: The shortest catch-up window (seconds), as Temporal's: a wake-up is always a little late.
MIN_CATCHUP: Final = 10.0
#: The shortest ``every=`` (seconds).
MIN_EVERY: Final = 1.0
#: The step name of the check of which fired runs still run (recorded).
ALIVE: Final = "fusee.alive"


# -- names (pure) ----------------------------------------------------------------------------


def schedule_id(name: str) -> str:
    """The coordinator's workflow ID for schedule ``name``: ``fusee.schedule/<name>``."""
    return f"{SCHEDULE_TYPE}/{name}"


def stamp(at: float) -> str:
    """Unix time ``at`` as UTC ISO 8601 (``2024-05-01T09:30:00Z``; milliseconds when not whole)."""
    ms = round(at * 1000)
    d = datetime.fromtimestamp(ms // 1000, _tz.utc)
    frac = ms % 1000
    return d.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac:03d}" if frac else "") + "Z"


def run_id(name: str, at: float) -> str:
    """The workflow ID of the run schedule ``name`` fires for due time ``at``: ``<name>@<stamp(at)>``."""
    return f"{name}@{stamp(at)}"


def wrapper_id(id: str) -> str:
    """The wrapper run's workflow ID for fired run ``id``: ``fusee.scheduled/<id>``."""
    return f"{RUN_TYPE}/{id}"


# -- the spec and the state (pure) -------------------------------------------------------------


@lru_cache(maxsize=256)
def _parsed(expr: str) -> _cron.Cron:
    return _cron.parse(expr)


@lru_cache(maxsize=64)
def _zone(name: str | None) -> Any:
    return _cron.zone(name)


@dataclass(frozen=True, slots=True)
class Spec:
    """What a schedule starts and when: ``workflow`` (type name) with ``input``, at ``cron`` (read in
    ``timezone``, an IANA name or None for UTC) or ``every`` seconds, with the ``overlap`` policy and
    ``catchup`` window (seconds)."""

    name: str
    workflow: str
    input: Any = None
    cron: str | None = None
    every: float | None = None
    timezone: str | None = None
    overlap: str = "skip"
    catchup: float = DEFAULT_CATCHUP

    def next_after(self, t: float) -> float:
        """The first due time strictly after unix time ``t``."""
        if self.cron is not None:
            return _cron.next_after(_parsed(self.cron), t, _zone(self.timezone))
        step = round(float(self.every) * 1000)  # type: ignore[arg-type]
        k = math.floor(t * 1000 / step) + 1
        while k * step / 1000 <= t:
            k += 1
        return k * step / 1000

    def at_or_after(self, t: float) -> float:
        """The first due time at or after ``t``."""
        x = self.next_after(t - 0.001)
        return x if x >= t else self.next_after(x)

    def plain(self) -> dict[str, Any]:
        """The spec as a JSON object."""
        return {
            "name": self.name,
            "workflow": self.workflow,
            "input": self.input,
            "cron": self.cron,
            "every": self.every,
            "timezone": self.timezone,
            "overlap": self.overlap,
            "catchup": self.catchup,
        }

    @classmethod
    def of_plain(cls, d: Any) -> "Spec":
        """The spec back from :meth:`plain`."""
        if not isinstance(d, dict):
            raise TypeError(f"a schedule's spec is a JSON object, not {d!r}")
        return cls(
            d["name"], d["workflow"], d.get("input"), d.get("cron"), d.get("every"), d.get("timezone"),
            d.get("overlap", "skip"), float(d.get("catchup", DEFAULT_CATCHUP)),
        )


def make_spec(
    name: Any,
    workflow: str,
    input: Any = None,
    cron: Any = None,
    every: Any = None,
    timezone: Any = None,
    overlap: Any = "skip",
    catchup_window: Any = DEFAULT_CATCHUP,
) -> Spec:
    """A checked :class:`Spec`: ``TypeError``/``ValueError`` (:class:`fusee.cron.CronError` for a bad
    expression or time zone) naming what is wrong."""
    if type(name) is not str or not name.strip():
        raise ValueError(f"a schedule's name is a non-empty str, not {name!r}")
    if (cron is None) == (every is None):
        raise ValueError("a schedule takes exactly one of cron= and every=")
    seconds = None
    zone_name = None
    if cron is not None:
        _cron.parse(cron)  # CronError
        if timezone is not None:
            z = _cron.zone(timezone)  # CronError for an unknown one
            if isinstance(z, ZoneInfo) and z.key is not None:
                zone_name = z.key
            elif z is not _cron.UTC:
                raise _cron.CronError(timezone, "a time zone is an IANA name or a zoneinfo.ZoneInfo made from one")
    else:
        if timezone is not None:
            raise ValueError("timezone= goes with cron=; every= counts from the unix epoch")
        seconds = _durations.parse(every)
        if seconds < MIN_EVERY:
            raise ValueError(f"every= is at least {MIN_EVERY:g} s, not {every!r}")
    if type(overlap) is not str or overlap not in OVERLAPS:
        raise ValueError(f"overlap is one of {OVERLAPS}, not {overlap!r}")
    catchup = _durations.parse(catchup_window)
    if catchup < MIN_CATCHUP:
        raise ValueError(f"catchup_window is at least {MIN_CATCHUP:g} s (as Temporal's), not {catchup_window!r}")
    return Spec(name, workflow, input, cron, seconds, zone_name, overlap, catchup)


def check_spec(name: Any, workflow: str, input: Any, cron: Any, every: Any, timezone: Any, overlap: Any,
               catchup_window: Any = None) -> Spec:
    """:func:`make_spec` with ``catchup_window`` None meaning the default (the HTTP API's check of a new
    schedule, :func:`fusee.http_api.schedule_args`)."""
    return make_spec(name, workflow, input, cron, every, timezone, overlap,
                     DEFAULT_CATCHUP if catchup_window is None else catchup_window)


@dataclass(frozen=True, slots=True)
class State:
    """A schedule's state: its ``spec``; ``next``, the first due time not yet handled; ``paused``;
    ``running``, the fired runs not known to have ended (fire order); ``buffered``, the due time
    ``buffer_one`` keeps (or None); ``recent``, the last :data:`RECENT` fires ``(run id, time)``;
    counts of runs ``fired`` and due times ``skipped`` (overlap); ``events`` taken by this run."""

    spec: Spec
    next: float
    paused: bool = False
    running: tuple[str, ...] = ()
    buffered: float | None = None
    recent: tuple[tuple[str, float], ...] = ()
    fired: int = 0
    skipped: int = 0
    events: int = 0

    def plain(self) -> dict[str, Any]:
        """The state as a JSON object (the coordinator's input)."""
        return {
            "spec": self.spec.plain(),
            "next": self.next,
            "paused": self.paused,
            "running": list(self.running),
            "buffered": self.buffered,
            "recent": [[id, at] for id, at in self.recent],
            "fired": self.fired,
            "skipped": self.skipped,
            "events": self.events,
        }

    @classmethod
    def of_plain(cls, d: Any) -> "State":
        """The state back from :meth:`plain`."""
        if not isinstance(d, dict):
            raise TypeError(f"a schedule's state is a JSON object, not {d!r}")
        return cls(
            Spec.of_plain(d["spec"]),
            float(d["next"]),
            bool(d.get("paused", False)),
            tuple(d.get("running", ())),
            d.get("buffered"),
            tuple((id, float(at)) for id, at in d.get("recent", ())),
            int(d.get("fired", 0)),
            int(d.get("skipped", 0)),
            int(d.get("events", 0)),
        )


Starts = tuple[tuple[str, float], ...]  # (run ID, due time) of each run to start, in order


def new_state(spec: Spec, now: float) -> State:
    """A new schedule's state at unix time ``now``: due first at the first time after it."""
    return State(spec, spec.next_after(now))


def wake_at(s: State) -> float | None:
    """When the coordinator wakes unless an event comes first: the next due time (None while paused)."""
    return None if s.paused else s.next


def needs_check(s: State) -> bool:
    """Whether a due time must first check which fired runs still run (the policy would hold it back)."""
    return bool(s.running) and s.spec.overlap != "allow"


def _fire(s: State, at: float) -> tuple[State, Starts]:
    id = run_id(s.spec.name, at)
    recent = (s.recent + ((id, at),))[-RECENT:]
    return replace(s, running=s.running + (id,), recent=recent, fired=s.fired + 1, events=s.events + 1), ((id, at),)


def _offer(s: State, at: float) -> tuple[State, Starts]:
    """Due time ``at`` through the overlap policy: start, buffer or skip.  An instant that fired already
    (a trigger at a due time) is not started again."""
    id = run_id(s.spec.name, at)
    if id in s.running or any(x == id for x, _ in s.recent) or s.buffered == at:
        return s, ()
    if not s.running or s.spec.overlap == "allow":
        return _fire(s, at)
    if s.spec.overlap == "buffer_one" and s.buffered is None and not s.paused:  # paused: nothing is kept
        return replace(s, buffered=at), ()
    return replace(s, skipped=s.skipped + 1), ()


def _unbuffer(s: State) -> tuple[State, Starts]:
    """Start the buffered due time once nothing runs."""
    if s.buffered is None or s.running or s.paused:
        return s, ()
    return _fire(replace(s, buffered=None), s.buffered)


def _time(x: Any) -> float | None:
    return float(x) if type(x) in (int, float) and math.isfinite(x) else None


def on_event(s: State, ev: Any) -> tuple[State, Starts]:
    """``s`` after an event (a signal's value) and the runs to start: ``{"kind": "pause"}``,
    ``{"kind": "resume", "at": t}`` (due next after ``t``), ``{"kind": "trigger", "at": t}`` (a run for
    ``t`` through the overlap policy), ``{"kind": "ended", "id": id}`` (a fired run ended: a buffered
    start goes).  Anything else only counts as an event."""
    s = replace(s, events=s.events + 1)
    kind = ev.get("kind") if isinstance(ev, dict) else None
    if kind == "pause":
        return (s if s.paused else replace(s, paused=True, buffered=None)), ()
    if kind == "resume":
        at = _time(ev.get("at"))
        if not s.paused or at is None:
            return s, ()
        return replace(s, paused=False, next=s.spec.next_after(at)), ()
    if kind == "trigger":
        at = _time(ev.get("at"))
        return (s, ()) if at is None else _offer(s, at)
    if kind == "ended":
        id = ev.get("id")
        if id not in s.running:
            return s, ()
        return _unbuffer(replace(s, running=tuple(x for x in s.running if x != id)))
    return s, ()


def on_alive(s: State, alive: Any) -> tuple[State, Starts]:
    """``s`` once a check found which fired runs still run (``alive``, their IDs): the others are dropped
    (their end was not told: a wrapper terminated), and a buffered start may go."""
    keep = set(alive) if isinstance(alive, (list, tuple)) else set()
    return _unbuffer(replace(s, running=tuple(x for x in s.running if x in keep)))


def on_due(s: State, now: float) -> tuple[State, Starts]:
    """``s`` after waking at unix time ``now`` (at or past ``s.next``) and the runs to start: each due
    time from ``s.next`` to ``now`` within the catch-up window (at most :data:`MAX_CATCHUP`), oldest
    first, through the overlap policy; the next due time is then the first after ``now``."""
    s = replace(s, events=s.events + 1)
    if s.paused:
        return replace(s, next=s.spec.next_after(now)), ()
    t = s.next
    low = now - s.spec.catchup
    if t < low:
        t = s.spec.at_or_after(low)
    starts: Starts = ()
    taken = 0
    while t <= now and taken < MAX_CATCHUP:
        s, more = _offer(s, t)
        starts += more
        taken += 1
        t = s.spec.next_after(t)
    return replace(s, next=t if t > now else s.spec.next_after(now)), starts


# -- the state from a coordinator's journal (pure) --------------------------------------------


def state_of(input: Any, journal: Any) -> State:
    """The state of a coordinator run with ``input`` and ``journal`` (``(lsn, record)`` pairs, as
    ``describe`` gives them): the transitions folded over what it recorded taking (signals it took,
    its checks, its wake-up times), then over the events delivered and not yet taken (so a pause
    shows at once)."""
    s = State.of_plain(input)
    received: list[Any] = []
    seen: set[Any] = set()
    taken = 0
    for _, rec in journal:
        t = type(rec)
        if t is r.Signal and rec.name == EVENT:
            if rec.dedup is not None:
                if rec.dedup in seen:
                    continue
                seen.add(rec.dedup)
            received.append(rec.payload)
        elif t is r.Waited and rec.outcome == "signal":
            s = on_event(s, rec.payload)[0]
            taken += 1
        elif t is r.Step and rec.name == ALIVE and rec.status == "ok":
            s = on_alive(s, rec.payload)[0]
        elif t is r.Value and rec.kind == "now":
            s = on_due(s, rec.value)[0]
    for ev in received[taken:]:
        s = on_event(s, ev)[0]
    return s


def summary(s: State) -> dict[str, Any]:
    """What :meth:`Schedule.describe` and ``engine.schedules()`` show of state ``s``."""
    sp = s.spec
    return {
        "name": sp.name,
        "id": schedule_id(sp.name),
        "workflow": sp.workflow,
        "input": sp.input,
        "cron": sp.cron,
        "every": sp.every,
        "timezone": sp.timezone,
        "overlap": sp.overlap,
        "catchup_window": sp.catchup,
        "state": "paused" if s.paused else "active",
        "next": wake_at(s),
        "running": list(s.running),
        "buffered": s.buffered,
        "recent": [{"id": id, "at": at} for id, at in s.recent],
        "fired": s.fired,
        "skipped": s.skipped,
    }


# -- the workflows (the imperative shell, on ctx) ---------------------------------------------


def still_running(host: "Host", ids: Any) -> list[str]:
    """The fired runs of ``ids`` whose wrapper or run itself is running."""
    out = []
    for id in ids:
        for x in (wrapper_id(id), id):
            try:
                st = host.call(host.shard_of(x), ("run_of", x))
            except NotFound:
                continue
            if st.status == RUNNING:
                out.append(id)
                break
    return out


def scheduler(ctx: Any, plain: Any) -> Any:
    """The coordinator ``fusee.schedule/<name>``: wait for the next due time or an event, decide
    (:func:`on_due`, :func:`on_event`), start what is due (:func:`_start`), forever; continue as new
    every :data:`EVENTS_PER_RUN` events.  Ends when terminated (deleted) or cancelled."""
    s = State.of_plain(plain)
    host = ctx._st.host
    me = ctx.workflow_id
    while True:
        if s.events >= EVENTS_PER_RUN:
            ctx.continue_as_new(replace(s, events=0).plain())  # events not taken go on to the new run
        ev = ctx.wait_for(EVENT, until=wake_at(s))  # an absolute deadline: a clock that jumps meanwhile is no matter
        if ev is not None:
            s, starts = on_event(s, ev)
        else:
            starts = ()
            if needs_check(s):
                ids = s.running
                s, starts = on_alive(s, ctx.step(ALIVE, lambda: still_running(host, ids), read_only=True))
            s, more = on_due(s, ctx.now())
            starts += more
        for id, at in starts:
            _start(ctx, s.spec, me, id, at)


def _start(ctx: Any, spec: Spec, me: str, id: str, at: float) -> None:
    """Start fired run ``id`` (due ``at``) through its wrapper, a child that outlives the schedule."""
    q = {"schedule": me, "type": spec.workflow, "id": id, "input": spec.input, "at": at}
    ctx.start_child(RUN_TYPE, wrapper_id(id), q, parent_close="abandon")


def scheduled(ctx: Any, q: dict[str, Any]) -> Any:
    """The wrapper ``fusee.scheduled/<id>``: run ``q["type"]`` as ``q["id"]`` (through its slot if the
    type is limited), tell the schedule it ended (a durable signal, however it ended), and end with it."""
    host = ctx._st.host
    try:
        w = host.workflow(q["type"])
        limit = getattr(w, "concurrency", None)
        key_fn = getattr(w, "key", None)
        key = _concurrency.key_of(key_fn(q.get("input"))) if limit is not None and key_fn is not None else None
        wtype, cid, cinput = _concurrency.start_plan(w.name, q["id"], q.get("input"), limit, key, None, None, q.get("at"))
        out: tuple[str, Any] = ("ok", run_child(ctx, wtype, cid, cinput))
        status = "completed"
    except Error as exc:
        out = ("error", exc)
        status = exc.status if type(exc) is ChildFailed and exc.status else exc.code
    while True:  # the end is told however this run was asked to stop
        try:
            ctx.signal_workflow(q["schedule"], EVENT, {"kind": "ended", "id": q["id"], "status": status})
            break
        except Cancelled:
            continue
    if out[0] == "error":
        raise out[1]
    return out[1]


def workflows() -> list[Workflow]:
    """The built-in ``fusee.schedule`` and ``fusee.scheduled`` workflow types (every engine has them)."""
    return [Workflow(SCHEDULE_TYPE, 1, scheduler), Workflow(RUN_TYPE, 1, scheduled)]


# -- the engine's side ----------------------------------------------------------------------


class Schedule:
    """A handle on schedule ``name`` of ``engine`` (from ``engine.schedule(...)`` or
    ``engine.schedule_handle(name)``); each call raises :class:`fusee.NotFound` once it is deleted."""

    __slots__ = ("engine", "name")

    def __init__(self, engine: "Engine", name: str) -> None:
        self.engine = engine
        self.name = name

    def __repr__(self) -> str:
        return f"<fusee.Schedule {self.name!r}>"

    @property
    def id(self) -> str:
        """The coordinator run's workflow ID, ``fusee.schedule/<name>``."""
        return schedule_id(self.name)

    def describe(self) -> dict[str, Any]:
        """Its spec and state (:func:`summary`): ``state`` ``"active"``/``"paused"``, ``next`` fire time
        (unix seconds; None while paused), ``running``, ``recent`` fires, ``fired``/``skipped`` counts."""
        host = self.engine.host
        d = host.call(host.shard_of(self.id), ("describe", self.id))
        if d["type"] != SCHEDULE_TYPE or d["status"] != RUNNING:
            raise NotFound(self.id)
        return summary(state_of(d["input"], d["journal"]))

    def result(self, id: str, timeout: float | None = None) -> Any:
        """The result of fired run ``id`` (``engine.result(id)``), also in the moment its wrapper has not
        started it yet (then once the wrapper ends); :class:`NotFound` if neither exists."""
        engine = self.engine
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            engine.run(id)
        except NotFound:
            try:
                engine.result(wrapper_id(id), timeout)
            except (TimeoutError, NotFound):
                raise
            except Error:
                pass  # the run's own outcome is what counts
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return engine.result(id, left)

    def _tell(self, event: dict[str, Any]) -> None:
        host = self.engine.host
        shard = host.shard_of(self.id)
        lsn = host.call(shard, ("signal", self.id, EVENT, event, None))
        if lsn is None:
            raise NotFound(self.id)
        host.wait_durable(shard, lsn)

    def pause(self) -> None:
        """Stop firing (a buffered start is dropped) until :meth:`resume`; returns once durable."""
        self._tell({"kind": "pause"})

    def resume(self) -> None:
        """Fire again from the first due time after now (times passed while paused are not caught up)."""
        self._tell({"kind": "resume", "at": self.engine.host.clock.now()})

    def trigger(self) -> str:
        """Start a run now (paused or not, through the overlap policy); returns its ID (``<name>@<now>``),
        the run it starts unless the policy skips it."""
        at = round(self.engine.host.clock.now(), 3)
        self._tell({"kind": "trigger", "at": at})
        return run_id(self.name, at)

    def delete(self) -> None:
        """End the schedule (its coordinator is terminated); the runs it started go on."""
        host = self.engine.host
        shard = host.shard_of(self.id)
        lsn = host.call(shard, ("terminate", self.id, "schedule deleted"))
        if lsn is None:
            raise NotFound(self.id)
        host.wait_durable(shard, lsn)


def create(
    engine: "Engine",
    name: Any,
    workflow: Any,
    *,
    cron: Any = None,
    every: Any = None,
    input: Any = None,
    overlap: Any = "skip",
    timezone: Any = None,
    catchup_window: Any = DEFAULT_CATCHUP,
) -> Schedule:
    """Start schedule ``name`` (see ``Engine.schedule``); returns once its coordinator's ``Start`` is durable."""
    host = engine.host
    w = host.workflow(workflow)  # UnknownWorkflow
    if w.name.startswith("fusee."):
        raise ValueError(f"{w.name!r} is a built-in workflow type of fusee, not one to schedule")
    spec = make_spec(name, w.name, input, cron, every, timezone, overlap, catchup_window)
    sid = schedule_id(spec.name)
    shard = host.shard_of(sid)
    plain = new_state(spec, host.clock.now()).plain()
    _, lsn = host.call(shard, ("start", host.workflow(SCHEDULE_TYPE), sid, plain, IdPolicy("fail", "start_new")))
    host.wait_durable(shard, lsn)
    return Schedule(engine, spec.name)


def handle(engine: "Engine", name: str) -> Schedule:
    """A handle on the running schedule ``name``; :class:`NotFound` if there is none."""
    if type(name) is not str:
        raise TypeError(f"a schedule's name is a str, not {name!r}")
    host = engine.host
    sid = schedule_id(name)
    try:
        st = host.call(host.shard_of(sid), ("run_of", sid))
    except NotFound:
        raise NotFound(sid) from None
    if st.wtype != SCHEDULE_TYPE or st.status != RUNNING:
        raise NotFound(sid)
    return Schedule(engine, name)


def listing(engine: "Engine") -> list[dict[str, Any]]:
    """Every running schedule's :meth:`Schedule.describe`, by name."""
    host = engine.host
    out = []
    for shard in range(host.shards):
        for d in host.call(shard, ("list", None)):
            if d["type"] != SCHEDULE_TYPE or d["status"] != RUNNING:
                continue
            try:
                out.append(Schedule(engine, d["id"][len(SCHEDULE_TYPE) + 1 :]).describe())
            except NotFound:
                continue  # deleted meanwhile
    return sorted(out, key=lambda x: x["name"])
