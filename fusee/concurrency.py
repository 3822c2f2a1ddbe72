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
no run yet).  Once the run runs, cancel or terminate the run, not its slot: a terminated slot keeps
its turn.  Requests carry their start time, so slots whose requests race still queue in start order.  The newest start's limit wins: the limit
travels in every request and release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import delay as _delay
from .errors import Cancelled

__all__ = [
    "SLOT_TYPE",
    "COORDINATOR_TYPE",
    "EVENTS_PER_RUN",
    "EVENT",
    "ADMIT",
    "slot_id",
    "coordinator_id",
    "slot_input",
    "key_of",
    "start_plan",
    "following",
    "Turns",
    "on_event",
    "admit",
    "request",
    "release",
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


# -- the workflows (the imperative shell, on ctx) -----------------------------------------


def slot(ctx: Any, q: dict[str, Any]) -> Any:
    """The slot ``fusee.queued/<id>``: wait for a turn, run ``q["type"]`` as ``q["id"]``, give it back.

    Cancelled while waiting: the request is withdrawn and the slot ends cancelled.  Once admitted,
    the child's result is returned and its failure re-raised (:class:`fusee.ChildFailed`); the
    turn is released however the child ends (but not if the slot itself is terminated).
    """
    wtype, id = q["type"], q["id"]
    limit = max(1, int(q.get("limit", 1)))
    coordinator_ = coordinator_id(wtype, q.get("key"))
    # One coordinator per type or key: a start attaches to it while it runs.
    ctx.start_child(COORDINATOR_TYPE, coordinator_, Turns(limit).plain(), parent_close="abandon")
    ctx.signal_workflow(coordinator_, EVENT, request(id, limit, q.get("order")))
    try:
        ctx.wait_for(ADMIT)
    except Cancelled:
        ctx.signal_workflow(coordinator_, EVENT, release(id, limit))  # take the request back
        raise
    try:
        return ctx.child(wtype, id, q.get("input"), parent_close="abandon", timeout=q.get("timeout"))
    finally:
        ctx.signal_workflow(coordinator_, EVENT, release(id, limit))  # the turn goes back


def coordinator(ctx: Any, state: Any) -> Any:
    """The coordinator ``fusee.concurrency/<type>[/<key>]``: admit in request order, forever.

    Continues as new with its state every :data:`EVENTS_PER_RUN` events, first taking every
    event already delivered (so none is left behind in the old run's journal).
    """
    t = Turns.of_plain(state)
    while True:
        t, admitted = admit(t)
        for id in admitted:
            ctx.signal_workflow(slot_id(id), ADMIT, True)
        if t.events >= EVENTS_PER_RUN:
            while True:  # drain what was delivered already: a signal is never left behind
                e = ctx.wait_for(EVENT, timeout=0)
                if e is None:
                    break
                t = on_event(t, e)
            t, admitted = admit(t)
            for id in admitted:
                ctx.signal_workflow(slot_id(id), ADMIT, True)
            return ctx.continue_as_new(Turns(t.limit, t.queue, t.running, 0, t.orders).plain())
        t = on_event(t, ctx.wait_for(EVENT))


def workflows() -> list[Any]:
    """The built-in ``fusee.queued`` and ``fusee.concurrency`` workflow types (every engine has them)."""
    from .workflow import Workflow

    return [Workflow(SLOT_TYPE, 1, slot), Workflow(COORDINATOR_TYPE, 1, coordinator)]
