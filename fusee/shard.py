"""The shard server: one ``gen_server`` per shard owning that shard's state (the
runs by workflow ID, run numbers, the ID policy, signal, cancel and terminate
routing, children's results, parking, queries and descriptions).  It runs on
the shard's carrier (:meth:`fusee.journal.Journal.home`) beside its runs."""

from __future__ import annotations

from heapq import heappop as _heappop, heappush as _heappush
from typing import TYPE_CHECKING, Any

import ensemble as _e
from ensemble import gen_server as _gs
from ensemble import timer as _timer

from . import parking as _parking
from . import store as _store
from . import records as r
from .errors import (
    AlreadyExists,
    AlreadySettled,
    Busy,
    Error,
    Failed,
    InvalidToken,
    NotFound,
    NotPaused,
    NotRunning,
    StorageError,
    Terminated,
)
from .replay import CHILD, History, Machine, token_matches
from .workflow import _WAKE, IdPolicy, Workflow
from .ctx import _WAITING, _deliver_send
from .run_family import (
    _CHILD_DONE,
    _PARENT_CLOSED,
    _children_to_close,
    _close_children,
    _same_parent,
    _same_parent_run,
    _tell_parents,
)
from .run_process import _STALLED, _run_main
from .run_state import NO_ENTRIES, RUNNING, _origin_of, _RunState
from .run_state import shown_status as _status

_TICK = "fusee_park_tick"  # the parking timer's message to its own shard server
_RECLOSE = "fusee_reclose"  # (tag,): a shard server restarted; tellings of ended parents sent to it may be lost

if TYPE_CHECKING:
    from .host import Host

_VOID = "fusee_void"  # (tag, lo, hi, error): the journal voided this shard's LSNs lo..hi (a failed write)
_RETRY = "fusee_storage_retry"  # (tag,): the pause after a storage failure is over: load the runs again
_BACKOFF_FIRST = 0.05  # seconds before runs are loaded again after a storage failure; doubled while it fails
_BACKOFF_MAX = 2.0

#: The shard server's vocabulary: each request kind (``handle_call``'s ``request[0]``) and the method
#: answering it, which takes the request's other items.  Named, not bound, so a test may patch a method.
CALLS: dict[str, str] = {
    # the API (fusee.engine) and the inner modules (fusee.ctx, fusee.run_process, fusee.concurrency)
    "start": "_start",  # (wf, id, input, policy[, deadline, parent, origin]) -> (run state, LSN of its Start)
    "start_watch": "_start_watch",  # (alias, wf, id, input, policy, deadline) -> (run state, LSN, ended); as start, then watch
    "run_of": "_run_of",  # (id) -> the latest run's state (NotFound)
    "watch": "_watch",  # (run state, alias) -> True if it ended, else (_DONE, alias) is sent when it does
    "successor": "_successor",  # (run state that continued as new) -> the latest run of its ID
    "signal": "_signal",  # (id, name, value, dedup) -> LSN, or None if the run ended
    "cancel": "_cancel",  # (id, reason) -> LSN, or None if the run ended
    "terminate": "_terminate",  # (id, reason) -> LSN, or None if the run ended
    "query": "_query",  # (id, name, arg) -> the run's handler's answer
    "describe": "_describe",  # (id) -> a dict
    "list": "_list",  # (status or None) -> [dict]
    "counts": "_counts",  # () -> {status: count}
    "child": "_child",  # (Child record, parent ref) -> LSN of the child's Start
    "continue": "_continue",  # (run state, input) -> the next run's state
    "update": "_update",  # (id, name, value, update id, alias, start or None) -> ("done", status, payload, LSN, run state) | ("queued", LSN of a Start or 0, run state)
    "settle": "_settle",  # (id, run, seq, secret, status, payload, token) -> LSN of the Settled
    "resume_paused": "_resume_paused",  # (id) -> LSN of the Resumed (NotPaused)
    "stream_read": "_stream_read",  # (id, run or None, name, offset, alias or None) -> (run, [(LSN, chunk)], end LSN or None)
    # the engine's life
    "resume": "_resume",  # () after every shard's server is up: start the recovered runs
    "stop_runs": "_stop_runs",  # () before shutdown
    "checkpoint": "_checkpoint",  # () -> a fusee.store.Checkpoint (runs stopped)
    # parking (tests, bench, the test kit)
    "park_now": "_park_now",  # (force)
    "next_wakeup": "_next_wakeup",  # () -> engine time, or None
    "parking_stats": "_parking_stats",  # () -> {parked, loaded, waiting, parks, loads}
}


