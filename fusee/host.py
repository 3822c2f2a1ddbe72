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
from ensemble import gen_server as _gs

from . import parking as _parking
from . import records as r
from . import store as _store
from .errors import Corrupt, Error, UnknownWorkflow
from .replay import History, Machine
from .run_state import _RunState
from .shard import _ShardServer
from .workflow import REAL_CLOCK, Clock, Workflow, shard_of

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["Host", "StepHook", "recover"]

#: ``(workflow type, step name) -> body``: a step whose key is here runs that body instead of its own.
StepHook = Mapping[tuple[str, str], Callable[..., Any]]


class Host:
    """An open engine's parts, for its inner modules.  Public attributes (read-only by contract):
    ``journal``, ``shards``, ``clock``, ``parking`` (:class:`fusee.parking.Settings`),
    ``max_live_runs``, ``workflows`` (name -> :class:`Workflow`), ``recovery`` (records the open
    replayed: ``log_records``, ``checkpoint_records``), ``servers`` (the shard servers' pids) and
    ``closed``.

    ``checkpoints``: each shard's :class:`fusee.store.Checkpoint` (or None), read at open.
    ``step_hook``: the test kit's mocks (:data:`StepHook`).  ``servers``: an empty list to fill with
    the shard servers' pids (default: a new one).

    The constructor recovers every shard and starts its server (and then the recovered runs); if
    that fails, the servers started are stopped and the error raised (the journal is the caller's
    to close).
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
    ) -> None:
        self.journal = journal
        self.workflows = workflows
        self.shards = shards
        self.clock = clock
        self.parking = parking
        self.max_live_runs = max_live_runs
        self.recovery = {"log_records": 0, "checkpoint_records": 0}
        # the shard servers' pids, filled as they start: the opener may pass the list its journal's
        # callbacks (a voided write goes to its shard's server) already hold
        self.servers: list[Any] = [] if servers is None else servers
        self.closed = False
        self._step_hook: StepHook = {} if step_hook is None else step_hook
        try:
            for shard in range(shards):
                cp = checkpoints[shard] if checkpoints else None
                recovered, next_run = recover(self, shard, cp)
                server = _ShardServer(self, shard, recovered, next_run)
                self.servers.append(_gs.start(server, dispatcher=server.home))
            for pid in self.servers:
                self.call_server(pid, ("resume",))
        except BaseException:
            for pid in self.servers:
                _gs.stop(pid)
            raise

    # -- the shard servers

    def call(self, shard: int, request: tuple) -> Any:
        """Ask shard ``shard``'s server (:data:`fusee.shard.CALLS`); its answer, or the error it refused
        with raised here.  Raises :class:`Error` once the engine is shut down."""
        if self.closed:
            raise Error("the engine is shut down")
        return self.call_server(self.servers[shard], request)

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
        if lsn:
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


def recover(host: Host, shard: int, cp: Any = None) -> tuple[list[_RunState], int]:
    """Shard ``shard``'s runs from checkpoint ``cp`` (or None) and the log after it, and its next run
    number.  A finished run past retention is forgotten; an unfinished one of an unknown type fails
    in memory.  Raises :class:`Corrupt` (file, offset) for a record that does not decode or fit."""
    j = host.journal
    histories: dict[int, History] = {}
    order: list[int] = []
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
