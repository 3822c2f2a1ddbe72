"""Which request is which: the observer's routes, and the refusals of bad requests.

Pure.  :func:`route` reads a request's method, path and the headers that
matter, and answers a :class:`Route` to carry out or a :class:`Refusal`
(status and reason) to answer at once; it never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .pids import MalformedPid, parse_pid

__all__ = [
    "MAX_BODY",
    "MAX_PATH",
    "POST_HEADER",
    "STATIC",
    "Route",
    "Refusal",
    "route",
    "body_refusal",
]

#: The largest request body the observer accepts (its routes take none).
MAX_BODY = 16 * 1024
#: The longest path it reads.
MAX_PATH = 1024
#: The header a POST must carry: a cross-site form cannot send it, and a cross-site
#: fetch that tries must first pass a CORS preflight, which the observer refuses.
POST_HEADER = "X-Ensemble-Observer"

#: The static files, by name: their content types.
STATIC: dict[str, str] = {
    "observer.css": "text/css; charset=utf-8",
    "observer.js": "text/javascript; charset=utf-8",
}

#: The JSON routes without a pid: path -> route kind.
_API = {
    "/api/processes": "processes",
    "/api/supervision": "supervision",
    "/api/applications": "applications",
    "/api/dispatchers": "dispatchers",
}


@dataclass(frozen=True)
class Route:
    """A request to carry out: ``kind`` (``index``, ``process_page``, ``static``, ``processes``,
    ``process``, ``kill``, ``supervision``, ``applications``, ``dispatchers``), the pid's number or the
    static file's name where the kind has one."""

    kind: str
    pid: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class Refusal:
    """A request answered at once with ``status`` (400, 404 or 405) and ``reason``; ``allow`` for a 405."""

    status: int
    reason: str
    allow: str | None = None


def body_refusal(content_length: Any) -> Refusal | None:
    """A 400 for a ``Content-Length`` that is not a number or is over :data:`MAX_BODY`; None when acceptable."""
    if content_length is None or content_length == "":
        return None
    if type(content_length) is not str or not content_length.isascii() or not content_length.isdigit():
        return Refusal(400, "Content-Length is not a number")
    if len(content_length) > 12 or int(content_length) > MAX_BODY:
        return Refusal(400, f"request body too large: at most {MAX_BODY} bytes")
    return None


def _pid_route(kind: str, text: str) -> Route | Refusal:
    try:
        return Route(kind, pid=parse_pid(text))
    except MalformedPid as err:
        return Refusal(400, err.reason)


def _get(path: str) -> Route | Refusal | None:
    if path in ("/", "/index.html"):
        return Route("index")
    if path in _API:
        return Route(_API[path])
    if path.startswith("/static/"):
        name = path[len("/static/"):]
        return Route("static", name=name) if name in STATIC else Refusal(404, "no such file")
    if path.startswith("/process/"):
        return _pid_route("process_page", path[len("/process/"):])
    if path.startswith("/api/processes/"):
        rest = path[len("/api/processes/"):]
        if "/" not in rest:
            return _pid_route("process", rest)
    return None


def _post(path: str) -> Route | Refusal | None:
    if path.startswith("/api/processes/") and path.endswith("/kill"):
        rest = path[len("/api/processes/"): -len("/kill")]
        if rest and "/" not in rest:
            return _pid_route("kill", rest)
    return None


def route(method: Any, path: Any, content_length: Any = None, post_header: Any = None) -> Route | Refusal:
    """What to do with a request: ``method`` and ``path`` (WSGI's decoded ``PATH_INFO``), its
    ``Content-Length`` header and its :data:`POST_HEADER` header (None when absent)."""
    if type(method) is not str or type(path) is not str:
        return Refusal(400, "malformed request")
    if len(path) > MAX_PATH:
        return Refusal(400, f"path too long: at most {MAX_PATH} characters")
    refused = body_refusal(content_length)
    if refused is not None:
        return refused
    as_get = _get(path)
    as_post = _post(path)
    if method in ("GET", "HEAD"):
        if as_get is not None:
            return as_get
        return Refusal(405, "use POST", allow="POST") if as_post is not None else Refusal(404, "not found")
    if method == "POST":
        if as_post is None:
            return Refusal(405, "use GET", allow="GET, HEAD") if as_get is not None else Refusal(404, "not found")
        if isinstance(as_post, Route) and not post_header:
            return Refusal(400, f"a POST needs the {POST_HEADER} header (the observer's pages send it)")
        return as_post
    if as_get is None and as_post is None:
        return Refusal(404, "not found")
    return Refusal(405, f"method {method[:20]!r} not allowed", allow="POST" if as_post is not None else "GET, HEAD")
