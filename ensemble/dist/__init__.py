"""ensemble.dist: this OS process as a node, talking to nodes in other OS processes and machines.

::

    import ensemble as e
    from ensemble import dist

    dist.start("shop")                      # "shop@<this host>", registered with the host's epmd
    e.register("orders", e.self())
    dist.connect("billing@host")            # True once connected (a send connects too)
    e.send(("ledger", "billing@host"), ("charge", 12, e.self()))

Issue 14 is being built in parts; what works so far: ``start``/``stop``, the port mapper
(:mod:`ensemble.dist.epmd`: Erlang's ``epmd``, or one ensemble starts when none answers), the
cookie handshake (:mod:`ensemble.decide.handshake`), optionally inside TLS (:class:`TLS`),
``connect``/``disconnect``, ``ensemble.nodes()``, ``ensemble.monitor_node`` and
:func:`monitor_nodes`; sending to a remote pid, alias or ``(name, node)``, in order, with pids,
refs and aliases crossing as themselves (the wire: :mod:`ensemble.dist.codec`, never pickle);
links, monitors and exit signals across nodes, and ``noconnection`` when a node is lost;
gen_server calls across nodes; :func:`spawn_on` and :mod:`ensemble.rpc`, limited by each node's
``allow``; process groups (:mod:`ensemble.pg`) and global names (:mod:`ensemble.global_`).
The OS-process dispatcher comes next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gevent

from .. import _process as P
from .._exceptions import EnsembleError
from .. import _terms
from ..decide import allow as _allow
from ..decide import handshake as _handshake
from ..decide.receive import NOMATCH as _NOMATCH
from ..threads import get_ident
from .node import NODE_STATE, SPAWNED, Node, default_cookie, full_name

__all__ = ["start", "stop", "connect", "disconnect", "nodes", "creation", "monitor_node", "monitor_nodes",
           "spawn_on", "TLS", "DistError", "SpawnError"]


class DistError(Exception):
    """A distribution call that cannot be carried out (not started, started twice, a bad name)."""


@dataclass(frozen=True)
class TLS:
    """TLS for a node's connections (``dist.start(..., tls=TLS(...))``), with the standard
    :mod:`ssl` module: ``certfile``/``keyfile`` are this node's certificate and key (PEM files),
    ``cafile`` the authority whose certificates it trusts.  Each side checks the other's chain;
    with ``mutual`` a node also demands a certificate from the nodes that dial it (mutual
    authentication), else only the dialler checks.  Host names are not checked: nodes are named
    by the cookie handshake that runs inside the TLS connection."""

    certfile: str
    keyfile: str
    cafile: str
    mutual: bool = False

    def contexts(self) -> tuple[Any, Any]:
        """The (server, client) ``SSLContext`` pair; raises ``OSError``/``ssl.SSLError`` for
        unreadable or bad files."""
        import ssl

        from gevent import ssl as gssl

        server = gssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1_2
        server.load_cert_chain(self.certfile, self.keyfile)
        server.load_verify_locations(self.cafile)
        server.verify_mode = ssl.CERT_REQUIRED if self.mutual else ssl.CERT_NONE
        client = gssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.minimum_version = ssl.TLSVersion.TLSv1_2
        client.check_hostname = False
        client.verify_mode = ssl.CERT_REQUIRED
        client.load_verify_locations(self.cafile)
        client.load_cert_chain(self.certfile, self.keyfile)
        return server, client


class SpawnError(EnsembleError):
    """``spawn_on`` failed; ``reason`` says why: ``("not_allowed", fn)`` (the node's ``allow``
    does not let it in), ``("undefined", fn)``, ``"noconnection"`` or ``"timeout"``."""

    def __init__(self, reason: Any) -> None:
        super().__init__(f"spawn_on failed: {reason!r}")
        self.reason = reason


def start(name: str, *, cookie: str | None = None, listen: str = "127.0.0.1:0", tls: TLS | None = None,
          allow: Any = (), max_frame: int = 64 * 2**20, handshake_timeout: float = 5.0,
          epmd_port: int | None = None) -> str:
    """Make this OS process the node ``name`` (``name@<this host>`` when it has no ``@``);
    answer the full node name.

    Listens on ``listen`` ("host:port", port 0: any), registers with the host's epmd
    (``epmd_port``, default ``ERL_EPMD_PORT`` or 4369; one is started in this process when none
    answers) and draws this run's creation from it.  ``cookie`` defaults to
    :func:`~ensemble.dist.node.default_cookie`.  ``allow`` is what other nodes may run here
    with ``spawn_on`` and rpc (:mod:`ensemble.decide.allow`): module names, ``"module:function"``
    names, or a predicate; by default nothing.  ``tls`` (a :class:`TLS`) puts every connection
    in TLS, for networks the cookie alone should not be trusted on.  Raises :class:`DistError`
    when a node is already started here or the name is not ``alive@host``.
    """
    if NODE_STATE.node is not None:
        raise DistError(f"this OS process is already the node {NODE_STATE.node.name!r}")
    full = full_name(name)
    if not _handshake.valid_name(full):
        raise DistError(f"not a node name: {name!r} (alive@host, at most {_handshake.MAX_NAME} characters)")
    if type(max_frame) is not int or not 4096 <= max_frame <= 2**32 - 1:
        raise DistError(f"max_frame must be an int from 4096 to 2**32 - 1, not {max_frame!r}")
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise DistError(f"listen must be 'host:port', not {listen!r}")
    policy = _allow.check_policy(allow)
    if tls is not None and not isinstance(tls, TLS):
        raise DistError(f"tls must be an ensemble.dist.TLS, not {tls!r}")
    node = Node(full, cookie if cookie is not None else default_cookie(), max_frame,
                float(handshake_timeout), epmd_port, policy, tls.contexts() if tls is not None else None)
    node.tls_config = tls  # what a dispatcher of OS processes hands its carrier nodes
    node.start(host, int(port))
    NODE_STATE.node = node
    _terms.NODE = full
    P.REMOTE = node
    for hook in list(START_HOOKS):
        hook()
    return full


#: Called with no argument once a node has started (and services imported later call theirs at
#: once): how :mod:`ensemble.global_` and :mod:`ensemble.pg` start their servers on every node.
START_HOOKS: list = []
#: Called with no argument before a node stops: the services stop their servers.
STOP_HOOKS: list = []


def on_start(hook: Any, stop: Any = None) -> None:
    """Run ``hook()`` whenever this OS process becomes a node (now, if it is one), and
    ``stop()`` before it stops being one."""
    START_HOOKS.append(hook)
    if stop is not None:
        STOP_HOOKS.append(stop)
    if NODE_STATE.node is not None:
        hook()


def stop() -> None:
    """Stop being a node: close every connection (peers see nodedown) and unregister.  Local
    processes run on; this node is ``nonode@nohost`` again."""
    node = _running()
    for hook in list(STOP_HOOKS):
        try:
            hook()
        except Exception:  # noqa: BLE001 - a service that fails to stop does not keep the node up
            pass
    NODE_STATE.node = None
    P.REMOTE = None
    _terms.NODE = _terms.NO_NODE
    _on_carrier_wait(node, node.stop)


def connect(node: str) -> bool:
    """Connect to ``node`` (no-op when connected); True once connected, False when it cannot be
    reached, refuses the cookie, or this process is not a node."""
    n = NODE_STATE.node
    if n is None or type(node) is not str:
        return False
    return bool(_on_carrier_wait(n, n.dial, node))


def disconnect(node: str) -> bool:
    """Close the connection to ``node``; both ends see nodedown.  False when not connected."""
    n = NODE_STATE.node
    if n is None:
        return False

    def close() -> bool:
        conn = n.conns.get(node)
        if conn is None:
            return False
        n.connection_lost(conn, "disconnected")
        return True

    return bool(_on_carrier_wait(n, close))


def creation() -> int:
    """This run's creation number (drawn from epmd at :func:`start`); 0 when not a node."""
    n = NODE_STATE.node
    return n.creation if n is not None else 0


