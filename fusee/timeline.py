"""A run as JSON for people: its summary and its timeline, assembled from its journal records (pure).

:func:`timeline` turns a run's ``(lsn, record)`` pairs (``Engine.describe``'s ``"journal"``, or what
:mod:`fusee.inspection` reads from a directory) into entries in journal order: one per operation
(step, sleep, signal wait, child, send, recorded value), one per signal that arrived and per cancel,
and the run's start and end.  A step entry gathers its attempts.  The journal records no time for a
step (only the run's start and end, a failed attempt's ``retry_at``, a timer's ``fire_at`` and a
wait's ``deadline``), so entries carry the times that are recorded and the ``lsn`` that orders them.

:func:`view` makes a whole run's JSON (the HTTP API's and the CLI's ``runs show``): status, type,
input, result or error, links (parent, continued-from) and the timeline.  :func:`plain` makes any
value JSON-safe (codec tree form; anything else as its ``repr``).  Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import codec
from . import records as r
from .errors import Error

__all__ = ["plain", "error_json", "timeline", "streams", "view", "record_json"]


def plain(value: Any) -> Any:
    """``value`` as a JSON value: the codec's tree form (registered dataclasses as ``{"$dc": ...}``), or
    ``{"$repr": repr(value)}`` for what the codec refuses."""
    try:
        return codec.to_tree(value)
    except Exception:
        try:
            text = repr(value)
        except Exception:
            text = object.__repr__(value)
        return {"$repr": text[:2000]}


def error_json(exc: Any) -> Any:
    """An outcome's error as JSON: ``{"code", "message"}`` plus its ``failure`` / ``reason`` /
    ``deadline`` when it has one; a JSON value that is not an exception is returned as :func:`plain`."""
    if not isinstance(exc, BaseException):
        return plain(exc)
    code = exc.code if isinstance(exc, Error) else "error"
    try:
        message = str(exc)
    except Exception:
        message = type(exc).__name__
    out: dict[str, Any] = {"code": code, "type": type(exc).__name__, "message": message}
    for name in ("failure", "reason", "deadline", "id", "status", "update_id"):
        if name in getattr(exc, "__dict__", {}):
            out[name] = plain(exc.__dict__[name])
    return out


def record_json(rec: Any) -> dict[str, Any]:
    """One record in its canonical JSON form (``{"t": kind, fields...}``), payloads as codec trees."""
    try:
        return codec.loads_tree(r.encode_record(rec))  # type: ignore[no-any-return]
    except Exception:
        return {"t": type(rec).__name__.lower(), "$repr": repr(rec)[:2000]}


def _entry(kind: str, lsn: int, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "lsn": lsn, **fields}


def timeline(journal: Iterable[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The timeline of one run's records, in the order of each entry's first record.

    Entry kinds: ``start``, ``step`` (``name``, ``status`` "ok"/"error"/"running", ``attempts``: each
    failed one with ``error`` and ``retry_at``, and the last), ``sleep`` (``name``, ``fire_at``,
    ``fired``), ``wait`` (``signal``, ``deadline``, ``outcome`` "signal"/"timeout"/None, ``value``),
    ``signal`` (an arrival: ``name``, ``value``, ``dedup``), ``value`` (``value_kind``, ``value``),
    ``child`` (``id``, ``type``, ``parent_close``, ``status`` and ``result``/``failure`` once done),
    ``send`` (``target``, ``name``, ``value``), ``cancel`` (``reason``, ``by``), ``update``
    (``update_id``, ``name``, ``value``, ``status`` "running"/"ok"/"error", ``result``/``error``),
    ``async`` (``name``, ``status`` "waiting"/"ok"/"error", ``started``, ``result``/``error``; the
    token's secret is not shown), ``stream`` (one per stream, where its first record is: ``name``,
    ``chunks`` (how many), ``by_steps`` (the names of the steps whose bodies wrote some), ``closed``,
    ``first`` (the first 20 chunks), ``last`` (its last record's LSN)) and ``end`` (``status``, ``finished``, ``result`` or
    ``failure``/``reason``).  A step that paused has ``status`` "paused" and its attempts show
    ``outcome`` "paused" and "resumed".
    """
    out: list[dict[str, Any]] = []
    ops: dict[int, dict[str, Any]] = {}
    updates: dict[str, dict[str, Any]] = {}
    streams: dict[str, dict[str, Any]] = {}
    for lsn, rec in journal:
        t = type(rec)
        if t is r.Start:
            e = _entry("start", lsn, at=rec.started, type=rec.wtype, version=rec.version, input=plain(rec.input))
            if rec.deadline is not None:
                e["deadline"] = rec.deadline
            if rec.parent is not None:
                e["parent"] = plain(rec.parent)
            if rec.origin is not None:
                e["continued_from"] = plain(rec.origin.get("run") if type(rec.origin) is dict else rec.origin)
            out.append(e)
        elif t is r.Attempt or t is r.Step or t is r.Paused:
            e = ops.get(rec.seq)
            if e is None or e["kind"] != "step":
                e = ops[rec.seq] = _entry("step", lsn, seq=rec.seq, name=rec.name, status="running", attempts=[])
                out.append(e)
            if t is r.Attempt:
                e["attempts"].append({"attempt": rec.attempt, "outcome": "error", "error": plain(rec.error), "retry_at": rec.retry_at, "lsn": lsn})
            elif t is r.Paused:
                e["attempts"].append({"attempt": rec.attempt, "outcome": "paused", "error": plain(rec.error), "lsn": lsn})
                e["status"] = "paused"
            else:
                a: dict[str, Any] = {"attempt": rec.attempt, "outcome": rec.status, "lsn": lsn}
                a["result" if rec.status == "ok" else "error"] = plain(rec.payload)
                e["attempts"].append(a)
                e["status"] = rec.status
                e["result" if rec.status == "ok" else "error"] = plain(rec.payload)
        elif t is r.Timer:
            e = ops[rec.seq] = _entry("sleep", lsn, seq=rec.seq, name=rec.name, fire_at=rec.fire_at, fired=False)
            out.append(e)
        elif t is r.Fired:
            e = ops.get(rec.seq)
            if e is not None:
                e["fired"] = True
        elif t is r.Wait:
            e = ops[rec.seq] = _entry("wait", lsn, seq=rec.seq, signal=rec.name, deadline=rec.deadline, outcome=None)
            out.append(e)
        elif t is r.Waited:
            e = ops.get(rec.seq)
            if e is not None:
                e["outcome"] = rec.outcome
                if rec.outcome == "signal":
                    e["value"] = plain(rec.payload)
        elif t is r.Signal:
            out.append(_entry("signal", lsn, name=rec.name, value=plain(rec.payload), dedup=plain(rec.dedup)))
        elif t is r.Value:
            out.append(_entry("value", lsn, seq=rec.seq, value_kind=rec.kind, value=plain(rec.value)))
        elif t is r.Cancel:
            out.append(_entry("cancel", lsn, reason=plain(rec.reason), by=rec.by))
        elif t is r.Child:
            e = ops[rec.seq] = _entry(
                "child", lsn, seq=rec.seq, id=rec.id, type=rec.wtype, input=plain(rec.input),
                parent_close=rec.parent_close, deadline=rec.deadline, status="running",
            )
            out.append(e)
        elif t is r.ChildDone:
            e = ops.get(rec.seq)
            if e is not None:
                e["status"] = rec.status
                if rec.status == "completed":
                    e["result"] = plain(rec.payload)
                elif rec.status != "started":
                    e["failure"] = plain(rec.payload)
        elif t is r.Send:
            out.append(_entry("send", lsn, seq=rec.seq, target=rec.target, name=rec.name, value=plain(rec.payload)))
        elif t is r.Resumed:
            e = ops.get(rec.seq)
            if e is not None:
                e["attempts"].append({"outcome": "resumed", "lsn": lsn})
                e["status"] = "running"
        elif t is r.Update:
            e = updates[rec.id] = _entry("update", lsn, update_id=rec.id, name=rec.name, value=plain(rec.payload), status="running")
            out.append(e)
        elif t is r.UpdateDone:
            e = updates.get(rec.id)
            if e is not None:
                e["status"] = rec.status
                e["result" if rec.status == "ok" else "error"] = plain(rec.payload)
        elif t is r.Awaiting:  # the token's secret is not shown: it is a capability
            e = ops[rec.seq] = _entry("async", lsn, seq=rec.seq, name=rec.name, status="waiting", started=False)
            out.append(e)
        elif t is r.AsyncStarted:
            e = ops.get(rec.seq)
            if e is not None:
                e["started"] = True
        elif t is r.Settled:
            e = ops.get(rec.seq)
            if e is not None:
                e["status"] = rec.status
                e["result" if rec.status == "ok" else "error"] = plain(rec.payload)
        elif t is r.Chunk or t is r.StreamClose:
            e = streams.get(rec.stream)
            if e is None:
                e = streams[rec.stream] = _entry("stream", lsn, name=rec.stream, chunks=0, by_steps=[], closed=False, first=[], last=lsn)
                out.append(e)
            e["last"] = lsn
            if rec.step is not None and rec.step not in e["by_steps"]:
                e["by_steps"].append(rec.step)
            if t is r.Chunk:
                e["chunks"] += 1
                if len(e["first"]) < 20:
                    e["first"].append(plain(rec.payload))
            else:
                e["closed"] = True
        elif t is r.Done:
            e = _entry("end", lsn, status=rec.status, at=rec.finished)
            key = {"completed": "result", "failed": "failure", "continued": "next_input", "timed_out": "deadline"}.get(rec.status, "reason")
            e[key] = plain(rec.payload)
            out.append(e)
    return out


