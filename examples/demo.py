"""A tour of ensemble in one run: a job service built from processes, then a supervised application.

    python examples/demo.py

A registered ``"jobs"`` process hands out work to workers it spawns and
links to; it traps exits, so a crashing worker becomes a message and the
job is retried.  A slow job runs on the ``"blocking"`` dispatcher (its own OS
thread) and calls the real, unpatched ``time.sleep`` without stalling the
rest.  Timers, monitors, selective receive and the shell process appear on
the way.  Everything runs on the embedded runtime: no server to start.
"""

from __future__ import annotations

import time

from gevent import monkey

import ensemble as e
from ensemble import NOMATCH, timer

real_sleep = monkey.get_original("time", "sleep")


def worker(job):
    """Do one job: square a number, crash on "bad", block on "slow"."""
    kind, n = job
    if kind == "bad":
        raise ValueError(f"cannot do job {n}")
    if kind == "slow":
        real_sleep(0.2)  # blocks this carrier thread only
    return n * n


def jobs_service():
    """Run each job in a linked worker; retry a crashed job once, report results."""
    e.trap_exit(True)
    running = {}  # pid -> (job, reply_to, attempt)
    while True:
        msg = e.receive()
        match msg:
            case ("run", job, reply_to):
                where = "blocking" if job[0] == "slow" else "default"
                pid = e.spawn_link(_report, job, dispatcher=where)
                running[pid] = (job, reply_to, 1)
            case ("done", pid, result):
                job, reply_to, _ = running.pop(pid)
                e.send(reply_to, ("result", job, result))
            case ("EXIT", pid, reason) if pid in running and reason != "normal":
                job, reply_to, attempt = running.pop(pid)
                if attempt == 1:
                    retry = ("ok", job[1])  # the retry gets a cleaned-up job
                    new = e.spawn_link(_report, retry)
                    running[new] = (job, reply_to, 2)
                    print(f"  jobs: {job} crashed with {reason!r}, retrying as {retry}")
                else:
                    e.send(reply_to, ("failed", job, reason))
            case ("EXIT", _, "normal"):
                pass
            case "stop":
                return "stopped"


def _report(job):
    """A worker process: compute, then tell the service."""
    e.send("jobs", ("done", e.self(), worker(job)))


def add(total, msg):
    """The counter actor's handler: add a number, or answer ("get", reply_to)."""
    match msg:
        case ("get", reply_to):
            e.send(reply_to, ("total", total))
            return total
        case n:
            return total + n


def main() -> None:
    print("ensemble demo: a job service built from processes")
    print("(the crash report below is the logger's, for the job that crashes on purpose)")
    service = e.spawn(jobs_service, name="jobs")
    me = e.self()  # this script's main greenlet is a shell process, as in Erlang's shell
    watch = e.monitor(service)

    started = time.monotonic()
    for job in [("ok", 2), ("slow", 3), ("bad", 4), ("ok", 5)]:
        e.send("jobs", ("run", job, me))

    # A timer sends a reminder to ourselves; selective receive takes results first.
    timer.send_after(0.05, me, "tick")
    results = {}
    while len(results) < 4:
        msg = e.receive(
            lambda m: m if type(m) is tuple and m[0] in ("result", "failed") else NOMATCH,
            timeout=5,
        )
        assert msg is not e.TIMEOUT, "the service stopped answering"
        _, job, value = msg
        results[job] = value
        print(f"  got {msg[0]:>6} for {job}: {value!r}")
    print(f"  all jobs answered in {time.monotonic() - started:.2f}s "
          "(the slow one slept on its own carrier thread)")
    print(f"  the timer's message waited in the mailbox: {e.receive(timeout=1)!r}")

    # An actor with state: spawn_actor folds each message into it.
    counter = e.spawn_actor(add, 0)
    for n in range(1, 11):
        e.send(counter, n)
    e.send(counter, ("get", me))
    total = e.receive(lambda m: m[1] if m[:1] == ("total",) else NOMATCH, timeout=5)
    print(f"  counter actor's total after 1..10: {total} (state(pid) agrees: {e.state(counter)})")

    # Stop the service and watch it go through the monitor.
    e.send("jobs", "stop")
    down = e.receive(lambda m: m if m[:2] == ("DOWN", watch) else NOMATCH, timeout=5)
    print(f"  monitor saw: {down}")
    e.exit(counter, "kill")
    print(f"  counter ended with {e.exit_reason(counter, timeout=5)!r}")


if __name__ == "__main__":
    main()
    print()
    import supervised  # examples/supervised.py: the same ideas as an OTP application

    supervised.main()
