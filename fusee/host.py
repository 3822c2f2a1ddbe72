"""The host: what an open engine gives its inner modules, built complete in one constructor.

:class:`Host` holds the journal, the clock, the workflow registry, the parking
settings, the step hook (the test kit's mocks) and the shard server
processes, and offers what :mod:`fusee.run_state`, :mod:`fusee.ctx`, :mod:`fusee.shard` and
:mod:`fusee.concurrency` need of them (call a shard, wait until durable, look
up a workflow, tell a shard server something).  :class:`fusee.engine.Engine`
is the public face over it; nothing inside fusee reaches into the ``Engine``.

Building a host recovers every shard (:func:`recover`: the checkpoint, then the
log after it), starts one shard server per shard, then has each resume its
recovered runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

import ensemble as _e
from ensemble import NOMATCH
from ensemble import gen_server as _gs
from ensemble import supervisor as _sup

from . import parking as _parking
from . import records as r
from . import store as _store
from .errors import Corrupt, EngineFailed, Error, ShardCrashed, UnknownWorkflow
from .replay import History, Machine
from .run_family import _same_parent
from .run_state import _DONE, RUNNING, _RunState
from .shard import _RECLOSE, _ShardServer
from .workflow import REAL_CLOCK, Clock, Workflow, shard_of

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["Host", "StepHook", "recover", "RESTART_INTENSITY"]

#: The default restart intensity of the shard servers' supervisor: at most 3 restarts within 5 seconds.
RESTART_INTENSITY = (3, 5.0)

#: ``(workflow type, step name) -> body``: a step whose key is here runs that body instead of its own.
StepHook = Mapping[tuple[str, str], Callable[..., Any]]


class Host:
    """An open engine's parts, for its inner modules.  Public attributes (read-only by contract):
    ``journal``, ``shards``, ``clock``, ``parking`` (:class:`fusee.parking.Settings`),
    ``max_live_runs``, ``workflows`` (name -> :class:`Workflow`), ``recovery`` (records the open
    replayed: ``log_records``, ``checkpoint_records``), ``servers`` (the shard servers' pids, by
    shard: a restarted server's replaces its predecessor's), ``supervisor`` (their supervisor's pid),
    ``restarts`` (shard servers restarted since the open), ``failed`` (None, or why the supervisor gave
    up: every call then raises :class:`EngineFailed`) and ``closed``.

    ``checkpoints``: each shard's :class:`fusee.store.Checkpoint` (or None), read at open.
    ``step_hook``: the test kit's mocks (:data:`StepHook`).  ``servers``: an empty list to fill with
    the shard servers' pids (default: a new one).  ``restart_intensity``: ``(restarts, seconds)``, at
    most that many shard server restarts within that many seconds (OTP's intensity and period).

    The constructor recovers every shard, then starts the shard servers under one supervisor
    (``one_for_one``: a crashed server is restarted alone, its shard's runs rebuilt from the journal,
    :meth:`_start_server`), then has each resume its recovered runs.  If that fails, what started is
    stopped and the error raised (the journal is the caller's to close).
    """

    def __init__(
        self,
        journal: Journal,
        workflows: dict[str, Workflow],
        shards: int,
        *,
        clock: Clock = REAL_CLOCK,
        parking: _parking.Settings = _parking.Settings(),
        max_live_runs: int | None = None,
        checkpoints: list[Any] | None = None,
        step_hook: StepHook | None = None,
        servers: list[Any] | None = None,
        restart_intensity: tuple[int, float] = RESTART_INTENSITY,
    ) -> None:
        self.journal = journal
        self.workflows = workflows
        self.shards = shards
        self.clock = clock
        self.parking = parking
        self.max_live_runs = max_live_runs
        self.recovery = {"log_records": 0, "checkpoint_records": 0}
        # the shard servers' pids by shard: the opener may pass the list its journal's callbacks (a voided
        # write goes to its shard's server) already hold
        self.servers: list[Any] = [] if servers is None else servers
        self.servers[:] = [None] * shards
        self.closed = False
        self.failed: str | None = None
        self.restarts = 0
        self.supervisor: Any = None
        self._stopping = False
        self._step_hook: StepHook = {} if step_hook is None else step_hook
        self._checkpoints: list[Any] = list(checkpoints) if checkpoints else [None] * shards
        self._objects: list[_ShardServer | None] = [None] * shards  # each shard's server state (its latest)
        # every shard recovered before anything starts: a Corrupt record raises here, nothing started
        self._initial: list[Any] | None = [recover(self, s, self._checkpoints[s]) for s in range(shards)]
        n, period = restart_intensity
        try:
            self.supervisor = _sup.start(
                {"strategy": "one_for_one", "intensity": n, "period": period},
                [
                    {"id": s, "start": (self._start_server, (s,)), "restart": "permanent", "shutdown": 5}
                    for s in range(shards)
                ],
            )
            self._initial = None
            self._watcher = _e.spawn(self._watch_supervisor, self.supervisor)
            for pid in list(self.servers):
                self.call_server(pid, ("resume",))
        except BaseException as exc:
            self._stopping = True
            if self.supervisor is not None and _e.is_alive(self.supervisor):
                _sup.stop(self.supervisor)
            self._kill_runs()
            if isinstance(exc, _e.StartError):  # a server's start failed: its reason, raised as itself
                why = _failed_start_reason(exc.reason)
                if isinstance(why, BaseException):
                    raise why from None
            raise

    # -- the shard servers and their supervisor

    def _start_server(self, shard: int) -> Any:
        """(The supervisor's child start) start shard ``shard``'s server, linked to the supervisor: at the
        open, on the runs recovered then; at a restart (its predecessor crashed), on the runs rebuilt from
        the journal now (:meth:`_rebuild`), which it resumes at once."""
        restart = self._initial is None
        recovered, next_run = self._rebuild(shard) if restart else self._initial[shard]  # type: ignore[index]
        server = _ShardServer(self, shard, recovered, next_run)
        pid = _gs.start_link(server, dispatcher=server.home)
        self._objects[shard] = server
        self.servers[shard] = pid
        if restart:
            self.restarts += 1
            if self.journal.refusing(shard):  # a void told the crashed server: the rebuild has rolled back
                self.journal.resume(shard)
            if not self._stopping:
                self.call_server(pid, ("resume",))
                for other in range(self.shards):  # an ended parent's telling sent meanwhile is lost: again
                    if other != shard:
                        self.tell(other, (_RECLOSE,))
        return pid

    def _rebuild(self, shard: int) -> tuple[list[_RunState], int]:
        """Shard ``shard``'s runs after its server crashed: stop the crashed server's run processes (nothing
        may append to the shard meanwhile), then recover the shard as an open does: from its checkpoint
        and its log read back from the disk (:meth:`fusee.journal.Journal.read_back`); in memory, from the
        records the crashed server's runs hold (an in-memory journal keeps none).

        A run recovered keeps its state object (the handles and waits on it stay good); a run of the crashed
        server whose ``Start`` was not recorded never existed: it fails in memory with :class:`ShardCrashed`.
        Parents on other shards attached to a running child keep waiting on it."""
        old = self._objects[shard]
        assert old is not None
        olds = list(old.all)
        _stop_processes([st.pid for st in olds if st.pid is not None])
        self._tell_waiters([old])  # those waiting for a run's end watch it again (with the new server)
        cp = self._checkpoints[shard]
        counted = dict(self.recovery)  # what the open replayed, not counting this
        if self.journal.path is None:
            feed: list[tuple[int, Any]] = sorted(
                (pair for st in olds for pair in st.machine.history.records), key=lambda p: p[0]
            )
            recovered, next_run = recover(self, shard, None, feed)
        else:
            recovered, next_run = recover(self, shard, cp, self.journal.read_back(shard, cp.lsn if cp else 0))
        self.recovery.update(counted)
        by_key = {(st.id, st.run): st for st in olds}
        for i, st in enumerate(recovered):
            was = by_key.pop((st.id, st.run), None)
            if was is None:
                continue
            parents = was.parents
            for name in _RunState.__slots__:
                setattr(was, name, getattr(st, name))
            was.parents.extend(p for p in parents if not any(_same_parent(p, q) for q in was.parents))
            recovered[i] = was
        why = ShardCrashed(shard, "its server crashed before the run's Start was recorded")
        for st in by_key.values():
            if st.status == RUNNING:
                st.pid = None
                st.fail_unrecorded(why)
        return recovered, max(next_run, old.next_run)

    def _watch_supervisor(self, sup: Any) -> None:
        """A process of the host's: once the supervisor ends other than by :meth:`stop_servers` (it gave up:
        restart intensity reached), the engine has failed: note why and stop every run process."""
        ref = _e.monitor(sup)
        got = _e.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[0] == "DOWN" and m[1] == ref else NOMATCH)
        if self._stopping or self.closed:
            return
        if self.failed is None:
            self.failed = f"its shard servers crashed more than the restart intensity allows (supervisor: {got[4]!r:.200})"
        self._kill_runs()
        self._tell_waiters([o for o in self._objects if o is not None])  # their next watch raises EngineFailed

    @staticmethod
    def _tell_waiters(servers: list[_ShardServer]) -> None:
        """Send each alias waiting for the end of a run of ``servers`` its ``(_DONE, alias)`` (it looks at
        the run: still running, it watches again), and forget them."""
        for o in servers:
            for st in o.all:
                waiters, st.waiters = st.waiters, []
                for a in waiters:
                    _e.send(a, (_DONE, a))

    def _kill_runs(self) -> None:
        _stop_processes([st.pid for o in self._objects if o is not None for st in o.all if st.pid is not None])

    def stop_servers(self) -> None:
        """Stop the shard servers and their supervisor (shutdown); a failed engine's orphan runs are stopped."""
        self._stopping = True
        sup = self.supervisor
        if sup is not None and _e.is_alive(sup):
            try:
                _sup.stop(sup)
            except _e.CallError:
                pass  # it ended meanwhile
        self._kill_runs()

    def abandon(self) -> None:
        """Emulate a crash (the test kit): kill the supervisor, the shard servers and every process on the
        shards' carriers at once (no shutdown step), then drop what the journal had not flushed."""
        self.closed = self._stopping = True
        if self.supervisor is not None:
            _stop_processes([self.supervisor])
        homes = {self.journal.home(s) for s in range(self.shards)}
        keep = set(self.journal.flushers())
        doomed = [p for p in _e.processes() if p not in keep and _e.process_info(p, "dispatcher") in homes]
        _stop_processes(doomed)
        self.journal.abandon()

    def call(self, shard: int, request: tuple, again: bool = False) -> Any:
        """Ask shard ``shard``'s server (:data:`fusee.shard.CALLS`); its answer, or the error it refused
        with raised here.  Raises :class:`Error` once the engine is shut down, :class:`EngineFailed` once
        its supervisor gave up, and :class:`ShardCrashed` if the server crashed with the request (whether
        it took effect is unknown; the server is up again when this raises), unless ``again`` (a lookup
        that changes nothing, which a result's wait makes): then it is asked again of the restarted
        server.  A request that found the server down (it never reached it) waits for the restart and
        goes to the new server."""
        while True:
            pid = self._server(shard)
            try:
                kind, value = _gs.call(pid, request, timeout=None)
            except _e.CallError as exc:
                self._await_restart(shard, pid)
                if exc.reason != "noproc" and not again:
                    raise ShardCrashed(shard, _shown(exc.reason)) from None
                continue
            if kind == "error":
                raise value
            return value

    def watch(self, st: _RunState, a: Any) -> bool:
        """Have ``st``'s shard server send ``(fusee.run_state._DONE, a)`` when ``st`` ends; True if it has
        ended.  If that server crashes first (with this request, or after it), this is asked again of its
        successor, or the restart sends that message (the run may not have ended: watch it again); the
        engine's failure sends it too (the next watch raises :class:`EngineFailed`)."""
        return self.call(st.shard, ("watch", st, a), again=True)

    def _server(self, shard: int) -> Any:
        """Shard ``shard``'s server pid; raises if the engine is shut down or has failed."""
        if self.closed or self._stopping:
            raise Error("the engine is shut down")
        if self.failed is not None:
            raise EngineFailed(self.failed)
        return self.servers[shard]

    def _await_restart(self, shard: int, dead: Any) -> None:
        """Wait until shard ``shard``'s server ``dead`` (which ended) is replaced; raises if the engine was
        shut down meanwhile or its supervisor gave up."""
        while self.servers[shard] is dead or not _e.is_alive(self.servers[shard]):
            self._server(shard)
            try:  # answered once the supervisor has handled what came before (the restart included)
                _sup.which_children(self.supervisor)
            except _e.CallError:
                self._server(shard)  # shut down meanwhile: says so
                if self.failed is None:
                    self.failed = "its shard servers' supervisor has ended (restart intensity reached)"
                raise EngineFailed(self.failed) from None

    @staticmethod
    def call_server(pid: Any, request: tuple) -> Any:
        """Ask the shard server ``pid`` (even while shutting down): its answer, or its refusal raised."""
        kind, value = _gs.call(pid, request, timeout=None)
        if kind == "error":
            raise value
        return value

    def tell(self, shard: int, msg: Any) -> None:
        """Send ``msg`` to shard ``shard``'s server (no answer); a shard this engine lacks: dropped."""
        if 0 <= shard < len(self.servers):
            _e.send(self.servers[shard], msg)

    def shard_of(self, id: str) -> int:
        """The shard of workflow ID ``id`` (TypeError for a non-str)."""
        if type(id) is not str:
            raise TypeError(f"a workflow ID is a str, not {id!r}")
        return shard_of(id, self.shards)

    # -- the journal

    def wait_durable(self, shard: int, lsn: int | None) -> None:
        """Block until shard ``shard``'s journal is durable through ``lsn`` (None or 0: at once)."""
        if lsn and self.journal.path is not None:  # in memory every record is durable at once
            self.journal.wait_durable(shard, lsn)

    def home(self, shard: int) -> Any:
        """The dispatcher shard ``shard``'s server and runs are on."""
        return self.journal.home(shard)

    # -- the workflows

    def workflow(self, wf: Any) -> Workflow:
        """The registered :class:`Workflow` named ``wf`` (or ``wf.name``); :class:`UnknownWorkflow` if none."""
        name = wf.name if type(wf) is Workflow else wf
        held = self.workflows.get(name) if type(name) is str else None
        if held is None:
            raise UnknownWorkflow(name, self.user_workflows())
        return held

    def user_workflows(self) -> list[str]:
        """The names of the workflow types registered at open (the built-in ``fusee.*`` ones aside)."""
        return sorted(n for n in self.workflows if not n.startswith("fusee."))

    def step_body(self, wtype: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The body step ``name`` of a ``wtype`` run runs: ``fn``, unless the step hook has another."""
        hook = self._step_hook
        return hook.get((wtype, name), fn) if hook else fn


def recover(host: Host, shard: int, cp: Any = None, logged: list[tuple[int, Any]] | None = None) -> tuple[list[_RunState], int]:
    """Shard ``shard``'s runs from checkpoint ``cp`` (or None) and the log after it (``logged``: ``(lsn,
    body)`` pairs, a body encoded or already a record; default: what the journal's open recovered), and
    its next run number.  A finished run past retention is forgotten; an unfinished one of an unknown
    type fails in memory.  Raises :class:`Corrupt` (file, offset) for a record that does not decode or fit."""
    j = host.journal
    histories: dict[int, History] = {}
    order: list[int] = []
    if logged is None:
        logged = j.recovered(shard)
    feed = logged if cp is None else cp.records + logged
    host.recovery["log_records"] += len(logged)
    host.recovery["checkpoint_records"] += len(feed) - len(logged)

    def where(lsn: int) -> tuple[str | None, int]:
        """The file and offset of a recovered record (a checkpoint's: the checkpoint, offset 0)."""
        try:
            return j.where(shard, lsn)
        except ValueError:
            return (os.path.join(j.path or "", f"shard-{shard}", _store.NAMES[0]), 0)

    for lsn, body in feed:
        try:
            rec = r.decode_record(body) if type(body) is bytes else body
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
        st = _RunState(host, shard, start, Machine(h), host.workflows.get(start.wtype))
        st.start_lsn = h.records[0][0]
        if h.done is not None:
            if _parking.expired(h.done.finished, host.clock.now(), host.parking.retention):
                continue  # retention ended: forgotten
            st._ended(h.done.status, st.outcome_of_done(h.done), h.gate)
            st.finished = h.done.finished
        elif st.wf is None:
            st.fail_unrecorded(UnknownWorkflow(start.wtype, host.user_workflows()))
        states.append(st)
    next_run = max(order) + 1 if order else 0
    return states, (max(next_run, cp.next_run) if cp is not None else next_run)


def _stop_processes(pids: list[Any]) -> None:
    """Kill ``pids`` and wait until each has ended."""
    for pid in pids:
        _e.exit(pid, "kill")
    for pid in pids:
        _e.exit_reason(pid)


def _shown(reason: Any) -> str:
    try:
        return repr(reason)[:300]
    except Exception:  # a broken __repr__
        return object.__repr__(reason)


def _failed_start_reason(reason: Any) -> Any:
    """The failure inside a supervisor's ``("shutdown", ("failed_to_start_child", id, why))``, else ``reason``."""
    if type(reason) is tuple and len(reason) == 2 and type(reason[1]) is tuple and len(reason[1]) == 3:
        return reason[1][2]
    return reason
