"""The observer: a live view of this node's processes, supervision trees, applications and dispatchers.

A WSGI application (:func:`app`), served by gevent's own ``gevent.pywsgi``
(:func:`serve`, or ``python -m ensemble.observer --http ADDR``), or mounted by
an application in its own WSGI server::

    from ensemble import observer

    server = observer.serve("127.0.0.1:8091")     # started; server.address is where it listens
    ...
    server.stop()

Pages: ``/`` (processes, supervision trees, applications, dispatchers and
their carriers' load) and ``/process/0.N.0`` (links, monitors, state through
``ensemble.sys.get_status``, a kill button).  The JSON behind them:
``GET /api/processes``, ``/api/processes/0.N.0``, ``/api/supervision``,
``/api/applications``, ``/api/dispatchers``, and ``POST
/api/processes/0.N.0/kill`` (with the header ``X-Ensemble-Observer: 1``).

Layout: pure decisions in :mod:`.pids` (pid text in URLs), :mod:`.routes`
(which request is which, and refusals), :mod:`.shape` (the JSON) and
:mod:`.tree` (supervision trees from the supervisors' answers), and
:mod:`.address`; the shell in :mod:`.collect` (asking the node, with
deadlines) and :mod:`.wsgi`.
"""

from __future__ import annotations

from typing import Any

from .address import DEFAULT_HOST, DEFAULT_PORT, BadAddress, format_address, parse_address
from .wsgi import Observer

__all__ = ["app", "serve", "Observer", "BadAddress", "parse_address", "format_address", "DEFAULT_HOST", "DEFAULT_PORT"]


def app(timeout: float = 1.0) -> Observer:
    """The observer as a WSGI application; ``timeout``: seconds it waits for any one process it asks."""
    return Observer(timeout)


def serve(address: str = f"{DEFAULT_HOST}:{DEFAULT_PORT}", *, timeout: float = 1.0, log: Any = "default") -> Any:
    """Serve :func:`app` with ``gevent.pywsgi`` on ``address`` (``host:port``; loopback when the host is
    left out; port 0 picks a free one), started on the calling thread's hub; answers the
    ``WSGIServer`` (``.address``, ``.stop()``).  ``log=None`` silences the access log.

    Raises :class:`BadAddress` for an address that is not one, ``OSError`` when it cannot listen.
    """
    from gevent.pywsgi import WSGIServer

    host, port = parse_address(address)
    kwargs: dict[str, Any] = {} if log == "default" else {"log": log}
    server = WSGIServer((host, port), app(timeout), **kwargs)
    server.start()
    return server
