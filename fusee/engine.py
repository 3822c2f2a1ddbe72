"""The fusee engine: workflows as ensemble processes over a per-shard, group-committed journal.

Modules: :mod:`fusee.workflow` (definitions: workflows, signals, retries, ID
policies, the clock), :mod:`fusee.run_state` (a run's state),
:mod:`fusee.run_family` (parents and children), :mod:`fusee.ctx` (the ``Ctx``
its code gets), :mod:`fusee.run_process` (the run process), :mod:`fusee.shard`
(the shard server), :mod:`fusee.host` (what those share: journal, clock, shard
servers, registry, settings), and this one, the public face over a host:
:class:`Engine` and :class:`Run`.

Processes (each shard's on the one carrier of its journal shard,
:meth:`fusee.journal.Journal.home`, beside that shard's flusher, so a step's
round trip to the disk crosses no thread; an in-memory engine's on the
caller's ``"default"`` dispatcher):

* one **shard server** per shard (:mod:`fusee.shard`), owning that shard's
  runs.  A workflow ID lives on shard ``crc32c(id) % shards``.
* one **run process** per live run (:mod:`fusee.run_process`).

What waits for the disk: a step body with effects waits until the journal
is durable through the run's gate (``Machine.gate()``); a ``read_only`` step
does not.  ``start``, ``signal`` and ``cancel`` return, and ``result``
reveals a value, only once the record behind it is durable: the shard
server appends and answers with the LSN, and the *caller* waits for it, so
the server never blocks on the disk.

Recovery (:meth:`Engine.open` on a directory): the checkpoint, if any, then
every record after it is decoded, grouped by run into a
:class:`fusee.replay.History`, and every unfinished run's process is started
again; its code replays through the machine (recorded results come back,
bodies do not run), then goes on live.
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any, Iterable, Iterator

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT

from . import concurrency as _concurrency
from . import directory as _directory
from . import delay as _delay
from . import durations as _durations
from . import parking as _parking
from . import schedule as _schedule
from . import objects as _objects
from . import blob_refs as _blob_refs
from . import store as _store
from .errors import EngineFailed, Error, InvalidToken, NotFound, StorageError, UpdateFailed, UpdateRejected, failure_of
from . import records as _r
from .replay import parse_token as _parse_token
from .disk import DISK, Disk
from .journal import DEFAULT_SEGMENT_SIZE, Journal
from .workflow import (
    REAL_CLOCK,
    Clock,
    IdPolicy,
    Retry,
    Signal,
    Workflow,
    _signal_name,
    shard_of,
    signal,
    workflow,
)
from .ctx import Ctx, StepContext
from .run_state import _DONE, _UPDATE, RUNNING, STATUSES, _RunState, shown_status
from .shard import _VOID
from .host import RESTART_INTENSITY, Host, StepHook

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


# -- the public face -----------------------------------------------------------------------


class Run:
    """A handle on one run: ``id``, ``run`` (its number); :meth:`result` waits for its end.

    ``update_result``: the handler's result of the update a ``start(..., update=(name, value))`` applied
    (None otherwise)."""

    __slots__ = ("engine", "id", "run", "_st", "update_result")

    def __init__(self, engine: "Engine", st: _RunState) -> None:
        self.engine = engine
        self.id = st.id
        self.run = st.run
        self._st = st
        self.update_result: Any = None

    def __repr__(self) -> str:
        return f"<fusee.Run {self.id!r} run {self.run}>"

    @property
    def status(self) -> str:
        """``"running"`` (``"paused"`` while a step waits for ``resume``), ``"completed"``, ``"failed"``,
        ``"cancelled"`` or ``"terminated"``."""
        return shown_status(self._st)

    def result(self, timeout: float | None = None) -> Any:
        """The run's value once its ``Done`` is durable; raises what it ended with, ``TimeoutError`` after ``timeout``."""
        return self.engine.result_of(self, timeout)

    def read_stream(self, name: str, offset: int = 0, *, timeout: float | None = None) -> Iterator[Any]:
        """:meth:`Engine.read_stream` of this run's workflow ID."""
        return self.engine.read_stream(self.id, name, offset, timeout=timeout)

    def update(self, name: str, value: Any = None, timeout: float | None = None, *, update_id: str | None = None) -> Any:
        """:meth:`Engine.update` of this run's workflow ID."""
        return self.engine.update(self.id, name, value, timeout, update_id=update_id)


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


