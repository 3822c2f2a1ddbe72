"""The port mapper: register a node's name and port with the epmd of its host, find a peer's.

Nodes find each other as Erlang nodes do.  Each registers its name and distribution port with the
port mapper of its host over epmd's protocol (:mod:`ensemble.decide.epmd_wire`): Erlang's own
``epmd``, or :class:`EpmdServer`, which ensemble starts itself when none answers
(:func:`ensure_epmd`).  A peer asks that port mapper for the port (:func:`port_please`).

Everything here runs on gevent sockets, so a caller in a greenlet (an ensemble process) parks
only itself; every network operation has a deadline (``timeout``, 5 seconds by default), so a
silent peer never hangs a caller.  The port of epmd is ``epmd_port`` when given, else the
environment's ``ERL_EPMD_PORT``, else 4369, as for Erlang.

Errors are :class:`EpmdError` and its subclasses: :class:`EpmdUnreachable` (nothing accepts the
connection), :class:`EpmdTimeout`, :class:`EpmdConnectionLost`, :class:`NameTaken`,
:class:`~ensemble.decide.epmd_wire.EpmdProtocolError` (the peer does not speak epmd) and
:class:`~ensemble.decide.epmd_wire.InvalidName`.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import random
import subprocess
import sys
import time
from typing import Callable

import gevent
from gevent import socket

from ..decide.epmd_wire import (
    HIDDEN_NODE,
    NORMAL_NODE,
    Alive2Req,
    Alive2Resp,
    EpmdError,
    EpmdProtocolError,
    InvalidName,
    NamesReq,
    NamesResp,
    NodeEntry,
    Port2Req,
    Port2Resp,
    alive2_response_size,
    decode_alive2_response,
    decode_names_response,
    decode_port2_response,
    decode_request,
    encode_alive2_response,
    encode_names_response,
    encode_port2_response,
    encode_request,
    request_length,
)

__all__ = [
    "DEFAULT_EPMD_PORT",
    "DEFAULT_TIMEOUT",
    "NORMAL_NODE",
    "HIDDEN_NODE",
    "EpmdError",
    "EpmdProtocolError",
    "InvalidName",
    "EpmdUnreachable",
    "EpmdTimeout",
    "EpmdConnectionLost",
    "NameTaken",
    "NodeEntry",
    "Registration",
    "EpmdServer",
    "default_epmd_port",
    "register",
    "port_please",
    "lookup",
    "names",
    "ensure_epmd",
]

DEFAULT_EPMD_PORT = 4369
DEFAULT_TIMEOUT = 5.0
#: The most a NAMES or PORT2 answer may weigh before the peer is taken for something else.
_MAX_ANSWER = 1 << 20


class EpmdUnreachable(EpmdError):
    """Nothing accepts a connection at epmd's address (no epmd runs there)."""


class EpmdTimeout(EpmdError):
    """epmd did not answer within the timeout."""


class EpmdConnectionLost(EpmdError):
    """The connection to epmd broke, or epmd closed it before answering."""


class NameTaken(EpmdError):
    """epmd refused a registration: the name is already registered there."""


def default_epmd_port() -> int:
    """The port epmd listens on: the environment's ``ERL_EPMD_PORT`` when set, else 4369."""
    raw = os.environ.get("ERL_EPMD_PORT", "").strip()
    if not raw:
        return DEFAULT_EPMD_PORT
    try:
        port = int(raw)
    except ValueError:
        raise EpmdError(f"ERL_EPMD_PORT={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise EpmdError(f"ERL_EPMD_PORT={raw!r} is not a port number")
    return port


# -- the client ------------------------------------------------------------------------------------


class _Exchange:
    """One connection to epmd under one deadline; OS errors become :class:`EpmdError`."""

    def __init__(self, host: str, port: int | None, timeout: float) -> None:
        port = default_epmd_port() if port is None else port
        self.where = f"epmd at {host}:{port}"
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=self._left())
        except (TimeoutError, socket.timeout):
            raise EpmdTimeout(f"{self.where}: no connection within {timeout} s") from None
        except OSError as exc:
            raise EpmdUnreachable(f"{self.where}: cannot connect ({exc.strerror or exc})") from None

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise EpmdTimeout(f"{self.where}: no answer within {self.timeout} s")
        return left

    def _io(self, op: Callable[[], bytes | None]) -> bytes | None:
        try:
            self.sock.settimeout(self._left())
            return op()
        except (TimeoutError, socket.timeout):
            raise EpmdTimeout(f"{self.where}: no answer within {self.timeout} s") from None
        except OSError as exc:
            raise EpmdConnectionLost(f"{self.where}: connection lost ({exc.strerror or exc})") from None

    def send(self, data: bytes) -> None:
        self._io(lambda: self.sock.sendall(data))

    def recv_exact(self, n: int, what: str) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self._io(lambda: self.sock.recv(n - len(buf)))
            if not chunk:
                raise EpmdConnectionLost(f"{self.where} closed the connection {len(buf)} bytes into {what}")
            buf += chunk
        return buf

    def recv_to_eof(self, what: str) -> bytes:
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = self._io(lambda: self.sock.recv(65536))
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
            size += len(chunk)
            if size > _MAX_ANSWER:
                raise EpmdProtocolError(f"{self.where}: {what} over {_MAX_ANSWER} bytes")

    def close(self) -> None:
        self.sock.close()


