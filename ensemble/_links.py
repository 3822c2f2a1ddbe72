"""Exit signals, links and monitors: exit/1, exit/2, link, unlink, trap_exit, monitor, demonitor."""

from __future__ import annotations

from typing import Any

from . import _process as P
from ._exceptions import Badarg, Exit
from . import _terms
from ._terms import Ref, make_ref
from .decide.signal import EXIT

__all__ = ["exit", "link", "unlink", "trap_exit", "monitor", "demonitor"]

_MISSING = object()


def exit(pid_or_reason: Any, reason: Any = _MISSING) -> Any:
    """``exit(reason)`` ends the running process; ``exit(pid, reason)`` sends an exit signal.

    With one argument (exit/1) raises :class:`Exit`, which the process may
    catch.  With two (exit/2) returns True after sending a signal: ``"kill"``
    cannot be trapped and the target dies with ``"killed"``; a trapping target
    gets ``("EXIT", from, reason)``; any other target dies of any reason but
    ``"normal"`` (``exit(self(), "normal")`` kills yourself).
    """
    if reason is _MISSING:
        raise Exit(pid_or_reason)
    target = pid_or_reason
    if type(target) is P.RemotePid:
        sender = P.me()
        if P.REMOTE is not None:
            P.REMOTE.exit_signal(target, sender, reason, False)
        return True
    if type(target) is not P.Pid:
        raise Badarg(f"exit/2 needs a pid, not {target!r}")
    sender = P.me()
    with P.LOCK:
        P.signal_locked(target, EXIT, reason, sender)
    P.flush_settled()
    if sender.dying is not P.ALIVE:
        P.raise_doom(sender)
    return True


def trap_exit(flag: bool = True) -> bool:
    """Set the running process's trap_exit flag; returns the previous one."""
    p = P.me()
    old = p.trap
    p.trap = bool(flag)
    return old


def link(pid: Any) -> bool:
    """Link the running process and ``pid`` (bidirectional, idempotent); returns True.

    Linking to a process that has exited makes the caller get an exit signal
    with reason ``"noproc"`` at once: it dies, or gets ``("EXIT", pid,
    "noproc")`` if it traps exits.
    """
    if type(pid) is P.RemotePid:
        return _link_remote(pid)
    if type(pid) is not P.Pid:
        raise Badarg(f"link needs a pid, not {pid!r}")
    me = P.me()
    if pid is me:
        return True
    with P.LOCK:
        if pid.reason is not P.ALIVE:
            P.signal_locked(me, EXIT, "noproc", pid, via_link=True)
        else:
            P.link_locked(me, pid)
    P.flush_settled()
    if me.dying is not P.ALIVE:
        P.raise_doom(me)
    return True


def _link_remote(pid: P.RemotePid) -> bool:
    """link/1 to a process on another node: the link is made on both nodes; an unreachable
    node (or none distributed) gives the caller a ``"noconnection"`` signal at once, a process
    gone there a ``"noproc"`` one from that node."""
    me = P.me()
    with P.LOCK:
        if P.REMOTE is None:
            P.signal_locked(me, EXIT, "noconnection", pid, via_link=True)
        elif not (me.links and pid in me.links):
            if me.links is P.NO_LINKS:
                me.links = set()
            me.links.add(pid)
            P.REMOTE.link(me, pid)
    P.flush_settled()
    if me.dying is not P.ALIVE:
        P.raise_doom(me)
    return True


