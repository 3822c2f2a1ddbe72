"""``python -m ensemble``: the interactive shell, driven through a pipe or a pty."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import gevent
import pytest

from ensemble import __main__ as shell_main

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


# --------------------------------------------------------------------------
# Through a real terminal: a pty whose slave is the shell's controlling
# terminal, so Ctrl-C typed on it (\x03) makes the line discipline send SIGINT.
# --------------------------------------------------------------------------

# Runs in the child, in a fresh interpreter: make the pty on fd 0 the
# controlling terminal of the new session (start_new_session=True did setsid),
# then become the shell.
_CTTY_EXEC = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'ensemble'])"
)


class PtyShell:
    """``python -m ensemble`` on a pty: type keys, read the screen (echo included)."""

    def __init__(self) -> None:
        self.master, slave = pty.openpty()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _CTTY_EXEC],
                stdin=slave, stdout=slave, stderr=slave,
                start_new_session=True, env=_env(), cwd=str(ROOT), close_fds=True,
            )
        finally:
            os.close(slave)
        self.raw = b""
        self.eof = False

    @property
    def out(self) -> str:
        return self.raw.decode("utf-8", "replace").replace("\r\n", "\n")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def _read(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([self.master], [], [], left)
        if ready:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the shell closed the terminal (it exited)
                chunk = b""
            if not chunk:
                self.eof = True
            self.raw += chunk
        return True

    def read_until(self, text: str, start: int = 0, timeout: float = 20.0) -> str:
        """Read until ``text`` shows in the output after offset ``start``; the whole output."""
        deadline = time.monotonic() + timeout
        while text not in self.out[start:]:
            if self.eof or not self._read(deadline):
                raise AssertionError(f"{text!r} not seen after offset {start}; screen: {self.out!r}")
        return self.out

    def read_to_exit(self, timeout: float = 20.0) -> int:
        """Read until the shell closes the terminal; its exit status."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            if not self._read(deadline):
                raise AssertionError(f"the shell did not exit; screen: {self.out!r}")
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def tty_shell():
    sh = PtyShell()
    try:
        sh.read_until(">>> ")
        yield sh
    finally:
        sh.close()


def test_exit_with_no_argument_leaves_the_shell_on_a_terminal(tty_shell):
    """exit() typed at the prompt ends `python -m ensemble` with status 0, no traceback."""
    tty_shell.type("exit()\n")
    rc = tty_shell.read_to_exit()
    assert 0 == rc, tty_shell.out
    assert "Traceback" not in tty_shell.out and "Error" not in tty_shell.out


def test_exit_with_a_reason_still_ends_only_the_shell_process_on_a_terminal(tty_shell):
    """exit('bye') keeps its ensemble meaning: the report, then a new shell process at the prompt."""
    tty_shell.type("old = self()\n")
    tty_shell.type("exit('bye')\n")
    tty_shell.read_until("** exception exit: bye")
    tty_shell.type("print('replaced', self() != old, is_alive(old))\n")
    tty_shell.read_until("replaced True False\n")
    tty_shell.type("exit(self(), 'kill')\n")
    tty_shell.read_until("** exception exit: killed")
    tty_shell.type("exit()\n")
    assert 0 == tty_shell.read_to_exit()


def test_ctrl_c_interrupts_a_receive_with_a_plain_keyboard_interrupt(tty_shell):
    """^C during a receive() that waits forever: 'KeyboardInterrupt', the prompt, no hub traceback."""
    tty_shell.type("old = self()\n")
    tty_shell.type("print('wait' + 'ing'); receive()\n")
    at = len(tty_shell.read_until("waiting\n"))  # the echo shows 'wait' + 'ing', not waiting
    tty_shell.type("\x03")
    tty_shell.read_until(">>> ", start=at)
    shown = tty_shell.out[at:]
    assert "KeyboardInterrupt\n>>> " in shown, shown
    assert 1 == shown.count("KeyboardInterrupt"), shown
    assert "Traceback" not in shown and "Hub" not in shown, shown
    # The same shell process, and it still receives.
    tty_shell.type("_ = send(self(), 'ping'); print('after', self() == old, receive(timeout=5))\n")
    tty_shell.read_until("after True ping\n", start=at)
    tty_shell.type("exit()\n")
    assert 0 == tty_shell.read_to_exit()


def test_ctrl_c_raises_keyboard_interrupt_in_the_waiting_line_only(tty_shell):
    """The line waiting in receive() gets the KeyboardInterrupt itself (it can catch it); nothing else prints."""
    tty_shell.type(
        'exec("try:\\n print(\'wait\' + \'ing\'); receive()\\n'
        'except KeyboardInterrupt as e:\\n print(\'caught\', type(e) is KeyboardInterrupt)")\n'
    )
    at = len(tty_shell.read_until("waiting\n"))
    tty_shell.type("\x03")
    tty_shell.read_until("caught True\n", start=at)
    between = tty_shell.out[at:].split("caught True")[0]
    assert "KeyboardInterrupt" not in between and "Traceback" not in between, between


def test_ctrl_c_does_not_touch_processes_spawned_at_the_prompt(tty_shell):
    """A process spawned at the prompt is busy when ^C comes: the shell line is interrupted, it lives on.

    The process runs Python nearly all the time (yielding with gevent.sleep(0)),
    so that is where the signal is almost always handled: without the shell's
    handler, the KeyboardInterrupt would land in it."""
    tty_shell.type(
        "sh = self(); p = spawn(lambda: send(sh, 'up') and "
        "any(__import__('gevent').sleep(0) for _ in iter(int, 1)))\n"
    )
    tty_shell.type("print('wait' + 'ing', receive()); receive()\n")
    at = len(tty_shell.read_until("waiting up\n"))
    tty_shell.type("\x03")
    tty_shell.read_until(">>> ", start=at)
    tty_shell.type("print('busy one alive', is_alive(p)); exit(p, 'kill')\n")
    tty_shell.read_until("busy one alive True\n", start=at)
    assert "Traceback" not in tty_shell.out[at:], tty_shell.out[at:]


# --------------------------------------------------------------------------
# exit() and --version, in process and through a pipe
# --------------------------------------------------------------------------


def test_shell_exit_without_argument_raises_system_exit_only_in_the_shell():
    """ShellExit(): SystemExit in its own greenlet; TypeError from any other greenlet."""
    ex = shell_main.ShellExit()
    with pytest.raises(SystemExit) as info:
        ex()
    assert info.value.code is None
    g = gevent.spawn(ex)
    g.join()
    assert isinstance(g.exception, TypeError)
    assert "exit(reason)" in str(g.exception)
    assert "exit()" in repr(ex)


def test_version_prints_the_version_and_the_native_hot_paths():
    """`python -m ensemble --version` prints the version and a line per native module, and exits 0."""
    import ensemble
    from ensemble import _native

    r = subprocess.run(
        [sys.executable, "-m", "ensemble", "--version"],
        capture_output=True, text=True, encoding="utf-8", timeout=30, env=_env(), cwd=str(ROOT),
        stdin=subprocess.DEVNULL,
    )
    assert 0 == r.returncode, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"ensemble {ensemble.__version__} (Python ")
    assert "ensemble shell" not in r.stdout  # no shell was started
    assert lines[1].startswith("native hot paths")
    for s in _native.status():
        assert any(line.strip().startswith(f"{s.name}: ") for line in lines[2:]), (s, lines)
