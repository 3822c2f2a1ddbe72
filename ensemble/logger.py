"""OTP's reports from the runtime and the behaviours, as structured events through structlog.

Every report is a dict with a ``kind`` and a ``level`` plus its fields:

* ``crash_report``: a process crashed (an exception its function did not
  catch): pid, registered name, initial call, ancestors, reason;
* ``gen_server_terminate`` / ``gen_statem_terminate``: a behaviour stopped with
  a reason that is not orderly: last message or event, state (through
  ``format_status``), reason;
* ``gen_event_terminate`` (a handler removed for a crash or a bad return) and
  ``gen_event_swap_failed``;
* ``supervisor_report`` (later), ``sys_trace`` (level ``debug``).

An orderly end (``"normal"``, ``"shutdown"``, ``("shutdown", term)``) and
``exit(reason)`` are never reported.  :func:`report` hands each report to the
handler; :func:`set_handler` replaces it.  The default handler emits the
report through structlog: the app's structlog configuration if it has one,
else structlog's default rendering to stderr.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import structlog

from . import _process as P

__all__ = ["report", "set_handler", "default_handler", "crash_report"]

Handler = Callable[[dict], Any]


def default_handler(report: dict) -> None:
    """Emit ``report`` through structlog as the event ``report["kind"]``."""
    fields = dict(report)
    kind = fields.pop("kind")
    level = fields.pop("level", "error")
    fields["kind"] = kind
    if "event" in fields:  # structlog's own key: the report's event travels as "report_event"
        fields["report_event"] = fields.pop("event")
    if structlog.is_configured():
        log = structlog.get_logger("ensemble")
    else:
        log = structlog.wrap_logger(structlog.PrintLogger(sys.stderr))
    getattr(log, level)(kind, **fields)


_handler: Handler = default_handler


def set_handler(handler: Handler) -> Handler:
    """Make ``handler(report)`` receive every report; returns the previous handler."""
    global _handler
    if not callable(handler):
        raise TypeError(f"a report handler must be callable, not {handler!r}")
    previous, _handler = _handler, handler
    return previous


def report(kind: str, level: str = "error", **fields: Any) -> None:
    """Hand one report to the handler; never raises (a failing handler is ignored)."""
    try:
        _handler({"kind": kind, "level": level, **fields})
    except Exception:  # noqa: BLE001 - a report must never take its process down
        pass


def crash_report(pid: "P.Pid", exc: BaseException) -> None:
    """OTP's crash report for ``pid``, which died of the uncaught ``exc``."""
    report(
        "crash_report",
        pid=repr(pid),
        registered_name=pid.name,
        initial_call=pid.initial_call,
        ancestors=[repr(a) for a in pid.ancestors],
        reason=exc,
        exc_info=exc,
    )


P.crash_hooks.append(crash_report)
