"""gen_server costs: call round trips and casts, beside raw gevent queues and pykka.

Run from the repository root::

    python bench/behaviours.py            # full run, well under a minute on 2 cores
    python bench/behaviours.py --quick    # every N divided by 50 (CI smoke run)
    python bench/behaviours.py --only 1   # just some measurements
    python bench/behaviours.py --profile  # also cProfile gen_server.call (top 15 by tottime)

The server is a ``Counter`` :class:`ensemble.gen_server.GenServer` whose
``handle_call(("add", k))`` answers ``("reply", n + k, n + k)`` (``"get"``
answers the count) and whose ``handle_cast(("add", k))`` answers
``("noreply", n + k)``.  Everything runs in this one process; nothing is
monkey-patched.  Only the calls (or casts) are timed: starting and stopping
the server, the actor or the server greenlet is not.  Times are
``time.perf_counter`` wall time with the cyclic GC paused, best of 3
alternating runs after a warm-up at N/10 (see ``bench/_harness.py``).

Peers:

* raw gevent: a server greenlet reads ``(reply_queue, payload)`` from a
  ``gevent.queue.Queue`` and puts the answer on the caller's own reply
  ``Queue`` (``reply_queue`` None: a cast, nothing is answered);
* pykka: a ``pykka.ThreadingActor`` (one OS thread) whose ``on_receive``
  answers; ``actor_ref.ask(msg)`` / ``actor_ref.tell(msg)`` from the main
  thread.  Skipped if pykka is not installed.  pykka's rate hangs on how fast
  the OS hands a wake-up to another thread: on a 2-vCPU VM it was seen at
  both ~12k and ~45k asks/s on different runs, which moves verdict 1b.

Measurements, with the issue's targets (PASS/MISS is printed; the exit status
is 0 unless something crashes):

1. ``gen_server.call`` round trips from a process: a client process makes N
   calls (N = 50,000; pykka 10,000).
   1a. against a client greenlet doing N round trips over raw gevent queues.
       Target: a call costs at most 1.3x a raw round trip (rate >= 1/1.3 of gevent's).
   1e. Erlang/OTP's gen_server:call rate, as information, when ``erl`` is
       installed (bench/erlang/ens_bench.erl).
   1b. against pykka's ``ask`` from the main thread.
       Target: ensemble's call rate >= 10x pykka's ask rate.
2. ``gen_server.call`` from outside any process: the main greenlet (which
   becomes a shell process) makes N calls; the same peers, the raw gevent
   client being the main greenlet too.  Informative.
3. casts: N ``gen_server.cast`` from the main greenlet, then one call that
   checks every cast was handled (N = 200,000; pykka 50,000), against raw
   gevent ``Queue.put`` + one final request/response, and pykka ``tell`` +
   one ``ask``.  Informative.

Output: one line per result, then a Markdown summary table (for the README),
then one JSON line (the last line) with every figure and sample.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _erlang  # noqa: E402
from _harness import (  # noqa: E402
    Result,
    Target,
    best_of,
    ensure_importable,
    gc_paused,
    run,
    scaled,
    timed,
)

ensure_importable("ensemble")

import gevent  # noqa: E402
import gevent.queue  # noqa: E402

import ensemble as e  # noqa: E402
from ensemble import gen_server  # noqa: E402

BENCH = "behaviours"

# Full-mode sizes; --quick divides each by 50.
N_CALLS = 50_000
N_PYKKA_ASKS = 10_000
N_CASTS = 200_000
N_PYKKA_TELLS = 50_000

REPS = 3

ADD1 = ("add", 1)
GET = "get"


@dataclass
class _Within(Target):
    """A ``ratio>=`` target shown as the issue states it (``>= 1/3x``, not ``>= 0.333333x``)."""

    shown: str = ""

    def short(self, unit: str) -> str:
        return self.shown or super().short(unit)


# --------------------------------------------------------------------------
# ensemble: the Counter server
# --------------------------------------------------------------------------


class Counter(gen_server.GenServer):
    def init(self) -> Any:
        return ("ok", 0)

    def handle_call(self, request: Any, from_: Any, n: int) -> Any:
        if type(request) is tuple and request[0] == "add":
            n += request[1]
            return ("reply", n, n)
        if request == GET:
            return ("reply", n, n)
        return ("stop", ("bad_call", request), n)

    def handle_cast(self, request: Any, n: int) -> Any:
        return ("noreply", n + request[1])


def _ens_calls(server: Any, n: int) -> float:
    """``n`` calls to ``server`` from the calling process; seconds they took."""
    call = gen_server.call
    t0 = time.perf_counter()
    for _ in range(n):
        got = call(server, ADD1)
    dt = time.perf_counter() - t0
    assert got == n, got
    return dt


def ens_call_from_process(n: int) -> float:
    server = gen_server.start(Counter)
    try:
        return e.join(e.spawn(_ens_calls, server, n))
    finally:
        gen_server.stop(server)


def ens_call_from_shell(n: int) -> float:
    server = gen_server.start(Counter)
    try:
        return _ens_calls(server, n)
    finally:
        gen_server.stop(server)


def ens_casts(n: int) -> float:
    server = gen_server.start(Counter)
    try:
        cast, call = gen_server.cast, gen_server.call
        t0 = time.perf_counter()
        for _ in range(n):
            cast(server, ADD1)
        got = call(server, GET, timeout=None)
        dt = time.perf_counter() - t0
        assert got == n, got
        return dt
    finally:
        gen_server.stop(server)


# --------------------------------------------------------------------------
# raw gevent: a server greenlet over queues
# --------------------------------------------------------------------------


def _gevent_server(inbox: gevent.queue.Queue) -> int:
    """``(reply_queue, ("add", k))`` adds and answers; ``(None, ...)`` only adds; None ends."""
    get = inbox.get
    n = 0
    while True:
        req = get()
        if req is None:
            return n
        rq, payload = req
        if payload == GET:
            rq.put(n)
            continue
        n += payload[1]
        if rq is not None:
            rq.put(n)


def _gevent_calls(inbox: gevent.queue.Queue, n: int) -> float:
    mine: gevent.queue.Queue = gevent.queue.Queue()
    put, get = inbox.put, mine.get
    req = (mine, ADD1)
    t0 = time.perf_counter()
    for _ in range(n):
        put(req)
        got = get()
    dt = time.perf_counter() - t0
    assert got == n, got
    return dt


def _with_gevent_server(body: Callable[[gevent.queue.Queue], float]) -> float:
    inbox: gevent.queue.Queue = gevent.queue.Queue()
    server = gevent.spawn(_gevent_server, inbox)
    try:
        return body(inbox)
    finally:
        inbox.put(None)
        server.join()


def gevent_call_from_greenlet(n: int) -> float:
    def body(inbox: gevent.queue.Queue) -> float:
        client = gevent.spawn(_gevent_calls, inbox, n)
        return client.get()

    return _with_gevent_server(body)


def gevent_call_from_main(n: int) -> float:
    return _with_gevent_server(lambda inbox: _gevent_calls(inbox, n))


def gevent_casts(n: int) -> float:
    def body(inbox: gevent.queue.Queue) -> float:
        put = inbox.put
        mine: gevent.queue.Queue = gevent.queue.Queue()
        cast = (None, ADD1)
        t0 = time.perf_counter()
        for _ in range(n):
            put(cast)
        put((mine, GET))
        got = mine.get()
        dt = time.perf_counter() - t0
        assert got == n, got
        return dt

    return _with_gevent_server(body)


# --------------------------------------------------------------------------
# pykka: a ThreadingActor
# --------------------------------------------------------------------------


def _pykka_runs() -> tuple[Callable[[int], float], Callable[[int], float]] | None:
    try:
        import pykka
    except ImportError:
        return None

    class PykkaCounter(pykka.ThreadingActor):
        def __init__(self) -> None:
            super().__init__()
            self.n = 0

        def on_receive(self, message: Any) -> Any:
            if message == GET:
                return self.n
            self.n += message[1]
            return self.n

    def asks(n: int) -> float:
        ref = PykkaCounter.start()
        try:
            ask = ref.ask
            t0 = time.perf_counter()
            for _ in range(n):
                got = ask(ADD1)
            dt = time.perf_counter() - t0
            assert got == n, got
            return dt
        finally:
            ref.stop()

    def tells(n: int) -> float:
        ref = PykkaCounter.start()
        try:
            tell = ref.tell
            t0 = time.perf_counter()
            for _ in range(n):
                tell(ADD1)
            got = ref.ask(GET)
            dt = time.perf_counter() - t0
            assert got == n, got
            return dt
        finally:
            ref.stop()

    return asks, tells


_PYKKA = _pykka_runs()


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


def _compare(
    reps: int,
    n_ens: int,
    n_pykka: int,
    ens: Callable[[int], float],
    raw: Callable[[int], float],
    pykka_fn: Callable[[int], float] | None,
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Warm up at N/10, then best of ``reps`` alternating runs; answers the rate of each side."""
    sides: list[tuple[str, Callable[[int], float], int]] = [
        ("ensemble", ens, n_ens),
        ("gevent", raw, n_ens),
    ]
    if pykka_fn is not None:
        sides.append(("pykka", pykka_fn, n_pykka))
    for _, fn, n in sides:
        timed(fn, max(1, n // 10))
    best, samples = best_of(reps, [(name, lambda f=fn, n=n: f(n)) for name, fn, n in sides])
    sizes = {name: n for name, _, n in sides}
    return {name: sizes[name] / s for name, s in best.items()}, samples


def _pykka_results(
    key: str, number: str, title: str, n_ens: int, n_pykka: int, unit: str,
    rates: dict[str, float], samples: dict[str, list[float]], target: Target | None, note: str,
) -> list[Result]:
    if "pykka" not in rates:
        print(f"[{number}] pykka is not installed: skipped (pip install pykka)")
        return []
    return [
        Result(key, number, title, n_ens, unit, rates["ensemble"], "pykka", rates["pykka"], target,
               note=f"pykka N={n_pykka:,}; {note}",
               samples={"ensemble": samples["ensemble"], "pykka": samples["pykka"]})
    ]


def bench_call_from_process(quick: bool, reps: int) -> list[Result]:
    n, n_p = scaled(N_CALLS, quick), scaled(N_PYKKA_ASKS, quick)
    pykka_asks = _PYKKA[0] if _PYKKA else None
    rates, samples = _compare(reps, n, n_p, ens_call_from_process, gevent_call_from_greenlet,
                              pykka_asks)
    results = [
        Result(
            "call_process_gevent", "1a", "gen_server.call from a process", n, "calls/s",
            rates["ensemble"], "gevent", rates["gevent"],
            _Within("ratio>=", 1 / 1.3, "a call costs at most 1.3x a raw gevent request/response "
                    "(issue 13)", shown=">= 1/1.3x"),
            note="peer: a client greenlet, request (reply_queue, payload) on a gevent Queue, "
            "answer on its own reply Queue",
            samples={"ensemble": samples["ensemble"], "gevent": samples["gevent"]},
        )
    ]
    secs = _erlang.seconds("call", n)
    if secs is not None:
        results.append(Result("call_process_erlang", "1e", "gen_server.call: Erlang/OTP beside ensemble", n,
                              "calls/s", rates["ensemble"], "erlang", n / secs,
                              note="information only: gen_server:call in Erlang (erl, best of 3)"))
    results += _pykka_results(
        "call_process_pykka", "1b", "gen_server.call from a process", n, n_p, "calls/s", rates, samples,
        # pykka's rate hangs on OS thread wake-ups (see the docstring): a wide guard margin
        Target("ratio>=", 10.0, "ensemble's call rate >= 10x pykka's ask rate", margin=4.0),
        "peer: ThreadingActor, actor_ref.ask(msg) from the main thread",
    )
    return results


def bench_call_from_shell(quick: bool, reps: int) -> list[Result]:
    n, n_p = scaled(N_CALLS, quick), scaled(N_PYKKA_ASKS, quick)
    pykka_asks = _PYKKA[0] if _PYKKA else None
    rates, samples = _compare(reps, n, n_p, ens_call_from_shell, gevent_call_from_main, pykka_asks)
    results = [
        Result(
            "call_shell_gevent", "2a", "gen_server.call from the main greenlet", n, "calls/s",
            rates["ensemble"], "gevent", rates["gevent"],
            note="the main greenlet is a shell process; peer: the main greenlet over gevent Queues",
            samples={"ensemble": samples["ensemble"], "gevent": samples["gevent"]},
        )
    ]
    results += _pykka_results(
        "call_shell_pykka", "2b", "gen_server.call from the main greenlet", n, n_p, "calls/s", rates,
        samples, None, "peer: ThreadingActor, actor_ref.ask(msg) from the main thread",
    )
    return results


def bench_casts(quick: bool, reps: int) -> list[Result]:
    n, n_p = scaled(N_CASTS, quick), scaled(N_PYKKA_TELLS, quick)
    pykka_tells = _PYKKA[1] if _PYKKA else None
    rates, samples = _compare(reps, n, n_p, ens_casts, gevent_casts, pykka_tells)
    results = [
        Result(
            "casts_gevent", "3a", "N casts, then one call", n, "casts/s",
            rates["ensemble"], "gevent", rates["gevent"],
            note="from the main greenlet; peer: N Queue.put, then one request/response",
            samples={"ensemble": samples["ensemble"], "gevent": samples["gevent"]},
        )
    ]
    results += _pykka_results(
        "casts_pykka", "3b", "N casts, then one call", n, n_p, "casts/s", rates, samples, None,
        "peer: N actor_ref.tell(msg), then one ask",
    )
    return results


MEASUREMENTS: dict[str, Callable[[bool, int], list[Result]]] = {
    "1": bench_call_from_process,
    "2": bench_call_from_shell,
    "3": bench_casts,
}


# --------------------------------------------------------------------------
# Profile of gen_server.call (--profile)
# --------------------------------------------------------------------------


def profile_call(n: int, top: int = 15) -> str:
    """cProfile of ``n`` calls from a process (client and server run in this thread)."""
    ens_call_from_process(max(1, n // 10))  # warm-up, on a server of its own
    server = gen_server.start(Counter)
    try:
        prof = cProfile.Profile()

        def client() -> None:
            prof.enable()
            try:
                _ens_calls(server, n)
            finally:
                prof.disable()

        with gc_paused():
            e.join(e.spawn(client))
    finally:
        gen_server.stop(server)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def _add_profile(ap: Any) -> None:
    ap.add_argument("--profile", action="store_true",
                    help="afterwards, cProfile N gen_server.calls from a process (top 15 by tottime)")


def _print_profile(args: Any) -> None:
    if args.profile:
        n = scaled(N_CALLS, args.quick)
        print(f"\ncProfile of {n:,} gen_server.call from a process (client + server), top 15 by tottime:")
        print(profile_call(n))


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, dists=("gevent", "greenlet", "pykka"), reps=REPS,
               add_arguments=_add_profile, after=_print_profile)

if __name__ == "__main__":
    sys.exit(main())
