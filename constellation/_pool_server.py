"""The worker pool's processes: the workers and the pool server (a gen_server owning a pure runtime).

The pool server holds a pure :mod:`constellation.runtime` value -- the core
stage plus the registry that routes each worker's subscription to its pid,
exactly as a stage process does -- (and, for a source-fed pool, the pure
:mod:`constellation._source_core` reservation) and carries out the deliveries
they answer: a batch of :class:`~constellation.runtime.Events` goes to its
worker as ``(_BATCH, events)``, and
:class:`~constellation.runtime.Cancelled` as it is (the worker's cue to quit
once its earlier batches are done).  Each handled batch is reported back as
a completion, ``(subscription, count)``: the very ask that renews the demand
it used.  A completion is a message, except while the pool, on the same
carrier as its workers, collects them (its board is open, see
:class:`_Board` and ``_PoolServer._completions``): then the worker adds its
count to its subscription's ``done`` cell, which the pool reads before it
renews anything -- the same ask, without a message to send and to take out
of the mailbox -- and waits for its next batch in its subscription's
``cell``, where the pool leaves it instead of sending it.

A :func:`~constellation.worker_pool.call` pushes its event wrapped in a
:class:`_Call` through the same runtime, buffer and demand as any pushed event.
While such calls wait undelivered (``_State.undispatched``), the pool scans the
batches it sends for them, notes which worker holds each, and sends those
batches as ``(_MIXED, events)``; the worker handles the call's event in order
with the others and sends ``(_REPLY, call_id, ok, value)`` to the pool, which
answers the caller.  When a worker dies, the calls it held and had not answered
fail with :class:`~constellation.worker_pool.WorkerCrashed` (its reply, if any,
came before its ``DOWN``).  With no call waiting, batches take the usual path
untouched.
:mod:`constellation.worker_pool` is the public face.
"""

from __future__ import annotations

import itertools
import secrets
import weakref
from typing import Any, Callable

import ensemble as e
from ensemble import gen_server
from ensemble.dispatcher import DEFAULT
from ensemble.dispatcher import yield_ as _yield
from ensemble.dist import wire_types

from . import _notifier
from . import _source_core as sc
from . import core, runtime
from . import source as _source
from ._pool_types import (
    AlreadyStopping,
    BatchCompleted,
    BatchStarted,
    Config,
    HandlerFailed,
    PoolError,
    PoolStopped,
    PoolStopping,
    Snapshot,
    SourceManaged,
    StageProtocol,
    WorkerCrashed,
    WorkerId,
    WorkerReplaced,
    WorkerStarted,
    WorkerStopped,
)
from .core import StageError
from .runtime import Cancelled, Events

PUSH = "$constellation.pool.push"
CALL = "$constellation.pool.call"
SNAPSHOT = ("$constellation.pool.snapshot",)
STOP = ("$constellation.pool.stop",)
_OK = ("ok", None)

# --------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------


class _Tag:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<worker_pool {self.name}>"


_BATCH = _Tag("batch")  # pool -> worker: (_BATCH, events); or runtime.Cancelled (quit)
_READY = _Tag("ready")  # worker -> pool: (_READY, n)
_MIXED = _Tag("mixed")  # pool -> worker: (_MIXED, events), a batch holding at least one _Call
_REPLY = _Tag("reply")  # worker -> pool: (_REPLY, call_id, ok, value), the outcome of a call's event
_COLLECT = _Tag("collect")  # pool -> itself: read the workers' done cells (the board stayed open)
#: In a worker's cell: it waits there for its next batch (see _Board).  The empty tuple, so that
#: the worker tells a batch (never empty) from this and from None (no batch will come) by truth.
_WAITING = ()


class _Call:
    """A :func:`~constellation.worker_pool.call`'s event in the pool's buffer: ``id`` is the pool's, per call."""

    __slots__ = ("id", "event")

    def __init__(self, id: int, event: Any) -> None:
        self.id = id
        self.event = event

    def __repr__(self) -> str:
        return f"<worker_pool call {self.id}: {self.event!r}>"
