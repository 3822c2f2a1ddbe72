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

The node is one object, :class:`Node`, made of parts with one job each (mixins, so the hot
paths call no further than their own methods):

========================================  ==============================================
:mod:`ensemble.dist.node`                 the node's state, start and stop, its name
:mod:`ensemble.dist.identities`           pids, aliases and named values on the wire
:mod:`ensemble.dist.handshakes`           accepting, dialling, the handshake, simultaneous
                                          connects, connections up and down
:mod:`ensemble.dist.messages`             sending and receiving messages (the hot paths)
:mod:`ensemble.dist.operations`           links, exit signals, monitors, spawn_on and
                                          rpc; the dispatch of operations
:mod:`ensemble.dist.conn`                 one connection's socket: reads, batched writes
========================================  ==============================================

The decisions are pure functions in :mod:`ensemble.decide` (``handshake``, ``framing``,
``dist_ops``, ``allow``).

A frame over the limit, one that does not decode, or one that is not an envelope drops the
connection (reported); an envelope naming a process that is gone is dropped quietly, as Erlang
drops a message to a dead pid.  When a connection goes, every ``monitor_node`` of that peer
gets ``("nodedown", peer)``, and so does every process that called ``monitor_nodes``.
"""
from __future__ import annotations

import os
import secrets
import socket as _stdsocket
import weakref
from typing import Any, Callable

import gevent
import gevent.event
import gevent.socket

from .. import _process as P
from . import codec, envelope, epmd, wire_types
from .conn import Conn
from .handshakes import Handshakes
from .identities import Identities, ref_in
from .messages import Messages
from .operations import RESULT, SPAWNED, Operations, run_remote_call

__all__ = ["Node", "NODE_STATE", "SPAWNED", "RESULT", "short_host", "full_name", "default_cookie"]

#: Former names, kept for their importers.
_run_remote_call = run_remote_call
_ref_in = ref_in
_BadEnvelope = envelope.BadEnvelope


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


class Node(Identities, Messages, Handshakes, Operations):
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
        #: set when a connection to the peer comes up (a dial that lost a simultaneous connect waits)
        self.arrivals: dict[str, gevent.event.Event] = {}
        self.node_monitors: dict[str, list[P.Pid]] = {}
        self.watchers: list[P.Pid] = []
        #: frames for a peer being dialled, each with what to do if the dial fails (or None)
        self.pending: dict[str, list[tuple[bytes, Callable[[], None] | None]]] = {}
        #: (peer, its ref's int) -> the local process a remote monitor watches
        self.remote_watches: dict[tuple[str, int], P.Pid] = {}
        self.remote_pids: dict[tuple[str, int, int], P.RemotePid] = {}
        #: (local process id, spawn request number) -> the ref int of the monitor it asked for
        self.spawn_monitors: dict[tuple[int, int], int] = {}
        #: (local process id, spawn request number) given up before the answer came (rpc timeouts)
        self.abandoned: dict[tuple[int, int], str] = {}  # -> the peer asked
        #: local pids that crossed the wire, so one that comes back is the same object, dead or alive
        self.sent_pids: weakref.WeakValueDictionary[int, P.Pid] = weakref.WeakValueDictionary()
        #: local aliases that crossed the wire, so one that comes back is the same object
        self.sent_aliases: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._sent_refs = self.sent_pids.data  # id -> weak reference, read without a Python call
        #: local pid id -> the ext it travels as (its process crossed the wire: see pid_out)
        self._pid_exts: dict[int, Any] = {}
        #: id() of a remote pid -> (that pid, the ext it travels as)
        self._remote_exts: dict[int, tuple[Any, Any]] = {}
        #: the codec with this node's converters, built once (used on the carrier's thread)
        self.encoder = codec.Encoder(pid_out=self.pid_out, alias_out=self.alias_out,
                                     named_out=wire_types.named_out,
                                     quick={P.Pid: self._local_pid_ext, P.RemotePid: self._remote_pid_ext})
        self.decoder = codec.decoder(pid_in=self.pid_in, ref_in=ref_in, alias_in=self.alias_in,
                                     named_in=self.named_in, keep=self._interned)
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
        self._pid_exts.clear()  # made with the creation of before
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
