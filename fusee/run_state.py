"""A run's in-memory state (:class:`_RunState`): its records (its machine), status, outcome, waiters,
parking marks; appending a record, finishing.  Shared by its shard server and its process."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

import ensemble as _e

from . import records as r
from .errors import Cancelled, DeterminismError, Error, Failed, Terminated, TimedOut
from .replay import Machine
from .workflow import Workflow
from .run_family import _close_children, _tell_parents

if TYPE_CHECKING:
    from .host import Host

_DONE = "fusee_done"
_STREAM = "fusee_stream"  # (tag, alias): a stream the caller of alias reads has something new (fusee.stream)
_UPDATE = "fusee_update"  # (tag, alias, kind "ok"/"error"/"rejected", payload, lsn): an update's answer, to its caller
RUNNING = "running"
PAUSED = "paused"  # shown by describe and list for a running run whose step used up its retry budget
STATUSES = ("running", "completed", "failed", "cancelled", "terminated", "continued", "timed_out")


class _UpdateRequest:
    """An update asked for and not yet taken by the run's process: its update ID, name, value and the
    aliases of the callers waiting for its answer."""

    __slots__ = ("id", "name", "value", "waiters")

    def __init__(self, id: str, name: str, value: Any, waiters: list[Any]) -> None:
        self.id = id
        self.name = name
        self.value = value
        self.waiters = waiters


# -- a run ---------------------------------------------------------------------------------


class _RunState:
    """One run: identity, machine, status and outcome; shared by its shard server and its process."""

    __slots__ = (
        "host",
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
        "inherited",
        "update_handlers",
        "update_requests",
        "update_waiters",
        "in_update",
        "validating",
        "stepping",
        "step_name",
        "step_writes",
        "stream_readers",
    )

    def __init__(self, host: "Host", shard: int, start: r.Start, machine: Machine, wf: Workflow | None) -> None:
        self.host = host
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
        # (queries, update_handlers, update_waiters, step_writes, stream_readers: the shared NO_ENTRIES until a
        # first entry, through own(): most runs never have one, and a parked run keeps its _RunState)
        self.queries: Mapping[str, Callable[[Any], Any]] = NO_ENTRIES
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
        # the signal dedup keys the runs before this one of its chain (continue-as-new) had seen, in the
        # order seen: from ``Start.origin["dedup"]``; a signal with one of them is a redelivery, dropped
        self.inherited: Mapping[Any, None] = _inherited_dedups(start.origin)
        # updates: the handlers the code registered (name -> (handler, validator)); the requests its shard
        # server queued for its process (taken at the code's next check point, fusee.ctx); the callers
        # waiting for the outcome of a recorded update (update ID -> their aliases); whether a handler or
        # a validator is running now
        self.update_handlers: Mapping[str, tuple[Callable[[Any], Any], Any]] = NO_ENTRIES
        self.update_requests: list[_UpdateRequest] = []
        self.update_waiters: Mapping[str, list[Any]] = NO_ENTRIES
        self.in_update = False
        self.validating = False
        # streams (fusee.stream): the seq and name of the step whose body runs now (None: none), the writes
        # that body made per stream; the aliases of readers waiting for something new, by stream name
        self.stepping: int | None = None
        self.step_name: str | None = None
        self.step_writes: Mapping[str, int] = NO_ENTRIES
        self.stream_readers: Mapping[str, list[Any]] = NO_ENTRIES

    def own(self, field: str) -> dict:
        """The run's own dict in ``field`` (one of the fields that start as :data:`NO_ENTRIES`), made on first use."""
        d = getattr(self, field)
        if d is NO_ENTRIES:
            d = {}
            setattr(self, field, d)
        return d

    def past_deadline(self) -> bool:
        """Whether the run has a deadline and the engine's clock has reached it."""
        return self.deadline is not None and self.host.clock.now() >= self.deadline

    def await_durable(self) -> None:
        """Block until every record of this run so far is durable (the gate; in memory, at once)."""
        journal = self.host.journal
        if journal.path is not None:  # in memory, every append is durable at once
            journal.wait_durable(self.shard, self.machine.gate())

    def append(self, rec: Any) -> int:
        """Journal ``rec`` (encoding first: ``NotSerializable`` records nothing) and feed it to the machine.
        In memory nothing keeps the bytes: the record is only checked (:func:`fusee.records.check_record`)."""
        if self.status != RUNNING:
            raise Terminated(f"run {self.run} of {self.id!r} has ended ({self.status})")
        journal = self.host.journal
        if journal.path is None:
            r.check_record(rec)
            lsn = journal.append_unkept(self.shard)
        else:
            lsn = journal.append(self.shard, r.encode_record(rec))
        self.machine.history.add(rec, lsn)
        return lsn

    def append_step(self, seq: int, name: str, attempt: int, value: Any) -> int:
        """:meth:`append` of ``Step(run, seq, name, attempt, "ok", value)`` for a live step that just ran (once
        per step, so the short way: the step record built directly, in memory only its name and value
        checked)."""
        if self.status != RUNNING:
            raise Terminated(f"run {self.run} of {self.id!r} has ended ({self.status})")
        journal = self.host.journal
        if journal.path is None:
            r.check_step(name, value)
            rec = r.new_step(self.run, seq, name, attempt, "ok", value)
            lsn = journal.append_unkept(self.shard)
        else:
            body = r.encode_step(self.run, seq, name, attempt, value)  # NotSerializable: nothing recorded
            rec = r.new_step(self.run, seq, name, attempt, "ok", value)
            lsn = journal.append(self.shard, body)
        self.machine.history.add_step(rec, lsn)
        return lsn

    def finish(self, status: str, payload: Any, outcome: tuple[str, Any]) -> int:
        """Record the run's ``Done`` and tell those waiting for its result."""
        lsn = self.append(r.Done(self.run, status, self.host.clock.now(), payload))
        self._ended(status, outcome, lsn)
        if status != "continued":
            _tell_parents(self)
        _close_children(self)
        return lsn

    def fail_unrecorded(self, exc: Error) -> None:
        """End the run in memory only (a DeterminismError: fixed code may resume it after a reopen)."""
        self._ended("failed", ("error", exc), self.machine.gate())

    # -- updates (the shard server queues them, the run's process answers them; both on the shard's carrier)

    def queue_update(self, uid: str, name: str, value: Any, a: Any) -> None:
        """Have the caller of alias ``a`` answered the outcome of update ``uid``: queued for the run's process
        (unless a request or a record of that update ID is there already: then ``a`` waits for that one).
        ``a`` is among the run's waiters too, so the run's end (or its server's restart) sends it
        ``(_DONE, a)``: it asks again."""
        self.waiters.append(a)
        if self.machine.history.has_update(uid):
            self.own("update_waiters").setdefault(uid, []).append(a)
            return
        for req in self.update_requests:
            if req.id == uid:
                req.waiters.append(a)
                return
        self.update_requests.append(_UpdateRequest(uid, name, value, [a]))

    def answer_update(self, waiters: list[Any], kind: str, payload: Any, lsn: int) -> None:
        """Send each alias of ``waiters`` the answer ``(_UPDATE, alias, kind, payload, lsn)`` (the caller waits
        until ``lsn`` is durable) and drop it from the run's waiters."""
        for a in waiters:
            _e.send(a, (_UPDATE, a, kind, payload, lsn))
            try:
                self.waiters.remove(a)
            except ValueError:
                pass

    def requeue_lost_updates(self) -> None:
        """A failed write took back records of this run: callers waiting for an update whose ``Update`` is no
        longer recorded are told ``(_DONE, alias)`` (they ask again, and it is queued again)."""
        h = self.machine.history
        for uid in [u for u in self.update_waiters if not h.has_update(u)]:
            for a in self.own("update_waiters").pop(uid):
                try:
                    self.waiters.remove(a)
                except ValueError:
                    pass
                _e.send(a, (_DONE, a))

    # -- streams (readers are registered by the shard server, told by the run's process; both on the carrier)

    def wait_stream(self, name: str, a: Any) -> None:
        """Tell alias ``a`` ``(_STREAM, a)`` once stream ``name`` has a new record (or ``(_DONE, a)`` when the
        run ends or its shard server restarts: it asks again)."""
        self.own("stream_readers").setdefault(name, []).append(a)
        self.waiters.append(a)

    def stream_changed(self, name: str) -> None:
        """A record of stream ``name`` was appended: tell its waiting readers (they read it once durable)."""
        readers = self.stream_readers and self.own("stream_readers").pop(name, None)
        if readers:
            for a in readers:
                _e.send(a, (_STREAM, a))
                try:
                    self.waiters.remove(a)
                except ValueError:
                    pass

    def _ended(self, status: str, outcome: tuple[str, Any], lsn: int) -> None:
        self.status = status
        self.outcome = outcome
        self.done_lsn = lsn
        self.finished = self.host.clock.now()
        # updates not answered: their callers are among the waiters (told below); they ask again and get
        # the recorded outcome, or NotRunning
        self.update_requests = []
        self.update_waiters = NO_ENTRIES
        self.stream_readers = NO_ENTRIES  # they are among the waiters: told (_DONE, a) below
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