# worker -> pool, a completion: (subscription, count), a _Sub first


class _Sub:
    """Worker ``n``'s subscription (and participant) id in the pool's runtime; compared by identity.

    Its type tells a completion ``(sub, count)`` from any other message;
    ``pid`` is the worker's (the runtime's handle for it), set once spawned;
    ``done`` counts the events the worker completed while the pool collected
    (see :class:`_Board`), not renewed yet.  ``key`` is unique across OS
    processes: a worker on a dispatcher of OS processes gets a stand-in with
    the same key, which comes back to the pool as the very subscription
    (:func:`_sub_from_wire`).

    On the pool's own carrier a batch may also go through ``cell`` rather
    than a message (see :class:`_Board`): the worker sets it to ``_WAITING``
    while it yields for its next batch, the pool replaces that with the batch
    (or with None when it sends the worker a message instead), and
    ``mailed`` counts the pool's messages to the worker not taken yet (the
    worker waits on its cell only when there are none, so a batch in the cell
    never passes an earlier message).  These cells are only ever touched on
    the pool's carrier: the pool and the worker never run at the same time.
    """

    __slots__ = ("n", "pid", "done", "cell", "mailed", "key", "__weakref__")

    def __init__(self, n: int, key: tuple[int, int] | None = None) -> None:
        self.n = n
        self.pid: Any = None
        self.done = 0
        self.cell: Any = None
        self.mailed = 0
        self.key = key if key is not None else (_ORIGIN, next(_SERIALS))
        _SUBS[self.key] = self

    def __repr__(self) -> str:
        return f"pool-worker-{self.n}"


class _Board:
    """Whether the pool is collecting the completions of its workers, all on its own carrier.

    Only the pool sets ``open``.  It is open only while the pool will read
    every worker's ``done`` cell before it renews anything, without a
    message from the workers: while the pool yields to them in a round, and
    from the moment it leaves its rounds with batches out (a call or another
    message waits) until it takes the ``_COLLECT`` it then sends itself,
    behind those messages.  A worker (on the same carrier, so never running
    at the same time as the pool) that sees it open adds its completion to
    its ``done`` cell; one that sees it closed sends its completion.

    A worker that saw it open and has no message of the pool waiting
    (``sub.mailed == 0``) then yields, its cell set to ``_WAITING``: its turn
    comes back after the pool's, which leaves the worker's next batch in the
    cell rather than sending it (:func:`_deliver`); the worker takes it from
    there, or goes back to its mailbox if no batch came.  A batch costs one
    yield of the worker (and a fifth of the pool's, for four workers) instead
    of a send, a wake, a park and a receive.  ``local`` is whether the
    workers share the pool's carrier (fixed at start; False for a board that
    crossed the wire): only then does the worker count ``mailed`` down.
    """

    __slots__ = ("open", "local")

    def __init__(self, local: bool = False) -> None:
        self.open = False
        self.local = local


#: This OS process's subscriptions, told apart from any other's by a random origin.
_ORIGIN = secrets.randbits(62)
_SERIALS = itertools.count(1)
_SUBS: "weakref.WeakValueDictionary[tuple[int, int], _Sub]" = weakref.WeakValueDictionary()


def _sub_from_wire(n: int, origin: int, serial: int) -> _Sub:
    """A subscription that crossed the wire: the very one where it was made, else one stand-in
    per key (refuses anything but three ints, so a peer's other fields arrive as WireNamed)."""
    if type(n) is not int or type(origin) is not int or type(serial) is not int:
        raise TypeError("a subscription is three ints")
    sub = _SUBS.get((origin, serial))
    return sub if sub is not None else _Sub(n, (origin, serial))


# What crosses to workers on a dispatcher of OS processes (and back), by name.
wire_types.register_constant(_BATCH, "constellation.worker_pool:batch")
wire_types.register_constant(_READY, "constellation.worker_pool:ready")
wire_types.register_constant(_MIXED, "constellation.worker_pool:mixed")
wire_types.register_constant(_REPLY, "constellation.worker_pool:reply")
wire_types.register(_Call, "constellation.worker_pool:Call", to_fields=lambda c: (c.id, c.event))
wire_types.register(_Sub, "constellation.worker_pool:Sub", to_fields=lambda s: (s.n, *s.key),
                    from_fields=_sub_from_wire)
