"""Runs at once per type or key: at most ``limit`` runs of a workflow type (or of one key of it,
a tenant say) run at a time; the others wait, in the order they were started, and show as
``queued``.

Built from runs, so a turn is kept while its run is parked and across crashes, and nothing of
it touches a step (spec §2.5):

* A start of a limited type starts a **slot** instead, ``fusee.queued/<id>`` (type
  ``fusee.queued``), whose input (:func:`slot_input`) names the type, ID, input, limit and key.
* The slot starts the type's (or key's) **coordinator**, ``fusee.concurrency/<type>[/<key>]``
  (type ``fusee.concurrency``), attaching to it if it runs, and asks it for a turn with a
  durable signal (``ctx.signal_workflow``).
* The coordinator keeps the queue and the holders in its journal (its state, :class:`Turns`, is
  a pure value; :func:`on_event` and :func:`admit` are its transitions), admits in request order
  while fewer than ``limit`` hold a turn (a signal back), and continues as new every
  :data:`EVENTS_PER_RUN` events with that state.
* An admitted slot runs the workflow under its own ID as a child that outlives it
  (``parent_close="abandon"``), gives the turn back however the child ends, and returns the
  child's result (a failure is re-raised).

Cancelling a slot that waits takes its request back (``engine.cancel(id)`` does so while ``id`` has
no run yet).  A cancel that lands on the slot once it has asked for the run goes on to the run, and
the slot keeps the turn until the run ends (:func:`run_child`).  Terminate the run, not its slot: a
terminated slot keeps its turn.  Requests carry their start time, so slots whose requests race
still queue in start order (which of two racing first requests takes a free turn first is not
ordered).  The newest start's limit wins: the limit travels in every request and release.

A coordinator that ends other than by continuing as new (terminated, failed) loses its state.  Every
event a slot sends goes to a live coordinator (:func:`deliver`, :func:`ensure_coordinator`): one
started after an earlier run of its ID ended rebuilds its holders and queue from the running slots
(:func:`survey`, :func:`slot_phase`).  ``engine.terminate`` on a coordinator starts the new one at
once; otherwise the next slot to ask or give back does.  A coordinator ignores a cancel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import delay as _delay
from . import records as r
from .behalf import run_child
from .errors import Cancelled, Error, NotFound
from .workflow import IdPolicy

if TYPE_CHECKING:
    from .host import Host

__all__ = [
    "SLOT_TYPE",
    "COORDINATOR_TYPE",
    "EVENTS_PER_RUN",
    "EVENT",
    "ADMIT",
    "slot_id",
    "coordinator_id",
    "slot_input",
    "request_dedup",
    "ask_for_slot",
    "key_of",
    "start_plan",
    "following",
    "Turns",
    "on_event",
    "admit",
    "request",
    "release",
    "slot_phase",
    "rebuild",
    "survey",
    "ensure_coordinator",
    "deliver",
    "run_child",
    "slot",
    "coordinator",
    "workflows",
]

#: The slot's workflow type.
SLOT_TYPE = "fusee.queued"
#: The coordinator's workflow type.
COORDINATOR_TYPE = "fusee.concurrency"
#: The signal a slot sends its coordinator (``request`` / ``release``).
EVENT = "event"
#: The signal a coordinator sends an admitted slot.
ADMIT = "admit"
#: Events a coordinator run takes before it continues as new (a few journal records each).
EVENTS_PER_RUN = 300


# -- names and inputs (pure) --------------------------------------------------------------


def slot_id(id: str) -> str:
    """The slot's workflow ID for the run ``id``: ``fusee.queued/<id>``."""
    return f"{SLOT_TYPE}/{id}"


def coordinator_id(wtype: str, key: str | None = None) -> str:
    """The coordinator's workflow ID for type ``wtype`` (and ``key`` when the limit is per key)."""
    return f"{COORDINATOR_TYPE}/{wtype}" if key is None else f"{COORDINATOR_TYPE}/{wtype}/{key}"


def slot_input(
    wtype: str,
    id: str,
    input: Any,
    limit: int,
    key: str | None = None,
    timeout: float | None = None,
    order: float | None = None,
) -> dict[str, Any]:
    """A slot's input (a JSON object): the run to start once admitted, its limit and key, the run's
    own ``timeout`` (seconds from when it starts), and ``order``, when it was started (unix
    seconds: the coordinator queues by it, so slots whose requests race wait in start order)."""
    if type(limit) is not int or limit < 1:
        raise ValueError(f"a concurrency limit is an int >= 1, not {limit!r}")
    out: dict[str, Any] = {"type": wtype, "id": id, "input": input, "limit": limit}
    if key is not None:
        out["key"] = key
    if timeout is not None:
        out["timeout"] = timeout
    if order is not None:
        out["order"] = order
    return out


