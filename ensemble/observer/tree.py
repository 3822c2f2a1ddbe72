"""Supervision trees from the supervisors' answers: which supervisors are roots, and what hangs below.

Pure.  The shell asks every supervisor it found (``supervisor.which_children``,
with a timeout) and hands the answers here, keyed by each supervisor's
printed pid; this builds the forest the page draws.  Whatever the answers say
(cycles, a child listed under two supervisors, supervisors that never
answered), every supervisor appears exactly once with its children expanded,
and the walk ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .pids import pid_id, url_text
from .shape import show

__all__ = ["child_rows", "roots", "build_forest"]


def child_rows(answer: Any) -> list[tuple] | None:
    """The well-formed ``(id, child, type, modules)`` rows of an ``("ok", rows)`` answer; None for any other answer."""
    if type(answer) is not tuple or len(answer) != 2 or type(answer[0]) is not str or answer[0] != "ok":
        return None
    rows = answer[1]
    if not isinstance(rows, (list, tuple)):
        return None
    return [r for r in rows if type(r) is tuple and len(r) == 4]


def _child_key(child: Any) -> str | None:
    """The printed pid of a child that is a local process, else None."""
    return child if type(child) is str and pid_id(child) is not None else None


def roots(supervisors: Sequence[str], answers: Mapping[str, Any]) -> list[str]:
    """The supervisors no answer lists as a child, in the given order."""
    listed = set()
    for sup in supervisors:
        for row in child_rows(answers.get(sup)) or ():
            key = _child_key(row[1])
            if key is not None:
                listed.add(key)
    return [s for s in supervisors if s not in listed]


def _node(pid: str | None, child_id: Any, kind: Any, names: Mapping[str, Any]) -> dict:
    name = names.get(pid) if pid is not None else None
    return {
        "pid": pid,
        "url": url_text(pid) if pid is not None and pid_id(pid) is not None else None,
        "id": None if child_id is None else child_id[:200] if type(child_id) is str else show(child_id, 200),
        "type": kind if type(kind) is str and kind in ("supervisor", "worker") else show(kind, 40),
        "name": None if name is None else show(name, 200) if type(name) is not str else name[:200],
        "state": "ok",
        "children": [],
    }


def build_forest(
    supervisors: Sequence[str], answers: Mapping[str, Any], names: Mapping[str, Any] | None = None
) -> list[dict]:
    """The supervision forest: one tree per root supervisor (see :func:`roots`), then any supervisor a cycle hid.

    ``supervisors``: the printed pids of the supervisors found, oldest first;
    ``answers``: each one's ``("ok", which_children rows)`` (a child's pid
    printed, or ``"restarting"`` or None) or ``("error", reason)``;
    ``names``: registered names by printed pid.  A node is ``{"pid", "url",
    "id", "type", "name", "state", "children"}``; ``state`` is ``"ok"``, the
    reason a supervisor did not answer, ``"restarting"``, ``"undefined"`` (a
    child not running) or ``"shown above"`` (a supervisor already drawn).
    Each supervisor of ``supervisors`` is drawn with its children exactly
    once; other pids may be listed under several supervisors, as answered.
    """
    names = names or {}
    expanded: set[str] = set()
    forest: list[dict] = []
    order = list(dict.fromkeys(s for s in supervisors if type(s) is str))
    known = set(order)
    for start in roots(order, answers) + order:
        if start in expanded:
            continue
        top = _node(start, None, "supervisor", names)
        forest.append(top)
        stack = [(top, start)]
        expanded.add(start)
        while stack:  # iterative: a deep chain of supervisors cannot exhaust the recursion limit
            node, sup = stack.pop()
            rows = child_rows(answers.get(sup))
            if rows is None:
                answer = answers.get(sup)
                failed = type(answer) is tuple and len(answer) == 2 and type(answer[0]) is str and answer[0] == "error"
                why = answer[1] if failed else answer
                node["state"] = "no answer: " + (why if type(why) is str else show(why, 200))
                continue
            for child_id, child, kind, _modules in rows:
                key = _child_key(child)
                kid = _node(key, child_id, kind, names)
                if key is None:
                    kid["state"] = "restarting" if type(child) is str and child == "restarting" else "undefined"
                elif key in known and key in expanded:
                    kid["state"] = "shown above"
                elif key in known:
                    expanded.add(key)
                    stack.append((kid, key))
                node["children"].append(kid)
    return forest
