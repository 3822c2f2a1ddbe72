"""fusee's HTTP API and web UI: :func:`app` (a WSGI app over an engine) and :func:`serve` (it, on
gevent's own ``gevent.pywsgi`` server).  The decisions are :mod:`fusee.http_api`'s (routes,
validation, paging, statuses), :mod:`fusee.timeline`'s (a run as JSON) and
:mod:`fusee.metrics_text`'s (Prometheus); this module is the shell: it reads requests, calls the
engine, writes answers.

Routes (JSON unless said; a workflow ID is one percent-encoded path segment)::

    GET  /                           the web UI (files of fusee/web/ under /ui/...)
    GET  /api/runs                   ?status=&type=&limit=&cursor=&internal= : runs, newest first, paged
    POST /api/runs                   {"type", "id", "input", "id_policy", "delay", "at", "timeout"} -> 201
    GET  /api/runs/{id}              the run: status, type, input, result or error, links, timeline (?journal=1: records)
    POST /api/runs/{id}/signal       {"name", "value", "dedup"}
    POST /api/runs/{id}/cancel       {"reason"}
    POST /api/runs/{id}/terminate    {"reason"}
    POST /api/runs/{id}/query        {"name", "arg"} -> {"result"}
    POST /api/runs/{id}/update       {"name", "value", "update_id", "timeout"} -> {"result", "update_id"}
    POST /api/runs/{id}/resume       {} : retry a paused run's step with a fresh budget
    GET  /api/runs/{id}/streams      {"streams": [{"name", "chunks", "closed", "by_steps"}]}
    GET  /api/runs/{id}/streams/{name}  ?offset=&limit=&wait= -> {"chunks", "offset", "next", "ended"}
    POST /api/completions/complete   {"token", "value"} : settle an async step (ctx.step_async)
    POST /api/completions/fail       {"token", "error"}
    GET  /api/schedules              {"schedules": [...]} each with its "next" fire time
    POST /api/schedules              {"name", "workflow", "cron" | "every", "input", "overlap", "timezone", "catchup_window"} -> 201
    GET  /api/schedules/{name}       the schedule: spec, state, next, running, recent
    POST /api/schedules/{name}/pause | resume | trigger ({"id"} of the run it starts)
    DELETE /api/schedules/{name}     end the schedule (its runs go on)
    GET  /api/objects                {"objects": [{"type", "handlers": [{"name", "kind"}]}]} : the object types defined
    GET  /api/objects/{type}/{key}   {"type", "key", "id", "values", "version"} : the key's last committed state
    POST /api/objects/{type}/{key}/call  {"handler", "arg", "call_id", "timeout"} -> {"result", "call_id"}
    PUT  /api/objects/{type}/{key}/state/{name}  {"value", "version", "timeout"} -> {"version"} : set one value
    DELETE /api/objects/{type}/{key}/state[/{name}]  {"version", "timeout"} (or no body) -> {"version"} : clear one or all
    GET  /api/workflows              the workflow types the engine can start
    GET  /api/metrics                Engine.metrics() as JSON
    GET  /api/health                 {"ok": true}
    GET  /metrics                    the metrics in Prometheus text format

An error is ``{"error": {"code", "message", ...}}`` with fusee's stable code and the status of
:func:`fusee.http_api.status_of`.  With a ``token``, every route but the UI's files needs
``Authorization: Bearer <token>`` (compared in constant time).  A POST must be
``application/json`` and, from a browser, of the same origin, so another site's page cannot
drive the API.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import sys
from importlib import resources
from typing import Any, Callable, Iterable
from urllib.parse import parse_qsl, quote, urlsplit

from gevent import pywsgi

from . import http_api as api
from . import objects as _objects
from . import schedule as _schedule
from .errors import CallFailed, Error, NotFound, UnknownHandler, UnknownObjectType, UnknownWorkflow, VersionMismatch
from .inspection import ADDRESS_FILE as _ADDRESS_FILE
from .metrics_text import CONTENT_TYPE as PROMETHEUS_TYPE
from .metrics_text import prometheus
from .timeline import error_json, plain, streams, view
from .workflow import IdPolicy

__all__ = ["app", "serve", "Server", "parse_addr", "ADDRESS_FILE"]

#: The file a serving engine writes into its data directory: ``{"url", "pid"}`` (removed at stop).
ADDRESS_FILE = _ADDRESS_FILE

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_REASONS = {200: "OK", 201: "Created", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
            415: "Unsupported Media Type", 422: "Unprocessable Entity", 500: "Internal Server Error", 503: "Service Unavailable",
            504: "Gateway Timeout", 507: "Insufficient Storage"}

StartResponse = Callable[..., Any]


def _static(name: str) -> bytes:
    """The UI file ``name`` (package data ``fusee/web/<name>``)."""
    return (resources.files("fusee") / "web" / name).read_bytes()


class _Summaries:
    """Run summaries for the list: ``Engine.list()`` plus ``started``/``finished``, each run's state
    looked up once and kept while the run is listed (so a refresh asks each shard once)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.states: dict[tuple[str, Any], Any] = {}

    def all(self) -> list[dict[str, Any]]:
        out = []
        seen = set()
        for d in self.engine.list():
            key = (d["id"], d["run"])
            seen.add(key)
            started = finished = None
            if d["run"] is None:  # a queued or delayed start: its slot or delay run's times
                try:
                    w = self.engine.describe(d["id"])
                    started, finished = w.get("started"), w.get("finished")
                except NotFound:
                    continue
            else:
                st = self.states.get(key)
                if st is None:
                    st = self.engine._lookup(d["id"])
                    if st is None:
                        continue
                    self.states[key] = st
                started, finished = st.started, st.finished if d["status"] != "running" else None
            out.append({**d, "started": started, "finished": finished})
        for key in [k for k in self.states if k not in seen]:
            del self.states[key]
        return out


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` header (None: not from a browser page) is the API's own ``host``."""
    if origin is None:
        return True
    try:
        return urlsplit(origin).netloc.lower() == (host or "").lower() and bool(host)
    except ValueError:
        return False


class _App:
    """The WSGI app of :func:`app`."""

    def __init__(self, engine: Any, token: str | None, max_body: int) -> None:
        if token is not None and (type(token) is not str or not token):
            raise ValueError("token is None or a non-empty str")
        self.engine = engine
        self.token = None if token is None else token.encode()
        self.max_body = max_body
        self.summaries = _Summaries(engine)

    # -- WSGI

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET").upper()
        try:
            raw, qs = self._raw_path(environ)
            r = api.route(method, raw)
            if r.name == "static":
                return self._file(r.static or "index.html", method, start_response)
            self._authorize(environ)
            status, body = self._handle(r, method, qs, environ)
        except api.BadRequest as exc:
            status, body = exc.status, {"error": {"code": exc.code, "message": exc.message}}
        except Error as exc:
            status, body = self._error(exc)
        except Exception as exc:  # a bug of ours or the engine's: answered, and told on stderr
            print(f"fusee.http: {method} {environ.get('PATH_INFO')!r} failed: {exc!r}", file=sys.stderr)
            status, body = 500, {"error": {"code": "internal", "message": f"{type(exc).__name__}: {exc}"[:500]}}
        if isinstance(body, str):  # Prometheus text
            return self._send(start_response, status, body.encode(), PROMETHEUS_TYPE, method)
        data = json.dumps(body, separators=(",", ":"), allow_nan=False, default=repr).encode()
        extra = [("WWW-Authenticate", 'Bearer realm="fusee"')] if status == 401 else []
        return self._send(start_response, status, data, "application/json", method, extra)

    @staticmethod
    def _raw_path(environ: dict[str, Any]) -> tuple[str, str]:
        """The request's path as sent (percent-encoded; the app's own part) and its query string."""
        raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
        if raw:
            path = raw.split("?", 1)[0]
            if "://" in path:  # an absolute-form request target
                path = urlsplit(path).path
            prefix = quote(environ.get("SCRIPT_NAME", ""))
            if prefix and path.startswith(prefix):
                path = path[len(prefix):]
        else:
            path = quote(environ.get("PATH_INFO", ""), safe="/")
        return path or "/", environ.get("QUERY_STRING", "")

    def _send(self, start_response: StartResponse, status: int, data: bytes, ctype: str, method: str,
              extra: list[tuple[str, str]] | None = None) -> list[bytes]:
        headers = [
            ("Content-Type", ctype),
            ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"),
            ("X-Content-Type-Options", "nosniff"),
        ] + (extra or [])
        start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
        return [] if method == "HEAD" else [data]

    def _file(self, name: str, method: str, start_response: StartResponse) -> list[bytes]:
        data = _static(name)
        ctype = _TYPES[os.path.splitext(name)[1]]
        csp = [("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'"), ("Referrer-Policy", "no-referrer")]
        return self._send(start_response, 200, data, ctype, method, csp)

    def _authorize(self, environ: dict[str, Any]) -> None:
        if self.token is None:
            return
        got = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, given = got.partition(" ")
        ok = hmac.compare_digest(given.strip().encode("utf-8", "replace"), self.token)
        if scheme.lower() != "bearer" or not ok:
            raise api.BadRequest("this API needs Authorization: Bearer <token>", "unauthorized", 401)

    def _body(self, environ: dict[str, Any], empty_ok: bool = False) -> Any:
        """The request's JSON body (``empty_ok``: an empty one, with no Content-Type, is ``{}``: a DELETE,
        which no other site's page can send without the API's consent)."""
        if not same_origin(environ.get("HTTP_ORIGIN"), environ.get("HTTP_HOST")):
            raise api.BadRequest("a request from another site's page is refused", "forbidden", 403)
        length = environ.get("CONTENT_LENGTH") or ""
        if length:
            if not (length.isascii() and length.isdigit()):
                raise api.BadRequest("Content-Length is not a number")
            if int(length) > self.max_body:
                raise api.BadRequest(f"the body is larger than {self.max_body} bytes", "too_large", 413)
            data = environ["wsgi.input"].read(int(length))
        else:
            data = environ["wsgi.input"].read(self.max_body + 1) if "wsgi.input" in environ else b""
        if empty_ok and not data:
            return {}
        return api.parse_body(data, environ.get("CONTENT_TYPE"), self.max_body)

    @staticmethod
    def _error(exc: Error) -> tuple[int, dict[str, Any]]:
        e = error_json(exc)
        if type(exc) is Error:  # a query the run does not answer
            return 400, {"error": e}
        if isinstance(exc, (UnknownWorkflow, UnknownObjectType)):
            e["registered"] = list(exc.registered)
        elif isinstance(exc, UnknownHandler):
            e["handlers"] = list(exc.handlers)
        elif isinstance(exc, CallFailed):
            e["call_id"] = exc.call_id
        elif isinstance(exc, VersionMismatch):
            e["expected"], e["version"] = exc.expected, exc.actual
        return api.status_of(exc.code), {"error": e}

    # -- the routes

    def _handle(self, r: api.Route, method: str, qs: str, environ: dict[str, Any]) -> tuple[int, Any]:
        e = self.engine
        if r.name == "health":
            return 200, {"ok": True}
        if r.name == "workflows":
            return 200, {"workflows": [{"name": n, "version": e.host.workflow(n).version} for n in e.host.user_workflows()]}
        if r.name == "metrics":
            return 200, plain(e.metrics())
        if r.name == "prometheus":
            return 200, prometheus(e.metrics())
        if r.name == "list":
            q = api.parse_list_query(qs)
            runs, nxt, total = api.page(self.summaries.all(), q)
            return 200, {"runs": runs, "next": nxt, "total": total}
        if r.name == "describe":
            journal = _describe_query(qs)
            return 200, view(e.describe(r.id), journal=journal)
        if r.name == "streams":
            _no_query(qs)
            return 200, {"streams": streams(e.describe(r.id).get("journal") or [])}
        if r.name == "stream":
            return 200, self._read_stream(r.id, r.key, api.parse_stream_query(qs))
        if r.name == "schedules":
            _no_query(qs)
            return 200, {"schedules": [plain(d) for d in e.schedules()]}
        if r.name == "schedule":
            _no_query(qs)
            return 200, plain(e.schedule_handle(r.key).describe())
        if r.name == "objects":
            _no_query(qs)
            return 200, {"objects": [{"type": t, "handlers": [{"name": n, "kind": k} for n, k in hs.items()]}
                                     for t, hs in _objects.defined_types(e).items()]}
        if r.name == "object":
            _no_query(qs)
            ref = e.object(r.type, r.key)
            values, version = ref.state()
            return 200, {"type": ref.type, "key": ref.key, "id": ref.id, "values": plain(values), "version": version}
        body = self._body(environ, empty_ok=method == "DELETE")
        if r.name.startswith("schedule_"):
            return self._schedule(r, body)
        if r.name.startswith("object_"):
            return self._object(r, body)
        if r.name in ("complete", "fail"):
            token, value = api.token_args(body, "value" if r.name == "complete" else "error")
            (e.complete if r.name == "complete" else e.fail)(token, value)
            return 200, {"ok": True}
        if r.name == "start":
            a = api.start_args(body)
            if a.type not in e.host.user_workflows():
                raise UnknownWorkflow(a.type, e.host.user_workflows())
            run = e.start(a.type, a.id, a.input, IdPolicy(a.on_running, a.on_finished), delay=a.delay, at=a.at, timeout=a.timeout)
            return 201, {"id": run.id, "run": run.run, "status": run.status}
        assert r.id is not None
        if r.name == "query":
            name, arg = api.query_args(body)
            try:
                return 200, {"result": plain(e.query(r.id, name, arg))}
            except Error:
                raise
            except Exception as exc:  # the workflow's handler raised
                return 500, {"error": {"code": "query_failed", "message": f"the query handler raised {type(exc).__name__}: {exc}"[:500]}}
        if r.name == "update":
            return self._update(r.id, api.update_args(body))
        if r.name == "resume":
            api.no_args(body)
            e.resume(r.id)
            return 200, {"ok": True}
        if r.name == "signal":
            name, value, dedup = api.signal_args(body)
            done = e.signal(r.id, name, value, dedup)
        elif r.name == "cancel":
            done = e.cancel(r.id, api.reason_arg(body))
        else:
            done = e.terminate(r.id, api.reason_arg(body))
        if not done:
            status = e.describe(r.id)["status"]
            return 409, {"error": {"code": "not_running", "message": f"run {r.id!r} has ended ({status})", "status": status}}
        return 200, {"ok": True}

    def _update(self, id: str, a: api.UpdateArgs) -> tuple[int, Any]:
        """Apply the update; its answer carries the update ID (made here when the client gave none), so a
        client whose request timed out can send it again and have it applied once."""
        update_id = a.update_id or f"fusee.update/http-{os.urandom(12).hex()}"
        try:
            result = self.engine.update(id, a.name, a.value, a.timeout, update_id=update_id)
        except TimeoutError:
            message = (f"update {a.name!r} of run {id!r} was not answered within {a.timeout:g} s; it may still be "
                       "applied: send it again with the same update_id")
            return 504, {"error": {"code": "timeout", "message": message, "update_id": update_id}}
        return 200, {"result": plain(result), "update_id": update_id}

    def _object(self, r: api.Route, body: Any) -> tuple[int, Any]:
        """A call of an object's handler, or an edit of its state (set one value, clear one or all).  A call's
        answer carries its call ID (made here when the client gave none), so a client whose request timed
        out can send it again and have it run once."""
        if r.name == "object_call":
            a = api.call_args(body)
            ref = self.engine.object(r.type, r.key)
            call_id = a.call_id or f"fusee.call/http-{os.urandom(12).hex()}"
            try:
                result = ref.call(a.handler, a.arg, call_id=call_id, timeout=a.timeout)
            except TimeoutError:
                message = (f"call {a.handler!r} of object {ref.type}/{ref.key} was not answered within {a.timeout:g} s; "
                           "it may still run: send it again with the same call_id")
                return 504, {"error": {"code": "timeout", "message": message, "call_id": call_id}}
            return 200, {"result": plain(result), "call_id": call_id}
        a2 = api.edit_args(body, set=r.name == "object_set")
        ref = self.engine.object(r.type, r.key)
        try:
            if r.name == "object_set":
                assert r.field is not None
                version = ref.set(r.field, a2.value, version=a2.version, timeout=a2.timeout)
            else:
                version = ref.clear(r.field, version=a2.version, timeout=a2.timeout)
        except TimeoutError:
            message = (f"the edit of object {ref.type}/{ref.key} was not answered within {a2.timeout:g} s (a handler "
                       "holds the key's turn); it may still be applied: read the state before sending it again")
            return 504, {"error": {"code": "timeout", "message": message}}
        return 200, {"version": version}

    def _schedule(self, r: api.Route, body: Any) -> tuple[int, Any]:
        """The schedule routes that change something: create, pause, resume, trigger, delete."""
        e = self.engine
        if r.name == "schedule_create":
            a = api.schedule_args(body, _schedule.check_spec)
            if a.workflow not in e.host.user_workflows():
                raise UnknownWorkflow(a.workflow, e.host.user_workflows())
            opts: dict[str, Any] = {"cron": a.cron, "every": a.every, "input": a.input, "overlap": a.overlap, "timezone": a.timezone}
            if a.catchup_window is not None:
                opts["catchup_window"] = a.catchup_window
            h = e.schedule(a.name, a.workflow, **opts)
            return 201, plain(h.describe())
        api.no_args(body)
        h = e.schedule_handle(r.key)
        if r.name == "schedule_trigger":
            return 200, {"id": h.trigger()}
        {"schedule_pause": h.pause, "schedule_resume": h.resume, "schedule_delete": h.delete}[r.name]()
        return 200, {"ok": True}

    def _read_stream(self, id: str, name: str, q: api.StreamQuery) -> dict[str, Any]:
        """Up to ``q.limit`` chunks of stream ``name`` of run ``id`` from ``q.offset`` (each durable), waiting
        up to ``q.wait`` seconds for the first when there is none yet; ``ended`` once the stream is closed
        or its run has ended and every chunk was given."""
        e = self.engine
        chunks: list[Any] = []
        ended = _drain(e.read_stream(id, name, q.offset, timeout=q.wait), chunks, 1)  # NotFound here
        if chunks and len(chunks) < q.limit:  # then what is there now, without waiting
            ended = _drain(e.read_stream(id, name, q.offset + 1, timeout=0), chunks, q.limit)
        return {"stream": name, "offset": q.offset, "chunks": [plain(c) for c in chunks],
                "next": q.offset + len(chunks), "ended": ended}


def _no_query(qs: str) -> None:
    """A route that takes no query string: BadRequest for one."""
    if qs:
        raise api.BadRequest("this route takes no query parameters")


def _describe_query(qs: str) -> bool:
    """The describe route's query string (``journal=1``: include the raw records) checked."""
    if len(qs) > api.MAX_QUERY:
        raise api.BadRequest("the query string is too long")
    try:
        pairs = parse_qsl(qs, keep_blank_values=True, errors="strict", max_num_fields=5)
    except (ValueError, UnicodeDecodeError):
        raise api.BadRequest("a malformed query string") from None
    journal = False
    for k, v in pairs:
        if k != "journal" or v not in ("", "0", "1", "true", "false"):
            raise api.BadRequest("the only query parameter here is journal=1")
        journal = v in ("1", "true")
    return journal


def app(engine: Any, *, token: str | None = None, max_body: int = api.MAX_BODY) -> Callable[..., Iterable[bytes]]:
    """The WSGI app of ``engine``'s HTTP API and web UI (``token``: the bearer token its API needs)."""
    return _App(engine, token, max_body)


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:8080"``, ``"localhost:0"``; port 0: any free one) as ``(host, port)``;
    ``ValueError`` saying what is wrong."""
    if type(addr) is not str or ":" not in addr:
        raise ValueError(f"an HTTP address is 'host:port', like '127.0.0.1:8080', not {addr!r}")
    host, _, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"the port of {addr!r} is not a number from 0 to 65535")
    if not host:
        raise ValueError(f"{addr!r} names no host: use 127.0.0.1 (this machine) or 0.0.0.0 (every interface)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Handler(pywsgi.WSGIHandler):
    """gevent's handler, telling the app the request's path as sent (``RAW_URI``), so a workflow ID
    holding ``/`` (``%2F`` in the path) stays one segment."""

    def get_environ(self) -> dict[str, Any]:
        env = super().get_environ()
        env["RAW_URI"] = self.path
        return env


class Server:
    """A running HTTP server of an engine (:func:`serve`): ``url``, ``host``, ``port``; :meth:`stop`."""

    def __init__(self, wsgi: pywsgi.WSGIServer, directory: str | None) -> None:
        self._wsgi = wsgi
        self.host = wsgi.server_host
        self.port = wsgi.server_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}/"
        self._file = None if directory is None else os.path.join(directory, ADDRESS_FILE)
        if self._file is not None:
            tmp = self._file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"url": self.url, "pid": os.getpid()}, f)
            os.replace(tmp, self._file)

    def stop(self) -> None:
        """Stop serving (idempotent): close the socket, end the requests in flight, remove the address file."""
        if self._file is not None:
            try:
                os.unlink(self._file)
            except FileNotFoundError:
                pass
            self._file = None
        self._wsgi.stop(timeout=1)


def serve(engine: Any, addr: str = "127.0.0.1:8080", *, token: str | None = None, insecure: bool = False) -> Server:
    """Serve ``engine``'s :func:`app` on ``addr`` with ``gevent.pywsgi`` (on the calling thread's hub);
    returns once listening.  An address other than loopback needs a ``token`` (or ``insecure``):
    the API can terminate runs.  A directory engine's address is written to its ``HTTP`` file."""
    host, port = parse_addr(addr)
    if not is_loopback(host) and token is None and not insecure:
        raise ValueError(f"serving on {host!r} (not loopback) needs a token: anyone reaching it could terminate runs")
    wsgi = pywsgi.WSGIServer((host, port), app(engine, token=token), handler_class=_Handler, log=None)
    wsgi.start()
    try:
        return Server(wsgi, getattr(engine.host.journal, "path", None))
    except BaseException:
        wsgi.stop()
        raise


def _drain(it: Any, chunks: list[Any], limit: int) -> bool:
    """Append the chunks stream iterator ``it`` gives to ``chunks`` until there are ``limit``, it has none
    now (its timeout) or the stream ended; True for the end.  Closes ``it``."""
    try:
        while len(chunks) < limit:
            chunks.append(next(it))
    except StopIteration:
        return True
    except TimeoutError:
        pass
    finally:
        it.close()
    return False