def key_of(key: Any) -> str:
    """A run's key as it names a coordinator: a ``str`` as is, an ``int`` in decimal."""
    if type(key) is str:
        return key
    if type(key) is int:
        return str(key)
    raise TypeError(f"a concurrency key is a str or an int, not {key!r}")


def start_plan(
    wtype: str,
    id: str,
    input: Any,
    limit: int | None = None,
    key: str | None = None,
    at: float | None = None,
    timeout: float | None = None,
    order: float | None = None,
) -> tuple[str, str, Any]:
    """The ``(type, ID, input)`` of the run a start of ``wtype`` as ``id`` starts: the run itself; its
    slot when the type is limited (``limit``); a delay run when it is due at unix time ``at`` (which
    then starts the slot or the run).  ``timeout`` (the run's own, seconds) travels to whichever
    starts the run itself; without a slot or delay the caller records it in the run's ``Start``."""
    plan: tuple[str, str, Any] = (wtype, id, input)
    if limit is not None:
        plan = (SLOT_TYPE, slot_id(id), slot_input(wtype, id, input, limit, key, timeout, order))
        timeout = None
    if at is not None:
        plan = (
            _delay.DELAY_TYPE,
            _delay.delay_id(id),
            _delay.delay_input(plan[0], id, plan[2], at, target=plan[1], timeout=timeout),
        )
    return plan


def following(via_type: str, via_input: Any) -> tuple[str | None, Any, float | None]:
    """What a slot or delay run will start: ``(type, input, due at)`` from its type and input
    (through a delay to the slot it starts); ``(None, None, None)`` for anything else."""
    at = None
    if via_type == _delay.DELAY_TYPE and isinstance(via_input, dict):
        at = via_input.get("at")
        via_type, via_input = via_input.get("type"), via_input.get("input")
        if via_type != SLOT_TYPE:
            return via_type, via_input, at
    if via_type == SLOT_TYPE and isinstance(via_input, dict):
        return via_input.get("type"), via_input.get("input"), at
    return None, None, None


# -- the coordinator's state (pure) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turns:
    """The coordinator's state: ``limit``; ``queue``, the IDs waiting, in start order (the ``order``
    their requests carry, ``orders`` holding it per waiting ID; a request without one, or ties, in
    the order they asked);
    ``running``, the IDs holding a turn, in the order they were admitted; ``events`` taken by this
    run (reset by continue-as-new).  Immutable; the transitions return new values."""

    limit: int = 1
    queue: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    events: int = 0
    orders: tuple[tuple[str, float], ...] = ()

    def plain(self) -> dict[str, Any]:
        """The state as a JSON object (the coordinator's input across continue-as-new)."""
        return {
            "limit": self.limit,
            "queue": list(self.queue),
            "running": list(self.running),
            "events": self.events,
            "orders": [[id, o] for id, o in self.orders],
        }

    @classmethod
    def of_plain(cls, d: Any) -> "Turns":
        """The state back from :meth:`plain` (missing fields take their defaults)."""
        if not isinstance(d, dict):
            raise TypeError(f"a coordinator's state is a JSON object, not {d!r}")
        return cls(
            max(1, int(d.get("limit", 1))),
            tuple(d.get("queue", ())),
            tuple(d.get("running", ())),
            int(d.get("events", 0)),
            tuple((id, o) for id, o in d.get("orders", ())),
        )


def request(id: str, limit: int, order: float | None = None) -> dict[str, Any]:
    """The event a slot sends to ask for a turn for ``id``, started at ``order`` (unix seconds)."""
    out: dict[str, Any] = {"kind": "request", "id": id, "limit": limit}
    if order is not None:
        out["order"] = order
    return out


def _queue_after(t: Turns, id: str, order: Any) -> tuple[tuple[str, ...], tuple[tuple[str, float], ...]]:
    """The queue and orders with ``id`` inserted before the first waiting ID of a later order."""
    if type(order) not in (int, float):
        return t.queue + (id,), t.orders
    known = dict(t.orders)
    pos = len(t.queue)
    for i, q in enumerate(t.queue):
        o = known.get(q)
        if o is not None and o > order:
            pos = i
            break
    return t.queue[:pos] + (id,) + t.queue[pos:], t.orders + ((id, order),)