class Registration:
    """A name registered with epmd, for as long as this stays open: :meth:`close` (or the end of
    a ``with`` block, or the object's collection) closes the connection, which unregisters it."""

    def __init__(self, entry: NodeEntry, creation: int, sock: socket.socket, epmd: str) -> None:
        self.entry = entry
        self.creation = creation
        self._sock: socket.socket | None = sock
        self._epmd = epmd

    @property
    def name(self) -> str:
        """The registered name."""
        return self.entry.name

    @property
    def port(self) -> int:
        """The registered distribution port."""
        return self.entry.port

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._sock is None

    def close(self) -> None:
        """Unregister: close the registering connection (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Registration {self.name!r} port={self.port} creation={self.creation} with {self._epmd}, {state}>"


def register(
    name: str,
    port: int,
    *,
    host: str = "127.0.0.1",
    epmd_port: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    node_type: int = NORMAL_NODE,
    highest_version: int = 6,
    lowest_version: int = 5,
    extra: bytes = b"",
) -> Registration:
    """Register ``name`` with distribution port ``port`` at the epmd on ``host`` (ALIVE2).

    Answers the open :class:`Registration` (with epmd's ``creation`` for this incarnation of the
    name); raises :class:`NameTaken` when epmd already has the name.  epmd accepts registrations
    only from its own host: it closes the connection unanswered (:class:`EpmdConnectionLost`).
    """
    entry = NodeEntry(name, port, node_type, 0, highest_version, lowest_version, extra)
    request = encode_request(Alive2Req(entry))
    ex = _Exchange(host, epmd_port, timeout)
    try:
        ex.send(request)
        try:
            head = ex.recv_exact(1, "the ALIVE2 response")
        except EpmdConnectionLost:
            raise EpmdConnectionLost(
                f"{ex.where} closed the connection without answering ALIVE2_REQ for {name!r}"
                " (epmd refuses registrations from another host)"
            ) from None
        rest = ex.recv_exact(alive2_response_size(head[0]) - 1, "the ALIVE2 response")
        resp = decode_alive2_response(head + rest)
        if resp.result != 0:
            raise NameTaken(f"{ex.where} refused to register {name!r} (result {resp.result}): the name is taken")
        ex.sock.settimeout(None)
    except BaseException:
        ex.close()
        raise
    return Registration(entry, resp.creation, ex.sock, ex.where)


def lookup(
    name: str, host: str = "127.0.0.1", *, epmd_port: int | None = None, timeout: float = DEFAULT_TIMEOUT
) -> NodeEntry | None:
    """The entry of the node registered as ``name`` at the epmd on ``host`` (PORT_PLEASE2), or
    ``None`` when no node is registered under that name."""
    request = encode_request(Port2Req(name))
    ex = _Exchange(host, epmd_port, timeout)
    try:
        ex.send(request)
        resp = decode_port2_response(ex.recv_to_eof("the PORT2 response"))
    finally:
        ex.close()
    return resp.entry


def port_please(
    name: str, host: str = "127.0.0.1", *, epmd_port: int | None = None, timeout: float = DEFAULT_TIMEOUT
) -> int | None:
    """The distribution port of the node registered as ``name`` at the epmd on ``host``, or
    ``None`` when no node is registered under that name."""
    entry = lookup(name, host, epmd_port=epmd_port, timeout=timeout)
    return None if entry is None else entry.port


def names(
    host: str = "127.0.0.1", *, epmd_port: int | None = None, timeout: float = DEFAULT_TIMEOUT
) -> list[tuple[str, int]]:
    """Every ``(name, port)`` registered at the epmd on ``host`` (NAMES), in epmd's order (newest
    first)."""
    ex = _Exchange(host, epmd_port, timeout)
    try:
        ex.send(encode_request(NamesReq()))
        resp = decode_names_response(ex.recv_to_eof("the NAMES response"))
    finally:
        ex.close()
    return list(resp.names)


# -- the server ------------------------------------------------------------------------------------


def _is_local_peer(conn: socket.socket) -> bool:
    """Whether ``conn`` comes from this host: a loopback address or the address it reached (epmd's rule)."""
    try:
        peer = ipaddress.ip_address(conn.getpeername()[0])
        here = ipaddress.ip_address(conn.getsockname()[0])
    except (OSError, ValueError):
        return False
    return peer.is_loopback or peer == here


class EpmdServer:
    """ensemble's own epmd: ALIVE2 (with a creation it draws), PORT_PLEASE2 and NAMES, on
    ``host:port`` (port 0: an ephemeral port, :attr:`port` says which once started).

    A registration lives as long as its connection: it ends when the registering peer closes it,
    sends anything more, or the server stops.  A malformed request closes that connection only.
    The server runs in greenlets of the hub of the thread that calls :meth:`start`; call
    :meth:`stop` from that thread.  As epmd does, it accepts registrations from its host only and
    closes a connection idle for ``idle_timeout`` seconds before its request is complete.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_EPMD_PORT,
        *,
        idle_timeout: float = 60.0,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.idle_timeout = idle_timeout
        self._rng = rng if rng is not None else random.Random()
        self._nodes: dict[str, NodeEntry] = {}
        self._last_creation: dict[str, int] = {}
        self._listener: socket.socket | None = None
        self._acceptor: gevent.Greenlet | None = None
        self._handlers: set[gevent.Greenlet] = set()
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The port the server listens on (the ephemeral one drawn when asked for port 0)."""
        if self._port is None:
            raise EpmdError("the EpmdServer is not started")
        return self._port

    @property
    def running(self) -> bool:
        """Whether the server is listening."""
        return self._listener is not None

    def registered(self) -> list[NodeEntry]:
        """The entries registered now, newest first (the order of NAMES, as in epmd)."""
        return list(reversed(self._nodes.values()))

    def start(self) -> "EpmdServer":
        """Bind and listen, then serve in greenlets; raises :class:`OSError` when the port is taken
        (``errno.EADDRINUSE``), as epmd does."""
        if self._listener is not None:
            raise EpmdError("the EpmdServer is already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            # Lets a restart bind while old connections linger in TIME_WAIT; on Linux and the BSDs
            # it never lets two servers listen on one port.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self._requested_port))
            listener.listen(128)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._acceptor = gevent.spawn(self._accept_loop, listener)
        return self

    def stop(self) -> None:
        """Stop listening and close every connection, which ends every registration (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.kill()
        listener.close()
        gevent.killall(list(self._handlers))
        self._handlers.clear()
        self._nodes.clear()

    def __enter__(self) -> "EpmdServer":
        return self if self.running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"{self.host}:{self._port if self._port is not None else self._requested_port}"
        return f"<EpmdServer {where} {'running' if self.running else 'stopped'}, {len(self._nodes)} names>"

    # -- serving ---------------------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError as exc:
                if self._listener is not listener:
                    return  # stopped
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    gevent.sleep(0.1)  # out of descriptors: let connections close, then go on
                continue
            handler = gevent.spawn(self._serve, conn)
            self._handlers.add(handler)
            handler.link(self._handlers.discard)

    def _serve(self, conn: socket.socket) -> None:
        registered: str | None = None
        try:
            conn.settimeout(self.idle_timeout)
            length = request_length(_recv_exact(conn, 2))
            request = decode_request(_recv_exact(conn, length))
            if isinstance(request, NamesReq):
                pairs = tuple((e.name, e.port) for e in reversed(self._nodes.values()))  # newest first, as epmd
                conn.sendall(encode_names_response(NamesResp(self.port, pairs)))
            elif isinstance(request, Port2Req):
                entry = self._nodes.get(request.name)
                conn.sendall(encode_port2_response(Port2Resp(0, entry) if entry else Port2Resp(1)))
            elif isinstance(request, Alive2Req) and _is_local_peer(conn):
                entry = request.entry
                extended = entry.highest_version >= 6
                if entry.name in self._nodes:
                    conn.sendall(encode_alive2_response(Alive2Resp(1, 99, extended)))  # 99: as epmd
                    return
                creation = self._draw_creation(entry.name, extended)
                self._nodes[entry.name] = entry
                registered = entry.name
                conn.sendall(encode_alive2_response(Alive2Resp(0, creation, extended)))
                conn.settimeout(None)
                conn.recv(1)  # the end of the connection, or anything more, ends the registration
        except (EpmdProtocolError, OSError):
            pass  # this connection only: close it
        finally:
            if registered is not None:
                self._nodes.pop(registered, None)
            conn.close()

    def _draw_creation(self, name: str, extended: bool) -> int:
        """A creation for ``name`` other than its previous one: 32-bit from 4 up (as OTP 23's
        epmd) when ``extended``, else 1..3 (as epmd for older nodes)."""
        previous = self._last_creation.pop(name, None)
        low, high = (4, 0xFFFFFFFF) if extended else (1, 3)
        creation = self._rng.randint(low, high)
        while creation == previous:
            creation = self._rng.randint(low, high)
        self._last_creation[name] = creation
        if len(self._last_creation) > 1000:  # forget the oldest names, as epmd does
            del self._last_creation[next(iter(self._last_creation))]
        return creation


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EpmdProtocolError(f"connection closed {len(buf)} bytes into a {n}-byte read")
        buf += chunk
    return buf


def ensure_epmd(
    host: str = "127.0.0.1", port: int | None = None, *, timeout: float = DEFAULT_TIMEOUT
) -> EpmdServer | None:
    """Make sure an epmd answers on ``host:port`` (default :func:`default_epmd_port`).

    Answers ``None`` when one already answers NAMES there (Erlang's or another ensemble's), else
    the :class:`EpmdServer` it started there (the caller owns it: :meth:`EpmdServer.stop`).  When
    another process wins the race to bind the port, answers ``None`` once that one answers.
    """
    port = default_epmd_port() if port is None else port
    try:
        names(host, epmd_port=port, timeout=timeout)
        return None
    except EpmdUnreachable:
        pass
    server = EpmdServer(host, port)
    try:
        return server.start()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise EpmdError(f"cannot start an epmd on {host}:{port}: {exc.strerror or exc}") from exc
    # Another process bound the port between our probe and our bind: wait for it to listen.
    deadline = time.monotonic() + timeout
    while True:
        try:
            names(host, epmd_port=port, timeout=max(0.01, deadline - time.monotonic()))
            return None
        except EpmdUnreachable:
            if time.monotonic() >= deadline:
                raise EpmdUnreachable(
                    f"{host}:{port} is taken, but nothing there answers as epmd within {timeout} s"
                ) from None
            gevent.sleep(0.02)


def start_daemon(host: str = "127.0.0.1", port: int | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 idle_exit: float = 60.0) -> "subprocess.Popen[bytes] | None":
    """Make sure an epmd answers on ``host:port``, starting ensemble's as a daemon OS process when
    none does, as Erlang starts ``epmd -daemon``: it outlives the node that started it (other
    nodes of the host register with it too) and exits once no node has been registered for
    ``idle_exit`` seconds.  Answers the daemon's process when it started one, None when one
    was answering already (or another process's won the race for the port).
    """
    port = default_epmd_port() if port is None else port
    try:
        names(host, epmd_port=port, timeout=timeout)
        return None
    except EpmdUnreachable:
        pass

    daemon = subprocess.Popen(
        [sys.executable, "-m", "ensemble.dist.epmd", "--host", host, "--port", str(port),
         "--idle-exit", str(idle_exit)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from gevent.os import tp_read

    line = b""
    with gevent.Timeout(timeout, False):
        while not line.endswith(b"\n"):
            chunk = tp_read(daemon.stdout.fileno(), 64)
            if not chunk:
                break
            line += chunk
    daemon.stdout.close()
    if line.startswith(b"ready"):
        return daemon
    # it lost the race for the port to another epmd (it then exits): use that one
    daemon.wait(timeout)
    names(host, epmd_port=port, timeout=timeout)
    return None


def _serve(host: str, port: int, idle_exit: float) -> int:
    """``python -m ensemble.dist.epmd``: serve until no node has been registered for ``idle_exit``
    seconds; print ``ready`` once listening.  Exit status 1 when the port is taken."""
    server = EpmdServer(host, port)
    try:
        server.start()
    except OSError:
        return 1
    print("ready", server.port, flush=True)
    idle_since = time.monotonic()
    while True:
        gevent.sleep(min(1.0, idle_exit))
        if server.registered():
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since >= idle_exit:
            server.stop()
            return 0


if __name__ == "__main__":
    import argparse

    _ap = argparse.ArgumentParser(description="ensemble's epmd (port mapper) as a daemon")
    _ap.add_argument("--host", default="127.0.0.1")
    _ap.add_argument("--port", type=int, default=None)
    _ap.add_argument("--idle-exit", type=float, default=60.0)
    _args = _ap.parse_args()
    raise SystemExit(_serve(_args.host, default_epmd_port() if _args.port is None else _args.port,
                            _args.idle_exit))
