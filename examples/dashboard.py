"""The traffic observatory: a live dashboard of back-pressure through a bounded constellation stage.

    python examples/dashboard.py --http 127.0.0.1:8090     # open http://127.0.0.1:8090/
    python examples/dashboard.py --run 500000              # no browser: one run, a summary, exit 0 if all arrived once

constellation's port of the reference's ``examples/mist_dashboard``.  Three
processes: a producer (``counter-producer``) that pushes consecutive integers
from 1 into a stage of buffer capacity 80,000, the stage, and the dashboard,
which is the consumer (subscription ``dashboard-consumer``, participant
``dashboard``) and reports what it consumed after each delivery.

A run (the buttons "RUN 500,000 EVENTS" and "RUN 1,000,000 EVENTS", or
``/api/run/N``) ticks after 10 ms and then every 70 ms: it pushes up to 10,000
events (a push the full buffer refuses is counted as back-pressure and retried
at the next tick), then asks for up to 5,000 of what was pushed and not yet
asked for.  Pushes outrun demand, so the buffer fills to its capacity,
back-pressure starts, and once everything is pushed the stage drains: about
ten seconds for 500,000 events.  Between runs, "Push 5K", "Push 50K" and
"Demand 5K" push and ask by hand.

HTTP (``gevent.pywsgi``; any method, as in the reference): ``GET /`` the page,
``/api/state`` the JSON state, ``/api/push/N``, ``/api/ask/N``,
``/api/run/N``, ``/api/run/stop``; a bad number answers 400 ``invalid
amount``, a refused action 400 with its reason, anything else 404.  The page
polls the state every 150 ms and computes the throughput itself (the run
never makes 500,000 HTTP requests).

Layout: the decisions are pure functions over an immutable :class:`Model`
(``start_run``, ``tick_push``, ``pushed``, ``refused``, ``tick_ask``,
``asked``, ``delivered``, ``stop_run``, ``state_json``, ``route``); the
processes (``Producer``, ``Dashboard``) and the WSGI app carry them out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

BUFFER_CAPACITY = 80_000
PUSH_BATCH = 10_000
ASK_BATCH = 5_000
FIRST_TICK = 0.010
TICK = 0.070
PRESETS = (500_000, 1_000_000)
KEPT_EVENTS = 18
KEPT_ACTIVITIES = 24
MAX_AMOUNT = 1_000_000  # a manual push or ask
MAX_RUN = 10_000_000
SUBSCRIPTION = "dashboard-consumer"
PARTICIPANT = "dashboard"
PRODUCER = "counter-producer"
WEB = Path(__file__).resolve().with_name("dashboard_web")
KINDS = ("PROCESS", "RUN", "PUSH", "PRESSURE", "DEMAND", "DELIVER", "CANCEL", "COMPLETE")


# --------------------------------------------------------------------------
# The pure core
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Activity:
    """One line of the timeline."""

    sequence: int
    kind: str
    source: str
    target: str
    amount: int


@dataclass(frozen=True)
class Model:
    """The dashboard's state.  ``pushed``/``received`` count every event; the ``run_*`` fields the current run's.

    ``next_expected`` is the id the next delivered event must carry (events are
    consecutive integers from 1, delivered in order by one subscription), so
    ``duplicates`` and ``gaps`` count every event delivered twice or skipped.
    """

    capacity: int = BUFFER_CAPACITY
    revision: int = 0
    pushed: int = 0
    received: int = 0
    outstanding_demand: int = 0
    last_events: tuple = ()
    activities: tuple = ()
    sequence: int = 0
    active: bool = True
    running: bool = False
    run_total: int = 0
    run_pushed: int = 0
    run_received: int = 0
    rejected_pushes: int = 0
    backpressured: bool = False
    next_expected: int = 1
    duplicates: int = 0
    gaps: int = 0
    completed_runs: int = 0
    pids: dict = field(default_factory=dict)


class Refused(ValueError):
    """An action the dashboard refuses now; the message is the 400's reason."""


