"""The plumbing every behaviour shares (OTP's gen and proc_lib).

* :func:`start`: spawn a process, wait for its init to acknowledge (or fail,
  or take too long), and answer the pid, ``"ignore"``, or raise StartError.
* :func:`call` / :func:`reply`: a request answered through an alias while the
  caller monitors the server, so a late reply is dropped and a dead server is
  noticed at once.
* :func:`cast`, :func:`stop` and the message tags the behaviours use.

Message protocol (gen_server's, shared by gen_statem and gen_event):
``("$gen_call", from_, request)`` with ``from_ = (caller_pid, alias)``,
answered ``(alias, reply)``; ``("$gen_cast", request)``; and system
messages ``("system", from_, request)`` handled by :mod:`ensemble._sysmsg`.
"""

from __future__ import annotations

from time import monotonic as _monotonic
from typing import Any, Callable

from greenlet import getcurrent as _getcurrent

from . import _process as P
from ._exceptions import Badarg, CallError, Exit, StartError
from ._links import demonitor, monitor, unlink
from ._names import alias, send, unalias
from . import _terms
from ._terms import TIMEOUT, Alias, new_alias
from .decide import receive as _select
from .decide.receive import NOMATCH
from .decide.values import same

_Pid, _ALIVE, _LOCK = P.Pid, P.ALIVE, P.LOCK  # the hot path's names, bound once

__all__ = [
    "CALL",
    "CAST",
    "SYSTEM",
    "Starter",
    "resolve",
    "start",
    "init_ack",
    "init_fail",
    "call",
    "reply",
    "cast",
    "stop",
]

CALL = "$gen_call"
CAST = "$gen_cast"
SYSTEM = "system"


def resolve(dest: Any) -> P.Pid | None:
    """The local process ``dest`` names (pid, name or ``(name, node)``), or None."""
    t = type(dest)
    if t is P.Pid:
        return dest
    if t is str:
        return P.NAMES.get(dest)
    if t is tuple and len(dest) == 2 and type(dest[0]) is str:
        return P.NAMES.get(dest[0]) if dest[1] == _terms.NODE else None
    raise Badarg(f"not a server: {dest!r} (a pid, a name or (name, node))")


# --------------------------------------------------------------------------
# Synchronous start (proc_lib:start / start_link)
# --------------------------------------------------------------------------


class Starter:
    """Who waits for a new process's init: its pid, and the alias the ack goes to."""

    __slots__ = ("pid", "alias", "linked")

    def __init__(self, pid: P.Pid, alias_: Alias, linked: bool) -> None:
        self.pid = pid
        self.alias = alias_
        self.linked = linked


def init_ack(starter: Starter, result: Any) -> None:
    """In the new process: tell the starter how init went (``("ok", pid)``, ``"ignore"``, ``("error", r)``)."""
    send(starter.alias, (starter.alias, result))


def init_fail(starter: Starter, ack: Any, exit_reason: Any, exc: BaseException | None = None) -> None:
    """In the new process: acknowledge a failed start (``("error", r)`` or ``"ignore"``) and exit.

    Never returns.  Unlinks from a linking starter first, so a failed
    ``start_link`` does not take its caller down.  Re-raises ``exc`` (a crash
    in init) if given, else exits with ``exit_reason``.
    """
    if starter.linked:
        unlink(starter.pid)
    init_ack(starter, ack)
    if exc is not None:
        raise exc
    raise Exit(exit_reason)


