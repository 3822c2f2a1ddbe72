"""The dispatchers' registry: each name's pool of carriers, and where a new process goes.

The public face is :mod:`ensemble.dispatcher`; this module holds the state it and the process
core share (``_process`` and ``_spawn`` import this, never the facade, which may start OS
processes through :mod:`ensemble.dist`).  A pool is a :class:`ThreadPool` (carriers are native
threads of this OS process) or any object with ``carriers``, ``closed``, ``place()`` and
``stop()`` (a dispatcher of OS processes: :class:`ensemble.dist.os_carriers.OsPool`).
"""

from __future__ import annotations

from typing import Any

from ._carrier import Carrier, register_thread_carrier
from ._exceptions import Badarg
from ._threads import allocate_lock

DEFAULT = "default"
BLOCKING = "blocking"


class ThreadPool:
    """The carriers of a dispatcher of native threads (started by the first spawn on it)."""

    __slots__ = ("name", "size", "carriers", "next", "closed")

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.carriers: list[Carrier] = []  # Invariant: empty until the pool starts
        self.next = 0
        self.closed = False


LOCK = allocate_lock()
_default_carrier = Carrier.adopt_current_thread(DEFAULT)
register_thread_carrier(_default_carrier)
POOLS: dict[str, Any] = {DEFAULT: ThreadPool(DEFAULT, 1), BLOCKING: ThreadPool(BLOCKING, 16)}
POOLS[DEFAULT].carriers.append(_default_carrier)


def default_carrier() -> Carrier:
    """The carrier of the ``"default"`` dispatcher."""
    return _default_carrier


def place(name: str) -> Any:
    """The carrier a new process on dispatcher ``name`` goes to (starts the pool): a
    :class:`Carrier`, or an :class:`~ensemble.dist.os_carriers.OsCarrier` on a dispatcher of
    OS processes.

    Raises :class:`Badarg` for an unknown or shut-down dispatcher.
    """
    if name == DEFAULT:
        return _default_carrier
    pool = POOLS.get(name) if type(name) is str else None
    if pool is None:
        raise Badarg(f"unknown dispatcher {name!r}")
    if type(pool) is not ThreadPool:
        return pool.place()
    carriers = pool.carriers
    if not carriers:
        with LOCK:
            if not pool.carriers:
                started = []
                for i in range(pool.size):
                    c = Carrier(f"{name}-{i}").start_thread()
                    register_thread_carrier(c)
                    started.append(c)
                pool.carriers = started
            carriers = pool.carriers
    i = pool.next
    pool.next = i + 1 if i + 1 < len(carriers) else 0
    return carriers[i]
