"""Distribution: messages between two nodes (two OS processes on this machine), beside raw sockets.

Run from the repository root::

    python bench/distribution.py            # full run
    python bench/distribution.py --quick    # every N divided by 50 (CI smoke run)

This process is node ``a@127.0.0.1``; a child process is node ``b@127.0.0.1`` (both register
with an epmd this benchmark starts on a free port).  The peer is the same work over raw gevent
sockets between this process and a child: the same framing (a 4-byte big-endian length, then
the payload), the payload msgpack-encoded, writes batched the same way.  Both sides alternate,
best of 3 (see bench/_harness.py).

Both sides have the same placement: on a machine with two CPUs or more, this process keeps to
one CPU and both children to another.  Left to the kernel, the placement of the two nodes
varied from one run to the next and with it the round trip (two nodes on one core made 11-12k
round trips/s, on two cores 17k, whichever side was measured), so a ratio measured one way
compared the two sides under different placements.

Measurements, with issue 14's targets:

1. remote ping-pong: a process sends ``("ping", self())`` to ``("echo", b)``, which answers
   ``"pong"`` to the pid; N round trips.  Raw: a greenlet writes a framed msgpack request and
   reads the framed answer of a child's echo loop.  Target: a round trip costs at most 1.5x the
   raw one (rate >= 1/1.5).
2. one-way throughput: a process sends N integers to ``("sink", b)`` and then one ``"done"``,
   which the sink answers with the count.  Raw: N framed msgpack integers written in batches
   of 1,000 frames, then a "done" frame answered with the count.  Target: at least 0.7x the raw
   rate.

1e, 2e. The same two measurements between two Erlang nodes (``erl -name``, one scheduler each,
   the same CPUs as the nodes above), beside ensemble's figure, when ``erl`` is installed
   (bench/erlang/ens_dist_bench.erl, timed inside Erlang, best of 3): information only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _erlang  # noqa: E402
from _harness import Result, Target, best_of, ensure_importable, run, scaled  # noqa: E402

ensure_importable("ensemble")

import gevent  # noqa: E402
import gevent.socket  # noqa: E402
import msgpack  # noqa: E402
from gevent.os import tp_read  # noqa: E402

import ensemble as e  # noqa: E402
from ensemble import dist  # noqa: E402
from ensemble.decide.framing import frame, split  # noqa: E402
from ensemble.dist import epmd  # noqa: E402

BENCH = "distribution"
N_PINGPONG = 20_000
N_ONE_WAY = 200_000
REPS = 3
COOKIE = "bench-cookie"
A, B = "a@127.0.0.1", "b@127.0.0.1"
BATCH = 1_000
#: The environment variable that tells a child the CPU to keep to.
_CHILD_CPU = "ENSEMBLE_BENCH_CHILD_CPU"


# --------------------------------------------------------------------------
# The child process: node b, or a raw socket server
# --------------------------------------------------------------------------


def _child_node(epmd_port: int) -> None:
    dist.start(B, cookie=COOKIE, epmd_port=epmd_port)

    def echo() -> None:
        while True:
            m = e.receive()
            e.send(m[1], "pong")

    def sink() -> None:
        count = 0
        while True:
            m = e.receive()
            if type(m) is tuple:
                e.send(m[1], count)
                count = 0
            else:
                count += 1

    e.register("echo", e.spawn(echo))
    e.register("sink", e.spawn(sink))
    print("ready", flush=True)
    while tp_read(0, 1):
        pass


def _child_raw() -> None:
    listener = gevent.socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print("ready", listener.getsockname()[1], flush=True)

    def serve(sock: Any) -> None:
        sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
        buf = bytearray()
        count = 0
        while True:
            data = sock.recv(262144)
            if not data:
                return
            buf += data
            frames, used = split(buf, 1 << 20)
            del buf[:used]
            out = []
            for payload in frames:
                m = msgpack.unpackb(payload)
                if m == "ping":
                    out.append(frame(msgpack.packb("pong")))
                elif m == "done":
                    out.append(frame(msgpack.packb(count)))
                    count = 0
                else:
                    count += 1
            if out:
                sock.sendall(b"".join(out))

    def accept_loop() -> None:
        while True:
            gevent.spawn(serve, listener.accept()[0])

    gevent.spawn(accept_loop)
    while tp_read(0, 1):
        pass


def _placement() -> tuple[int, int] | None:
    """Two CPUs this process may run on: this side's and the children's, or None (one CPU)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def _placement_note() -> str:
    placement = _SETUP.get("placement")
    return "unpinned (one CPU)" if placement is None else f"this side on CPU {placement[0]}, the children on CPU {placement[1]}"


