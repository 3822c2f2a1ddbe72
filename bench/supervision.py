"""Supervision costs: how fast a one_for_one supervisor restarts a crashing child, beside Erlang/OTP.

Run from the repository root::

    python bench/supervision.py            # full run, about 25 s on 2 cores
    python bench/supervision.py --quick    # every N divided by 50 (CI smoke run)
    python bench/supervision.py --reps 5   # best of 5 instead of 3
    python bench/supervision.py --only 1   # just some measurements

The measured loop is "crash -> the supervisor restarts it -> it is running
again", N times, the same way on every side:

* the worker, once started, tells the driver ``("up", its pid)``, waits for
  one message, then crashes (raises; Erlang: ``erlang:error(crash)``);
* the driver takes the first ``up``, then N times sends the current worker a
  message and waits for the ``up`` of the worker restarted in its place;
* the supervisor is ``one_for_one`` with that one ``permanent`` child
  (``shutdown: brutal_kill``), ``period`` 3600 s and an ``intensity`` 10 above
  the restarts it will see, so it never gives up.  Afterwards
  ``which_children`` must name the last worker, then the supervisor is
  stopped.

Only the restarts are timed (``time.perf_counter``; Erlang
``erlang:monotonic_time``), not starting or stopping supervisors.  The crash
and supervisor reports are silenced during the run on both sides
(``ensemble.logger.set_handler(lambda r: None)``, restored afterwards;
Erlang ``logger:set_primary_config(level, none)``) so printing does not
dominate; the reports are still made.  Python sides: GC paused, best of 3
alternating runs after a warm-up at N/10 (see ``bench/_harness.py``).

Why batches: a supervisor keeps one history entry per restart within the
period and walks them all on every restart (OTP's ``add_restart`` does a
``lists:takewhile``; ``ensemble.decide.supervisor.add_restart`` does the same), so under
one supervisor with intensity N the cost of a restart grows with N and N
restarts take O(N^2): at N = 20,000 that bookkeeping, not the restart, is
most of the time on both sides (Erlang ~4.7k restarts/s against ~70k in
batches of 100).  Measurement 1 therefore restarts in batches of 100 under
fresh supervisors (a history of at most 100, like a real intensity);
measurement 2 keeps one supervisor for a smaller N to show the growth.

Measurements (informative, no target; the exit status is 0 unless something
crashes):

1. restarts/s of a crashing child under one_for_one, N = 20,000 in batches of
   100 (each batch under a fresh supervisor, intensity 110).
   1a. against Erlang/OTP: the same supervisor as a supervisor callback
       module with the same worker, compiled with ``erlc`` into a temporary
       directory and run in one ``erl -noshell`` VM (a warm-up at N/10, then
       the best of the same number of runs).  Skipped, with a line saying
       so, if ``erl``/``erlc`` are not on PATH.
   1b. for context, raw gevent with no supervisor: a greenlet that puts its
       own ``Queue`` on the driver's Queue, waits on it, then raises;
       ``Greenlet.link_exception`` respawns it (the hub's traceback printing
       is switched off during the run; gevent still pickles each failed
       greenlet's traceback).  The floor any supervisor on gevent pays.
2. the same, N = 5,000 restarts all under ONE supervisor with intensity
   N + 10: the restart history grows to N.  Against Erlang as in 1a (or
   ensemble's figure alone if Erlang is not installed).

Output: one line per result, then a Markdown summary table (for the README),
then one JSON line (the last line) with every figure and sample.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import (  # noqa: E402
    Result,
    best_of,
    ensure_importable,
    run,
    scaled,
    timed,
)

ensure_importable("ensemble")

import gevent  # noqa: E402
import gevent.queue  # noqa: E402

import ensemble as e  # noqa: E402
from ensemble import supervisor  # noqa: E402

BENCH = "supervision"

# Full-mode sizes; --quick divides each by 50.
N_RESTARTS = 20_000  # measurement 1
N_HISTORY = 5_000  # measurement 2

BATCH = 100  # measurement 1: restarts under each fresh supervisor

REPS = 3

ERLANG_TIMEOUT = 300.0  # seconds for compiling and running the Erlang side


class _Crash(Exception):
    """What a worker dies of."""


# --------------------------------------------------------------------------
# ensemble: a one_for_one supervisor over one crashing permanent worker
# --------------------------------------------------------------------------


def _ens_worker(driver: e.Pid) -> None:
    e.send(driver, ("up", e.self()))
    e.receive()
    raise _Crash("crash")


def _ens_driver(n: int, batch: int) -> float:
    """``n`` restarts, ``batch`` under each fresh supervisor; seconds the restarts took."""
    me = e.self()
    send, receive = e.send, e.receive
    spec = {
        "id": "worker",
        "start": lambda: e.spawn_link(_ens_worker, me),
        "restart": "permanent",
        "shutdown": "brutal_kill",
    }
    total = 0.0
    left = n
    while left:
        k = min(batch, left)
        left -= k
        sup = supervisor.start_link(
            {"strategy": "one_for_one", "intensity": k + 10, "period": 3600}, [spec]
        )
        try:
            _, pid = receive()
            first = pid
            t0 = time.perf_counter()
            for _ in range(k):
                send(pid, "crash")
                _, pid = receive()
            total += time.perf_counter() - t0
            children = supervisor.which_children(sup)
            assert len(children) == 1 and children[0][1] is pid and pid is not first, (children, pid)
        finally:
            supervisor.stop(sup)
    return total


def ens_restarts(n: int, batch: int) -> float:
    """``n`` restarts of a crashing child; seconds they took (reports silenced)."""
    previous = e.logger.set_handler(lambda report: None)
    try:
        return e.join(e.spawn(_ens_driver, n, batch))
    finally:
        e.logger.set_handler(previous)


# --------------------------------------------------------------------------
# raw gevent: a greenlet respawned by its link_exception callback
# --------------------------------------------------------------------------


def gevent_restarts(n: int) -> float:
    """``n`` respawns of a crashing greenlet; seconds they took (tracebacks silenced)."""
    hub = gevent.get_hub()
    stream, hub.exception_stream = hub.exception_stream, None
    ups: gevent.queue.Queue = gevent.queue.Queue()
    current: list[gevent.Greenlet] = []
    respawns = 0

    def worker() -> None:
        inbox: gevent.queue.Queue = gevent.queue.Queue()
        ups.put(inbox)
        inbox.get()
        raise _Crash("crash")

    def respawn(dead: gevent.Greenlet) -> None:
        nonlocal respawns
        respawns += 1
        g = gevent.spawn(worker)
        g.link_exception(respawn)
        current[0] = g

    try:
        g = gevent.spawn(worker)
        g.link_exception(respawn)
        current.append(g)
        get = ups.get
        inbox = get()
        t0 = time.perf_counter()
        for _ in range(n):
            inbox.put("crash")
            inbox = get()
        dt = time.perf_counter() - t0
        assert respawns == n, (respawns, n)
        last = current[0]
        last.unlink(respawn)
        last.kill()
        return dt
    finally:
        hub.exception_stream = stream


# --------------------------------------------------------------------------
# Erlang/OTP: the same supervisor as a callback module, run in one erl VM
# --------------------------------------------------------------------------

ERLANG_MODULE = "ensemble_sup_bench"

ERLANG_SOURCE = r"""
-module(ensemble_sup_bench).
-behaviour(supervisor).
-export([main/4, init/1, start_worker/1, worker/1]).

