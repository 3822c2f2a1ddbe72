"""Whether supervisor flags and child specs are good, and what a child's start returned.

Pure decisions, no I/O: :mod:`ensemble.supervisor` asks these functions and
carries out the answer.  The rules are OTP's (``supervisor`` documentation,
"Supervisor flags" and "Child specification"; ``check_flags/1``,
``check_startspec/2``, ``check_childspec/2``, ``do_start_child_i/3`` and
``handle_call/3`` in ``lib/stdlib/src/supervisor.erl``), as Python values:
atoms are ``str``, tuples are ``tuple``, maps are ``dict``, times are SECONDS.

Flags are a dict with the keys ``strategy`` (one of :data:`STRATEGIES`),
``intensity`` (an ``int`` >= 0), ``period`` (a finite ``int`` or ``float``
> 0) and ``auto_shutdown`` (one of :data:`AUTO_SHUTDOWNS`); a missing key
takes its value from :data:`DEFAULT_FLAGS`, an unknown key is ignored (not
kept in the answer).

A child spec is a dict with the keys ``id`` (any value; mandatory), ``start``
(mandatory: a callable, or a 2-tuple ``(callable, args)`` with ``args`` a
tuple or list), ``restart`` (one of :data:`RESTARTS`, default
``"permanent"``), ``type`` (one of :data:`TYPES`, default ``"worker"``),
``shutdown`` (a finite number of seconds >= 0, ``"brutal_kill"`` or
``"infinity"``; default 5 for a worker, ``"infinity"`` for a supervisor) and
``significant`` (a ``bool``, default False).  An unknown key is ignored (not
kept in the answer).  A full spec has exactly the keys :data:`SPEC_KEYS`.

Errors come in this order, the first fault found wins:

1. ``("invalid_child_spec", spec)`` for a value that is no dict,
2. ``"missing_id"``, 3. ``"missing_start"``,
4. ``("invalid_mfa", start)``, 5. ``("invalid_restart_type", r)``,
6. ``("invalid_child_type", t)``, 7. ``("invalid_shutdown", s)``,
8. ``("invalid_significant", x)``;

then, in :func:`check_specs`, for the same child,
9. ``("bad_combination", (("auto_shutdown", "never"), ("significant", True)))``,
10. ``("bad_combination", (("restart", "permanent"), ("significant", True)))``,
11. ``("duplicate_child_name", id)``; and after all children,
12. ``("bad_start_spec", specs)`` under ``simple_one_for_one`` unless there is
exactly one spec.

Values are never compared with a foreign ``==`` where a tag is expected:
only exact ``str``, ``int``, ``float``, ``bool``, ``tuple``, ``list`` and
``dict`` instances qualify (a ``str`` subclass equal to ``"permanent"`` is
no restart type; a ``True`` is no intensity), and only exact ``str`` dict
keys are read.  The checks never raise.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Final

from .values import Value, same

__all__ = [
    "DEFAULT_FLAGS",
    "STRATEGIES",
    "RESTARTS",
    "TYPES",
    "AUTO_SHUTDOWNS",
    "SHUTDOWN_ATOMS",
    "SPEC_KEYS",
    "check_flags",
    "check_child",
    "check_specs",
    "Started",
    "Ignored",
    "IGNORED",
    "Failed",
    "StartResult",
    "start_result",
    "OPERATIONS",
    "STATES",
    "may",
    "shown_spec",
]

DEFAULT_FLAGS: Final = {"strategy": "one_for_one", "intensity": 1, "period": 5, "auto_shutdown": "never"}
"""OTP's default supervisor flags (``period`` in seconds).  Never mutated here."""

STRATEGIES: Final = ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one")
RESTARTS: Final = ("permanent", "transient", "temporary")
TYPES: Final = ("worker", "supervisor")
AUTO_SHUTDOWNS: Final = ("never", "any_significant", "all_significant")
SHUTDOWN_ATOMS: Final = ("brutal_kill", "infinity")

SPEC_KEYS: Final = ("id", "start", "restart", "shutdown", "type", "significant")
"""The keys of a full child spec, in the order :func:`shown_spec` lists them."""

_FLAG_KEYS: Final = ("strategy", "intensity", "period", "auto_shutdown")
_WORKER_SHUTDOWN: Final = 5
_MISSING: Final = object()

_NEVER_SIGNIFICANT: Final = ("bad_combination", (("auto_shutdown", "never"), ("significant", True)))
_PERMANENT_SIGNIFICANT: Final = ("bad_combination", (("restart", "permanent"), ("significant", True)))


