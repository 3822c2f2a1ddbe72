"""The node: this OS process as a named member of a cluster, and its connections to the others.

One :class:`Node` at most per OS process, made by :func:`ensemble.dist.start`.  Its sockets
live on the carrier (hub) of the thread that started it: the listener's accept loop, and per
connection a reader and a writer greenlet.  Everything else reaches them through that
carrier's ``call_soon`` (safe from any thread) and answers back with ensemble messages, so a
process on any carrier can send to another node, connect or watch nodes.

Each connection (:class:`~ensemble.dist.conn.Conn`: its reading, and its writes batched) goes
through the handshake of :mod:`ensemble.decide.handshake` (frames of at most 4 KiB until it
ends), then carries envelopes (:mod:`ensemble.dist.envelope`) in frames of at most
``max_frame`` bytes: a message to a pid, a name or an alias under a binary header, its body
in :mod:`ensemble.dist.codec`; every other operation a tuple ``(op, ...)`` in the codec:

=================================  ===============================================
``("send", id, creation, msg)``    deliver ``msg`` to local process ``id`` of that run
``("send_named", name, msg)``      deliver ``msg`` to the process registered as ``name``
``("alias", n, creation, msg)``    deliver ``msg`` through local alias ``n`` if still active
``("link"|"unlink", from, id, c)`` make or remove a link between ``from`` and a local process
``("exit", from, id, c, r, link)`` an exit signal (a link's when ``link``) to a local process
``("monitor", from, id, c, n)``    ``from`` monitors a local process under its ref ``n``
``("monitor_named", from, nm, n)`` the same, by registered name
``("demonitor", n)``               forget the remote monitor ``n``
``("down", id, c, n, reason)``     local process ``id``'s remote monitor ``n`` fired
``("spawn", ...)``, ``("spawned",  ``spawn_on`` and rpc: a request and its answer
...)``
=================================  ===============================================

(The first three are what the binary headers carry; a name no header carries goes as
``send_named``.)  The hot path of a send is :meth:`Node.send` / :meth:`Node.send_named` on the
node's carrier: one encode and one queueing, no greenlet switch; of a receipt,
:meth:`Node.on_bytes`, the reader's loop over whole frames.

A frame over the limit, one that does not decode, or one that is not an envelope drops the
connection (reported); an envelope naming a process that is gone is dropped quietly, as Erlang
drops a message to a dead pid.  When a connection goes, every ``monitor_node`` of that peer
gets ``("nodedown", peer)``, and so does every process that called ``monitor_nodes``.
"""

from __future__ import annotations

import os
import secrets
import weakref
import socket as _stdsocket
from typing import Any, Callable

import gevent
import gevent.event
import gevent.socket
import msgpack

from .. import _process as P
from .. import _terms
from .. import _links, _names, _spawn
from .. import logger as _logger
from ..decide import allow as _allow
from ..decide import framing, handshake
from ..decide import signal as _signal
from ..threads import get_ident
from . import codec, envelope, epmd, functions, wire_types
from .conn import Conn

__all__ = ["Node", "NODE_STATE"]


class _Box:
    """The one node of this OS process, or None."""

    node: "Node | None" = None


#: Where the running node is kept (``NODE_STATE.node``).
NODE_STATE = _Box()


def short_host() -> str:
    """This host's short name (``socket.gethostname()`` up to its first dot)."""
    return _stdsocket.gethostname().split(".")[0] or "localhost"


def full_name(name: str) -> str:
    """``name`` as a node name: ``name@host`` (this host's short name when there is no ``@``)."""
    return name if "@" in name else f"{name}@{short_host()}"


#: The first element of the message that answers a spawn request: ``(SPAWNED, n, result)``.
SPAWNED = "$ensemble.spawned"
#: The first element of the message a spawn with ``reply`` sends when done: ``(RESULT, n, outcome)``.
RESULT = "$ensemble.result"


