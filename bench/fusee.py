"""fusee's durable steps against the disk's own floor, in memory, and against DBOS on SQLite.

Run from the repository root::

    python bench/fusee.py                 # full run, well under a minute
    python bench/fusee.py --quick         # smaller workloads, one repetition of DBOS (CI smoke run)
    python bench/fusee.py --only 1,2      # just some measurements
    python bench/fusee.py --dir /mnt/x    # put the data directories there (default: $TMPDIR)

Every on-disk figure is taken in directories under one base directory (``--dir``), so the floor
and the engine see the same filesystem.  Steps are no-ops returning a small int: what is measured
is the engine and the disk, not the work.  Times are ``time.perf_counter`` wall time with the
cyclic GC paused, best of 3 (``bench/_harness.py``); each repetition uses fresh workflow IDs.

Measurements, with the issue's targets (PASS/MISS is printed; the exit status is 0 unless
something crashes):

1. The disk's floor: a bare loop of 4 KiB ``os.write`` at the next offset + ``os.fdatasync``, into a
   file preallocated and zero-filled as fusee's segments are (the cheapest durable append this
   filesystem offers: no metadata to commit).  Per-op latency, mean (p50/p99 in the note, and the
   same loop appending to a growing file, which also commits the file size).  N = 2,000.
2. One workflow chaining steps (each step's body waits for the previous step's record to be
   durable: one flush per step), against the floor measured alongside it: 100 alternations of 20
   floor ops (one file prepared beforehand; one untimed op first) and a workflow of 20 steps
   (per-step latency = time between consecutive step bodies), the cyclic GC off throughout and
   never collected just before either side.  Target: at most 1.15x the floor.
3. 64 concurrent workflows of 20 steps each (each workflow is started and awaited by its own
   ensemble process), on disk: durable steps per second, start to last result, against the same
   workload in memory measured alternately in the same run (disk, memory, queue; ``--reps`` times);
   the note gives ``engine.metrics()``' records per flush and mean flush latency.  Target: on disk
   at least 0.6x the in-memory rate.
4. The same 64 x 20 workload on the in-memory engine (``Engine.open(None)``), 10 rounds per sample,
   against raw ``gevent.queue.Queue`` round trips between two greenlets (100,000 per sample),
   alternately in the same run.  Target: at least as many steps/s as round trips/s.
5. DBOS Transact (``pip install dbos``, 3.x) on SQLite in WAL mode with ``synchronous=FULL`` doing
   the same 64 x 20 workload (``DBOS.start_workflow`` of a ``@DBOS.workflow`` calling a
   ``@DBOS.step`` 20 times, then ``get_result`` of each), in a child process so its threads and
   logging stay out of the other figures.  The pragmas are set on every SQLite connection by a
   SQLAlchemy ``connect`` listener, and read back from DBOS's own system-database engine.
   Against the figure of 3.  Target: fusee >= 20x DBOS's steps/s.  Skipped, with a line saying
   why, if DBOS is not installed or cannot run on SQLite here.
6. A parent workflow starting 100 children (one step each, on any of 4 shards) and awaiting them:
   children/s, against DBOS's child workflows (a workflow calling ``start_workflow`` 100 times).
7. 400 runs of a type limited to 4 at once, started one after another and awaited: runs/s through
   the slot and coordinator runs, against a DBOS queue of global concurrency 4 (polled every 10 ms).
8. Memory per parked run: 20,000 runs sleeping to one instant, all parked, then all woken; traced
   Python allocations per run, parked against loaded.
9. Scaling: 1, 16, 64, 256 and 1,024 concurrent workflows of 20 steps, on disk and in memory
   (alternating, best of ``--reps``), informative, printed as a Markdown table (docs/fusee.md).
10. Updates against signals on one run, on disk: 1,000 ``engine.update`` calls one after another (each
   answered once its ``UpdateDone`` is durable; the handler counts, no step) against 1,000
   ``engine.signal`` calls (each answered once its ``Signal`` is durable) to one run that waits for
   them, alternating, best of ``--reps``.  Informative (no target).
11. Stream chunks/s durable: one run writes 20,000 chunks (short str tokens) into ``ctx.stream`` from one
   step body (the LLM case), while a reader (``engine.read_stream``) takes them as they become durable:
   chunks/s from the start to the reader's last chunk, against the same chunks written by workflow
   code (one operation per chunk), alternating, best of ``--reps``, on disk.  Informative (no target).
12. Object calls against updates, on disk: 1,000 exclusive ``ObjectRef.call`` one after another to one key
   (each answered once its commit, the ``UpdateDone`` of the key's run holding answer and state change, is
   durable; the handler bumps a counter in ``ctx.state``, no step) against 1,000 ``engine.update`` calls to
   one run (the handler of 10), alternating, best of ``--reps``.  Informative (no target).

Output: one line per result, then a Markdown summary table (for the README), then one JSON line
(the last line) with every figure and sample.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from _harness import (  # noqa: E402
    REPO_ROOT,
    Result,
    Target,
    ensure_importable,
    gc_paused,
    run,
)


BENCH = "fusee"
REPS = 3

FLOOR_OPS = (2_000, 200)  # (full, quick)
CHAIN_STEPS = (2_000, 200)  # steps in all, in slices of CHAIN_SLICE alternating with floor loops
CHAIN_SLICE = (20, 20)
WORKFLOWS, STEPS = 64, 20
MEMORY_BATCHES = (10, 3)
QUEUE_TRIPS = (100_000, 20_000)
DBOS_SHAPE = ((WORKFLOWS, STEPS), (16, STEPS))
PAGE = 4096

_state: dict[str, Any] = {"base": None, "floor": None, "durable": None, "alternating": None}


# --------------------------------------------------------------------------
# Directories
# --------------------------------------------------------------------------


def _base() -> str:
    if _state["base"] is None:
        _state["base"] = tempfile.mkdtemp(prefix="fusee-bench-", dir=_state.get("dir"))
    return _state["base"]


def _fresh(name: str) -> str:
    p = os.path.join(_base(), name)
    shutil.rmtree(p, ignore_errors=True)
    return p


def _fstype(path: str) -> str:
    """The filesystem type holding ``path`` (longest mount point prefix in /proc/mounts)."""
    try:
        best, kind = "", "?"
        real = os.path.realpath(path)
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
        return f"{kind} on {best}"
    except OSError:
        return "?"


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def _us(s: float) -> str:
    return f"{s * 1e6:,.0f} us"


# --------------------------------------------------------------------------
# 1. The disk's floor
# --------------------------------------------------------------------------


def _floor_file(path: str, pages: int, preallocate: bool) -> int:
    """A file for the floor loop, open at offset 0: preallocated, zero-filled and synced with its
    directory for ``pages`` 4 KiB writes, as fusee's segments are (or empty, to grow)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    if preallocate:
        size = PAGE * (pages + 1)
        os.posix_fallocate(fd, 0, size)
        zeros = bytes(1 << 20)
        left = size
        while left > 0:
            left -= os.write(fd, zeros[: min(left, len(zeros))])
        os.fsync(fd)
        dfd = os.open(os.path.dirname(path), os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _floor_ops(fd: int, n: int) -> list[float]:
    """Per-op seconds of ``n`` 4 KiB writes at the file's next offset, each followed by fdatasync."""
    block = os.urandom(PAGE)
    out = []
    clock = time.perf_counter
    with gc_paused():
        for _ in range(n):
            t0 = clock()
            os.write(fd, block)
            os.fdatasync(fd)
            out.append(clock() - t0)
    return out


def _floor_loop(path: str, n: int, preallocate: bool) -> list[float]:
    """Per-op seconds of ``n`` 4 KiB writes at the next offset of a fresh file, each followed by fdatasync."""
    fd = _floor_file(path, n, preallocate)
    try:
        return _floor_ops(fd, n)
    finally:
        os.close(fd)
        os.unlink(path)


def bench_floor(quick: bool, reps: int) -> list[Result]:
    n = FLOOR_OPS[quick]
    d = _fresh("floor")
    os.makedirs(d)
    best: list[float] | None = None
    samples = []
    for _ in range(reps):
        lat = _floor_loop(os.path.join(d, "floor.dat"), n, True)
        mean = sum(lat) / n
        samples.append(mean)
        if best is None or mean < sum(best) / n:
            best = lat
    assert best is not None
    grow = _floor_loop(os.path.join(d, "grow.dat"), n, False)
    mean = sum(best) / n
    _state["floor"] = mean
    note = (
        f"p50 {_us(_pct(best, 0.5))}, p99 {_us(_pct(best, 0.99))}; appending to a growing file instead: "
        f"mean {_us(sum(grow) / n)}, p50 {_us(_pct(grow, 0.5))}; on {_fstype(d)}"
    )
    return [Result("floor", "1", "disk floor: 4 KiB write + fdatasync, per op", n, "s", mean,
                   note=note, samples={"fusee": samples})]


def _floor(quick: bool, reps: int) -> float:
    if _state["floor"] is None:
        bench_floor(quick, reps)
    return _state["floor"]


# --------------------------------------------------------------------------
# The workflows
# --------------------------------------------------------------------------

ensure_importable("fusee")

import ensemble as e  # noqa: E402
import fusee  # noqa: E402

_marks: list[float] = []


def _noop(i: int) -> Callable[[], int]:
    return lambda: i


@fusee.workflow("bench.chain", version=1)
def chain(ctx: Any, n: int) -> int:
    """``n`` steps one after the other; each body notes when it ran (for per-step percentiles)."""
    mark = _marks.append
    clock = time.perf_counter
    total = 0
    for i in range(n):
        total += ctx.step("s", lambda i=i: mark(clock()) or i)
    return total


@fusee.workflow("bench.steps", version=1)
def steps(ctx: Any, n: int) -> int:
    total = 0
    for i in range(n):
        total += ctx.step("s", _noop(i))
    return total


def _one(engine: Any, wid: str, n: int) -> int:
    return engine.execute(steps, wid, n)


def _concurrent(engine: Any, tag: str, workflows: int, n: int) -> float:
    """Seconds for ``workflows`` processes to each start and await a workflow of ``n`` steps."""
    t0 = time.perf_counter()
    pids = [e.spawn(_one, engine, f"{tag}-{w}", n) for w in range(workflows)]
    got = [e.join(p) for p in pids]
    dt = time.perf_counter() - t0
    assert got == [n * (n - 1) // 2] * workflows, got[:3]
    return dt


_rep_ids = iter(range(1, 1 << 30))


# --------------------------------------------------------------------------
# 2. One workflow, 1,000 steps in a chain
# --------------------------------------------------------------------------


class _gc_off:
    """Disable the cyclic GC without collecting first (``gc_paused`` collects on entry, which leaves the
    allocator cold for whatever runs next: the floor's first write measured slower after it)."""

    def __enter__(self) -> "_gc_off":
        self._was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._was:
            gc.enable()


def bench_chain(quick: bool, reps: int) -> list[Result]:
    """Per-step latency of a chain against the floor, measured in alternating slices.

    The disk's own latency drifts by tens of percent from one second to the
    next on a shared VM, so the measurement alternates: ``slice`` floor ops
    (appending to one file prepared beforehand, as the engine's segment is,
    after one untimed op), then a workflow chaining ``slice`` steps, ``n /
    slice`` times over.  The cyclic GC is off for the whole alternation and
    never collected just before either side.  A step's latency is the time
    from one step body to the next (the workflow's start and end are not
    steps); the ratio is total against total.
    """
    _floor(quick, reps)
    n = CHAIN_STEPS[quick]
    size = CHAIN_SLICE[quick]
    d = _fresh("chain-floor")
    os.makedirs(d)
    fd = _floor_file(os.path.join(d, "floor.dat"), n + n // size, True)  # prepared once, as segments are
    block = os.urandom(PAGE)
    clock = time.perf_counter
    with fusee.Engine.open(_fresh("chain"), workflows=[chain, steps], shards=4) as engine:
        engine.execute(chain, "warm-up", max(1, n // 10))
        floor_ops, gaps, slices = [], [], []
        gc.collect()  # once, before the alternation: never just before one side
        with _gc_off():
            for _ in range(n // size):
                # One untimed op first: right after a workflow ends, the engine's carrier still winds it
                # down (the GIL is busy), and the next op took 2-4x the others (measured by position).
                os.write(fd, block)
                os.fdatasync(fd)
                lat = []
                for _ in range(size):
                    t0 = clock()
                    os.write(fd, block)
                    os.fdatasync(fd)
                    lat.append(clock() - t0)
                floor_ops.extend(lat)
                _marks.clear()
                total = engine.execute(chain, f"chain-{next(_rep_ids)}", size)
                assert total == size * (size - 1) // 2
                g = [b - a for a, b in zip(_marks, _marks[1:])]
                gaps.extend(g)
                slices.append(sum(g) / len(g) / (sum(lat) / len(lat)))
        m = engine.metrics()
    os.close(fd)
    per_step = sum(gaps) / len(gaps)
    floor = sum(floor_ops) / len(floor_ops)
    slices.sort()
    note = (
        f"{n // size} alternating slices of {size} floor ops and {size} chained steps, GC off throughout and "
        f"never collected before a side; per-slice ratios "
        f"min {slices[0]:.2f}, median {slices[len(slices) // 2]:.2f}, max {slices[-1]:.2f}; "
        f"step gaps p50 {_us(_pct(gaps, 0.5))}, p99 {_us(_pct(gaps, 0.99))}; floor p50 "
        f"{_us(_pct(floor_ops, 0.5))}; records per flush over the engine's life {m['records_per_flush']:.2f}; "
        f"flushes done inline by the run {m['inline_flushes']:,} of {m['flushes']:,}"
    )
    return [Result("chain", "2", f"one workflow chaining steps, per step ({len(gaps):,} steps)", len(gaps), "s",
                   per_step, "4 KiB floor", floor,
                   Target("ratio<=", 1.15, "per-step latency at most 1.15x the floor"),
                   note=note, samples={"fusee": slices})]


# --------------------------------------------------------------------------
# 3. 64 concurrent workflows of 20 steps, on disk, against in memory; 4. in memory against gevent Queue
# --------------------------------------------------------------------------


def _queue_round_trips(n: int) -> float:
    """Round trips per second between two greenlets through two raw ``gevent.queue.Queue``: put a request
    on one, the other greenlet takes it and puts it on the other, the first takes that."""
    import gevent
    from gevent.queue import Queue

    requests: Any = Queue()
    replies: Any = Queue()

    def echo() -> None:
        get, put = requests.get, replies.put
        for _ in range(n):
            put(get())

    g = gevent.spawn(echo)
    get, put = replies.get, requests.put
    t0 = time.perf_counter()
    for i in range(n):
        put(i)
        get()
    dt = time.perf_counter() - t0
    g.join()
    return n / dt


def _rate(engine: Any, workflows: int, n: int, batches: int) -> float:
    """Steps per second of ``batches`` rounds of ``workflows`` concurrent workflows of ``n`` steps."""
    t0 = time.perf_counter()
    for _ in range(batches):
        _concurrent(engine, f"r{next(_rep_ids)}", workflows, n)
    return workflows * n * batches / (time.perf_counter() - t0)


def _alternating(quick: bool, reps: int) -> dict[str, Any]:
    """The 64 x 20 workload on disk and in memory and the gevent Queue round trips, measured alternately
    (disk, memory, queue, ``reps`` times over) in one run, the GC paused in each; every sample of each."""
    if _state.get("alternating") is not None:
        return _state["alternating"]
    disk_batches = 1
    mem_batches = MEMORY_BATCHES[quick]
    out: dict[str, Any] = {"disk": [], "memory": [], "queue": [], "per_flush": [], "flush_s": []}
    with fusee.Engine.open(_fresh("concurrent"), workflows=[steps], shards=4) as disk, \
            fusee.Engine.open(None, workflows=[steps], shards=4) as mem:
        _concurrent(disk, "warm-up", WORKFLOWS, STEPS)
        _concurrent(mem, "warm-up", WORKFLOWS, STEPS)
        _queue_round_trips(QUEUE_TRIPS[quick] // 10)
        for _ in range(reps):
            before = disk.metrics()
            with gc_paused():
                out["disk"].append(_rate(disk, WORKFLOWS, STEPS, disk_batches))
            after = disk.metrics()
            flushes = after["flushes"] - before["flushes"]
            records = after["records"] - before["records"]
            out["per_flush"].append(records / flushes if flushes else 0.0)
            seconds = after["flush_seconds_mean"] * after["flushes"] - before["flush_seconds_mean"] * before["flushes"]
            out["flush_s"].append(seconds / flushes if flushes else 0.0)
            with gc_paused():
                out["memory"].append(_rate(mem, WORKFLOWS, STEPS, mem_batches))
            with gc_paused():
                out["queue"].append(_queue_round_trips(QUEUE_TRIPS[quick]))
        out["flush_seconds_max"] = disk.metrics()["flush_seconds_max"]
    _state["alternating"] = out
    _state["durable"] = max(out["disk"])
    return out


def _spread(xs: list[float]) -> str:
    return f"{min(xs):,.0f}..{max(xs):,.0f}"


def bench_concurrent(quick: bool, reps: int) -> list[Result]:
    _state["alternating"] = None  # measured afresh in each repetition (--repeat), then shared with 4
    got = _alternating(quick, reps)
    best = max(range(len(got["disk"])), key=lambda i: got["disk"][i])
    ratios = sorted(d / m for d, m in zip(got["disk"], got["memory"]))
    note = (
        f"alternating with 4 (disk, memory, queue, x{reps}); on disk {_spread(got['disk'])} steps/s, in memory "
        f"{_spread(got['memory'])}; per-pair ratios {ratios[0]:.2f}..{ratios[-1]:.2f}; records per flush "
        f"{got['per_flush'][best]:.1f} (engine.metrics()), mean flush {_us(got['flush_s'][best])}, slowest "
        f"{_us(got['flush_seconds_max'])}"
    )
    return [Result("concurrent", "3", f"{WORKFLOWS} concurrent workflows x {STEPS} steps, on disk vs in memory",
                   WORKFLOWS * STEPS, "steps/s", max(got["disk"]), "in memory", max(got["memory"]),
                   target=Target("ratio>=", 0.6, "on disk at least 0.6x the in-memory rate of the same run"),
                   note=note, samples={"fusee": got["disk"], "in memory": got["memory"]})]


def bench_memory(quick: bool, reps: int) -> list[Result]:
    got = _alternating(quick, reps)
    _state["alternating"] = None  # the next repetition measures afresh
    batches = MEMORY_BATCHES[quick]
    ratios = sorted(m / q for m, q in zip(got["memory"], got["queue"]))
    note = (
        f"{batches} x {WORKFLOWS} workflows x {STEPS} steps per sample, alternating with 3 and with "
        f"{QUEUE_TRIPS[quick]:,} round trips between two greenlets through two gevent.queue.Queue; "
        f"in memory {_spread(got['memory'])} steps/s, queue {_spread(got['queue'])} round trips/s; "
        f"per-pair ratios {ratios[0]:.2f}..{ratios[-1]:.2f}"
    )
    return [Result("memory", "4", f"in memory: {WORKFLOWS} workflows x {STEPS} steps vs gevent Queue round trips",
                   WORKFLOWS * STEPS * batches, "steps/s", max(got["memory"]), "Queue round trips",
                   max(got["queue"]),
                   target=Target("ratio>=", 1.0, "at least as many steps/s as raw gevent Queue round trips/s"),
                   note=note, samples={"fusee": got["memory"], "gevent Queue": got["queue"]})]


# --------------------------------------------------------------------------
# 9. Scaling: 1 .. 1,024 concurrent workflows, on disk and in memory
# --------------------------------------------------------------------------

SCALING = ((1, 16, 64, 256, 1024), (1, 16, 64, 256))


def bench_scaling(quick: bool, reps: int) -> list[Result]:
    """Steps/s of W concurrent workflows of 20 steps, on disk and in memory, for each W (informative);
    each figure the best of ``reps``, the two sides alternating; a Markdown table is printed."""
    results: list[Result] = []
    rows = []
    with fusee.Engine.open(_fresh("scaling"), workflows=[steps], shards=4) as disk, \
            fusee.Engine.open(None, workflows=[steps], shards=4) as mem:
        _concurrent(disk, "warm-up", WORKFLOWS, STEPS)
        _concurrent(mem, "warm-up", WORKFLOWS, STEPS)
        for w in SCALING[quick]:
            total = w * STEPS
            disk_batches = max(1, 1280 // total)  # each sample at least 1,280 steps
            mem_batches = max(1, 12_800 // total)
            ds, ms = [], []
            for _ in range(reps):
                with gc_paused():
                    ds.append(_rate(disk, w, STEPS, disk_batches))
                with gc_paused():
                    ms.append(_rate(mem, w, STEPS, mem_batches))
            rows.append((w, max(ds), max(ms)))
            results.append(Result(f"scaling-{w}", "9", f"{w} concurrent workflow(s) x {STEPS} steps, on disk vs in memory",
                                  total * disk_batches, "steps/s", max(ds), "in memory", max(ms),
                                  note=f"on disk {_spread(ds)}, in memory {_spread(ms)} steps/s",
                                  samples={"fusee": ds, "in memory": ms}))
    print("\n[9] scaling (steps/s, best of %d, 20 steps per workflow, 4 shards):\n" % reps)
    print("| workflows | on disk | in memory | disk / memory |")
    print("|---:|---:|---:|---:|")
    for w, d, m in rows:
        print(f"| {w:,} | {d:,.0f} | {m:,.0f} | {d / m:.2f} |")
    print(flush=True)
    return results


# --------------------------------------------------------------------------
# 5. DBOS on SQLite (WAL, synchronous=FULL)
# --------------------------------------------------------------------------


def dbos_child(path: str, mode: str, a: int, b: int, reps: int) -> int:
    """In a child process: a workload on DBOS; prints one JSON line (or {"skip": why}).

    ``mode`` "steps": ``a`` workflows of ``b`` steps, steps/s.  "children": one
    parent workflow starting ``a`` child workflows of one step and awaiting
    them, children/s.  "queue": ``a`` one-step workflows through a DBOS queue
    of global concurrency ``b`` (polled every 10 ms), admissions/s.
    """
    try:
        import sqlalchemy as sa
        from dbos import DBOS
        from dbos import _dbos as dbos_core
    except ImportError as exc:
        print(json.dumps({"skip": f"DBOS is not installed ({exc}); pip install 'dbos>=3,<4'"}))
        return 0

    @sa.event.listens_for(sa.engine.Engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()

    import logging

    logging.getLogger("dbos").setLevel(logging.WARNING)
    db = os.path.join(path, "dbos.sqlite")
    DBOS(config={"name": "fusee-bench", "system_database_url": f"sqlite:///{db}", "log_level": "WARNING"})
    queue: Any = None

    @DBOS.step()
    def step(i: int) -> int:
        return i

    @DBOS.workflow()
    def work(k: int) -> int:
        total = 0
        for i in range(k):
            total += step(i)
        return total

    @DBOS.workflow()
    def parent(children: int) -> int:
        handles = [DBOS.start_workflow(work, 1) for _ in range(children)]
        return sum(h.get_result() for h in handles)

    def timed() -> float:
        t0 = time.perf_counter()
        if mode == "steps":
            got = [h.get_result() for h in [DBOS.start_workflow(work, b) for _ in range(a)]]
            assert got == [b * (b - 1) // 2] * a
            count = a * b
        elif mode == "children":
            assert DBOS.start_workflow(parent, a).get_result() == 0
            count = a
        else:
            assert queue is not None
            got = [h.get_result() for h in [queue.enqueue(work, 1) for _ in range(a)]]
            assert got == [0] * a
            count = a
        return count / (time.perf_counter() - t0)

    try:
        DBOS.launch()
        sysdb = dbos_core._dbos_global_instance._sys_db  # type: ignore[union-attr]
        with sysdb.engine.connect() as c:
            mode_ = c.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = c.exec_driver_sql("PRAGMA synchronous").scalar()
        if (str(mode_).lower(), int(sync)) != ("wal", 2):
            print(json.dumps({"skip": f"SQLite pragmas did not take: journal_mode={mode_}, synchronous={sync}"}))
            return 0
        if mode == "queue":
            queue = DBOS.register_queue("limited", global_concurrency=max(1, b), polling_interval_sec=0.01)
        for h in [DBOS.start_workflow(work, 2) for _ in range(4)]:  # warm-up
            h.get_result()
        samples = [timed() for _ in range(reps)]
    except Exception as exc:  # cannot run on SQLite here: say why
        print(json.dumps({"skip": f"DBOS failed on SQLite: {type(exc).__name__}: {exc}"}))
        return 0
    finally:
        try:
            DBOS.destroy()
        except Exception:
            pass
    from importlib import metadata

    print(json.dumps({"samples": samples, "journal_mode": mode_, "synchronous": sync,
                      "version": metadata.version("dbos"), "fs": _fstype(path)}))
    return 0


def _dbos(mode: str, a: int, b: int, reps: int) -> dict[str, Any]:
    """Run :func:`dbos_child` in a child process; its JSON answer (``{"skip": why}`` if it could not run)."""
    d = _fresh(f"dbos-{mode}")
    os.makedirs(d)
    cmd = [sys.executable, os.path.abspath(__file__), "--dbos-child", d, mode, str(a), str(b), str(reps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skip": f"the DBOS child exited {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def bench_dbos(quick: bool, reps: int) -> list[Result]:
    workflows, n = DBOS_SHAPE[quick]
    reps = 1 if quick else reps
    got = _dbos("steps", workflows, n, reps)
    if "skip" in got:
        print(f"[5] DBOS on SQLite: skipped: {got['skip']}", flush=True)
        return []
    dbos_rate = max(got["samples"])
    fusee_rate = _state["durable"]
    if fusee_rate is None:
        _alternating(quick, reps)
        fusee_rate = _state["durable"]
    note = (
        f"DBOS {got['version']}, {workflows} workflows x {n} steps, SQLite journal_mode={got['journal_mode']} "
        f"synchronous={got['synchronous']} (FULL), read back from DBOS's engine; fusee's figure is that of 3"
    )
    return [Result("dbos", "5", f"{WORKFLOWS} x {STEPS} durable steps/s vs DBOS on SQLite", WORKFLOWS * STEPS,
                   "steps/s", fusee_rate, "DBOS", dbos_rate,
                   Target("ratio>=", 20, "at least 20x DBOS's steps/s", margin=2.5), note=note,
                   samples={"DBOS": got["samples"]})]


# --------------------------------------------------------------------------
# 6. A parent with 100 children; 7. admission through a limit of 4; 8. memory per parked run
# --------------------------------------------------------------------------

CHILDREN = (100, 100)
LIMITED = (400, 80)  # runs through the limit of 4
PARKED = (20_000, 2_000)


@fusee.workflow("bench.leaf", version=1)
def leaf(ctx: Any, x: int) -> int:
    return ctx.step("s", lambda: x)


@fusee.workflow("bench.parent", version=1)
def parent(ctx: Any, n: int) -> int:
    """Start ``n`` children (any shard), then collect their results in order."""
    ids = [f"{ctx.workflow_id}/c{i}" for i in range(n)]
    for cid in ids:
        ctx.start_child(leaf, cid, 1)
    return sum(ctx.child(leaf, cid, 1) for cid in ids)


@fusee.workflow("bench.limited", version=1, concurrency=4)
def limited(ctx: Any, x: int) -> int:
    return ctx.step("s", lambda: x)


def bench_children(quick: bool, reps: int) -> list[Result]:
    n = CHILDREN[quick]
    with fusee.Engine.open(_fresh("children"), workflows=[leaf, parent], shards=4) as engine:
        engine.execute(parent, "warm-up", 10)
        samples = []
        for _ in range(reps):
            with gc_paused():
                t0 = time.perf_counter()
                assert engine.execute(parent, f"parent-{next(_rep_ids)}", n) == n
                samples.append(n / (time.perf_counter() - t0))
        m = engine.metrics()
    got = _dbos("children", n, 0, 1 if quick else reps)
    peer = None if "skip" in got else max(got["samples"])
    note = (
        f"each child one step, on any of 4 shards; start_child returns once the child's Start is durable, "
        f"then the parent awaits each result in turn; records per flush {m['records_per_flush']:.1f}; "
        + (f"DBOS {got['version']}: a parent workflow calling start_workflow {n} times, then get_result"
           if peer else f"DBOS skipped: {got['skip']}")
    )
    return [Result("children", "6", f"a parent with {n} children, on disk", n, "children/s", max(samples),
                   "DBOS" if peer else None, peer, note=note, samples={"fusee": samples})]


def bench_admission(quick: bool, reps: int) -> list[Result]:
    n = LIMITED[quick]
    with fusee.Engine.open(_fresh("limit"), workflows=[limited], shards=4) as engine:
        samples = []
        for _ in range(reps):
            tag = next(_rep_ids)
            with gc_paused():
                t0 = time.perf_counter()
                runs = [engine.start(limited, f"l{tag}-{i}", i) for i in range(n)]
                assert [r.result(timeout=600) for r in runs] == list(range(n))
                samples.append(n / (time.perf_counter() - t0))
    got = _dbos("queue", n, 4, 1 if quick else reps)
    peer = None if "skip" in got else max(got["samples"])
    note = (
        "each start goes through a slot run and the coordinator fusee.concurrency/bench.limited (signals both "
        "ways, all journaled); one step per run; "
        + (f"DBOS {got['version']}: a queue of global concurrency 4 polled every 10 ms" if peer
           else f"DBOS skipped: {got['skip']}")
    )
    return [Result("admission", "7", f"{n} runs through a concurrency limit of 4, on disk", n, "runs/s",
                   max(samples), "DBOS" if peer else None, peer, note=note, samples={"fusee": samples})]


def bench_parked(quick: bool, reps: int) -> list[Result]:
    from fusee.testing import parked_memory

    n = PARKED[quick]
    got = parked_memory(n, shards=4)
    note = (
        f"{got['runs_parked']:,} runs sleeping to one instant, all parked (metrics), then all woken: "
        f"{got['finished']:,} finished; Python allocations traced with tracemalloc (which slows it ~2x): "
        f"start {got['start_seconds']:.1f} s, park {got['park_seconds']:.1f} s, mass wake {got['wake_seconds']:.1f} s"
    )
    return [Result("parked", "8", "memory per parked run (a waiting run still loaded is the peer)", n, "B/run",
                   got["bytes_per_parked_run"], "loaded run", got["bytes_per_loaded_run"], note=note)]


# --------------------------------------------------------------------------
# 10. Updates against signals on one run
# --------------------------------------------------------------------------

INTERACTIONS = (1_000, 200)


@fusee.workflow("bench.inbox", version=1)
def inbox(ctx: Any, n: int) -> int:
    """Counts updates; takes ``n`` signals "sig", then waits for "stop"."""
    seen = {"n": 0}

    def bump(v: Any) -> int:
        seen["n"] += 1
        return seen["n"]

    ctx.on_update("bump", bump)
    for _ in range(n):
        ctx.wait_for("sig")
    ctx.wait_for("stop")
    return seen["n"]


def bench_updates(quick: bool, reps: int) -> list[Result]:
    n = INTERACTIONS[quick]
    upd: list[float] = []
    sig: list[float] = []
    with fusee.Engine.open(_fresh("updates"), workflows=[inbox], shards=4) as engine:
        for _ in range(reps):
            wid = f"inbox-{next(_rep_ids)}"
            engine.start(inbox, wid, n)
            engine.update(wid, "bump", 0)  # the run is loaded and waiting: warm

            def updates() -> float:
                t0 = time.perf_counter()
                for i in range(n):
                    engine.update(wid, "bump", i)
                return time.perf_counter() - t0

            def signals() -> float:
                t0 = time.perf_counter()
                for i in range(n):
                    engine.signal(wid, "sig", i)
                return time.perf_counter() - t0

            order = (updates, signals) if len(upd) % 2 == 0 else (signals, updates)
            for fn in order:
                with gc_paused():
                    dt = fn()
                (upd if fn is updates else sig).append(n / dt)
            engine.signal(wid, "stop")
            assert engine.result(wid, timeout=600) == n + 1
        m = engine.metrics()
    note = (
        f"{n:,} sequential calls each, to one run on one of 4 shards, alternating, best of {reps}: an update "
        f"records Update + UpdateDone and goes through the run's process (validator, handler), a signal records "
        f"one Signal (its Waited follows); records per flush {m['records_per_flush']:.1f}"
    )
    return [Result("updates", "10", "updates/s against signals/s on one run, on disk", n, "updates/s", max(upd),
                   "signals", max(sig), note=note, samples={"fusee": upd, "signals": sig})]


STREAM_CHUNKS = (20_000, 2_000)


@fusee.workflow("bench.stream", version=1)
def streamer(ctx: Any, spec: list[Any]) -> int:
    """Writes ``spec[0]`` chunks to stream "s", from a step body (``spec[1]`` "step") or from the code."""
    n, where = spec
    out = ctx.stream("s")
    if where == "step":

        def body() -> int:
            for i in range(n):
                out.write("tok")
            return n

        ctx.step("generate", body)
    else:
        for i in range(n):
            out.write("tok")
    out.close()
    return n


def bench_stream(quick: bool, reps: int) -> list[Result]:
    n = STREAM_CHUNKS[quick]
    rates: dict[str, list[float]] = {"step": [], "code": []}
    with fusee.Engine.open(_fresh("stream"), workflows=[streamer], shards=4) as engine:
        engine.execute(streamer, f"stream-warm-{next(_rep_ids)}", [100, "step"], timeout=600)
        for k in range(reps):
            for where in (("step", "code") if k % 2 == 0 else ("code", "step")):
                wid = f"stream-{next(_rep_ids)}"
                with gc_paused():
                    t0 = time.perf_counter()
                    engine.start(streamer, wid, [n, where])
                    got = sum(1 for _ in engine.read_stream(wid, "s", timeout=600))
                    dt = time.perf_counter() - t0
                assert got == n and engine.result(wid, timeout=600) == n
                rates[where].append(n / dt)
        m = engine.metrics()
    note = (
        f"{n:,} chunks of one run, read by one reader as they become durable, alternating, best of {reps}; "
        f"the peer writes them from workflow code (an operation each); records per flush {m['records_per_flush']:.1f}"
    )
    return [Result("stream", "11", "stream chunks/s durable (from a step body), read as written, on disk", n,
                   "chunks/s", max(rates["step"]), "from code", max(rates["code"]), note=note,
                   samples={"fusee": rates["step"], "code": rates["code"]})]


# --------------------------------------------------------------------------
# 12. Object calls against updates
# --------------------------------------------------------------------------


def _obj_bump(ctx: Any, v: Any) -> int:
    """An exclusive handler: bumps the key's counter (committed with the answer)."""
    n = ctx.state.get("n", 0) + 1
    ctx.state.set("n", n)
    return n


def bench_objects(quick: bool, reps: int) -> list[Result]:
    n = INTERACTIONS[quick]
    obj: list[float] = []
    upd: list[float] = []
    with fusee.Engine.open(_fresh("objects"), workflows=[inbox], shards=4) as engine:
        engine.object_type("bench.counter").exclusive("bump", _obj_bump)
        for _ in range(reps):
            rid = next(_rep_ids)
            wid = f"inbox-{rid}"
            ref = engine.object("bench.counter", f"key-{rid}")
            engine.start(inbox, wid, 0)
            engine.update(wid, "bump", 0)  # the run is loaded and waiting: warm
            ref.call("bump", 0)  # the key's run started and loaded: warm

            def calls() -> float:
                t0 = time.perf_counter()
                for i in range(n):
                    ref.call("bump", i)
                return time.perf_counter() - t0

            def updates() -> float:
                t0 = time.perf_counter()
                for i in range(n):
                    engine.update(wid, "bump", i)
                return time.perf_counter() - t0

            order = (calls, updates) if len(obj) % 2 == 0 else (updates, calls)
            for fn in order:
                with gc_paused():
                    dt = fn()
                (obj if fn is calls else upd).append(n / dt)
            engine.signal(wid, "stop")
            assert engine.result(wid, timeout=600) == n + 1
            assert ref.state().values == {"n": n + 1}
        m = engine.metrics()
    note = (
        f"{n:,} sequential calls each, to one key / one run on one of 4 shards, alternating, best of {reps}: an "
        f"exclusive call is an update of the key's run (Update + UpdateDone with the state change; the caller "
        f"also checks the handler exists and the run continues as new every 200 calls); records per flush "
        f"{m['records_per_flush']:.1f}"
    )
    return [Result("objects", "12", "exclusive object calls/s against updates/s, one key / one run, on disk", n,
                   "calls/s", max(obj), "updates", max(upd), note=note, samples={"fusee": obj, "updates": upd})]


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

MEASUREMENTS: dict[str, Callable[[bool, int], list[Result]]] = {
    "1": bench_floor,
    "2": bench_chain,
    "3": bench_concurrent,
    "4": bench_memory,
    "5": bench_dbos,
    "6": bench_children,
    "7": bench_admission,
    "8": bench_parked,
    "9": bench_scaling,
    "10": bench_updates,
    "11": bench_stream,
    "12": bench_objects,
}


def _add_arguments(ap: Any) -> None:
    ap.add_argument("--dir", default=None, help="base directory for the data directories (default: $TMPDIR)")
    ap.add_argument("--dbos-child", nargs=5, metavar=("DIR", "MODE", "A", "B", "REPS"), help=argparse.SUPPRESS)


def _before(args: Any) -> int | None:
    if args.dbos_child:
        d, mode, a, b, reps = args.dbos_child
        return dbos_child(d, mode, int(a), int(b), int(reps))
    _state["dir"] = args.dir
    print(f"data directories under {_base()} ({_fstype(_base())})")
    return None


def _after(args: Any) -> None:
    if _state["base"] is not None:
        shutil.rmtree(_state["base"], ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    try:
        return run(BENCH, __doc__, MEASUREMENTS, argv, dists=("dbos", "sqlalchemy"), reps=REPS,
                   add_arguments=_add_arguments, before=_before, after=_after)
    finally:
        if _state["base"] is not None:
            shutil.rmtree(_state["base"], ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
