"""gen_statem: a process that runs a state machine through callbacks (OTP's gen_statem).

A machine is an object with ``init()`` answering ``("ok", state, data[,
actions])`` (or ``("stop", r)``, ``("error", r)``, ``"ignore"``) and, in the
default ``"handle_event_function"`` mode, ``handle_event(event_type,
content, state, data)``; with the class attribute ``callback_mode =
"state_functions"`` it has instead one method per state, named after the
state (states are ``str``), taking ``(event_type, content, data)``.
Optional: ``terminate(reason, state, data)``, ``format_status(status)``, and
``state_enter = True`` (or ``callback_mode = [mode, "state_enter"]``, or the
start option) for state enter calls ``("enter", old_state, ...)``::

    class Door:
        callback_mode = "state_functions"

        def init(self):
            return ("ok", "locked", "1234")

        def locked(self, event_type, content, code):
            match (event_type, content):
                case (("call", from_), ("unlock", c)) if c == code:
                    relock = ("state_timeout", 5, "lock")
                    return ("next_state", "open", code, [("reply", from_, "ok"), relock])
                case (("call", from_), _):
                    return ("keep_state_and_data", ("reply", from_, "wrong"))

        def open(self, event_type, content, code):
            match (event_type, content):
                case ("state_timeout", "lock"):
                    return ("next_state", "locked", code)
                case (("call", _), _):
                    return ("keep_state_and_data", "postpone")

    door = gen_statem.start(Door())
    gen_server.call(door, ("unlock", "1234"))       # "ok"

Event types: ``("call", from_)``, ``"cast"``, ``"info"``, ``"timeout"``,
``"state_timeout"``, ``("timeout", name)``, ``"internal"`` and ``"enter"``.
Clients use :func:`ensemble.gen_server.call`, ``cast`` and ``stop`` (the
message protocol is gen_server's; this module re-exports them); answer a call
with a ``("reply", from_, value)`` action or :func:`reply`.

What each return and action means, and how the event queue and the
time-outs move, is decided by :mod:`ensemble.decide.gen_statem`; this module carries it
out.  A due time-out is delivered before any message not yet received; a
hibernating machine still gets its time-outs (a timer wakes it).  sys sees
the state as ``(state, data)``.  A callback that raises makes the machine run
``terminate`` with the exception and exit with it; an abnormal end is
reported through :mod:`ensemble.logger` (``gen_statem_terminate``).
"""

from __future__ import annotations

from time import monotonic
from typing import Any, Final

from . import _gen
from . import _process as P
from . import _sysmsg
from . import logger as _logger
from .decide import gen_statem as sm
from ._exceptions import Exit
from ._spawn import hibernate
from ._terms import TIMEOUT
from .decide.signal import is_shutdown

__all__ = ["GenStatem", "BadState", "start", "start_link", "enter_loop", "call", "cast", "reply", "stop"]

call = _gen.call
reply = _gen.reply
cast = _gen.cast
stop = _gen.stop

# The message a hibernating machine's wake timer sends itself: never a user's.
_WAKE: Final = object()


class GenStatem:
    """A base class with OTP's defaults: handle_event_function mode, no enter calls, no cleanup."""

    callback_mode: Any = sm.HANDLE_EVENT_FUNCTION
    state_enter: bool = False

    def terminate(self, reason: Any, state: Any, data: Any) -> Any:
        """Nothing to clean up by default."""
        return None


class BadState(_sysmsg.Refuse):
    """A sys.replace_state function answered something that is not ``(state, data)``.

    sys raises it as ``CallError(("bad_state", value))``; the machine is unharmed.
    """

    def __init__(self, value: Any) -> None:
        super().__init__(("bad_state", value))
        self.value = value


# --------------------------------------------------------------------------
# Starting
# --------------------------------------------------------------------------


def start(
    machine: Any,
    *,
    name: str | None = None,
    timeout: float | None = None,
    trap_exit: bool = False,
    hibernate_after: float | None = None,
    dispatcher: str = "default",
    state_enter: bool = False,
) -> Any:
    """Start a machine process and return its pid once ``init`` has returned.

    Answers ``"ignore"`` when init ignores; raises :class:`ensemble.StartError`
    with ``("already_started", pid)`` for a taken name, ``"timeout"`` when
    init takes longer than ``timeout`` seconds, init's failure reason,
    ``("bad_return_from_init", ret)``, or the reason of a bad init action.
    ``machine`` is an instance, or a class to instantiate with no arguments;
    ``state_enter=True`` turns state enter calls on.
    """
    return _start(machine, False, name, timeout, trap_exit, hibernate_after, dispatcher, state_enter)