def _run_remote_call(fn: Any, args: tuple, link_to: Any, reply_to: Any, n: int) -> Any:
    """The body of a process spawned for another node: link first, then run; with a caller to
    reply to, send it ``(RESULT, n, outcome)``: ``("ok", value)``, ``("exception", error)`` or
    ``("exit", reason)``."""
    from .._exceptions import Exit

    if link_to is not None:
        _links.link(link_to)
    if reply_to is None:
        return fn(*args)
    try:
        outcome: tuple = ("ok", fn(*args))
    except Exit as x:
        outcome = ("exit", x.reason)
    except Exception as x:  # noqa: BLE001 - handed to the caller, typed
        outcome = ("exception", x)
    try:
        _names.send(reply_to, (RESULT, n, outcome))
    except (codec.CodecError, TypeError, ValueError) as x:
        _names.send(reply_to, (RESULT, n, ("exception", codec.RemoteError(type(x).__name__, str(x)))))
    return None


def _ref_in(node: str, n: int, creation: int) -> _terms.Ref:
    """A reference that crossed the wire: equal to the one made on ``node`` (refs compare by
    number and node), this node's own included."""
    return _terms.Ref(n, node)


def _ints(values: Any) -> bool:
    return all(type(v) is int for v in values)


_SEND, _SEND_NAMED = envelope.SEND, envelope.SEND_NAMED
_TO_SIZE = envelope.TO_SIZE
_unpack_to = envelope.unpack_to
_pack_to = envelope.pack_to
_HEADER = framing.HEADER
_unpackb = msgpack.unpackb
_deliver_run = P.deliver_many
_unpack_length = framing.unpack_length

#: A frame that is not one of the envelopes a node understands (the connection is dropped).
_BadEnvelope = envelope.BadEnvelope