def release(id: str, limit: int) -> dict[str, Any]:
    """The event a slot sends to give its turn back, or to withdraw its request."""
    return {"kind": "release", "id": id, "limit": limit}


def on_event(t: Turns, event: Any) -> Turns:
    """``t`` after one event from a slot (before admitting anyone: see :func:`admit`).

    The event's ``limit`` (>= 1) becomes the limit: the newest start's wins.  ``request`` queues
    the ID at the back unless it already waits or holds a turn (a repeated request is a no-op);
    (before any waiting ID started later, when the request carries its ``order``);
    ``release`` removes the ID from the holders and from the queue (a turn given back, or a
    request withdrawn).  Anything else only counts as an event.
    """
    events = t.events + 1
    if not isinstance(event, dict):
        return Turns(t.limit, t.queue, t.running, events, t.orders)
    limit = event.get("limit")
    if type(limit) is int and limit >= 1:
        limit_ = limit
    else:
        limit_ = t.limit
    kind, id = event.get("kind"), event.get("id")
    queue, running, orders = t.queue, t.running, t.orders
    if kind == "request" and type(id) is str:
        if id not in queue and id not in running:
            queue, orders = _queue_after(t, id, event.get("order"))
    elif kind == "release" and type(id) is str:
        queue = tuple(q for q in queue if q != id)
        running = tuple(h for h in running if h != id)
        orders = tuple(p for p in orders if p[0] != id)
    return Turns(limit_, queue, running, events, orders)


def admit(t: Turns) -> tuple[Turns, tuple[str, ...]]:
    """Admit from the front of the queue while fewer than ``limit`` hold a turn.

    Returns the new state and the IDs admitted, in order (each to be told with :data:`ADMIT`).
    A lowered limit admits nobody until enough holders release; it never evicts a holder.
    """
    room = max(0, t.limit - len(t.running))
    if room == 0 or not t.queue:
        return t, ()
    taken = t.queue[:room]
    orders = tuple(p for p in t.orders if p[0] not in taken)
    return Turns(t.limit, t.queue[room:], t.running + taken, t.events, orders), taken


# -- rebuilding a coordinator's state from its slots -------------------------------------


def slot_phase(journal: Any, coordinator: str) -> str | None:
    """Where a running slot stands with ``coordinator``, from its journal (``(lsn, record)`` pairs, as
    ``describe`` gives them): ``"holding"`` once an :data:`ADMIT` came, ``None`` once it sent its
    release (the turn or the request given back: recorded before it is delivered, so this holds
    even for a release a dead coordinator never got), else ``"waiting"`` (its request may not be
    recorded yet, but it comes: a slot asks before anything else)."""
    phase: str | None = "waiting"
    for _, rec in journal:
        if type(rec) is r.Send and rec.target == coordinator and rec.name == EVENT and isinstance(rec.payload, dict):
            if rec.payload.get("kind") == "release":
                phase = None
        elif type(rec) is r.Signal and rec.name == ADMIT and phase == "waiting":
            phase = "holding"
    return phase


def rebuild(limit: int, holders: Any, waiting: Any) -> Turns:
    """A coordinator's state from its slots: ``holders`` (IDs holding a turn) and ``waiting``
    (``(id, order)`` pairs, ``order`` None for a request without one), queued in start order."""
    t = Turns(limit, (), tuple(dict.fromkeys(holders)))
    for id, order in waiting:
        t = on_event(t, request(id, limit, order))
    return Turns(t.limit, t.queue, t.running, 0, t.orders)


