"""A process's life states and how events move it between them.

The model is Erlang's ``erlang:hibernate/3`` (Erlang/OTP ``erlang`` module
documentation): a hibernating process holds no stack and is woken by the
next message or signal, which restarts it in a fresh call. Here the stack is
a greenlet: a HIBERNATED process has none, a PASSIVATED one has furthermore
had its state set aside by the runtime; mail or a signal wakes either one
into RUNNING (the runtime then starts one new greenlet). Exiting is
possible from every live state, and DEAD is final.

Transitions (any pair not listed leaves the state unchanged, including
unknown states and events)::

    RUNNING    + HIBERNATE     -> HIBERNATED
    RUNNING    + EXIT          -> DEAD
    HIBERNATED + MAIL | SIGNAL -> RUNNING      (a wake)
    HIBERNATED + PASSIVATE     -> PASSIVATED
    HIBERNATED + EXIT          -> DEAD
    PASSIVATED + MAIL | SIGNAL -> RUNNING      (a wake)
    PASSIVATED + EXIT          -> DEAD

Because a wake leaves the process RUNNING, a burst of mail wakes it once:
between two HIBERNATE events there is at most one wake.

States and events are strings; they must be hashable.

A DEAD process may still have a greenlet: an exit signal settles the exit at
once (Erlang's kill is immediate), but Python cannot stop a greenlet from
outside, so the :class:`~ensemble.ExitSignal` is raised in it and its
``finally`` blocks run.  :func:`on_call` decides what such a process's calls
into ensemble do::

    alive (not DEAD)                                        -> PROCEED
    DEAD, the exit signal not yet raised in it              -> RAISE
    DEAD, an exception being handled, fewer than
          RAISE_LIMIT raises so far (cleanup while unwinding) -> RAISE
    DEAD otherwise (the body swallowed the exit signal)     -> PARK (for good)
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "RUNNING",
    "HIBERNATED",
    "PASSIVATED",
    "DEAD",
    "STATES",
    "HIBERNATE",
    "PASSIVATE",
    "MAIL",
    "SIGNAL",
    "EXIT",
    "EVENTS",
    "step",
    "wakes",
    "is_alive",
    "PROCEED",
    "RAISE",
    "PARK",
    "RAISE_LIMIT",
    "on_call",
]

RUNNING: Final = "running"
HIBERNATED: Final = "hibernated"
PASSIVATED: Final = "passivated"
DEAD: Final = "dead"
STATES: Final = frozenset((RUNNING, HIBERNATED, PASSIVATED, DEAD))

HIBERNATE: Final = "hibernate"
PASSIVATE: Final = "passivate"
MAIL: Final = "mail"
SIGNAL: Final = "signal"
EXIT: Final = "exit"
EVENTS: Final = frozenset((HIBERNATE, PASSIVATE, MAIL, SIGNAL, EXIT))

_EMPTY: Final[dict[str, str]] = {}
_NEXT: Final[dict[str, dict[str, str]]] = {
    RUNNING: {HIBERNATE: HIBERNATED, EXIT: DEAD},
    HIBERNATED: {MAIL: RUNNING, SIGNAL: RUNNING, PASSIVATE: PASSIVATED, EXIT: DEAD},
    PASSIVATED: {MAIL: RUNNING, SIGNAL: RUNNING, EXIT: DEAD},
}
_SLEEPING: Final = frozenset((HIBERNATED, PASSIVATED))
_WAKERS: Final = frozenset((MAIL, SIGNAL))


def step(state: str, event: str) -> str:
    """The state after ``event`` happens in ``state``; unchanged for any pair not in the table."""
    return _NEXT.get(state, _EMPTY).get(event, state)


def wakes(state: str, event: str) -> bool:
    """True iff ``event`` moves a HIBERNATED or PASSIVATED process to RUNNING (start one greenlet)."""
    return event in _WAKERS and state in _SLEEPING


def is_alive(state: str) -> bool:
    """True for every state but DEAD."""
    return state != DEAD


PROCEED: Final = "proceed"
"""The call goes ahead."""
RAISE: Final = "raise"
"""The call raises the process's exit signal (again)."""
PARK: Final = "park"
"""The call never returns: the greenlet is parked for good and released."""

#: At most this many times is a dead process's exit signal raised in it.
#: Cleanup code (``finally``, ``with``) that calls ensemble while the signal
#: unwinds gets it again, so outer cleanups still run; the limit stops a loop
#: that catches it inside a handler from spinning for ever.
RAISE_LIMIT: Final = 64


def on_call(state: str, raised: int, handling: bool) -> str:
    """What a process's call into ensemble does: PROCEED, RAISE or PARK.

    ``state`` is the process's life state, ``raised`` how many times its
    exit signal has been raised in it so far, ``handling`` whether an
    exception is being handled where it calls (``sys.exc_info()``: inside an
    ``except`` or a ``finally`` that an exception passes through).  A live
    process proceeds.  A DEAD one never proceeds: the first call raises the
    exit signal, so do calls from cleanup code while it unwinds (at most
    :data:`RAISE_LIMIT` raises in all), and any other call -- the body caught
    the signal and carried on -- parks for good.
    """
    if state != DEAD:
        return PROCEED
    if raised <= 0 or (handling and raised < RAISE_LIMIT):
        return RAISE
    return PARK
