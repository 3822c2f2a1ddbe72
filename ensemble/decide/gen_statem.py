"""What a gen_statem's returns mean, and how its event queue and timers move.

Pure decisions, no I/O and no clock (the caller passes ``now``, monotonic
seconds): :mod:`ensemble.gen_statem` asks these functions and carries the
answers out.  The rules are OTP's (``gen_statem`` reference manual, types
``init_result``, ``event_handler_result``, ``state_enter_result``,
``action``, ``transition_option``, and the "State Transition" steps), with
OTP's terms as Python values: atoms are ``str``, tuples are ``tuple``, a
list of actions is a ``list``, times are seconds (``int`` or ``float``).

Returns (``kind`` ``"event"``: a state callback; ``"enter"``: a state enter
call, whose ``state`` is the state entered)::

    ("next_state", state, data[, actions])
    ("keep_state", data[, actions])     | "keep_state_and_data"   | ("keep_state_and_data", actions)
    ("repeat_state", data[, actions])   | "repeat_state_and_data" | ("repeat_state_and_data", actions)
    "stop" | ("stop", reason) | ("stop", reason, data)
    ("stop_and_reply", reason, replies) | ("stop_and_reply", reason, replies, data)

Actions (one action may stand where a list goes; only a ``list`` is a list,
a ``tuple`` is always one action)::

    "postpone" | ("postpone", bool)
    ("next_event", type, content)      type: ("call", from_) | "cast" | "info" | "internal"
                                             | "timeout" | "state_timeout" | ("timeout", name)
    ("reply", from_, value)
    "hibernate" | ("hibernate", bool)
    time | "infinity"                  = ("timeout", time, time); "infinity" cancels
    (key, time, content[, {"abs": bool}])   key: "timeout" | "state_timeout" | ("timeout", name)
    (key, "cancel") | (key, "update", content)

A time is a number of seconds ``>= 0``; ``"infinity"``, ``None`` or
``math.inf`` cancels the timer; with ``{"abs": True}`` it is a deadline on
the caller's monotonic clock and may be any finite number.

Reasons, as OTP names them: ``("bad_return_from_init", ret)``,
``("bad_return_from_state_function", ret)``,
``("bad_state_enter_return_from_state_function", ret)`` (an enter call
named another state), ``("bad_action_from_state_function", action)``,
``("bad_state_enter_action_from_state_function", action)`` (an enter call
postponed or inserted an event), ``("bad_reply_action_from_state_function",
reply)`` (a ``stop_and_reply`` reply that is not a reply action).

Every function here is total on the values callbacks return: a malformed
value is answered with a reason, never an exception.  Values are never
compared with a foreign ``==`` except states (an enter call naming its own
state, a transition changing state), and that comparison is guarded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Hashable, Iterable, Mapping

from .._terms import Alias
from .values import Singleton, same

__all__ = [
    "EVENT",
    "ENTER",
    "INIT",
    "KINDS",
    "HANDLE_EVENT_FUNCTION",
    "STATE_FUNCTIONS",
    "TimerAction",
    "Actions",
    "NO_ACTIONS",
    "Bad",
    "Init",
    "InitStop",
    "InitError",
    "Ignore",
    "IGNORE",
    "Transition",
    "Stop",
    "Queues",
    "Timer",
    "Mode",
    "is_from",
    "is_event_type",
    "is_timeout_key",
    "same_state",
    "actions_of",
    "init_of",
    "result_of",
    "calls_enter",
    "next_queues",
    "next_timers",
    "enter_timers",
    "due",
    "wait_time",
    "fire",
    "callback_mode_of",
    "state_function_name",
    "last_event",
]

#: What a result is read as: a state callback, a state enter call, or init's actions.
EVENT: Final = "event"
ENTER: Final = "enter"
INIT: Final = "init"
KINDS: Final = frozenset((EVENT, ENTER, INIT))

HANDLE_EVENT_FUNCTION: Final = "handle_event_function"
STATE_FUNCTIONS: Final = "state_functions"

_NORMAL: Final = "normal"
_EVENT_TIMEOUT: Final = "timeout"
_STATE_TIMEOUT: Final = "state_timeout"
_PLAIN_EVENT_TYPES: Final = frozenset(("cast", "info", "internal", _EVENT_TIMEOUT, _STATE_TIMEOUT))
# Method names a state_functions machine has for other purposes: never states.
_NOT_STATES: Final = frozenset(
    ("init", "terminate", "format_status", "handle_event", "callback_mode", "state_enter", "code_change")
)


def _is(x: Any, tag: str) -> bool:
    """True iff ``x`` is exactly the string ``tag`` (no foreign ``==`` is called)."""
    return type(x) is str and x == tag


def _is_bool(x: Any) -> bool:
    return type(x) is bool


# -- results -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TimerAction:
    """One time-out action: ``op`` is ``"start"``, ``"cancel"`` or ``"update"`` of timer ``key``.

    ``key`` is the event type the timer delivers: ``"timeout"`` (the event
    time-out), ``"state_timeout"`` or ``("timeout", name)`` (a generic one).
    ``time`` (for ``"start"``) is seconds, or a deadline when ``absolute``.
    """

    key: Hashable
    op: str
    time: float = 0
    content: Any = None
    absolute: bool = False


@dataclass(frozen=True, slots=True)
class Actions:
    """A parsed action list, in OTP's terms.

    ``replies`` are ``(from_, value)`` pairs to send at once, in order;
    ``events`` the inserted ``(type, content)`` events, in order; ``timers``
    the :class:`TimerAction` list, in order.  ``postpone`` and ``hibernate``
    are ``None`` when no action named them (else the last one's value).
    """

    replies: tuple = ()
    events: tuple = ()
    timers: tuple = ()
    postpone: bool | None = None
    hibernate: bool | None = None

    @property
    def postponing(self) -> bool:
        """Whether the event is postponed."""
        return self.postpone is True

    @property
    def hibernating(self) -> bool:
        """Whether the machine hibernates after this transition."""
        return self.hibernate is True

    def then(self, later: "Actions") -> "Actions":
        """These actions followed by ``later`` (an enter call's actions follow its transition's)."""
        return Actions(
            self.replies + later.replies,
            self.events + later.events,
            self.timers + later.timers,
            self.postpone if later.postpone is None else later.postpone,
            self.hibernate if later.hibernate is None else later.hibernate,
        )


NO_ACTIONS: Final = Actions()


@dataclass(frozen=True, slots=True)
class Bad:
    """A malformed return or action: stop with ``reason``, after sending ``replies``.

    ``replies`` are the replies of the actions before the bad one (OTP replies
    as it reads the list).
    """

    reason: Any
    replies: tuple = ()


@dataclass(frozen=True, slots=True)
class Init:
    """init succeeded: enter ``state`` with ``data``, then carry out ``actions``."""

    state: Any
    data: Any
    actions: Actions = NO_ACTIONS


@dataclass(frozen=True, slots=True)
class InitStop:
    """``("stop", reason)`` from init: start fails with ``reason``; the process exits with it."""

    reason: Any


@dataclass(frozen=True, slots=True)
class InitError:
    """``("error", reason)`` from init: start fails with ``reason``; the process exits ``"normal"``."""

    reason: Any


class Ignore(Singleton):
    """``"ignore"`` from init: start answers ``"ignore"``. Use the singleton :data:`IGNORE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IGNORE"


IGNORE: Final = Ignore()


@dataclass(frozen=True, slots=True)
class Transition:
    """Go on in ``state`` with ``data`` and ``actions``; ``repeat`` runs the enter call again."""

    state: Any
    data: Any
    actions: Actions = NO_ACTIONS
    repeat: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Send ``replies`` (``(from_, value)`` pairs), then terminate with ``reason`` in ``state``, ``data``."""

    reason: Any
    state: Any
    data: Any
    replies: tuple = ()


@dataclass(frozen=True, slots=True)
class Queues:
    """The events after a transition: ``postponed`` (oldest first) and ``queue`` (next first)."""

    postponed: tuple
    queue: tuple


@dataclass(frozen=True, slots=True)
class Timer:
    """A running time-out: due at ``deadline`` (monotonic seconds), delivering ``content``."""

    deadline: float
    content: Any


@dataclass(frozen=True, slots=True)
class Mode:
    """A callback mode: ``function`` is :data:`HANDLE_EVENT_FUNCTION` or :data:`STATE_FUNCTIONS`."""

    function: str
    state_enter: bool = False


# -- terms -----------------------------------------------------------------------------


def is_from(x: Any) -> bool:
    """True iff ``x`` has the shape of a caller's ``from_``: ``(caller, alias)``, as gen_server makes it."""
    return type(x) is tuple and len(x) == 2 and isinstance(x[1], Alias)


def is_timeout_key(x: Any) -> bool:
    """True for ``"timeout"``, ``"state_timeout"`` and ``("timeout", name)`` with a hashable name."""
    if _is(x, _EVENT_TIMEOUT) or _is(x, _STATE_TIMEOUT):
        return True
    if type(x) is tuple and len(x) == 2 and _is(x[0], _EVENT_TIMEOUT):
        try:
            hash(x[1])
        except Exception:  # noqa: BLE001 - an unhashable or hostile name is just not a key
            return False
        return True
    return False


def is_event_type(x: Any) -> bool:
    """True for the event types ``next_event`` may insert (every type but ``"enter"``)."""
    if type(x) is str:
        return x in _PLAIN_EVENT_TYPES
    if type(x) is tuple and len(x) == 2:
        if _is(x[0], "call"):
            return is_from(x[1])
        return is_timeout_key(x)
    return False


def same_state(a: Any, b: Any) -> bool:
    """Whether states ``a`` and ``b`` are the same: identity, else a guarded ``==`` (:func:`ensemble.decide.values.same`).

    An ``==`` that raises or answers something that is not a truth value
    counts as "different".
    """
    return same(a, b)


# -- actions ----------------------------------------------------------------------------

_BAD: Final = object()
_CANCEL: Final = object()


def _time(t: Any, absolute: bool) -> Any:
    """A time-out time: a number, :data:`_CANCEL`, or :data:`_BAD`."""
    if t is None or _is(t, "infinity"):
        return _CANCEL
    tt = type(t)
    if tt is not int and tt is not float:
        return _BAD
    if tt is float:
        if t != t or t == -math.inf:
            return _BAD
        if t == math.inf:
            return _CANCEL
    if not absolute and t < 0:
        return _BAD
    return t


def _absolute(opts: Any) -> Any:
    """``{"abs": bool}`` (or ``{}``) as a bool, or :data:`_BAD`."""
    if type(opts) is not dict:
        return _BAD
    absolute = False
    for k, v in opts.items():
        if not _is(k, "abs") or not _is_bool(v):
            return _BAD
        absolute = v
    return absolute


def _timer_action(key: Any, action: tuple) -> Any:
    """The :class:`TimerAction` a time-out action names, or :data:`_BAD`."""
    n = len(action)
    if n == 2:
        if _is(action[1], "cancel"):
            return TimerAction(key, "cancel")
        return _BAD
    if n == 3 and _is(action[1], "update"):
        return TimerAction(key, "update", 0, action[2])
    if n == 3 or n == 4:
        absolute = False if n == 3 else _absolute(action[3])
        if absolute is _BAD:
            return _BAD
        t = _time(action[1], absolute)
        if t is _BAD:
            return _BAD
        if t is _CANCEL:
            return TimerAction(key, "cancel")
        return TimerAction(key, "start", t, action[2], absolute)
    return _BAD


def actions_of(actions: Any, kind: str = EVENT) -> Actions | Bad:
    """Parse ``actions`` (a list, or one action) returned by a callback of ``kind``.

    ``kind`` :data:`EVENT` allows every action; :data:`ENTER` refuses
    postponing and inserting (``("bad_state_enter_action_from_state_function",
    a)`` for an otherwise well-formed one); :data:`INIT` allows every action
    and forces postpone to false (there is no event to postpone).  A malformed
    action answers :class:`Bad` with ``("bad_action_from_state_function", a)``
    and the replies read before it.  Never raises.
    """
    items = actions if type(actions) is list else [actions]
    replies: list = []
    events: list = []
    timers: list = []
    postpone: bool | None = None
    hibernate: bool | None = None
    for a in items:
        bad_enter = False
        t = type(a)
        if t is str:
            if a == "postpone":
                if kind == ENTER:
                    bad_enter = True
                else:
                    postpone = kind != INIT
            elif a == "hibernate":
                hibernate = True
            elif a == "infinity":
                timers.append(TimerAction(_EVENT_TIMEOUT, "cancel"))
            else:
                return Bad(("bad_action_from_state_function", a), tuple(replies))
        elif t is int or t is float:
            time = _time(a, False)
            if time is _BAD:
                return Bad(("bad_action_from_state_function", a), tuple(replies))
            if time is _CANCEL:
                timers.append(TimerAction(_EVENT_TIMEOUT, "cancel"))
            else:
                timers.append(TimerAction(_EVENT_TIMEOUT, "start", time, a))
        elif t is tuple and a:
            head = a[0]
            n = len(a)
            if _is(head, "reply"):
                if n != 3 or not is_from(a[1]):
                    return Bad(("bad_action_from_state_function", a), tuple(replies))
                replies.append((a[1], a[2]))
            elif _is(head, "hibernate"):
                if n != 2 or not _is_bool(a[1]):
                    return Bad(("bad_action_from_state_function", a), tuple(replies))
                hibernate = a[1]
            elif _is(head, "postpone"):
                if n != 2 or not _is_bool(a[1]):
                    return Bad(("bad_action_from_state_function", a), tuple(replies))
                if kind == ENTER and a[1]:
                    bad_enter = True
                elif kind == INIT:
                    postpone = False
                else:
                    postpone = a[1]
            elif _is(head, "next_event"):
                if n != 3 or not is_event_type(a[1]):
                    return Bad(("bad_action_from_state_function", a), tuple(replies))
                if kind == ENTER:
                    bad_enter = True
                else:
                    events.append((a[1], a[2]))
            elif is_timeout_key(head):
                timer = _timer_action(head, a)
                if timer is _BAD:
                    return Bad(("bad_action_from_state_function", a), tuple(replies))
                timers.append(timer)
            else:
                return Bad(("bad_action_from_state_function", a), tuple(replies))
        else:
            return Bad(("bad_action_from_state_function", a), tuple(replies))
        if bad_enter:
            return Bad(("bad_state_enter_action_from_state_function", a), tuple(replies))
    if not (replies or events or timers) and postpone is None and hibernate is None:
        return NO_ACTIONS
    return Actions(tuple(replies), tuple(events), tuple(timers), postpone, hibernate)


# -- init -----------------------------------------------------------------------------------


def init_of(ret: Any) -> Init | InitStop | InitError | Ignore | Bad:
    """What ``init``'s return ``ret`` means (never raises).

    ``("ok", state, data[, actions])`` starts (the actions are read as
    :data:`INIT` actions; a bad one answers its :class:`Bad`);
    ``("stop", r)``, ``("error", r)``, ``"ignore"``; anything else is
    ``Bad(("bad_return_from_init", ret))``.
    """
    if type(ret) is tuple and ret:
        tag = ret[0]
        n = len(ret)
        if _is(tag, "ok") and (n == 3 or n == 4):
            actions = NO_ACTIONS if n == 3 else actions_of(ret[3], INIT)
            if type(actions) is Bad:
                return actions
            return Init(ret[1], ret[2], actions)
        if n == 2 and _is(tag, "stop"):
            return InitStop(ret[1])
        if n == 2 and _is(tag, "error"):
            return InitError(ret[1])
    elif _is(ret, "ignore"):
        return IGNORE
    return Bad(("bad_return_from_init", ret))


# -- callback results ------------------------------------------------------------------


def _replies_of(replies: Any) -> tuple | Bad:
    """The ``(from_, value)`` pairs of a ``stop_and_reply`` reply list (or one reply)."""
    items = replies if type(replies) is list else [replies]
    out = []
    for r in items:
        if type(r) is tuple and len(r) == 3 and _is(r[0], "reply") and is_from(r[1]):
            out.append((r[1], r[2]))
        else:
            return Bad(("bad_reply_action_from_state_function", r), tuple(out))
    return tuple(out)


def result_of(kind: str, ret: Any, state: Any, data: Any) -> Transition | Stop:
    """What a state callback (``kind`` :data:`EVENT`) or enter call (:data:`ENTER`) returning ``ret`` means.

    ``state`` and ``data`` are the machine's before the call (for an enter
    call, the state entered).  Answers a :class:`Transition`, or a
    :class:`Stop` for a stop result, a bad return or a bad action; a bad
    action stops in ``state`` with the data the return named.  In an enter
    call ``next_state`` must name ``state`` itself and a repeat acts as keep.
    Never raises.
    """
    enter = kind == ENTER
    if type(ret) is str:
        if ret == "keep_state_and_data":
            return Transition(state, data)
        if ret == "repeat_state_and_data":
            return Transition(state, data, NO_ACTIONS, not enter)
        if ret == "stop":
            return Stop(_NORMAL, state, data)
        return Stop(("bad_return_from_state_function", ret), state, data)
    if type(ret) is not tuple or not ret:
        return Stop(("bad_return_from_state_function", ret), state, data)
    tag = ret[0]
    n = len(ret)
    if type(tag) is not str:
        return Stop(("bad_return_from_state_function", ret), state, data)
    # (new state, new data, raw actions or _BAD, repeat)
    if tag == "next_state" and (n == 3 or n == 4):
        if enter and not same_state(ret[1], state):
            return Stop(("bad_state_enter_return_from_state_function", ret), state, data)
        parts = (ret[1], ret[2], [] if n == 3 else ret[3], False)
    elif tag == "keep_state" and (n == 2 or n == 3):
        parts = (state, ret[1], [] if n == 2 else ret[2], False)
    elif tag == "keep_state_and_data" and n == 2:
        parts = (state, data, ret[1], False)
    elif tag == "repeat_state" and (n == 2 or n == 3):
        parts = (state, ret[1], [] if n == 2 else ret[2], not enter)
    elif tag == "repeat_state_and_data" and n == 2:
        parts = (state, data, ret[1], not enter)
    elif tag == "stop" and (n == 2 or n == 3):
        return Stop(ret[1], state, data if n == 2 else ret[2])
    elif tag == "stop_and_reply" and (n == 3 or n == 4):
        new_data = data if n == 3 else ret[3]
        replies = _replies_of(ret[2])
        if type(replies) is Bad:
            return Stop(replies.reason, state, new_data, replies.replies)
        return Stop(ret[1], state, new_data, replies)
    else:
        return Stop(("bad_return_from_state_function", ret), state, data)
    new_state, new_data, raw, repeat = parts
    actions = actions_of(raw, kind) if (type(raw) is not list or raw) else NO_ACTIONS
    if type(actions) is Bad:
        return Stop(actions.reason, state, new_data, actions.replies)
    return Transition(new_state, new_data, actions, repeat)


def calls_enter(state_enter: bool, changed: bool, repeat: bool) -> bool:
    """Whether a transition makes a state enter call: enter calls are on, and the state changed or repeats."""
    return bool(state_enter) and (bool(changed) or bool(repeat))


# -- queues --------------------------------------------------------------------------------


def next_queues(
    changed: bool,
    postpone: bool,
    event: Any,
    postponed: Iterable[Any],
    inserted: Iterable[Any],
    queue: Iterable[Any],
) -> Queues:
    """The postponed events and the event queue after handling ``event``.

    ``event`` is ``None`` when there is none (init).  A postponed ``event``
    joins ``postponed`` (oldest first).  On a state change the postponed
    events are retried: the queue becomes ``inserted ++ postponed ++ queue``
    and nothing stays postponed; otherwise it becomes ``inserted ++ queue``.
    No event is lost or duplicated.
    """
    held = tuple(postponed)
    if postpone and event is not None:
        held = held + (event,)
    first = tuple(inserted)
    if changed:
        return Queues((), first + held + tuple(queue))
    return Queues(held, first + tuple(queue))


# -- timers ---------------------------------------------------------------------------------


def _deadline(time: float, absolute: bool, now: float) -> float:
    """The deadline of a started time-out, as a float (an int too large for one is +-inf)."""
    try:
        return float(time) if absolute else now + time
    except OverflowError:
        return -math.inf if time < 0 else math.inf


def _apply(timers: dict, actions: Iterable[TimerAction], now: float) -> None:
    for a in actions:
        key = a.key
        if a.op == "cancel":
            timers.pop(key, None)
        elif a.op == "update":
            running = timers.get(key)
            if running is None:
                timers[key] = Timer(now, a.content)
            else:
                timers[key] = Timer(running.deadline, a.content)
        else:
            timers.pop(key, None)  # a restarted timer goes last among equal deadlines
            timers[key] = Timer(_deadline(a.time, a.absolute, now), a.content)


def next_timers(
    timers: Mapping[Hashable, Timer],
    actions: Iterable[TimerAction],
    *,
    changed: bool,
    queued: bool,
    now: float,
) -> dict[Hashable, Timer]:
    """The running time-outs after a transition (a new dict; ``timers`` is not changed).

    The event time-out is cancelled (the event cancelled it), the state
    time-out too if the state ``changed``; generic time-outs run on.  Then
    each of ``actions`` applies in order: cancel removes, update replaces the
    content and keeps the deadline (or starts a time-out of time 0 if none
    runs), start sets the deadline (``now + time``, or ``time`` itself when
    absolute); so the last action for a key wins.  Finally an event time-out
    is dropped if events are ``queued`` (the next one would cancel it).
    """
    out = dict(timers)
    out.pop(_EVENT_TIMEOUT, None)
    if changed:
        out.pop(_STATE_TIMEOUT, None)
    _apply(out, actions, now)
    if queued:
        out.pop(_EVENT_TIMEOUT, None)
    return out


def enter_timers(
    timers: Mapping[Hashable, Timer],
    actions: Iterable[TimerAction],
    *,
    queued: bool,
    now: float,
) -> dict[Hashable, Timer]:
    """The time-outs after an enter call's ``actions``, on top of its transition's ``timers``.

    Nothing is cancelled first: an enter call keeps the event time-out its
    transition set.  ``enter_timers(next_timers(t, a, ...), b, ...)`` equals
    ``next_timers(t, a + b, ...)``: the enter call's actions follow the
    transition's.
    """
    out = dict(timers)
    _apply(out, actions, now)
    if queued:
        out.pop(_EVENT_TIMEOUT, None)
    return out


def due(timers: Mapping[Hashable, Timer], now: float) -> Hashable | None:
    """The key of the time-out to deliver now: the earliest with ``deadline <= now``, or None.

    Of equal deadlines the one started first goes first.  A due time-out is
    delivered before any message not yet received (OTP's time-out zero rule).
    """
    best = None
    best_deadline = 0.0
    for key, t in timers.items():
        if t.deadline <= now and (best is None or t.deadline < best_deadline):
            best, best_deadline = key, t.deadline
    return best


def wait_time(timers: Mapping[Hashable, Timer], now: float) -> float | None:
    """Seconds until the earliest deadline (``0.0`` if one is due), or None when none can come."""
    earliest = math.inf
    for t in timers.values():
        if t.deadline < earliest:
            earliest = t.deadline
    if earliest == math.inf:
        return None
    return max(earliest - now, 0.0)


def fire(timers: Mapping[Hashable, Timer], key: Hashable) -> tuple[tuple, dict[Hashable, Timer]]:
    """Deliver time-out ``key``: its event ``(key, content)`` and the timers without it."""
    out = dict(timers)
    t = out.pop(key)
    return ((key, t.content), out)


# -- modes and names --------------------------------------------------------------------------


def callback_mode_of(mode: Any, state_enter: bool = False) -> Mode | Bad:
    """The callback mode a machine declares, with enter calls on if ``state_enter``.

    ``mode`` is :data:`HANDLE_EVENT_FUNCTION`, :data:`STATE_FUNCTIONS`, or a
    list or tuple of one of them plus optionally ``"state_enter"`` (OTP's
    ``callback_mode()``); anything else answers
    ``Bad(("bad_return_from_callback_mode", mode))``.
    """
    items = mode if type(mode) in (list, tuple) else [mode]
    function = None
    enter = state_enter is True
    for m in items:
        if _is(m, HANDLE_EVENT_FUNCTION) or _is(m, STATE_FUNCTIONS):
            function = m
        elif _is(m, "state_enter"):
            enter = True
        else:
            return Bad(("bad_return_from_callback_mode", mode))
    if function is None:
        return Bad(("bad_return_from_callback_mode", mode))
    return Mode(function, enter)


def state_function_name(state: Any) -> str | None:
    """The method a state_functions machine runs in ``state``, or None if no method can be it.

    A state must be a ``str`` that is an identifier, not private (``_x``) and
    not one of the machine's other callbacks (``init``, ``terminate``, ...).
    """
    if type(state) is not str or not state.isidentifier() or state.startswith("_"):
        return None
    if state in _NOT_STATES:
        return None
    return state


def last_event(event: Any) -> Any:
    """An event as a terminate report shows it: ``(type, content)``, a call as ``("call", request)``."""
    if type(event) is tuple and len(event) == 2:
        etype, content = event
        if type(etype) is tuple and etype and _is(etype[0], "call"):
            return ("call", content)
        return (etype, content)
    return event