# -- predicates (never call a foreign ==) ------------------------------------------


def _one_of(x: Any, names: tuple[str, ...]) -> bool:
    return type(x) is str and x in names


def _is_count(x: Any) -> bool:
    """An exact ``int`` >= 0 (a bool is no int)."""
    return type(x) is int and x >= 0


def _is_seconds(x: Any, *, positive: bool) -> bool:
    """An exact, finite ``int`` or ``float``, > 0 (``positive``) or >= 0."""
    t = type(x)
    if t is int:
        return x > 0 if positive else x >= 0
    if t is float:
        return math.isfinite(x) and (x > 0 if positive else x >= 0)
    return False


def _is_start(x: Any) -> bool:
    """A callable, or ``(callable, args)`` with ``args`` an exact tuple or list."""
    if type(x) is tuple:
        return len(x) == 2 and callable(x[0]) and type(x[1]) in (tuple, list)
    return callable(x)


def _is_shutdown(x: Any) -> bool:
    return _one_of(x, SHUTDOWN_ATOMS) or _is_seconds(x, positive=False)


def _fields(d: dict) -> dict:
    """The entries of ``d`` whose key is an exact ``str`` (reads bypass any subclass override)."""
    return {k: v for k, v in dict.items(d) if type(k) is str}


_same = same


# -- flags -------------------------------------------------------------------------


def check_flags(flags: Any) -> tuple:
    """``("ok", full_flags)`` (a new dict of the four keys, defaults filled) or ``("error", reason)``.

    Checked in the order strategy, intensity, period, auto_shutdown; a
    non-dict is ``("invalid_flags", flags)``.  Unknown keys are ignored.
    """
    if not isinstance(flags, dict):
        return ("error", ("invalid_flags", flags))
    given = _fields(flags)
    full = {k: given.get(k, DEFAULT_FLAGS[k]) for k in _FLAG_KEYS}
    strategy, intensity, period, auto = (full[k] for k in _FLAG_KEYS)
    if not _one_of(strategy, STRATEGIES):
        return ("error", ("invalid_strategy", strategy))
    if not _is_count(intensity):
        return ("error", ("invalid_intensity", intensity))
    if not _is_seconds(period, positive=True):
        return ("error", ("invalid_period", period))
    if not _one_of(auto, AUTO_SHUTDOWNS):
        return ("error", ("invalid_auto_shutdown", auto))
    return ("ok", full)


# -- child specs ---------------------------------------------------------------------


def check_child(spec: Any) -> tuple:
    """``("ok", full_spec)`` (a new dict of :data:`SPEC_KEYS`, defaults filled) or ``("error", reason)``.

    The reasons and their order are the module's (1 to 8); ``start`` is kept
    as given (the very object).  Unknown keys are ignored.
    """
    if not isinstance(spec, dict):
        return ("error", ("invalid_child_spec", spec))
    given = _fields(spec)
    if "id" not in given:
        return ("error", "missing_id")
    if "start" not in given:
        return ("error", "missing_start")
    start = given["start"]
    if not _is_start(start):
        return ("error", ("invalid_mfa", start))
    restart = given.get("restart", "permanent")
    if not _one_of(restart, RESTARTS):
        return ("error", ("invalid_restart_type", restart))
    kind = given.get("type", "worker")
    if not _one_of(kind, TYPES):
        return ("error", ("invalid_child_type", kind))
    shutdown = given.get("shutdown", _MISSING)
    if shutdown is _MISSING:
        shutdown = "infinity" if kind == "supervisor" else _WORKER_SHUTDOWN
    elif not _is_shutdown(shutdown):
        return ("error", ("invalid_shutdown", shutdown))
    significant = given.get("significant", False)
    if type(significant) is not bool:
        return ("error", ("invalid_significant", significant))
    return (
        "ok",
        {
            "id": given["id"],
            "start": start,
            "restart": restart,
            "shutdown": shutdown,
            "type": kind,
            "significant": significant,
        },
    )