def start_link(
    machine: Any,
    *,
    name: str | None = None,
    timeout: float | None = None,
    trap_exit: bool = False,
    hibernate_after: float | None = None,
    dispatcher: str = "default",
    state_enter: bool = False,
) -> Any:
    """:func:`start`, linked to the caller; a failed start does not take the caller down."""
    return _start(machine, True, name, timeout, trap_exit, hibernate_after, dispatcher, state_enter)


def _start(
    machine: Any,
    link: bool,
    name: str | None,
    timeout: float | None,
    trap_exit: bool,
    hibernate_after: float | None,
    dispatcher: str,
    state_enter: bool,
) -> Any:
    return _gen.start_behaviour(
        machine,
        _init_it,
        (name, hibernate_after, state_enter),
        link=link,
        name=name,
        timeout=timeout,
        trap_exit=trap_exit,
        dispatcher=dispatcher,
        idle_timeouts=(hibernate_after,),
    )


def _mode_of(machine: Any, state_enter: bool) -> sm.Mode | sm.Bad:
    mode = getattr(machine, "callback_mode", sm.HANDLE_EVENT_FUNCTION)
    return sm.callback_mode_of(mode, state_enter is True or getattr(machine, "state_enter", False) is True)


class _Machine:
    """The loop's state: the machine, its state and data, its queues and time-outs."""

    __slots__ = (
        "machine",
        "function",
        "state_enter",
        "state",
        "data",
        "postponed",
        "queue",
        "timers",
        "hibernate",
        "wake",
        "parent",
        "name",
        "hibernate_after",
        "debug",
        "pid",
    )

    def __init__(self, machine: Any, mode: sm.Mode, parent: Any, name: Any, hib: Any) -> None:
        self.machine = machine
        self.function = mode.function
        self.state_enter = mode.state_enter
        self.state: Any = None
        self.data: Any = None
        self.postponed: tuple = ()
        self.queue: tuple = ()
        self.timers: dict = {}
        self.hibernate = False
        self.wake: Any = None  # the wake timer's ref while hibernating with time-outs
        self.parent = parent
        self.name = name
        self.hibernate_after = hib
        self.debug = _sysmsg.Debug()
        self.pid = P.me()

    # -- sys hooks ---------------------------------------------------------------

    def system_get_state(self) -> Any:
        return (self.state, self.data)

    def system_replace_state(self, fn: Any) -> Any:
        new = fn((self.state, self.data))
        if type(new) is not tuple or len(new) != 2:
            raise BadState(new)
        self.state, self.data = new
        return new

    def system_get_status(self) -> dict:
        shown = _format_status(self, self._status())
        return {
            "pid": self.pid,
            "name": self.name,
            "module": type(self.machine).__qualname__,
            "parent": self.parent,
            "state": (shown.get("state"), shown.get("data")),
        }

    def system_terminate(self, reason: Any) -> None:
        _terminate(self, reason, None)

    def _status(self, **more: Any) -> dict:
        return {
            "state": self.state,
            "data": self.data,
            "queue": self.queue,
            "postponed": self.postponed,
            "timeouts": {k: t.content for k, t in self.timers.items()},
            **more,
        }


def _init_it(starter: _gen.Starter, machine: Any, name: Any, hib: Any, state_enter: bool) -> None:
    """The new process: run init, acknowledge the starter, make the first transition, loop."""
    mode = _mode_of(machine, state_enter)
    if type(mode) is sm.Bad:
        _gen.init_fail(starter, ("error", mode.reason), mode.reason)
    m = _Machine(machine, mode, starter.pid, name, hib)
    try:
        ret = machine.init()
    except Exit as e:
        _gen.init_fail(starter, ("error", e.reason), e.reason)
    except Exception as e:  # a crash in init fails the start with the exception
        _gen.init_fail(starter, ("error", e), e, e)
    outcome = sm.init_of(ret)
    t = type(outcome)
    if t is sm.Init:
        m.state = outcome.state
        m.data = outcome.data
        _gen.init_ack(starter, ("ok", m.pid))
        _first(m, outcome.actions)
        _loop(m)
    elif t is sm.InitStop:
        _gen.init_fail(starter, ("error", outcome.reason), outcome.reason)
    elif t is sm.InitError:
        _gen.init_fail(starter, ("error", outcome.reason), "normal")
    elif t is sm.Ignore:
        _gen.init_fail(starter, "ignore", "normal")
    else:
        _gen.init_fail(starter, ("error", outcome.reason), outcome.reason)


