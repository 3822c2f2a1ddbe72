"""pg: named process groups spread over the nodes of a cluster (Erlang/OTP's pg).

::

    from ensemble import pg
    pg.join("workers", e.self())            # local processes only
    pg.get_members("workers")               # this node's members first, then other nodes'
    ref, members = pg.monitor("workers")    # then (ref, "join"|"leave", group, pids) messages

Each node runs one server per scope (the default scope is ``"pg"``, started with the node, or
on first use; a scope is a registered name on every node).  A scope server keeps its node's members, watches
them (a member that exits leaves all its groups), tells the same scope on every connected node
of each join and leave, and on a node coming up the two exchange their members, so members
joined earlier reach nodes that connect later; a node's members are dropped when it goes down.
Consistency is eventual, as in OTP.  A process may join a group several times and must then
leave as many times.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _process as P
from . import _terms
from . import dist as _dist
from . import gen_server
from ._exceptions import Badarg
from ._links import demonitor as _demonitor
from ._links import monitor as _monitor
from ._names import send, whereis

__all__ = [
    "DEFAULT_SCOPE",
    "start",
    "join",
    "leave",
    "get_members",
    "get_local_members",
    "which_groups",
    "monitor",
    "demonitor",
]

#: The scope used when none is named.
DEFAULT_SCOPE = "pg"


def _local_pids(pids: Any) -> list[P.Pid]:
    """``pids`` (one pid or several) as a list of local pids; Badarg for anything else."""
    many = list(pids) if isinstance(pids, (list, tuple)) else [pids]
    if not many or any(type(p) is not P.Pid for p in many):
        raise Badarg(f"pg takes local processes (one pid or a list of them), not {pids!r}")
    return many


class _Scope(gen_server.GenServer):
    """One scope's server on one node (see the module docstring)."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    def init(self) -> Any:
        self.local: dict[Any, list[P.Pid]] = {}  # group -> members here (repeats for repeated joins)
        self.remote: dict[str, dict[Any, list[Any]]] = {}  # node -> group -> its members
        self.watched: dict[P.Pid, Any] = {}  # member -> its monitor ref
        # group -> {(pid, ref): the monitor of that caller} of pg.monitor callers
        self.watchers: dict[Any, dict[tuple[Any, Any], Any]] = {}
        # the monitor of a pg.monitor caller (one per call) -> (group, caller, its ref): a caller
        # that exits stops watching, and nothing more is sent to it
        self.subscriptions: dict[Any, tuple[Any, P.Pid, Any]] = {}
        if _dist.NODE_STATE.node is not None:
            _dist.monitor_nodes(True)
            for node in _dist.nodes():
                send((self.scope, node), ("$pg_discover", _terms.NODE))
        return ("ok", self)  # the state is the scope itself: ensemble.sys.get_state shows it

    # -- local changes -------------------------------------------------------------------

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        kind = request[0]
        if kind == "join":
            _, group, pids = request
            for p in pids:
                if p not in self.watched:
                    self.watched[p] = _monitor(p)
            self.local.setdefault(group, []).extend(pids)
            self._tell_others(("$pg_join", _terms.NODE, group, pids))
            self._notify(group, "join", pids)
            return ("reply", "ok", state)
        if kind == "leave":
            _, group, pids = request
            members = self.local.get(group, [])
            left = []
            for p in pids:
                if p in members:
                    members.remove(p)
                    left.append(p)
            if not members:
                self.local.pop(group, None)
            self._unwatch_gone(left)
            if left:
                self._tell_others(("$pg_leave", _terms.NODE, group, left))
                self._notify(group, "leave", left)
            return ("reply", "ok" if left else "not_joined", state)
        if kind == "members":
            return ("reply", self._members(request[1]), state)
        if kind == "local_members":
            return ("reply", list(self.local.get(request[1], [])), state)
        if kind == "groups":
            groups = set(self.local)
            for g in self.remote.values():
                groups.update(k for k, v in g.items() if v)
            return ("reply", sorted(groups, key=repr), state)
        if kind == "monitor":
            _, group, who, ref = request
            mref = _monitor(who)
            self.subscriptions[mref] = (group, who, ref)
            self.watchers.setdefault(group, {})[(who, ref)] = mref
            return ("reply", self._members(group), state)
        if kind == "demonitor":
            _, group, who, ref = request
            mref = self.watchers.get(group, {}).get((who, ref))
            if mref is not None:
                del self.subscriptions[mref]
                _demonitor(mref, flush=True)
                self._unsubscribe(group, who, ref)
            return ("reply", "ok", state)
        return ("reply", ("error", "unknown_request"), state)

    # -- messages: members exiting, other nodes' scopes, nodes coming and going ----------------

    def handle_info(self, msg: Any, state: Any) -> Any:
        if type(msg) is not tuple or not msg:
            return ("noreply", state)
        tag = msg[0]
        if tag == "DOWN" and len(msg) == 5:
            pid = msg[3]
            sub = self.subscriptions.pop(msg[1], None) if isinstance(msg[1], _terms.Ref) else None
            if sub is not None:  # a pg.monitor caller exited: it watches no more
                self._unsubscribe(*sub)
            elif type(pid) is P.Pid and self.watched.get(pid) == msg[1]:
                del self.watched[pid]
                for group in list(self.local):
                    members = self.local[group]
                    gone = [p for p in members if p is pid]
                    if gone:
                        self.local[group] = [p for p in members if p is not pid]
                        if not self.local[group]:
                            del self.local[group]
                        self._tell_others(("$pg_leave", _terms.NODE, group, gone))
                        self._notify(group, "leave", gone)
        elif tag == "$pg_join" and len(msg) == 4:
            _, node, group, pids = msg
            self.remote.setdefault(node, {}).setdefault(group, []).extend(pids)
            self._notify(group, "join", list(pids))
        elif tag == "$pg_leave" and len(msg) == 4:
            _, node, group, pids = msg
            members = self.remote.get(node, {}).get(group, [])
            for p in pids:
                if p in members:
                    members.remove(p)
            self._notify(group, "leave", list(pids))
        elif tag == "$pg_discover" and len(msg) == 2:
            send((self.scope, msg[1]), ("$pg_sync", _terms.NODE, {g: list(m) for g, m in self.local.items()}))
        elif tag == "$pg_sync" and len(msg) == 3:
            _, node, groups = msg
            before = self.remote.get(node, {})
            self.remote[node] = {g: list(m) for g, m in groups.items()}
            for g, m in groups.items():
                new = [p for p in m if p not in before.get(g, [])]
                if new:
                    self._notify(g, "join", new)
        elif tag == "nodeup":
            send((self.scope, msg[1]), ("$pg_discover", _terms.NODE))
        elif tag == "nodedown":
            for group, members in self.remote.pop(msg[1], {}).items():
                if members:
                    self._notify(group, "leave", members)
        return ("noreply", state)

    def _members(self, group: Any) -> list:
        """Every member of ``group`` this node knows: its own first, then other nodes'."""
        out = list(self.local.get(group, []))
        for groups in self.remote.values():
            out.extend(groups.get(group, []))
        return out

    def _tell_others(self, msg: tuple) -> None:
        for node in _dist.nodes():
            send((self.scope, node), msg)

    def _notify(self, group: Any, what: str, pids: list) -> None:
        for who, ref in self.watchers.get(group, ()):
            send(who, (ref, what, group, list(pids)))

    def _unsubscribe(self, group: Any, who: Any, ref: Any) -> None:
        watchers = self.watchers.get(group)
        if watchers is not None:
            watchers.pop((who, ref), None)
            if not watchers:
                del self.watchers[group]

    def _unwatch_gone(self, left: Iterable[P.Pid]) -> None:
        for p in left:
            if not any(p in members for members in self.local.values()):
                ref = self.watched.pop(p, None)
                if ref is not None:
                    _demonitor(ref, flush=True)


