"""The errors and exit exceptions of ensemble, each saying who raises it.

``Exit`` and ``ExitSignal`` derive from ``BaseException``, as ``SystemExit`` and
gevent's ``GreenletExit`` do: they end a process, they are not errors, and an
``except Exception`` in user code must not swallow them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EnsembleError", "Badarg", "Exit", "ExitSignal", "StartError", "CallError"]


class EnsembleError(Exception):
    """Base of the errors ensemble raises for a misuse of its API."""


class Badarg(EnsembleError):
    """An argument is of the wrong type or names nothing (Erlang's ``badarg``).

    Raised at the call, before anything is changed: a taken name, an unknown
    dispatcher, a send to an unregistered name, a negative timeout.  Usually a
    programming error in the caller.
    """


class Exit(BaseException):
    """``exit(reason)`` (Erlang's exit/1): the current process ends with ``reason``.

    Raised by :func:`ensemble.exit` with one argument, and by :func:`ensemble.join`
    for a process that ended with a reason that is not an exception.  A process
    may catch it; uncaught, the process exits with ``reason``.
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"Exit({self.reason!r})"


class ExitSignal(BaseException):
    """An exit signal the process must die of has landed (Erlang's exit/2, links).

    Thrown into the process wherever it is parked (receive, sleep, a socket, a
    lock), or raised at its next call into ensemble.  By then the process's exit
    has already settled (links and monitors have fired).  Catching it does not
    save the process: a call into ensemble from the handler or a ``finally``
    raises it again, and the next call after it was swallowed never returns
    (the greenlet is parked for good).
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"ExitSignal({self.reason!r})"


class Hibernate(BaseException):
    """Internal: unwinds a process that called :func:`ensemble.hibernate`."""

    def __init__(self, fn: Any, args: tuple) -> None:
        super().__init__()
        self.fn = fn
        self.args_ = args


class StartError(EnsembleError):
    """A behaviour's synchronous start failed; ``reason`` is OTP's reason.

    Raised by ``gen_server.start``/``start_link`` (and the other behaviours'):
    ``("already_started", pid)`` for a taken name, ``"timeout"`` when init was
    too slow, the reason of ``("stop", r)`` / ``("error", r)`` from init, the
    exception init raised, or ``("bad_return_value", ret)``.
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"StartError({self.reason!r})"


class CallError(EnsembleError):
    """A synchronous call failed; ``reason`` says why (gen_server:call's exit reason).

    ``"noproc"`` (no such server), ``"timeout"``, ``"calling_self"``, or the
    server's exit reason when it died during the call.  ``request`` is what was
    asked.
    """

    def __init__(self, reason: Any, request: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request = request

    def __repr__(self) -> str:
        return f"CallError({self.reason!r})"
