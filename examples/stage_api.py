"""The stage HTTP API: push events into a constellation stage, ask for them, see what the consumer got.

    python examples/stage_api.py --http 127.0.0.1:4001
    curl -X POST http://127.0.0.1:4001/events/42     # 202 {"queued":42}
    curl -X POST http://127.0.0.1:4001/demand/1      # 202 {"demand":1}
    curl http://127.0.0.1:4001/consumed              # 200 {"events":[42]}

constellation's port of the reference's ``examples/mist_stage_api``: one stage
(telemetry through structlog, unless ``--quiet``) and one consumer
(subscription and participant ``api-consumer``) whose state is the list of the
events it received, in order.

HTTP (``gevent.pywsgi``; any method, as in the reference):

* ``/events/N`` pushes the integer ``N``: 202 ``{"queued": N}``;
* ``/demand/N`` asks the stage for ``N`` events for the consumer: 202 ``{"demand": N}``
  (the stage delivers before it answers, so a following ``/consumed`` sees them);
* ``/consumed``: 200 ``{"events": [...]}``;
* a segment that is not an integer (ASCII digits with an optional sign): 400
  ``expected an integer`` (text/plain);
* a refusal of the library (``InvalidDemand`` for ``/demand/0``,
  ``BufferCapacityExceeded`` past ``--buffer-capacity``, an unavailable stage or
  consumer): 400 with the error written as Python's ``repr`` (the reference's
  ``string.inspect``), text/plain;
* anything else: 404 ``not found`` (text/plain).

Layout: the decisions are pure (:func:`parse_int`, :func:`route`, and
:func:`answer`, which turns an outcome into a status and body); :class:`StageApi`
(the stage and its consumer) and :func:`app` (the WSGI application, mountable
in any gevent WSGI server) carry them out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

SUBSCRIPTION = "api-consumer"
PARTICIPANT = "api-consumer"
MAX_DIGITS = 30  # a longer segment is not taken as an integer (keeps int() cheap)
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"

# --------------------------------------------------------------------------
# The pure part: routes and answers
# --------------------------------------------------------------------------


def parse_int(text: str) -> int | None:
    """The integer ``text`` writes (an optional ``+``/``-``, then 1 to 30 ASCII digits), else None."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (0 < len(digits) <= MAX_DIGITS and digits.isascii() and digits.isdigit()):
        return None
    return int(text)


def route(path: str) -> tuple:
    """What a request path asks, by its non-empty segments: ``("push", n)``, ``("ask", n)``,
    ``("consumed",)``, ``("bad_integer",)`` or ``("not_found",)``."""
    segments = [s for s in path.split("/") if s]
    match segments:
        case ["events" | "demand" as what, value]:
            n = parse_int(value)
            if n is None:
                return ("bad_integer",)
            return ("push" if what == "events" else "ask", n)
        case ["consumed"]:
            return ("consumed",)
    return ("not_found",)


def answer(what: tuple, outcome: tuple) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` for route ``what`` whose action gave ``outcome``:
    ``("ok", value)`` or ``("error", exception)`` (an action never taken gives ``("ok", None)``)."""
    kind = what[0]
    if kind == "not_found":
        return 404, TEXT, b"not found"
    if kind == "bad_integer":
        return 400, TEXT, b"expected an integer"
    if outcome[0] == "error":
        return 400, TEXT, repr(outcome[1]).encode()
    if kind == "push":
        return 202, JSON, json.dumps({"queued": what[1]}).encode()
    if kind == "ask":
        return 202, JSON, json.dumps({"demand": what[1]}).encode()
    return 200, JSON, json.dumps({"events": outcome[1]}).encode()


# --------------------------------------------------------------------------
# The processes and the web app
# --------------------------------------------------------------------------


class StageApi:
    """The stage and its consumer (``api-consumer``, whose state is the list of events it got)."""

    def __init__(self, buffer_capacity: int | None = None, log: bool = True) -> None:
        import constellation
        from constellation import consumer, telemetry

        self.stage = constellation.start(buffer_capacity=buffer_capacity, reporter=telemetry.log if log else None)
        self.consumer = consumer.start(self.stage, SUBSCRIPTION, PARTICIPANT, [],
                                       lambda got, events: got + list(events))

    def act(self, what: tuple) -> tuple:
        """Carry out route ``what``: ``("ok", value)``, or ``("error", exc)`` for a refusal of the library."""
        from constellation import StageError, StageTimeout, StageUnavailable
        from constellation.consumer import ConsumerTimeout, ConsumerUnavailable

        try:
            match what:
                case ("push", n):
                    self.stage.push([n])
                case ("ask", n):
                    self.consumer.ask(n)
                case ("consumed",):
                    return ("ok", self.consumer.state())
        except (StageError, StageUnavailable, StageTimeout, ConsumerUnavailable, ConsumerTimeout) as err:
            return ("error", err)
        return ("ok", None)

    def stop(self) -> None:
        """Stop the stage (its consumer gets ``cancelled`` and stops)."""
        self.stage.stop()


def app(api: StageApi) -> Callable[[dict, Callable[..., Any]], Iterable[bytes]]:
    """The stage API as a WSGI application over ``api`` (any method, as in the reference)."""

    def wsgi(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        what = route(environ.get("PATH_INFO") or "/")
        outcome = api.act(what) if what[0] in ("push", "ask", "consumed") else ("ok", None)
        status, kind, body = answer(what, outcome)
        start_response(f"{status} {_REASONS[status]}", [("Content-Type", kind), ("Content-Length", str(len(body))),
                                                       ("Cache-Control", "no-store"),
                                                       ("X-Content-Type-Options", "nosniff")])
        return [body]

    return wsgi


_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 404: "Not Found"}


def main(argv: list[str] | None = None) -> int:
    """Serve the stage API on ``--http`` until interrupted."""
    parser = argparse.ArgumentParser(prog="examples/stage_api.py", description="constellation's stage HTTP API")
    parser.add_argument("--http", default="127.0.0.1:4001", metavar="ADDR",
                        help="host:port to serve on (default 127.0.0.1:4001, loopback)")
    parser.add_argument("--buffer-capacity", type=int, default=None, metavar="N",
                        help="bound the stage's buffer (default: unbounded, as the reference)")
    parser.add_argument("--quiet", action="store_true", help="no telemetry log lines")
    args = parser.parse_args(argv)
    from gevent.pywsgi import WSGIServer

    from constellation.core import ConfigError
    from ensemble.observer.address import BadAddress, parse_address

    try:
        host, port = parse_address(args.http)
    except BadAddress as err:
        parser.error(str(err))
    try:
        api = StageApi(buffer_capacity=args.buffer_capacity, log=not args.quiet)
    except ConfigError as err:
        parser.error(f"--buffer-capacity: {err}")
    server = WSGIServer((host, port), app(api))
    server.start()
    print(f"constellation stage API: http://{host}:{server.address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