def shown_status(st: _RunState) -> str:
    """The status a run shows (describe, list, ``Run.status``): its own, or :data:`PAUSED` while it runs and a
    step of it waits for ``engine.resume``."""
    if st.status == RUNNING and st.machine.history.paused is not None:
        return PAUSED
    return st.status


# at most this many signal dedup keys go on from a run to the next of its chain (continue-as-new)
INHERITED_DEDUPS = 1024


#: The empty mapping the rarely used dict fields of every :class:`_RunState` share until a first entry
#: (read-only: a write must go through :meth:`_RunState.own`).
NO_ENTRIES: Mapping[Any, Any] = MappingProxyType({})
_NO_DEDUPS: Mapping[Any, None] = MappingProxyType({})  # shared by every run that inherits none (never written)


def _inherited_dedups(origin: Any) -> Mapping[Any, None]:
    """The dedup keys a ``Start.origin`` carries (``{"run": n, "dedup": [keys]}``), as an ordered set
    (read-only: only read, so the runs that inherit none share one empty mapping)."""
    keys = origin.get("dedup") if type(origin) is dict else None
    if type(keys) is not list:
        return _NO_DEDUPS
    return dict.fromkeys(k for k in keys if type(k) in (str, int))


def _origin_of(st: _RunState) -> dict[str, Any]:
    """The ``Start.origin`` of the run that follows ``st`` (continue-as-new): ``st``'s run number and the
    last :data:`INHERITED_DEDUPS` signal dedup keys its chain has seen, so a signal delivered to ``st`` and
    delivered again (a ``Send`` redelivered at an open) is not taken by the next run."""
    keys = dict(st.inherited)
    for sig in st.machine.history.received:
        if sig.dedup is not None:
            keys.pop(sig.dedup, None)
            keys[sig.dedup] = None
    out: dict[str, Any] = {"run": st.run}
    if keys:
        out["dedup"] = list(keys)[-INHERITED_DEDUPS:]
    return out