def start(
    body: Callable[..., Any],
    args: tuple,
    *,
    link: bool,
    name: str | None,
    timeout: float | None,
    trap_exit: bool,
    dispatcher: str,
    initial_call: tuple,
) -> Any:
    """Spawn ``body(starter, *args)`` and wait for its :func:`init_ack`.

    Answers the pid for ``("ok", pid)`` and ``"ignore"`` for ignore; raises
    :class:`StartError` with ``("already_started", pid)`` for a taken name,
    ``"timeout"`` when init takes longer than ``timeout`` (the process is
    killed), the failure's reason, or the reason the process died of.
    """
    from ._spawn import _spawn_opt

    if timeout is not None:
        timeout = P.check_timeout(timeout)
    me = P.me()
    ack = alias()
    starter = Starter(me, ack, link)
    try:
        pid, mref = _spawn_opt(
            body, (starter, *args), name, link, True, trap_exit, P.NO_STATE, dispatcher, initial_call
        )
    except Badarg:
        unalias(ack)
        holder = P.NAMES.get(name) if name is not None else None
        if holder is not None:
            raise StartError(("already_started", holder)) from None
        raise

    def answer(m: Any) -> Any:
        if type(m) is tuple and len(m) == 2 and m[0] is ack:
            return m
        if type(m) is tuple and len(m) == 5 and m[1] is mref and m[0] == "DOWN":
            return m
        return NOMATCH

    got = P.receive(answer, timeout=timeout)
    unalias(ack)
    if got is TIMEOUT:
        P.receive(lambda m: m if type(m) is tuple and len(m) == 2 and m[0] is ack else NOMATCH, timeout=0)
        if link:
            unlink(pid)
        from ._links import exit as exit_signal

        exit_signal(pid, "kill")
        down = P.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[1] is mref else NOMATCH)
        _flush_exit(pid)
        reason = down[4]
        raise StartError("timeout" if reason == "killed" else reason)
    if len(got) == 5:  # died before acknowledging
        if link:
            _flush_exit(pid)
        raise StartError(got[4])
    result = got[1]
    if type(result) is tuple and type(result[0]) is str and result[0] == "ok":
        demonitor(mref, flush=True)
        return result[1]
    # failure or ignore: the process exits right after; wait so its name is free
    P.receive(lambda m: m if type(m) is tuple and len(m) == 5 and m[1] is mref else NOMATCH)
    if link:
        _flush_exit(pid)
    if type(result) is str and result == "ignore":
        return "ignore"
    raise StartError(result[1])


def start_behaviour(
    obj: Any,
    init_it: Callable[..., Any],
    args: tuple,
    *,
    link: bool,
    name: str | None,
    timeout: float | None,
    trap_exit: bool,
    dispatcher: str,
    idle_timeouts: tuple = (),
) -> Any:
    """:func:`start` for a behaviour object (a class is instantiated first).

    ``init_it(starter, obj, *args)`` runs in the new process; its initial call
    is recorded as ``(module, "Class.init", 0)``.  ``idle_timeouts`` (such as
    hibernate_after) are checked before anything starts.
    """
    if isinstance(obj, type):
        obj = obj()
    for value in idle_timeouts:
        if value is not None:
            P.check_timeout(value)
    cls = type(obj)
    return start(
        init_it,
        (obj, *args),
        link=link,
        name=name,
        timeout=timeout,
        trap_exit=trap_exit,
        dispatcher=dispatcher,
        initial_call=(cls.__module__, f"{cls.__qualname__}.init", 0),
    )


def _flush_exit(pid: P.Pid) -> None:
    """Drop an ``("EXIT", pid, _)`` the failed start left in a trapping caller's mailbox."""
    P.receive(
        lambda m: m if type(m) is tuple and len(m) == 3 and m[0] == "EXIT" and m[1] is pid else NOMATCH,
        timeout=0,
    )


# --------------------------------------------------------------------------
# call, reply, cast, stop
# --------------------------------------------------------------------------


