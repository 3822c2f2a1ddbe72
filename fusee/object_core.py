"""Virtual objects, the pure part: an object key's state, its commits and their fold (spec §3.9).

An object key (type ``cart``, key ``alice``) is a coordinator run ``fusee.object/cart/alice``
(:mod:`fusee.objects`, the imperative shell).  Each exclusive call and each outside edit is an update of
that run (``Update`` / ``UpdateDone``, so it takes its turn, is applied once per call ID and replays at
its place); the ``UpdateDone``'s payload is a **commit** (:func:`commit`, :func:`edit`, :func:`again`):
the answer and the state change together, in one record, so a handler's state change is durable exactly
when its answer is, and a handler that failed changes nothing.

Everything here is a function of plain values, with no I/O:

* :class:`Obj`: a key's committed state (``values``, ``version``), the calls its run took (``calls``:
  when to continue as new) and the answers of its latest calls (``recent``: a call ID sent again after
  the run continued as new answers the same);
* :class:`Delta`: what a handler did to the state (keys set, keys removed, whether it cleared it first);
* :func:`commit` / :func:`edit` / :func:`again`: the commit payload of a call, an outside edit, a call
  answered from ``recent``; :func:`apply`: the state after a commit (the one rule both the live run
  and replay use: a replayed handler's state is the recorded commit's, never what it computed again);
* :func:`state_of`: the fold of a coordinator run's journal (read from outside, parked or not);
* :func:`check_version`: an edit's optimistic check; :func:`rolled`: the input of the next run.

Laws (tests/fusee/test_objects_core.py): ``apply(o, commit(o, ...)) `` is the state the handler left, a
failure changes nothing, the version grows by one exactly when something changed, the fold of the
commits equals applying them one by one, a call ID answered within the last :data:`RECENT_CALLS` calls
answers the same, and :func:`rolled` keeps values, version and answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final, Iterable, Mapping

from . import records as _r

__all__ = [
    "OBJECT_TYPE",
    "ROLL_AFTER",
    "RECENT_CALLS",
    "Obj",
    "Delta",
    "object_id",
    "parse_object_id",
    "new",
    "commit",
    "edit",
    "again",
    "apply",
    "answer_of",
    "recall",
    "check_version",
    "is_commit",
    "state_of",
    "rolled",
]

#: The coordinator runs' workflow type (ID ``fusee.object/<type>/<key>``).
OBJECT_TYPE: Final = "fusee.object"
#: Calls a key's run takes before it continues as new (its journal stays short; replay stays quick).
ROLL_AFTER: Final = 200
#: The answers a key keeps for call IDs sent again after its run continued as new (at least this many).
RECENT_CALLS: Final = 256


def object_id(type: str, key: str) -> str:
    """The coordinator run's workflow ID of object ``type`` / ``key``: ``fusee.object/<type>/<key>``."""
    return f"{OBJECT_TYPE}/{type}/{key}"


def parse_object_id(id: Any) -> tuple[str, str] | None:
    """``(type, key)`` of a coordinator run's workflow ID, or None (a type name has no ``/``)."""
    if type(id) is not str or not id.startswith(OBJECT_TYPE + "/"):
        return None
    rest = id[len(OBJECT_TYPE) + 1 :]
    t, sep, k = rest.partition("/")
    return (t, k) if sep and t else None


@dataclass(frozen=True, slots=True)
class Delta:
    """What a handler did to its key's state: ``cleared`` it first (every key gone), then removed the keys
    ``removed`` and set ``sets`` (the last value of each key set).  Empty: nothing changed."""

    sets: Mapping[str, Any] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    cleared: bool = False

    def __bool__(self) -> bool:
        return bool(self.sets) or bool(self.removed) or self.cleared


@dataclass(frozen=True, slots=True)
class Obj:
    """An object key's committed state: ``values`` (never mutated: a commit makes a new dict), its
    ``version`` (0 for a key never changed; one more per commit that changed something), the ``calls``
    its current run took, and ``recent``: ``(call ID, answer)`` of its latest calls, oldest first, at
    most :data:`RECENT_CALLS` (an answer is ``{"ok": True, "value": v}`` or ``{"ok": False,
    "failure": f}``)."""

    type: str
    key: str
    values: Mapping[str, Any] = field(default_factory=dict)
    version: int = 0
    calls: int = 0
    recent: tuple[tuple[str, Any], ...] = ()

    def plain(self) -> dict[str, Any]:
        """The object as a JSON object (a coordinator run's input)."""
        return {
            "type": self.type,
            "key": self.key,
            "values": dict(self.values),
            "version": self.version,
            "calls": self.calls,
            "recent": [[cid, a] for cid, a in self.recent],
        }

    @classmethod
    def of_plain(cls, d: Any) -> "Obj":
        """The object back from :meth:`plain` (``TypeError`` for anything else)."""
        if not isinstance(d, dict) or type(d.get("type")) is not str or type(d.get("key")) is not str:
            raise TypeError(f"an object's input is a JSON object with its type and key, not {d!r}")
        values = d.get("values") or {}
        if not isinstance(values, dict):
            raise TypeError(f"an object's values are a JSON object, not {values!r}")
        return cls(
            d["type"],
            d["key"],
            dict(values),
            int(d.get("version", 0)),
            int(d.get("calls", 0)),
            tuple((cid, a) for cid, a in d.get("recent", ())),
        )


