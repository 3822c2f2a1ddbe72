"""Timers: erlang:send_after/start_timer/cancel_timer/read_timer and the timer module.

Times are seconds (floats).  Every decision -- when a timer fires, in what
order, what a cancel answers, which timers an exit ends -- is
:class:`ensemble.decide.timer.TimerTable`'s; this module keeps one table for the
node, serves it with one timer server process (registered as
``"timer_server"``, started on first use, on a carrier thread of its own so
that timers fire while other carriers are busy), and carries out what fires.

* A timer to a pid is cancelled when that process exits.  A timer to a name
  looks the name up when it fires, and its message is dropped if nobody
  holds the name then.
* An interval fires at fixed deadlines (start + k * period) and ends when the
  process that started it exits.
"""

from __future__ import annotations

import math
from time import monotonic
from typing import Any, Callable

from . import _process as P
from . import dispatcher as _dispatcher
from ._exceptions import Badarg
from ._terms import TIMEOUT, Ref, make_ref
from ._threads import allocate_lock
from .decide.timer import Timer, TimerTable

__all__ = [
    "monotonic_time",
    "send_after",
    "start_timer",
    "cancel_timer",
    "read_timer",
    "apply_after",
    "send_interval",
    "apply_interval",
    "exit_after",
    "kill_after",
    "cancel",
]

_MISSING = object()
_SERVER_DISPATCHER = "ensemble.timer"

_lock = allocate_lock()  # guards _table and _server
_table = TimerTable()
_server: P.Pid | None = None


def monotonic_time() -> float:
    """The clock timers run on (seconds); an ``abs=True`` time is a deadline on it."""
    return monotonic()


# --------------------------------------------------------------------------
# The timer server
# --------------------------------------------------------------------------


def _ensure_server() -> P.Pid:
    """The timer server, started on first use and replaced whenever it has exited.

    A server that is doomed but not yet settled is left alone: its exit starts
    the next one, which reads the table (where every timer already is) first.
    """
    global _server
    s = _server
    if s is not None and s.reason is P.ALIVE:
        return s
    from ._spawn import spawn

    with _lock:
        s = _server
        if s is None or s.reason is not P.ALIVE:
            if _SERVER_DISPATCHER not in _dispatcher.dispatchers():
                _dispatcher.define(_SERVER_DISPATCHER, 1)
            s = _server = spawn(
                _serve, name="timer_server", dispatcher=_SERVER_DISPATCHER, trap_exit=True
            )
    if not P.on_exit(s, _ensure_server):
        return _ensure_server()
    return s


def _serve() -> None:
    """The timer server: sleep until the next deadline or a poke, fire what is due."""
    while True:
        with _lock:
            nd = _table.next_deadline()
        if nd is None:
            P.receive()
        else:
            wait = nd - monotonic()
            if wait > 0:
                P.receive(timeout=wait)
        while P.receive(timeout=0) is not TIMEOUT:
            pass  # pokes and trapped exits only say "look at the table again"
        with _lock:
            fired = _table.due(monotonic())
        for t in fired:
            _fire(t)


def _fire(t: Timer) -> None:
    kind = t.payload[0]
    if kind == "send":
        dest = t.dest
        if type(dest) is P.Pid:
            P.deliver(dest, t.payload[1])
        elif type(dest) is str:
            p = P.NAMES.get(dest)
            if p is not None:
                P.deliver(p, t.payload[1])
        else:
            from ._names import send

            send(dest, t.payload[1])
    elif kind == "apply":
        from ._spawn import spawn

        _, fn, args = t.payload
        spawn(fn, *args)
    elif kind == "exit":
        from ._links import exit as exit_signal

        _, target, reason = t.payload
        exit_signal(target, reason)


def _gone(p: P.Pid) -> None:
    """Exit hook: the timers whose destination or owner was ``p`` end with it."""
    with _lock:
        _table.gone(p)


# --------------------------------------------------------------------------
# Arming
# --------------------------------------------------------------------------


def _deadline(time: Any, absolute: bool) -> float:
    if type(time) is bool or not isinstance(time, (int, float)) or not math.isfinite(time):
        raise Badarg(f"a timer's time must be a finite number of seconds, not {time!r}")
    if absolute:
        return float(time)
    if time < 0:
        raise Badarg(f"a relative timer's time must be >= 0, not {time!r}")
    return monotonic() + time


def _check_dest(dest: Any) -> None:
    if type(dest) is P.Pid or type(dest) is str:
        return
    if type(dest) is tuple and len(dest) == 2 and type(dest[0]) is str:
        return
    raise Badarg(f"a timer's destination must be a pid, a name or (name, node), not {dest!r}")