def note(m: Model, kind: str, source: str, target: str, amount: int, **changes: Any) -> Model:
    """``m`` with ``changes``, one more activity on the timeline (the last 24 kept) and the next revision."""
    seq = m.sequence + 1
    acts = (m.activities + (Activity(seq, kind, source, target, amount),))[-KEPT_ACTIVITIES:]
    return replace(m, sequence=seq, activities=acts, revision=m.revision + 1, **changes)


def buffered(m: Model) -> int:
    """Events pushed and not yet received: queued in the stage or in flight."""
    return m.pushed - m.received


def start_run(m: Model, total: int) -> Model:
    """A run of ``total`` events starts; raises :class:`Refused` unless ``total > 0``, no run and an empty buffer."""
    if total <= 0:
        raise Refused("a run needs a positive total")
    if m.running:
        raise Refused("a run is already running")
    if buffered(m) != 0:
        raise Refused(f"the buffer holds {buffered(m)} events: drain it first (Demand)")
    return note(m, "RUN", "browser", PARTICIPANT, total, running=True, run_total=total, run_pushed=0, run_received=0)


def tick_push(m: Model) -> int:
    """How many events this tick pushes: up to 10,000 of what the run has still to push (0 when not running)."""
    return min(PUSH_BATCH, m.run_total - m.run_pushed) if m.running else 0


def pushed(m: Model, n: int, in_run: bool) -> Model:
    """The stage accepted a push of ``n`` events."""
    run = {"run_pushed": m.run_pushed + n} if in_run else {}
    return note(m, "PUSH", PRODUCER, "stage", n, pushed=m.pushed + n, backpressured=False, **run)


def refused(m: Model, n: int) -> Model:
    """The stage's full buffer refused a push of ``n`` events: back-pressure (the run retries it next tick)."""
    return note(m, "PRESSURE", "stage", PRODUCER, n, rejected_pushes=m.rejected_pushes + 1, backpressured=True)


def tick_ask(m: Model) -> int:
    """How much demand this tick adds: up to 5,000 of what the run pushed and neither received nor asked for."""
    if not m.running:
        return 0
    return min(ASK_BATCH, max(0, m.run_pushed - m.run_received - m.outstanding_demand))


def asked(m: Model, n: int) -> Model:
    """The dashboard asked the stage for ``n`` more events."""
    return note(m, "DEMAND", PARTICIPANT, "stage", n, outstanding_demand=m.outstanding_demand + n)


def _check_order(m: Model, events: tuple) -> tuple[int, int, int]:
    """``(next_expected, duplicates, gaps)`` after ``events``."""
    n = len(events)
    expected = m.next_expected
    if n and events[0] == expected and events[-1] == expected + n - 1 and events == tuple(range(expected, expected + n)):
        return expected + n, m.duplicates, m.gaps
    dups, gaps = m.duplicates, m.gaps
    for ev in events:
        if type(ev) is not int or ev < expected:
            dups += 1
        else:
            gaps += ev - expected
            expected = ev + 1
    return expected, dups, gaps


def delivered(m: Model, events: tuple) -> Model:
    """The stage delivered ``events``; a run that has received its total completes."""
    n = len(events)
    expected, dups, gaps = _check_order(m, events)
    run_received = m.run_received + n if m.running else m.run_received
    m = note(
        m, "DELIVER", "stage", PARTICIPANT, n,
        received=m.received + n, outstanding_demand=max(0, m.outstanding_demand - n),
        last_events=(m.last_events + tuple(events[-KEPT_EVENTS:]))[-KEPT_EVENTS:],
        run_received=run_received, next_expected=expected, duplicates=dups, gaps=gaps,
    )
    if m.running and m.run_received >= m.run_total:
        m = note(m, "COMPLETE", PARTICIPANT, "browser", m.run_received, running=False,
                 completed_runs=m.completed_runs + 1)
    return m


