"""The running process and introspection: self, receive, state, process_info, flush."""

from __future__ import annotations

import sys
from typing import Any, Callable

from greenlet import getcurrent

from . import _process as P
from ._exceptions import Badarg
from . import _terms
from .decide import info as _decide_info

__all__ = [
    "self",
    "node",
    "state",
    "set_state",
    "update_state",
    "process_info",
    "processes",
    "is_alive",
    "flush",
]

_MISSING = object()


def self() -> P.Pid:
    """The running process's pid; a greenlet that is not a process gets one of its own."""
    return P.me()


def node() -> str:
    """The name of this node (``"nonode@nohost"`` until distribution starts one)."""
    return _terms.NODE


def state(pid: P.Pid | None = None) -> Any:
    """The running process's state, or ``pid``'s (like sys:get_state/1).

    A process has a state cell when it was spawned with ``state=`` (as
    :func:`ensemble.spawn_actor` does) or has called :func:`set_state`.
    ``state(pid)`` raises :class:`Badarg` for a process that has exited and
    for one without a state cell (a plain process, or a behaviour: use
    ``ensemble.sys.get_state``); ``state()`` of the running process answers
    None while it has none.  For a passivated ``pid`` this is a copy read
    from its image.
    """
    if pid is None:
        value = P.me().state
        return None if value is P.NO_STATE else value
    if type(pid) is not P.Pid or pid.reason is not P.ALIVE:
        raise Badarg(f"no such process: {pid!r}")
    if pid.image is not None:  # passivated: a copy, read from its image
        from . import _passivate

        value = _passivate.peek_state(pid)
    else:
        value = pid.state
    if value is P.NO_STATE:
        raise Badarg(
            f"{pid!r} has no state cell: it is not an actor (spawn_actor, spawn(state=...), set_state)"
        )
    return value


def set_state(value: Any) -> Any:
    """Replace the running process's state; returns it."""
    P.me().state = value
    return value


def update_state(fn: Callable[..., Any], *args: Any) -> Any:
    """Set the running process's state to ``fn(state, *args)``; returns the new state."""
    p = P.me()
    old = p.state
    p.state = value = fn(None if old is P.NO_STATE else old, *args)
    return value


def is_alive(pid: P.Pid) -> bool:
    """True while ``pid`` has not exited and no exit signal has doomed it.

    False from the moment an exit signal dooms it, also while its code still
    runs (``process_info(pid, "exit_pending")``).
    """
    if type(pid) is not P.Pid:
        raise Badarg(f"not a pid: {pid!r}")
    return pid.reason is P.ALIVE and pid.dying is P.ALIVE


def processes() -> list[P.Pid]:
    """The live processes of this node, oldest first."""
    return sorted(P.TABLE.values(), key=lambda p: p.id)


def _status(p: P.Pid) -> str:
    if p.reason is not P.ALIVE:
        return "exiting"
    if p.life is not P.RUNNING:
        return "passivated" if p.life == P.PASSIVATED else "hibernating"
    if P.in_receive(p):
        return "waiting"
    return "running"


#: How many frames of a stack :func:`_frames` reads at most.
_MAX_FRAMES = 256
#: How many queued messages the memory estimate weighs one by one (the rest at their mean).
_SAMPLED_MESSAGES = 64


def _top_frame(p: P.Pid) -> Any:
    """The innermost frame of ``p``'s greenlet while it is suspended (or is the caller), else None."""
    g = p._glet
    if g is None:
        return None
    if g is getcurrent():
        return sys._getframe(3)  # past this function, _frames and the lambda: the caller's frame
    return getattr(g, "gr_frame", None)


def _frames(p: P.Pid) -> list[tuple]:
    """``(module, qualname, line)`` of each frame on ``p``'s stack, innermost first (at most _MAX_FRAMES)."""
    out: list[tuple] = []
    f = _top_frame(p)
    while f is not None and len(out) < _MAX_FRAMES:
        code = f.f_code
        out.append((f.f_globals.get("__name__"), code.co_qualname, f.f_lineno))
        f = f.f_back
    return out