wire_types.register(_Board, "constellation.worker_pool:Board", to_fields=lambda b: (), from_fields=_Board)
wire_types.register(Cancelled, "constellation:Cancelled")
for _cls in (WorkerId, BatchStarted, BatchCompleted):
    wire_types.register(_cls, f"constellation:{_cls.__name__}")


def _subscription(n: int) -> _Sub:
    """Worker ``n``'s subscription (and participant) id in the pool's runtime."""
    return _Sub(n)


def _worker(
    pool: Any,
    n: int,
    sub: _Sub,
    board: _Board,
    slot: int,
    initial_state: Callable[[int], Any],
    handle_batch: Any,
    handle_event: Any,
    notifier: Any,
    handle_call: Any = None,
) -> None:
    """A worker's life: make its state, then handle batches until told to quit or the pool is gone."""
    owner = e.monitor(pool)
    state = initial_state(slot)
    send = e.send
    receive = e.receive
    send(pool, (_READY, n))
    wid = WorkerId(n)
    notify = _notifier.notify
    local = board.local
    plain = notifier is None and handle_event is not None  # the commonest worker, served by a shorter path
    while True:
        msg = receive()
        if type(msg) is tuple and msg and (msg[0] is _BATCH or msg[0] is _MIXED):
            if local:
                sub.mailed -= 1
            events = msg[1]
            mixed = msg[0] is _MIXED
            while True:  # this batch, then the ones the pool leaves in the cell (see _Board)
                if plain and not mixed:
                    for event in events:
                        state = handle_event(state, event)
                else:
                    count = len(events)
                    if notifier is not None:
                        notify(notifier, BatchStarted(wid, count))
                    if mixed:
                        state = _handle_mixed(pool, state, events, handle_batch, handle_event, handle_call)
                        mixed = False
                    elif handle_event is not None:
                        for event in events:
                            state = handle_event(state, event)
                    else:
                        state = handle_batch(state, events)
                    if notifier is not None:
                        notify(notifier, BatchCompleted(wid, count))
                if not board.open:
                    send(pool, (sub, len(events)))
                    break
                sub.done += len(events)  # the pool is collecting: it reads the cell before it renews
                if sub.mailed:  # a message of the pool waits in the mailbox: it comes first
                    break
                sub.cell = _WAITING
                _yield()  # the pool's turn comes first: it may leave the next batch in the cell
                events = sub.cell
                sub.cell = None
                if not events:  # _WAITING (no batch came) or None (a message came instead)
                    break
        elif type(msg) is Cancelled:
            return
        elif type(msg) is tuple and msg and msg[0] == "DOWN" and msg[1] is owner:
            return


def _handle_mixed(pool: Any, state: Any, events: tuple, handle_batch: Any, handle_event: Any,
                  handle_call: Any) -> Any:
    """Handle a batch holding calls, in order; answer each call to the pool; the new state.

    A call's event gets ``handle_call`` (its reply is the answer), else the
    pool's handler (``handle_event``, or ``handle_batch`` on a batch of one)
    and the answer is the state it returned.  For ``handle_batch``, the plain
    events between calls go as batches of their own.  A handler that raises on
    a call's event answers the failure, then the exception goes on (the worker
    dies, as for any event).
    """
    send = e.send
    run: list = []
    for ev in events:
        if type(ev) is _Call:
            if run:
                state = handle_batch(state, tuple(run))
                run = []
            try:
                if handle_call is not None:
                    reply, state = handle_call(state, ev.event)
                elif handle_event is not None:
                    state = reply = handle_event(state, ev.event)
                else:
                    state = reply = handle_batch(state, (ev.event,))
            except Exception as err:
                send(pool, (_REPLY, ev.id, False, err))
                raise
            send(pool, (_REPLY, ev.id, True, reply))
        elif handle_event is not None:
            state = handle_event(state, ev)
        else:
            run.append(ev)
    if run:
        state = handle_batch(state, tuple(run))
    return state