def stop_run(m: Model) -> Model:
    """The browser stopped the run; raises :class:`Refused` when none runs."""
    if not m.running:
        raise Refused("no run is running")
    return note(m, "CANCEL", "browser", PARTICIPANT, m.run_total - m.run_received, running=False)


def manual(m: Model) -> None:
    """Raises :class:`Refused` while a run runs: the manual controls wait for it."""
    if m.running:
        raise Refused("a run is running: manual controls are off until it ends")


def state_json(m: Model) -> dict:
    """The ``/api/state`` document: the reference's fields, and ``duplicates``, ``gaps`` and ``completed_runs``."""
    return {
        "revision": m.revision,
        "pushed": m.pushed,
        "received": m.received,
        "outstanding_demand": m.outstanding_demand,
        "buffered": buffered(m),
        "last_events": list(m.last_events),
        "activities": [a.__dict__ for a in m.activities],
        "producer": PRODUCER,
        "consumer": PARTICIPANT,
        "subscription": SUBSCRIPTION,
        "producer_pid": m.pids.get("producer", ""),
        "stage_pid": m.pids.get("stage", ""),
        "consumer_pid": m.pids.get("consumer", ""),
        "active": m.active,
        "running": m.running,
        "run_total": m.run_total,
        "run_pushed": m.run_pushed,
        "run_received": m.run_received,
        "rejected_pushes": m.rejected_pushes,
        "backpressured": m.backpressured,
        "buffer_capacity": m.capacity,
        "duplicates": m.duplicates,
        "gaps": m.gaps,
        "completed_runs": m.completed_runs,
    }


def parse_amount(text: str, most: int) -> int:
    """The positive amount ``text`` writes (ASCII digits, at most ``most``); raises :class:`Refused` ("invalid amount")."""
    if not (0 < len(text) <= 9 and text.isascii() and text.isdigit()) or not 0 < int(text) <= most:
        raise Refused("invalid amount")
    return int(text)


def route(path: str) -> tuple:
    """What a request path asks: ``("page",)``, ``("static", name)``, ``("state",)``, ``("push", n)``,
    ``("ask", n)``, ``("run", n)``, ``("stop",)`` or ``("not_found",)``; raises :class:`Refused` for a bad amount."""
    if path in ("/", "/index.html"):
        return ("page",)
    if path in ("/static/dashboard.js", "/static/dashboard.css"):
        return ("static", path.rsplit("/", 1)[1])
    if path == "/api/state":
        return ("state",)
    if path == "/api/run/stop":
        return ("stop",)
    parts = path.split("/")
    if len(parts) == 4 and parts[:2] == ["", "api"] and parts[2] in ("push", "ask", "run"):
        return (parts[2], parse_amount(parts[3], MAX_RUN if parts[2] == "run" else MAX_AMOUNT))
    return ("not_found",)


# --------------------------------------------------------------------------
# The processes
# --------------------------------------------------------------------------


