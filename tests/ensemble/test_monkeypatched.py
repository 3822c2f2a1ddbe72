"""Under gevent's monkey.patch_all() carriers are still real OS threads.

Each test runs a script in a fresh interpreter that patches first and imports
ensemble second, as a gevent application would; the script prints one result
line that the test reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """\
from gevent import monkey
monkey.patch_all()

import threading
import time

import gevent
import ensemble
from ensemble import TIMEOUT, NOMATCH

original_get_ident = monkey.get_original("_thread", "get_ident")
original_sleep = monkey.get_original("time", "sleep")
assert monkey.is_module_patched("threading") and monkey.is_module_patched("time")
sh = ensemble.self()


def take(tag):
    m = ensemble.receive(lambda m: m if type(m) is tuple and m[0] == tag else NOMATCH, timeout=10)
    assert m is not TIMEOUT, "no %r message" % (tag,)
    return m


from tests.ensemble._actors import pinger, ponger  # after patch_all, as an app would
"""


def run_script(body: str) -> str:
    """Run PRELUDE + body in a new interpreter; answer the line it printed starting with RESULT."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=str(ROOT),
    )
    assert 0 == r.returncode, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert 1 == len(lines), r.stdout + r.stderr
    return lines[0]


def test_blocking_carrier_is_a_real_os_thread_under_monkey_patching():
    """With threading patched, a "blocking" process still runs on an OS thread other than the main one."""
    line = run_script(
        """
        main = original_get_ident()

        def report(kind):
            ensemble.send(sh, ("thread", kind, original_get_ident()))

        ensemble.spawn(report, "default")
        _, _, on_default = take("thread")
        ensemble.spawn(report, "blocking", dispatcher="blocking")
        _, _, on_blocking = take("thread")
        print("RESULT", on_default == main, on_blocking != main, on_blocking != 0)
        """
    )
    assert "RESULT True True True" == line


def test_original_sleep_on_blocking_does_not_delay_default_under_monkey_patching():
    """With time patched, the original time.sleep(0.5) on "blocking" lets 1000 "default" round trips finish first."""
    line = run_script(
        """
        def sleeper():
            ensemble.send(sh, ("sleeping",))
            original_sleep(0.5)
            ensemble.send(sh, ("slept",))

        ensemble.spawn(sleeper, dispatcher="blocking")
        take("sleeping")
        peer = ensemble.spawn(ponger)
        ensemble.spawn(pinger, peer, 1000, sh)
        first = ensemble.receive(timeout=10)
        second = ensemble.receive(timeout=10)
        print("RESULT", first, second)
        """
    )
    assert "RESULT ('done', 1000) ('slept',)" == line


def test_patched_sleep_on_blocking_is_cooperative_and_killable():
    """With time patched, time.sleep(60) in a "blocking" process parks in its hub: kill lands at once, finally runs."""
    line = run_script(
        """
        finally_ran = monkey.get_original("_thread", "allocate_lock")()
        finally_ran.acquire()

        def sleeper():
            try:
                ensemble.send(sh, ("sleeping",))
                time.sleep(60)
            finally:
                finally_ran.release()
                ensemble.send(sh, ("finally",))  # dead since the kill: no effect

        p, ref = ensemble.spawn_monitor(sleeper, dispatcher="blocking")
        take("sleeping")
        started = time.monotonic()
        ensemble.exit(p, "kill")
        down = take("DOWN")
        ran = finally_ran.acquire(True, 10)
        late = ensemble.receive(lambda m: m if m == ("finally",) else NOMATCH, timeout=0.2)
        print("RESULT", down[4], ran, late is TIMEOUT, time.monotonic() - started < 5)
        """
    )
    assert "RESULT killed True True True" == line


def test_ping_pong_across_carriers_under_monkey_patching():
    """With everything patched, 1000 round trips between "blocking" and "default" complete."""
    line = run_script(
        """
        peer = ensemble.spawn(ponger, dispatcher="blocking")
        ensemble.spawn(pinger, peer, 1000, sh)
        print("RESULT", take("done"))
        """
    )
    assert "RESULT ('done', 1000)" == line