def call(dest: Any, request: Any, timeout: float | None = 5.0, label: str = CALL) -> Any:
    """Send ``(label, from_, request)`` to ``dest`` and wait for the reply (gen:call).

    Raises :class:`CallError` with ``"noproc"``, ``"calling_self"``,
    ``"timeout"`` or the server's exit reason.  As OTP's, one reference is both
    the monitor of the server and the alias the reply comes to; once the call
    is over the alias is inactive, so a late reply is dropped.
    """
    pid = dest if type(dest) is _Pid else resolve_or_remote(dest)
    if pid is REMOTE_DEST:
        return _call_remote(dest, request, timeout, label)
    if type(pid) is P.RemotePid:  # ("global", name) bound on another node
        return _call_remote(pid, request, timeout, label)
    if pid is None:
        raise CallError("noproc", request)
    try:  # P.me(), inlined for a live process
        me = _getcurrent().ensemble_pid
    except AttributeError:
        me = None
    if me is None or me.dying is not _ALIVE:
        me = P.me()
    if pid is me:
        raise CallError("calling_self", request)
    if type(timeout) is float and 0.0 <= timeout < _FOREVER:  # P.check_timeout's usual case
        deadline = _monotonic() + timeout
    elif timeout is None:
        deadline = None
    else:
        timeout = P.check_timeout(timeout)
        deadline = None if timeout is None else _monotonic() + timeout
    tag = new_alias(me)
    n = tag._n
    with _LOCK:
        alive = pid.reason is _ALIVE
        if alive:  # P.add_monitor_locked and the alias, inlined: this runs on every call
            watchers = pid.watchers
            if watchers is None:
                pid.watchers = watchers = {}
            watchers[n] = (me, pid, tag)
            monitors = me.monitors
            if monitors is None:
                me.monitors = monitors = {}
            monitors[n] = (pid, pid, tag)
            aliases = me.aliases
            if aliases is None:
                me.aliases = aliases = set()
            aliases.add(n)
    if not alive:
        raise CallError("noproc", request)
    P.deliver(pid, (label, (me, tag), request))
    # P.receive_as(me, answer, deadline), specialised: the reply is nearly always the one
    # new message of the first wake, read by index without a matcher call.
    start = 0
    while True:
        if me.dying is not _ALIVE:
            P.raise_doom(me)
        mailbox = me.mailbox  # read again after each park: NO_MAIL gives way to a deque
        k = len(mailbox)
        if k == start + 1:  # one new message: the commonest case
            m = mailbox[start]
            if type(m) is tuple and (
                (len(m) == 2 and m[0] is tag) or (len(m) == 5 and m[1] is tag and m[0] == "DOWN")
            ):
                if start == 0:
                    mailbox.popleft()
                else:
                    del mailbox[start]
                got = m
                break
            start = k
        elif k > start:
            i, got = _scan(mailbox, lambda m: _answers(m, tag), start)
            if i is not None:
                if i == 0:
                    mailbox.popleft()
                else:
                    del mailbox[i]
                break
            start = got
        if deadline is None:
            _park(me, start, None)
        elif deadline <= _monotonic() or _park(me, start, deadline) is TIMEOUT:
            if me.dying is not _ALIVE:
                P.raise_doom(me)
            got = TIMEOUT
            break
    with _LOCK:  # the alias goes inactive and the monitor goes (P.drop_monitor_locked, inlined)
        me.aliases.discard(n)
        held = me.monitors.pop(n, None)
        if held is not None:
            watchers = held[0].watchers
            if watchers is not None:
                watchers.pop(n, None)
    if got is TIMEOUT:
        # a reply may have come between the timeout and the alias going: take it (OTP's after 0)
        late = P.receive(lambda m: m if type(m) is tuple and len(m) == 2 and m[0] is tag else NOMATCH, timeout=0)
        _flush_down(me, tag)
        if late is not TIMEOUT:
            return late[1]
        raise CallError("timeout", request)
    if len(got) == 2:
        if me.mailbox:
            _flush_down(me, tag)
        return got[1]
    raise CallError(got[4], request)


def _answers(m: Any, tag: Alias) -> Any:
    """The matcher of a call's wait: the reply through ``tag``, or the DOWN of its monitor."""
    if type(m) is tuple:
        k = len(m)
        if k == 2 and m[0] is tag:
            return m
        if k == 5 and m[1] is tag and m[0] == "DOWN":
            return m
    return NOMATCH


_scan, _park, _FOREVER = _select.scan, P.park, P.FOREVER

REMOTE_DEST = object()  # resolve_or_remote's answer for a process on another node


def resolve_or_remote(dest: Any) -> Any:
    """:func:`resolve`, or :data:`REMOTE_DEST` for a remote pid or ``(name, other_node)``."""
    if type(dest) is P.RemotePid:
        return REMOTE_DEST
    if type(dest) is tuple and len(dest) == 2 and type(dest[0]) is str and dest[1] != _terms.NODE:
        if dest[0] == "global":  # resolved now: a local pid, or a remote one
            return P.GLOBAL(dest[1]) if P.GLOBAL is not None else None
        return REMOTE_DEST if P.REMOTE is not None else None
    return resolve(dest)


