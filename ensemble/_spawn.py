"""Spawning, joining and hibernating processes."""

from __future__ import annotations

from time import monotonic as _monotonic
from typing import Any, Callable

from . import _process as P
from . import _pools
from ._carrier import Carrier
from ._exceptions import Badarg, Exit, Hibernate
from ._parker import Parker
from ._terms import TIMEOUT, Ref, make_ref
from .decide.signal import is_normal

__all__ = [
    "spawn",
    "spawn_link",
    "spawn_monitor",
    "spawn_actor",
    "hibernate",
    "join",
    "exit_reason",
]


def _initial_call(fn: Any, nargs: int) -> tuple:
    """``(module, qualname, nargs)`` of ``fn``: one shared tuple per distinct answer."""
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    call = (module, qualname, nargs)
    return _INITIAL_CALLS.setdefault(call, call)


#: The initial calls answered so far, each kept once (there are as many as spawned functions).
_INITIAL_CALLS: dict[tuple, tuple] = {}


def spawn(
    fn: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    link: bool = False,
    trap_exit: bool = False,
    state: Any = P.NO_STATE,
    dispatcher: str = "default",
    initial_call: tuple | None = None,
) -> P.Pid:
    """Start ``fn(*args)`` in a new process and return its pid (erlang:spawn_opt).

    A name or link given here is in place before ``fn`` runs.  A taken name or
    an unknown dispatcher raises :class:`Badarg` and spawns nothing.  The exit
    reason is ``"normal"`` when ``fn`` returns, ``r`` for an uncaught
    ``exit(r)``, and the exception object itself for a crash (which is also
    reported through the logger).  ``state`` gives the process a state cell
    (:func:`ensemble.state`); without it the process has none until it calls
    ``set_state``.
    """
    _spawn, _ref = _spawn_opt(fn, args, name, link, False, trap_exit, state, dispatcher, initial_call)
    return _spawn


def spawn_link(fn: Callable[..., Any], *args: Any, **opts: Any) -> P.Pid:
    """:func:`spawn` with ``link=True``: the link exists before ``fn`` runs."""
    opts["link"] = True
    return spawn(fn, *args, **opts)


def spawn_monitor(fn: Callable[..., Any], *args: Any, **opts: Any) -> tuple[P.Pid, Ref]:
    """:func:`spawn` and monitor the new process atomically; returns ``(pid, ref)``."""
    if not opts:  # the commonest spawn_monitor: no option to take out of opts
        return _spawn_opt(fn, args, None, False, True, False, P.NO_STATE, "default", None)
    return _spawn_opt(
        fn,
        args,
        opts.pop("name", None),
        opts.pop("link", False),
        True,
        opts.pop("trap_exit", False),
        opts.pop("state", P.NO_STATE),
        opts.pop("dispatcher", "default"),
        opts.pop("initial_call", None),
        **opts,
    )


def _spawn_opt(
    fn: Any,
    args: tuple,
    name: Any,
    link: bool,
    monitor: bool,
    trap_exit: bool,
    state: Any,
    dispatcher: str,
    initial_call: Any,
    **unknown: Any,
) -> tuple[P.Pid, Any]:
    if unknown:
        raise Badarg(f"unknown spawn option(s): {', '.join(sorted(unknown))}")
    if not callable(fn):
        raise Badarg(f"spawn needs a callable, not {fn!r}")
    if name is not None and (type(name) is not str or name == "undefined"):
        raise Badarg(f"a process name must be a str other than 'undefined', not {name!r}")
    if name is not None and name in P.NAMES:  # before place(), which may start a pool
        raise Badarg(f"name {name!r} is already registered to {P.NAMES.get(name)!r}")
    carrier = _pools.place(dispatcher)
    if type(carrier) is not Carrier:  # a carrier node: a dispatcher of OS processes
        return carrier.spawn(fn, args, name, link, monitor, trap_exit, state)
    parent = P.me() if (link or monitor) else P.current()
    ancestors = (parent, *parent.ancestors) if parent is not None else ()
    p = P.new_pid(
        fn,
        args,
        carrier,
        dispatcher,
        bool(trap_exit),
        state,
        ancestors,
        initial_call or _initial_call(fn, len(args)),
    )
    ref = None
    if name is None and not link and not monitor:
        P.TABLE[p.id] = p  # atomic under the GIL: the lock guards multi-step changes
        P.start(p)
        return p, None
    with P.LOCK:
        if name is not None:
            holder = P.NAMES.get(name)
            if holder is not None:
                raise Badarg(f"name {name!r} is already registered to {holder!r}")
            P.NAMES[name] = p
            p.name = name
        P.TABLE[p.id] = p
        if link:
            P.link_locked(parent, p)
        if monitor:
            ref = make_ref()
            P.add_monitor_locked(parent, p, p, ref)
    P.start(p)
    return p, ref


