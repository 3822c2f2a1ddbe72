"""``python -m ensemble``: an interactive shell, like Erlang's ``erl``.

The names of :mod:`ensemble` are pre-imported (``from ensemble import *``, plus
``ensemble`` and ``timer``).  The main greenlet is a shell process: ``self()``,
``receive``, ``link`` and ``flush()`` work at the prompt.  The prompt waits for
stdin cooperatively (gevent), so processes spawned at the prompt keep running
while it waits.  When an exit signal kills the shell process (a linked process
crashed, ``exit(self(), "boom")``) or a line calls ``exit(reason)``, the shell
prints ``** exception exit: <reason>`` as Erlang's does and carries on; the next
use makes a new shell process.

``exit()`` with no argument leaves the shell, as Python's ``exit()`` does (so
do ``quit()`` and end of input, Ctrl-D); ``exit(reason)`` and
``exit(pid, reason)`` keep their ensemble meaning (see :func:`ensemble.exit`).

Ctrl-C interrupts the line being run, wherever the shell process waits (a
``receive()`` for a message that never comes, ``join``...), with a plain
``KeyboardInterrupt``: the shell prints ``KeyboardInterrupt`` and gives the
prompt back; the shell process stays the same.  At the prompt, Ctrl-C drops
the line being typed, as in Python.  Processes spawned at the prompt are not
interrupted.

Prompts, the banner and exit reports go to stdout; tracebacks go to stderr.
Line editing (the ``readline`` module) is not available: ``input()`` would
block the hub and every process of the default dispatcher with it.

``python -m ensemble --version`` prints the version and, per native (C) hot
path, whether it runs native or falls back to pure Python, and why
(:func:`ensemble._native.status`), then exits.
"""

from __future__ import annotations

import argparse
import code
import os
import signal
import sys
from typing import Any

import gevent
import greenlet
from gevent.socket import wait_read

import ensemble
from ensemble import _process as _P
from ensemble._exceptions import Exit, ExitSignal

__all__ = ["Console", "ShellExit", "main", "version_text"]


def _show(reason: Any) -> str:
    return reason if type(reason) is str else repr(reason)


class _StdinLines:
    """Lines of a file descriptor, read only once gevent says it is readable."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None  # no descriptor (a StringIO): read it directly
        self._buf = b""
        self._eof = False

    def readline(self) -> str:
        """The next line without its newline; EOFError at the end of input."""
        if self._fd is None:
            line = self._stream.readline()
            if not line:
                raise EOFError
            return line.rstrip("\n")
        while b"\n" not in self._buf and not self._eof:
            wait_read(self._fd)  # parks the main greenlet: the hub keeps running
            chunk = os.read(self._fd, 65536)
            if chunk:
                self._buf += chunk
            else:
                self._eof = True
        if not self._buf:
            raise EOFError
        line, sep, rest = self._buf.partition(b"\n")
        self._buf = rest
        return line.decode(self._encoding, "replace").rstrip("\r")


class Console(code.InteractiveConsole):
    """An InteractiveConsole whose prompt waits for stdin without blocking the hub."""

    def __init__(self, locals: dict | None = None, stdin: Any = None, stdout: Any = None) -> None:
        super().__init__(locals=locals, filename="<ensemble>")
        self._lines = _StdinLines(sys.stdin if stdin is None else stdin)
        self._out = sys.stdout if stdout is None else stdout

    def _say(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def exit_report(self, reason: Any) -> None:
        """Erlang's shell report for the death of the shell process."""
        self._say(f"** exception exit: {_show(reason)}\n")

    def raw_input(self, prompt: str = "") -> str:
        while True:
            self._say(prompt)
            try:
                return self._lines.readline()
            except ExitSignal as e:  # the shell process was killed while the prompt waited
                self._say("\n")
                self.exit_report(e.reason)

    def runcode(self, code_obj: Any) -> None:
        try:
            exec(code_obj, self.locals)
        except KeyboardInterrupt:  # Ctrl-C: no traceback of the hub's innards
            self.write("KeyboardInterrupt\n")
        except ExitSignal as e:  # an exit signal killed the shell process
            self.exit_report(e.reason)
        except Exit as e:  # exit(reason) at the prompt: the shell process exits
            p = _P.current()
            if p is not None and p.shell:
                _P.settle(p, e.reason, None)
            self.exit_report(e.reason)
        except SystemExit:
            raise
        except BaseException:
            self.showtraceback()