def nodes() -> list[str]:
    """The nodes this one is connected to (Erlang's ``nodes()``), sorted."""
    n = NODE_STATE.node
    return sorted(n.conns) if n is not None else []


def monitor_node(node: str, flag: bool = True) -> bool:
    """Watch ``node``: the caller gets ``("nodedown", node)`` when the connection to it goes, or at
    once when it cannot be connected.  ``flag=False`` removes one such watch.  Answers True."""
    me = P.me()
    n = NODE_STATE.node
    if n is None:
        if flag:
            P.deliver(me, ("nodedown", node))
        return True

    def here() -> None:  # on the carrier, without blocking: the watch is in place when this returns
        watching = n.node_monitors.get(node)
        if not flag:
            if watching is not None and me in watching:
                watching.remove(me)
            return
        n.node_monitors.setdefault(node, []).append(me)
        if node not in n.conns:
            gevent.spawn(connect_or_down)

    def connect_or_down() -> None:  # as Erlang's monitor_node, connect first; unreachable: nodedown
        if n.dial(node):
            return
        watching = n.node_monitors.get(node)
        if watching is not None and me in watching:
            watching.remove(me)
            P.deliver(me, ("nodedown", node))

    if get_ident() == n.carrier.ident:
        here()
    else:
        _on_carrier_wait(n, here)
    return True