def check_specs(specs: Any, flags: dict) -> tuple:
    """``("ok", [full_spec, ...])`` in the given order, or ``("error", reason)``.

    ``specs`` must be an exact list or tuple (else ``("invalid_child_spec",
    specs)``); ``flags`` are full, checked flags.  Child by child, as OTP's
    ``check_startspec``: :func:`check_child`, then the significant
    combinations, then a repeated id (ids compare by identity or ``==``).
    Last, ``simple_one_for_one`` wants exactly one spec.
    """
    if type(specs) is not list and type(specs) is not tuple:
        return ("error", ("invalid_child_spec", specs))
    never = flags["auto_shutdown"] == "never"
    checked: list[dict] = []
    for spec in tuple(specs):
        answer = check_child(spec)
        if answer[0] != "ok":
            return answer
        full = answer[1]
        if full["significant"]:
            if never:
                return ("error", _NEVER_SIGNIFICANT)
            if full["restart"] == "permanent":
                return ("error", _PERMANENT_SIGNIFICANT)
        child_id = full["id"]
        if any(_same(earlier["id"], child_id) for earlier in checked):
            return ("error", ("duplicate_child_name", child_id))
        checked.append(full)
    if flags["strategy"] == "simple_one_for_one" and len(checked) != 1:
        return ("error", ("bad_start_spec", specs))
    return ("ok", checked)


def shown_spec(full_spec: dict) -> dict:
    """The spec as ``get_childspec`` answers it: a new dict of :data:`SPEC_KEYS`, in that order."""
    return {k: full_spec[k] for k in SPEC_KEYS}


# -- what a start callable returned --------------------------------------------------


_Answer = Value  # the shared immutable-answer base (ensemble.decide.values)


class Started(_Answer):
    """The child runs as ``pid``; the supervisor links to it and keeps it."""

    __slots__ = ("pid",)
    _fields = ("pid",)
    __match_args__ = _fields
    pid: Any

    def __init__(self, pid: Any) -> None:
        object.__setattr__(self, "pid", pid)


class Failed(_Answer):
    """The start failed with ``reason``."""

    __slots__ = ("reason",)
    _fields = ("reason",)
    __match_args__ = _fields
    reason: Any

    def __init__(self, reason: Any) -> None:
        object.__setattr__(self, "reason", reason)


class Ignored(_Answer):
    """The start answered ``"ignore"`` (or None): no process.  Use the singleton :data:`IGNORED`."""

    __slots__ = ()
    __match_args__ = ()
    _instance: "Ignored | None" = None

    def __new__(cls) -> "Ignored":
        inst = cls._instance
        if inst is None:
            inst = super().__new__(cls)
            type.__setattr__(cls, "_instance", inst)
        return inst

    def __repr__(self) -> str:
        return "IGNORED"

    def __reduce__(self) -> tuple:
        return (Ignored, ())


IGNORED: Final = Ignored()

StartResult = Started | Ignored | Failed


def _is(x: Any, tag: str) -> bool:
    return type(x) is str and x == tag


def start_result(ret: Any, is_pid: Callable[[Any], bool]) -> StartResult:
    """What a child's start callable returning ``ret`` means (``do_start_child_i``).

    A pid (``is_pid(ret)``) or ``("ok", pid)`` is :class:`Started`; None or
    ``"ignore"`` is :data:`IGNORED`; ``("error", e)`` is ``Failed(e)``;
    anything else is ``Failed(ret)``, the very value (``("ok", not_a_pid)``
    included).  Raising is the runtime's case: ``Failed(exc)``.
    """
    if ret is None or _is(ret, "ignore"):
        return IGNORED
    if type(ret) is tuple and len(ret) == 2:
        tag, value = ret
        if _is(tag, "ok") and is_pid(value):
            return Started(value)
        if _is(tag, "error"):
            return Failed(value)
        return Failed(ret)
    if is_pid(ret):
        return Started(ret)
    return Failed(ret)


# -- restart_child / delete_child ---------------------------------------------------------

OPERATIONS: Final = ("restart_child", "delete_child")
STATES: Final = ("running", "restarting", "stopped")
"""A child's states as :func:`may` reads them: with a process, being restarted, with none."""


def may(op: str, child: Any, strategy: str) -> str | None:
    """None if ``op`` (one of :data:`OPERATIONS`) is allowed on ``child``, else the error reason.

    ``child`` is None for an unknown id, else a mapping whose ``"state"`` is
    one of :data:`STATES`.  Reasons, in the order checked:
    ``"simple_one_for_one"`` under that strategy, ``"not_found"``,
    ``"running"``, ``"restarting"``; only a ``"stopped"`` child may be
    restarted or deleted.  Raises ``ValueError`` for an unknown op or state.
    """
    if not _one_of(op, OPERATIONS):
        raise ValueError(f"unknown child operation {op!r}; expected one of {OPERATIONS}")
    if _is(strategy, "simple_one_for_one"):
        return "simple_one_for_one"
    if child is None:
        return "not_found"
    state = child["state"]
    if _is(state, "stopped"):
        return None
    if _one_of(state, ("running", "restarting")):
        return state
    raise ValueError(f"unknown child state {state!r}; expected one of {STATES}")