def start(scope: str = DEFAULT_SCOPE) -> Any:
    """Start the scope's server on this node (registered as ``scope``) unless it runs; its pid.

    Start a scope on every node that uses it, after :func:`ensemble.dist.start` (then it
    watches the other nodes); the default scope starts itself on first use.
    """
    if type(scope) is not str:
        raise Badarg(f"a scope is a name (str), not {scope!r}")
    pid = whereis(scope)
    return pid if pid is not None else gen_server._named_server(_Scope(scope), scope)


def _server(scope: str) -> Any:
    return start(scope)


def join(group: Any, pids: Any, scope: str = DEFAULT_SCOPE) -> str:
    """Add local process(es) ``pids`` to ``group``; answers ``"ok"``."""
    return gen_server.call(_server(scope), ("join", group, _local_pids(pids)))


def leave(group: Any, pids: Any, scope: str = DEFAULT_SCOPE) -> str:
    """Take local process(es) ``pids`` out of ``group`` once each; ``"not_joined"`` when none was."""
    return gen_server.call(_server(scope), ("leave", group, _local_pids(pids)))


def get_members(group: Any, scope: str = DEFAULT_SCOPE) -> list:
    """Every member of ``group`` as this node knows them: its own first, then other nodes'."""
    return gen_server.call(_server(scope), ("members", group))


def get_local_members(group: Any, scope: str = DEFAULT_SCOPE) -> list:
    """The members of ``group`` on this node."""
    return gen_server.call(_server(scope), ("local_members", group))


def which_groups(scope: str = DEFAULT_SCOPE) -> list:
    """The groups with at least one member on any node this one knows."""
    return gen_server.call(_server(scope), ("groups",))


def monitor(group: Any, scope: str = DEFAULT_SCOPE) -> tuple[Any, list]:
    """Watch ``group``: answers ``(ref, current members)``; then the caller gets
    ``(ref, "join", group, pids)`` and ``(ref, "leave", group, pids)``."""
    ref = _terms.make_ref()
    members = gen_server.call(_server(scope), ("monitor", group, P.me(), ref))
    return ref, members


def demonitor(group: Any, ref: Any, scope: str = DEFAULT_SCOPE) -> str:
    """Stop watching ``group`` under ``ref``; answers ``"ok"``."""
    return gen_server.call(_server(scope), ("demonitor", group, P.me(), ref))


def _stop_default_scope() -> None:
    pid = whereis(DEFAULT_SCOPE)
    if pid is not None:
        gen_server.stop(pid)


_dist.on_start(start, _stop_default_scope)  # every node runs the default scope, from its start
