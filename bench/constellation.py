"""constellation's worker pool: no-op throughput and blocking handlers, beside thread and gevent pools.

Run from the repository root::

    python bench/constellation.py            # full run, well under a minute on 2 cores
    python bench/constellation.py --quick    # every N divided by 25 (CI smoke run, ~20 s at most)
    python bench/constellation.py --only 2   # just some measurements
    python bench/constellation.py --reps 5   # more repetitions per side (best is kept)

Everything runs in this one process; nothing is monkey-patched.  Times are
``time.perf_counter`` wall time with the cyclic GC paused, best of 3
alternating runs after a warm-up at N/10 (see ``bench/_harness.py``).  What is
timed is the work only: pools (and their threads) are started before the
clock starts and shut down after it stops.

Measurements, with the issue's targets (PASS/MISS is printed; the exit status
is 0 unless something crashes):

1. No-op throughput: N = 250,000 events (a list of ints), a handler that
   returns its state unchanged.
   ensemble side: ``worker_pool.each(size=4, prefetch=P, handle_event=...)``
   on the ``"default"`` dispatcher, started; the main greenlet pushes the
   events in batches of 1,000 with ``worker_pool.push`` and the clock stops
   when ``worker_pool.stop`` returns (stop drains everything accepted, so
   every event has been handled).
   Peers, on the same events in batches of 8:

   * ``concurrent.futures.ThreadPoolExecutor(4)``: one ``submit`` per batch
     (the task loops the no-op handler over its 8 events), then
     ``concurrent.futures.wait`` for all; the 4 threads are started before
     the clock.
   * raw gevent: ``gevent.pool.Pool(4)``, one ``spawn`` per batch (same
     task), then ``join``.

   1a. pool at prefetch 8 against the thread pool.
       Target: the pool's event rate >= 1.5x the thread pool's (ratio >= 1.5).
   1b. pool at prefetch 64 against the thread pool.
       Target: the pool's event rate >= 10x the thread pool's (ratio >= 10);
       the absolute figure (the former target was 1M events/s) is shown in
       the note, for information only.
   1c. pool at prefetch 8 against the raw gevent pool.  Informative.
   1d. pool at prefetch 64 against the raw gevent pool.  Informative.

2. Blocking handlers: N = 10,000 events, each handled by a 1 ms call that
   gevent cannot patch (the original ``time.sleep(0.001)``), on
   ``worker_pool.each(size=16, prefetch=8, dispatcher="blocking")``: 16
   workers, each on a native carrier thread of its own.  Pushed in batches
   of 1,000, timed until ``stop`` returns.  The figure is events per
   millisecond against the ideal 16/ms (16 workers x one event per ms; a
   real 1 ms sleep takes a little more than 1 ms, so the ideal is a
   ceiling nobody reaches).
   Peer, for context: ``ThreadPoolExecutor(16)`` with one task per batch of
   8 events (the task sleeps once per event).
   Target: >= 80% of the ideal, i.e. >= 12.8 events/ms.

3. CPU-bound events (issue 14): N = 100,000 (quick: 20,000) events of
   examples/parallel_benchmark.py's pure-Python arithmetic (60 rounds each) on
   a pool of W = min(4, usable CPUs) workers on a dispatcher of W OS processes
   (``dispatcher.define(name, processes=W)``), one batch per worker, timed
   from the push until every batch's result is back; against the same events
   in a plain loop.  Target (2 CPUs or more): at least 1.6x the loop's rate.

Output: one line per result, then a Markdown summary table (for the README),
then one JSON line (the last line) with every figure and sample.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

_BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _BENCH_DIR)
from _harness import (  # noqa: E402
    Result,
    Target,
    best_of,
    ensure_importable,
    run,
    scaled,
    timed,
)

ensure_importable("ensemble")  # takes bench/ off sys.path: this file is named like the package
ensure_importable("constellation")

import gevent  # noqa: E402
import gevent.pool  # noqa: E402
from gevent import monkey  # noqa: E402

import ensemble as e  # noqa: E402
from constellation import worker_pool  # noqa: E402

BENCH = "bench/constellation.py"
REPS = 3
QUICK_DIVISOR = 25

N_NOOP = 250_000  # measurement 1
PUSH_BATCH = 1_000  # events per worker_pool.push
PEER_BATCH = 8  # events per thread-pool task / gevent-pool greenlet
NOOP_WORKERS = 4

N_BLOCKING = 10_000  # measurement 2
N_BLOCKING_QUICK = 400
BLOCKING_WORKERS = 16
BLOCKING_PREFETCH = 8
BLOCK_SECONDS = 0.001

real_sleep = monkey.get_original("time", "sleep")


@dataclass
class _Shown(Target):
    """A target shown as the issue states it (``>= 80% of 16/ms``), not as a bare number."""

    shown: str = ""

    def short(self, unit: str) -> str:
        return self.shown or super().short(unit)


# --------------------------------------------------------------------------
# Handlers (the same for every side)
# --------------------------------------------------------------------------


def noop(state: Any, event: Any) -> Any:
    return state


def block(state: Any, event: Any) -> Any:
    real_sleep(BLOCK_SECONDS)  # stalls this OS thread only
    return state


def _initial(slot: int) -> int:
    return 0


def _batches(events: list[int], size: int) -> list[list[int]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


# --------------------------------------------------------------------------
# ensemble: constellation.worker_pool
# --------------------------------------------------------------------------


def pool_run(
    n: int, size: int, prefetch: int, handler: Callable[[Any, Any], Any], dispatcher: str = "default"
) -> float:
    """Start a pool, then time pushing ``n`` events in batches of 1,000 until ``stop`` returns."""
    pushes = _batches(list(range(n)), PUSH_BATCH)
    cfg = worker_pool.each(
        size=size, prefetch=prefetch, initial_state=_initial, handle_event=handler, dispatcher=dispatcher
    )
    pool = worker_pool.start(cfg)
    t0 = time.perf_counter()
    for batch in pushes:
        worker_pool.push(pool, batch)
    worker_pool.stop(pool)
    return time.perf_counter() - t0


def pool_check(n: int, size: int, prefetch: int, dispatcher: str = "default") -> None:
    """Untimed: every pushed event is handled exactly once before ``stop`` returns."""
    seen: list[int] = []  # list.append is atomic under the GIL, on any carrier

    def count(state: Any, event: Any) -> Any:
        seen.append(event)
        return state

    pushes = _batches(list(range(n)), PUSH_BATCH)
    pool = worker_pool.start(
        worker_pool.each(
            size=size, prefetch=prefetch, initial_state=_initial, handle_event=count, dispatcher=dispatcher
        )
    )
    for batch in pushes:
        worker_pool.push(pool, batch)
    worker_pool.stop(pool)
    if sorted(seen) != list(range(n)):
        raise AssertionError(
            f"pool handled {len(seen):,} events ({len(set(seen)):,} distinct), expected {n:,}"
        )


# --------------------------------------------------------------------------
# Peers
# --------------------------------------------------------------------------


def _task(handler: Callable[[Any, Any], Any]) -> Callable[[list[int]], Any]:
    def task(batch: list[int]) -> Any:
        state = 0
        for event in batch:
            state = handler(state, event)
        return state

    return task


def threads_run(n: int, workers: int, handler: Callable[[Any, Any], Any]) -> float:
    """ThreadPoolExecutor(workers): one task per batch of 8, then wait for all."""
    batches = _batches(list(range(n)), PEER_BATCH)
    task = _task(handler)
    with cf.ThreadPoolExecutor(workers) as ex:
        # Start every thread before the clock (threads are created lazily on submit).
        cf.wait([ex.submit(real_sleep, 0.01) for _ in range(workers)])
        t0 = time.perf_counter()
        futures = [ex.submit(task, b) for b in batches]
        done, not_done = cf.wait(futures)
        dt = time.perf_counter() - t0
    if not_done:
        raise AssertionError("thread pool left tasks unfinished")
    for f in done:
        f.result()  # re-raise a task's exception, if any
    return dt


def gevent_run(n: int, workers: int, handler: Callable[[Any, Any], Any]) -> float:
    """gevent.pool.Pool(workers): one greenlet per batch of 8, then join."""
    batches = _batches(list(range(n)), PEER_BATCH)
    task = _task(handler)
    pool = gevent.pool.Pool(workers)
    t0 = time.perf_counter()
    for b in batches:
        pool.spawn(task, b)
    pool.join(raise_error=True)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------


def _rates(
    reps: int, n: int, sides: list[tuple[str, Callable[[int], float]]]
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Warm up at N/10, then best of ``reps`` alternating runs; answers events/s of each side."""
    for _, fn in sides:
        timed(fn, max(1, n // 10))
    best, samples = best_of(reps, [(name, lambda f=fn: f(n)) for name, fn in sides])
    return {name: n / s for name, s in best.items()}, samples


def bench_noop(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_NOOP, quick, QUICK_DIVISOR)
    pool_check(max(1, n // 10), NOOP_WORKERS, 8)
    sides = [
        ("pool_p8", lambda k: pool_run(k, NOOP_WORKERS, 8, noop)),
        ("pool_p64", lambda k: pool_run(k, NOOP_WORKERS, 64, noop)),
        ("threads", lambda k: threads_run(k, NOOP_WORKERS, noop)),
        ("gevent", lambda k: gevent_run(k, NOOP_WORKERS, noop)),
    ]
    rates, samples = _rates(reps, n, sides)
    s = samples
    how = f"pushes of {PUSH_BATCH:,}, timed until stop() returns"
    peer_threads = f"ThreadPoolExecutor({NOOP_WORKERS}), one task per {PEER_BATCH} events"
    peer_gevent = f"gevent.pool.Pool({NOOP_WORKERS}), one greenlet per {PEER_BATCH} events"
    return [
        Result(
            "noop_p8_threads", "1a", f"no-op events, pool of {NOOP_WORKERS}, prefetch 8", n, "events/s",
            rates["pool_p8"], "threads", rates["threads"],
            Target("ratio>=", 1.5, "at prefetch 8 the pool moves at least 1.5x the thread pool's events"),
            note=f"{how}; peer: {peer_threads}",
            samples={"ensemble": s["pool_p8"], "threads": s["threads"]},
        ),
        Result(
            "noop_p64_threads", "1b", f"no-op events, pool of {NOOP_WORKERS}, prefetch 64", n, "events/s",
            rates["pool_p64"], "threads", rates["threads"],
            Target("ratio>=", 10.0, "at prefetch 64 the pool moves at least 10x the thread pool's events"),
            note=f"{how}; {rates['pool_p64'] / 1e6:.2f}M events/s (informative: at least 1M was the former "
            f"target); peer: {peer_threads}",
            samples={"ensemble": s["pool_p64"], "threads": s["threads"]},
        ),
        Result(
            "noop_p8_gevent", "1c", f"no-op events, pool of {NOOP_WORKERS}, prefetch 8", n, "events/s",
            rates["pool_p8"], "gevent", rates["gevent"],
            note=f"peer: {peer_gevent}",
            samples={"ensemble": s["pool_p8"], "gevent": s["gevent"]},
        ),
        Result(
            "noop_p64_gevent", "1d", f"no-op events, pool of {NOOP_WORKERS}, prefetch 64", n, "events/s",
            rates["pool_p64"], "gevent", rates["gevent"],
            note=f"peer: {peer_gevent}",
            samples={"ensemble": s["pool_p64"], "gevent": s["gevent"]},
        ),
    ]


def bench_blocking(quick: bool, reps: int) -> list[Result]:
    n = N_BLOCKING_QUICK if quick else N_BLOCKING
    w = BLOCKING_WORKERS
    pool_check(max(w, n // 10), w, BLOCKING_PREFETCH, "blocking")
    sides = [
        ("pool", lambda k: pool_run(k, w, BLOCKING_PREFETCH, block, "blocking")),
        ("threads", lambda k: threads_run(k, w, block)),
    ]
    rates, samples = _rates(reps, n, sides)
    per_ms = {name: r / 1e3 for name, r in rates.items()}
    ideal = w / (BLOCK_SECONDS * 1e3)
    return [
        Result(
            "blocking_pool16", "2", f"1 ms blocking events, pool of {w} on \"blocking\"", n, "events/ms",
            per_ms["pool"], "threads", per_ms["threads"],
            _Shown("value>=", 0.8 * ideal,
                   f"a pool of {w} workers on native carriers reaches >= 80% of the ideal {ideal:g}/ms",
                   shown=f">= 80% of {ideal:g}/ms"),
            note=f"prefetch {BLOCKING_PREFETCH}, pushes of {PUSH_BATCH:,}; the pool reaches "
            f"{per_ms['pool'] / ideal:.0%} of the ideal {ideal:g}/ms, the threads "
            f"{per_ms['threads'] / ideal:.0%}; peer: ThreadPoolExecutor({w}), one task per "
            f"{PEER_BATCH} events",
            samples={"ensemble": samples["pool"], "threads": samples["threads"]},
        )
    ]


N_CPU = 100_000  # measurement 3 (quick: N_CPU_QUICK)
N_CPU_QUICK = 20_000
CPU_ROUNDS = 60  # rounds of arithmetic per event (examples/parallel_benchmark.py's default)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def bench_cpu(quick: bool, reps: int) -> list[Result]:
    """CPU-bound events on a pool over a dispatcher of OS processes, against a plain loop."""
    examples = os.path.join(os.path.dirname(_BENCH_DIR), "examples")
    if examples not in sys.path:  # once, whatever --repeat says; carrier nodes inherit it
        sys.path.insert(0, examples)
    import parallel_benchmark as pb

    cpus = _usable_cpus()
    workers = max(1, min(4, cpus))
    n = N_CPU_QUICK if quick else N_CPU
    values = list(range(pb.FIRST_VALUE, pb.FIRST_VALUE + n))
    name = "bench-cpu"
    e.dispatcher.define(name, processes=workers)
    try:
        pb.pooled(values[:100], 1, workers, name)  # the carrier nodes start: not timed
        expected = pb.crunch(values, CPU_ROUNDS)
        results = set()

        def pool_side() -> float:
            seconds, result = pb.pooled(values, CPU_ROUNDS, workers, name)
            results.add(result)
            return seconds

        def loop_side() -> float:
            seconds, result = pb.sequential(values, CPU_ROUNDS)
            results.add(result)
            return seconds

        best, samples = best_of(reps, [("pool", pool_side), ("sequential", loop_side)])
    finally:
        e.dispatcher.shutdown(name)
    assert results == {expected}, results
    target = (Target("ratio>=", 1.6, "CPU-bound events on a dispatcher of 2 OS processes: at least 1.6x a loop")
              if cpus >= 2 else None)
    return [
        Result(
            "cpu_pool_processes", "3", f"CPU-bound events, pool of {workers} on a dispatcher of {workers} OS processes",
            n, "events/s", n / best["pool"], "sequential", n / best["sequential"], target,
            note=f"{CPU_ROUNDS} rounds of arithmetic per event (examples/parallel_benchmark.py); one batch per "
            f"worker, timed from the push until every batch's result is back; {cpus} usable CPUs"
            + ("" if cpus >= 2 else ": no target on one CPU"),
            samples={"ensemble": samples["pool"], "sequential": samples["sequential"]},
        )
    ]


MEASUREMENTS: dict[str, Callable[[bool, int], list[Result]]] = {
    "1": bench_noop,
    "2": bench_blocking,
    "3": bench_cpu,
}


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, reps=REPS,
               quick_help=f"every N divided by {QUICK_DIVISOR} (CI smoke run)")

if __name__ == "__main__":
    sys.exit(main())
