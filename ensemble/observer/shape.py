"""The observer's JSON: what a process, a dispatcher's load and a state look like to the pages.

Pure: every function takes what the shell gathered through ensemble's public
API (``process_info`` dicts, ``dispatcher.dispatchers()``, ``sys.get_status``
answers) and answers plain JSON-ready values (str, int, bool, None, lists and
dicts of them), so ``json.dumps(..., allow_nan=False)`` never fails on them.
Arbitrary terms (names, states, messages, reasons) are shown as bounded
``repr`` text: a huge or hostile value never makes a huge or failed answer.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .pids import pid_id, url_text

__all__ = [
    "MAX_TEXT",
    "MAX_ITEMS",
    "show",
    "pid_ref",
    "call_text",
    "where_text",
    "is_behaviour",
    "is_supervisor",
    "process_row",
    "process_detail",
    "dispatcher_load",
    "application_rows",
    "natural_key",
]

#: The longest text one shown term becomes.
MAX_TEXT = 4000
#: The most entries a list on a page shows (links, monitors, messages).
MAX_ITEMS = 200

_repr = reprlib.Repr()
_repr.maxlevel = 6
_repr.maxtuple = _repr.maxlist = _repr.maxarray = _repr.maxdict = 40
_repr.maxset = _repr.maxfrozenset = _repr.maxdeque = 40
_repr.maxstring = 400
_repr.maxlong = 60
_repr.maxother = 400

_SUPERVISOR_MODULE = "ensemble.supervisor"


def show(x: Any, limit: int = MAX_TEXT) -> str:
    """``x`` as bounded repr text (at most ``limit`` characters); a ``__repr__`` that raises shows its type."""
    try:
        text = _repr.repr(x)
    except Exception:  # noqa: BLE001 - a hostile __repr__ is shown, not raised
        text = f"<{type(x).__name__} (repr failed)>"
    if type(text) is not str:  # a __repr__ answering a str subclass or worse
        text = f"<{type(x).__name__}>"
    if len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..."
    return text


def _int(x: Any) -> int | None:
    return x if type(x) is int and -(2**53) < x < 2**53 else None


def pid_ref(x: Any) -> dict:
    """A pid, or its printed text, (or anything shown where a pid may be) as ``{"text", "url"}``; ``url``
    only for a local pid."""
    text = x[:200] if type(x) is str else show(x, 200)
    return {"text": text, "url": url_text(text) if pid_id(text) is not None else None}


def call_text(call: Any) -> str | None:
    """An ``initial_call`` ``(module, qualname, arity)`` as ``module.qualname/arity``; None for none."""
    if type(call) is tuple and len(call) == 3 and all(type(p) in (str, int) for p in call):
        return f"{call[0]}.{call[1]}/{call[2]}"[:300]
    return None if call is None else show(call, 300)


def where_text(frame: Any) -> str | None:
    """A ``current_function`` ``(module, qualname, line)`` as ``module.qualname:line``; None for none."""
    if type(frame) is tuple and len(frame) == 3 and all(type(p) in (str, int) for p in frame):
        return f"{frame[0]}.{frame[1]}:{frame[2]}"[:300]
    return None if frame is None else show(frame, 300)


def is_behaviour(initial_call: Any) -> bool:
    """True when ``initial_call`` is a behaviour's (``(module, "Class.init", 0)``): ``sys`` can ask it."""
    return (
        type(initial_call) is tuple
        and len(initial_call) == 3
        and type(initial_call[1]) is str
        and initial_call[1].endswith(".init")
        and type(initial_call[2]) is int
        and initial_call[2] == 0
    )


def is_supervisor(initial_call: Any) -> bool:
    """True when ``initial_call`` is a supervisor's (a behaviour started by ``ensemble.supervisor``)."""
    return is_behaviour(initial_call) and type(initial_call[0]) is str and initial_call[0] == _SUPERVISOR_MODULE


def _get(info: Mapping, key: str) -> Any:
    try:
        return info.get(key)
    except Exception:  # noqa: BLE001 - a hostile mapping answers nothing
        return None


def _status(x: Any) -> str:
    return x if type(x) is str and len(x) <= 40 else show(x, 40)


def _opt_text(x: Any, limit: int = 200) -> str | None:
    if x is None:
        return None
    return x[:limit] if type(x) is str else show(x, limit)


def process_row(pid_repr: str, info: Any) -> dict | None:
    """One line of the processes table from ``process_info(pid)``; None when the process is gone (``info`` None)."""
    if not isinstance(info, Mapping):
        return None
    ref = pid_ref(pid_repr)
    return {
        "pid": ref["text"],
        "url": ref["url"],
        "name": _opt_text(_get(info, "registered_name")),
        "status": _status(_get(info, "status")),
        "message_queue_len": _int(_get(info, "message_queue_len")),
        "memory": _int(_get(info, "memory")),
        "dispatcher": _opt_text(_get(info, "dispatcher")),
        "carrier": _opt_text(_get(info, "carrier")),
        "current_function": where_text(_get(info, "current_function")),
        "initial_call": call_text(_get(info, "initial_call")),
        "supervisor": is_supervisor(_get(info, "initial_call")),
    }