class _Worker:
    __slots__ = ("id", "slot", "pid", "mref", "sub")

    def __init__(self, id: WorkerId, slot: int, pid: Any, mref: Any, sub: _Sub) -> None:
        self.id = id
        self.slot = slot
        self.pid = pid
        self.mref = mref
        self.sub = sub


class _WorkerStartFailed(Exception):
    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------
# The pool process
# --------------------------------------------------------------------------

_REPORTER_STOPPED = "telemetry notifier stopped"
_SOURCE_STOPPED = "asynchronous source callback stopped"


class _State:
    """The pool process's state: the pure runtime and reservation, plus the process bookkeeping."""

    __slots__ = (
        "rt",
        "reservation",
        "source_id",
        "workers",
        "by_mref",
        "order",
        "next_id",
        "stopping",
        "shutdown_started",
        "waiters",
        "reporter",
        "reporter_mref",
        "notifier_source",
        "source_mref",
        "me",
        "calls",
        "undispatched",
        "call_ids",
    )

    def __init__(self) -> None:
        self.rt: runtime.Runtime | None = None  # a worker's subscription and participant id are its ``sub``
        self.reservation: sc.Reservation | None = None
        self.source_id: Any = None
        self.workers: dict[int, _Worker] = {}
        self.by_mref: dict[Any, _Worker] = {}
        self.order: list[int] = []  # worker numbers, start order, replacements last
        self.next_id = 1
        self.stopping = False
        self.shutdown_started = False
        self.waiters: list = []
        self.reporter: Any = None
        self.reporter_mref: Any = None
        self.notifier_source: Any = None
        self.source_mref: Any = None
        self.me: Any = None
        self.calls: dict[int, list] = {}  # call id -> [caller's from_, pid of the worker holding it, or None]
        self.undispatched = 0  # calls in the buffer, not yet sent to a worker
        self.call_ids = itertools.count(1)


#: How many rounds of yielding to the workers one completion message may lead to (see ``_completions``).
_ROUNDS = 64


