"""``python -m ensemble``: the interactive shell, driven through a pipe."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import gevent

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run_shell(*lines: str) -> subprocess.CompletedProcess:
    """Run the shell with ``lines`` on stdin (then EOF); answer the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "ensemble"],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=30,
        env=_env(),
        cwd=str(ROOT),
    )


class LiveShell:
    """A running shell whose stdin stays open: write a line, then read stdout until a text shows."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ensemble"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=str(ROOT),
        )
        self.out = b""

    def write(self, line: str) -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def read_until(self, text: str, timeout: float = 20.0) -> str:
        """Read stdout until ``text`` appears (select with a deadline, no sleeping)."""
        want = text.encode()
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while want not in self.out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not seen; stdout so far: {self.out!r}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AssertionError(f"stdout closed before {text!r}: {self.out!r}")
                self.out += chunk
        return self.out.decode()

    def finish(self) -> tuple[str, str, int]:
        """Close stdin (EOF) and answer (stdout, stderr, returncode)."""
        out, err = self.proc.communicate(timeout=30)
        self.out += out
        return self.out.decode(), err.decode(), self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def test_banner_names_python_and_gevent_and_eof_exits_cleanly():
    """The shell prints a one-line banner with the Python and gevent versions and exits 0 at EOF."""
    r = run_shell()
    first = r.stdout.splitlines()[0]
    v = sys.version_info
    assert 0 == r.returncode
    assert first.startswith("ensemble shell (")
    assert f"Python {v.major}.{v.minor}" in first
    assert f"gevent {gevent.__version__}" in first
    assert "flush()" in first


def test_ensemble_names_are_preimported():
    """`from ensemble import *`, `ensemble` and `timer` are available at the prompt."""
    r = run_shell(
        "print('names', spawn is ensemble.spawn, receive is ensemble.receive, "
        "timer is ensemble.timer, callable(flush), TIMEOUT is ensemble.TIMEOUT)"
    )
    assert "names True True True True True" in r.stdout


def test_main_greenlet_is_a_shell_process():
    """At the prompt self() is a live shell process that can receive and flush its messages."""
    r = run_shell(
        "me = self()",
        "print('shell', process_info(me, 'dispatcher'), is_alive(me), me.node)",
        "_ = send(me, 'hello')",
        "print('received', receive(timeout=1))",
        "_ = send(me, ('a', 1)); _ = send(me, 'b')",
        "_ = flush()",
        "print('again', receive(timeout=0))",
    )
    assert "shell default True nonode@nohost" in r.stdout
    assert "received hello" in r.stdout
    assert "Shell got ('a', 1)\nShell got 'b'\n" in r.stdout
    assert "again TIMEOUT" in r.stdout


def test_timer_message_from_a_spawned_actor_reaches_the_shell():
    """An actor arms timer.send_after(0.05, shell, 'late'); a blocking receive at the prompt gets it."""
    r = run_shell(
        "sh = self()",
        "p = spawn(lambda: timer.send_after(0.05, sh, 'late'))",
        "print('got', repr(receive(timeout=2)))",
    )
    assert 0 == r.returncode
    assert "got 'late'" in r.stdout


def test_spawned_actor_runs_while_the_prompt_waits():
    """A process spawned on one line runs (and messages the shell) while the prompt waits for input."""
    sh = LiveShell()
    try:
        sh.read_until(">>> ")
        sh.write("sh = self()")
        sh.write(
            "p = spawn(lambda: (receive(timeout=0.1), send(sh, 'ran'), "
            "print('actor ran', flush=True)))"
        )
        # No more input is written: the actor can only print while the prompt waits.
        sh.read_until("actor ran")
        sh.write("_ = flush()")
        out, err, rc = sh.finish()
    finally:
        sh.kill()
    assert 0 == rc, err
    assert "Shell got 'ran'" in out


def test_exit_signal_while_the_prompt_waits_is_reported_and_the_shell_carries_on():
    """An exit signal landing while the prompt waits prints '** exception exit: boom'; a new shell follows."""
    sh = LiveShell()
    try:
        sh.read_until(">>> ")
        sh.write("old = self()")
        sh.write("_ = timer.exit_after(0.1, old, 'boom')")
        sh.read_until("** exception exit: boom")
        sh.write("print('new shell', self() != old, is_alive(self()), is_alive(old))")
        out, err, rc = sh.finish()
    finally:
        sh.kill()
    assert 0 == rc, err
    assert "new shell True True False" in out


def test_linked_crash_kills_the_shell_process_and_is_reported():
    """A linked process exiting with 'boom' kills the shell process: the report shows, then a new shell."""
    r = run_shell(
        "old = self()",
        "p = spawn_link(lambda: exit('boom'))",
        "_ = receive(timeout=0.5)",
        "print('same shell', self() == old, 'old alive', is_alive(old))",
        "print('still here')",
    )
    assert 0 == r.returncode
    assert 1 == r.stdout.count("** exception exit: boom")
    assert "same shell False old alive False" in r.stdout
    assert "still here" in r.stdout


def test_exit_at_the_prompt_ends_the_shell_process():
    """exit('bye') typed at the prompt prints '** exception exit: bye' and the next line has a new shell."""
    r = run_shell(
        "old = self()",
        "exit('bye')",
        "print('replaced', self() != old, is_alive(old))",
    )
    assert "** exception exit: bye" in r.stdout
    assert "replaced True False" in r.stdout


def test_kill_sent_to_the_shell_itself_is_reported_as_killed():
    """exit(self(), 'kill') at the prompt prints '** exception exit: killed' and the shell carries on."""
    r = run_shell(
        "exit(self(), 'kill')",
        "print('carried on')",
    )
    assert 0 == r.returncode
    assert "** exception exit: killed\n" in r.stdout
    assert "carried on" in r.stdout


def test_an_ordinary_exception_shows_a_traceback_and_keeps_the_shell():
    """1/0 at the prompt prints a traceback on stderr; the shell process survives it."""
    r = run_shell(
        "old = self()",
        "1/0",
        "print('kept', self() == old)",
    )
    assert "ZeroDivisionError" in r.stderr
    assert "kept True" in r.stdout
