"""global_: names registered on every connected node at once (Erlang/OTP's global).

(``global`` is a Python keyword, hence the underscore.)  ::

    from ensemble import global_
    global_.register_name("ledger", e.self())     # "yes", or "no" when the name is taken
    global_.whereis_name("ledger")                 # the pid, from any connected node
    e.send(("global", "ledger"), msg)              # ("global", name) works wherever a name does

Each node runs a registrar (a gen_server registered as ``"$global"``, started on first use).
Registering locks the name on every node in name order (a node busy with another registration
of it makes the caller release its locks, back off a random while and try again), answers
``"no"`` if any node has the name for another pid or the pid is a dead local process, and
otherwise binds it on every node.  Each registrar monitors the pids it binds: a name goes when
its process exits or its node goes down.  When nodes connect they exchange their tables; a name
bound to two different pids keeps the one whose ``(node, id)`` sorts lower, on both nodes, and
the other process is killed (``"kill"``), as OTP's default resolver does.
"""

from __future__ import annotations

import random
from typing import Any

import gevent

from . import _process as P
from . import _terms
from . import dist as _dist
from . import gen_server
from ._exceptions import Badarg, CallError
from ._links import exit as _exit_signal
from ._links import monitor as _monitor
from ._names import send as _send
from ._names import whereis

__all__ = ["register_name", "unregister_name", "whereis_name", "registered_names", "send", "REGISTRAR"]

#: The registered name of each node's registrar.
REGISTRAR = "$global"
#: Attempts at locking a name before register_name gives up with CallError("timeout").
ATTEMPTS = 200


def _order_key(pid: Any) -> tuple[str, int]:
    return (str(pid.node), pid.id)


class _Registrar(gen_server.GenServer):
    """One node's table of global names, its locks, and the monitors of the bound pids."""

    def init(self) -> Any:
        self.names: dict[str, Any] = {}
        self.locks: dict[str, Any] = {}  # name -> the holder's id
        self.refs: dict[Any, str] = {}  # monitor ref -> name
        self.holders: dict[Any, str] = {}  # monitor ref of a lock holder -> the name it locked
        if _dist.NODE_STATE.node is not None:
            _dist.monitor_nodes(True)
            for node in _dist.nodes():
                _send((REGISTRAR, node), ("$global_sync", _terms.NODE, dict(self.names)))
        return ("ok", None)

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        kind = request[0]
        if kind == "lock":
            _, name, holder, who = request
            if self.locks.get(name, holder) != holder:
                return ("reply", "busy", state)
            if name not in self.locks:  # a holder that dies releases its lock
                self.holders[_monitor(who)] = name
            self.locks[name] = holder
            return ("reply", "ok", state)
        if kind == "unlock":
            _, name, holder = request
            if self.locks.get(name) == holder:
                del self.locks[name]
                for ref, n in list(self.holders.items()):
                    if n == name:
                        del self.holders[ref]
            return ("reply", "ok", state)
        if kind == "lookup":
            return ("reply", self.names.get(request[1]), state)
        if kind == "bind":
            _, name, pid = request
            self._bind(name, pid)
            return ("reply", "ok", state)
        if kind == "unbind":
            self._unbind(request[1])
            return ("reply", "ok", state)
        if kind == "names":
            return ("reply", sorted(self.names), state)
        return ("reply", ("error", "unknown_request"), state)

    def handle_info(self, msg: Any, state: Any) -> Any:
        if type(msg) is not tuple or not msg:
            return ("noreply", state)
        tag = msg[0]
        if tag == "DOWN" and len(msg) == 5:
            name = self.refs.pop(msg[1], None)
            if name is not None and self.names.get(name) == msg[3]:
                del self.names[name]
            locked = self.holders.pop(msg[1], None)
            if locked is not None:
                self.locks.pop(locked, None)
        elif tag == "nodeup":
            _send((REGISTRAR, msg[1]), ("$global_sync", _terms.NODE, dict(self.names)))
        elif tag == "nodedown":
            node = msg[1]
            for name in [n for n, pid in self.names.items() if pid.node == node]:
                self._unbind(name)
            for name in [n for n, holder in self.locks.items() if holder[0] == node]:
                del self.locks[name]
        elif tag == "$global_sync" and len(msg) == 3:
            _, node, theirs = msg
            for name, pid in theirs.items():
                ours = self.names.get(name)
                if ours is None:
                    if pid.node != _terms.NODE or P.is_local_pid(pid) and pid.reason is P.ALIVE:
                        self._bind(name, pid)
                elif ours != pid:  # a clash: the lower (node, id) stays, the other is killed
                    keep, lose = sorted([ours, pid], key=_order_key)
                    if lose is ours:
                        self._unbind(name)
                        self._bind(name, keep)
                    if lose.node == _terms.NODE:
                        _exit_signal(lose, "kill")
        return ("noreply", state)

    def _bind(self, name: str, pid: Any) -> None:
        if self.names.get(name) == pid:
            return
        self._unbind(name)
        self.names[name] = pid
        self.refs[_monitor(pid)] = name

    def _unbind(self, name: str) -> None:
        pid = self.names.pop(name, None)
        if pid is not None:
            for ref, n in list(self.refs.items()):
                if n == name:
                    del self.refs[ref]