def _memory(p: P.Pid) -> int:
    """An estimate, in bytes, of what ``p`` holds: see :func:`process_info` (``memory``)."""
    size = sys.getsizeof(p)
    mailbox = p.mailbox
    if mailbox is not P.NO_MAIL:
        size += sys.getsizeof(mailbox)
        n = len(mailbox)
        if n:
            sample = [mailbox[i] for i in range(min(n, _SAMPLED_MESSAGES))]
            size += sum(sys.getsizeof(m) for m in sample) * n // len(sample)
    for held in (p.links, p.monitors, p.watchers, p.aliases):
        if held:
            size += sys.getsizeof(held)
    if p.state is not P.NO_STATE:
        size += sys.getsizeof(p.state)
    g = p._glet
    if g is not None:
        size += sys.getsizeof(g)
        f = _top_frame(p)
        depth = 0
        while f is not None and depth < _MAX_FRAMES:
            size += sys.getsizeof(f)
            f = f.f_back
            depth += 1
    return size


_INFO: dict[str, Callable[[P.Pid], Any]] = {
    "registered_name": lambda p: p.name,
    "status": _status,
    "message_queue_len": lambda p: len(p.mailbox) if p.reason is P.ALIVE else 0,
    "messages": lambda p: list(p.mailbox) if p.reason is P.ALIVE else [],
    "links": lambda p: sorted(p.links or ()),
    "monitors": lambda p: [("process", m[1]) for m in list((p.monitors or {}).values())],
    "monitored_by": lambda p: [w[0] for w in list((p.watchers or {}).values())],
    "trap_exit": lambda p: p.trap,
    "initial_call": lambda p: p.initial_call,
    "ancestors": lambda p: list(p.ancestors),
    "dispatcher": lambda p: p.dispatcher,
    "carrier": lambda p: p.carrier.name,
    "exit_pending": lambda p: p.reason is not P.ALIVE,
    "current_function": lambda p: _decide_info.current_function(_frames(p)),
    "memory": _memory,
}

#: The keys process_info answers, in the order the full answer lists them.
INFO_KEYS = tuple(_INFO)


def process_info(pid: P.Pid, key: str | None = None) -> Any:
    """Facts about a live process: a dict of every key, or the value of one.

    Keys: ``registered_name`` (None if none), ``status`` (``running``,
    ``waiting``, ``hibernating``, ``passivated``, ``exiting``),
    ``message_queue_len``, ``messages``, ``links``, ``monitors``
    (``("process", pid_or_(name, node))`` each), ``monitored_by``,
    ``trap_exit``, ``initial_call`` (``(module, qualname, arity)``),
    ``ancestors``, ``dispatcher`` (the dispatcher's name), ``carrier`` (the
    name of the carrier thread it runs on, e.g. ``"blocking-3"``),
    ``exit_pending``, ``current_function`` (``(module, qualname, line)`` of
    the innermost frame of the process's own code, past the runtime's
    plumbing; None while it runs on another thread or has no stack:
    hibernated, passivated, not started) and ``memory`` (an estimate in
    bytes: the pid record, the mailbox with its messages' shallow sizes, the
    link and monitor tables, the state cell's shallow size, and the greenlet
    with its Python frames; objects shared with others are not counted).
    None for a process that has exited; :class:`Badarg` for an unknown key
    or a non-pid.

    A straggler is the exception: a process whose exit has settled (its
    links and monitors have fired, its name is free, :func:`is_alive` is
    False) but whose code still runs, because the exit signal could not land
    -- stuck in a native call on a ``"blocking"`` or :func:`dispatcher.define`
    carrier, computing without yielding, or swallowing the signal in a raw
    gevent wait.  Until it stops (at its next call into ensemble, or when its
    function returns) it is shown with ``exit_pending`` True and ``status``
    ``"exiting"``; no links, monitors or messages.  ``exit_pending`` is False
    for every other process.
    """
    if type(pid) is not P.Pid:
        raise Badarg(f"process_info needs a pid, not {pid!r}")
    if key is not None and key not in _INFO:
        raise Badarg(f"unknown process_info key {key!r}; known: {', '.join(INFO_KEYS)}")
    with P.LOCK:
        if pid.reason is not P.ALIVE and not P.is_straggler(pid):
            return None
        if key is not None:
            return _INFO[key](pid)
        return {k: f(pid) for k, f in _INFO.items()}


def flush() -> list[Any]:
    """Print and remove every message waiting for the shell; returns them (shell's flush/0)."""
    p = P.me()
    taken = []
    mailbox = p.mailbox
    while mailbox:
        m = mailbox.popleft()
        taken.append(m)
        print(f"Shell got {m!r}", file=sys.stdout)
    return taken