class Node:
    """This OS process as node ``name`` of run ``creation``; see the module docstring."""

    def __init__(self, name: str, cookie: str, max_frame: int, handshake_timeout: float,
                 epmd_port: int | None, allow: Any = frozenset(), tls: Any = None) -> None:
        self.name = name
        self.tls = tls  # None, or (server SSLContext, client SSLContext): see ensemble.dist.TLS
        self.allow = allow  # checked (ensemble.decide.allow.check_policy)
        #: nodes whose spawn and rpc requests ``allow`` does not limit (a carrier node's parent)
        self.trusted: frozenset[str] = frozenset()
        self.cookie = cookie
        self.max_frame = max_frame
        self.handshake_timeout = handshake_timeout
        self.epmd_port = epmd_port
        self.creation = 0
        self.carrier = P.carrier_of_this_thread()
        self.carrier_ident = self.carrier.ident
        self.conns: dict[str, Conn] = {}
        self.dialling: dict[str, gevent.event.AsyncResult] = {}
        self.node_monitors: dict[str, list[P.Pid]] = {}
        self.watchers: list[P.Pid] = []
        #: frames for a peer being dialled, each with what to do if the dial fails (or None)
        self.pending: dict[str, list[tuple[bytes, Callable[[], None] | None]]] = {}
        #: (peer, its ref's int) -> the local process a remote monitor watches
        self.remote_watches: dict[tuple[str, int], P.Pid] = {}
        self.remote_pids: dict[tuple[str, int, int], P.RemotePid] = {}
        #: (local process id, spawn request number) -> the ref int of the monitor it asked for
        self.spawn_monitors: dict[tuple[int, int], int] = {}
        #: local pids that crossed the wire, so one that comes back is the same object, dead or alive
        self.sent_pids: weakref.WeakValueDictionary[int, P.Pid] = weakref.WeakValueDictionary()
        #: local aliases that crossed the wire, so one that comes back is the same object
        self.sent_aliases: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._sent_refs = self.sent_pids.data  # id -> weak reference, read without a Python call
        #: the codec with this node's converters, built once (used on the carrier's thread)
        self.encoder = codec.Encoder(pid_out=self.pid_out, alias_out=self.alias_out,
                                     named_out=wire_types.named_out)
        self.decoder = codec.decoder(pid_in=self.pid_in, ref_in=_ref_in, alias_in=self.alias_in,
                                     named_in=self.named_in)
        #: the peer whose frames are being carried out (a function it names is let in by
        #: ``allow``, or because the peer is trusted)
        self.reading_from: str | None = None
        self.decode = self.decoder.decode
        #: registered name -> the envelope header of a message to it
        self.named_headers: dict[str, bytes | None] = {}
        #: the header of a message to a name that arrived -> that name (the name decoded once)
        self._names_in: dict[bytes, str] = {}
        self.listener: Any = None
        self.acceptor: Any = None
        self.registration: Any = None
        self.port = 0

    # -- the codec's view of pids -----------------------------------------------------------

    def encode(self, value: Any) -> bytes:
        """``value`` in the codec, with this node's pids, refs and aliases (from any thread)."""
        if get_ident() == self.carrier_ident:
            return self.encoder.encode(value)
        return codec.encode(value, pid_out=self.pid_out, alias_out=self.alias_out,
                            named_out=wire_types.named_out)

    def named_in(self, name: str, fields: tuple) -> Any:
        """A value that crossed by name (:mod:`ensemble.dist.wire_types`); a function is let in
        when the peer it came from is trusted or this node's ``allow`` lets it in."""
        return wire_types.named_in(name, fields, self._function_in)

    def _function_in(self, fname: str) -> Any:
        if self.reading_from in self.trusted or _allow.allowed(self.allow, fname):
            return functions.resolve(fname)
        return None

    def alias_out(self, a: Any) -> tuple[str, int, int] | None:
        """An alias as the wire carries it (a local one is remembered, to come back as itself)."""
        t = type(a)
        if t is _terms.Alias:
            self.sent_aliases[a._n] = a
            return (self.name, a._n, self.creation)
        if t is _terms.RemoteAlias:
            return (a._node, a._n, a.creation)
        return None

    def alias_in(self, node: str, n: int, creation: int) -> Any:
        """The in-memory alias for one that arrived: this node's own (the same object), else a
        :class:`~ensemble._terms.RemoteAlias`."""
        if node == self.name and creation == self.creation:
            a = self.sent_aliases.get(n)
            if a is not None:
                return a
        return _terms.RemoteAlias(n, node, creation)

    def pid_out(self, pid: Any) -> tuple[str, int, int] | None:
        """A pid as the wire carries it, or None for a value that is not a pid."""
        t = type(pid)
        if t is P.Pid:
            known = self._sent_refs.get(pid.id)
            if known is None or known() is not pid:
                self.sent_pids[pid.id] = pid
            return (self.name, pid.id, self.creation)
        if t is P.RemotePid:
            return (pid._node, pid.id, pid.creation)
        return None

    def pid_in(self, node: str, id: int, creation: int) -> Any:
        """The in-memory pid for one that arrived: a local process of this run, else a handle."""
        if node == self.name and creation == self.creation:
            p = P.TABLE.get(id) or self.sent_pids.get(id)
            if p is not None:
                return p
        key = (node, id, creation)
        p = self.remote_pids.get(key)
        if p is None:
            p = self.remote_pids.setdefault(key, P.new_remote_pid(node, id, creation))
        return p

    # -- start and stop ----------------------------------------------------------------------

    def start(self, host: str, port: int) -> None:
        """Listen, register with the host's epmd (starting ensemble's as a daemon OS process if
        none answers, see :func:`ensemble.dist.epmd.start_daemon`), and accept."""
        listener = gevent.socket.socket(gevent.socket.AF_INET, gevent.socket.SOCK_STREAM)
        listener.setsockopt(gevent.socket.SOL_SOCKET, gevent.socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            epmd.start_daemon(port=self.epmd_port)
            alive = self.name.split("@")[0]
            self.registration = epmd.register(alive, self.port, epmd_port=self.epmd_port)
        except BaseException:  # a taken name, a taken port, no epmd: nothing stays open
            listener.close()
            raise
        self.listener = listener
        self.creation = self.registration.creation
        self.acceptor = gevent.spawn(self._accept_loop)

    def stop(self) -> None:
        """Stop accepting, close every connection (peers see nodedown), unregister."""
        if self.acceptor is not None:
            self.acceptor.kill(block=False)
        for c in list(self.conns.values()):
            self.connection_lost(c, "stopped")
        if self.listener is not None:
            self.listener.close()
        if self.registration is not None:
            self.registration.close()

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
            ok = self._dial(peer)
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

    def _dial(self, peer: str) -> bool:
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
            return peer in self.conns  # "alive"/"nok": the other connection may be the one
        self._up(conn, outcome)
        return peer in self.conns

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
        if reason not in ("closed", "stopped", "disconnected"):
            _logger.report("dist_connection_dropped", node=self.name, peer=conn.peer, reason=repr(reason))
        self._tell_down(conn.peer)

    def _tell_down(self, peer: str) -> None:
        self._forget_node(peer)
        for p in self.node_monitors.pop(peer, []):
            P.deliver(p, ("nodedown", peer))
        for w in list(self.watchers):
            P.deliver(w, ("nodedown", peer))

    # -- frames ------------------------------------------------------------------------------

    def on_bytes(self, conn: Conn, data: bytes, limit: int) -> int:
        """Carry out the whole frames at the start of ``data`` in order (each as
        :meth:`on_frame` does); answer how many bytes they took.

        Cut as :func:`ensemble.decide.framing.split` cuts (``FrameTooLarge`` as soon as a
        header announces more than ``limit``), in one loop with the hot path: a message to a
        name or a pid is decoded and delivered here, without a Python call but delivery's or a
        copy of the frame (the codec's decode runs again on a body that fails, to say why).
        Consecutive messages to one process are handed over together
        (:func:`ensemble._process.deliver_many`: one append, at most one wake); a run is
        delivered before anything else is carried out (another frame, an error), so every
        message keeps its place.
        """
        decode, eh, lh, open_tags = self.decoder
        self.reading_from = conn.peer
        creation = self.creation
        table = P.TABLE
        names = P.NAMES
        names_in = self._names_in
        last_key = None  # the header of the last message to a name here, and that name
        last_name = ""
        run_to: Any = None  # the process the messages of ``run`` go to
        run: list = []
        end = len(data)
        at = 0
        try:
            while end - at >= _HEADER:
                (n,) = _unpack_length(data, at)
                if n > limit:
                    raise framing.FrameTooLarge(n, limit)
                start = at + _HEADER
                stop = start + n
                if stop > end:
                    break
                at = stop
                if last_key is not None and data.startswith(last_key, start, stop):
                    body = data[start + len(last_key) : stop]
                    try:
                        msg = _unpackb(body, ext_hook=eh, list_hook=lh, strict_map_key=False,
                                       unicode_errors="surrogatepass")
                    except Exception:  # noqa: BLE001 - decode says why, as Undecodable
                        msg = decode(body)
                    if open_tags[0]:
                        decode(body)
                    p = names.get(last_name)
                    if p is not None:
                        if p is run_to:
                            run.append(msg)
                        else:
                            if run:
                                _deliver_run(run_to, run)
                            run_to = p
                            run = [msg]
                    continue
                form = data[start] if n else -1
                if form == _SEND_NAMED:
                    key = data[start : min(stop, start + 2 + (data[start + 1] if n > 1 else 0))]
                    name = names_in.get(key)  # (a key cut short by the frame's end is never known)
                    if name is not None:  # a header that arrived whole and valid before
                        last_key, last_name = key, name
                        at = start - _HEADER
                        continue  # again, through the path above
                elif form == _SEND and n >= _TO_SIZE:
                    _, id, c = _unpack_to(data, start)
                    body = data[start + _TO_SIZE : stop]
                    try:
                        msg = _unpackb(body, ext_hook=eh, list_hook=lh, strict_map_key=False,
                                       unicode_errors="surrogatepass")
                    except Exception:  # noqa: BLE001 - decode says why, as Undecodable
                        msg = decode(body)
                    if open_tags[0]:
                        decode(body)
                    if c == creation:
                        p = table.get(id)
                        if p is not None:
                            if p is run_to:
                                run.append(msg)
                            else:
                                if run:
                                    _deliver_run(run_to, run)
                                run_to = p
                                run = [msg]
                    continue
                if run:
                    _deliver_run(run_to, run)
                    run_to, run = None, []
                self.on_frame(conn, data[start:stop])
        finally:
            if run:
                _deliver_run(run_to, run)
        return at

    def on_frame(self, conn: Conn, payload: bytes) -> None:
        """One frame arrived on ``conn``: an envelope (:mod:`ensemble.dist.envelope`).

        A frame that does not decode, or is not an envelope, raises (the connection is
        dropped); an operation that fails is reported and the connection goes on.
        """
        form, to, creation, at = envelope.parse(payload)
        value = self.decode(payload[at:])
        if form == envelope.SEND_NAMED:
            names_in = self._names_in
            if len(names_in) >= 4096:
                names_in.clear()
            names_in[payload[:at]] = to  # the header's bytes name this name from now on
            p = P.NAMES.get(to)
            if p is not None:
                P.deliver(p, value)
            return
        if form == envelope.SEND:
            if creation == self.creation:
                p = P.TABLE.get(to)
                if p is not None:
                    P.deliver(p, value)
            return
        if form == envelope.ALIAS:
            if creation == self.creation:
                a = self.sent_aliases.get(to)
                if a is not None:
                    P.deliver_alias(a, value)
            return
        env = value
        if type(env) is not tuple or not env or type(env[0]) is not str:
            raise _BadEnvelope(repr(env)[:200])
        try:
            self._dispatch(conn, env)
        except _BadEnvelope:
            raise
        except Exception as why:  # noqa: BLE001 - one failed operation does not end the connection
            _logger.report("dist_frame_failed", node=self.name, peer=conn.peer, op=env[0],
                           reason=repr(why)[:200])

    def _dispatch(self, conn: Conn, env: tuple) -> None:
        """Carry out one envelope (see the module docstring's table)."""
        op = env[0]
        if op == "send" and len(env) == 4 and type(env[1]) is int and type(env[2]) is int:
            if env[2] == self.creation:
                p = P.TABLE.get(env[1])
                if p is not None:
                    P.deliver(p, env[3])
            return
        if op == "send_named" and len(env) == 3 and type(env[1]) is str:
            p = P.NAMES.get(env[1])
            if p is not None:
                P.deliver(p, env[2])
            return
        if op == "spawn" and len(env) == 8 and type(env[1]) is P.RemotePid and _ints(env[2:3]) \
                and type(env[3]) is str and type(env[4]) is tuple and type(env[5]) is bool and type(env[6]) is bool \
                and _ints(env[7:8]):
            self._on_spawn(conn.peer, *env[1:])
            return
        if op == "spawned" and len(env) == 5 and _ints(env[1:4]):
            p = self._local(env[1], env[2])
            if p is not None:
                self._settle_spawn_monitor(p, env[3], env[4])
                P.deliver(p, (SPAWNED, env[3], env[4]))
            return
        if op == "alias" and len(env) == 4 and _ints(env[1:3]):
            if env[2] == self.creation:
                a = self.sent_aliases.get(env[1])
                if a is not None:
                    P.deliver_alias(a, env[3])
            return
        peer = conn.peer
        remote = type(env[1]) is P.RemotePid if len(env) > 1 else False
        if op == "link" and len(env) == 4 and remote and _ints(env[2:4]):
            self._on_link(peer, env[1], env[2], env[3])
        elif op == "unlink" and len(env) == 4 and remote and _ints(env[2:4]):
            self._on_unlink(env[1], env[2], env[3])
        elif op == "exit" and len(env) == 6 and remote and _ints(env[2:4]) and type(env[5]) is bool:
            self._on_exit(env[1], env[2], env[3], env[4], env[5])
        elif op == "monitor" and len(env) == 5 and remote and _ints(env[2:5]):
            target = self._local(env[2], env[3])
            shown = target if target is not None else P.new_remote_pid(self.name, env[2], env[3])
            self._on_monitor(peer, env[1], target, shown, env[4])
        elif op == "monitor_named" and len(env) == 4 and remote and type(env[2]) is str and _ints(env[3:4]):
            self._on_monitor(peer, env[1], P.NAMES.get(env[2]), (env[2], self.name), env[3])
        elif op == "demonitor" and len(env) == 2 and _ints(env[1:2]):
            self._on_demonitor(peer, env[1])
        elif op == "down" and len(env) == 5 and _ints(env[1:4]):
            self._on_down(env[1], env[2], env[3], env[4])
        else:
            raise _BadEnvelope(repr(env)[:200])

    # -- spawn_on and rpc --------------------------------------------------------------------

    def spawn_request(self, me: P.Pid, peer: str, fname: str, args: tuple, link: bool, n: int,
                      reply: bool, monitor: Any = None) -> None:
        """Ask ``peer`` to spawn ``fname(*args)``; the answer comes to ``me`` as
        ``(SPAWNED, n, result)`` (none when ``n`` is 0), ``"noconnection"`` if it cannot be asked.

        With ``monitor`` (a fresh ref; ``n`` not 0) ``me`` monitors the new process from before
        it runs (spawn_monitor): the other node sets the monitor up as it spawns, and here the
        monitor is held from now on, under a stand-in target until the answer names the pid
        (a refusal removes it; a lost connection fires it with ``"noconnection"``)."""
        def fail() -> None:
            if n:
                self._settle_spawn_monitor(me, n, "noconnection")
                P.deliver(me, (SPAWNED, n, "noconnection"))

        m = 0
        if monitor is not None and n:
            m = monitor._n
            pending = P.RemoteName(SPAWNED, peer)
            with P.LOCK:
                if me.monitors is None:
                    me.monitors = {}
                me.monitors[m] = (pending, pending, monitor)
            self.spawn_monitors[(me.id, n)] = m
        payload = self.encode(("spawn", me, n, fname, tuple(args), link, reply, m))
        self._route(peer, envelope.op(payload), fail)

    def _settle_spawn_monitor(self, me: P.Pid, n: int, result: Any) -> None:
        """The answer ``result`` to ``me``'s spawn request ``n`` arrived (or none will): its
        monitor, if it asked for one, now watches the new pid, or is gone."""
        m = self.spawn_monitors.pop((me.id, n), None)
        if m is None:
            return
        with P.LOCK:
            held = me.monitors.get(m) if me.monitors else None
            if held is None or type(held[0]) is not P.RemoteName or held[0].name != SPAWNED:
                return
            if type(result) is tuple and len(result) == 2 and result[0] == "ok" \
                    and type(result[1]) is P.RemotePid:
                me.monitors[m] = (result[1], result[1], held[2])
            else:
                del me.monitors[m]

    def forget_spawn_monitor(self, me: P.Pid, n: int) -> None:
        """``me`` stopped waiting for the answer to spawn request ``n`` (a timeout): drop its
        monitor (a DOWN that comes later for it is dropped too)."""
        self._settle_spawn_monitor(me, n, "timeout")

    def _on_spawn(self, peer: str, sender: Any, n: int, fname: str, args: tuple, link: bool,
                  reply: bool, m: int = 0) -> None:
        """A peer asks for ``fname(*args)`` here: refused unless ``allow`` lets it in; with a
        monitor ref ``m``, the sender monitors the new process before it runs."""
        def answer(result: Any) -> None:
            if n:
                self._op(peer, ("spawned", sender.id, sender.creation, n, result))

        if peer not in self.trusted and not _allow.allowed(self.allow, fname):
            answer(("not_allowed", fname))
            return
        fn = functions.resolve(fname)
        if fn is None:
            answer(("undefined", fname))
            return
        pid = _spawn.spawn(_run_remote_call, fn, args, sender if link else None, sender if reply else None, n)
        if m:
            self._on_monitor(peer, sender, pid, pid, m)  # before pid's first step
        answer(("ok", pid))

    # -- the sending side (called through REMOTE from any thread) ----------------------------

    def send(self, pid: P.RemotePid, msg: Any) -> None:
        """Send ``msg`` to the remote process ``pid`` (dropped when its node cannot be reached)."""
        node = pid._node
        if node == self.name:  # a pid of an earlier run of this node: names no process
            return
        if get_ident() == self.carrier_ident:  # the hot path: one call to encode, one to queue
            conn = self.conns.get(node)
            if conn is not None and conn.put_message(_pack_to(_SEND, pid.id, pid.creation), msg):
                return
        self._route(node, envelope.send(pid.id, pid.creation, self.encode(msg)))

    def send_alias(self, a: _terms.RemoteAlias, msg: Any) -> None:
        """Send ``msg`` through the alias ``a`` of a process on another node."""
        if a._node == self.name:  # an alias of an earlier run of this node: names nobody
            return
        self._route(a._node, envelope.alias(a._n, a.creation, self.encode(msg)))

    def send_named(self, name: str, node: str, msg: Any) -> None:
        """Send ``msg`` to the process registered as ``name`` on ``node``."""
        header = self.named_headers.get(name)
        if header is not None and get_ident() == self.carrier_ident:  # the hot path
            conn = self.conns.get(node)
            if conn is not None and conn.put_message(header, msg):
                return
        if header is None:
            if len(self.named_headers) >= 4096:
                self.named_headers.clear()
            header = self.named_headers[name] = envelope.named_header(name)
        if header is None:  # a name no header carries: the operation's tuple does
            self._route(node, envelope.op(self.encode(("send_named", name, msg))))
        else:
            self._route(node, header + self.encode(msg))

    def _route(self, peer: str, payload: bytes, on_fail: Callable[[], None] | None = None) -> None:
        if len(payload) > self.max_frame:
            raise framing.FrameTooLarge(len(payload), self.max_frame)
        if get_ident() == self.carrier_ident:
            conn = self.conns.get(peer)
            if conn is not None:
                conn.put(payload)
                return
            self._route_here(peer, payload, on_fail)
        else:
            self.carrier.call_soon(self._route_here, peer, payload, on_fail)

    def _route_here(self, peer: str, payload: bytes, on_fail: Callable[[], None] | None = None) -> None:
        conn = self.conns.get(peer)
        if conn is not None:
            conn.put(payload)
            return
        if not handshake.valid_name(peer) or peer == self.name:
            if on_fail is not None:  # later: the caller may hold P.LOCK
                self.carrier.call_soon(on_fail)
            return
        self.pending.setdefault(peer, []).append((payload, on_fail))
        if peer not in self.dialling:
            gevent.spawn(self.dial, peer)

    # -- links, exit signals and monitors across nodes (called under P.LOCK: never block) ----

    def _lossy(self, value: Any) -> Any:
        """``value`` if the wire carries it, else ``("unsendable", repr)`` (for reasons)."""
        try:
            self.encode(value)
            return value
        except (codec.CodecError, TypeError, ValueError):
            return ("unsendable", repr(value)[:1000])

    def link(self, me: P.Pid, pid: P.RemotePid) -> None:
        """``me`` linked to ``pid``: tell its node; an unreachable node signals noconnection."""
        def fail() -> None:
            with P.LOCK:
                if me.links and pid in me.links:
                    P.signal_locked(me, _signal.LINK, "noconnection", pid)
                    if me.links:
                        me.links.discard(pid)
            P.flush_settled()

        self._op(pid._node, ("link", me, pid.id, pid.creation), fail)

    def unlink(self, me: P.Pid, pid: P.RemotePid) -> None:
        self._op(pid._node, ("unlink", me, pid.id, pid.creation))

    def exit_signal(self, to: P.RemotePid, sender: P.Pid, reason: Any, is_link: bool) -> None:
        """An exit signal (a link's when ``is_link``) from local ``sender`` to remote ``to``."""
        self._op(to._node, ("exit", sender, to.id, to.creation, self._lossy(reason), is_link))

    def monitor(self, me: P.Pid, target: Any, ref: Any) -> None:
        """``me`` monitors ``target`` (a RemotePid or RemoteName) under ``ref``."""
        n = ref._n

        def fail() -> None:
            self._fire(me, n, "noconnection")

        if type(target) is P.RemotePid:
            self._op(target._node, ("monitor", me, target.id, target.creation, n), fail)
        else:
            self._op(target.node, ("monitor_named", me, target.name, n), fail)

    def demonitor(self, target: Any, n: int) -> None:
        node = target._node if type(target) is P.RemotePid else target.node
        self._op(node, ("demonitor", n))

    def down(self, watcher: P.RemotePid, n: int, reason: Any) -> None:
        """A local process a remote ``watcher`` monitored (ref int ``n``) exited with ``reason``."""
        self.remote_watches.pop((watcher._node, n), None)
        self._op(watcher._node, ("down", watcher.id, watcher.creation, n, self._lossy(reason)))

    def _op(self, peer: str, operation: tuple, on_fail: Callable[[], None] | None = None) -> None:
        try:
            payload = envelope.op(self.encode(operation))
        except (codec.CodecError, TypeError, ValueError):
            return
        self._route(peer, payload, on_fail)

    def _fire(self, watcher: P.Pid, n: int, reason: Any) -> None:
        """Watcher's monitor ``n`` of a remote target fires with ``reason`` (if it still holds it)."""
        with P.LOCK:
            held = watcher.monitors.pop(n, None) if watcher.monitors else None
            if held is not None:
                P.deliver_locked(watcher, ("DOWN", held[2], "process", held[1], reason))

    # -- the receiving side of those operations (on the node's carrier) ----------------------

    def _local(self, id: int, creation: int) -> P.Pid | None:
        """The live local process ``id`` of this run, or None."""
        if creation != self.creation:
            return None
        p = P.TABLE.get(id)
        return p if p is not None and p.reason is P.ALIVE else None

    def _on_link(self, peer: str, sender: Any, to_id: int, to_creation: int) -> None:
        target = self._local(to_id, to_creation)
        with P.LOCK:
            if target is not None and target.reason is P.ALIVE:
                if target.links is P.NO_LINKS:
                    target.links = set()
                target.links.add(sender)
                return
        gone = P.new_remote_pid(self.name, to_id, to_creation)  # the sender's view of the target
        self._op(peer, ("exit", gone, sender.id, sender.creation, "noproc", True))

    def _on_unlink(self, sender: Any, to_id: int, to_creation: int) -> None:
        target = self._local(to_id, to_creation)
        if target is not None:
            with P.LOCK:
                if target.links:
                    target.links.discard(sender)

    def _on_exit(self, sender: Any, to_id: int, to_creation: int, reason: Any, is_link: bool) -> None:
        target = self._local(to_id, to_creation)
        if target is None:
            return
        with P.LOCK:
            if is_link and not (target.links and sender in target.links):
                return  # the link is gone here already (unlinked): its signal is dropped
            P.signal_locked(target, _signal.LINK if is_link else _signal.EXIT, reason, sender)
        P.flush_settled()

    def _on_monitor(self, peer: str, watcher: Any, target: P.Pid | None, shown: Any, n: int) -> None:
        with P.LOCK:
            if target is not None and target.reason is P.ALIVE:
                if target.watchers is None:
                    target.watchers = {}
                target.watchers[(peer, n)] = (watcher, shown, n)
                self.remote_watches[(peer, n)] = target
                return
        self._op(peer, ("down", watcher.id, watcher.creation, n, "noproc"))

    def _on_demonitor(self, peer: str, n: int) -> None:
        target = self.remote_watches.pop((peer, n), None)
        if target is not None:
            with P.LOCK:
                if target.watchers:
                    target.watchers.pop((peer, n), None)

    def _on_down(self, watcher_id: int, watcher_creation: int, n: int, reason: Any) -> None:
        watcher = self._local(watcher_id, watcher_creation)
        if watcher is not None:
            self._fire(watcher, n, reason)

    def _forget_node(self, peer: str) -> None:
        """The connection to ``peer`` is gone: links to its processes signal noconnection, monitors
        of them fire noconnection, and its monitors of local processes are dropped."""
        with P.LOCK:
            for p in list(P.TABLE.values()):
                if p.links:
                    for q in [q for q in p.links if type(q) is P.RemotePid and q._node == peer]:
                        P.signal_locked(p, _signal.LINK, "noconnection", q)
                        if p.links:
                            p.links.discard(q)
                if p.monitors:
                    for n, (t, shown, ref) in list(p.monitors.items()):
                        if (type(t) is P.RemotePid and t._node == peer) or (type(t) is P.RemoteName and t.node == peer):
                            del p.monitors[n]
                            P.deliver_locked(p, ("DOWN", ref, "process", shown, "noconnection"))
                if p.watchers:
                    for key in [k for k in p.watchers if type(k) is tuple and k[0] == peer]:
                        del p.watchers[key]
            for key in [k for k in self.remote_watches if k[0] == peer]:
                del self.remote_watches[key]
        P.flush_settled()


def default_cookie() -> str:
    """The cookie of a node started without one: ``ENSEMBLE_COOKIE``, else ``~/.erlang.cookie``
    (as Erlang's), else a random one (such a node can only be reached by its own children)."""
    env = os.environ.get("ENSEMBLE_COOKIE")
    if env:
        return env
    try:
        with open(os.path.expanduser("~/.erlang.cookie")) as f:
            text = f.read().strip()
        if text:
            return text
    except OSError:
        pass
    return secrets.token_hex(16)