def enter_loop(
    machine: Any,
    state: Any,
    data: Any,
    actions: Any = None,
    *,
    name: str | None = None,
    hibernate_after: float | None = None,
    state_enter: bool = False,
) -> None:
    """Make the calling process a machine in ``state`` with ``data`` (gen_statem:enter_loop); never returns.

    ``actions`` are read as init's.  With ``name`` the process must already
    be registered under it, else it exits with ``"process_not_registered"``.
    A bad action exits with its reason, a bad callback mode with
    ``("bad_return_from_callback_mode", mode)``.
    """
    me = P.me()
    if name is not None and P.NAMES.get(name) is not me:
        raise Exit("process_not_registered")
    mode = _mode_of(machine, state_enter)
    if type(mode) is sm.Bad:
        raise Exit(mode.reason)
    parsed = sm.NO_ACTIONS if actions is None else sm.actions_of(actions, sm.INIT)
    if type(parsed) is sm.Bad:
        raise Exit(parsed.reason)
    parent = me.ancestors[0] if me.ancestors else me
    m = _Machine(machine, mode, parent, name, hibernate_after)
    m.state = state
    m.data = data
    _first(m, parsed)
    _loop(m)


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


def _loop(m: _Machine) -> None:
    """Run events until the machine stops (the only place that receives)."""
    receive = P.receive
    debug = m.debug
    while True:
        if m.queue:
            event = m.queue[0]
            m.queue = m.queue[1:]
            _event(m, event)
            continue
        if debug.suspended:
            _decode(m, receive(_sysmsg.suspended_matcher(m.parent, m.pid.trap)))
            continue
        now = monotonic()
        key = sm.due(m.timers, now)
        if key is not None:
            event, m.timers = sm.fire(m.timers, key)
            _event(m, event)
            continue
        if m.hibernate:
            m.hibernate = False
            _hibernate(m, now)
        wait = sm.wait_time(m.timers, now)
        idle = m.hibernate_after
        if idle is not None and (wait is None or idle < wait):
            wait = idle
        else:
            idle = None
        msg = receive(timeout=wait)
        if msg is TIMEOUT:
            if idle is not None:
                _hibernate(m, monotonic())
            continue
        _decode(m, msg)


def _hibernate(m: _Machine, now: float) -> None:
    """Hibernate; a timer wakes the machine for its earliest time-out.  Never returns."""
    wait = sm.wait_time(m.timers, now)
    if wait is not None:
        from . import timer

        m.wake = timer.send_after(now + wait, m.pid, (_WAKE,), abs=True)
    hibernate(_wake, m)


def _wake(m: _Machine) -> None:
    """Back from hibernation: drop the wake timer and loop on."""
    if m.wake is not None:
        from . import timer

        timer.cancel_timer(m.wake)
        m.wake = None
    _loop(m)


def _decode(m: _Machine, msg: Any) -> None:
    """Turn one message into an event, or act on a system message or a parent's EXIT."""
    if type(msg) is tuple:
        n = len(msg)
        tag = msg[0] if n else None
        if n == 3 and type(tag) is str:
            if tag == _gen.CALL:
                _event(m, (("call", msg[1]), msg[2]))
                return
            if tag == _gen.SYSTEM:
                _sysmsg.handle(m.debug, msg[1], msg[2], m)
                return
            if tag == "EXIT" and msg[1] is m.parent and m.pid.trap:
                _terminate(m, msg[2], ("info", msg))
        elif n == 2 and type(tag) is str and tag == _gen.CAST:
            _event(m, ("cast", msg[1]))
            return
        elif n == 1 and tag is _WAKE:
            return
    _event(m, ("info", msg))