def _processes() -> Any:
    """The process classes, built on first use (so importing this module starts nothing)."""
    import ensemble as e
    import constellation
    from ensemble import gen_server, timer

    class Producer(gen_server.GenServer):
        """Pushes the next ``n`` consecutive integers into the stage; a refused batch is not consumed."""

        def __init__(self, stage: constellation.Stage) -> None:
            self.stage = stage

        def init(self) -> tuple:
            return ("ok", 1)

        def handle_call(self, request: Any, from_: Any, next_id: int) -> tuple:
            _, n = request
            try:
                self.stage.push(range(next_id, next_id + n))
            except constellation.BufferCapacityExceeded as err:
                return ("reply", ("refused", str(err)), next_id)
            return ("reply", ("ok", n), next_id + n)

    class Dashboard(gen_server.GenServer):
        """The consumer: holds the :class:`Model`, runs the ticks, answers the web app."""

        def __init__(self, stage: constellation.Stage, producer: Any, tick: float) -> None:
            self.stage, self.producer, self.tick = stage, producer, tick
            self.waiters: list = []  # callers of "await_idle", answered when the run ends

        def _ended(self, m: Model) -> None:
            for w in self.waiters:
                gen_server.reply(w, ("ok", state_json(m)))
            self.waiters = []

        def init(self) -> tuple:
            me = e.self()
            self.stage.subscribe(SUBSCRIPTION, PARTICIPANT, recipient=me)
            m = Model(pids={"producer": repr(self.producer), "stage": repr(self.stage.pid), "consumer": repr(me)})
            for name, pid in [(PRODUCER, self.producer), ("stage", self.stage.pid), (PARTICIPANT, me)]:
                m = note(m, "PROCESS", "main", name, 1)
            return ("ok", m)

        def _push(self, m: Model, n: int, in_run: bool) -> Model:
            answer = gen_server.call(self.producer, ("push", n))
            return pushed(m, n, in_run) if answer[0] == "ok" else refused(m, n)

        def _ask(self, m: Model, n: int) -> Model:
            m = asked(m, n)  # the deliveries it releases are in the mailbox when ask returns
            self.stage.ask(SUBSCRIPTION, n)
            return m

        def handle_call(self, request: Any, from_: Any, m: Model) -> tuple:
            try:
                match request:
                    case "state":
                        return ("reply", ("ok", state_json(m)), m)
                    case "await_idle":
                        if m.running:
                            self.waiters.append(from_)
                            return ("noreply", m)
                        return ("reply", ("ok", state_json(m)), m)
                    case ("run", total):
                        m = start_run(m, total)
                        timer.send_after(FIRST_TICK, e.self(), "tick")
                    case "stop":
                        m = stop_run(m)
                        self._ended(m)
                    case ("push", n):
                        manual(m)
                        before = m.rejected_pushes
                        m = self._push(m, n, False)
                        if m.rejected_pushes != before:
                            return ("reply", ("refused", f"the buffer refused {n} events: back-pressure"), m)
                    case ("ask", n):
                        manual(m)
                        m = self._ask(m, n)
            except Refused as err:
                return ("reply", ("refused", str(err)), m)
            return ("reply", ("ok", state_json(m)), m)

        def handle_info(self, msg: Any, m: Model) -> tuple:
            match msg:
                case ("events", _, events):
                    was_running = m.running
                    m = delivered(m, events)
                    self.stage.report_consumed(SUBSCRIPTION, len(events))
                    if was_running and not m.running:
                        self._ended(m)
                case "tick" if m.running:
                    n = tick_push(m)
                    if n:
                        m = self._push(m, n, True)
                    n = tick_ask(m)
                    if n:
                        m = self._ask(m, n)
                    if m.running:
                        timer.send_after(self.tick, e.self(), "tick")
                case ("cancelled", _):
                    m = replace(m, active=False, revision=m.revision + 1)
            return ("noreply", m)

    return Producer, Dashboard


class Observatory:
    """The three processes: ``stage``, ``producer`` and ``dashboard`` (the consumer); :meth:`call` asks the dashboard."""

    def __init__(self, tick: float = TICK, capacity: int = BUFFER_CAPACITY) -> None:
        import constellation
        from ensemble import gen_server

        producer_cls, dashboard_cls = _processes()
        self.stage = constellation.start(buffer_capacity=capacity)
        self.producer = gen_server.start(producer_cls(self.stage), name=PRODUCER)
        self.dashboard = gen_server.start(dashboard_cls(self.stage, self.producer, tick))

    def call(self, request: Any, timeout: float = 10.0) -> tuple:
        """The dashboard's answer: ``("ok", state)`` or ``("refused", reason)``.

        Requests: ``"state"``, ``("run", total)``, ``"stop"``, ``("push", n)``,
        ``("ask", n)``, and ``"await_idle"`` (answers once no run is running).
        """
        from ensemble import gen_server

        return gen_server.call(self.dashboard, request, timeout)

    def stop(self) -> None:
        """Stop the three processes."""
        from ensemble import gen_server

        gen_server.stop(self.dashboard)
        gen_server.stop(self.producer)
        self.stage.stop()