def _registrar() -> Any:
    return gen_server._named_server(_Registrar, REGISTRAR)


def _everywhere() -> list[Any]:
    """The registrars of this node and of every connected node, in node-name order."""
    _registrar()
    return [(REGISTRAR, node) for node in sorted([_terms.NODE, *_dist.nodes()])]


def register_name(name: str, pid: Any) -> str:
    """Bind ``name`` to ``pid`` on every connected node; ``"yes"``, or ``"no"`` when the name is
    bound to another pid somewhere or ``pid`` is a dead local process.  Raises
    :class:`~ensemble.CallError` ``"timeout"`` when the name stays locked by others."""
    if type(name) is not str:
        raise Badarg(f"a global name is a str, not {name!r}")
    if not isinstance(pid, P.Pid):
        raise Badarg(f"register_name needs a pid, not {pid!r}")
    me = P.me()
    holder = (_terms.NODE, me.id, _terms.make_ref()._n)
    for _attempt in range(ATTEMPTS):
        where = _everywhere()
        locked = []
        for reg in where:
            try:
                answer = gen_server.call(reg, ("lock", name, holder, me), 10)
            except CallError:
                answer = "gone"
            if answer == "busy":
                break
            if answer == "ok":
                locked.append(reg)
        else:
            try:
                return _register_locked(name, pid, locked)
            finally:
                _unlock(name, holder, locked)
        _unlock(name, holder, locked)
        gevent.sleep(random.uniform(0.001, 0.02))  # back off: another registration holds it
    raise CallError("timeout", ("register_name", name))


def _register_locked(name: str, pid: Any, where: list[Any]) -> str:
    if P.is_local_pid(pid) and pid.reason is not P.ALIVE:
        return "no"
    for reg in where:
        bound = gen_server.call(reg, ("lookup", name), 10)
        if bound is not None and bound != pid:
            return "no"
    for reg in where:
        gen_server.call(reg, ("bind", name, pid), 10)
    return "yes"


def _unlock(name: str, holder: Any, where: list[Any]) -> None:
    for reg in where:
        try:
            gen_server.call(reg, ("unlock", name, holder), 10)
        except CallError:
            pass


def unregister_name(name: str) -> str:
    """Remove ``name`` on every connected node; answers ``"ok"``."""
    for reg in _everywhere():
        try:
            gen_server.call(reg, ("unbind", name), 10)
        except CallError:
            pass
    return "ok"


def whereis_name(name: str) -> Any:
    """The pid bound to ``name``, or None."""
    return gen_server.call(_registrar(), ("lookup", name), 10)


def registered_names() -> list[str]:
    """Every global name this node knows."""
    return gen_server.call(_registrar(), ("names",), 10)


def send(name: str, msg: Any) -> Any:
    """Send ``msg`` to the process bound to ``name``; :class:`~ensemble.Badarg` when none is."""
    pid = whereis_name(name)
    if pid is None:
        raise Badarg(f"no process is globally registered as {name!r}")
    _send(pid, msg)
    return pid


def _whereis_for_send(name: Any) -> Any:
    """The pid of global ``name`` or None, for ``("global", name)`` destinations."""
    if type(name) is not str:
        return None
    return whereis_name(name)


P.GLOBAL = _whereis_for_send  # ("global", name) now resolves wherever a name is taken


def _stop_registrar() -> None:
    pid = whereis(REGISTRAR)
    if pid is not None:
        gen_server.stop(pid)


_dist.on_start(_registrar, _stop_registrar)  # every node runs a registrar, from its start