def _call(m: _Machine, etype: Any, content: Any, state: Any, data: Any, event: Any) -> Any:
    """Run the state callback for ``state``; a crash or a missing function terminates."""
    machine = m.machine
    if m.function == sm.STATE_FUNCTIONS:
        fname = sm.state_function_name(state)
        fn = getattr(machine, fname, None) if fname is not None else None
    else:
        fn = getattr(machine, "handle_event", None)
    if fn is None or not callable(fn):
        _terminate(m, ("undefined_state_function", state), event)
    try:
        if m.function == sm.STATE_FUNCTIONS:
            return fn(etype, content, data)
        return fn(etype, content, state, data)
    except Exit as e:
        _terminate(m, e.reason, event)
    except Exception as e:  # a crash in a callback: terminate with the exception
        _terminate(m, e, event)


def _event(m: _Machine, event: tuple) -> None:
    """Handle one event: the state callback, an enter call if due, then queues and time-outs."""
    _sysmsg.observed(m.debug, m.pid, event)
    etype, content = event
    old = m.state
    result = sm.result_of(sm.EVENT, _call(m, etype, content, old, m.data, event), old, m.data)
    if type(result) is sm.Stop:
        _stop(m, result, event)
    _reply_all(result.actions.replies)
    m.state = result.state
    m.data = result.data
    changed = not sm.same_state(result.state, old)
    _transition(m, result.actions, changed, result.repeat, event, old)


def _first(m: _Machine, actions: sm.Actions) -> None:
    """The transition into the first state: init's actions, then its enter call."""
    _reply_all(actions.replies)
    _transition(m, actions, True, False, None, m.state)


def _transition(
    m: _Machine, actions: sm.Actions, changed: bool, repeat: bool, event: Any, old: Any
) -> None:
    """Carry out a transition: the enter call if due, then the new queues and time-outs."""
    entered = sm.NO_ACTIONS
    if sm.calls_enter(m.state_enter, changed, repeat):
        ret = _call(m, "enter", old, m.state, m.data, event)
        result = sm.result_of(sm.ENTER, ret, m.state, m.data)
        if type(result) is sm.Stop:
            _stop(m, result, event)
        _reply_all(result.actions.replies)
        m.data = result.data
        entered = result.actions
    both = actions.then(entered)
    queues = sm.next_queues(changed, both.postponing, event, m.postponed, actions.events, m.queue)
    m.postponed = queues.postponed
    m.queue = queues.queue
    now = monotonic()
    queued = bool(m.queue)
    timers = sm.next_timers(m.timers, actions.timers, changed=changed, queued=queued, now=now)
    if entered is not sm.NO_ACTIONS:
        timers = sm.enter_timers(timers, entered.timers, queued=queued, now=now)
    m.timers = timers
    m.hibernate = both.hibernating


def _reply_all(replies: tuple) -> None:
    for from_, value in replies:
        _gen.reply(from_, value)


def _stop(m: _Machine, stop_: sm.Stop, event: Any) -> None:
    """Send the stop's replies, then terminate in its state with its data; never returns."""
    _reply_all(stop_.replies)
    m.state = stop_.state
    m.data = stop_.data
    _terminate(m, stop_.reason, event)


def _terminate(m: _Machine, reason: Any, event: Any) -> None:
    """Run ``terminate(reason, state, data)``, report an abnormal end, and exit; never returns."""
    fn = getattr(m.machine, "terminate", None)
    if fn is not None:
        try:
            fn(reason, m.state, m.data)
        except Exit as e:
            reason = e.reason
        except Exception as e:  # terminate's own crash becomes the exit reason
            reason = e
    if not is_shutdown(reason):
        status = _format_status(m, m._status(reason=reason))
        _logger.report(
            "gen_statem_terminate",
            pid=repr(m.pid),
            name=m.name,
            last_event=sm.last_event(event),
            state=status.get("state"),
            data=status.get("data"),
            reason=status.get("reason", reason),
        )
    raise Exit(reason)


def _format_status(m: _Machine, status: dict) -> dict:
    """``format_status(status)`` if the machine has one; the status as is if it raises."""
    fn = getattr(m.machine, "format_status", None)
    if fn is None:
        return status
    try:
        shown = fn(dict(status))
        return shown if isinstance(shown, dict) else status
    except Exception:  # noqa: BLE001 - OTP shows the unformatted status then
        return status