class _PoolServer(gen_server.GenServer):
    def __init__(self, config: Config, notify_source: Any, source_id: Any) -> None:
        self.config = config
        self.notify_source = notify_source
        self.source_id = source_id
        self._rounds = 0  # set by init, once the pool knows its carrier
        self._board = _Board()
        self._collect_sent = False  # whether a _COLLECT is in the pool's mailbox
        seen = self._seen = [False]  # whether _take passed over another message since the last reset

        def take(m: Any) -> Any:
            """A matcher taking a worker's completion message (and noting any other message)."""
            if type(m) is tuple and len(m) == 2 and type(m[0]) is _Sub:
                return m
            seen[0] = True
            return e.NOMATCH

        self._take = take

    # -- init ---------------------------------------------------------------------------

    def init(self) -> Any:
        cfg = self.config
        st = _State()
        st.me = e.self()
        # Workers on another carrier than the pool's (another dispatcher, or the pool itself off
        # "default", whose one carrier is the importing thread's hub) run in parallel with it:
        # yielding to them is no use, and they report every completion as a message.
        if cfg.dispatcher == DEFAULT and e.process_info(st.me, "dispatcher") == DEFAULT:
            self._rounds = _ROUNDS
            self._board.local = True
        if cfg.reporter is not None:
            st.reporter, st.reporter_mref = _notifier.start(cfg.reporter, _notifier.ISOLATE)
        if self.notify_source is not None:
            st.notifier_source, st.source_mref = _notifier.start(self.notify_source, _notifier.PROPAGATE)
            st.reservation = sc.new()
            st.source_id = self.source_id
        st.rt = runtime.new(None, cfg.buffer_capacity)
        try:
            for slot in range(cfg.size):
                w = self._start_worker(st, slot)
                self._report(st, WorkerStarted(w.id, slot))
        except _WorkerStartFailed as err:
            for w in list(st.workers.values()):
                e.exit(w.pid, "kill")
            return ("stop", ("worker_start_failed", err.reason))
        self._reconcile(st)
        return ("ok", st)

    def _report(self, st: _State, event: Any) -> None:
        if st.reporter is not None:
            _notifier.notify(st.reporter, event)

    def _start_worker(self, st: _State, slot: int) -> _Worker:
        cfg = self.config
        n = st.next_id
        st.next_id = n + 1
        sub = _subscription(n)
        pid, mref = e.spawn_monitor(
            _worker,
            st.me,
            n,
            sub,
            self._board,
            slot,
            cfg.initial_state,
            cfg.handle_batch,
            cfg.handle_event,
            st.reporter,
            cfg.handle_call,
            dispatcher=cfg.dispatcher,
        )
        sub.pid = pid

        def started(m: Any) -> Any:
            if type(m) is tuple:
                if len(m) == 2 and m[0] is _READY and m[1] == n:
                    return m
                if len(m) == 5 and m[1] is mref and m[0] == "DOWN":
                    return m
            return e.NOMATCH

        got = e.receive(started, timeout=cfg.timeout)
        if got is e.TIMEOUT:
            e.demonitor(mref, flush=True)
            e.exit(pid, "kill")
            raise _WorkerStartFailed("timeout")
        if len(got) == 5:
            raise _WorkerStartFailed(got[4])
        w = _Worker(WorkerId(n), slot, pid, mref, sub)
        st.workers[n] = w
        st.by_mref[mref] = w
        st.order.append(n)
        rt, _ = runtime.subscribe(st.rt, sub, sub, 0, pid)
        st.rt, out = runtime.ask(rt, sub, cfg.prefetch)
        _execute(out, st)
        return w

    # -- effects ------------------------------------------------------------------------

    def _source_actions(self, st: _State, actions: list) -> None:
        notifier = st.notifier_source
        sid = st.source_id
        for a in actions:
            t = type(a)
            if t is sc.GrantCapacity:
                _notifier.notify(notifier, _source.DemandGranted(_source.DemandGrant(sid, a.id, a.amount)))
            elif t is sc.RevokeGrant:
                _notifier.notify(notifier, _source.GrantRevoked(_source.DemandGrant(sid, a.id, a.amount)))
            elif t is sc.StopSource:
                _notifier.notify(notifier, _source.SourceStopped())

    def _reconcile(self, st: _State) -> None:
        r = st.reservation
        if r is None or st.stopping:
            return
        stage = st.rt.state
        capacity = core.available_demand(stage) - core.buffer_size(stage)
        r, actions = sc.reconcile(r, capacity)
        st.reservation = r
        if actions:
            self._source_actions(st, actions)

    # -- calls --------------------------------------------------------------------------

    def handle_call(self, request: Any, from_: Any, st: _State) -> Any:
        tag = request[0]
        if tag == PUSH:
            if st.stopping:
                return ("reply", ("error", AlreadyStopping()), st)
            if st.reservation is not None:
                return ("reply", ("error", SourceManaged()), st)
            try:
                st.rt, out = runtime.push(st.rt, request[1])
            except StageError as err:
                return ("reply", ("error", StageProtocol(err)), st)
            _execute(out, st)
            return ("reply", _OK, st)
        if tag == CALL:
            return self._call(request[1], from_, st)
        if request is SNAPSHOT or request == SNAPSHOT:
            workers = tuple(st.workers[n].id for n in st.order)
            return ("reply", ("ok", Snapshot(workers, core.buffer_size(st.rt.state), st.stopping)), st)
        if request is STOP or request == STOP:
            return self._stop(from_, st)
        if tag == _source.SUPPLY:
            return ("reply", self._supply(st, request), st)
        return ("reply", ("error", PoolError(f"unknown request {request!r}")), st)

    def _call(self, event: Any, from_: Any, st: _State) -> Any:
        """Push ``event`` as a call (same refusals as a push); the worker's outcome answers it later."""
        if st.stopping:
            return ("reply", ("error", AlreadyStopping()), st)
        if st.reservation is not None:
            return ("reply", ("error", SourceManaged()), st)
        cid = next(st.call_ids)
        try:
            st.rt, out = runtime.push(st.rt, (_Call(cid, event),))
        except StageError as err:
            return ("reply", ("error", StageProtocol(err)), st)
        st.calls[cid] = [from_, None]
        st.undispatched += 1
        _execute(out, st)
        return ("noreply", st)

    def _answer(self, msg: tuple, st: _State) -> Any:
        """A worker's outcome for a call's event: answer its caller (once)."""
        entry = st.calls.pop(msg[1], None)
        if entry is not None:
            gen_server.reply(entry[0], ("ok", msg[3]) if msg[2] else ("error", HandlerFailed(msg[3])))
        return ("noreply", st)

    def _stop(self, from_: Any, st: _State) -> Any:
        if st.stopping:
            return ("reply", ("error", AlreadyStopping()), st)
        self._report(st, PoolStopping())
        st.stopping = True
        st.waiters.append(from_)
        if st.reservation is not None:
            st.reservation, actions = sc.shutdown(st.reservation)
            self._source_actions(st, actions)
        if core.buffer_size(st.rt.state) == 0:
            return self._begin_shutdown(st)
        return ("noreply", st)

    def _begin_shutdown(self, st: _State) -> Any:
        st.shutdown_started = True
        st.rt, out = runtime.shutdown(st.rt)
        _execute(out, st)  # a quit queued behind each worker's pending batches
        if not st.workers:
            return self._finish(st)
        return ("noreply", st)

    def _finish(self, st: _State) -> Any:
        self._report(st, PoolStopped())
        for waiter in st.waiters:
            gen_server.reply(waiter, _OK)
        st.waiters = []
        return ("stop", "normal", st)

    def _supply(self, st: _State, request: tuple) -> tuple:
        _, source_id, grant_id, offset, events = request
        if st.reservation is None or st.stopping:
            return ("error", sc.SourceUnavailable("stopping" if st.stopping else "no source"))
        if source_id != st.source_id:
            return ("error", sc.SourceMismatch())
        try:
            reservation, result = sc.supply(st.reservation, grant_id, offset, len(events))
        except sc.SupplyProtocol as err:
            return ("error", err)
        if reservation is not st.reservation:  # accepted, and something to deliver
            try:
                rt, out = runtime.push(st.rt, events)
            except StageError as err:
                return ("error", sc.SourceUnavailable(err))  # neither the reservation nor the stage moves
            st.rt = rt
            st.reservation = reservation
            _execute(out, st)
        self._reconcile(st)
        return ("ok", result)

    # -- casts --------------------------------------------------------------------------

    def handle_cast(self, request: Any, st: _State) -> Any:
        if type(request) is tuple and len(request) == 2 and st.reservation is not None and not st.stopping:
            tag, source_id = request
            if source_id == st.source_id:
                if tag == _source.UNAVAILABLE:
                    st.reservation, actions = sc.unavailable(st.reservation)
                    self._source_actions(st, actions)
                elif tag == _source.AVAILABLE:
                    stage = st.rt.state
                    capacity = core.available_demand(stage) - core.buffer_size(stage)
                    st.reservation, actions = sc.available(st.reservation, capacity)
                    self._source_actions(st, actions)
        return ("noreply", st)

    # -- messages -----------------------------------------------------------------------

    def handle_info(self, msg: Any, st: _State) -> Any:
        if msg is _COLLECT:  # the hot path while other requests come: the board stayed open
            self._collect_sent = False
            return self._completions(None, st)
        if type(msg) is tuple:
            if len(msg) == 2 and type(msg[0]) is _Sub:  # the hot path: renew what the workers completed
                return self._completions(msg, st)
            if msg[0] is _REPLY and len(msg) == 4:
                return self._answer(msg, st)
            if msg[0] == "DOWN" and len(msg) == 5:
                return self._down(msg[1], msg[4], st)
        return ("noreply", st)

    def _completions(self, msg: tuple, st: _State) -> Any:
        """Renew the demand of completed batches: this one, the ones queued behind it, and more in rounds.

        The completions already waiting are taken with a polling selective
        receive (renewing demand commutes with the other requests, so taking
        them first is safe) and renewed together in one
        :func:`runtime.ask_all_unrouted` -- the same deliveries as one ask
        each, in order.  A completion of a worker no longer subscribed
        (replaced meanwhile, or the pool shutting down) renews nothing.  The
        pool stops polling once the completions it took cover every event in
        flight (what the workers' demand lacks of ``prefetch``), so the poll
        that finds nothing is made only while a worker is still busy.

        Then, when the workers share the pool's carrier and got work, the pool
        yields to them (``ensemble.dispatcher.yield_``) with its board open:
        the completions of that turn are counted in their ``done`` cells, not
        sent; it renews them (and any completion message that came) and goes
        on, for at most ``_ROUNDS`` rounds, and only while no other message
        waits: one trip through the gen_server loop serves many batches, and a
        call or a ``DOWN`` waits one round at most.  Entered with batches still
        in flight on its carrier (woken by the first worker done), the pool
        first gives the others their turn, and renews them all together.  The
        batches of a round go to the workers' cells (those waiting there) or
        as messages.  Leaving with batches out on its carrier, the pool keeps
        its board open and sends itself a ``_COLLECT``: the workers go on
        counting into their cells, and the pool comes back to them here
        (``msg`` None) once the messages ahead of it are handled.
        """
        take = self._take
        seen = self._seen
        seen[0] = False
        rt = st.rt
        routes = rt.routes
        # the events in flight whose completions are still to take: what the workers' demand lacks
        expected = len(routes) * self.config.prefetch - core.available_demand(rt.state)
        asks = []
        if msg is not None and msg[0] in routes:
            asks.append(msg)  # a completion (sub, count) is the ask that renews it
            expected -= msg[1]
        rounds = self._rounds
        board = self._board
        if board.open:  # left open on the way out (a _COLLECT is coming, or came): read the cells now
            board.open = False
            for sub in routes:
                done = sub.done
                if done:
                    sub.done = 0
                    asks.append((sub, done))
                    expected -= done
        while True:
            while expected:
                m = _receive(take, timeout=0.0)
                if m is _TIMEOUT:
                    break
                if m[0] in routes:
                    asks.append(m)
                    expected -= m[1]
            if expected > 0 and rounds:
                # Woken by the first of the workers given work: let the others finish their turn,
                # then renew them all together.
                rounds -= 1
                board.open = True
                _yield()
                for sub in routes:  # what the workers counted meanwhile
                    done = sub.done
                    if done:
                        sub.done = 0
                        asks.append((sub, done))
                expected = -1
                continue
            if not asks:
                board.open = False
                return ("noreply", st)
            st.rt, out = _ask_all(st.rt, asks)  # never fails: every id is routed, every count > 0
            if st.undispatched:
                for sub, events in out:
                    _deliver(st, sub, events)
            else:
                for sub, events in out:
                    if sub.cell is _WAITING:  # _deliver's commonest case, inlined
                        sub.cell = events
                    else:
                        sub.mailed += 1
                        _send(sub.pid, (_BATCH, events))
            if st.stopping:
                if core.buffer_size(st.rt.state) == 0:
                    board.open = False
                    return self._begin_shutdown(st)
            elif st.reservation is not None:
                self._reconcile(st)
            if not out or not rounds or seen[0]:
                if out and self._rounds:
                    # Batches went out on the pool's carrier: the board stays open and a _COLLECT
                    # behind the messages waiting brings the pool back to the cells, so the
                    # workers go on through them, not through messages.
                    board.open = True
                    if not self._collect_sent:
                        self._collect_sent = True
                        _send(st.me, _COLLECT)
                else:
                    board.open = False
                return ("noreply", st)
            # The next round: yield to the workers with the board open (it stays open until the
            # pool leaves: the pool switches to no one else meanwhile), then take their counts.
            rounds -= 1
            routes = st.rt.routes
            board.open = True
            _yield()
            asks = []
            for sub in routes:
                done = sub.done
                if done:
                    sub.done = 0
                    asks.append((sub, done))
            expected = -1  # and any completion message, up to the first poll that finds none

    def _down(self, mref: Any, reason: Any, st: _State) -> Any:
        w = st.by_mref.pop(mref, None)
        if w is None:
            if mref is st.reporter_mref and mref is not None:
                return ("stop", _REPORTER_STOPPED, st)
            if mref is st.source_mref and mref is not None:
                return ("stop", _SOURCE_STOPPED, st)
            return ("noreply", st)
        n = w.id.value
        del st.workers[n]
        st.order.remove(n)
        self._report(st, WorkerStopped(w.id, w.slot))
        if st.calls:
            _fail_calls(st, w, reason)
        if st.shutdown_started:
            if not st.workers:
                return self._finish(st)
            return ("noreply", st)
        # at-most-once: the dead worker's batch and outstanding demand are dropped
        st.rt, out = runtime.participant_down(st.rt, w.sub)
        _execute(out, st)  # the dead worker's Cancelled is dropped (ensemble drops a message to an exited pid)
        try:
            replacement = self._start_worker(st, w.slot)
        except _WorkerStartFailed as err:
            return ("stop", ("worker_start_failed", err.reason), st)
        self._report(st, WorkerStarted(replacement.id, w.slot))
        self._report(st, WorkerReplaced(w.id, replacement.id, w.slot))
        if st.stopping and core.buffer_size(st.rt.state) == 0:
            return self._begin_shutdown(st)
        self._reconcile(st)
        return ("noreply", st)