def monitor_nodes(flag: bool = True) -> bool:
    """The caller gets ``("nodeup", node)`` and ``("nodedown", node)`` for every connection of this
    node from now on (``flag=False``: no longer).  Answers True."""
    n = _running()
    me = P.me()

    def here() -> None:
        if flag:
            n.watchers.append(me)
        elif me in n.watchers:
            n.watchers.remove(me)

    _on_carrier_wait(n, here)
    return True


def spawn_on(node: str, fn: str, *args: Any, link: bool = False, monitor: bool = False,
             timeout: float = 5.0) -> Any:
    """Spawn ``fn(*args)`` on ``node``, ``fn`` named ``"module:function"``; answer its pid (with
    ``monitor``: ``(pid, ref)``, as ``spawn_monitor``: the monitor is in place before the new
    process runs).

    With ``link`` the new process links to the caller before its first step.  It runs only if
    ``node``'s ``allow`` lets ``fn`` in; else :class:`SpawnError` ``("not_allowed", fn)``;
    ``("undefined", fn)`` when it is not found there, ``"noconnection"`` when the node cannot
    be reached (or this process is not a node), ``"timeout"`` when it does not answer in time.
    """
    _allow.parse(fn)  # a bad name raises BadFunctionName, a Badarg
    n = NODE_STATE.node
    if n is None:
        raise SpawnError("noconnection")
    me = P.me()
    ref = _terms.make_ref()
    mref = _terms.make_ref() if monitor else None
    n.spawn_request(me, node, fn, args, bool(link), ref._n, False, mref)
    got = P.receive(lambda m: m if type(m) is tuple and len(m) == 3 and m[0] == SPAWNED and m[1] == ref._n
                    else _NOMATCH, timeout=timeout)
    result = "timeout" if got is _terms.TIMEOUT else got[2]
    if type(result) is tuple and len(result) == 2 and result[0] == "ok":
        return (result[1], mref) if monitor else result[1]
    if mref is not None:  # no process to watch: no monitor, and no DOWN left behind
        n.forget_spawn_monitor(me, ref._n)
        from .._links import demonitor as _demonitor

        _demonitor(mref, flush=True)
    raise SpawnError(result)


def _running() -> Node:
    n = NODE_STATE.node
    if n is None:
        raise DistError("this OS process is not a node: call ensemble.dist.start first")
    return n


def _on_carrier_wait(n: Node, fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in a new greenlet on the node's carrier and wait for its answer."""
    if get_ident() == n.carrier.ident:
        return gevent.spawn(fn, *args).get()
    me = P.me()
    ref = _terms.make_ref()

    def run() -> None:
        try:
            P.deliver(me, (ref, True, fn(*args)))
        except Exception as e:  # noqa: BLE001 - handed back to the caller
            P.deliver(me, (ref, False, e))

    n.carrier.call_soon(gevent.spawn, run)
    got = P.receive(lambda m: m if type(m) is tuple and len(m) == 3 and m[0] is ref else _NOMATCH)
    if not got[1]:
        raise got[2]
    return got[2]

