"""The telemetry notifier: a process that calls a reporter off its owner's path (internal).

The owner (a stage or a worker pool) calls :func:`start` from its own process:
the notifier is spawned unlinked, monitors its owner (and ends when the owner
ends), and the owner monitors it (:func:`start` answers the monitor
reference), so a notifier that dies is noticed as a ``DOWN`` the owner acts on.
:func:`notify` only enqueues: a slow reporter delays the notifier, never the
owner.  The mailbox is unbounded and delivery is best effort.

Policies: :data:`ISOLATE` runs the reporter under ``try``: an exception drops
only that event.  :data:`PROPAGATE` lets an exception crash the notifier, so the
owner sees its ``DOWN``.  Either way an exit signal (``exit(pid, "kill")``) ends
the notifier.
"""

from __future__ import annotations

from typing import Any, Callable

import ensemble as e

__all__ = ["ISOLATE", "PROPAGATE", "Isolate", "Propagate", "start", "notify", "stop"]


class Isolate:
    """Policy: a raising reporter loses only the event it raised on."""

    def __repr__(self) -> str:
        return "Isolate"


class Propagate:
    """Policy: a raising reporter crashes the notifier (and so stops its owner)."""

    def __repr__(self) -> str:
        return "Propagate"


ISOLATE = Isolate()
PROPAGATE = Propagate()

_NOTIFY = "$constellation_notify"
_STOP = "$constellation_notifier_stop"


def start(reporter: Callable[[Any], Any], policy: Any = ISOLATE) -> tuple:
    """Spawn a notifier for the calling process; answers ``(pid, monitor_ref)``.

    The caller owns the notifier and holds the monitor: a ``("DOWN", ref,
    "process", pid, reason)`` with that ref means the notifier is gone.
    """
    if not callable(reporter):
        raise TypeError(f"a reporter must be callable, not {reporter!r}")
    if not isinstance(policy, (Isolate, Propagate)):
        raise TypeError(f"a notifier policy is ISOLATE or PROPAGATE, not {policy!r}")
    owner = e.self()
    return e.spawn_monitor(_run, owner, reporter, isinstance(policy, Isolate))


def notify(pid: Any, event: Any) -> None:
    """Enqueue ``event`` for the notifier ``pid`` (never blocks, never fails)."""
    e.send(pid, (_NOTIFY, event))


def stop(pid: Any) -> None:
    """Ask the notifier to stop after the events already enqueued (asynchronous)."""
    e.send(pid, (_STOP,))


def _run(owner: Any, reporter: Callable[[Any], Any], isolate: bool) -> None:
    ref = e.monitor(owner)
    while True:
        msg = e.receive()
        if type(msg) is not tuple or not msg:
            continue  # a stray message: dropped
        tag = msg[0]
        if tag == _NOTIFY:
            if isolate:
                try:
                    reporter(msg[1])
                except Exception:  # noqa: BLE001 - Isolate: the event is dropped, the notifier goes on
                    pass
            else:
                reporter(msg[1])
        elif tag == _STOP or (tag == "DOWN" and len(msg) == 5 and msg[1] == ref):
            return