def _call_remote(dest: Any, request: Any, timeout: float | None, label: str) -> Any:
    """:func:`call` to a process on another node: as OTP's, a monitor of the server and an alias
    the reply comes to; a lost connection ends the call with ``"noconnection"``."""
    if timeout is not None:
        timeout = P.check_timeout(timeout)
    me = P.me()
    mref = monitor(dest)
    tag = alias()
    send(dest, (label, (me, tag), request))
    got = P.receive(
        lambda m: m
        if type(m) is tuple and ((len(m) == 2 and m[0] is tag) or (len(m) == 5 and m[1] is mref and m[0] == "DOWN"))
        else NOMATCH,
        timeout=timeout,
    )
    unalias(tag)
    if got is TIMEOUT:
        demonitor(mref, flush=True)
        late = P.receive(lambda m: m if type(m) is tuple and len(m) == 2 and m[0] is tag else NOMATCH, timeout=0)
        if late is not TIMEOUT:
            return late[1]
        raise CallError("timeout", request)
    if len(got) == 2:
        demonitor(mref, flush=True)
        return got[1]
    raise CallError(got[4], request)


def _flush_down(me: P.Pid, ref: Any) -> None:
    """Remove a DOWN for ``ref`` that came before its monitor was dropped (demonitor's flush)."""
    mailbox = me.mailbox
    if mailbox:
        for i, m in enumerate(list(mailbox)):  # only the owner removes: indices hold
            if type(m) is tuple and len(m) == 5 and m[1] is ref and m[0] == "DOWN":
                del mailbox[i]
                return


def reply(from_: tuple, value: Any) -> Any:
    """Answer the call ``from_`` with ``value``, from any process or greenlet; returns ``value``."""
    try:
        tag = from_[1]
    except (TypeError, IndexError):
        raise Badarg(f"not a caller: {from_!r}") from None
    if type(tag) is Alias:  # P.deliver_alias, inlined: every call's reply comes this way
        owner = tag._owner
        aliases = owner.aliases
        if aliases is not None and tag._n in aliases:
            P.deliver(owner, (tag, value))
    else:
        send(tag, (tag, value))
    return value


def cast(dest: Any, request: Any) -> str:
    """Send ``("$gen_cast", request)`` to ``dest``; never fails; answers ``"ok"``."""
    try:
        pid = resolve_or_remote(dest)
    except Badarg:
        return "ok"
    if pid is REMOTE_DEST or type(pid) is P.RemotePid:
        send(dest if pid is REMOTE_DEST else pid, (CAST, request))
    elif pid is not None:
        P.deliver(pid, (CAST, request))
    return "ok"


def stop(dest: Any, reason: Any = "normal", timeout: float | None = None) -> str:
    """Stop a behaviour with ``reason`` and wait until it has exited (proc_lib:stop).

    Answers ``"ok"`` once it exited with exactly ``reason``; raises
    :class:`CallError` with ``"noproc"``, ``"timeout"`` or the reason it
    exited with instead.
    """
    pid = resolve(dest)
    if pid is None or pid.reason is not P.ALIVE:
        raise CallError("noproc", ("terminate", reason))
    me = P.me()
    if pid is me:
        raise CallError("calling_self", ("terminate", reason))
    mref = monitor(pid)
    tag = alias()
    send(pid, (SYSTEM, (me, tag), ("terminate", reason)))
    got = P.receive(
        lambda m: m if type(m) is tuple and len(m) == 5 and m[1] is mref and m[0] == "DOWN" else NOMATCH,
        timeout=timeout,
    )
    unalias(tag)
    if got is TIMEOUT:
        demonitor(mref, flush=True)
        raise CallError("timeout", ("terminate", reason))
    actual = got[4]
    if same(actual, reason):
        return "ok"
    raise CallError(actual, ("terminate", reason))
