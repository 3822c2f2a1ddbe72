"""The examples run: the Quick start's demo prints its story, the supervised tree restarts its worker, the dashboard's run delivers every event once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(ROOT),
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


def test_demo_runs_the_whole_stack_survives_the_crash_and_loses_no_order():
    """examples/demo.py, as the Quick start runs it: both web UIs answer 200 on loopback while it runs,
    the worker that crashes on purpose is replaced and its batch re-pushed, every accepted order's
    workflow completes (progress a line per 100), and it exits by itself; ``--serve`` stays up until SIGINT."""
    out = run_example("demo.py", "--seconds", "2")  # the Quick start runs 5 s; 2 s hold 400 orders, the crash at the 42nd
    lines = out.splitlines()
    assert lines[0].startswith("fusee UI:          http://127.0.0.1:")
    assert lines[1].startswith("ensemble observer: http://127.0.0.1:")
    assert "both answer: fusee 200, observer 200" in out
    assert 1 == out.count("a worker crashed (worker crashed on purpose on order-00042) holding ")
    workers = next(line for line in lines if line.startswith("pool workers now: "))
    ids = [int(w) for w in workers.split("[")[1].split("]")[0].split(", ")]
    assert 4 == len(set(ids)) and 5 in ids  # one of workers 1-4 crashed and worker 5 took its slot
    last = lines[-1]
    assert last.endswith("orders accepted, every one's workflow completed "
                         f"({last.split()[0]} completed runs in the journal), the crash on order-00042 survived")
    accepted = int(last.split()[0])
    assert accepted > 0 and accepted % 10 == 0
    assert [line for line in lines if line.endswith("workflows done")] == [
        f"  {n} workflows done" for n in range(100, accepted + 1, 100)]

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with subprocess.Popen([sys.executable, str(ROOT / "examples" / "demo.py"), "--seconds", "1", "--serve"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(ROOT)) as p:
        try:
            assert "serving; Ctrl-C to stop\n" in iter(p.stdout.readline, "")  # blocks until the line comes
            assert p.poll() is None
            p.send_signal(signal.SIGINT)
            assert 0 == p.wait(timeout=30)
        finally:
            p.kill()


def test_supervised_example_restarts_the_crashing_worker_twice():
    """examples/supervised.py shows two restarts of the payments worker and a clean stop."""
    out = run_example("supervised.py")
    assert 2 == out.count("child_terminated: child 'payments'")
    assert 2 == out.count("was replaced by")
    assert "after stop: []" in out


def test_dashboard_runs_the_500k_preset_without_a_browser():
    """examples/dashboard.py --run: the preset's 500,000 events, ticks 5 ms apart, all delivered once, with back-pressure."""
    out = run_example("dashboard.py", "--run", "500000", "--tick", "0.005")
    assert "run of 500,000 events: pushed 500,000, delivered 500,000" in out
    assert "every event delivered exactly once" in out
    assert "back-pressure: 0 refused" not in out


def test_parallel_benchmark_gets_one_result_on_every_side_including_carrier_nodes():
    """examples/parallel_benchmark.py, tiny: sequential, thread pools and the pool on "cpu" (a
    dispatcher of OS processes) agree on every battery's checksum (the speed-up is the
    example's to show, not a test's)."""
    out = run_example("parallel_benchmark.py", "--sizes", "3000,5000", "--rounds", "3", "--reps", "1")
    assert out.count("identical on every side") == 2
    assert 'pool on "cpu"' in out


def test_fusee_schedule_example_fires_cron_and_interval_runs_and_pauses():
    """examples/fusee_schedule.py: a cron schedule in a time zone and an hourly one over half a virtual
    day: the hourly one fires except while paused (and once by hand), the cron one at 09:30 Paris."""
    out = run_example("fusee_schedule.py")
    assert "fired standup@2024-01-01T08:30:00Z -> standup report built by standup@2024-01-01T08:30:00Z" in out
    hours = [f"metrics@2024-01-01T{h:02d}:00:00Z" for h in (1, 2, 3, 4, 5, 6, 10, 11, 12)]
    assert [line.split()[1] for line in out.splitlines() if line.startswith("fired metrics")] == hours
    assert "schedule metrics: active, fired 9, next Mon 13:00 UTC" in out
    assert "after delete: ['metrics']" in out


def test_fusee_stream_example_streams_every_token_once_across_a_restart():
    """examples/fusee_stream.py: a step streams an answer token by token; the engine stops mid-answer, and
    after the reopen the step goes on after its recorded tokens and the reader at its offset: the printed
    text is the answer exactly once, and reading again from offset 0 gives the same tokens."""
    out = run_example("fusee_stream.py")
    head, rest = out.split("\n-- engine stopped after ", 1)
    n, rest = rest.split(" tokens; reopening --\n", 1)
    tail = rest.split("\n-- stream closed after ", 1)[0]
    answer = "Durable execution means every step's result is written to a journal before anyone sees it, so a crash loses nothing that was acknowledged and the run picks up where it stopped."
    assert head + tail == answer and 0 < int(n) < 31
    assert "-- stream closed after 31 tokens --" in out
    assert "again from offset 0: True 31 tokens" in out


def test_fusee_objects_example_takes_turns_answers_a_call_id_once_and_checks_versions():
    """examples/fusee_objects.py: ten concurrent deposits to one account all land, a workflow pays through
    ``ctx.object``, a withdrawal re-sent with its call ID pays out once, a failed call commits nothing, a
    stale outside edit is refused, and the state survives a reopen."""
    out = run_example("fusee_objects.py")
    assert "after 10 concurrent deposits of 10: 100" in out
    assert "payday workflow result: 1100" in out
    assert "withdraw 300 as atm-7 twice: 800, 800; paid out 1 time(s)" in out
    assert "withdraw 10000 refused: insufficient funds: 800 < 10000 - balance still 800" in out
    assert "stale edit refused: expected version 12, the state is at 13" in out
    assert "withdraw while frozen: the account is frozen" in out
    assert "after reopen: StateView(values={'balance': 800, 'frozen': True}, version=13)" in out
    assert "unfrozen at version 14 - withdraw 50 leaves 750" in out
