"""Reports from the runtime to structlog: a crash report when a process crashes.

A crash is an exception the process's function did not catch (not ``exit(r)``,
not an exit signal): OTP's proc_lib crash report, with the initial call and the
ancestors.  Reports go to the ``"ensemble"`` structlog logger, so an app's
structlog configuration decides where they print.
"""

from __future__ import annotations

from typing import Any

import structlog

from . import _process as P

__all__ = ["crash_report", "logger"]


def logger() -> Any:
    """The structlog logger every ensemble report goes through."""
    return structlog.get_logger("ensemble")


def crash_report(pid: "P.Pid", exc: BaseException) -> None:
    """Log OTP's crash report for ``pid``, which died of the uncaught ``exc``."""
    logger().error(
        "crash_report",
        pid=repr(pid),
        registered_name=pid.name,
        initial_call=pid.initial_call,
        ancestors=[repr(a) for a in pid.ancestors],
        reason=exc,
        exc_info=exc,
    )


P.crash_hooks.append(crash_report)
