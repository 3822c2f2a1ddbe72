"""System messages (OTP's sys protocol) as every behaviour answers them.

A behaviour's loop hands each ``("system", from_, request)`` to
:func:`handle`, with a :class:`Debug` record and the behaviour's hooks.
Requests: ``"get_state"``, ``("replace_state", fn)``, ``"get_status"``,
``"suspend"``, ``"resume"``, ``("statistics", True | False | "get")``,
``("trace", bool)`` and ``("terminate", reason)``.  Every answer is
``("ok", value)`` or ``("error", reason)``; :mod:`ensemble.sys` unwraps it.
While suspended, a behaviour takes only system messages (and its parent's
EXIT when it traps exits): see :func:`suspended_matcher`.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from . import _gen
from . import logger as _logger
from .decide.receive import NOMATCH

__all__ = ["Debug", "Hooks", "Refuse", "handle", "suspended_matcher", "observed"]


class Refuse(Exception):
    """Raised by a hook to refuse a system request with ``reason`` (sys raises it as CallError)."""

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason


class Hooks(Protocol):
    """What a behaviour lets sys see and do."""

    def system_get_state(self) -> Any: ...

    def system_replace_state(self, fn: Any) -> Any: ...

    def system_get_status(self) -> dict: ...

    def system_terminate(self, reason: Any) -> None: ...


class Debug:
    """A behaviour's sys flags: suspended, statistics, trace."""

    __slots__ = ("suspended", "stats", "trace")

    def __init__(self) -> None:
        self.suspended = False
        self.stats: dict | None = None  # {"start_time", "messages_in"} while collecting
        self.trace = False


def observed(debug: Debug, pid: Any, event: Any) -> None:
    """Count an ordinary message taken, and trace it if tracing is on."""
    stats = debug.stats
    if stats is not None:
        stats["messages_in"] += 1
    if debug.trace:
        _logger.report("sys_trace", level="debug", pid=repr(pid), event=event)


def handle(debug: Debug, from_: Any, request: Any, hooks: Hooks) -> None:
    """Answer one system message (``terminate`` does not return)."""
    try:
        answer = _answer(debug, request, hooks)
    except Refuse as e:
        answer = ("error", e.reason)
    except Exception as e:  # noqa: BLE001 - a failing hook refuses the request, the process lives
        answer = ("error", ("callback_failed", e))
    _gen.reply(from_, answer)


def _answer(debug: Debug, request: Any, hooks: Hooks) -> Any:
    if type(request) is str:
        if request == "get_state":
            return ("ok", hooks.system_get_state())
        if request == "get_status":
            status = hooks.system_get_status()
            status["status"] = "suspended" if debug.suspended else "running"
            return ("ok", status)
        if request == "suspend":
            debug.suspended = True
            return ("ok", "ok")
        if request == "resume":
            debug.suspended = False
            return ("ok", "ok")
    elif type(request) is tuple and len(request) == 2 and type(request[0]) is str:
        tag, arg = request
        if tag == "replace_state":
            return ("ok", hooks.system_replace_state(arg))
        if tag == "statistics":
            if arg is True:
                debug.stats = {"start_time": time.time(), "messages_in": 0}
                return ("ok", "ok")
            if arg is False:
                debug.stats = None
                return ("ok", "ok")
            if arg == "get":
                if debug.stats is None:
                    return ("ok", "no_statistics")
                return ("ok", {**debug.stats, "current_time": time.time()})
        if tag == "trace" and type(arg) is bool:
            debug.trace = arg
            return ("ok", "ok")
        if tag == "terminate":
            hooks.system_terminate(arg)
    return ("error", ("unknown_system_msg", request))


def suspended_matcher(parent: Any, trapping: bool) -> Any:
    """A matcher taking only what a suspended behaviour takes: system messages, its parent's EXIT."""

    def matcher(m: Any) -> Any:
        if type(m) is tuple:
            if len(m) == 3 and m[0] == _gen.SYSTEM:
                return m
            if trapping and len(m) == 3 and m[0] == "EXIT" and m[1] is parent:
                return m
        return NOMATCH

    return matcher