def _pin_process(cpu: int) -> None:
    """Keep every thread of this process (and those it makes later) on ``cpu``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:  # a thread that ended meanwhile
            pass


def _start_child(*args: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ)
    placement = _placement()
    if placement is not None:
        env[_CHILD_CPU] = str(placement[1])
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    line = b""
    while not line.endswith(b"\n"):
        chunk = tp_read(proc.stdout.fileno(), 1)
        if not chunk:
            raise RuntimeError(f"the child {args} ended before it was ready")
        line += chunk
    return proc, line.decode().strip()


# --------------------------------------------------------------------------
# The two sides
# --------------------------------------------------------------------------


def ens_ping_pong(n: int) -> float:
    def body() -> float:
        me = e.self()
        send, receive = e.send, e.receive
        dest = ("echo", B)
        t0 = time.perf_counter()
        for _ in range(n):
            send(dest, ("ping", me))
            receive()
        return time.perf_counter() - t0

    return e.join(e.spawn(body))


def ens_one_way(n: int) -> float:
    def body() -> float:
        me = e.self()
        send = e.send
        dest = ("sink", B)
        t0 = time.perf_counter()
        for i in range(n):
            send(dest, i)
        send(dest, ("done", me))
        got = e.receive(timeout=120)
        assert got == n, got
        return time.perf_counter() - t0

    return e.join(e.spawn(body))


class _Raw:
    """A client connection to the raw child server."""

    def __init__(self, port: int) -> None:
        self.sock = gevent.socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def read(self) -> Any:
        while True:
            frames, used = split(self.buf, 1 << 20)
            if frames:
                del self.buf[: 4 + len(frames[0])]
                return msgpack.unpackb(frames[0])
            self.buf += self.sock.recv(262144)

    def ping_pong(self, n: int) -> float:
        ping = msgpack.packb
        t0 = time.perf_counter()
        for _ in range(n):
            self.sock.sendall(frame(ping("ping")))
            self.read()
        return time.perf_counter() - t0

    def one_way(self, n: int) -> float:
        pack = msgpack.packb
        t0 = time.perf_counter()
        batch = []
        for i in range(n):
            batch.append(frame(pack(i)))
            if len(batch) == BATCH:
                self.sock.sendall(b"".join(batch))
                batch = []
        batch.append(frame(pack("done")))
        self.sock.sendall(b"".join(batch))
        got = self.read()
        assert got == n, got
        return time.perf_counter() - t0


_SETUP: dict[str, Any] = {}
_ERL_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "erlang", "ens_dist_bench.erl")
_ERL_A, _ERL_B = "ens_bench_a@127.0.0.1", "ens_bench_b@127.0.0.1"


def _erl_command(beam: str, name: str, cpu: int | None, *rest: str) -> tuple[list[str], Any]:
    """The ``erl`` command line of an Erlang node ``name`` (one scheduler) and what keeps it to ``cpu``."""
    cmd = ["erl", "-noshell", "+S", "1", "-name", name, "-setcookie", COOKIE, "-pa", beam, *rest]
    return cmd, (None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu})))


def _erlang_seconds(what: str, n: int) -> float | None:
    """Seconds two Erlang nodes take for ``n`` of ``what`` (``ping_pong``, ``one_way``), best of 3, or None
    (no ``erl``, or the run failed: the figure is information, never a reason to fail)."""
    beam = _erlang.compiled(_ERL_SOURCE)
    if beam is None:
        return None
    placement = _SETUP.get("placement")
    # The serving node lives only for this call: no Erlang VM runs beside the other measurements.
    cmd, pin = _erl_command(beam, _ERL_B, None if placement is None else placement[1], "-eval", "ens_dist_bench:serve()")
    try:
        server = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, preexec_fn=pin)
    except OSError:
        return None
    try:
        if server.stdout.readline().strip() != b"ready":
            return None
        cmd, pin = _erl_command(beam, _ERL_A, None if placement is None else placement[0],
                                "-eval", f"ens_dist_bench:run({what}, '{_ERL_B}', {int(n)})", "-s", "init", "stop")
        done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, preexec_fn=pin)
        return float(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    finally:
        server.kill()
        server.wait(timeout=30)


def _erlang_beside(key: str, number: str, title: str, what: str, n: int, unit: str, ens_rate: float) -> list[Result]:
    secs = _erlang_seconds(what, n)
    if secs is None:
        return []
    return [Result(key, number, f"{title}: two Erlang/OTP nodes beside ensemble", n, unit, ens_rate, "erlang",
                   n / secs, note="information only: the same work between two Erlang nodes (erl +S 1, best of 3)")]


def _setup() -> tuple[_Raw, Callable[[], None]]:
    if "raw" in _SETUP:
        return _SETUP["raw"], _SETUP["stop"]
    placement = _placement()
    server = epmd.EpmdServer(host="127.0.0.1", port=0)
    server.start()
    dist.start(A, cookie=COOKIE, epmd_port=server.port)
    node_b, _ = _start_child("--child-node", str(server.port))
    raw_proc, line = _start_child("--child-raw")
    raw = _Raw(int(line.split()[1]))
    if placement is not None:  # after the children are made: they keep to the other CPU
        _pin_process(placement[0])
    assert dist.connect(B)

    def stop() -> None:
        for proc in (node_b, raw_proc):
            proc.stdin.close()
            proc.wait(timeout=30)
        dist.stop()
        server.stop()

    _SETUP.update(raw=raw, stop=stop, placement=placement)
    return raw, stop


def bench_ping_pong(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_PINGPONG, quick)
    raw, _ = _setup()
    ens_ping_pong(max(1, n // 10))
    raw.ping_pong(max(1, n // 10))
    best, samples = best_of(reps, [("ensemble", lambda: ens_ping_pong(n)), ("raw", lambda: raw.ping_pong(n))])
    return [Result("remote_ping_pong", "1", "remote ping-pong between two nodes", n, "round trips/s",
                   n / best["ensemble"], "raw sockets", n / best["raw"],
                   Target("ratio>=", 1 / 1.5, "a remote round trip costs at most 1.5x a raw one"),
                   note="raw: framed msgpack over a gevent socket to a child's echo loop; " + _placement_note(),
                   samples=samples)] + _erlang_beside("remote_ping_pong_erlang", "1e", "remote ping-pong",
                                                      "ping_pong", n, "round trips/s", n / best["ensemble"])


def bench_one_way(quick: bool, reps: int) -> list[Result]:
    n = scaled(N_ONE_WAY, quick)
    raw, _ = _setup()
    ens_one_way(max(1, n // 10))
    raw.one_way(max(1, n // 10))
    best, samples = best_of(reps, [("ensemble", lambda: ens_one_way(n)), ("raw", lambda: raw.one_way(n))])
    return [Result("remote_one_way", "2", "one-way messages to another node", n, "msgs/s",
                   n / best["ensemble"], "raw sockets", n / best["raw"],
                   Target("ratio>=", 0.7, "at least 0.7x raw sockets batching writes the same way"),
                   note=f"raw: framed msgpack ints written {BATCH:,} frames per sendall; " + _placement_note(),
                   samples=samples)] + _erlang_beside("remote_one_way_erlang", "2e", "one-way messages",
                                                      "one_way", n, "msgs/s", n / best["ensemble"])


MEASUREMENTS = {"1": bench_ping_pong, "2": bench_one_way}


def _child_mode(args: Any) -> int | None:
    if os.environ.get(_CHILD_CPU):
        _pin_process(int(os.environ[_CHILD_CPU]))
    if args.child_node:
        _child_node(int(args.child_node))
        return 0
    if args.child_raw:
        _child_raw()
        return 0
    return None


def _add_child_args(ap: Any) -> None:
    import argparse

    ap.add_argument("--child-node", help=argparse.SUPPRESS)
    ap.add_argument("--child-raw", action="store_true", help=argparse.SUPPRESS)


def _teardown(args: Any) -> None:
    if "stop" in _SETUP:
        _SETUP.pop("stop")()
    _SETUP.clear()


def main(argv: list[str] | None = None) -> int:
    return run(BENCH, __doc__, MEASUREMENTS, argv, dists=("gevent", "greenlet", "msgpack"), reps=REPS,
               add_arguments=_add_child_args, before=_child_mode, after=_teardown)


if __name__ == "__main__":
    sys.exit(main())
