"""Dispatchers: named pools of carriers (native OS threads, one gevent hub each).

``"default"`` is the hub of the thread that imported ensemble (the gevent
application's own hub), so processes there share the app's greenlets, sockets
and locks.  ``"blocking"`` has 16 carriers, for processes that call blocking
code gevent cannot patch (a C driver, the original ``time.sleep``): such a call
stalls only its own carrier.  A pool starts its threads when the first process
is spawned on it; a process stays on its carrier for life; carriers of a pool
are handed out round-robin.

A process stuck in a native call cannot be interrupted.  Killed meanwhile, it
is dead at once (links and monitors fire, its name is free, ``is_alive`` is
False), but its code runs on until the call returns, and stops at its next
call into ensemble (or at its next switch to the hub).  Until then
``process_info(pid)`` still answers for it, with ``"exit_pending": True``,
``"status": "exiting"``, its ``"dispatcher"`` and its ``"carrier"`` (the name
of the thread it holds, e.g. ``"blocking-3"``): the way to find the stragglers
that keep a pool's threads busy.

Inside a carrier, :func:`yield_` lets the other runnable processes of the
calling carrier run, and :func:`call_soon` runs a callback on the calling
carrier's hub once they have (both for batching work that others may join).
"""

from __future__ import annotations

from typing import Any, Callable

from gevent import get_hub as _get_hub
from gevent import sleep as _sleep
from greenlet import getcurrent as _getcurrent

from . import _pools
from . import _process as P
from ._exceptions import Badarg
from ._pools import BLOCKING, DEFAULT

__all__ = ["define", "shutdown", "dispatchers", "carriers", "yield_", "call_soon", "DEFAULT", "BLOCKING"]


def define(name: str, size: int | None = None, *, processes: int | None = None) -> str:
    """Define (or redefine, until its pool has started) a dispatcher of ``size`` carriers, or of
    ``processes`` carrier nodes (exactly one of the two).

    Each carrier is one OS thread; a process stuck in a native call holds its
    carrier until the call returns, also after a kill (see the module
    docstring: ``process_info(pid, "exit_pending")`` shows such a straggler).
    With ``processes=n`` the carriers are ``n`` local OS processes, each a node
    (:mod:`ensemble.dist.os_carriers`): for CPU-bound Python code, which threads
    cannot run in parallel.  Raises :class:`Badarg` for a name that is not a
    ``str``, for ``"default"``, for a count that is not a positive ``int``, and
    for a pool already started.
    """
    if type(name) is not str or not name:
        raise Badarg(f"dispatcher name must be a non-empty str, not {name!r}")
    if name == DEFAULT:
        raise Badarg("the default dispatcher cannot be redefined")
    if (size is None) == (processes is None):
        raise Badarg("define a dispatcher with either size (threads) or processes, not both or neither")
    count = size if processes is None else processes
    if type(count) is not int or count < 1:
        what = "size" if processes is None else "processes"
        raise Badarg(f"dispatcher {what} must be a positive int, not {count!r}")
    if processes is not None:
        from .dist.os_carriers import OsPool

        pool: Any = OsPool(name, processes)
    else:
        pool = _pools.ThreadPool(name, count)
    with _pools.LOCK:
        old = _pools.POOLS.get(name)
        if old is not None and (old.carriers or old.closed):
            raise Badarg(f"dispatcher {name!r} has started and cannot be redefined")
        _pools.POOLS[name] = pool
    return name


def shutdown(name: str) -> None:
    """Refuse new spawns on ``name``; its carriers end once their processes have.

    The carrier nodes of a dispatcher of OS processes are stopped at once: their
    processes end, and links and monitors to them fire with ``"noconnection"``.

    ``"default"`` cannot be shut down (:class:`Badarg`); an unknown name is ignored.
    """
    if name == DEFAULT:
        raise Badarg("the default dispatcher cannot be shut down")
    with _pools.LOCK:
        pool = _pools.POOLS.pop(name, None)
        if pool is None:
            return
        pool.closed = True
        carriers = list(pool.carriers)
    if type(pool) is not _pools.ThreadPool:
        pool.stop()  # a dispatcher of OS processes: its carrier nodes exit now
        return
    for c in carriers:
        c.request_stop()


def dispatchers() -> list[str]:
    """The defined dispatchers: ``"default"`` first, then the others sorted."""
    with _pools.LOCK:
        others = sorted(n for n in _pools.POOLS if n != DEFAULT)
    return [DEFAULT, *others]


def carriers(name: str) -> list[str]:
    """The carriers of dispatcher ``name``, in order: thread names (``"blocking-3"``, what
    ``process_info(pid, "carrier")`` answers), or a dispatcher of OS processes' node names;
    empty until its first spawn starts them, and for an unknown name."""
    with _pools.LOCK:
        pool = _pools.POOLS.get(name) if type(name) is str else None
        held = list(pool.carriers) if pool is not None else []
    return [c.node if type(pool) is not _pools.ThreadPool else c.name for c in held]


def yield_() -> None:
    """Let every process already runnable on the calling carrier run, then return (``erlang:yield/0``).

    Called by a process (or any greenlet other than the hub) on a carrier's
    thread; only that carrier is concerned.  The processes woken before the
    call (a message, a timer, a switch already scheduled) each get a turn, in
    the order they were woken, before the caller resumes; ones woken meanwhile
    may or may not.  With nothing runnable it returns soon, after one turn of
    the carrier's hub.  An exit signal that dooms the process meanwhile lands
    here: it is raised as the process resumes (or thrown in while it waits), as
    in a receive.  A dead process's yield (a straggler's) and a greenlet that is
    not a process yield through ``gevent.sleep(0)``.
    """
    try:
        p = _getcurrent().ensemble_pid
    except AttributeError:  # a greenlet that is not a process
        _sleep(0)
        return
    if p.dying is not _ALIVE:
        _sleep(0)
        return
    # One hub callback, queued behind every callback already scheduled (so the processes
    # woken before this call, and switches already scheduled, run first), switches back
    # into the process.  It is the only thing that resumes a process's greenlet without
    # a park token (see P.park) but an exception thrown in (a doom, a gevent Timeout):
    # then the callback is cancelled, so that it never switches into a later wait.
    c = p.carrier
    resume = c.loop.run_callback(p._glet.switch)
    c.burst = 0  # the hub gets its turn (P.park's handoff count)
    try:
        _switch(c.hub)
    except BaseException:
        resume.stop()
        raise
    if p.dying is not _ALIVE:  # doomed meanwhile: the signal lands here, as after a park
        P.raise_doom(p)


_ALIVE, _switch = P.ALIVE, P._switch


def call_soon(fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on the calling carrier's hub, after the processes runnable now have run.

    Called on a carrier's thread (by a process, or any greenlet of that
    thread).  Returns at once; ``fn`` runs later on the same thread, in the
    hub (not in a process: it must neither block nor wait for a message), after
    every process already woken there has had its turn, and in call order with
    the other ``call_soon`` callbacks.  It runs even if the caller has ended
    meanwhile.  An exception of ``fn`` is reported by the hub (printed) and
    does not stop it.  From another thread, send the carrier's process a
    message instead.
    """
    _get_hub().loop.run_callback(fn, *args)