def _refs(xs: Any) -> list[dict]:
    if type(xs) not in (list, tuple):
        return []
    return [pid_ref(x) for x in xs[:MAX_ITEMS]]


def _monitor(m: Any) -> dict:
    target = m[1] if type(m) is tuple and len(m) == 2 else m
    return pid_ref(target)


def state_view(answer: Any) -> dict:
    """What the process page shows as state, from the shell's tagged answer.

    ``("status", dict)``: a behaviour's ``sys.get_status``; ``("cell", value)``:
    an actor's state cell; ``("none", why)``: nothing to show; ``("error",
    why)``: the question failed (a timeout, the process exited).
    """
    if type(answer) is tuple and len(answer) == 2 and type(answer[0]) is str:  # str: no hostile __eq__
        kind, value = answer
        if kind == "status" and isinstance(value, Mapping):
            return {
                "kind": "sys",
                "module": _opt_text(_get(value, "module")),
                "status": _opt_text(_get(value, "status")),
                "state": show(_get(value, "state")),
            }
        if kind == "cell":
            return {"kind": "cell", "state": show(value)}
        if kind in ("none", "error"):
            return {"kind": kind, "reason": _opt_text(value, 400)}
    return {"kind": "error", "reason": "unexpected answer " + show(answer, 200)}


def process_detail(pid_repr: str, info: Any, state: Any) -> dict | None:
    """The process page's data from ``process_info(pid)`` and its state answer; None when the process is gone."""
    row = process_row(pid_repr, info)
    if row is None:
        return None
    messages = _get(info, "messages")
    shown = [show(m, 400) for m in messages[:MAX_ITEMS]] if type(messages) in (list, tuple) else []
    monitors = _get(info, "monitors")
    row.update(
        {
            "links": _refs(_get(info, "links")),
            "monitors": [_monitor(m) for m in monitors[:MAX_ITEMS]] if type(monitors) in (list, tuple) else [],
            "monitored_by": _refs(_get(info, "monitored_by")),
            "ancestors": _refs(_get(info, "ancestors")),
            "trap_exit": _get(info, "trap_exit") is True,
            "exit_pending": _get(info, "exit_pending") is True,
            "messages": shown,
            "state": state_view(state),
        }
    )
    return row


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """Sort key putting ``blocking-2`` before ``blocking-10``."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(name) if p)


def dispatcher_load(defined: Sequence[Any], placements: Iterable[Any],
                    idle: dict[Any, Sequence[Any]] | None = None) -> list[dict]:
    """Each dispatcher with its processes per carrier, from ``dispatcher.dispatchers()`` and each live
    process's ``(dispatcher, carrier)``; ``idle`` (``dispatcher.carriers(name)`` by name) lists
    carriers that hold no process yet, with 0.

    Defined dispatchers come first in their given order; a dispatcher that
    still has processes but is no longer defined (shut down) follows, marked
    ``"defined": False``.  A carrier is listed once it holds a process;
    counts add up to the placements given.
    """
    load: dict[str, dict[str, int]] = {}
    for p in placements:
        if type(p) is not tuple or len(p) != 2:
            continue
        d = p[0] if type(p[0]) is str else show(p[0], 100)
        c = p[1] if type(p[1]) is str else show(p[1], 100)
        carriers = load.setdefault(d, {})
        carriers[c] = carriers.get(c, 0) + 1
    for d, names_of in (idle or {}).items():
        if type(d) is not str or d not in defined:
            continue
        carriers = load.setdefault(d, {})
        for c in names_of:
            if type(c) is str:
                carriers.setdefault(c, 0)
    names = [d if type(d) is str else show(d, 100) for d in defined]
    seen = set()
    out = []
    for d in names + sorted(set(load) - set(names)):
        if d in seen:
            continue
        seen.add(d)
        carriers = load.get(d, {})
        out.append(
            {
                "name": d,
                "defined": d in names,
                "processes": sum(carriers.values()),
                "carriers": [{"name": c, "processes": carriers[c]} for c in sorted(carriers, key=natural_key)],
            }
        )
    return out


def application_rows(apps: Iterable[Any]) -> list[dict]:
    """The applications table from ``(name, top)`` pairs (``top``: the pid its start answered, or None)."""
    out = []
    for a in apps:
        if type(a) is not tuple or len(a) != 2:
            continue
        name, top = a
        out.append({"name": _opt_text(name), "supervisor": None if top is None else pid_ref(top)})
    return out
