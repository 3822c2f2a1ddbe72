"""What the multi-node tests share: the names, the cookie, and a node in a child OS process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import gevent
import gevent.socket

from ensemble.decide import framing, handshake
from ensemble.dist import codec

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_node_child.py")
COOKIE = "test-cookie"
B = "b@127.0.0.1"
CERTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "certs")
#: A node's certificate, key and the CA that signed it (tests/ensemble/dist/certs).
NODE_CERTS = (os.path.join(CERTS, "node.pem"), os.path.join(CERTS, "node.key"), os.path.join(CERTS, "ca.pem"))
#: The transports a multi-node test can run over (the ``wire`` fixture).
WIRES = ("tcp", "tls")


def node_tls(wire: str):
    """``dist.start``'s ``tls=`` for ``wire``: None over TCP, mutual TLS with NODE_CERTS over TLS."""
    from ensemble import dist

    return None if wire == "tcp" else dist.TLS(*NODE_CERTS, mutual=True)


def child_tls(wire: str) -> tuple:
    """:class:`Child`'s ``tls=`` for ``wire`` (the same certificates as :func:`node_tls`)."""
    return () if wire == "tcp" else (*NODE_CERTS, "mutual")


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


def raw_handshake(port: int, me: str, peer: str, cookie: str) -> list:
    """Dial a node's ``port`` from a raw socket as node ``me``, go through the handshake with
    ``cookie`` until the node answers no more (or 10 s), and answer every outcome the dialling
    side reached (a :class:`handshake.Done` when the node accepted ``me``)."""
    sock = gevent.socket.create_connection(("127.0.0.1", port))
    state, first = handshake.initiate(me, 7, peer, cookie, "c" * 32)
    sock.sendall(b"".join(framing.frame(codec.encode(m)) for m in first))
    buf, got = bytearray(), []
    with gevent.Timeout(10, False):
        while not any(isinstance(d, handshake.Done) for d in got):
            data = sock.recv(4096)
            if not data:
                break
            buf += data
            frames, used = framing.split(buf, framing.HANDSHAKE_LIMIT)
            del buf[:used]
            for f in frames:
                state, out, done = handshake.initiator_step(state, codec.decode(f))
                got.append(done)
                sock.sendall(b"".join(framing.frame(codec.encode(m)) for m in out))
                if isinstance(done, handshake.Done):
                    break  # what follows is envelopes (ensemble.dist.envelope), not handshake
    sock.close()
    return got


# -- what the two-node tests wait for ------------------------------------------------------------


def take(pred, timeout=10):
    """The first message ``pred`` accepts (within ``timeout`` seconds, else the test fails)."""
    import ensemble as e

    got = e.receive(lambda m: m if pred(m) else e.NOMATCH, timeout=timeout)
    assert got is not e.TIMEOUT, "nothing came"
    return got


def tagged(tag):
    """A predicate: a tuple whose first element is ``tag``."""
    return lambda m: type(m) is tuple and len(m) > 0 and m[0] == tag


def spawned_on_b(tag, name=None):
    """A worker on node B (see _node_child.worker): its pid."""
    import ensemble as e

    e.send(("echo", B), ("spawn", e.self(), tag) + ((name,) if name else ()))
    return take(lambda m: tagged("spawned")(m) and m[1] == tag)[2]


def closed(sock, timeout: float) -> bool:
    """Whether the peer closes ``sock`` within ``timeout`` (reading whatever it sends meanwhile)."""
    with gevent.Timeout(timeout, False):
        while sock.recv(4096):
            pass
        return True
    return False
