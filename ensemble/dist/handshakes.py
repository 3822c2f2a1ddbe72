"""Connections between nodes: accepting, dialling, the handshake, and connections up and down.

A mixin of :class:`~ensemble.dist.node.Node`, on the node's carrier.  Each connection (a
:class:`~ensemble.dist.conn.Conn`) first goes through TLS when the node has it, then through
the cookie handshake whose steps :mod:`ensemble.decide.handshake` decides (frames of at most
4 KiB, the whole within ``handshake_timeout``); this module carries them out on the socket.
Two nodes that dial each other at once keep one connection (``handshake.on_up``'s verdict).
Once up, a connection is in ``conns`` and its reader and writer run; when it goes, node
monitors and ``monitor_nodes`` watchers hear ``nodedown`` and every link and monitor across it
fires ``noconnection`` (:meth:`~ensemble.dist.operations.Operations._forget_node`).
"""

from __future__ import annotations

import secrets
from typing import Any, Callable

import gevent
import gevent.event
import gevent.socket

from .. import _process as P
from .. import logger as _logger
from ..decide import framing, handshake
from . import codec, epmd
from .conn import Conn

__all__ = ["Handshakes"]

#: Dials again after an ``"alive"`` answer (see :meth:`Handshakes._await_other`).
_ALIVE_RETRIES = 5


