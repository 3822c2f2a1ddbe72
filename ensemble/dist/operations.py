"""Operations between nodes: links, exit signals, monitors, spawn_on and rpc, and their dispatch.

A mixin of :class:`~ensemble.dist.node.Node`.  The sending side (``link``, ``unlink``,
``exit_signal``, ``monitor``, ``demonitor``, ``down``: called through ``P.REMOTE`` under
``P.LOCK``, so they never block) encodes an operation tuple and routes it; the receiving side
(:meth:`Operations._dispatch`, on the node's carrier) checks the tuple's shape
(:func:`ensemble.decide.dist_ops.well_formed`) and carries it out on the local processes.
When a connection is lost, :meth:`Operations._forget_node` gives every link across it
``noconnection``, fires every monitor of its processes, and drops its monitors of ours.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _process as P
from .. import _links, _names, _spawn, _terms
from ..decide import allow as _allow
from ..decide import dist_ops
from ..decide import signal as _signal
from . import codec, envelope, functions
from .conn import Conn

__all__ = ["Operations", "SPAWNED", "RESULT", "run_remote_call"]

#: The first element of the message that answers a spawn request: ``(SPAWNED, n, result)``.
SPAWNED = "$ensemble.spawned"
#: The first element of the message a spawn with ``reply`` sends when done: ``(RESULT, n, outcome)``.
RESULT = "$ensemble.result"


def run_remote_call(fn: Any, args: tuple, link_to: Any, reply_to: Any, n: int) -> Any:
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


#: A frame that is not one of the envelopes a node understands (the connection is dropped).
_BadEnvelope = envelope.BadEnvelope


class Operations:
    """Links, exit signals, monitors, spawns across nodes (a part of :class:`~ensemble.dist.node.Node`)."""

    def _dispatch(self, conn: Conn, env: tuple) -> None:
        """Carry out one operation (see :mod:`ensemble.decide.dist_ops` for their fields); one
        that is not well formed raises ``BadEnvelope`` (the connection is dropped)."""
        if not dist_ops.well_formed(env, P.RemotePid, _terms.RemoteAlias):
            raise _BadEnvelope(repr(env)[:200])
        op = env[0]
        peer = conn.peer
        if op == "send":
            if env[2] == self.creation:
                p = P.TABLE.get(env[1])
                if p is not None:
                    P.deliver(p, env[3])
        elif op == "send_named":
            p = P.NAMES.get(env[1])
            if p is not None:
                P.deliver(p, env[2])
        elif op == "spawn":
            self._on_spawn(peer, *env[1:])
        elif op == "spawned":
            p = self._local(env[1], env[2])
            if p is not None:
                self._settle_spawn_monitor(p, env[3], env[4])
                if self.abandoned and (p.id, env[3]) in self.abandoned:
                    self._abandoned_spawned(p, env[3], env[4])
                else:
                    P.deliver(p, (SPAWNED, env[3], env[4]))
        elif op == "alias":
            if env[2] == self.creation:
                a = self.sent_aliases.get(env[1])
                if a is not None:
                    P.deliver_alias(a, env[3])
        elif op == "link":
            self._on_link(peer, env[1], env[2], env[3])
        elif op == "unlink":
            self._on_unlink(env[1], env[2], env[3])
        elif op == "exit":
            self._on_exit(env[1], env[2], env[3], env[4], env[5])
        elif op == "monitor":
            target = self._local(env[2], env[3])
            shown = target if target is not None else P.new_remote_pid(self.name, env[2], env[3])
            self._on_monitor(peer, env[1], target, shown, env[4])
        elif op == "monitor_named":
            self._on_monitor(peer, env[1], P.NAMES.get(env[2]), (env[2], self.name), env[3])
        elif op == "demonitor":
            self._on_demonitor(peer, env[1])
        else:  # "down"
            self._on_down(env[1], env[2], env[3], env[4])

    # -- spawn_on and rpc --------------------------------------------------------------------

    def spawn_request(self, me: P.Pid, peer: str, fname: str, args: tuple, link: bool, n: int,
                      reply: Any, monitor: Any = None) -> None:
        """Ask ``peer`` to spawn ``fname(*args)``; the answer comes to ``me`` as
        ``(SPAWNED, n, result)`` (none when ``n`` is 0), ``"noconnection"`` if it cannot be asked.
        With ``reply`` (True, or an alias of ``me``'s to send it through) the process sends
        ``(RESULT, n, outcome)`` when done.

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

    def abandon_spawn(self, me: P.Pid, n: int, peer: str) -> None:
        """``me`` gave up spawn request ``n`` before its answer came (erpc's timeout,
        ``spawn_request_abandon``): the answer is dropped when it comes, and the process it names,
        if any, is killed.  Safe from any thread."""
        self.abandoned[(me.id, n)] = peer

    def _abandoned_spawned(self, me: P.Pid, n: int, result: Any) -> None:
        self.abandoned.pop((me.id, n), None)
        if type(result) is tuple and len(result) == 2 and result[0] == "ok" and type(result[1]) is P.RemotePid:
            self.exit_signal(result[1], me, "kill", False)

    def forget_spawn_monitor(self, me: P.Pid, n: int) -> None:
        """``me`` stopped waiting for the answer to spawn request ``n`` (a timeout): drop its
        monitor (a DOWN that comes later for it is dropped too)."""
        self._settle_spawn_monitor(me, n, "timeout")

    def _on_spawn(self, peer: str, sender: Any, n: int, fname: str, args: tuple, link: bool,
                  reply: Any, m: int = 0) -> None:
        """A peer asks for ``fname(*args)`` here: refused unless ``allow`` lets it in; with a
        monitor ref ``m``, the sender monitors the new process before it runs."""
        def answer(result: Any) -> None:
            if n:
                self._op(peer, ("spawned", sender.id, sender.creation, n, result))

        trusted = peer in self.trusted
        if not trusted and not _allow.allowed(self.allow, fname):
            answer(("not_allowed", fname))
            return
        fn = functions.resolve(fname, own_only=not trusted and _allow.by_module_only(self.allow, fname))
        if fn is None:
            answer(("undefined", fname))
            return
        # reply: True (to the sender), False (no result), or an alias of the sender's (a late result
        # to an alias it has given up is dropped)
        reply_to = reply if type(reply) is _terms.RemoteAlias else (sender if reply is True else None)
        pid = _spawn.spawn(run_remote_call, fn, args, sender if link else None, reply_to, n)
        if m:
            self._on_monitor(peer, sender, pid, pid, m)  # before pid's first step
        answer(("ok", pid))

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
        if self.abandoned:  # no answer comes any more from that run of the peer
            for key in [k for k, p in list(self.abandoned.items()) if p == peer]:  # (others add to it)
                self.abandoned.pop(key, None)
        P.flush_settled()