# --------------------------------------------------------------------------
# The web app and the command line
# --------------------------------------------------------------------------

_TYPES = {"dashboard.js": "text/javascript; charset=utf-8", "dashboard.css": "text/css; charset=utf-8"}


def app(obs: Observatory) -> Callable[[dict, Callable[..., Any]], Iterable[bytes]]:
    """The dashboard as a WSGI application over ``obs``."""
    files = {name: (WEB / name).read_bytes() for name in ("index.html", *_TYPES)}

    def answer(start_response: Callable[..., Any], status: str, kind: str, body: bytes) -> list[bytes]:
        start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
        return [body]

    def as_json(start_response: Callable[..., Any], status: str, doc: Any) -> list[bytes]:
        return answer(start_response, status, "application/json", json.dumps(doc).encode())

    def wsgi(environ: dict, start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            what = route(environ.get("PATH_INFO") or "/")
        except Refused as err:
            return as_json(start_response, "400 Bad Request", {"error": str(err)})
        match what:
            case ("page",):
                return answer(start_response, "200 OK", "text/html; charset=utf-8", files["index.html"])
            case ("static", name):
                return answer(start_response, "200 OK", _TYPES[name], files[name])
            case ("not_found",):
                return as_json(start_response, "404 Not Found", {"error": "not found"})
        request = {"state": "state", "stop": "stop"}.get(what[0], what)
        status, doc = obs.call(request)
        if status == "ok":
            return as_json(start_response, "200 OK", doc)
        return as_json(start_response, "400 Bad Request", {"error": doc})

    return wsgi


def headless(obs: Observatory, total: int, out: Any = sys.stdout) -> dict:
    """Run ``total`` events without a browser, printing progress about every second; answers the final state."""
    import ensemble as e

    status, state = obs.call(("run", total))
    if status != "ok":
        raise Refused(state)
    last = time.monotonic()
    while state["running"]:
        e.receive(timeout=0.05)  # a pause between polls; nothing is sent here
        state = obs.call("state")[1]
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            print(f"pushed {state['pushed']:>9,}  received {state['received']:>9,}  buffered {state['buffered']:>6,}"
                  f"  rejected pushes {state['rejected_pushes']}", file=out, flush=True)
    return state


def main(argv: list[str] | None = None) -> int:
    """Serve the dashboard (``--http``) or run once without a browser (``--run``)."""
    parser = argparse.ArgumentParser(prog="examples/dashboard.py", description="constellation's traffic observatory")
    parser.add_argument("--http", default="127.0.0.1:8090", metavar="ADDR", help="host:port to serve on (default 127.0.0.1:8090)")
    parser.add_argument("--run", type=int, metavar="TOTAL", help="no server: run TOTAL events, print a summary, exit")
    parser.add_argument("--tick", type=float, default=TICK, help=f"seconds between a run's ticks (default {TICK})")
    args = parser.parse_args(argv)
    if args.tick <= 0:
        parser.error("--tick must be positive")
    obs = Observatory(tick=args.tick)
    if args.run is not None:
        started = time.monotonic()
        s = headless(obs, args.run)
        took = time.monotonic() - started
        once = s["pushed"] == s["received"] == s["run_received"] == args.run and s["duplicates"] == s["gaps"] == 0
        print(f"run of {args.run:,} events: pushed {s['pushed']:,}, delivered {s['received']:,} in {took:.1f} s; "
              f"back-pressure: {s['rejected_pushes']} refused pushes; duplicates {s['duplicates']}, gaps {s['gaps']}")
        print("every event delivered exactly once" if once else "EVENTS LOST OR DUPLICATED")
        obs.stop()
        return 0 if once else 1
    from gevent.pywsgi import WSGIServer

    from ensemble.observer.address import BadAddress, parse_address

    try:
        host, port = parse_address(args.http)
    except BadAddress as err:
        parser.error(str(err))
    server = WSGIServer((host, port), app(obs))
    server.start()
    print(f"traffic observatory: http://{host}:{server.address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
