"""The seed's parallel benchmark: CPU-bound events, sequential against a worker pool.

    python examples/parallel_benchmark.py               # about 20 s on 2 cores
    python examples/parallel_benchmark.py --rounds 1500 # the seed's per-event work (minutes)

Batteries of 25,000, 100,000 and 250,000 integers (``1_000_000, 1_000_001,
...``).  Each event is pure-Python arithmetic: starting from ``acc = value``,
``rounds`` times ``acc = (acc * 48_271 + value + remaining) % 2_147_483_647``
with ``remaining`` counting down from ``rounds`` to 1; a battery's result is
``WorkResult(processed, checksum)``, the checksum being the sum of every
event's ``acc`` modulo 2_147_483_647 (a sum, so the order in which workers
finish does not change it).  The seed runs 1,500 rounds per event; in
CPython that is about 0.3 ms an event, so the three batteries would take
minutes on each side.  This example runs 60 rounds by default (same
batteries, same formula, less work per event) to stay near 20 s;
``--rounds 1500`` runs the seed's figure.

Each battery is computed three ways, and the results must be identical:

* sequentially, a plain loop in the main greenlet;
* on a ``constellation.worker_pool`` of ``W = max(1, min(4, cpu_count))``
  workers on the ``"default"`` dispatcher;
* on a pool of ``W`` workers on the ``"blocking"`` dispatcher, each worker
  on a native carrier thread of its own.

As in the seed, every worker gets one batch (``prefetch = ceil(N / W)``, so
one push is shared out in one batch per worker) and only the work is timed:
from the push until ``worker_pool.stop`` returns (it drains every accepted
event); starting the pool is not timed.  Each side runs twice per battery,
in alternating order, and the best time is shown; on a busy machine the
figures still move by 5-15% from run to run.

What to expect, honestly: **no speed-up**.  CPython's global interpreter
lock (GIL) lets one thread run Python bytecode at a time, so pure-Python CPU
work does not go faster on more threads.  The ``"default"`` pool's workers
are processes sharing one OS thread (greenlets take turns), which cannot be
faster than the plain loop and adds a little messaging; the ``"blocking"``
pool's carriers are real OS threads, but they take turns holding the GIL
and pay for handing it over, so they are no faster either, often a little
slower.  A pool pays off when handlers wait (I/O, or C code that releases
the GIL: see ``bench/constellation.py``, 1 ms blocking calls on 16
carriers), or on a free-threaded build of Python; for CPU-bound Python use
processes (``multiprocessing``, ``concurrent.futures.ProcessPoolExecutor``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from constellation import worker_pool  # noqa: E402

MODULUS = 2_147_483_647
MULTIPLIER = 48_271
FIRST_VALUE = 1_000_000
SIZES = (25_000, 100_000, 250_000)
SEED_ROUNDS = 1_500
DEFAULT_ROUNDS = 60
BAR = 36
REPS = 2


@dataclass(frozen=True)
class WorkResult:
    processed: int
    checksum: int

    def __add__(self, other: "WorkResult") -> "WorkResult":
        return WorkResult(self.processed + other.processed, (self.checksum + other.checksum) % MODULUS)


def crunch(values: list[int], rounds: int) -> WorkResult:
    """The per-event work over a list of events, folded into one WorkResult."""
    checksum = 0
    for value in values:
        acc = value
        for remaining in range(rounds, 0, -1):
            acc = (acc * MULTIPLIER + value + remaining) % MODULUS
        checksum = (checksum + acc) % MODULUS
    return WorkResult(len(values), checksum)


def sequential(values: list[int], rounds: int) -> tuple[float, WorkResult]:
    t0 = time.perf_counter()
    result = crunch(values, rounds)
    return time.perf_counter() - t0, result


def pooled(values: list[int], rounds: int, workers: int, dispatcher: str) -> tuple[float, WorkResult]:
    """Start a pool, then time one push of every value until stop() has drained them."""
    parts: list[WorkResult] = []  # one per batch; list.append is atomic under the GIL

    def handle_batch(state: None, events: list[int]) -> None:
        parts.append(crunch(events, rounds))
        return state

    config = worker_pool.new(
        size=workers,
        prefetch=math.ceil(len(values) / workers),
        initial_state=lambda slot: None,
        handle_batch=handle_batch,
        dispatcher=dispatcher,
        timeout=600.0,  # a battery may take a while at --rounds 1500
    )
    pool = worker_pool.start(config)
    t0 = time.perf_counter()
    worker_pool.push(pool, values)
    worker_pool.stop(pool)
    elapsed = time.perf_counter() - t0
    total = WorkResult(0, 0)
    for part in parts:
        total = total + part
    return elapsed, total


def bar(seconds: float, longest: float) -> str:
    filled = max(1, round(BAR * seconds / longest)) if longest > 0 else BAR
    return "#" * filled + "." * (BAR - filled)


def versus(seconds: float, baseline: float, workers: int) -> str:
    speedup = baseline / seconds
    if speedup >= 1:
        text = f"{speedup:.2f}x faster with the pool"
    else:
        text = f"{1 / speedup:.2f}x slower with the pool"
    if workers > 1 and speedup < 1 + 0.5 * (workers - 1):
        text += f" (no real speed-up; {workers} free cores would give {workers}.00x)"
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                    help=f"rounds of arithmetic per event (the seed: {SEED_ROUNDS}; "
                    f"default {DEFAULT_ROUNDS})")
    ap.add_argument("--reps", type=int, default=REPS,
                    help=f"runs of each side per battery, alternating; the best is kept (default {REPS})")
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES),
                    help="comma-separated battery sizes")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        ap.error("--sizes must be positive integers")

    workers = max(1, min(4, os.cpu_count() or 1))
    gil = "enabled"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        enabled = getattr(sys, "_is_gil_enabled", lambda: True)()
        gil = "enabled (free-threaded build)" if enabled else "disabled"
    print(f"parallel benchmark: {args.rounds} rounds per event (the seed runs {SEED_ROUNDS}), "
          f"{workers} workers per pool, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, GIL {gil}")

    sides: list[tuple[str, Callable[[list[int]], tuple[float, WorkResult]]]] = [
        ("sequential", lambda v: sequential(v, args.rounds)),
        ('pool on "default"', lambda v: pooled(v, args.rounds, workers, "default")),
        ('pool on "blocking"', lambda v: pooled(v, args.rounds, workers, "blocking")),
    ]
    pooled(list(range(FIRST_VALUE, FIRST_VALUE + 100)), 1, workers, "blocking")  # start the carriers

    t_start = time.perf_counter()
    for n in sizes:
        values = list(range(FIRST_VALUE, FIRST_VALUE + n))
        best: dict[str, float] = {}
        results: set[WorkResult] = set()
        for rep in range(args.reps):  # alternate the order: neither side always runs first
            for name, run in sides if rep % 2 == 0 else sides[::-1]:
                seconds, result = run(values)
                best[name] = min(seconds, best.get(name, seconds))
                results.add(result)
        if len(results) != 1:
            raise SystemExit(f"results differ for {n:,} events: {sorted(results, key=repr)}")
        timings = [(name, best[name]) for name, _ in sides]
        (result,) = results
        if result.processed != n:
            raise SystemExit(f"processed {result.processed:,} of {n:,} events")
        base = timings[0][1]
        longest = max(s for _, s in timings)
        print(f"\n{n:,} events  (processed {result.processed:,}, checksum {result.checksum}, "
              "identical on every side)")
        for name, seconds in timings:
            tail = "" if name == "sequential" else "  " + versus(seconds, base, workers)
            print(f"  {name:<19} {bar(seconds, longest)} {seconds:7.3f} s{tail}")

    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")
    print(
        "\nWhy no speed-up: this work is pure Python, and CPython's GIL runs Python bytecode on one\n"
        "thread at a time.  The \"default\" pool's workers share one OS thread (greenlets take turns);\n"
        "the \"blocking\" pool's workers are on native threads, but they take turns holding the GIL, so\n"
        "they are no faster than the loop either.  The pool helps when handlers wait (I/O, or C code\n"
        "that releases the GIL: see bench/constellation.py); CPU-bound Python wants processes."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
