"""Delayed starts: ``engine.start(..., delay=d)`` or ``at=unix_seconds`` (spec §2.6).

A coordinator run ``fusee.delay/<id>`` (type ``fusee.delay``) sleeps on a durable timer until
the time, then starts the run under its ID as a child that outlives it (``parent_close=
"abandon"``) and returns that run's result.  It survives crashes like any timer; ``result(id)``
works before the run exists (it follows the delay run); cancelling the delay run before the time
cancels the start, and after it goes on to the run started.

The run started may itself be a concurrency slot (a delayed start of a limited type): the
delay's input then names the slot, and the chain is delay -> slot -> run.
"""

from __future__ import annotations

from typing import Any

from .behalf import run_child
from .workflow import Workflow

__all__ = ["DELAY_TYPE", "delay_id", "delay_input", "due_at", "delayed", "workflows"]

#: The delay coordinator's workflow type.
DELAY_TYPE = "fusee.delay"


def delay_id(id: str) -> str:
    """The delay run's workflow ID for the run ``id``: ``fusee.delay/<id>``."""
    return f"{DELAY_TYPE}/{id}"


def due_at(now: float, delay: float | None, at: float | None) -> float:
    """The unix time a start is due: ``at`` if given, else ``now + delay`` (exactly one of them is given)."""
    if (delay is None) == (at is None):
        raise ValueError("a delayed start takes exactly one of delay= and at=")
    if at is not None:
        if type(at) not in (int, float) or at != at:
            raise TypeError(f"at= is unix seconds, not {at!r}")
        return float(at)
    return float(now) + float(delay)  # type: ignore[arg-type]


def delay_input(
    wtype: str, id: str, input: Any, at: float, target: str | None = None, timeout: float | None = None
) -> dict[str, Any]:
    """A delay run's input (a JSON object): the run ``id`` of type ``wtype`` with ``input``, due at
    unix time ``at``; ``target`` the ID to start when it differs from ``id`` (a slot's); ``timeout``
    the started run's own (seconds from its start)."""
    out: dict[str, Any] = {"type": wtype, "id": id, "input": input, "at": float(at)}
    if target is not None and target != id:
        out["target"] = target
    if timeout is not None:
        out["timeout"] = timeout
    return out


def delayed(ctx: Any, d: dict[str, Any]) -> Any:
    """The delay run: sleep durably until ``d["at"]``, then run ``d["type"]`` as a child that outlives
    it and return its result (a failure is re-raised).  Cancelled before the time: nothing starts,
    and the delay run ends cancelled.  Cancelled once the child has been asked for (the window
    before ``cancel(id)`` finds the run itself): the cancel goes on to the child, and the delay run
    ends with it (:func:`fusee.behalf.run_child`)."""
    ctx.sleep_until("due", d["at"])
    return run_child(ctx, d["type"], d.get("target", d["id"]), d.get("input"), d.get("timeout"))


def workflows() -> list[Any]:
    """The built-in ``fusee.delay`` workflow type (every engine has it)."""
    return [Workflow(DELAY_TYPE, 1, delayed)]

