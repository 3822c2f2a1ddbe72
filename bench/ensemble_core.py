"""Core costs of ensemble processes, measured beside raw gevent, OS threads and pykka.

Run from the repository root::

    python bench/ensemble_core.py            # full run, about a minute on 2 cores
    python bench/ensemble_core.py --quick    # every path at N/50, well under 20 s (CI)
    python bench/ensemble_core.py --only 2,5 # just some measurements

Everything runs in this one process except measurement 6, which spawns one
fresh child per side (``--mem-child``) so RSS deltas cannot pollute each
other.  Nothing is monkey-patched.  Times are ``time.perf_counter`` wall time
with the cyclic GC paused, best of 3 alternating runs after a warm-up
(measurements 1-5 and 7).

Measurements, with the issue's targets (PASS/MISS is printed; the exit status
is 0 unless something crashes):

1. spawn + join of 100k processes running a trivial function, against
   ``gevent.spawn`` + ``Greenlet.join``.  Target: ensemble's time <= 1.5x gevent's.
2. ping-pong between two processes (ping sends its pid, pong replies), 100k
   round trips, against two greenlets over two ``gevent.queue.Queue``.
   Target: a round trip costs at most 0.5x gevent's (round trips/s >= 2x).
   2e: Erlang/OTP's rate for the same work, as information, when ``erl`` is
   installed (bench/erlang/ens_bench.erl).
3. one-way: the main greenlet sends 1M ints to a sink process that receives
   them all, then joins it, against a ``gevent.queue.Queue`` and a sink
   greenlet.  Target: a message costs at most 2x gevent's put + get (rate >=
   0.5x).  3e: Erlang's, as information.
4. selective receive of the one wanted message behind 2,000 unwanted ones
   (a matcher that takes only ``("want", _)``; the 2,000 stay queued), in
   receives/s; for context, plain Python scanning a deque of 2,000 with the
   same matcher.  Informative.
5. ping-pong across carriers: ping on ``"default"``, pong on ``"blocking"``
   (two OS threads, two hubs), against two OS threads (the original
   ``_thread``) over two stdlib ``queue.Queue``.  Informative.
6. memory per idle process, 100k processes parked in ``receive()`` against
   100k greenlets parked in ``gevent.queue.Queue().get()`` (one queue each):
   RSS delta / N, in a fresh child per side.  Target: ensemble <= 0.6x gevent.
   6b: 100k processes hibernated (``hibernate(fn)``, no greenlet while they
   wait), RSS delta / N in a fresh child.  Target: at most 2 KiB each.
7. pykka (``ThreadingActor``) beside ensemble: start + stop N actors, N tells
   then one ask, and N ask round trips; ensemble does the same with spawn,
   send and a request/reply (``make_ref`` + selective receive).  Informative
   (pykka runs a thread per actor).  Skipped if pykka is not installed.
8. selective receive scales: a process parked in a receive that wants only
   ``("want", _)``, behind N unwanted messages it has already looked at; each
   new unwanted message wakes it (the sender yields after each send).  Seconds
   per arrival at N = 100,000 against N = 0 (both sides are ensemble).
   Target: at most 1.5x (the save pointer: a wake-up looks at the new message
   only, whatever the depth).
9. ``dispatcher.yield_()`` in a process with nothing else runnable (one turn of
   the hub) against ``gevent.sleep(0)`` in a greenlet, 200k each.  Informative.
10. ``spawn_monitor`` of a trivial function and the receive of its DOWN, one at
   a time in a process (20k), against ``gevent.spawn`` + ``join`` one at a time
   in a greenlet.  Informative.

Output: one line per measurement, then a Markdown summary table (for the
README), then one JSON line (the last line) with every figure and sample.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from collections import deque
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _erlang  # noqa: E402
from _harness import (  # noqa: E402
    Result,
    Target,
    best_of,
    ensure_importable,
    rss_bytes,
    run,
    scaled,
    timed,
)

ensure_importable("ensemble")

import gevent  # noqa: E402
import gevent.monkey  # noqa: E402
import gevent.queue  # noqa: E402

import ensemble as e  # noqa: E402

BENCH = "ensemble_core"

# Full-mode sizes; --quick divides each by 50 (DEPTH stays: it defines measurement 4).
N_SPAWN = 100_000
N_PINGPONG = 100_000
N_ONE_WAY = 1_000_000
N_SELECTIVE = 3_000
DEPTH = 2_000
N_CROSS = 50_000
N_MEMORY = 100_000
N_ACTORS = 1_000
N_TELLS = 100_000
N_ASKS = 10_000
N_DEEP = 100_000  # measurement 8's depth, the same in quick mode
N_ARRIVALS = 20_000

REPS = 3

# OS threads and locks for the thread peer: the originals, even if something
# had monkey-patched gevent into _thread (this bench never does).
_start_thread = gevent.monkey.get_original("_thread", "start_new_thread")
_allocate_lock = gevent.monkey.get_original("_thread", "allocate_lock")


def _noop() -> None:
    return None


# --------------------------------------------------------------------------
# 1. spawn + join
# --------------------------------------------------------------------------


def ens_spawn_join(n: int) -> None:
    spawn, join = e.spawn, e.join
    pids = [spawn(_noop) for _ in range(n)]
    for p in pids:
        join(p)


def gevent_spawn_join(n: int) -> None:
    spawn = gevent.spawn
    glets = [spawn(_noop) for _ in range(n)]
    for g in glets:
        g.join()


def bench_spawn_join(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_SPAWN, quick)
    _warm_up(ens_spawn_join, gevent_spawn_join, n)
    best, samples = best_of(
        reps, [("ensemble", lambda: ens_spawn_join(n)), ("gevent", lambda: gevent_spawn_join(n))]
    )
    return [
        Result(
            "spawn_join", "1", "spawn + join", n, "s", best["ensemble"], "gevent", best["gevent"],
            Target("ratio<=", 1.5, "ensemble time within 1.5x of gevent's"),
            note=f"ensemble {_rate(n, best['ensemble'])} spawn+join/s, "
            f"gevent {_rate(n, best['gevent'])} spawn+join/s",
            samples=samples,
        )
    ]


# --------------------------------------------------------------------------
# 2. and 5. ping-pong (same hub, and across carriers)
# --------------------------------------------------------------------------


def _ens_pong() -> None:
    receive, send = e.receive, e.send
    while True:
        ping = receive()
        if ping is None:
            return
        send(ping, "pong")


def _ens_ping(pong: Any, n: int) -> None:
    me, receive, send = e.self(), e.receive, e.send
    for _ in range(n):
        send(pong, me)
        receive()
    send(pong, None)


def ens_ping_pong(n: int, pong_dispatcher: str = "default") -> None:
    pong = e.spawn(_ens_pong, dispatcher=pong_dispatcher)
    ping = e.spawn(_ens_ping, pong, n)
    e.join(ping)
    e.join(pong)


def gevent_ping_pong(n: int) -> None:
    to_pong: gevent.queue.Queue = gevent.queue.Queue()
    to_ping: gevent.queue.Queue = gevent.queue.Queue()

    def pong() -> None:
        get, put = to_pong.get, to_ping.put
        while True:
            if get() is None:
                return
            put("pong")

    def ping() -> None:
        me, put, get = gevent.getcurrent(), to_pong.put, to_ping.get
        for _ in range(n):
            put(me)
            get()
        put(None)

    gp = gevent.spawn(pong)
    gi = gevent.spawn(ping)
    gi.join()
    gp.join()


def threads_ping_pong(n: int) -> None:
    """Ping in this thread, pong in a new OS thread, over two stdlib queue.Queue."""
    import queue

    to_pong: queue.Queue = queue.Queue()
    to_ping: queue.Queue = queue.Queue()
    done = _allocate_lock()
    done.acquire()

    def pong() -> None:
        get, put = to_pong.get, to_ping.put
        try:
            while get() is not None:
                put("pong")
        finally:
            done.release()

    _start_thread(pong, ())
    put, get = to_pong.put, to_ping.get
    for _ in range(n):
        put(1)
        get()
    put(None)
    done.acquire()


def bench_ping_pong(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_PINGPONG, quick)
    _warm_up(ens_ping_pong, gevent_ping_pong, n)
    best, samples = best_of(
        reps, [("ensemble", lambda: ens_ping_pong(n)), ("gevent", lambda: gevent_ping_pong(n))]
    )
    results = [
        Result(
            "ping_pong", "2", "ping-pong, one hub", n, "round trips/s",
            n / best["ensemble"], "gevent", n / best["gevent"],
            Target("ratio>=", 2.0, "a round trip costs at most 0.5x a raw gevent Queue round trip"),
            samples=samples,
        )
    ]
    return results + _erlang_beside("ping_pong_erlang", "2e", "ping-pong", "ping_pong", n,
                                    "round trips/s", n / best["ensemble"])


def bench_cross_carrier(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_CROSS, quick)
    if gevent.monkey.is_module_patched("threading"):
        print("warning: threading is monkey-patched; queue.Queue would use gevent locks", file=sys.stderr)

    def ens(m: int) -> None:
        ens_ping_pong(m, pong_dispatcher="blocking")

    _warm_up(ens, threads_ping_pong, n)  # the first spawn starts the 16 "blocking" threads
    best, samples = best_of(
        reps, [("ensemble", lambda: ens(n)), ("threads", lambda: threads_ping_pong(n))]
    )
    return [
        Result(
            "cross_carrier", "5", "ping-pong across carriers (2 OS threads)", n, "round trips/s",
            n / best["ensemble"], "threads", n / best["threads"],
            note="peer: two OS threads (original _thread) over two stdlib queue.Queue",
            samples=samples,
        )
    ]


# --------------------------------------------------------------------------
# 3. one-way send -> receive
# --------------------------------------------------------------------------


def _ens_sink(n: int) -> int:
    receive = e.receive
    total = 0
    for _ in range(n):
        total += receive()
    return total


def ens_one_way(n: int) -> None:
    sink = e.spawn(_ens_sink, n)
    send = e.send
    for i in range(n):
        send(sink, i)
    total = e.join(sink)
    assert total == n * (n - 1) // 2, total


def gevent_one_way(n: int) -> None:
    q: gevent.queue.Queue = gevent.queue.Queue()

    def sink() -> int:
        get = q.get
        total = 0
        for _ in range(n):
            total += get()
        return total

    g = gevent.spawn(sink)
    put = q.put
    for i in range(n):
        put(i)
    g.join()
    assert g.value == n * (n - 1) // 2, g.value


def bench_one_way(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_ONE_WAY, quick)
    _warm_up(ens_one_way, gevent_one_way, n)
    best, samples = best_of(
        reps, [("ensemble", lambda: ens_one_way(n)), ("gevent", lambda: gevent_one_way(n))]
    )
    results = [
        Result(
            "one_way", "3", "one-way send -> receive", n, "msgs/s",
            n / best["ensemble"], "gevent", n / best["gevent"],
            Target("ratio>=", 0.5, "a message costs at most 2x a raw gevent Queue put + get"),
            note="peer: main greenlet puts into a gevent.queue.Queue, a sink greenlet gets",
            samples=samples,
        )
    ]
    return results + _erlang_beside("one_way_erlang", "3e", "one-way send -> receive", "one_way", n,
                                    "msgs/s", n / best["ensemble"])


def _erlang_beside(key: str, number: str, title: str, what: str, n: int, unit: str,
                   ens_rate: float) -> list[Result]:
    """Erlang/OTP's rate for the same work beside ensemble's, as information, when ``erl`` is
    installed (bench/erlang/ens_bench.erl, timed inside Erlang); nothing when it is not."""
    secs = _erlang.seconds(what, n)
    if secs is None:
        return []
    return [Result(key, number, f"{title}: Erlang/OTP beside ensemble", n, unit, ens_rate, "erlang",
                   n / secs, note="information only: the same work in Erlang (erl, best of 3)")]


# --------------------------------------------------------------------------
# 4. selective receive behind 2,000 unwanted messages
# --------------------------------------------------------------------------


def _want(m: Any) -> Any:
    return m[1] if m[0] == "want" else e.NOMATCH


def _ens_selective(n: int, depth: int) -> float:
    me, send, receive = e.self(), e.send, e.receive
    for i in range(depth):
        send(me, ("other", i))
    t0 = time.perf_counter()
    for i in range(n):
        send(me, ("want", i))
        receive(_want)
    dt = time.perf_counter() - t0
    left = e.process_info(me, "message_queue_len")
    assert left == depth, left
    return dt


def ens_selective(n: int, depth: int = DEPTH) -> float:
    """Seconds for ``n`` receives, timed inside the process (the fill is not timed)."""
    return e.join(e.spawn(_ens_selective, n, depth))


def raw_selective(n: int, depth: int = DEPTH) -> float:
    """The same scan in plain Python: a deque, the same matcher, delete the match."""
    nomatch = e.NOMATCH
    box = deque(("other", i) for i in range(depth))
    t0 = time.perf_counter()
    for i in range(n):
        box.append(("want", i))
        for j, m in enumerate(box):
            if _want(m) is not nomatch:
                del box[j]
                break
    dt = time.perf_counter() - t0
    assert len(box) == depth
    return dt


def bench_selective(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_SELECTIVE, quick)
    _warm_up(ens_selective, raw_selective, n)
    best, samples = best_of(
        reps, [("ensemble", lambda: ens_selective(n)), ("raw deque", lambda: raw_selective(n))]
    )
    return [
        Result(
            "selective", "4", f"selective receive behind {DEPTH:,} others", n, "receives/s",
            n / best["ensemble"], "raw deque", n / best["raw deque"],
            note=f"each receive calls the matcher {DEPTH + 1:,} times; "
            "peer: enumerate a deque with the same matcher, no runtime",
            samples=samples,
        )
    ]


# --------------------------------------------------------------------------
# 8. selective receive scales: a new unwanted arrival costs the same behind 0 or 100k saved
# --------------------------------------------------------------------------


def _ens_parked_receiver(parent: Any) -> None:
    e.send(parent, "ready")
    e.receive(_want)  # takes only ("want", _): everything else stays, behind the save pointer
    e.send(parent, "done")


def ens_arrivals(arrivals: int, depth: int) -> float:
    """Seconds per unwanted arrival at a receive parked behind ``depth`` unwanted messages.

    The sender yields after each send, so each arrival wakes the receiver, which
    looks at the new message only and parks again.  The fill is not timed.
    """
    me, send, sleep = e.self(), e.send, gevent.sleep
    r = e.spawn(_ens_parked_receiver, me)
    assert e.receive(timeout=10) == "ready"
    for i in range(depth):
        send(r, ("other", i))
    sleep(0)  # the receiver's one O(depth) scan, then it parks with its save pointer at depth
    sleep(0)
    t0 = time.perf_counter()
    for i in range(arrivals):
        send(r, ("other", i))
        sleep(0)
    dt = time.perf_counter() - t0
    assert e.process_info(r, "message_queue_len") == depth + arrivals
    send(r, ("want", 0))
    assert e.receive(timeout=10) == "done"
    return dt / arrivals


def bench_selective_scaling(quick: bool, reps: int) -> list[Result]:
    deep = N_DEEP  # kept in quick mode: a cost growing with depth only shows when deep
    arrivals = scaled(N_ARRIVALS, quick, divisor=10)
    ens_arrivals(100, 0)
    best, samples = best_of(
        reps,
        [(f"N={deep:,}", lambda: ens_arrivals(arrivals, deep)), ("N=0", lambda: ens_arrivals(arrivals, 0))],
    )
    return [
        Result(
            "selective_scaling", "8", f"a parked receive, per unwanted arrival, {deep:,} saved vs none",
            arrivals, "s", best[f"N={deep:,}"], "N=0", best["N=0"],
            Target("ratio<=", 1.5, "at N = 100,000 at most 1.5x the cost at N = 0"),
            note="each arrival wakes the receiver (the sender yields after each send); "
            "figures are seconds per arrival",
            samples=samples,
        )
    ]


# --------------------------------------------------------------------------
# 6. memory per idle process (each side in a fresh child process)
# --------------------------------------------------------------------------


def _ens_idle() -> Any:
    return e.receive()


def _gevent_idle(q: gevent.queue.Queue) -> Any:
    return q.get()


def _park_processes(n: int, body: Callable[[], Any], status: str) -> Callable[[], None]:
    """Spawn ``n`` processes running ``body`` and wait until each is in ``status``; answers the
    clean-up, which checks that status and kills them all."""
    pids = [e.spawn(body) for _ in range(n)]
    e.join(e.spawn(_noop))  # processes start in spawn order: all before it have parked

    def clean() -> None:
        there = sum(e.process_info(p, "status") == status for p in pids)
        assert there == n, f"only {there} of {n} processes {status}"
        for p in pids:
            e.exit(p, "kill")
        for p in pids:
            assert e.exit_reason(p) == "killed"

    return clean


def _park_ensemble(n: int) -> Callable[[], None]:
    return _park_processes(n, _ens_idle, "waiting")


def _park_gevent(n: int) -> Callable[[], None]:
    queues = [gevent.queue.Queue() for _ in range(n)]
    glets = [gevent.spawn(_gevent_idle, q) for q in queues]
    gevent.spawn(_noop).join()  # greenlets start in spawn order: all before it have parked

    def clean() -> None:
        assert not any(g.ready() for g in glets)
        for q in queues:
            q.put(None)
        gevent.joinall(glets)
        assert all(g.successful() for g in glets)

    return clean


def _woken(msg: Any) -> Any:
    return msg


def _ens_hibernating() -> Any:
    e.hibernate(_woken)


def _park_hibernating(n: int) -> Callable[[], None]:
    return _park_processes(n, _ens_hibernating, "hibernating")


def mem_child(which: str, n: int) -> None:
    """In a fresh interpreter: RSS growth per parked process; prints one JSON line."""
    park = {"ensemble": _park_ensemble, "gevent": _park_gevent, "hibernating": _park_hibernating}[which]
    park(min(n, 1_000))()  # warm-up: code paths, free lists, the hub
    gc.collect()
    before = rss_bytes()
    clean = park(n)
    gc.collect()
    after = rss_bytes()
    clean()
    print(json.dumps({"which": which, "n": n, "rss_before": before, "rss_after": after,
                      "bytes_per_process": (after - before) / n}))


def _run_mem_child(which: str, n: int) -> float:
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--mem-child", which, str(n)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["bytes_per_process"]


def bench_memory(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_MEMORY, quick)
    peer = _run_mem_child("gevent", n)
    ens = _run_mem_child("ensemble", n)
    note = "RSS delta / N, each side in a fresh child"
    if quick:
        note += " (quick mode: N too small for a stable figure)"
    hibernating = _run_mem_child("hibernating", n)
    return [
        Result(
            "memory", "6", "memory per idle process", n, "B/proc", ens, "gevent", peer,
            Target("ratio<=", 0.6, "a parked process at most 0.6x a parked greenlet with its queue"),
            note=note,
        ),
        Result(
            "memory_hibernating", "6b", "memory per hibernating process", n, "B/proc", hibernating,
            target=Target("value<=", 2048, "a hibernated process stays at most 2 KiB"),
            note=note.replace("each side in", "in") + "; Erlang's hibernated process: about 2.7 KiB",
        ),
    ]


# --------------------------------------------------------------------------
# 7. pykka beside ensemble
# --------------------------------------------------------------------------

GET = "get"
STOP = "stop"


def _ens_server() -> int:
    """Counts int messages; answers ``(from, ref, msg)`` with ``(ref, reply)``; ends on STOP."""
    receive, send = e.receive, e.send
    count = 0
    while True:
        m = receive()
        if type(m) is tuple:
            frm, ref, msg = m
            if msg == GET:
                send(frm, (ref, count))
            else:
                count += 1
                send(frm, (ref, msg))
        elif m == STOP:
            return count
        else:
            count += 1


def ens_call(p: Any, msg: Any) -> Any:
    """Request/reply: a fresh ref, then a selective receive of the reply carrying it."""
    ref = e.make_ref()
    e.send(p, (e.self(), ref, msg))
    return e.receive(lambda m: m[1] if type(m) is tuple and m[0] == ref else e.NOMATCH)


def ens_start_stop(n: int) -> None:
    spawn, send, join = e.spawn, e.send, e.join
    pids = [spawn(_ens_server) for _ in range(n)]
    for p in pids:
        send(p, STOP)
    for p in pids:
        join(p)


def ens_tells_then_ask(n: int) -> None:
    p = e.spawn(_ens_server)
    send = e.send
    for i in range(n):
        send(p, i)
    got = ens_call(p, GET)
    assert got == n, got
    send(p, STOP)
    e.join(p)


def ens_asks(n: int) -> None:
    p = e.spawn(_ens_server)
    call = ens_call
    for i in range(n):
        call(p, i)
    e.send(p, STOP)
    assert e.join(p) == n


def _pykka_runs(pykka: Any) -> tuple[Callable[[int], None], ...]:
    class Counter(pykka.ThreadingActor):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def on_receive(self, message: Any) -> Any:
            if message == GET:
                return self.count
            self.count += 1
            return message

    def start_stop(n: int) -> None:
        refs = [Counter.start() for _ in range(n)]
        for f in [r.stop(block=False) for r in refs]:
            f.get()

    def tells_then_ask(n: int) -> None:
        ref = Counter.start()
        tell = ref.tell
        for i in range(n):
            tell(i)
        got = ref.ask(GET)
        assert got == n, got
        ref.stop()

    def asks(n: int) -> None:
        ref = Counter.start()
        ask = ref.ask
        for i in range(n):
            ask(i)
        ref.stop()

    return start_stop, tells_then_ask, asks


def bench_pykka(quick: bool, reps: int) -> list[Result]:
    try:
        import pykka
    except ImportError:
        print("[7] pykka is not installed: skipped (pip install pykka)")
        return []
    p_start_stop, p_tells, p_asks = _pykka_runs(pykka)
    cases = [
        ("pykka_start_stop", "7a", "actor start + stop", scaled(N_ACTORS, quick), "actors/s",
         ens_start_stop, p_start_stop),
        ("pykka_tells", "7b", "N tells, then one ask", scaled(N_TELLS, quick), "msgs/s",
         ens_tells_then_ask, p_tells),
        ("pykka_asks", "7c", "ask round trip", scaled(N_ASKS, quick), "asks/s",
         ens_asks, p_asks),
    ]
    results = []
    for key, number, title, n, unit, ens_fn, pykka_fn in cases:
        _warm_up(ens_fn, pykka_fn, n)
        best, samples = best_of(
            reps, [("ensemble", lambda f=ens_fn, n=n: f(n)), ("pykka", lambda f=pykka_fn, n=n: f(n))]
        )
        r = Result(key, number, title, n, unit, n / best["ensemble"], "pykka", n / best["pykka"],
                   samples=samples)
        print(r.line(), flush=True)
        results.append(r)
    return results


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------


def _warm_up(ens: Callable[[int], Any], peer: Callable[[int], Any], n: int) -> None:
    m = max(1, n // 10)
    timed(ens, m)
    timed(peer, m)


def _rate(n: int, seconds: float) -> str:
    v = n / seconds
    return f"{v / 1e3:.0f}k" if v >= 1e4 else f"{v:,.0f}"


# --------------------------------------------------------------------------
# 9. yield_ ; 10. spawn_monitor + its DOWN, one after another
# --------------------------------------------------------------------------

N_YIELDS = 200_000
N_SPAWN_MONITOR = 20_000


def _in_process(fn: Callable[[int], None], n: int) -> None:
    e.join(e.spawn(fn, n))


def _ens_yields(n: int) -> None:
    y = e.dispatcher.yield_
    for _ in range(n):
        y()


def _gevent_sleeps(n: int) -> None:
    sleep = gevent.sleep
    for _ in range(n):
        sleep(0)


def bench_yield(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_YIELDS, quick)
    ens = lambda: _in_process(_ens_yields, n)  # noqa: E731
    raw = lambda: gevent.spawn(_gevent_sleeps, n).join()  # noqa: E731
    ens()
    raw()
    best, samples = best_of(reps, [("ensemble", ens), ("gevent", raw)])
    return [
        Result(
            "yield", "9", "dispatcher.yield_() in a process vs gevent.sleep(0)", n, "yields/s",
            n / best["ensemble"], "gevent", n / best["gevent"],
            note="nothing else runnable: one turn of the hub each", samples=samples,
        )
    ]


def _ens_spawn_monitor_down(n: int) -> None:
    spawn_monitor, receive, nomatch = e.spawn_monitor, e.receive, e.NOMATCH
    for _ in range(n):
        _pid, ref = spawn_monitor(_noop)
        receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[1] is ref else nomatch)


def _gevent_spawn_join_each(n: int) -> None:
    spawn = gevent.spawn
    for _ in range(n):
        spawn(_noop).join()


def bench_spawn_monitor(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_SPAWN_MONITOR, quick)
    ens = lambda: _in_process(_ens_spawn_monitor_down, n)  # noqa: E731
    raw = lambda: gevent.spawn(_gevent_spawn_join_each, n).join()  # noqa: E731
    _in_process(_ens_spawn_monitor_down, max(1, n // 10))
    _gevent_spawn_join_each(max(1, n // 10))
    best, samples = best_of(reps, [("ensemble", ens), ("gevent", raw)])
    return [
        Result(
            "spawn_monitor", "10", "spawn_monitor + its DOWN, one at a time, in a process", n, "s",
            best["ensemble"], "gevent", best["gevent"],
            note="peer: gevent.spawn + join, one at a time, in a greenlet", samples=samples,
        )
    ]


MEASUREMENTS: dict[str, Callable[[bool, int], list[Result]]] = {
    "1": bench_spawn_join,
    "2": bench_ping_pong,
    "3": bench_one_way,
    "4": bench_selective,
    "5": bench_cross_carrier,
    "6": bench_memory,
    "7": bench_pykka,
    "8": bench_selective_scaling,
    "9": bench_yield,
    "10": bench_spawn_monitor,
}


def _add_mem_child(ap: Any) -> None:
    import argparse

    ap.add_argument("--mem-child", nargs=2, metavar=("WHICH", "N"), help=argparse.SUPPRESS)


def _mem_child_mode(args: Any) -> int | None:
    if args.mem_child:
        mem_child(args.mem_child[0], int(args.mem_child[1]))
        return 0
    return None


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, dists=("gevent", "greenlet", "pykka"), reps=REPS,
               add_arguments=_add_mem_child, before=_mem_child_mode, prints_own_lines=("7",))

if __name__ == "__main__":
    sys.exit(main())
