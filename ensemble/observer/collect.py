"""What the observer asks the node, through ensemble's public API, never hanging on a busy process.

The imperative shell of the observer: every question that waits on another
process (a supervisor's children, the application controller, a behaviour's
status) has a deadline.  Questions without a timeout of their own are asked
by short-lived helper processes that answer to an alias; past the deadline
the helpers are killed and the alias is dropped, so a late answer is lost,
not left in anyone's mailbox.  The answers are shaped by the pure modules
(:mod:`.shape`, :mod:`.tree`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import ensemble as e
from ensemble import application, dispatcher, supervisor
from ensemble import sys as esys

from . import shape, tree

__all__ = [
    "NotFound",
    "Refused",
    "ask_all",
    "find",
    "processes",
    "process",
    "kill",
    "supervision",
    "applications",
    "dispatchers",
]

_ROW_KEYS = (
    "registered_name",
    "status",
    "message_queue_len",
    "memory",
    "dispatcher",
    "carrier",
    "current_function",
    "initial_call",
)


class NotFound(LookupError):
    """No live local process has that number (it exited, or never was)."""


class Refused(ValueError):
    """The observer will not do that (kill the process serving the request)."""


def find(number: int) -> e.Pid:
    """The live local process printed ``<0.number.0>``; raises :class:`NotFound`."""
    text = f"<0.{number}.0>"
    for p in e.processes():
        if repr(p) == text:
            return p
    raise NotFound(f"no process {text}: it has exited (or never existed)")


def _asker(tag: Any, key: Hashable, fn: Callable[..., Any], args: tuple) -> None:
    try:
        answer: tuple = ("ok", fn(*args))
    except Exception as err:  # noqa: BLE001 - the question failed: that is the answer
        answer = ("error", shape.show(getattr(err, "reason", err), 300))
    e.send(tag, (tag, key, answer))


def ask_all(calls: Sequence[tuple[Hashable, Callable[..., Any], tuple]], timeout: float) -> dict:
    """``{key: ("ok", value) | ("error", reason)}`` for each ``(key, fn, args)``, each asked in a process of
    its own; a call that has not answered ``timeout`` seconds after the start answers
    ``("error", "no answer within ... s")`` and its process is killed."""
    tag = e.alias()
    helpers = {key: e.spawn(_asker, tag, key, fn, args) for key, fn, args in calls}
    answers: dict = {}

    def ours(m: Any) -> Any:
        if type(m) is tuple and len(m) == 3 and m[0] == tag:
            return m
        return e.NOMATCH

    deadline = time.monotonic() + timeout
    try:
        while len(answers) < len(helpers):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            got = e.receive(ours, timeout=left)
            if got is e.TIMEOUT:
                break
            answers[got[1]] = got[2]
    finally:
        e.unalias(tag)
        for key, h in helpers.items():
            if key not in answers:
                e.exit(h, "kill")
        while e.receive(ours, timeout=0) is not e.TIMEOUT:
            pass
    for key in helpers:
        answers.setdefault(key, ("error", f"no answer within {timeout:g} s"))
    return answers


def processes() -> dict:
    """The processes table: ``{"node", "count", "processes": [row, ...]}``, oldest first."""
    rows = []
    for p in e.processes():
        info = {k: e.process_info(p, k) for k in _ROW_KEYS}
        if info["status"] is None:  # exited meanwhile
            continue
        row = shape.process_row(repr(p), info)
        if row is not None:
            rows.append(row)
    return {"node": e.node(), "count": len(rows), "processes": rows}


def _state(p: e.Pid, initial_call: Any, timeout: float) -> tuple:
    """The state answer :func:`ensemble.observer.shape.state_view` shows."""
    if shape.is_behaviour(initial_call):
        try:
            return ("status", esys.get_status(p, timeout=timeout))
        except e.CallError as err:
            why = err.reason
            if why == "timeout":
                return ("error", f"no answer to sys.get_status within {timeout:g} s (busy or suspended?)")
            return ("error", "sys.get_status failed: " + shape.show(why, 300))
    try:
        return ("cell", e.state(p))
    except e.Badarg:
        return ("none", "a plain process: no state cell (not spawn_actor, no set_state) and not a behaviour")


def process(number: int, timeout: float) -> dict:
    """The process page's data; raises :class:`NotFound`."""
    p = find(number)
    info = e.process_info(p)
    if info is None:
        raise NotFound(f"no process {p!r}: it has exited")
    state = _state(p, info.get("initial_call"), timeout) if p is not e.self() else ("none", "the observer itself")
    detail = shape.process_detail(repr(p), info, state)
    if detail is None:
        raise NotFound(f"no process {p!r}: it has exited")
    return detail


def kill(number: int) -> dict:
    """``exit(pid, "kill")``; raises :class:`NotFound`, or :class:`Refused` for the caller's own process."""
    p = find(number)
    if p is e.self():
        raise Refused("the observer does not kill the process serving this request")
    e.exit(p, "kill")
    return {"killed": repr(p)}


def supervision(timeout: float) -> dict:
    """``{"trees": forest}``: every supervisor found by its initial call, asked for its children."""
    live = {repr(p): p for p in e.processes()}
    sups = [t for t, p in live.items() if shape.is_supervisor(e.process_info(p, "initial_call"))]
    raw = ask_all([(t, supervisor.which_children, (live[t],)) for t in sups], timeout)
    answers: dict = {}
    for key, answer in raw.items():
        rows = tree.child_rows(answer)
        if rows is None:
            answers[key] = answer
        else:
            answers[key] = ("ok", [(cid, repr(c) if isinstance(c, e.Pid) else c, kind, m) for cid, c, kind, m in rows])
    names = {}
    for t, p in live.items():
        n = e.process_info(p, "registered_name")
        if n is not None:
            names[t] = n
    return {"trees": tree.build_forest(sups, answers, names)}


def applications(timeout: float) -> dict:
    """``{"applications": [{"name", "supervisor"}]}``; empty while no application controller runs
    (the observer never starts one)."""
    if e.whereis(application.CONTROLLER) is None:
        return {"applications": []}
    which = ask_all([("which", application.which_applications, ())], timeout)["which"]
    if which[0] != "ok":
        return {"applications": [], "error": which[1]}
    names = list(which[1])
    tops = ask_all([(n, application.get_supervisor, (n,)) for n in names], timeout)
    rows = [(n, tops[n][1] if tops[n][0] == "ok" else None) for n in names]
    return {"applications": shape.application_rows(rows)}


def dispatchers() -> dict:
    """``{"dispatchers": [...]}``: each dispatcher with its processes per carrier (see :func:`shape.dispatcher_load`)."""
    placements = []
    for p in e.processes():
        d, c = e.process_info(p, "dispatcher"), e.process_info(p, "carrier")
        if d is not None:
            placements.append((d, c))
    defined = dispatcher.dispatchers()
    idle = {d: dispatcher.carriers(d) for d in defined}
    return {"dispatchers": shape.dispatcher_load(defined, placements, idle)}