def streams(journal: Iterable[tuple[int, Any]]) -> list[dict[str, Any]]:
    """The streams of one run's records, in the order each was first written: ``name``, ``chunks`` (how
    many), ``closed``, ``by_steps`` (the steps whose bodies wrote some)."""
    return [
        {k: e[k] for k in ("name", "chunks", "closed", "by_steps")}
        for e in timeline(journal)
        if e["kind"] == "stream"
    ]


def _links(journal: list[tuple[int, Any]]) -> dict[str, Any]:
    """The run's links to other runs: its parent, the run it continues, whether it continued as new."""
    links: dict[str, Any] = {}
    for _, rec in journal:
        if type(rec) is r.Start:
            if type(rec.parent) is dict:
                links["parent"] = {"id": rec.parent.get("id"), "run": rec.parent.get("run")}
            if type(rec.origin) is dict:
                links["continued_from"] = {"run": rec.origin.get("run")}
        elif type(rec) is r.Done and rec.status == "continued":
            links["continued_as_new"] = True
        elif type(rec) is r.Child:
            links.setdefault("children", []).append({"id": rec.id, "type": rec.wtype})
    return links


def view(d: dict[str, Any], *, journal: bool = False) -> dict[str, Any]:
    """The JSON of one run described as ``Engine.describe`` does (``d``): its fields made JSON-safe, its
    ``error`` as :func:`error_json`, ``links``, ``timeline`` and, with ``journal``, the raw records."""
    records = list(d.get("journal") or [])
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k == "journal":
            continue
        if k == "error":
            out[k] = None if v is None else error_json(v)
        elif k in ("input", "result"):
            out[k] = plain(v)
        else:
            out[k] = v if v is None or type(v) in (int, float, str, bool) else plain(v)
    out["links"] = _links(records)
    out["timeline"] = timeline(records)
    if journal:
        out["journal"] = [{"lsn": lsn, **record_json(rec)} for lsn, rec in records]
    return out