class Handshakes:
    """Connection setup and teardown (a part of :class:`~ensemble.dist.node.Node`)."""

    # -- accepting ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            sock, _addr = self.listener.accept()
            sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
            gevent.spawn(self._accept_one, sock)

    def _accept_one(self, sock: Any) -> None:
        if self.tls is not None:
            sock = self._secure(sock, server=True)
            if sock is None:
                return
        conn = Conn(self, sock, dialled_by="?")
        state = handshake.accept(self.name, self.creation, self.cookie, secrets.token_hex(16))
        outcome = self._shake(conn, state, lambda st, m: handshake.acceptor_step(st, m, self._facts))
        if isinstance(outcome, handshake.Done):
            conn.dialled_by = outcome.peer
            self._up(conn, outcome)
        else:
            self._refused(outcome, "accept")
            conn.close()

    def _refused(self, outcome: Any, side: str) -> None:
        """Report a handshake that failed for another reason than a status (nok/alive) or a close."""
        reason = getattr(outcome, "reason", outcome)
        if reason not in ("closed", "nok", "alive"):
            _logger.report("dist_handshake_failed", node=self.name, side=side, reason=repr(reason)[:200])

    def _secure(self, sock: Any, *, server: bool) -> Any:
        """``sock`` wrapped in TLS, its TLS handshake done within the handshake timeout; None
        (the socket closed, the failure reported) when the peer's certificate or TLS fails."""
        server_ctx, client_ctx = self.tls
        try:
            with gevent.Timeout(self.handshake_timeout):
                if server:
                    wrapped = server_ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                else:
                    wrapped = client_ctx.wrap_socket(sock, server_side=False, do_handshake_on_connect=False)
                wrapped.do_handshake()
                return wrapped
        except (OSError, gevent.Timeout) as why:  # ssl.SSLError is an OSError
            _logger.report("dist_handshake_failed", node=self.name, side="accept" if server else "dial",
                           reason=f"tls: {why!r}"[:200])
            sock.close()
            return None

    def _facts(self, peer: str) -> tuple[bool, int | None]:
        existing = self.conns.get(peer)
        return peer in self.dialling, (existing.creation if existing is not None else None)

    def _shake(self, conn: Conn, state: Any, step: Callable[[Any, Any], Any],
               first: list | None = None) -> Any:
        """Run a handshake on ``conn`` to its end (or the timeout): the outcome."""
        try:
            with gevent.Timeout(self.handshake_timeout, False):
                for m in first or ():
                    conn.send_now(m)
                while True:
                    payload = conn.read_frame(framing.HANDSHAKE_LIMIT)
                    if payload is None:
                        return handshake.Failed("closed")
                    state, out, outcome = step(state, self.decode(payload))
                    for m in out:
                        conn.send_now(m)
                    if outcome is not None:
                        return outcome
            return handshake.Failed("timeout")
        except (OSError, framing.FrameTooLarge, codec.CodecError) as e:
            return handshake.Failed(("error", type(e).__name__))

    # -- dialling ----------------------------------------------------------------------------

    def dial(self, peer: str) -> bool:
        """On the node's carrier: connect to ``peer`` unless connected (waiting for a dial
        already under way); True once a connection is up."""
        if peer in self.conns:
            return True
        if peer == self.name:
            return False
        waiting = self.dialling.get(peer)
        if waiting is not None:
            return bool(waiting.get())
        result = self.dialling[peer] = gevent.event.AsyncResult()
        ok = False
        try:
            ok = self._dial(peer, _ALIVE_RETRIES)
        finally:
            del self.dialling[peer]
            result.set(ok)
            queued = self.pending.pop(peer, [])
            conn = self.conns.get(peer)
            for payload, on_fail in queued:
                if conn is not None:
                    conn.put(payload)
                elif on_fail is not None:
                    on_fail()
        return ok

    def _dial(self, peer: str, retries: int = 0) -> bool:
        """One dial of ``peer`` (``retries``: how many more after an ``"alive"``, see
        :meth:`_await_other`)."""
        if not handshake.valid_name(peer):
            return False
        alive, host = peer.split("@")
        sock = None
        timer = gevent.Timeout(self.handshake_timeout)
        timer.start()
        try:
            port = epmd.port_please(alive, host, epmd_port=self.epmd_port)
            if port is None:
                return False
            sock = gevent.socket.create_connection((host, port))
            sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
            if self.tls is not None:
                sock = self._secure(sock, server=False)
                if sock is None:
                    return False
        except gevent.Timeout as t:
            if t is not timer:
                raise
            if sock is not None:
                sock.close()
            return False
        except (OSError, epmd.EpmdError):
            if sock is not None:
                sock.close()
            return False
        finally:
            timer.close()
        conn = Conn(self, sock, dialled_by=self.name)
        state, first = handshake.initiate(self.name, self.creation, peer, self.cookie, secrets.token_hex(16))
        outcome = self._shake(conn, state, handshake.initiator_step, first)
        if not isinstance(outcome, handshake.Done):
            self._refused(outcome, "dial")
            conn.close()
            reason = getattr(outcome, "reason", None)
            if reason in ("nok", "alive") and peer not in self.conns:
                return self._await_other(peer, reason, retries)
            return peer in self.conns
        self._up(conn, outcome)
        return peer in self.conns

    def _await_other(self, peer: str, status: str, retries: int) -> bool:
        """After ``peer`` answered a dial ``"nok"`` (its own dial to this node goes on) or ``"alive"``
        (it still holds a connection to this run of this node, which this node has let go: it sees
        that one close in a moment): wait for the peer's connection to come up, and after an
        ``"alive"`` dial again a few times, within the handshake timeout.  True once connected, as
        Erlang's ``connect_node`` answers after a simultaneous connect."""
        arrived = self.arrivals.setdefault(peer, gevent.event.Event())
        if status == "nok":
            arrived.wait(self.handshake_timeout)
            return peer in self.conns
        if retries <= 0:
            return False
        arrived.wait(0.01 * 2 ** (_ALIVE_RETRIES - retries))  # 10, 20, 40, 80, 160 ms
        return peer in self.conns or self._dial(peer, retries - 1)

    # -- connections up and down -------------------------------------------------------------

    def _up(self, conn: Conn, done: handshake.Done) -> None:
        existing = self.conns.get(done.peer)
        verdict = handshake.on_up(
            existing.creation if existing is not None else None,
            done.creation,
            existing_from=existing.dialled_by if existing is not None else None,
            new_from=conn.dialled_by,
        )
        if verdict == "drop":
            conn.close()
            return
        if existing is not None:
            self.conns.pop(done.peer, None)
            existing.close()
            if verdict == "replace_down":
                self._tell_down(done.peer)
        conn.peer, conn.creation = done.peer, done.creation
        self.conns[done.peer] = conn
        conn.start()
        arrived = self.arrivals.pop(done.peer, None)
        if arrived is not None:
            arrived.set()
        if existing is None or verdict == "replace_down":
            for w in list(self.watchers):
                P.deliver(w, ("nodeup", done.peer))

    def connection_lost(self, conn: Conn, reason: Any) -> None:
        """A connection ended (closed by either side, failed, or refused a frame)."""
        was_up = conn.peer is not None and self.conns.get(conn.peer) is conn
        conn.close()
        if not was_up:
            return
        del self.conns[conn.peer]
        if reason not in ("closed", "reset", "stopped", "disconnected"):
            _logger.report("dist_connection_dropped", node=self.name, peer=conn.peer, reason=repr(reason))
        self._tell_down(conn.peer)

    def _tell_down(self, peer: str) -> None:
        self._forget_node(peer)
        for p in self.node_monitors.pop(peer, []):
            P.deliver(p, ("nodedown", peer))
        for w in list(self.watchers):
            P.deliver(w, ("nodedown", peer))