def spawn_actor(
    handler: Callable[[Any, Any], Any], initial: Any, **opts: Any
) -> P.Pid:
    """Spawn a process that loops ``state = handler(state, msg)`` over its mailbox.

    The state lives in the process's state cell (``state(pid)`` reads it from
    outside).  If the handler raises, the process exits with that exception and
    the cell keeps its last good value; ``exit(r)`` stops it with ``r``.
    """
    opts["state"] = initial
    opts.setdefault("initial_call", _initial_call(handler, 2))
    return spawn(_actor_loop, handler, **opts)


def _actor_loop(handler: Callable[[Any, Any], Any]) -> None:
    p = P.current()
    assert p is not None
    while True:
        msg = P.receive()
        p.state = handler(p.state, msg)


def hibernate(fn: Callable[..., Any], *args: Any) -> Any:
    """Never returns: end this process's greenlet; the next message or signal runs ``fn(*args)``.

    The process keeps its pid, name, links, monitors, mailbox and state while
    hibernating; a message already waiting wakes it at once.  ``finally``
    blocks of the abandoned call stack run as the greenlet unwinds.
    """
    p = P.current()
    if p is None or p.shell:
        raise Badarg("hibernate is only for a spawned process")
    if not callable(fn):
        raise Badarg(f"hibernate needs a callable, not {fn!r}")
    raise Hibernate(fn, args)


def _wait_exit(pid: Any, timeout: float | None) -> bool:
    """Wait until ``pid`` has settled; False if ``timeout`` passed first."""
    if type(pid) is not P.Pid:
        raise Badarg(f"not a pid: {pid!r}")
    if timeout is not None:
        timeout = P.check_timeout(timeout)
    P.check_caller()
    if pid.reason is not P.ALIVE:
        return True
    me = P.current()
    if me is pid:
        raise Badarg("a process cannot wait for its own exit")
    if me is not None and not me.shell and me.dying is P.ALIVE:
        return _park_until_exit(me, pid, timeout)
    parker = Parker()
    if not P.on_exit(pid, parker.unpark):
        return True
    try:
        if parker.park(timeout):
            return True
    finally:
        P.cancel_on_exit(pid, parker.unpark)
    return pid.reason is not P.ALIVE


def _park_until_exit(me: P.Pid, pid: P.Pid, timeout: float | None) -> bool:
    """:func:`_wait_exit` in the live process ``me``: wait in its own park (as a receive
    does, taking no message), woken by ``pid``'s settling (see :func:`P.on_exit`); a
    message that wakes it meanwhile only makes it park again.  A doom lands here as in a
    receive."""
    if not P.on_exit(pid, me):
        return True
    deadline = None if timeout is None else _monotonic() + timeout
    P.JOINING.add(me)  # not "waiting" for process_info: it waits for no message
    try:
        while pid.reason is P.ALIVE:
            if me.dying is not P.ALIVE:
                P.raise_doom(me)
            if deadline is not None and deadline <= _monotonic():
                return pid.reason is not P.ALIVE
            P.park(me, len(me.mailbox), deadline)
    finally:
        P.JOINING.discard(me)
        P.cancel_on_exit(pid, me)
    return True


def join(pid: P.Pid, timeout: float | None = None) -> Any:
    """Wait for ``pid`` to exit and return its function's value; works from anywhere.

    After a normal exit (``"normal"``, or ``exit("normal")``) returns the value
    (``None`` for ``exit("normal")``); after a crash raises the exception the
    process died of; after any other reason raises :class:`Exit` with it.
    Raises ``TimeoutError`` if ``timeout`` seconds pass first.
    """
    if not _wait_exit(pid, timeout):
        raise TimeoutError(f"join timed out: {pid!r} is still running")
    reason = pid.reason
    if is_normal(reason):
        return pid.value
    if isinstance(reason, BaseException) and not isinstance(reason, Exit):
        raise reason
    raise Exit(reason)


def exit_reason(pid: P.Pid, timeout: float | None = None) -> Any:
    """Wait for ``pid`` to exit and return its exit reason, or ``TIMEOUT``."""
    if not _wait_exit(pid, timeout):
        return TIMEOUT
    return pid.reason