def survey(host: "Host", coordinator: str, limit: int) -> Turns:
    """The state of ``coordinator`` rebuilt from the running slots that name it, on every shard
    (:func:`slot_phase` of each; waiting ones in start order: their ``order``, else when the slot
    started).  What a coordinator started after an earlier run of its ID ended other than by
    continuing as new (terminated, failed) begins with: that run's state is not trusted to exist."""
    holders: list[tuple[float, str]] = []
    waiting: list[tuple[float, float, str, Any]] = []
    for shard in range(host.shards):
        for d in host.call(shard, ("list", None)):
            if d["type"] != SLOT_TYPE or d["status"] != "running":
                continue
            try:
                desc = host.call(shard, ("describe", d["id"]))
            except NotFound:
                continue
            q = desc["input"]
            if not isinstance(q, dict) or type(q.get("id")) is not str or type(q.get("type")) is not str:
                continue
            key = q.get("key")
            if coordinator_id(q["type"], key if type(key) is str else None) != coordinator:
                continue
            phase = slot_phase(desc["journal"], coordinator)
            started = float(desc["started"] or 0.0)
            if phase == "holding":
                holders.append((started, q["id"]))
            elif phase == "waiting":
                order = q.get("order")
                order = order if type(order) in (int, float) else None
                waiting.append((started if order is None else float(order), started, q["id"], order))
    holders.sort()
    waiting.sort(key=lambda w: w[:3])
    return rebuild(limit, [id for _, id in holders], [(id, order) for _, _, id, order in waiting])


def ensure_coordinator(host: "Host", coordinator: str, limit: int, durable: bool = True) -> int:
    """Attach to ``coordinator`` if it runs; else start it (rebuilt from its slots, :func:`survey`, when
    an earlier run of its ID ended: a terminated or failed one's state is lost).  Returns its run
    number once its ``Start`` is durable (``durable`` False: at once).  Idempotent."""
    shard = host.shard_of(coordinator)
    plain = Turns(limit).plain()
    try:
        host.call(shard, ("run_of", coordinator))
    except NotFound:
        pass
    else:
        # an earlier run: if it has ended by the time the start below lands, rebuild (a running one is attached to)
        plain["rebuild"] = True
    wf = host.workflow(COORDINATOR_TYPE)
    st, lsn = host.call(shard, ("start", wf, coordinator, plain, IdPolicy("attach", "start_new")))
    if durable:
        host.wait_durable(shard, lsn)
    return st.run


#: Tries :func:`deliver` makes before it gives up (each one starts a coordinator that then ended).
DELIVER_TRIES = 100


def deliver(host: "Host", coordinator: str, limit: int, event: Any, dedup: str) -> int:
    """Signal ``event`` to a live ``coordinator`` (:func:`ensure_coordinator` first; again if it ended
    before the signal landed); returns once the signal is durable there.  ``dedup`` makes a resend
    (a replayed step) a no-op."""
    shard = host.shard_of(coordinator)
    for _ in range(DELIVER_TRIES):
        # no wait for its Start: the signal's, later in the same shard's journal, covers it
        ensure_coordinator(host, coordinator, limit, durable=False)
        try:
            lsn = host.call(shard, ("signal", coordinator, EVENT, event, dedup))
        except NotFound:
            lsn = None
        if lsn is not None:
            host.wait_durable(shard, lsn)
            return lsn
    raise Error(f"coordinator {coordinator!r} ended {DELIVER_TRIES} times before taking an event")


def request_dedup(slot: str, run: int) -> str:
    """The dedup key of slot run ``run`` of ``slot``'s request: whoever delivers it first (the start,
    or the slot itself), the coordinator takes it once."""
    return f"{slot}/{run}/request"


def ask_for_slot(host: "Host", slot: str, run: int, q: dict[str, Any]) -> int:
    """Deliver slot run ``run``'s request (input ``q``) to its coordinator, as the slot itself would
    (same event, same dedup key): :meth:`fusee.Engine.start` does so before it returns, so starts made
    one after another reach the coordinator, and are admitted, in that order."""
    limit = max(1, int(q.get("limit", 1)))
    event = request(q["id"], limit, q.get("order"))
    return deliver(host, coordinator_id(q["type"], q.get("key")), limit, event, request_dedup(slot, run))


# -- the workflows (the imperative shell, on ctx) -----------------------------------------


def _ask(ctx: Any, coordinator: str, id: str, limit: int, order: Any) -> None:
    """Ask for a turn: a ``read_only`` step delivering the request to a live coordinator (:func:`deliver`),
    with nothing to wait for in between (so requests of starts made one after another arrive in
    that order).  A survey counts a slot waiting until it gives back, so an unrecorded request is
    never lost with a coordinator."""
    host = ctx._st.host
    dedup = request_dedup(ctx.workflow_id, ctx.run_id)
    ctx.step(
        "fusee.request",
        lambda: deliver(host, coordinator, limit, request(id, limit, order), dedup) is not None,
        read_only=True,
    )


