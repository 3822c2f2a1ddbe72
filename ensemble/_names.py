"""Sending, registered names and aliases."""

from __future__ import annotations

from typing import Any

from . import _process as P
from ._exceptions import Badarg
from . import _terms
from ._terms import Alias, new_alias
from ._threads import get_ident as _get_ident

# The hot path's names, bound once (each is a constant of _process; DOOMED is mutated in place).
_Pid, _ALIVE, _RUNNING, _DOOMED = P.Pid, P.ALIVE, P.RUNNING, P.DOOMED
_NoMailYet, _resume_claimed = P.NoMailYet, P.resume_claimed

__all__ = ["send", "register", "unregister", "whereis", "registered", "alias", "unalias"]


def send(dest: Any, msg: Any) -> Any:
    """Send ``msg`` to ``dest`` and return ``msg``; never blocks.

    ``dest`` is a pid, a registered name, ``(name, node)`` or an alias.  A
    message to a process that has exited, to an inactive alias, or to
    ``(name, node)`` that names nobody is dropped; a message to a plain name
    nobody holds raises :class:`Badarg`.
    """
    if _DOOMED:  # P.check_caller(), inlined: a dead process's send never happens
        P.check_caller()
    t = type(dest)
    if t is _Pid:  # inlined P.deliver: the hot path
        if dest.reason is _ALIVE:
            try:
                dest.mailbox.append(msg)
            except _NoMailYet:  # its first message: make its mailbox
                P.mailbox_of(dest).append(msg)
            token = dest._wait
            if token:  # P.wake, inlined: claim the park (see there), then resume it
                try:
                    token.pop()
                except IndexError:
                    pass
                else:
                    c = dest.carrier
                    if c.handoff is None and c.resuming and _get_ident() == c.ident:
                        # the commonest wake: the hint for the next park on this carrier,
                        # a resume already scheduled (P.resume_claimed's first case)
                        c.handoff = dest
                        c.handoff_token = token
                        c.handoff_at = len(c.woken)
                    else:
                        _resume_claimed(dest, token)
            elif dest.life is not _RUNNING:
                P.wake_hibernating(dest)
    elif t is str:
        p = P.NAMES.get(dest)
        if p is None:
            raise Badarg(f"no process is registered as {dest!r}")
        P.deliver(p, msg)
    elif t is Alias:
        P.deliver_alias(dest, msg)
    elif t is tuple and len(dest) == 2 and type(dest[0]) is str:
        name, node = dest
        if name == "global":  # ("global", name): a name registered with ensemble.global_
            pid = P.GLOBAL(node) if P.GLOBAL is not None else None
            if pid is None:
                raise Badarg(f"no process is globally registered as {node!r}")
            return send(pid, msg)
        if node == _terms.NODE:
            p = P.NAMES.get(name)
            if p is not None:
                P.deliver(p, msg)
        elif P.REMOTE is not None:  # another node: a remote send never fails
            P.REMOTE.send_named(name, node, msg)
    elif t is P.RemotePid:
        if P.REMOTE is not None:
            P.REMOTE.send(dest, msg)
    elif t is _terms.RemoteAlias:
        if P.REMOTE is not None:
            P.REMOTE.send_alias(dest, msg)
    else:
        raise Badarg(f"cannot send to {dest!r}: not a pid, name, (name, node) or alias")
    return msg


def register(name: str, pid: P.Pid) -> bool:
    """Register ``pid`` under ``name`` (erlang:register/2); returns True.

    Raises :class:`Badarg` if the name is taken, is not a str or is
    ``"undefined"``, if the process has exited, or if it already has a name.
    The name is released when the process exits.
    """
    if type(name) is not str or name == "undefined":
        raise Badarg(f"a process name must be a str other than 'undefined', not {name!r}")
    if type(pid) is not P.Pid:
        raise Badarg(f"register needs a pid, not {pid!r}")
    P.check_caller()
    with P.LOCK:
        if name in P.NAMES:
            raise Badarg(f"name {name!r} is already registered")
        if pid.reason is not P.ALIVE:
            raise Badarg(f"{pid!r} is not alive")
        if pid.name is not None:
            raise Badarg(f"{pid!r} is already registered as {pid.name!r}")
        P.NAMES[name] = pid
        pid.name = name
    return True


def unregister(name: str) -> bool:
    """Remove the registered name ``name``; :class:`Badarg` if nobody holds it."""
    P.check_caller()
    with P.LOCK:
        pid = P.NAMES.pop(name, None) if type(name) is str else None
        if pid is None:
            raise Badarg(f"no process is registered as {name!r}")
        pid.name = None
    return True


def whereis(name: str) -> P.Pid | None:
    """The pid registered as ``name``, or None."""
    return P.NAMES.get(name)


def registered() -> list[str]:
    """The registered names, sorted."""
    with P.LOCK:
        return sorted(P.NAMES)


def alias() -> Alias:
    """A new active alias of the running process: messages to it arrive until unalias."""
    me = P.me()
    a = new_alias(me)
    with P.LOCK:
        if me.aliases is None:
            me.aliases = set()
        me.aliases.add(a._n)
    return a


def unalias(a: Alias) -> bool:
    """Deactivate an alias of the running process; True if it was active."""
    me = P.me()
    with P.LOCK:
        aliases = me.aliases
        if aliases is not None and type(a) is Alias and a._owner is me and a._n in aliases:
            aliases.discard(a._n)
            return True
    return False
