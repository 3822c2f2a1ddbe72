"""Stage telemetry: one :class:`Event` per step of a handled command, and a ready reporter.

A stage started with ``reporter=fn`` hands ``fn(event)`` every event through
its notifier process (asynchronous, best effort: a slow reporter never blocks
the stage; a raising one loses only that event).  Every event of one handled
command or report shares its ``trace_id``; trace ids start at 1.

===================  ============================  ==================================================
operation            phase                         detail
===================  ============================  ==================================================
subscribe            received                      ``source_pid=.. consumer_pid=.. subscription=..``
ask                  received                      ``source_pid=.. subscription=.. amount=N``
push                 received                      ``source_pid=.. events=N``
cancel               received                      ``source_pid=.. subscription=..``
subscribe/ask/...    rejected                      ``error=<repr of the error>``
subscribe/ask/...    dispatched                    ``batches=N events=M``
deliver              mailbox_enqueued              ``consumer_pid=.. subscription=.. events=N``
cancel               mailbox_enqueued              ``consumer_pid=.. subscription=..``
consume              reported / rejected           ``consumer_pid=.. subscription=.. events=N`` / ``error=..``
participant_down     received / cancelled          ``participant=.. consumer_pid=.. reason=..`` / ``subscriptions=N``
stop                 received / cancelled          ``""`` / ``subscriptions=N``
===================  ============================  ==================================================

``constellation.start(reporter=telemetry.log)`` logs every event through
structlog (``with_logging`` in the original).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import structlog

__all__ = ["Event", "format", "log"]


@dataclass(frozen=True, slots=True)
class Event:
    """One step of a handled command: ``stage_pid`` is the stage's pid as text."""

    trace_id: int
    stage_pid: str
    operation: str
    phase: str
    detail: str = ""


def format(event: Event) -> str:  # noqa: A001 - the spec's name
    """``"constellation trace_id=<n> stage_pid=<pid> operation=<op> phase=<phase>[ detail]"``."""
    text = (
        f"constellation trace_id={event.trace_id} stage_pid={event.stage_pid} "
        f"operation={event.operation} phase={event.phase}"
    )
    return f"{text} {event.detail}" if event.detail else text


def log(event: Event) -> None:
    """Log ``format(event)`` at info level through structlog (the logger ``"constellation"``).

    Uses the application's structlog configuration if it has one, else
    structlog's default rendering to stderr (as :mod:`ensemble.logger` does).
    """
    if structlog.is_configured():
        logger = structlog.get_logger("constellation")
    else:
        logger = structlog.wrap_logger(structlog.PrintLogger(sys.stderr))
    logger.info(format(event))