def unlink(pid: Any) -> bool:
    """Remove the link between the running process and ``pid``; returns True.

    Once unlink has returned the link has no further effect on the caller: a
    link signal from ``pid`` not yet acted on is dropped, and an ``("EXIT",
    pid, reason)`` message the link produced while the caller trapped exits
    (``pid`` exited, or ``link`` found it dead) is taken out of the mailbox
    if the caller has not received it yet.  An ``("EXIT", pid, reason)``
    that ``pid`` sent with ``exit(caller, reason)`` stays.  (Erlang leaves
    the link's message in the queue too; see the README.)
    """
    remote = type(pid) is P.RemotePid
    if type(pid) is not P.Pid and not remote:
        raise Badarg(f"unlink needs a pid, not {pid!r}")
    me = P.me()
    with P.LOCK:
        if me.links:
            me.links.discard(pid)
        if remote:
            if P.REMOTE is not None:
                P.REMOTE.unlink(me, pid)
        elif pid.links:
            pid.links.discard(me)
    if me.link_exits:
        P.take_link_exit(me, pid)
    return True


def _resolve_monitored(target: Any) -> tuple[Any, Any]:
    """Under LOCK: (process or None, what the DOWN message shows for it).

    The "process" of a target on another node is its :class:`~ensemble._process.RemotePid`
    or a :class:`~ensemble._process.RemoteName`.
    """
    if type(target) is P.Pid:
        return target, target
    if type(target) is P.RemotePid:
        return target, target
    if type(target) is str:
        return P.NAMES.get(target), (target, _terms.NODE)
    if type(target) is tuple and len(target) == 2 and type(target[0]) is str:
        name, node = target
        if node == _terms.NODE:
            return P.NAMES.get(name), (name, node)
        if P.REMOTE is not None:
            return P.RemoteName(name, node), (name, node)
        return None, (name, node)
    raise Badarg(f"monitor needs a pid, a name or (name, node), not {target!r}")


def monitor(target: Any) -> Ref:
    """Monitor a pid, a registered name or ``(name, node)``; returns the monitor's ref.

    When the target exits the caller gets ``("DOWN", ref, "process", obj,
    reason)``, where ``obj`` is the pid, or ``(name, node)`` for a monitor by
    name.  A dead or unknown target gives a ``"noproc"`` DOWN at once.  Every
    call makes a new monitor.
    """
    me = P.me()
    ref = make_ref()
    if type(target) is tuple and len(target) == 2 and target[0] == "global":
        # ("global", name): resolved before the lock (it asks the registrar); DOWN shows the pid
        pid = P.GLOBAL(target[1]) if P.GLOBAL is not None else None
        if pid is None:
            P.deliver(me, ("DOWN", ref, "process", target, "noproc"))
            return ref
        target = pid
    with P.LOCK:
        proc, shown = _resolve_monitored(target)
        t = type(proc)
        if t is P.RemotePid or t is P.RemoteName:
            if P.REMOTE is None:
                P.deliver_locked(me, ("DOWN", ref, "process", shown, "noconnection"))
            else:  # held here; the other node watches, or answers noproc / noconnection
                if me.monitors is None:
                    me.monitors = {}
                me.monitors[ref._n] = (proc, shown, ref)
                P.REMOTE.monitor(me, proc, ref)
        elif proc is None or proc.reason is not P.ALIVE:
            reason = "noproc" if (type(shown) is not tuple or shown[1] == _terms.NODE) else "noconnection"
            P.deliver_locked(me, ("DOWN", ref, "process", shown, reason))
        else:
            P.add_monitor_locked(me, proc, shown, ref)
    return ref


def demonitor(ref: Ref, flush: bool = False) -> bool:
    """Remove the monitor ``ref``; after this no DOWN for it arrives.  Returns True.

    With ``flush=True`` a DOWN for ``ref`` already in the mailbox is removed too.
    """
    if not isinstance(ref, Ref):
        raise Badarg(f"demonitor needs a ref, not {ref!r}")
    me = P.me()
    with P.LOCK:
        P.drop_monitor_locked(me, ref)
    if flush:
        mailbox = me.mailbox
        for i, m in enumerate(list(mailbox)):  # only the owner removes: indices hold
            if (
                type(m) is tuple
                and len(m) == 5
                and m[0] == "DOWN"
                and type(m[1]) is Ref
                and m[1] == ref
            ):
                del mailbox[i]
                break
    return True