def _arm(
    deadline: float,
    payload: tuple,
    *,
    dest: Any = None,
    every: float | None = None,
    owner: P.Pid | None = None,
    ref: Ref | None = None,
) -> Ref:
    P.check_caller()  # a dead process arms no timer
    server = _ensure_server()
    if ref is None:
        ref = make_ref()
    if type(dest) is P.Pid:
        dest.timers = True
    if owner is not None:
        owner.timers = True
    with _lock:
        earliest = _table.next_deadline()
        _table.arm(ref, deadline, every=every, dest=dest, owner=owner, payload=payload)
    if earliest is None or deadline < earliest:
        P.deliver(server, "poke")
    if type(dest) is P.Pid and dest.reason is not P.ALIVE:
        _gone(dest)  # it exited before its timer was in the table
    if owner is not None and owner.reason is not P.ALIVE:
        _gone(owner)
    return ref


def send_after(time: float, dest: Any, msg: Any = _MISSING, *, abs: bool = False) -> Ref:
    """Send ``msg`` to ``dest`` after ``time`` seconds; returns the timer's ref.

    ``send_after(time, msg)`` sends to the calling process (timer:send_after/2).
    With ``abs=True`` ``time`` is a deadline on :func:`monotonic_time`.
    """
    if msg is _MISSING:
        dest, msg = P.me(), dest
    _check_dest(dest)
    return _arm(_deadline(time, abs), ("send", msg), dest=dest)


def start_timer(time: float, dest: Any, msg: Any, *, abs: bool = False) -> Ref:
    """Send ``("timeout", ref, msg)`` to ``dest`` after ``time`` seconds; returns ``ref``."""
    _check_dest(dest)
    ref = make_ref()
    return _arm(_deadline(time, abs), ("send", ("timeout", ref, msg)), dest=dest, ref=ref)


def _answer(ref: Any, left: Any, tag: str, async_: bool, info: bool) -> Any:
    if async_:
        if info:
            P.deliver(P.me(), (tag, ref, left))
        return "ok"
    return left if info else "ok"


def cancel_timer(ref: Ref, *, async_: bool = False, info: bool = True) -> Any:
    """Cancel a timer: the seconds it had left, or False if it fired or was cancelled.

    ``async_=True`` answers ``"ok"`` and sends ``("cancel_timer", ref, left)``
    to the caller instead; ``info=False`` answers ``"ok"`` with no answer.
    """
    if not isinstance(ref, Ref):
        raise Badarg(f"not a timer ref: {ref!r}")
    with _lock:
        left = _table.cancel(ref, monotonic())
    return _answer(ref, left, "cancel_timer", async_, info)


def read_timer(ref: Ref, *, async_: bool = False, info: bool = True) -> Any:
    """The seconds a timer has left, or False (like :func:`cancel_timer`, cancelling nothing)."""
    if not isinstance(ref, Ref):
        raise Badarg(f"not a timer ref: {ref!r}")
    with _lock:
        left = _table.left(ref, monotonic())
    return _answer(ref, left, "read_timer", async_, info)


def apply_after(time: float, fn: Callable[..., Any], *args: Any) -> Ref:
    """Run ``fn(*args)`` in a new process after ``time`` seconds."""
    if not callable(fn):
        raise Badarg(f"apply_after needs a callable, not {fn!r}")
    return _arm(_deadline(time, False), ("apply", fn, args))


def _period(time: Any) -> float:
    _deadline(time, False)
    if time <= 0:
        raise Badarg(f"an interval's period must be > 0, not {time!r}")
    return float(time)


def send_interval(time: float, dest: Any, msg: Any = _MISSING) -> Ref:
    """Send ``msg`` to ``dest`` every ``time`` seconds until the caller exits or it is cancelled.

    ``send_interval(time, msg)`` sends to the calling process.
    """
    owner = P.me()
    if msg is _MISSING:
        dest, msg = owner, dest
    _check_dest(dest)
    every = _period(time)
    return _arm(monotonic() + every, ("send", msg), dest=dest, every=every, owner=owner)


def apply_interval(time: float, fn: Callable[..., Any], *args: Any) -> Ref:
    """Run ``fn(*args)`` in a new process every ``time`` seconds until the caller exits."""
    if not callable(fn):
        raise Badarg(f"apply_interval needs a callable, not {fn!r}")
    owner = P.me()
    every = _period(time)
    return _arm(monotonic() + every, ("apply", fn, args), every=every, owner=owner)


def exit_after(time: float, target: Any, reason: Any = _MISSING) -> Ref:
    """Send the exit signal ``reason`` to ``target`` after ``time`` seconds.

    ``exit_after(time, reason)`` targets the calling process.
    """
    if reason is _MISSING:
        target, reason = P.me(), target
    if type(target) is not P.Pid:
        raise Badarg(f"exit_after needs a pid, not {target!r}")
    return _arm(_deadline(time, False), ("exit", target, reason))


def kill_after(time: float, target: Any = None) -> Ref:
    """Send the exit signal ``"kill"`` to ``target`` (default: the caller) after ``time`` seconds."""
    if target is None:
        target = P.me()
    return exit_after(time, target, "kill")


def cancel(ref: Ref) -> str:
    """Cancel a timer of this module or erlang's; answers ``"ok"``."""
    cancel_timer(ref, info=False)
    return "ok"


P.exit_hooks.append(_gone)