def new(type: str, key: str) -> Obj:
    """A key never called: no values, version 0."""
    return Obj(type, key)


# -- commits (the UpdateDone payloads) ------------------------------------------------------------


def _answer(ok: bool, result: Any) -> dict[str, Any]:
    return {"ok": True, "value": result} if ok else {"ok": False, "failure": result}


def commit(o: Obj, call_id: str, ok: bool, result: Any, delta: Delta) -> dict[str, Any]:
    """The commit of exclusive call ``call_id`` on ``o``: its answer (``ok``: ``result`` is the handler's
    value, else its failure) and, when ``ok``, the handler's ``delta`` (a failed handler commits no change).
    The version grows by one when the commit changes something."""
    changed = ok and bool(delta)
    p: dict[str, Any] = _answer(ok, result)
    p["call"] = call_id
    if changed:
        p["set"] = dict(delta.sets)
        p["del"] = list(delta.removed)
        p["clear"] = delta.cleared
    p["version"] = o.version + 1 if changed else o.version
    return p


def edit(o: Obj, op: str, key: str | None, value: Any = None) -> dict[str, Any]:
    """The commit of an outside edit: ``op`` ``"set"`` (``key`` to ``value``) or ``"clear"`` (``key``, or
    every key when ``key`` is None).  Always a new version (the caller asked for a change); answers it."""
    if op == "set":
        delta = Delta({key: value}) if key is not None else Delta()
    elif op == "clear":
        delta = Delta(cleared=True) if key is None else Delta(removed=(key,))
    else:
        raise ValueError(f"an edit is 'set' or 'clear', not {op!r}")
    p: dict[str, Any] = {"ok": True, "value": o.version + 1, "edit": op}
    p["set"] = dict(delta.sets)
    p["del"] = list(delta.removed)
    p["clear"] = delta.cleared
    p["version"] = o.version + 1
    return p


def again(o: Obj, call_id: str, answer: Any) -> dict[str, Any]:
    """The commit of call ``call_id`` sent again after its key's run continued as new: its earlier
    ``answer`` (from :func:`recall`), no change."""
    p = dict(answer)
    p["call"] = call_id
    p["again"] = True
    p["version"] = o.version
    return p


def is_commit(p: Any) -> bool:
    """Whether ``p`` is a commit payload of this module (an ``UpdateDone`` of an object's run)."""
    return isinstance(p, dict) and type(p.get("ok")) is bool and type(p.get("version")) is int


def apply(o: Obj, p: Mapping[str, Any]) -> Obj:
    """``o`` after commit ``p``: its change applied (cleared, then removed, then set), its version, one more
    call, its answer remembered under its call ID (not for an edit, nor for one answered again)."""
    values: Mapping[str, Any] = o.values
    if p.get("clear") or p.get("del") or p.get("set"):
        new_values = {} if p.get("clear") else dict(values)
        for k in p.get("del") or ():
            new_values.pop(k, None)
        new_values.update(p.get("set") or {})
        values = new_values
    recent = o.recent
    cid = p.get("call")
    if type(cid) is str and not p.get("again") and "edit" not in p:
        recent = (recent + ((cid, answer_of(p)),))[-RECENT_CALLS:]
    return Obj(o.type, o.key, values, int(p["version"]), o.calls + 1, recent)


def answer_of(p: Mapping[str, Any]) -> dict[str, Any]:
    """The answer part of commit ``p``: ``{"ok": True, "value": v}`` or ``{"ok": False, "failure": f}``."""
    return _answer(True, p.get("value")) if p.get("ok") else _answer(False, p.get("failure"))


def recall(o: Obj, call_id: Any) -> dict[str, Any] | None:
    """The answer ``o`` remembers for ``call_id`` (the latest with that ID), or None."""
    for cid, a in reversed(o.recent):
        if cid == call_id:
            return a
    return None


def check_version(o: Obj, expected: Any) -> int | None:
    """None if an edit expecting version ``expected`` (None: any) may go on; else the version ``o`` has."""
    if expected is None or expected == o.version:
        return None
    return o.version


def state_of(input: Any, journal: Iterable[tuple[int, Any]]) -> tuple[Obj, int]:
    """The committed state of a coordinator run with ``input`` whose journal is ``journal`` (``(lsn,
    record)`` pairs, as ``describe`` gives them), and the LSN of its last commit (0: none): the commits
    of its ``UpdateDone`` records folded in journal order."""
    o = Obj.of_plain(input)
    last = 0
    for lsn, rec in journal:
        if type(rec) is _r.UpdateDone and rec.status == "ok" and is_commit(rec.payload):
            o = apply(o, rec.payload)
            last = lsn
    return o, last


def rolled(o: Obj) -> Obj:
    """The input of the run ``o``'s run continues as new with: the same values, version and answers, no calls."""
    return replace(o, calls=0)
