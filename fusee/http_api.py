"""The decisions of fusee's HTTP API, pure: routing, request validation, paging, error statuses.

Everything a client sends is checked here before the engine sees it: :func:`route` maps a method
and raw path to a :class:`Route`; :func:`parse_list_query`, :func:`parse_body` and the ``*_args``
functions turn a query string or body into typed arguments.  Each raises only :class:`BadRequest`
(an HTTP status, a stable ``code`` and the reason) for anything it refuses, so bad input changes
nothing.  :func:`page` filters, orders (newest first) and pages run summaries; :func:`status_of`
gives the HTTP status of a fusee error code.  Nothing here does I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Final, Sequence
from urllib.parse import parse_qsl, unquote

from . import codec
from . import durations as _durations

__all__ = [
    "BadRequest",
    "Route",
    "ListQuery",
    "StartArgs",
    "route",
    "parse_list_query",
    "parse_body",
    "start_args",
    "signal_args",
    "reason_arg",
    "query_args",
    "UpdateArgs",
    "update_args",
    "token_args",
    "no_args",
    "ScheduleArgs",
    "schedule_args",
    "CallArgs",
    "call_args",
    "EditArgs",
    "edit_args",
    "StreamQuery",
    "parse_stream_query",
    "page",
    "encode_cursor",
    "decode_cursor",
    "status_of",
    "MAX_BODY",
    "MAX_DEPTH",
    "LIST_STATUSES",
]

MAX_BODY: Final = 1 << 20  # bytes of a request body, by default
MAX_DEPTH: Final = 64  # nested JSON arrays and objects in a request body
MAX_ID: Final = 1024  # characters of a workflow ID, a type or a signal/query name
MAX_QUERY: Final = 4096  # characters of a query string
LIST_STATUSES: Final = (
    "running", "completed", "failed", "cancelled", "terminated", "continued", "timed_out", "queued", "delayed", "paused",
)
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 1000
MAX_TOKEN: Final = 4096  # characters of an async completion token
DEFAULT_UPDATE_TIMEOUT: Final = 30.0  # seconds an update request waits for its handler, by default
MAX_WAIT: Final = 300.0  # seconds any request may ask to wait (an update's timeout)
MAX_STREAM_WAIT: Final = 60.0  # seconds a stream read may wait for a first new chunk (?wait=)
DEFAULT_STREAM_LIMIT: Final = 1000  # chunks per stream read, by default
MAX_STREAM_LIMIT: Final = 10000

# HTTP status per fusee error code (docs: README "HTTP API"); unknown codes: 500
_STATUS: Final[dict[str, int]] = {
    "bad_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "no_route": 404,
    "method_not_allowed": 405,
    "unsupported_media_type": 415,
    "too_large": 413,
    "not_found": 404,
    "already_exists": 409,
    "not_running": 409,
    "not_paused": 409,
    "update_rejected": 400,
    "update_failed": 422,
    "invalid_token": 400,
    "already_settled": 409,
    "unknown_workflow": 400,
    "not_serializable": 400,
    "busy": 503,
    "shard_crashed": 503,
    "engine_failed": 503,
    "storage_full": 507,
    "storage_failed": 503,
    "timed_out": 504,
    "query_failed": 500,
    "timeout": 504,
    "determinism": 500,
    "corrupt": 500,
    "locked": 409,
    "wrong_layout": 409,
    "unknown_object_type": 404,
    "unknown_handler": 404,
    "call_failed": 422,
    "version_mismatch": 409,
    "read_only_state": 500,  # a shared handler's bug (as a query handler that raises: query_failed)
}


def status_of(code: str) -> int:
    """The HTTP status an error of fusee ``code`` (or of this API) is answered with."""
    return _STATUS.get(code, 500)


class BadRequest(Exception):
    """A request refused before it reached the engine: HTTP ``status``, stable ``code``, and ``message``."""

    def __init__(self, message: str, code: str = "bad_request", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


@dataclass(frozen=True)
class Route:
    """A request's route: ``name`` (``"list"``, ``"describe"``, ``"start"``, ``"signal"``, ...), the
    workflow ``id`` it is about (or None), ``static`` (a UI file's name) for the UI's routes, and
    ``key``: the stream's name (``"stream"``), the schedule's name (``"schedule*"`` routes) or the
    object's key (``"object*"`` routes, with its ``type`` and, to set or clear one value, ``field``:
    that value's name in the state)."""

    name: str
    id: str | None = None
    static: str | None = None
    key: str | None = None
    type: str | None = None
    field: str | None = None


_ACTIONS: Final = ("signal", "cancel", "terminate", "query", "update", "resume")
_SCHEDULE_ACTIONS: Final = ("pause", "resume", "trigger")
_COMPLETIONS: Final = ("complete", "fail")
STATIC_FILES: Final = ("index.html", "app.js", "app.css")


def _decode_id(segment: str, what: str = "workflow ID") -> str:
    """A path segment as a workflow ID (or a stream's or schedule's name: ``what``), percent-decoded,
    UTF-8; BadRequest if it is not one."""
    try:
        id = unquote(segment, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise BadRequest(f"the {what} in the path is not UTF-8") from None
    if not id or len(id) > MAX_ID:
        raise BadRequest(f"a {what} has 1 to {MAX_ID} characters")
    return id


def route(method: str, raw_path: str) -> Route:
    """The route of ``method`` on ``raw_path`` (the path as sent, still percent-encoded, no query).

    A workflow ID, a stream's and a schedule's name are each one percent-encoded segment
    (``/api/runs/o-1%2Fcharge``).  Raises :class:`BadRequest` 404 ``no_route`` for an unknown path,
    405 ``method_not_allowed`` for a known path and another method.
    """
    parts = raw_path.split("/")
    if parts[:1] != [""]:
        raise BadRequest(f"no route {raw_path[:200]!r}", "no_route", 404)
    parts = parts[1:]

    def allow(*methods: str) -> None:
        if method not in methods and not (method == "HEAD" and "GET" in methods):
            raise BadRequest(f"{method} is not allowed on {raw_path[:200]} (allowed: {', '.join(methods)})", "method_not_allowed", 405)

    if parts == [""]:  # the page's files are relative to it (ui/app.js): served at / only
        allow("GET")
        return Route("static", static="index.html")
    if len(parts) == 2 and parts[0] == "ui" and parts[1] in STATIC_FILES:
        allow("GET")
        return Route("static", static=parts[1])
    if parts == ["metrics"]:
        allow("GET")
        return Route("prometheus")
    if parts[:1] == ["api"]:
        rest = parts[1:]
        if rest == ["metrics"]:
            allow("GET")
            return Route("metrics")
        if rest == ["workflows"]:
            allow("GET")
            return Route("workflows")
        if rest == ["health"]:
            allow("GET")
            return Route("health")
        if rest == ["runs"]:
            allow("GET", "POST")
            return Route("list" if method in ("GET", "HEAD") else "start")
        if len(rest) == 2 and rest[0] == "runs":
            allow("GET")
            return Route("describe", _decode_id(rest[1]))
        if len(rest) == 3 and rest[0] == "runs" and rest[2] in _ACTIONS:
            allow("POST")
            return Route(rest[2], _decode_id(rest[1]))
        if len(rest) == 3 and rest[0] == "runs" and rest[2] == "streams":
            allow("GET")
            return Route("streams", _decode_id(rest[1]))
        if len(rest) == 4 and rest[0] == "runs" and rest[2] == "streams":
            allow("GET")
            return Route("stream", _decode_id(rest[1]), key=_decode_id(rest[3], "stream name"))
        if len(rest) == 2 and rest[0] == "completions" and rest[1] in _COMPLETIONS:
            allow("POST")
            return Route(rest[1])
        if rest == ["schedules"]:
            allow("GET", "POST")
            return Route("schedules" if method in ("GET", "HEAD") else "schedule_create")
        if len(rest) == 2 and rest[0] == "schedules":
            allow("GET", "DELETE")
            return Route("schedule" if method in ("GET", "HEAD") else "schedule_delete", key=_decode_id(rest[1], "schedule name"))
        if len(rest) == 3 and rest[0] == "schedules" and rest[2] in _SCHEDULE_ACTIONS:
            allow("POST")
            return Route("schedule_" + rest[2], key=_decode_id(rest[1], "schedule name"))
        if rest[:1] == ["objects"]:
            return _object_route(rest[1:], method, allow)
    raise BadRequest(f"no route {raw_path[:200]!r}", "no_route", 404)


def _object_route(rest: list[str], method: str, allow: Any) -> Route:
    """The routes under ``/api/objects``: the types, one key's state, a call, an edit of the state."""
    if not rest:
        allow("GET")
        return Route("objects")
    if len(rest) < 2 or len(rest) > 4:
        raise BadRequest(f"no route under /api/objects/ with {len(rest)} segments", "no_route", 404)

    def obj(name: str, field: str | None = None) -> Route:
        return Route(name, key=_decode_id(rest[1], "object key"), type=_decode_id(rest[0], "object type"), field=field)

    if len(rest) == 2:
        allow("GET")
        return obj("object")
    if len(rest) == 3 and rest[2] == "call":
        allow("POST")
        return obj("object_call")
    if len(rest) == 3 and rest[2] == "state":
        allow("DELETE")
        return obj("object_clear")
    if len(rest) == 4 and rest[2] == "state":
        allow("PUT", "DELETE")
        return obj("object_set" if method == "PUT" else "object_clear", _decode_id(rest[3], "state value's name"))
    raise BadRequest("no route under /api/objects/ like that", "no_route", 404)


# -- the list's query string -------------------------------------------------------------


@dataclass(frozen=True)
class ListQuery:
    """What a list asks for: ``status``/``type`` filters (None: any), ``limit`` runs after ``cursor``
    (``(started, id)`` of the last run of the previous page, or None), ``internal``: fusee's own
    ``fusee.*`` runs too (slots, delays, coordinators)."""

    status: str | None = None
    type: str | None = None
    limit: int = DEFAULT_LIMIT
    cursor: tuple[float, str] | None = None
    internal: bool = False


def _flag(name: str, v: str) -> bool:
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no", ""):
        return False
    raise BadRequest(f"{name} is true or false, not {v[:40]!r}")


def parse_list_query(qs: str) -> ListQuery:
    """The list's query string (``status``, ``type``, ``limit``, ``cursor``, ``internal``) checked."""
    if len(qs) > MAX_QUERY:
        raise BadRequest(f"the query string is longer than {MAX_QUERY} characters")
    try:
        pairs = parse_qsl(qs, keep_blank_values=True, strict_parsing=False, encoding="utf-8", errors="strict", max_num_fields=20)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"a malformed query string: {str(exc)[:200]}") from None
    seen: dict[str, str] = {}
    for k, v in pairs:
        if k not in ("status", "type", "limit", "cursor", "internal"):
            raise BadRequest(f"unknown query parameter {k[:40]!r} (known: status, type, limit, cursor, internal)")
        if k in seen:
            raise BadRequest(f"query parameter {k!r} given twice")
        seen[k] = v
    status = seen.get("status") or None
    if status is not None and status not in LIST_STATUSES:
        raise BadRequest(f"status is one of {', '.join(LIST_STATUSES)}, not {status[:40]!r}")
    wtype = seen.get("type") or None
    if wtype is not None and len(wtype) > MAX_ID:
        raise BadRequest(f"a type has at most {MAX_ID} characters")
    limit = DEFAULT_LIMIT
    if "limit" in seen:
        v = seen["limit"]
        if not (v.isascii() and v.isdigit() and len(v) <= 6) or not 1 <= int(v) <= MAX_LIMIT:
            raise BadRequest(f"limit is an integer from 1 to {MAX_LIMIT}, not {v[:40]!r}")
        limit = int(v)
    cursor = decode_cursor(seen["cursor"]) if seen.get("cursor") else None
    internal = _flag("internal", seen.get("internal", ""))
    return ListQuery(status, wtype, limit, cursor, internal)


def encode_cursor(started: float, id: str) -> str:
    """The opaque cursor after the run started at ``started`` with ID ``id``."""
    return base64.urlsafe_b64encode(json.dumps([started, id], separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple[float, str]:
    """A cursor from :func:`encode_cursor`; BadRequest for anything else."""
    if len(text) > 2 * MAX_ID:
        raise BadRequest("cursor is too long")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        got = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError):
        raise BadRequest("cursor is not one this API gave") from None
    if (
        type(got) is not list
        or len(got) != 2
        or type(got[0]) not in (int, float)
        or not math.isfinite(got[0])
        or type(got[1]) is not str
    ):
        raise BadRequest("cursor is not one this API gave")
    return float(got[0]), got[1]


def _newest_first(d: dict[str, Any]) -> tuple[float, str]:
    started = d.get("started")
    return (started if type(started) in (int, float) else 0.0, d.get("id") or "")


def page(runs: Sequence[dict[str, Any]], q: ListQuery) -> tuple[list[dict[str, Any]], str | None, int]:
    """The runs ``q`` asks for: filtered, newest first (by ``started``, then ID, descending), the
    ``q.limit`` after ``q.cursor``; with the next page's cursor (None: the last page) and how many
    runs match the filters in all."""
    def keep(d: dict[str, Any]) -> bool:
        wtype = d.get("type") or ""
        if q.status is not None and d.get("status") != q.status:
            return False
        if q.type is not None:
            return wtype == q.type
        return q.internal or not wtype.startswith("fusee.")

    matching = sorted((d for d in runs if keep(d)), key=_newest_first, reverse=True)
    after = matching if q.cursor is None else [d for d in matching if _newest_first(d) < q.cursor]
    chosen = after[: q.limit]
    nxt = encode_cursor(*_newest_first(chosen[-1])) if len(after) > q.limit else None
    return chosen, nxt, len(matching)


# -- bodies ------------------------------------------------------------------------------


def parse_body(data: bytes, content_type: str | None, limit: int = MAX_BODY) -> Any:
    """A request body as a JSON value: at most ``limit`` bytes (else 413 ``too_large``), sent as
    ``application/json`` (else 415), one strict JSON value (no NaN, no duplicate-key tricks
    are rejected) nested at most :data:`MAX_DEPTH` deep; an empty body is ``{}``."""
    if len(data) > limit:
        raise BadRequest(f"the body is larger than {limit} bytes", "too_large", 413)
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise BadRequest("send the body as Content-Type: application/json", "unsupported_media_type", 415)
    if not data.strip():
        return {}
    if _depth_bound(data) > MAX_DEPTH:
        raise BadRequest(f"the body's JSON is nested deeper than {MAX_DEPTH}")
    try:
        return codec.loads_tree(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {str(exc)[:200]}") from None


def _depth_bound(data: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside JSON strings in ``data`` (a bound on its JSON depth)."""
    depth = best = 0
    in_str = esc = False
    for b in data:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > best:
                best = depth
        elif b in (0x5D, 0x7D):
            depth -= 1
    return best


def _object(body: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if type(body) is not dict:
        raise BadRequest("the body is a JSON object")
    extra = sorted(k for k in body if k not in allowed)
    if extra:
        raise BadRequest(f"unknown field {extra[0][:40]!r} (fields: {', '.join(allowed)})")
    return body


def _name(body: dict[str, Any], key: str, required: bool = True) -> str | None:
    v = body.get(key)
    if v is None and not required:
        return None
    if type(v) is not str or not v or len(v) > MAX_ID:
        raise BadRequest(f"{key} is a string of 1 to {MAX_ID} characters")
    return v


def _duration(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if type(v) is str and len(v) > 64:
        raise BadRequest(f"{key} is a duration like '5m' or a number of seconds")
    try:
        return _durations.parse(v)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{key}: {exc}") from None


@dataclass(frozen=True)
class StartArgs:
    """A start's arguments: workflow ``type`` and ``id``, ``input``, the ID policy's two halves,
    ``delay``/``timeout`` in seconds and ``at`` (unix seconds), each None when not given."""

    type: str
    id: str
    input: Any = None
    on_running: str = "fail"
    on_finished: str = "fail"
    delay: float | None = None
    at: float | None = None
    timeout: float | None = None


_ON_RUNNING: Final = ("fail", "attach", "terminate")
_ON_FINISHED: Final = ("fail", "attach", "start_new")


def start_args(body: Any) -> StartArgs:
    """``{"type", "id", "input"?, "id_policy"?: {"on_running", "on_finished"} | "attach", "delay"?,
    "at"?, "timeout"?}`` checked."""
    b = _object(body, ("type", "id", "input", "id_policy", "delay", "at", "timeout"))
    wtype = _name(b, "type")
    id = _name(b, "id")
    assert wtype is not None and id is not None
    on_running, on_finished = "fail", "fail"
    pol = b.get("id_policy")
    if pol == "attach":
        on_running, on_finished = "attach", "attach"
    elif pol is not None:
        if type(pol) is not dict or not set(pol) <= {"on_running", "on_finished"}:
            raise BadRequest('id_policy is "attach" or {"on_running": ..., "on_finished": ...}')
        on_running = pol.get("on_running", "fail")
        on_finished = pol.get("on_finished", "fail")
        if on_running not in _ON_RUNNING:
            raise BadRequest(f"id_policy.on_running is one of {', '.join(_ON_RUNNING)}")
        if on_finished not in _ON_FINISHED:
            raise BadRequest(f"id_policy.on_finished is one of {', '.join(_ON_FINISHED)}")
    at = b.get("at")
    if at is not None and (type(at) not in (int, float) or not math.isfinite(at) or at < 0):
        raise BadRequest("at is unix seconds, a finite number >= 0")
    delay = _duration(b, "delay")
    if delay is not None and at is not None:
        raise BadRequest("give delay or at, not both")
    return StartArgs(wtype, id, b.get("input"), on_running, on_finished, delay, None if at is None else float(at), _duration(b, "timeout"))


def signal_args(body: Any) -> tuple[str, Any, Any]:
    """``{"name", "value"?, "dedup"?: str | int}`` checked: ``(name, value, dedup)``."""
    b = _object(body, ("name", "value", "dedup"))
    name = _name(b, "name")
    dedup = b.get("dedup")
    if dedup is not None and (type(dedup) not in (str, int) or (type(dedup) is str and len(dedup) > MAX_ID)):
        raise BadRequest(f"dedup is a string (at most {MAX_ID} characters) or an integer")
    return name, b.get("value"), dedup  # type: ignore[return-value]


def reason_arg(body: Any) -> Any:
    """``{"reason"?}`` checked: the reason (None when not given)."""
    return _object(body, ("reason",)).get("reason")


def query_args(body: Any) -> tuple[str, Any]:
    """``{"name", "arg"?}`` checked: ``(name, arg)``."""
    b = _object(body, ("name", "arg"))
    return _name(b, "name"), b.get("arg")  # type: ignore[return-value]


def no_args(body: Any) -> None:
    """A body that carries nothing (``{}`` or empty): resume, and a schedule's pause, resume, trigger, delete."""
    _object(body, ())


def _bounded_seconds(body: dict[str, Any], key: str, default: float, most: float) -> float:
    v = _duration(body, key)
    if v is None:
        return default
    if v > most:
        raise BadRequest(f"{key} is at most {most:g} seconds")
    return v


@dataclass(frozen=True)
class UpdateArgs:
    """An update's arguments: its handler's ``name``, ``value``, ``update_id`` (None: the server makes
    one, and answers it) and ``timeout`` in seconds."""

    name: str
    value: Any = None
    update_id: str | None = None
    timeout: float = DEFAULT_UPDATE_TIMEOUT


def update_args(body: Any) -> UpdateArgs:
    """``{"name", "value"?, "update_id"?: str, "timeout"?: duration}`` checked (``timeout`` at most
    :data:`MAX_WAIT`, default :data:`DEFAULT_UPDATE_TIMEOUT`)."""
    b = _object(body, ("name", "value", "update_id", "timeout"))
    name = _name(b, "name")
    update_id = _name(b, "update_id", required=False)
    timeout = _bounded_seconds(b, "timeout", DEFAULT_UPDATE_TIMEOUT, MAX_WAIT)
    return UpdateArgs(name, b.get("value"), update_id, timeout)  # type: ignore[arg-type]


def token_args(body: Any, value_key: str) -> tuple[str, Any]:
    """``{"token", value_key?}`` (``"value"`` to complete, ``"error"`` to fail) checked: ``(token, value)``."""
    b = _object(body, ("token", value_key))
    token = b.get("token")
    if type(token) is not str or not token or len(token) > MAX_TOKEN:
        raise BadRequest(f"token is the completion token, a string of 1 to {MAX_TOKEN} characters")
    return token, b.get(value_key)


@dataclass(frozen=True)
class ScheduleArgs:
    """A schedule's arguments (``Engine.schedule``), each checked as ``fusee.schedule.make_spec`` does."""

    name: str
    workflow: str
    cron: str | None = None
    every: Any = None
    input: Any = None
    overlap: str = "skip"
    timezone: str | None = None
    catchup_window: Any = None


def schedule_args(body: Any, check_spec: Callable[..., Any] | None = None) -> ScheduleArgs:
    """``{"name", "workflow", "cron" | "every", "input"?, "overlap"?, "timezone"?, "catchup_window"?}``
    checked for shape and types here; the spec's own rules (one of cron and every, a valid expression,
    time zone, overlap, durations) by ``check_spec(name, workflow, input, cron, every, timezone, overlap,
    catchup_window)`` (the server passes :func:`fusee.schedule.check_spec`, which reads time zone files:
    not this module's to call), its ``TypeError``/``ValueError`` a BadRequest.  Whether the workflow is
    registered is the engine's to say."""
    b = _object(body, ("name", "workflow", "cron", "every", "input", "overlap", "timezone", "catchup_window"))
    name = _name(b, "name")
    workflow = _name(b, "workflow")
    cron, timezone, overlap = b.get("cron"), b.get("timezone"), b.get("overlap", "skip")
    for key, v in (("cron", cron), ("timezone", timezone), ("overlap", overlap)):
        if v is not None and (type(v) is not str or len(v) > 200):
            raise BadRequest(f"{key} is a string of at most 200 characters")
    every, catchup = b.get("every"), b.get("catchup_window")
    for key, v in (("every", every), ("catchup_window", catchup)):
        if v is not None and (type(v) not in (str, int, float) or (type(v) is str and len(v) > 64)):
            raise BadRequest(f"{key} is a duration like '15m' or a number of seconds")
    if check_spec is not None:
        try:
            check_spec(name, workflow, b.get("input"), cron, every, timezone, overlap, catchup)
        except (TypeError, ValueError) as exc:  # CronError is a ValueError
            raise BadRequest(str(exc)[:500]) from None
    return ScheduleArgs(name, workflow, cron, every, b.get("input"), overlap, timezone, catchup)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StreamQuery:
    """A stream read: chunks from ``offset``, at most ``limit`` of them; ``wait``: seconds to wait for a
    first chunk when there is none yet (0: answer at once)."""

    offset: int = 0
    limit: int = DEFAULT_STREAM_LIMIT
    wait: float = 0.0


def _int_param(name: str, v: str, low: int, high: int) -> int:
    if not (v.isascii() and v.isdigit() and len(v) <= 12) or not low <= int(v) <= high:
        raise BadRequest(f"{name} is an integer from {low} to {high}, not {v[:40]!r}")
    return int(v)


def parse_stream_query(qs: str) -> StreamQuery:
    """A stream read's query string (``offset``, ``limit``, ``wait``: seconds, at most
    :data:`MAX_STREAM_WAIT`) checked."""
    if len(qs) > MAX_QUERY:
        raise BadRequest(f"the query string is longer than {MAX_QUERY} characters")
    try:
        pairs = parse_qsl(qs, keep_blank_values=True, encoding="utf-8", errors="strict", max_num_fields=10)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"a malformed query string: {str(exc)[:200]}") from None
    seen: dict[str, str] = {}
    for k, v in pairs:
        if k not in ("offset", "limit", "wait"):
            raise BadRequest(f"unknown query parameter {k[:40]!r} (known: offset, limit, wait)")
        if k in seen:
            raise BadRequest(f"query parameter {k!r} given twice")
        seen[k] = v
    offset = _int_param("offset", seen["offset"], 0, 10**12) if seen.get("offset") else 0
    limit = _int_param("limit", seen["limit"], 1, MAX_STREAM_LIMIT) if seen.get("limit") else DEFAULT_STREAM_LIMIT
    wait = 0.0
    if seen.get("wait"):
        v = seen["wait"]
        try:
            wait = float(v) if len(v) <= 20 and v.isascii() else -1.0
        except ValueError:
            wait = -1.0
        if not (math.isfinite(wait) and 0 <= wait <= MAX_STREAM_WAIT):
            raise BadRequest(f"wait is seconds from 0 to {MAX_STREAM_WAIT:g}, not {v[:40]!r}")
    return StreamQuery(offset, limit, wait)


@dataclass(frozen=True)
class CallArgs:
    """An object call's arguments: the ``handler``'s name, its ``arg``, the ``call_id`` (None: the server
    makes one, and answers it) and ``timeout`` in seconds."""

    handler: str
    arg: Any = None
    call_id: str | None = None
    timeout: float = DEFAULT_UPDATE_TIMEOUT


def call_args(body: Any) -> CallArgs:
    """``{"handler", "arg"?, "call_id"?: str, "timeout"?: duration}`` checked (``timeout`` at most
    :data:`MAX_WAIT`, default :data:`DEFAULT_UPDATE_TIMEOUT`)."""
    b = _object(body, ("handler", "arg", "call_id", "timeout"))
    handler = _name(b, "handler")
    call_id = _name(b, "call_id", required=False)
    timeout = _bounded_seconds(b, "timeout", DEFAULT_UPDATE_TIMEOUT, MAX_WAIT)
    return CallArgs(handler, b.get("arg"), call_id, timeout)  # type: ignore[arg-type]


MAX_VERSION: Final = (1 << 63) - 1


@dataclass(frozen=True)
class EditArgs:
    """An edit of an object's state: the ``value`` to set (a clear has none), the ``version`` the state must
    have (None: any) and ``timeout`` in seconds (the edit waits for a running handler)."""

    value: Any = None
    version: int | None = None
    timeout: float = DEFAULT_UPDATE_TIMEOUT


def edit_args(body: Any, set: bool) -> EditArgs:
    """A set's ``{"value", "version"?: int, "timeout"?: duration}`` (``set``) or a clear's ``{"version"?,
    "timeout"?}`` checked: ``value`` is required to set (``null`` sets null)."""
    b = _object(body, ("value", "version", "timeout") if set else ("version", "timeout"))
    if set and "value" not in b:
        raise BadRequest("value is required: the value to set (null sets null)")
    version = b.get("version")
    if version is not None and (type(version) is not int or not 0 <= version <= MAX_VERSION):
        raise BadRequest("version is an integer >= 0: the version the state must have (GET the object for it)")
    timeout = _bounded_seconds(b, "timeout", DEFAULT_UPDATE_TIMEOUT, MAX_WAIT)
    return EditArgs(b.get("value"), version, timeout)