def _unalias(a: Any) -> None:
    """Stop alias ``a`` and drop its ``(_DONE, a)`` if one came meanwhile (a wait given up, a start
    refused after the run was watched): nothing stray is left in the caller's mailbox."""
    _e.unalias(a)
    msg = (_DONE, a)
    _e.receive(lambda m: m if m == msg else NOMATCH, timeout=0)


def _builtin_workflows() -> list[Workflow]:
    """The workflow types every engine has: ``fusee.queued``, ``fusee.concurrency``, ``fusee.delay``,
    ``fusee.schedule``, ``fusee.scheduled``, ``fusee.object``."""
    return _concurrency.workflows() + _delay.workflows() + _schedule.workflows() + _objects.workflows()


class Engine:
    """A fusee engine: open with :meth:`Engine.open`; a context manager (``shutdown`` on exit).

    The public face over a :class:`fusee.host.Host` (``host``: the journal, clock, shard servers,
    workflow registry and settings its inner modules use; not a stable API).
    """

    _http: Any = None  # the HTTP server of Engine.open(http=...), stopped by shutdown

    def __init__(self, host: Host, *, checkpoint_on_shutdown: bool = False) -> None:
        """The engine over ``host`` (built by :func:`open_engine`); a directory's :meth:`shutdown` writes
        checkpoints if ``checkpoint_on_shutdown``."""
        self.host = host
        self.shards = host.shards
        self._checkpoint_on_shutdown = checkpoint_on_shutdown
        _objects.registry(host)  # object types are defined from now on (fusee.objects)

    @property
    def http_url(self) -> str | None:
        """The URL of the HTTP API and web UI ``Engine.open(http=...)`` serves (None: not serving)."""
        return None if self._http is None else self._http.url

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` has run (or the test kit crashed the engine)."""
        return self.host.closed

    @classmethod
    def open(
        cls,
        path: str | None,
        workflows: Iterable[Workflow] = (),
        shards: int | None = None,
        *,
        segment_size: int | None = None,
        zero_fill: bool = True,
        max_live_runs: int | None = None,
        clock: Clock | None = None,
        park_after: float | None = 60.0,
        memory_budget: int | None = None,
        retention: float | None = None,
        checkpoint_on_shutdown: bool = True,
        disk: Disk = DISK,
        restart_intensity: tuple[int, float] = RESTART_INTENSITY,
        http: str | None = None,
        http_token: str | None = None,
        on_exhausted: str = "fail",
        payload_offload_bytes: int | None = _blob_refs.DEFAULT_OFFLOAD_BYTES,
    ) -> "Engine":
        """Open the engine on directory ``path`` (``None``: in memory), recovering every unfinished run.

        One engine at a time holds a directory: a second open, from this process
        or another, raises :class:`Locked` (naming the holder's pid) and changes
        nothing.  ``shards`` and ``segment_size`` default to what the directory
        recorded when it was made (4 and 16 MiB for a new one; a different
        explicit value raises :class:`WrongLayout`).  A full or failing disk
        raises :class:`StorageFull` / :class:`StorageFailed` at each call whose
        records it kept from the disk; acknowledged runs stay readable and
        writes work again once the disk does.  ``disk`` is the file layer (a
        :class:`fusee.testing.FaultyDisk` injects faults).

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

        Shard servers are supervised (``one_for_one``): one that crashes (a bug of fusee's) is
        restarted with its shard's runs rebuilt from the journal as an open does, and they resume.
        A call it crashed with raises :class:`ShardCrashed` (retry it idempotently); a result being
        waited for is answered once the run ends.  More than ``restart_intensity`` = ``(restarts,
        seconds)`` restarts within that time and the engine fails: every call raises
        :class:`EngineFailed` (shut down and open again; nothing acknowledged is lost).

        ``http`` (``"127.0.0.1:8080"``; None: none) serves the HTTP API and web UI
        (:func:`fusee.http.serve`, ``http_token``: its bearer token) until :meth:`shutdown`.

        ``on_exhausted``: what a step whose retry budget is used up does: ``"fail"`` (the workflow gets
        :class:`StepFailed`) or ``"pause"`` (a ``Paused`` record: the run shows as ``"paused"`` until
        :meth:`resume` retries the step with a fresh budget).

        ``payload_offload_bytes`` (default 256 KiB; None: never): on a directory, a payload (an input, a
        result, a signal's value, any record's payload field) whose encoding is over this many bytes is
        kept in a blob file of the shard (``blobs/<shard>/<sha256>``), durable before the record that
        refers to it, and comes back exactly; blobs no kept record refers to go at the next checkpoint.
        No effect in memory.  Blobs already in the directory are read whatever the setting.
        """
        engine = open_engine(
            path,
            workflows,
            shards,
            segment_size=segment_size,
            zero_fill=zero_fill,
            max_live_runs=max_live_runs,
            clock=clock,
            park_after=park_after,
            memory_budget=memory_budget,
            retention=retention,
            checkpoint_on_shutdown=checkpoint_on_shutdown,
            disk=disk,
            restart_intensity=restart_intensity,
            engine_type=cls,
            on_exhausted=on_exhausted,
            payload_offload_bytes=payload_offload_bytes,
        )
        if http is not None:
            from . import http as _http  # only when asked: gevent.pywsgi and the UI's files

            try:
                engine._http = _http.serve(engine, http, token=http_token)
            except BaseException:
                engine.shutdown()
                raise
        return engine

    def result_of(self, run: Run, timeout: float | None = None) -> Any:
        """The result of the run ``run`` is a handle on (:meth:`Run.result`, which calls this)."""
        return self._result_of(run._st, timeout)

    def _result_of(self, st: _RunState, timeout: float | None, watching: Any = None) -> Any:
        """``st``'s outcome once its end is durable (``watching``: an alias its shard server already sends
        ``(_DONE, alias)`` to when it ends; the caller's to unalias).  A ``(_DONE, alias)`` also comes when
        the server crashed and is back (its successor has the run: watch it again) or the engine failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if st.status == RUNNING:
                a = watching
                try:
                    if a is None:
                        a = _e.alias()
                        ended = self.host.watch(st, a)
                    else:
                        watching, ended = None, False
                    if not ended:
                        msg = (_DONE, a)
                        left = None if deadline is None else max(0.0, deadline - time.monotonic())
                        got = _e.receive(lambda m: m if m == msg else NOMATCH, timeout=left)
                        if got is TIMEOUT:
                            raise TimeoutError(f"run {st.id!r} has not ended within {timeout} s")
                finally:
                    if a is not None:
                        _unalias(a)
                if st.status == RUNNING:
                    continue  # not ended: its shard server crashed and is back (or the engine failed)
            lsn = st.done_lsn
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.host.journal.wait_durable(st.shard, lsn, timeout=left):  # StorageError: its end was voided
                raise TimeoutError(f"the end of run {st.id!r} is not durable within {timeout} s")
            if st.status != RUNNING and st.outcome is not None:
                break
            # a failed write voided its end after we looked: it runs again (fusee.shard._rollback)
        if st.status == "continued":  # follow the chain to its last run
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._result_of(self.host.call(st.shard, ("successor", st), again=True), left)
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
        update: Any = None,
        update_id: str | None = None,
    ) -> Run:
        """Start a run of ``wf`` as workflow ID ``id``; returns once its ``Start`` is durable.

        ``update=(name, value)`` (update-with-start): start the run if needed (``id_policy`` defaults to
        :attr:`IdPolicy.ATTACH` then: a run of that ID is attached to), then apply the update as
        :meth:`update` does (``update_id``: its update ID); returns once the update's outcome is durable,
        the handler's result in the handle's ``update_result``.  A rejected or failed update raises
        (:class:`UpdateRejected`, :class:`UpdateFailed`) after the run started.  Not with ``delay``/``at``
        or a type with a concurrency limit (``TypeError``).

        A taken ID does what ``id_policy`` says (default: :class:`AlreadyExists`).  ``delay`` (a
        duration) or ``at`` (unix seconds): the run starts then, through the delay run
        ``fusee.delay/<id>``.  A type with a concurrency limit starts its slot
        ``fusee.queued/<id>``; ``id_policy`` then applies to the slot's (or delay run's) ID.
        ``timeout`` (a duration): the run's deadline, recorded in its ``Start``; past it the run ends
        ``timed_out`` and its result raises :class:`TimedOut`.
        """
        w = self.host.workflow(wf)
        shard = self.host.shard_of(id)
        if update is not None and id_policy is None:
            id_policy = IdPolicy.ATTACH  # type: ignore[attr-defined]
        policy = IdPolicy.DEFAULT if id_policy is None else id_policy  # type: ignore[attr-defined]
        if type(policy) is not IdPolicy:
            raise TypeError(f"id_policy is a fusee.IdPolicy, not {policy!r}")
        if update is not None:
            if type(update) not in (tuple, list) or len(update) != 2:
                raise TypeError(f"update= is a (name, value) pair, not {update!r}")
            if delay is not None or at is not None or getattr(w, "concurrency", None) is not None:
                raise TypeError("update= starts the run now: not with delay=, at= or a type with a concurrency limit")
            deadline = None if timeout is None else self.host.clock.now() + _durations.parse(timeout)
            _r.encode_record(_r.Start(0, id, w.name, 0, 0.0, input, None))  # NotSerializable: nothing recorded
            value, st = self._update(id, update[0], update[1], None, update_id, (w, input, policy, deadline))
            run = Run(self, st)
            run.update_result = value
            return run
        if delay is not None or at is not None or getattr(w, "concurrency", None) is not None:
            return self._start_via(w, id, input, policy, delay, at, timeout)
        deadline = None if timeout is None else self.host.clock.now() + _durations.parse(timeout)
        st, lsn = self.host.call(shard, ("start", w, id, input, policy, deadline))
        self.host.wait_durable(shard, lsn)
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
            due = _delay.due_at(self.host.clock.now(), d, at)
        seconds = None if timeout is None else _durations.parse(timeout)
        order = self.host.clock.now() if due is None else due  # a delayed start queues by its due time
        wtype, via, via_input = _concurrency.start_plan(w.name, id, input, limit, key, due, seconds, order)
        shard = self.host.shard_of(via)
        st, lsn = self.host.call(shard, ("start", self.host.workflows[wtype], via, via_input, policy))
        self.host.wait_durable(shard, lsn)
        if wtype == _concurrency.SLOT_TYPE and st.status == RUNNING:
            # The request is at the coordinator (durable) before this start returns, so starts made
            # one after another are admitted in that order; the slot's own request is then a no-op.
            _concurrency.ask_for_slot(self.host, via, st.run, via_input)
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
        w = self.host.workflow(wf)
        if delay is not None or at is not None or getattr(w, "concurrency", None) is not None:
            return self.start(wf, id, input, id_policy, delay=delay, at=at, timeout=run_timeout).result(timeout)
        shard = self.host.shard_of(id)
        policy = IdPolicy.DEFAULT if id_policy is None else id_policy  # type: ignore[attr-defined]
        if type(policy) is not IdPolicy:
            raise TypeError(f"id_policy is a fusee.IdPolicy, not {policy!r}")
        deadline = None if run_timeout is None else self.host.clock.now() + _durations.parse(run_timeout)
        # one request starts the run and has its end sent here (not a start, then a watch)
        a = _e.alias()
        try:
            st, lsn, ended = self.host.call(shard, ("start_watch", a, w, id, input, policy, deadline))
        except BaseException:
            _unalias(a)
            raise
        if ended:
            _unalias(a)
            a = None
        try:
            self.host.wait_durable(shard, lsn)
        except BaseException:
            if a is not None:
                _unalias(a)
            raise
        return self._result_of(st, timeout, a)

    def run(self, id: str) -> Run:
        """A handle on the latest run of workflow ID ``id``."""
        return Run(self, self.host.call(self.host.shard_of(id), ("run_of", id)))

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
        try:  # a lookup: asked again of a restarted server (a result waits across a restart)
            return self.host.call(self.host.shard_of(id), ("run_of", id), again=True)
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
        shard = self.host.shard_of(id)
        lsn = self.host.call(shard, ("signal", id, name, value, dedup))
        self.host.wait_durable(shard, lsn)
        return lsn is not None

    def cancel(self, id: str, reason: Any = None) -> bool:
        """Cancel the run: ``Cancelled`` is raised in it at its next operation; True once durable, False if it has ended.

        A start that waits (queued behind a limit, or delayed) is withdrawn: its slot or delay run
        is cancelled instead, and the run never starts.  One whose slot or delay run is starting the
        run already: that run is cancelled (the slot or delay run passes the cancel on, and a slot
        keeps its turn until the run ends).
        """
        st = self._lookup(id)
        if st is None or st.status != RUNNING:
            via = self._via(id, st)
            if via is not None:
                id = via.id
        shard = self.host.shard_of(id)
        lsn = self.host.call(shard, ("cancel", id, reason))
        self.host.wait_durable(shard, lsn)
        return lsn is not None

    def terminate(self, id: str, reason: Any = None) -> bool:
        """End the run at once (no compensation); True once durable, False if it had ended.

        A concurrency coordinator (``fusee.concurrency/...``) is started again at once, its queue and
        holders rebuilt from its slots (:func:`fusee.concurrency.survey`): the slots waiting on it are
        not stranded, and the limit still holds.
        """
        shard = self.host.shard_of(id)
        before = self._lookup(id) if id.startswith(_concurrency.COORDINATOR_TYPE + "/") else None
        lsn = self.host.call(shard, ("terminate", id, reason))
        self.host.wait_durable(shard, lsn)
        if before is not None and before.wtype == _concurrency.COORDINATOR_TYPE:
            try:
                limit = _concurrency.Turns.of_plain(before.input).limit
            except (TypeError, ValueError):
                limit = 1
            _concurrency.ensure_coordinator(self.host, id, limit)
        return lsn is not None

    def read_stream(self, id: str, name: str, offset: int = 0, *, timeout: float | None = None) -> Iterator[Any]:
        """The chunks of stream ``name`` of the latest run of ``id`` (``ctx.stream(name)``), from ``offset`` on, in
        order, each once it is durable; blocks for new ones until the stream is closed or the run ends
        (then the iteration ends).  A reader that reconnects passes the number of chunks it has taken as
        ``offset`` and continues there: a chunk read never changes.  ``timeout`` (seconds, None: no
        limit): ``TimeoutError`` when no chunk comes for that long.  :class:`NotFound`, ``TypeError`` and
        ``ValueError`` (bad arguments) are raised here, at the call, not at the first chunk."""
        from . import stream as _stream

        return _stream.read(self.host, id, name, offset, timeout)

    def query(self, id: str, name: str, arg: Any = None) -> Any:
        """Ask the run's ``on_query(name, fn)`` handler: ``fn(arg)``."""
        return self.host.call(self.host.shard_of(id), ("query", id, name, arg))

    # -- updates, async completions, resume (fusee.ctx: on_update, step_async; Engine.open(on_exhausted=))

    def update(
        self, id: str, name: str, value: Any = None, timeout: float | None = None, *, update_id: str | None = None
    ) -> Any:
        """Apply update ``name`` with ``value`` to the running run ``id`` and return its handler's result, once
        its ``UpdateDone`` is durable.

        The run's validator runs first: a refusal (or no handler of that name) raises
        :class:`UpdateRejected` with nothing recorded; a handler that raises gives :class:`UpdateFailed`
        (the run goes on).  ``update_id`` (default: a fresh one): an update sent again with the same ID
        (after a timeout, a crash) is applied once and answers the same outcome again.  A run that has
        ended (or ends before the update is recorded) raises :class:`NotRunning`; a value the codec
        refuses raises :class:`NotSerializable` here.  ``timeout`` (seconds, None: no limit):
        ``TimeoutError`` (the update may still be applied: send it again with its ``update_id``)."""
        value, _ = self._update(id, name, value, timeout, update_id, None)
        return value

    def _update(self, id: str, name: str, value: Any, timeout: float | None, update_id: Any, start: Any) -> tuple[Any, _RunState]:
        """:meth:`update` (``start``: ``(wf, input, policy, deadline)``: start the run first, in the same request to
        its shard server); the handler's result and the run's state."""
        if type(name) is not str or not name:
            raise TypeError(f"an update's name is a non-empty str, not {name!r}")
        if update_id is None:
            update_id = f"fusee.update/{os.urandom(12).hex()}"
        elif type(update_id) is not str or not update_id:
            raise TypeError(f"update_id is None or a non-empty str, not {update_id!r}")
        shard = self.host.shard_of(id)
        _r.encode_record(_r.Update(0, update_id, name, value))  # NotSerializable: raised here, nothing recorded
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            a = _e.alias()
            try:
                reply = self.host.call(shard, ("update", id, name, value, update_id, a, start))
                start = None  # started (or attached): asking again only looks the update up, or queues it again
                if reply[0] == "done":
                    _, status, payload, lsn, st = reply
                    self.host.wait_durable(shard, lsn)
                    return self._update_outcome(id, name, update_id, status, payload), st
                _, start_lsn, st = reply
                self.host.wait_durable(shard, start_lsn)
                left = None if deadline is None else max(0.0, deadline - time.monotonic())

                def match(m: Any) -> Any:
                    if type(m) is tuple and len(m) >= 2 and m[1] == a and (m[0] == _UPDATE or m[0] == _DONE):
                        return m
                    return NOMATCH

                got = _e.receive(match, timeout=left)
                if got is TIMEOUT:
                    raise TimeoutError(f"update {name!r} of run {id!r} has not been answered within {timeout} s")
                if got[0] == _DONE:
                    continue  # the run ended, or its shard server restarted: ask again
                _, _, status, payload, lsn = got
                if status == "rejected":
                    raise UpdateRejected(id, name, update_id, payload)
                self.host.wait_durable(shard, lsn)
                return self._update_outcome(id, name, update_id, status, payload), st
            finally:
                _unalias(a)
                _e.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[0] == _UPDATE and m[1] == a else NOMATCH, timeout=0)

    @staticmethod
    def _update_outcome(id: str, name: str, update_id: str, status: str, payload: Any) -> Any:
        if status == "ok":
            return payload
        raise UpdateFailed(id, name, update_id, payload)

    def complete(self, token: str, value: Any = None) -> None:
        """Settle the async step of ``token`` (``ctx.step_async``) with ``value``: it returns ``value`` in the run.
        Returns once the ``Settled`` record is durable.  Raises :class:`InvalidToken` (not a token of an
        async step of this engine), :class:`AlreadySettled` (settled before: nothing changes),
        :class:`NotRunning` (the run has ended), :class:`NotSerializable`; nothing recorded then."""
        self._settle(token, "ok", value)

    def fail(self, token: str, error: Any = None) -> None:
        """Settle the async step of ``token`` as failed: the run's ``step_async`` raises :class:`StepFailed` with
        ``error`` as its failure (an exception becomes ``{"type", "message"}``).  As :meth:`complete` otherwise."""
        if isinstance(error, BaseException):
            error = failure_of(error)
        elif error is None:
            error = {"type": "Failed", "message": "failed by engine.fail"}
        self._settle(token, "error", error)

    def _settle(self, token: str, status: str, payload: Any) -> None:
        parts = _parse_token(token)
        if parts is None:
            raise InvalidToken(token, "malformed")
        id, run, seq, secret = parts
        _r.encode_record(_r.Settled(run, seq, status, payload))  # NotSerializable: raised here, nothing recorded
        shard = self.host.shard_of(id)
        lsn = self.host.call(shard, ("settle", id, run, seq, secret, status, payload, token))
        self.host.wait_durable(shard, lsn)

    def resume(self, id: str) -> None:
        """Retry the paused step of run ``id`` (``Engine.open(on_exhausted="pause")``) with a fresh retry budget;
        returns once the ``Resumed`` record is durable.  :class:`NotPaused` if the run is not paused (nothing
        recorded)."""
        shard = self.host.shard_of(id)
        lsn = self.host.call(shard, ("resume_paused", id))
        self.host.wait_durable(shard, lsn)

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
        return self.host.call(self.host.shard_of(id), ("describe", id))

    def _describe_via(self, id: str, via: _RunState) -> dict[str, Any]:
        d = self.host.call(self.host.shard_of(via.id), ("describe", via.id))
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
            "shard": self.host.shard_of(id),
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
            out.extend(self.host.call(shard, ("list", None)))
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

    # -- virtual objects (fusee.objects)

    def object_type(self, name: str) -> "_objects.ObjectType":
        """Object type ``name`` of this engine (made now if it has none), to define handlers on:
        ``engine.object_type("cart").exclusive("add", add).shared("total", total)``, each ``fn(ctx, arg)``
        with ``ctx`` a :class:`fusee.objects.ObjectCtx`.  Exclusive handlers of one key take turns and
        commit ``ctx.state`` with their result; shared ones run concurrently and only read it
        (:mod:`fusee.objects`).  Define them right after the open: a key's run recovered meanwhile waits."""
        return _objects.object_type(self, name)

    def object(self, type: Any, key: str) -> "_objects.ObjectRef":
        """Object ``type`` (an object type or its name) / ``key``: ``call(handler, arg, call_id=None,
        timeout=None)``, ``state()``, ``set(key, value, version=None)``, ``clear(key=None, version=None)``
        (:class:`fusee.objects.ObjectRef`).  :class:`UnknownObjectType` for a type this engine does not have."""
        return _objects.object_ref(self, type, key)

    # -- schedules (fusee.schedule)

    def schedule(
        self,
        name: str,
        workflow: Any,
        *,
        cron: str | None = None,
        every: Any = None,
        input: Any = None,
        overlap: str = "skip",
        timezone: Any = None,
        catchup_window: Any = _schedule.DEFAULT_CATCHUP,
    ) -> "_schedule.Schedule":
        """Start schedule ``name``: a run of ``workflow`` with ``input`` at each time ``cron`` (5 fields, in UTC
        or ``timezone``) or ``every`` (a duration, from the unix epoch) gives, as ``<name>@<time>``; returns
        its handle (pause, resume, trigger, delete, describe) once durable.  ``overlap``: ``"skip"``,
        ``"buffer_one"`` or ``"allow"``; missed times within ``catchup_window`` are caught up
        (:mod:`fusee.schedule`).  Bad input raises (``UnknownWorkflow``, ``ValueError``,
        :class:`fusee.cron.CronError`, ``AlreadyExists`` for a running schedule of that name) with
        nothing recorded."""
        return _schedule.create(
            self, name, workflow, cron=cron, every=every, input=input, overlap=overlap,
            timezone=timezone, catchup_window=catchup_window,
        )

    def schedule_handle(self, name: str) -> "_schedule.Schedule":
        """A handle on the running schedule ``name``; :class:`NotFound` if there is none."""
        return _schedule.handle(self, name)

    def schedules(self) -> list[dict[str, Any]]:
        """Every running schedule, by name: its spec, ``state``, ``next`` fire time, ``running`` and ``recent`` runs."""
        return _schedule.listing(self)

    def metrics(self) -> dict[str, Any]:
        """Runs by status, the journal's flush statistics (records per flush, flush latency) and storage
        failures (``storage_failures``: flushes a full or failing disk voided)."""
        runs = {s: 0 for s in STATUSES}
        for shard in range(self.shards):
            for k, v in self.host.call(shard, ("counts",)).items():
                runs[k] = runs.get(k, 0) + v
        j = self.host.journal.metrics()
        return {
            "runs": runs,
            "records": j["records"],
            "flushes": j["flushes"],
            "records_per_flush": j["records_per_flush"],
            "flush_seconds_mean": j["flush_seconds_mean"],
            "flush_seconds_max": j["flush_seconds_max"],
            "inline_flushes": j["inline_flushes"],
            "storage_failures": j["storage_failures"],  # flushes a full or failing disk voided
            "storage_error": j["storage_error"],  # the last one's text while a shard still recovers from it
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
            for k, v in self.host.call(shard, ("parking_stats",)).items():
                out[keys[k]] += v
        out["recovered_log_records"] = self.host.recovery["log_records"]
        out["recovered_checkpoint_records"] = self.host.recovery["checkpoint_records"]
        return out

    def park_now(self, force: bool = True) -> None:
        """Run every shard's parking decision now (tests, benchmarks, the test kit's virtual time);
        ``force``: park every paused run."""
        for shard in range(self.shards):
            self.host.call(shard, ("park_now", force))

    _park_now = park_now

    def next_wakeup(self) -> float | None:
        """The engine time of the next parking event on any shard: a parked run due to wake, a waiting
        run due to be parked (None: none).  The test kit's virtual time skips to it."""
        due = [t for t in (self.host.call(shard, ("next_wakeup",)) for shard in range(self.shards)) if t is not None]
        return min(due) if due else None

    def _checkpoint_all(self) -> list[int]:
        """Write every shard's checkpoint (runs stopped) once the journal is durable through it; its LSNs."""
        lsns = []
        for shard in range(self.shards):
            cp = self.host.call(shard, ("checkpoint",))
            if cp.lsn:
                self.host.journal.wait_durable(shard, cp.lsn)
            _store.write(
                os.path.join(self.host.journal.path, f"shard-{shard}"), cp, self.host.journal.disk, self.host.journal.blob_store(shard)
            )
            lsns.append(cp.lsn)
        return lsns

    def shutdown(self) -> None:
        """Stop every run process (they resume at the next open), flush the journal, close.  Idempotent.

        On a directory, then write each shard's checkpoint (two copies,
        :mod:`fusee.store`) and delete the log segments it covers: the next
        open replays nothing from the log.
        """
        if self._http is not None:
            self._http, server = None, self._http
            server.stop()
        if self.closed:
            return
        lsns: list[int] = []
        try:
            try:
                if self.host.failed is None:  # a failed engine's runs are stopped already: close its journal
                    for shard in range(self.shards):
                        self.host.call(shard, ("stop_runs",))
                if self._checkpoint_on_shutdown and self.host.journal.path is not None:
                    try:
                        lsns = self._checkpoint_all()
                    except (OSError, StorageError) as exc:
                        # nothing is lost: the log holds every record, the next open replays it
                        warnings.warn(f"fusee: no checkpoint written ({exc}); the next open replays the log", RuntimeWarning, 2)
                        lsns = []
            except EngineFailed:
                lsns = []  # its servers are gone: no checkpoint, the next open replays the log
        finally:
            self.host.stop_servers()
            self.host.closed = True
            self.host.journal.close(keep_lock=True)
        try:
            for shard, lsn in enumerate(lsns):
                self.host.journal.delete_before(shard, lsn)
        except OSError as exc:  # the segments left are skipped at the next open (the checkpoint holds them)
            warnings.warn(f"fusee: old segments not deleted ({exc})", RuntimeWarning, 2)
        finally:
            self.host.journal.unlock()

    close = shutdown

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def open_engine(
    path: str | None,
    workflows: Iterable[Workflow] = (),
    shards: int | None = None,
    *,
    segment_size: int | None = None,
    zero_fill: bool = True,
    max_live_runs: int | None = None,
    clock: Clock | None = None,
    park_after: float | None = 60.0,
    memory_budget: int | None = None,
    retention: float | None = None,
    checkpoint_on_shutdown: bool = True,
    disk: Disk = DISK,
    step_hook: StepHook | None = None,
    restart_intensity: tuple[int, float] = RESTART_INTENSITY,
    engine_type: "type[Engine] | None" = None,
    on_exhausted: str = "fail",
    payload_offload_bytes: int | None = _blob_refs.DEFAULT_OFFLOAD_BYTES,
) -> "Engine":
    """:meth:`Engine.open` (its options and errors), plus what the test kit passes: ``step_hook``
    (its step mocks, :data:`fusee.host.StepHook`, in place before the first recovered run starts).
    ``engine_type``: the :class:`Engine` subclass to make (default: :class:`Engine`)."""
    if engine_type is None:
        engine_type = Engine
    payload_offload_bytes = _blob_refs.check_threshold(payload_offload_bytes)
    if on_exhausted not in ("fail", "pause"):
        raise ValueError(f'on_exhausted is "fail" or "pause", not {on_exhausted!r}')
    if max_live_runs is not None and (type(max_live_runs) is not int or max_live_runs < 1):
        raise ValueError(f"max_live_runs is None or an int > 0, not {max_live_runs!r}")
    for name, v in (("park_after", park_after), ("retention", retention)):
        if v is not None and (type(v) not in (int, float) or not v >= 0):
            raise ValueError(f"{name} is None or a number of seconds >= 0, not {v!r}")
    if memory_budget is not None and (type(memory_budget) is not int or memory_budget < 0):
        raise ValueError(f"memory_budget is None or an int >= 0 (bytes), not {memory_budget!r}")
    if (
        type(restart_intensity) is not tuple
        or len(restart_intensity) != 2
        or type(restart_intensity[0]) is not int
        or restart_intensity[0] < 0
        or type(restart_intensity[1]) not in (int, float)
        or not restart_intensity[1] > 0
    ):
        raise ValueError(f"restart_intensity is (restarts >= 0, seconds > 0), not {restart_intensity!r}")
    if shards is not None and (type(shards) is not int or shards < 1):
        raise ValueError(f"shards is None or an int > 0, not {shards!r}")
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
    lock = layout = None
    checkpoints: list[Any] = []
    if path is None:
        shards = 4 if shards is None else shards
    else:
        lock = _directory.lock(os.fspath(path))
        try:
            layout = _directory.open_layout(path, shards, segment_size, 4, DEFAULT_SEGMENT_SIZE)
            shards = layout[0].shards
            for shard in range(shards):
                d = os.path.join(path, f"shard-{shard}")
                checkpoints.append(_store.load(d, shard) if os.path.isdir(d) else None)
        except BaseException:
            lock.release()
            raise
    servers: list[Any] = []  # the host's shard servers, filled as they start: a void (a failed write) goes to its shard's
    try:
        journal = Journal.open(
            path,
            shards,
            segment_size=segment_size,
            zero_fill=zero_fill,
            after=[cp.lsn if cp else 0 for cp in checkpoints],
            disk=disk,
            lock=lock,
            layout=layout,
            on_void=lambda shard, lo, hi, err: _e.send(servers[shard], (_VOID, lo, hi, err)),
            offload=payload_offload_bytes,
        )
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    settings = _parking.Settings(
        None if park_after is None else float(park_after),
        memory_budget,
        None if retention is None else float(retention),
    )
    try:
        host = Host.__new__(Host)
        # read by fusee.ctx when a step's retry budget is used up: set before the host resumes any run
        host.on_exhausted = on_exhausted
        # read by fusee.objects and fusee.ctx (which import neither this module nor each other): the engine
        # face a run's object calls go through, and the maker of ctx.object's references
        host.facade = Engine
        host.object_ref = _objects.workflow_ref
        host.__init__(
            journal,
            registry,
            shards,
            clock=REAL_CLOCK if clock is None else clock,
            parking=settings,
            max_live_runs=max_live_runs,
            checkpoints=checkpoints,
            step_hook=step_hook,
            servers=servers,
            restart_intensity=restart_intensity,
        )
    except BaseException:
        journal.close()
        raise
    return engine_type(host, checkpoint_on_shutdown=bool(checkpoint_on_shutdown))
