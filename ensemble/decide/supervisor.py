"""What a supervisor does when a child exits: restart or not, how often, whom, and when to give up.

Pure decisions, no I/O and no clock: :mod:`ensemble.supervisor` asks these
functions (passing the time it read) and carries out the answer.  The rules
are OTP's (``supervisor`` documentation, "Restart Strategies", "Restart
intensity and period", "Automatic Shutdown" and the ``restart`` key of a
child spec; ``do_restart/3``, ``add_restart/3``, ``restart/3``,
``terminate_children/2`` and ``do_auto_shutdown/2`` in
``lib/stdlib/src/supervisor.erl``).  Times are seconds.

1. :func:`restart_needed`: a ``permanent`` child is always restarted, a
   ``temporary`` one never, a ``transient`` one only after an abnormal exit
   (not ``"normal"``, ``"shutdown"`` or ``("shutdown", term)``).
2. :func:`add_restart`: the restart times kept are ``now`` and the earlier
   ones no older than ``now - period``; more than ``intensity`` of them and
   the supervisor terminates.
3. :func:`restart_plan`: ``one_for_one`` (and ``simple_one_for_one``)
   restarts the child alone; ``one_for_all`` stops every other child (in
   reverse start order) and starts them all again (in start order);
   ``rest_for_one`` does so for the child and those started after it.  A
   temporary sibling so stopped is dropped, never restarted.
4. :func:`auto_shutdown`: after a significant child exits and is not
   restarted, ``any_significant`` shuts the supervisor down, and
   ``all_significant`` does when no other significant child runs.
5. :func:`stop_order`: children stop in reverse start order.
"""

from __future__ import annotations

from itertools import takewhile
from typing import Any, Final, Iterable, Sequence

from .values import same
from .signal import is_shutdown

__all__ = [
    "PERMANENT",
    "TRANSIENT",
    "TEMPORARY",
    "Plan",
    "restart_needed",
    "add_restart",
    "restart_plan",
    "auto_shutdown",
    "stop_order",
]

PERMANENT: Final = "permanent"
TRANSIENT: Final = "transient"
TEMPORARY: Final = "temporary"

_ALONE: Final = ("one_for_one", "simple_one_for_one")


def _is(x: Any, tag: str) -> bool:
    return type(x) is str and x == tag


def restart_needed(restart: str, reason: Any) -> bool:
    """Whether a child of restart type ``restart`` that exited with ``reason`` is restarted.

    Raises ``ValueError`` for an unknown restart type.
    """
    if _is(restart, PERMANENT):
        return True
    if _is(restart, TEMPORARY):
        return False
    if _is(restart, TRANSIENT):
        return not is_shutdown(reason)
    raise ValueError(f"unknown restart type {restart!r}; expected {PERMANENT!r}, {TRANSIENT!r} or {TEMPORARY!r}")


def add_restart(restarts: Sequence[float], now: float, intensity: int, period: float) -> tuple:
    """Record a restart at ``now``: ``("ok", kept)`` or ``("terminate", kept)``.

    ``restarts`` are the earlier restart times, newest first (as this answer
    keeps them); ``kept`` is ``(now,)`` followed by the leading ones at or
    after ``now - period`` (OTP's ``lists:takewhile``).  ``"ok"`` iff
    ``len(kept) <= intensity``.
    """
    threshold = now - period
    kept = (now,) + tuple(takewhile(lambda r: r >= threshold, restarts))
    return ("ok" if len(kept) <= intensity else "terminate", kept)


class Plan:
    """How to restart after a child exited: ``stop`` these running siblings (in that
    order), ``start`` these children (in that order), ``drop`` these temporary siblings.
    """

    __slots__ = ("stop", "start", "drop")
    __match_args__ = ("stop", "start", "drop")
    stop: tuple
    start: tuple
    drop: tuple

    def __init__(self, stop: Iterable[Any], start: Iterable[Any], drop: Iterable[Any]) -> None:
        object.__setattr__(self, "stop", tuple(stop))
        object.__setattr__(self, "start", tuple(start))
        object.__setattr__(self, "drop", tuple(drop))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Plan is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Plan is immutable")

    def _values(self) -> tuple:
        return (self.stop, self.start, self.drop)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Plan:
            return NotImplemented
        return all(
            len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
            for a, b in zip(self._values(), other._values())  # type: ignore[attr-defined]
        )

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        try:
            return hash((Plan, self._values()))
        except Exception:  # an unhashable id: equal plans still hash alike
            return hash(Plan)

    def __repr__(self) -> str:
        return f"Plan(stop={self.stop!r}, start={self.start!r}, drop={self.drop!r})"

    def __reduce__(self) -> tuple:
        return (Plan, self._values())


def restart_plan(strategy: str, children: Sequence[tuple[Any, str, bool]], failed_id: Any) -> Plan:
    """The :class:`Plan` for restarting ``failed_id`` under ``strategy``.

    ``children`` are ``(id, restart, running)`` in start order, the failed
    child among them (not running).  The affected children are the failed
    one alone (``one_for_one``, ``simple_one_for_one``), all
    (``one_for_all``), or the failed one and those after it
    (``rest_for_one``).  ``stop``: the other affected children that run, in
    reverse start order; ``start``: the affected children that are not
    temporary siblings, in start order (a temporary failed child is never
    started); ``drop``: the affected temporary siblings, in start order.
    Ids compare by identity or ``==``, the first match wins.  Raises
    ``ValueError`` for an unknown strategy or an id not in ``children``.
    """
    children = tuple(children)
    at = next((i for i, child in enumerate(children) if same(child[0], failed_id)), None)
    if at is None:
        raise ValueError(f"child {failed_id!r} is not among the children")
    if type(strategy) is str and strategy in _ALONE:
        affected = range(at, at + 1)
    elif _is(strategy, "one_for_all"):
        affected = range(len(children))
    elif _is(strategy, "rest_for_one"):
        affected = range(at, len(children))
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    stop: list = []
    start: list = []
    drop: list = []
    for i in affected:
        child_id, restart, running = children[i]
        temporary = _is(restart, TEMPORARY)
        if i == at:
            if not temporary:
                start.append(child_id)
            continue
        if running:
            stop.append(child_id)
        (drop if temporary else start).append(child_id)
    stop.reverse()
    return Plan(stop, start, drop)


def auto_shutdown(mode: str, exited_significant: bool, others_significant_running: bool) -> bool:
    """Whether the supervisor shuts itself down after a child exited and was not restarted.

    ``never``: no; ``any_significant``: iff the exited child was
    significant; ``all_significant``: iff it was and no other significant
    child is running.  Raises ``ValueError`` for an unknown mode.
    """
    if _is(mode, "never"):
        return False
    if _is(mode, "any_significant"):
        return bool(exited_significant)
    if _is(mode, "all_significant"):
        return bool(exited_significant) and not others_significant_running
    raise ValueError(f"unknown auto_shutdown {mode!r}")


def stop_order(ids_in_start_order: Iterable[Any]) -> list:
    """The order children stop in: the reverse of their start order (a new list)."""
    return list(reversed(list(ids_in_start_order)))
