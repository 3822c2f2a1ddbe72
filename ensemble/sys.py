"""sys: look into and steer any behaviour through system messages (OTP's sys).

Works on every behaviour (gen_server, gen_statem, gen_event, and the
supervisors built on them).  Each function takes an optional ``timeout``
(seconds, default 5) and fails like a call: :class:`ensemble.CallError`.
A suspended process takes only system messages until it is resumed.
"""

from __future__ import annotations

from typing import Any, Callable

from . import _gen
from ._exceptions import CallError

__all__ = [
    "get_state",
    "replace_state",
    "get_status",
    "suspend",
    "resume",
    "statistics",
    "trace",
    "terminate",
]


def _system(dest: Any, request: Any, timeout: float | None) -> Any:
    answer = _gen.call(dest, request, timeout, label=_gen.SYSTEM)
    if type(answer) is tuple and len(answer) == 2 and answer[0] == "ok":
        return answer[1]
    reason = answer[1] if type(answer) is tuple and len(answer) == 2 else answer
    raise CallError(reason, request)


def get_state(dest: Any, timeout: float | None = 5.0) -> Any:
    """The behaviour's state (a gen_statem's is ``(state, data)``)."""
    return _system(dest, "get_state", timeout)


def replace_state(dest: Any, fn: Callable[[Any], Any], timeout: float | None = 5.0) -> Any:
    """Set the state to ``fn(state)`` and answer it; if ``fn`` raises, the state is kept and this raises."""
    return _system(dest, ("replace_state", fn), timeout)


def get_status(dest: Any, timeout: float | None = 5.0) -> dict:
    """``{"pid", "name", "module", "status", "parent", "state"}``; the state passes through format_status."""
    return _system(dest, "get_status", timeout)


def suspend(dest: Any, timeout: float | None = 5.0) -> str:
    """Suspend the behaviour: it takes only system messages until :func:`resume`."""
    return _system(dest, "suspend", timeout)


def resume(dest: Any, timeout: float | None = 5.0) -> str:
    """Resume a suspended behaviour."""
    return _system(dest, "resume", timeout)


def statistics(dest: Any, flag: Any, timeout: float | None = 5.0) -> Any:
    """``True`` starts collecting, ``False`` stops, ``"get"`` answers them (or ``"no_statistics"``)."""
    return _system(dest, ("statistics", flag), timeout)


def trace(dest: Any, flag: bool, timeout: float | None = 5.0) -> str:
    """Report every message the behaviour takes (``sys_trace`` reports, level debug) while on."""
    return _system(dest, ("trace", flag), timeout)


def terminate(dest: Any, reason: Any, timeout: float | None = None) -> str:
    """Stop the behaviour with ``reason`` and wait for it to exit; works while suspended."""
    return _gen.stop(dest, reason, timeout)