class ShellExit:
    """The shell's ``exit``: ``exit()`` leaves the shell, otherwise :func:`ensemble.exit`.

    ``exit()`` raises ``SystemExit`` (as Python's ``exit()``) when called by the
    shell's own greenlet, i.e. from a line typed at the prompt; called with no
    argument anywhere else (a process spawned at the prompt) it raises
    TypeError: a process ends with ``exit(reason)``.  ``exit(reason)`` and
    ``exit(pid, reason)`` are exactly :func:`ensemble.exit`.
    """

    def __init__(self, shell: Any = None) -> None:
        self._shell = greenlet.getcurrent() if shell is None else shell

    def __call__(self, *args: Any) -> Any:
        if args:
            return ensemble.exit(*args)
        if greenlet.getcurrent() is self._shell:
            raise SystemExit(None)
        raise TypeError(
            "exit() with no argument leaves the shell, and only at the prompt; "
            "a process ends with exit(reason)"
        )

    def __repr__(self) -> str:
        return (
            "Use exit() or Ctrl-D (i.e. EOF) to leave the shell; exit(reason) ends the "
            "shell process, exit(pid, reason) sends an exit signal"
        )


class _Interrupts:
    """SIGINT for the shell: a KeyboardInterrupt in the shell's greenlet only.

    Python raises KeyboardInterrupt in whatever greenlet runs when the signal
    is handled; while the shell waits (``receive()``, the prompt) that is the
    hub, which prints a traceback of its own and then throws the exception
    into the main greenlet.  Instead, a signal handled in another greenlet is
    passed on: the hub throws a plain KeyboardInterrupt into the shell's
    greenlet, where it is waiting.  Processes are never interrupted.
    """

    def __init__(self, shell: Any) -> None:
        self._shell = shell
        self._hub = gevent.get_hub()
        self._installed = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if greenlet.getcurrent() is self._shell:
            raise KeyboardInterrupt
        self._hub.loop.run_callback(self._interrupt_shell)

    def _interrupt_shell(self) -> None:
        # Runs in the hub, as gevent's own handle_system_error does.
        if not self._shell.dead and greenlet.getcurrent() is not self._shell:
            self._shell.throw(KeyboardInterrupt)

    def __enter__(self) -> "_Interrupts":
        try:
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._installed = True
        except ValueError:  # not the main thread: leave SIGINT alone
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            # None: the previous handler was not set from Python; the default then.
            previous = signal.default_int_handler if self._previous is None else self._previous
            signal.signal(signal.SIGINT, previous)
            self._installed = False


def banner() -> str:
    v = sys.version_info
    return (
        f"ensemble shell (Python {v.major}.{v.minor}.{v.micro}, gevent {gevent.__version__})"
        " \u2014 flush() shows the shell's messages"
    )


def version_text() -> str:
    """What ``--version`` prints: the versions, then each native hot path's status."""
    from ensemble import _native

    v = sys.version_info
    lines = [f"ensemble {ensemble.__version__} (Python {v.major}.{v.minor}.{v.micro}, gevent {gevent.__version__})"]
    lines += _native.status_lines()
    return "\n".join(lines) + "\n"


def namespace() -> dict:
    """The prompt's globals: ``from ensemble import *`` plus ``ensemble``, ``timer``
    and the shell's ``exit`` (:class:`ShellExit`)."""
    ns: dict = {"__name__": "__console__", "__doc__": None}
    exec("from ensemble import *", ns)
    ns["ensemble"] = ensemble
    ns["timer"] = ensemble.timer
    ns["exit"] = ShellExit()
    return ns


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:  # a stdout that cannot show the dash
        sys.stdout.write(text.replace("\u2014", "-"))
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    """Run the shell (or, with ``--version``, print the version text); the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m ensemble",
        description="An interactive ensemble shell, like Erlang's erl.",
    )
    parser.add_argument(
        "--version", "-V", action="store_true",
        help="print the version and which native hot paths run native, then exit",
    )
    args = parser.parse_args(argv)
    if args.version:
        _write(version_text())
        return 0
    console = Console(namespace())
    _write(banner() + "\n")
    try:
        with _Interrupts(greenlet.getcurrent()):
            console.interact(banner="", exitmsg="")
    except SystemExit as e:  # exit() or quit() at the prompt
        sys.stdout.flush()
        code_ = e.code
        if code_ is None or isinstance(code_, int):
            return code_ or 0
        sys.stderr.write(f"{code_}\n")
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