_ask_all = runtime.ask_all_unrouted
_send = e.send
_receive = e.receive
_TIMEOUT = e.TIMEOUT


def _holds_calls(st: _State, pid: Any, events: tuple) -> bool:
    """Whether ``events`` (going to worker ``pid``) hold undispatched calls; notes ``pid`` as their holder."""
    found = False
    calls = st.calls
    for ev in events:
        if type(ev) is _Call:
            found = True
            entry = calls.get(ev.id)
            if entry is not None:
                entry[1] = pid
            st.undispatched -= 1
            if not st.undispatched:
                break
    return found


def _fail_calls(st: _State, w: _Worker, reason: Any) -> None:
    """Fail the calls dead worker ``w`` held and had not answered (its replies came before its DOWN)."""
    pid = w.pid
    lost = [cid for cid, entry in st.calls.items() if entry[1] is pid]
    for cid in lost:
        gen_server.reply(st.calls.pop(cid)[0], ("error", WorkerCrashed(w.id, reason)))


def _deliver(st: _State, sub: _Sub, events: tuple) -> None:
    """Give worker ``sub`` a batch: in its cell if it waits on it (see :class:`_Board`), else as
    ``(_BATCH, events)`` (``(_MIXED, events)`` when it holds calls, always a message)."""
    if st.undispatched and _holds_calls(st, sub.pid, events):
        _mail(sub, (_MIXED, events))
    elif sub.cell is _WAITING:
        sub.cell = events
    else:
        _mail(sub, (_BATCH, events))


def _mail(sub: _Sub, msg: Any) -> None:
    """Send the pool's message ``msg`` to worker ``sub``: counted, and the worker's cell closed for this wait."""
    if sub.cell is _WAITING:
        sub.cell = None  # the worker takes this message first: no batch may pass it in the cell
    sub.mailed += 1
    _send(sub.pid, msg)


def _execute(out: list, st: _State) -> None:
    """Carry out the runtime's deliveries, in order: a batch as :func:`_deliver` gives it, Cancelled as it is."""
    for d in out:
        m = d.message
        if type(m) is Events:
            _deliver(st, m.id, m.events)
        else:
            _mail(m.id, m)
