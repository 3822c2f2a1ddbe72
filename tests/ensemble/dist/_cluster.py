"""What the multi-node tests share: the names, the cookie, and a node in a child OS process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_node_child.py")
COOKIE = "test-cookie"
B = "b@127.0.0.1"


class Child:
    """A node in a child OS process (tests/ensemble/dist/_node_child.py)."""

    def __init__(self, name: str, cookie: str, epmd_port: int, tls: tuple = (), env: dict | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, CHILD, name, cookie, str(epmd_port), *tls],
            env={**os.environ, **(env or {})},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        line = self._readline()
        assert line.startswith("ready "), line
        self.creation = int(line.split()[1])

    def _readline(self) -> str:
        from gevent.os import tp_read

        out = b""
        while not out.endswith(b"\n"):
            chunk = tp_read(self.proc.stdout.fileno(), 1)
            if not chunk:
                break
            out += chunk
        return out.decode()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