%% one_for_one, one permanent worker, an intensity it never reaches.
init({Driver, Intensity}) ->
    Flags = #{strategy => one_for_one, intensity => Intensity, period => 3600},
    Child = #{id => worker, start => {?MODULE, start_worker, [Driver]},
              restart => permanent, shutdown => brutal_kill, type => worker},
    {ok, {Flags, [Child]}}.

start_worker(Driver) ->
    {ok, spawn_link(?MODULE, worker, [Driver])}.

%% Tell the driver it is up, wait for one message, crash.
worker(Driver) ->
    Driver ! {up, self()},
    receive _ -> erlang:error(crash) end.

%% N restarts, Batch under each fresh supervisor; seconds the restarts took.
run(N, Batch) -> run(N, Batch, 0).

run(0, _, Total) -> Total;
run(Left, Batch, Total) ->
    K = min(Batch, Left),
    {ok, Sup} = supervisor:start_link(?MODULE, {self(), K + 10}),
    First = receive {up, P0} -> P0 end,
    T0 = erlang:monotonic_time(nanosecond),
    Last = loop(First, K),
    T1 = erlang:monotonic_time(nanosecond),
    [{worker, Last, worker, _}] = supervisor:which_children(Sup),
    true = Last =/= First,
    ok = gen_server:stop(Sup),
    run(Left - K, Batch, Total + (T1 - T0) / 1.0e9).

loop(P, 0) -> P;
loop(P, K) ->
    P ! crash,
    receive {up, Q} -> loop(Q, K - 1) end.

main(N, Batch, Warm, Reps) ->
    ok = logger:set_primary_config(level, none),
    _ = run(Warm, Batch),
    Times = [run(N, Batch) || _ <- lists:seq(1, Reps)],
    [io:format("run ~.9f~n", [T]) || T <- Times],
    io:format("best ~.3f~n", [N / lists:min(Times)]),
    io:format("otp ~s erts ~s~n", [erlang:system_info(otp_release), erlang:system_info(version)]).
