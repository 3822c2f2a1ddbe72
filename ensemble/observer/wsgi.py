"""The observer's WSGI application: pages, static files and the JSON the pages fetch.

The shell between HTTP and :mod:`.collect`: :func:`.routes.route` decides
what a request is (or refuses it), this carries it out and writes the answer.
A bad request gets 400, 404 or 405 with its reason; nothing a client sends
makes it raise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import ensemble as e

from . import collect
from .routes import POST_HEADER, STATIC, Refusal, Route, route

__all__ = ["Observer"]

_PAGES = {"index": "index.html", "process_page": "process.html"}
_COMMON = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def _read_static(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


class Observer:
    """A WSGI application showing this node: mount it in any gevent WSGI server, or :func:`ensemble.observer.serve` it.

    ``timeout``: seconds the observer waits for any one process it asks
    (a supervisor's children, the application controller, ``sys.get_status``).
    """

    def __init__(self, timeout: float = 1.0) -> None:
        self.timeout = timeout
        self._files = {n: _read_static(n) for n in (*STATIC, *_PAGES.values())}

    def __call__(self, environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        """Answer one request."""
        method = environ.get("REQUEST_METHOD")
        decided = route(
            method,
            environ.get("PATH_INFO", "/") or "/",
            environ.get("CONTENT_LENGTH"),
            environ.get("HTTP_" + POST_HEADER.upper().replace("-", "_")),
        )
        try:
            if isinstance(decided, Refusal):
                status, headers, body = self._refusal(decided)
            else:
                status, headers, body = self._carry_out(decided)
        except e.ExitSignal:  # the request's shell process was killed meanwhile
            status, headers, body = self._json(503, {"error": "the request's process was killed"})
        except Exception as err:  # noqa: BLE001 - a fault of the observer: say so, never drop the server
            status, headers, body = self._json(500, {"error": f"observer fault: {type(err).__name__}: {err}"[:500]})
        start_response(f"{status} {_REASONS.get(status, 'Status')}", headers + _COMMON)
        return [b""] if method == "HEAD" else [body]

    def _json(self, status: int, doc: Any) -> tuple[int, list, bytes]:
        body = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()
        return status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))], body

    def _refusal(self, r: Refusal) -> tuple[int, list, bytes]:
        status, headers, body = self._json(r.status, {"error": r.reason})
        if r.allow is not None:
            headers.append(("Allow", r.allow))
        return status, headers, body

    def _file(self, name: str, content_type: str) -> tuple[int, list, bytes]:
        body = self._files[name]
        return 200, [("Content-Type", content_type), ("Content-Length", str(len(body)))], body

    def _carry_out(self, r: Route) -> tuple[int, list, bytes]:
        kind = r.kind
        if kind in _PAGES:
            return self._file(_PAGES[kind], "text/html; charset=utf-8")
        if kind == "static":
            assert r.name is not None
            return self._file(r.name, STATIC[r.name])
        try:
            if kind == "processes":
                return self._json(200, collect.processes())
            if kind == "supervision":
                return self._json(200, collect.supervision(self.timeout))
            if kind == "applications":
                return self._json(200, collect.applications(self.timeout))
            if kind == "dispatchers":
                return self._json(200, collect.dispatchers())
            assert r.pid is not None
            if kind == "process":
                return self._json(200, collect.process(r.pid, self.timeout))
            if kind == "kill":
                return self._json(200, collect.kill(r.pid))
        except collect.NotFound as err:
            return self._json(404, {"error": str(err)})
        except collect.Refused as err:
            return self._json(400, {"error": str(err)})
        return self._json(404, {"error": "not found"})
