"""``python -m ensemble``: an interactive shell, like Erlang's ``erl``.

The names of :mod:`ensemble` are pre-imported (``from ensemble import *``, plus
``ensemble`` and ``timer``).  The main greenlet is a shell process: ``self()``,
``receive``, ``link`` and ``flush()`` work at the prompt.  The prompt waits for
stdin cooperatively (gevent), so processes spawned at the prompt keep running
while it waits.  When an exit signal kills the shell process (a linked process
crashed, ``exit(self(), "boom")``) or a line calls ``exit(reason)``, the shell
prints ``** exception exit: <reason>`` as Erlang's does and carries on; the next
use makes a new shell process.

Prompts, the banner and exit reports go to stdout; tracebacks go to stderr.
Line editing (the ``readline`` module) is not available: ``input()`` would
block the hub and every process of the default dispatcher with it.
"""

from __future__ import annotations

import code
import os
import sys
from typing import Any

import gevent
from gevent.socket import wait_read

import ensemble
from ensemble import _process as _P
from ensemble._exceptions import Exit, ExitSignal

__all__ = ["Console", "main"]


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


def banner() -> str:
    v = sys.version_info
    return (
        f"ensemble shell (Python {v.major}.{v.minor}.{v.micro}, gevent {gevent.__version__})"
        " \u2014 flush() shows the shell's messages"
    )


def namespace() -> dict:
    """The prompt's globals: ``from ensemble import *`` plus ``ensemble`` and ``timer``."""
    ns: dict = {"__name__": "__console__", "__doc__": None}
    exec("from ensemble import *", ns)
    ns["ensemble"] = ensemble
    ns["timer"] = ensemble.timer
    return ns


def main() -> int:
    console = Console(namespace())
    try:
        sys.stdout.write(banner() + "\n")
    except UnicodeEncodeError:  # a stdout that cannot show the dash
        sys.stdout.write(banner().replace("\u2014", "-") + "\n")
    sys.stdout.flush()
    console.interact(banner="", exitmsg="")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
