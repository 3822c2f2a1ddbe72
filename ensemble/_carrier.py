"""A carrier: one native OS thread running its own gevent hub.

Every process lives on one carrier for its whole life.  A carrier runs callbacks
on its hub; :meth:`Carrier.call_soon` is the only door into it and is safe from
any thread (it uses the loop's thread-safe callback when called from another
thread).  The default carrier is the hub of the thread that imported ensemble
(normally the main thread: the gevent application's own hub); the others are
threads started by :mod:`ensemble.dispatcher`.

Thread affinity: ``hub``, ``loop`` and the greenlets of a carrier may only be
touched from its own thread; everything else goes through ``call_soon``.
"""

from __future__ import annotations

from typing import Any, Callable

import gevent
from gevent.hub import get_hub

from ._threads import allocate_lock, get_ident, start_new_thread
from .decide.deadlines import MIN_LIMIT

__all__ = ["Carrier", "carrier_of_this_thread"]


def _noop() -> None:
    pass


class Carrier:
    """One OS thread and its hub.  ``call_soon`` may be called from any thread."""

    __slots__ = (
        "name",
        "hub",
        "loop",
        "ident",
        "live",
        "parked",
        "handoff",
        "handoff_token",
        "handoff_at",
        "burst",
        "woken",
        "resuming",
        "deadlines",
        "deadlines_limit",
        "deadline_timer",
        "armed_at",
        "closing",
        "free",
        "_keepalive",
        "_hold",
        "_done",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.hub: Any = None  # Invariant: set before any call_soon; its thread only
        self.loop: Any = None
        self.ident = 0
        self.live = 0  # processes whose greenlet runs here; touched on this thread only
        self.parked = 0  # greenlets parked waiting for a wake; this thread only
        self.handoff: Any = None  # the process first woken from this thread since the last handoff, a hint for park
        self.handoff_token: Any = None  # the token of its park that wake claimed
        self.handoff_at = 0  # its place in ``woken`` (the wake order) while no park takes it
        self.burst = 0  # parks in a row that handed off instead of going to the hub
        self.woken: list = []  # [pid, token, pid, token...] woken from this thread, to resume
        self.resuming = False  # a hub callback to resume ``woken`` is scheduled
        self.deadlines: list = []  # heap of receives parked here with a timeout (decide.deadlines)
        self.deadlines_limit = MIN_LIMIT  # compact the heap when it grows past this
        self.deadline_timer: Any = None  # the hub timer armed at the earliest deadline, or None
        self.armed_at: float | None = None  # when deadline_timer fires (monotonic), or None
        self.closing = False
        #: greenlets of processes that ended here, parked for the next process to run in (see
        #: ensemble._process._run); this thread only
        self.free: list = []
        self._keepalive: Any = None  # ref'd async watcher of a carrier thread
        self._hold: Any = None  # adopted hubs: an async watcher, ref'd only while parked > 0
        self._done = allocate_lock()

    @classmethod
    def adopt_current_thread(cls, name: str) -> "Carrier":
        """The carrier of the calling thread's own hub (no new thread)."""
        c = cls(name)
        c.hub = get_hub()
        c.loop = c.hub.loop
        c.ident = get_ident()
        c._hold = c.loop.async_()
        c._hold.start(_noop)
        c._hold.ref = False
        return c

    def hold(self) -> None:
        """This thread: a greenlet parks and may be woken from another thread.

        An adopted hub (the app's own) would otherwise see no watcher and raise
        ``LoopExit`` while a wake-up from another carrier is still to come; so
        while anything is parked, one watcher keeps its loop alive.
        """
        self.parked += 1
        if self.parked == 1 and self._hold is not None:
            self._hold.ref = True

    def unhold(self) -> None:
        """This thread: a greenlet parked with :meth:`hold` has woken."""
        self.parked -= 1
        if self.parked == 0 and self._hold is not None:
            self._hold.ref = False

    def start_thread(self) -> "Carrier":
        """Start this carrier's OS thread and return once its hub is ready."""
        ready = allocate_lock()
        ready.acquire()
        self._done.acquire()
        start_new_thread(self._main, (ready,))
        ready.acquire()  # a real lock: blocks this thread until the hub exists
        return self

    def _main(self, ready: Any) -> None:
        try:
            hub = get_hub()
            self.hub = hub
            self.loop = hub.loop
            self.ident = get_ident()
            self._keepalive = hub.loop.async_()
            self._keepalive.start(_noop)
            ready.release()
            hub.join()  # runs the loop until the keepalive stops and nothing is left
            self.free.clear()  # here, in their thread: each ends (GreenletExit) as it goes
            hub.destroy(destroy_loop=True)
        finally:
            self._done.release()

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in this carrier's hub, soon; safe from any thread."""
        if get_ident() == self.ident:
            self.loop.run_callback(fn, *args)
        else:
            self.loop.run_callback_threadsafe(fn, *args)

    def request_stop(self) -> None:
        """Let the thread end once no process runs on it (any thread)."""
        self.closing = True
        if self._keepalive is not None:
            self.call_soon(self._stop_if_idle)

    def _stop_if_idle(self) -> None:
        """In this carrier's hub: drop the keepalive when closing and idle."""
        if self.closing and self.live == 0 and self._keepalive is not None:
            self._keepalive.stop()
            self._keepalive.close()
            self._keepalive = None

    def process_ended(self) -> None:
        """In this carrier's thread: one process's greenlet has finished."""
        self.live -= 1
        if self.closing and self.live == 0:
            self._stop_if_idle()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block the calling thread until this carrier's thread has ended."""
        if self._done.acquire(True, -1 if timeout is None else timeout):
            self._done.release()
            return True
        return False


_foreign: dict[int, Carrier] = {}
_foreign_lock = allocate_lock()


def carrier_of_this_thread() -> Carrier:
    """The carrier for the calling thread's hub, adopting it on first use.

    Used for shell processes: a greenlet that is not a process but receives,
    links or monitors lives on whatever thread it runs on.
    """
    ident = get_ident()
    c = _foreign.get(ident)
    if c is None:
        with _foreign_lock:
            c = _foreign.get(ident)
            if c is None:
                c = Carrier.adopt_current_thread(f"thread-{ident}")
                _foreign[ident] = c
    return c


def register_thread_carrier(c: Carrier) -> None:
    """Record ``c`` as the carrier of its own thread (dispatchers call this)."""
    with _foreign_lock:
        _foreign[c.ident] = c


__all__ += ["register_thread_carrier"]
del gevent
