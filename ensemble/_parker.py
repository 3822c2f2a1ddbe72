"""A one-shot wake-up for any greenlet on any thread (used by join and exit_reason).

``Parker()`` is made by the greenlet that will wait; ``unpark()`` may be called
from any thread, any number of times, and wakes it at most once; ``park``
suspends the maker until woken or until ``timeout`` passes.
"""

from __future__ import annotations

from typing import Any

from greenlet import getcurrent

from ._carrier import carrier_of_this_thread
from ._terms import TIMEOUT
from ._threads import get_ident

__all__ = ["Parker"]

_WOKEN = object()


class Parker:
    """Wakes its maker once; ``unpark`` is safe from any thread."""

    __slots__ = ("_glet", "_hub", "_ident", "_token", "_parked", "_carrier")

    def __init__(self) -> None:
        self._glet = getcurrent()
        self._carrier = carrier_of_this_thread()
        self._hub = self._carrier.hub
        self._ident = get_ident()
        self._token = [True]  # list.pop() is atomic: whoever pops it owns the wake
        self._parked = False

    def unpark(self) -> None:
        """Wake the maker (any thread); only the first call of unpark or the timeout counts."""
        try:
            self._token.pop()
        except IndexError:
            return
        loop = self._hub.loop
        if get_ident() == self._ident:
            loop.run_callback(self._resume, _WOKEN)
        else:
            loop.run_callback_threadsafe(self._resume, _WOKEN)

    def _resume(self, value: Any) -> None:
        if self._parked:
            self._glet.switch(value)

    def _on_timeout(self) -> None:
        try:
            self._token.pop()
        except IndexError:
            return
        self._resume(TIMEOUT)

    def park(self, timeout: float | None) -> bool:
        """Suspend the maker; True if woken by ``unpark``, False on timeout."""
        if not self._token:
            return True
        timer = None
        self._parked = True
        self._carrier.hold()
        try:
            if timeout is not None:
                timer = self._hub.loop.timer(timeout)
                timer.start(self._on_timeout)
            while True:
                r = self._hub.switch()
                if r is _WOKEN:
                    return True
                if r is TIMEOUT:
                    return False
        finally:
            self._carrier.unhold()
            self._parked = False
            if timer is not None:
                timer.close()