def _give_back(ctx: Any, coordinator: str, id: str, limit: int) -> None:
    """Give the turn (or the request) back: a ``Send`` (recorded before it is delivered, so a survey sees
    it), then a step making sure a coordinator runs (if the one sent to had ended, the new one is
    rebuilt without this slot).  A cancel landing here changes nothing: it is taken and the turn
    still goes back (a run takes one cancel, so this retries at most once)."""
    host = ctx._st.host
    while True:
        try:
            ctx.signal_workflow(coordinator, EVENT, release(id, limit))
            ctx.step("fusee.coordinator", lambda: ensure_coordinator(host, coordinator, limit), read_only=True)
            return
        except Cancelled:
            continue


def slot(ctx: Any, q: dict[str, Any]) -> Any:
    """The slot ``fusee.queued/<id>``: wait for a turn, run ``q["type"]`` as ``q["id"]``, give it back.

    Cancelled while waiting: the request is withdrawn and the slot ends cancelled.  Once admitted,
    the child's result is returned and its failure re-raised (:class:`fusee.ChildFailed`); the
    turn is released however the child ends (but not if the slot itself is terminated).  A cancel
    of the slot once the child has been asked for goes on to the child, and the turn is kept until
    the child ends (:func:`run_child`).  Every event goes to a live coordinator (:func:`_ask`,
    :func:`_give_back`).
    """
    wtype, id = q["type"], q["id"]
    limit = max(1, int(q.get("limit", 1)))
    coordinator_ = coordinator_id(wtype, q.get("key"))
    try:
        # One coordinator per type or key: a slot attaches to it while it runs, else starts it (rebuilt).
        _ask(ctx, coordinator_, id, limit, q.get("order"))
        ctx.wait_for(ADMIT)
    except Cancelled:
        _give_back(ctx, coordinator_, id, limit)  # take the request back
        raise
    try:
        return run_child(ctx, wtype, id, q.get("input"), q.get("timeout"))
    finally:
        _give_back(ctx, coordinator_, id, limit)  # the turn goes back


def _uncancellable(fn: Any) -> Any:
    """``fn()``, again if a cancel lands in it (a coordinator is not cancelled: its queue would be lost)."""
    while True:
        try:
            return fn()
        except Cancelled:
            continue


def coordinator(ctx: Any, state: Any) -> Any:
    """The coordinator ``fusee.concurrency/<type>[/<key>]``: admit in request order, forever.

    Continues as new with its state every :data:`EVENTS_PER_RUN` events, first taking every
    event already delivered (so none is left behind in the old run's journal).  Started with
    ``"rebuild"`` (an earlier run of its ID ended otherwise: terminated or failed), its state is
    first rebuilt from the slots (:func:`survey`).  A cancel is ignored.  Answers the query
    ``"turns"`` with its state (:meth:`Turns.plain`).
    """
    t = Turns.of_plain(state)
    if isinstance(state, dict) and state.get("rebuild"):
        host, me, limit = ctx._st.host, ctx.workflow_id, t.limit
        t = Turns.of_plain(
            _uncancellable(lambda: ctx.step("fusee.rebuild", lambda: survey(host, me, limit).plain(), read_only=True))
        )
    now = [t]
    ctx.on_query("turns", lambda _arg: now[0].plain())

    def admit_all(t: Turns) -> Turns:
        t, admitted = admit(t)
        now[0] = t
        for id in admitted:
            _uncancellable(lambda: ctx.signal_workflow(slot_id(id), ADMIT, True))
        return t

    while True:
        t = admit_all(t)
        if t.events >= EVENTS_PER_RUN:
            while True:  # drain what was delivered already: a signal is never left behind
                e = _uncancellable(lambda: ctx.wait_for(EVENT, timeout=0))
                if e is None:
                    break
                t = on_event(t, e)
            t = admit_all(t)
            return ctx.continue_as_new(Turns(t.limit, t.queue, t.running, 0, t.orders).plain())
        t = on_event(t, _uncancellable(lambda: ctx.wait_for(EVENT)))
        now[0] = t


def workflows() -> list[Any]:
    """The built-in ``fusee.queued`` and ``fusee.concurrency`` workflow types (every engine has them)."""
    from .workflow import Workflow

    return [Workflow(SLOT_TYPE, 1, slot), Workflow(COORDINATOR_TYPE, 1, coordinator)]