"""


def erlang_restarts(n: int, batch: int, reps: int) -> tuple[float, list[float], str] | str:
    """Erlang's best restarts/s, its per-run seconds and its version; or why it was skipped."""
    erl, erlc = shutil.which("erl"), shutil.which("erlc")
    if erl is None or erlc is None:
        return "Erlang is not installed (no erl/erlc on PATH)"
    with tempfile.TemporaryDirectory(prefix="ensemble-sup-bench-") as tmp:
        src = os.path.join(tmp, ERLANG_MODULE + ".erl")
        with open(src, "w") as f:
            f.write(ERLANG_SOURCE)
        try:
            comp = subprocess.run([erlc, "-o", tmp, src], capture_output=True, text=True,
                                  timeout=ERLANG_TIMEOUT)
            if comp.returncode != 0:
                return f"erlc failed (exit {comp.returncode}): {(comp.stdout + comp.stderr).strip()[-500:]}"
            warm = max(1, n // 10)
            run = subprocess.run(
                [erl, "-noshell", "-pa", tmp,
                 "-eval", f"{ERLANG_MODULE}:main({n}, {batch}, {warm}, {reps})", "-s", "init", "stop"],
                capture_output=True, text=True, timeout=ERLANG_TIMEOUT,
            )
        except subprocess.TimeoutExpired as exc:
            return f"Erlang run timed out after {exc.timeout:.0f} s"
    out = run.stdout
    runs = [float(x) for x in re.findall(r"^run ([0-9.eE+-]+)$", out, re.M)]
    best = re.search(r"^best ([0-9.eE+-]+)$", out, re.M)
    version = re.search(r"^otp (.+)$", out, re.M)
    if run.returncode != 0 or best is None or len(runs) != reps:
        return f"Erlang run failed (exit {run.returncode}): {(out + run.stderr).strip()[-500:]}"
    return float(best.group(1)), runs, version.group(1) if version else "?"


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------

UNIT = "restarts/s"


def _erlang_result(
    key: str, number: str, title: str, n: int, batch: int, reps: int,
    ens_rate: float, ens_samples: list[float], note: str,
) -> list[Result]:
    """The Result against Erlang, or a line saying why there is none."""
    erl = erlang_restarts(n, batch, reps)
    if isinstance(erl, str):
        print(f"[{number}] {erl}: the Erlang figure is skipped", flush=True)
        return []
    erl_rate, erl_runs, erl_version = erl
    return [Result(
        key, number, title, n, UNIT, ens_rate, "Erlang", erl_rate,
        note=f"Erlang/OTP {erl_version}, one erl -noshell VM, best of {reps} after a warm-up "
        f"at N/10; {note}",
        samples={"ensemble": ens_samples, "Erlang": erl_runs},
    )]


def bench_restarts(quick: bool, reps: int) -> list[Result]:
    """1: N restarts, BATCH under each fresh supervisor; against Erlang and raw gevent."""
    n = scaled(N_RESTARTS, quick)
    batch = min(BATCH, n)
    sides: list[tuple[str, Callable[[int], float]]] = [
        ("ensemble", lambda k: ens_restarts(k, batch)),
        ("gevent", gevent_restarts),
    ]
    for _, fn in sides:
        timed(fn, max(1, n // 10))  # warm-up
    best, samples = best_of(reps, [(name, lambda f=fn: f(n)) for name, fn in sides])
    rates = {name: n / s for name, s in best.items()}
    title = f"one_for_one restarts of a crashing child, {batch} per supervisor"
    results = _erlang_result(
        "restarts_erlang", "1a", title, n, batch, reps, rates["ensemble"], samples["ensemble"],
        f"{batch} restarts under each fresh supervisor (intensity {batch + 10}, period 3600 s)",
    )
    results.append(Result(
        "restarts_gevent", "1b", title, n, UNIT, rates["ensemble"], "gevent", rates["gevent"],
        note="context, no supervisor: a greenlet respawned by its link_exception callback "
        "(gevent pickles each failed greenlet's traceback)",
        samples={"ensemble": samples["ensemble"], "gevent": samples["gevent"]},
    ))
    return results


def bench_history(quick: bool, reps: int) -> list[Result]:
    """2: N restarts under ONE supervisor, intensity N + 10: the restart history grows to N."""
    n = scaled(N_HISTORY, quick)
    fn = lambda k: ens_restarts(k, k)  # noqa: E731 - one supervisor for the whole run
    timed(fn, max(1, n // 10))  # warm-up
    best, samples = best_of(reps, [("ensemble", lambda: fn(n))])
    rate = n / best["ensemble"]
    title = "one_for_one restarts, all under one supervisor"
    note = ("intensity N + 10 over 3600 s: each restart walks the whole history "
            "(OTP's lists:takewhile), so the cost per restart grows with N on both sides")
    results = _erlang_result("history_erlang", "2", title, n, n, reps, rate, samples["ensemble"], note)
    if not results:
        results.append(Result("history", "2", title, n, UNIT, rate, note=note,
                              samples={"ensemble": samples["ensemble"]}))
    return results


MEASUREMENTS: dict[str, Callable[[bool, int], list[Result]]] = {
    "1": bench_restarts,
    "2": bench_history,
}


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, reps=REPS, quick_help="N divided by 50 (CI smoke run)")

if __name__ == "__main__":
    sys.exit(main())