class _Refused(Exception):
    """A request's answer is an error that is not a :class:`fusee.errors.Error` (a query handler's):
    sent to the caller, the server unharmed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


# -- the shard server --------------------------------------------------------------------


def _ended_since(cur: _RunState, rec: r.Child) -> bool:
    """Whether run ``cur`` (not running) ended at or after the parent asked for it (``rec.at``; a
    ``Child`` recorded before ``at`` existed never counts)."""
    return rec.at is not None and cur.status != RUNNING and cur.finished is not None and cur.finished >= rec.at


class _ShardServer(_gs.GenServer):
    """A shard's state: runs by workflow ID, run numbers, and every request routed to a run."""

    def __init__(self, host: "Host", shard: int, recovered: list[_RunState], next_run: int) -> None:
        self.host = host
        self.shard = shard
        self.home = host.journal.home(shard)
        self.runs: dict[str, _RunState] = {}
        self.all: list[_RunState] = []
        self.next_run = next_run
        self._recovered = recovered
        self.max_live = host.max_live_runs
        self.live: set[_RunState] = set()  # kept only when max_live bounds it; pruned lazily
        self.monitors: dict[Any, _RunState] = {}  # monitor ref -> the run whose process it watches
        # parking (fusee.parking): paused loaded runs that said so, parked runs' wake-ups, one timer
        self.waiting: set[_RunState] = set()
        self.wakeups: list[tuple[float, int, _RunState]] = []  # heap of (wake_at, run, parked run)
        self.timer_at: float | None = None
        self.parks = 0
        self.loads = 0
        # storage failures: runs to load again once the pause is over (their process hit a StorageError)
        self.stalled: list[_RunState] = []
        self.backoff = 0.0  # the current pause (0: no failure lately)
        self.retry_armed = False
        self.rollbacks = 0

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
        as its code replays to their ``Child`` operations (:meth:`Ctx._child_op`).  Every ended parent (its
        ``Done`` recovered, so durable) closes its children again: a crash just after its ``Done`` became
        durable may have lost the first telling (:func:`fusee.run_family._close_children`, idempotent)."""
        for st in list(self.all):
            if st.status != RUNNING and st.machine.history.done is not None:
                _close_children(st, durable=True)
        for st in list(self.runs.values()):
            if st.status == "continued":
                self._continue(st, st.outcome[1])  # type: ignore[index]
        for st in list(self.all):
            if st.status != RUNNING or st.pid is not None or st.parked:
                continue
            self._spawn(st)
            self._redeliver(st)

    def _redeliver(self, st: _RunState) -> None:
        """Deliver ``st``'s ``Send`` records again (their targets deduplicate), in a process of their own:
        a ``Send`` replays to nothing, so whatever lost its delivery (a crash, a failed write) is made good."""
        sends = st.machine.history.sends
        if sends:
            host, sender = self.host, st.id
            _e.spawn(lambda: [_deliver_send(host, sender, s) for s in sends], dispatcher=self.home)

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
        parent run started already (by this operation or an earlier one, as ``start_child`` then ``child``)
        is taken as is (ended: its outcome is sent at once); else a new run starts.  Returns the LSN of
        the child's ``Start``.  A run another parent (or nobody) started that ended after this parent
        asked (``rec.at``) is the one it attached to: its outcome is taken (a parent asking again after
        a crash lost its ``ChildDone``), not a new run started."""
        cur = self.runs.get(rec.id)
        if cur is not None and (cur.status == RUNNING or _same_parent_run(cur.parent, parent) or _ended_since(cur, rec)):
            st = cur
        else:
            wf = self.host.workflow(rec.wtype)
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
        wf = self.host.workflow(st.wtype)
        new, _ = self._start(wf, st.id, input, IdPolicy("fail", "start_new"), st.deadline, st.parent, _origin_of(st))
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
        elif type(msg) is tuple and len(msg) == 4 and msg[0] == _VOID:
            self._rollback(msg[1], msg[3])
        elif msg == (_RETRY,):
            self._retry()
        elif msg == (_RECLOSE,):
            self._reclose()
        return ("noreply", state)

    def _reclose(self) -> None:
        """Another shard's server restarted (:meth:`fusee.host.Host._start_server`): what was told to it while
        it was down is lost, so every ended parent here closes its children again (idempotent: a child's
        server acts only on a running child this parent started), once its ``Done`` is durable."""
        for st in self.all:
            if st.status != RUNNING and st.machine.history.done is not None:
                _close_children(st)

    # -- storage failures

    def _rollback(self, lo: int, error: StorageError) -> None:
        """A failed write voided every record of this shard from LSN ``lo`` on (the journal refuses appends
        meanwhile): stop every run process, bring each run back to what its durable records say, accept
        appends again (a write succeeds as soon as the disk does), and load the runs after a pause.

        A run whose ``Start`` was voided never existed: it ends in memory with
        ``error`` (its waiters are told) and its ID is free again.  A run whose
        ``Done`` was voided runs again.  Step bodies whose ``Step`` was voided
        run again (a step runs at least once).
        """
        self.rollbacks += 1
        self._stop_runs()
        kept: list[_RunState] = []
        for st in self.all:
            recs = st.machine.history.records
            if recs and recs[0][0] >= lo:  # its Start never reached the disk
                st.pid = None
                st.fail_unrecorded(error)
                continue
            if recs and recs[-1][0] >= lo:
                h = History()
                for lsn, rec in recs:
                    if lsn < lo:
                        h.add(rec, lsn)
                st.machine = Machine(h)
                if st.status != RUNNING and st.done_lsn >= lo:  # its end never reached the disk
                    st.status, st.outcome, st.done_lsn, st.finished = RUNNING, None, 0, None
            elif st.status == RUNNING:
                st.machine = Machine(st.machine.history)
            if st.status == RUNNING:
                st.requeue_lost_updates()  # callers of an update whose Update was voided ask again
                st.pid = None
                st.queries = NO_ENTRIES
                st.parking = st.parked = st.wake_pending = False
                st.waiting_since = st.wake_at = None
            kept.append(st)
        self.all = kept
        self.runs = {}
        for st in kept:
            self.runs[st.id] = st  # in start order: the latest run of each ID
        self.live.clear()
        self.waiting.clear()
        self.wakeups = []
        self.stalled = [st for st in kept if st.status == RUNNING]
        self.host.journal.resume(self.shard)
        self._arm_retry()

    def _arm_retry(self) -> None:
        """Have :meth:`_retry` run after the pause (doubled from the last, up to ``_BACKOFF_MAX``)."""
        if self.retry_armed:
            return
        self.backoff = min(_BACKOFF_MAX, self.backoff * 2) if self.backoff else _BACKOFF_FIRST
        self.retry_armed = True
        _timer.send_after(self.backoff, _e.self(), (_RETRY,))

    def _retry(self) -> None:
        """The pause is over: load the stalled runs again (a run whose write fails again stalls again, with a
        longer pause).  A run's ``continued`` end whose next run was lost starts it."""
        self.retry_armed = False
        stalled, self.stalled = self.stalled, []
        if not stalled:
            self.backoff = 0.0
        for st in list(self.runs.values()):
            if st.status == "continued" and self.runs.get(st.id) is st:
                try:
                    self._continue(st, st.outcome[1])  # type: ignore[index]
                except StorageError:
                    pass  # voided again: the rollback that follows arms the next retry
        for st in stalled:
            if st.status == RUNNING and st.pid is None and not st.parked:
                self._spawn_again(st)
                self._redeliver(st)  # a delivery this run was making may have been voided with its process

    # -- parking (decisions: fusee.parking)

    def _waiting(self, st: _RunState) -> None:
        """A loaded run paused: note it, and have the timer look at it when it may be parked."""
        if st.status != RUNNING or st.parking or st.pid is None or st.waiting_since is None:
            return
        self.waiting.add(st)
        e = self.host
        if e.parking.memory_budget is not None:
            self._arm(e.clock.now())
        elif e.parking.park_after is not None:
            self._arm(st.waiting_since + e.parking.park_after)

    def _arm(self, at: float) -> None:
        """Have a tick arrive at engine time ``at`` (unless one is due no later)."""
        if self.timer_at is not None and self.timer_at <= at:
            return
        self.timer_at = at
        _timer.send_after(max(0.0, at - self.host.clock.now()), _e.self(), _TICK)

    def _park_tick(self, force: bool = False) -> None:
        """Load the parked runs now due, park the waiting runs :func:`fusee.parking.to_park` picks
        (``force``: every waiting run), forget runs past retention; arm the next tick."""
        e = self.host
        now = e.clock.now()
        if force:
            self.waiting.update(st for st in self.all if st.pid is not None and st.waiting_since is not None)
        while self.wakeups and self.wakeups[0][0] <= now:
            at, _, st = _heappop(self.wakeups)
            if st.parked and st.wake_at == at:
                self._load(st)
        for st in [st for st in self.waiting if st.status != RUNNING or st.waiting_since is None or st.parking]:
            self.waiting.discard(st)
        ws = [_parking.Waiting(st, st.waiting_since, _parking.run_bytes(len(st.machine.history))) for st in self.waiting]
        budget = e.parking.memory_budget
        if force:
            chosen = [w.key for w in ws]
        else:
            loaded = 0
            if budget is not None:
                budget = budget // e.shards
                loaded = sum(
                    _parking.run_bytes(len(st.machine.history)) for st in self.all if st.pid is not None and st.status == RUNNING
                )
            chosen = _parking.to_park(now, e.parking.park_after, budget, loaded, ws)
        for st in chosen:
            self._park(st)
        if e.parking.retention is not None:
            self._forget(now)
        nxt = _parking.next_check(e.parking.park_after, [w for w in ws if w.key in self.waiting])
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
        """Wake ``st`` (something for it was just recorded): load it if parked, else wake its process.

        A loaded run woken is marked ``wake_pending`` until it pauses again (``Ctx._pause``): parked in
        between (a park tick before its process ran), :meth:`_parked_now` loads it again at once."""
        if st.parked:
            self._load(st)
        elif st.parking:
            st.wake_pending = True
        elif st.pid is not None:
            st.wake_pending = True
            _e.send(st.pid, _WAKE)

    def _forget(self, now: float) -> None:
        """Drop the finished runs past ``retention`` (``result`` gives NotFound)."""
        keep = self.host.parking.retention
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

    def _next_wakeup(self) -> float | None:
        """(The test kit's virtual time) the engine time of this shard's next parking event: a parked
        run due to wake, or a waiting run due to be parked; None if there is none."""
        due = [at for at, _, st in self.wakeups if st.parked and st.wake_at == at]
        park_after = self.host.parking.park_after
        if park_after is not None:
            due += [st.waiting_since + park_after for st in self.waiting if st.waiting_since is not None]
        return min(due) if due else None

    def _parking_stats(self) -> dict[str, int]:
        loaded = sum(1 for st in self.all if st.pid is not None and st.status == RUNNING)
        waiting = sum(1 for st in self.all if st.pid is not None and st.waiting_since is not None)
        parked = sum(1 for st in self.all if st.parked and st.status == RUNNING)
        return {"parked": parked, "loaded": loaded, "waiting": waiting, "parks": self.parks, "loads": self.loads}

    def _checkpoint(self) -> _store.Checkpoint:
        """This shard's checkpoint at the journal's last LSN (runs stopped): every unfinished run's
        records, and each retained finished run's ``Start``, ``Done`` and stream records (``Chunk``,
        ``StreamClose``: its streams stay readable)."""
        e = self.host
        now = e.clock.now()
        out: list[tuple[int, Any]] = []
        for st in self.all:
            h = st.machine.history
            recs = h.records
            if h.done is None:
                out.extend(recs)
            elif not _parking.expired(st.finished, now, e.parking.retention):
                out.append(recs[0])
                if h.streams:  # its streams, for readers after the reopen
                    out.extend((lsn, rec) for lsn, rec in recs if type(rec) is r.Chunk or type(rec) is r.StreamClose)
                closes = {(c.run, c.seq) for c in _children_to_close(st)}
                if closes:  # the Child records its end closes, for the open to close them again
                    out.extend((lsn, rec) for lsn, rec in recs if type(rec) is r.Child and (rec.run, rec.seq) in closes)
                out.append(recs[-1])
        out.sort(key=lambda p: p[0])
        bodies = [(lsn, r.encode_record(rec)) for lsn, rec in out]
        return _store.Checkpoint(self.shard, e.journal.last_lsn(self.shard), self.next_run, bodies)

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
        if type(reason) is tuple and len(reason) == 2 and reason[0] == _STALLED:
            # a write of its (or a child's) shard failed: load it again after a pause, nothing recorded
            st.pid = None
            st.waiting_since = st.wake_at = None
            self.stalled.append(st)
            self._arm_retry()
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
        """Answer ``request`` (``(kind, *args)``, ``kind`` one of :data:`CALLS`) with ``("ok", value)``, or
        ``("error", exc)`` for a deliberate refusal: a :class:`fusee.errors.Error` the request raised (the
        caller's mistake or the run's state: NotFound, AlreadyExists, Busy, StorageError, ...), a
        ``TypeError`` or ``ValueError`` (bad input the records' checks refuse: a careless caller must not
        take a shard down), an error
        a query handler (user code) raised, or an unknown request (ValueError).  Anything else escapes:
        a bug of this server crashes it (let it crash) rather than pass for an answer."""
        name = CALLS.get(request[0]) if type(request) is tuple and request and type(request[0]) is str else None
        if name is None:
            return ("reply", ("error", ValueError(f"the shard server takes no request {request!r:.200} (it takes: {sorted(CALLS)})")), state)
        try:
            reply = ("ok", getattr(self, name)(*request[1:]))
        except (Error, TypeError, ValueError) as exc:  # a refusal: fusee's own, or bad input (a record's check)
            reply = ("error", exc)
        except _Refused as exc:
            reply = ("error", exc.error)
        return ("reply", reply, state)

    def _find(self, id: str) -> _RunState:
        st = self.runs.get(id)
        if st is None:
            raise NotFound(id)
        keep = self.host.parking.retention
        if keep is not None and st.status != RUNNING and _parking.expired(st.finished, self.host.clock.now(), keep):
            self._forget(self.host.clock.now())
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
        start = r.new_start(
            run, id, wf.name, wf.version, self.host.clock.now(), input, policy.plain(), deadline, parent, origin
        )
        journal = self.host.journal
        # NotSerializable: nothing recorded, nothing terminated (in memory nothing keeps the bytes: checked only)
        body = r.encode_record(start) if journal.path is not None else r.check_record(start)
        if ending is not None:
            self._terminate(id, "terminated by a new start (IdPolicy terminate)")
        self.next_run = run + 1
        st = _RunState(self.host, self.shard, start, Machine(), wf)
        lsn = journal.append(self.shard, body) if body is not None else journal.append_unkept(self.shard)
        st.machine.record(start, lsn)
        st.start_lsn = lsn
        self.runs[id] = st
        self.all.append(st)
        self._spawn(st)
        return st, lsn

    def _start_watch(
        self, a: Any, wf: Workflow, id: str, input: Any, policy: IdPolicy, deadline: float | None
    ) -> tuple[_RunState, int, bool]:
        """``start``, then ``watch`` the run it answers with (``Engine.execute``: one request, not two)."""
        st, lsn = self._start(wf, id, input, policy, deadline)
        return st, lsn, self._watch(st, a)

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
        if st.inherited and type(dedup) in (str, int) and dedup in st.inherited:  # seen by a run before it (continue-as-new)
            return st.start_lsn
        return self._deliver(st, r.Signal(st.run, name, dedup, value))

    def _update(
        self, id: str, name: str, value: Any, uid: str, a: Any, start: Any
    ) -> tuple[Any, ...]:
        """An update of run ``id`` (``start``: ``(wf, input, policy, deadline)``, start it first as ``start`` does,
        the update-with-start): the recorded outcome of update ID ``uid`` if it has one; else queue it for the
        run's process (which validates, records and runs it, and answers alias ``a``), waking the run."""
        start_lsn = 0
        if start is not None:
            st, start_lsn = self._start(start[0], id, start[1], start[2], start[3])
        else:
            st = self._find(id)
        done = st.machine.history.update_outcome(uid)
        if done is not None:
            rec, lsn = done
            return ("done", rec.status, rec.payload, max(lsn, start_lsn), st)
        if st.status != RUNNING:
            raise NotRunning(id, st.status, f"update {name!r}")
        st.queue_update(uid, name, value, a)
        self._ensure_loaded(st)
        return ("queued", start_lsn, st)

    def _settle(self, id: str, run: int, seq: int, secret: str, status: str, payload: Any, token: str) -> int:
        """Settle the async operation ``seq`` of run ``run`` of ``id`` (a ``Settled``), if ``secret`` is its
        token's: :class:`InvalidToken` if not, :class:`AlreadySettled` once settled, :class:`NotRunning` once
        the run has ended; nothing recorded then."""
        st = self.runs.get(id)
        if st is None or st.run != run:
            st = next((x for x in self.all if x.id == id and x.run == run), None)
        if st is None:
            raise InvalidToken(token, "no run of this engine has it")
        h = st.machine.history
        aw = h.awaiting(seq)
        if aw is not None:
            if not token_matches(aw, secret):
                raise InvalidToken(token, "its secret does not match")
            op = h.op(seq)
            if op.done is not None:
                raise AlreadySettled(token, op.done.status)
        elif st.status == RUNNING:
            raise InvalidToken(token, "the run has no async step there")
        if st.status != RUNNING:
            raise NotRunning(id, st.status, "the completion")
        return self._deliver(st, r.Settled(run, seq, status, payload))

    def _resume_paused(self, id: str) -> int:
        """Retry the paused step of run ``id`` with a fresh retry budget (a ``Resumed``); :class:`NotPaused` if
        the run is not paused (nothing recorded)."""
        st = self._find(id)
        seq = st.machine.history.paused if st.status == RUNNING else None
        if seq is None:
            raise NotPaused(id, _status(st))
        return self._deliver(st, r.Resumed(st.run, seq))

    def _stream_read(self, id: str, run: int | None, name: str, offset: int, a: Any) -> tuple[int, list[tuple[int, Any]], int | None]:
        """Stream ``name`` of run ``run`` of ``id`` (``None``: its latest run) from ``offset`` (fusee.stream): its
        run number, the chunks recorded from there (LSN and payload, at most ``READ_BATCH``; the reader
        yields them once durable) and, when there are none, the LSN of what ended it (its ``StreamClose``
        or the run's ``Done``) or ``None``: then alias ``a`` (if given) is told when something comes."""
        from .stream import READ_BATCH

        if run is None:
            st = self._find(id)
        else:
            st = self.runs.get(id)
            if st is None or st.run != run:
                st = next((x for x in self.all if x.id == id and x.run == run), None)
            if st is None:
                raise NotFound(id)
        log = st.machine.history.stream(name)
        if log is not None and offset < len(log):
            return (st.run, log.since(offset, READ_BATCH), None)
        if log is not None and log.closed is not None:
            return (st.run, [], log.closed)
        if st.status != RUNNING:
            return (st.run, [], st.done_lsn or st.machine.gate())
        if a is not None:
            st.wait_stream(name, a)
        return (st.run, [], None)

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
        try:
            return fn(arg)
        except Exception as exc:  # the workflow's code, not this server's: the caller's answer
            raise _Refused(exc) from None

    def _describe(self, id: str) -> dict[str, Any]:
        st = self._find(id)
        return _describe(st)

    def _list(self, status: str | None) -> list[dict[str, Any]]:
        return [
            {"id": st.id, "run": st.run, "type": st.wtype, "status": _status(st), "shard": st.shard}
            for st in self.runs.values()
            if status is None or _status(st) == status
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
        "status": _status(st),
        "shard": st.shard,
        "input": st.input,
        "started": st.started,
        "finished": st.finished,
        "result": st.outcome[1] if st.outcome and st.outcome[0] == "ok" else None,
        "error": st.outcome[1] if st.outcome and st.outcome[0] == "error" else None,
        "journal": [(lsn, rec) for lsn, rec in h.records],
        "parked": st.parked and st.status == RUNNING,
    }
