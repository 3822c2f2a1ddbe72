"""rpc: run a function on another node and get its result (Erlang's erpc/rpc).

::

    from ensemble import rpc
    rpc.call("billing@host", "billing.ledger:balance", 42, timeout=5)

The function is named ``"module:function"`` and runs in a process of its own on ``node``, if
that node's ``allow`` lets it in (:func:`ensemble.dist.start`); on this node it always runs.
As erpc's, :func:`call` raises :class:`RpcError` with a typed ``kind``:

==================  ===============================================================
``"exception"``     it raised; ``reason`` is the exception (a ``RemoteError`` from
                    another node: its type's name, message and args)
``"exit"``          it exited (``exit(reason)``) or was killed; ``reason`` says how
``"noconnection"``  the node cannot be reached, or went down before the answer
``"timeout"``       no answer in time: the process running it is killed
``"not_allowed"``   the node's ``allow`` does not let the function in
``"undefined"``     the node has no such function
==================  ===============================================================
"""

from __future__ import annotations

from typing import Any

from . import _names
from . import _process as P
from . import _terms
from ._exceptions import EnsembleError
from ._links import demonitor, exit as _exit_signal, monitor
from ._spawn import spawn
from .decide import allow as _allow
from .decide.receive import NOMATCH

__all__ = ["call", "cast", "multicall", "RpcError"]


class RpcError(EnsembleError):
    """An rpc that did not answer a value: ``kind`` (see the module docstring) and ``reason``."""

    def __init__(self, kind: str, reason: Any = None) -> None:
        super().__init__(f"rpc failed: {kind}" + (f": {reason!r}" if reason is not None else ""))
        self.kind = kind
        self.reason = reason


def call(node: str, fn: str, *args: Any, timeout: float | None = None) -> Any:
    """Run ``fn(*args)`` on ``node`` in a process of its own and answer its result; raises
    :class:`RpcError` (see the module docstring).  ``timeout`` in seconds, None: no limit."""
    (request,) = _requests([node], fn, args, timeout)
    kind, value = request.outcome
    if kind == "ok":
        return value
    raise value


class _Request:
    """One node's part of a call or multicall: its request number ``n``, the pid running the
    function once known (and the monitor of it), and ``outcome`` once settled:
    ``("ok", value)`` or ``("error", RpcError)``."""

    __slots__ = ("node", "n", "pid", "mref", "outcome", "timed_out")

    def __init__(self, node: str, n: int) -> None:
        self.node = node
        self.n = n
        self.pid: Any = None
        self.mref: Any = None
        self.outcome: tuple[str, Any] | None = None
        self.timed_out = False  # settled by the deadline


def _requests(nodes: list[str], fn: str, args: tuple, timeout: Any) -> list[_Request]:
    """``fn(*args)`` on each of ``nodes`` at once, every outcome settled within ``timeout`` seconds
    (None: no limit), one deadline for them all.  A bad function name raises
    :class:`BadFunctionName` (a Badarg), a bad timeout Badarg, before anything is sent.

    The results come through an alias of the caller's, made for these requests and given up at
    the end, so a result that comes too late is dropped, never left in the caller's mailbox; a
    request whose spawn is still unanswered at the deadline is abandoned (the process is killed
    when the answer comes, and the answer dropped), as erpc's ``spawn_request_abandon``."""
    from .dist.node import NODE_STATE

    _allow.parse(fn)
    deadline = P.deadline_of(timeout)
    a = _names.alias()
    requests: list[_Request] = []
    try:
        for node in nodes:
            requests.append(_send_request(node, fn, args, a))
        return _collect(requests, deadline)
    finally:
        _names.unalias(a)
        dist_node = NODE_STATE.node
        me = P.me()
        for r in requests:
            if r.timed_out and r.pid is None and r.node != _terms.NODE and dist_node is not None:
                dist_node.abandon_spawn(me, r.n, r.node)


def _send_request(node: str, fn: str, args: tuple, reply_to: Any) -> _Request:
    """Start ``fn(*args)`` on ``node`` for the running process, without waiting for anything:
    here it is spawned and monitored at once; another node is sent a spawn request, whose
    answer (and then the result, through the alias ``reply_to``) :func:`_collect` takes."""
    from .dist.functions import resolve as _resolve_function
    from .dist.node import NODE_STATE, _run_remote_call

    me = P.me()
    request = _Request(node, _terms.make_ref()._n)
    if node == _terms.NODE:  # here: no policy, no wire
        target = _resolve_function(fn)
        if target is None:
            request.outcome = ("error", RpcError("undefined", fn))
        else:
            request.pid = spawn(_run_remote_call, target, args, None, reply_to, request.n)
            request.mref = monitor(request.pid)
        return request
    dist_node = NODE_STATE.node
    if dist_node is None:
        request.outcome = ("error", RpcError("noconnection"))
    else:
        dist_node.spawn_request(me, node, fn, args, False, request.n, reply_to)
    return request


def _collect(requests: list[_Request], deadline: float | None) -> list[_Request]:
    """Wait, until ``deadline`` (monotonic; None: no limit), for the outcome of every request
    sent by :func:`_send_request`, in whatever order they come; those still unsettled at the
    deadline time out (a process running the function is killed).  Answers ``requests``."""
    from .dist.node import RESULT, SPAWNED

    waiting = {r.n: r for r in requests if r.outcome is None}
    by_mref = {id(r.mref): r for r in waiting.values() if r.mref is not None}

    def match(m: Any) -> Any:
        if type(m) is not tuple:
            return NOMATCH
        if len(m) == 3 and type(m[1]) is int and (m[0] == SPAWNED or m[0] == RESULT):
            r = waiting.get(m[1])
            # a spawn answer while the pid is unknown; a result once it is (it comes after)
            if r is not None and (r.pid is None) == (m[0] == SPAWNED):
                return m
        elif len(m) == 5 and m[0] == "DOWN":
            r = by_mref.get(id(m[1]))
            if r is not None and r.mref is m[1]:
                return m
        return NOMATCH

    while waiting:
        got = P.receive(match, timeout=P.time_left(deadline))
        if got is _terms.TIMEOUT:
            break
        if got[0] == "DOWN":
            r = by_mref.pop(id(got[1]))
        else:
            r = waiting[got[1]]
        if got[0] == SPAWNED:
            result = got[2]
            if type(result) is tuple and len(result) == 2 and result[0] == "ok":
                r.pid = result[1]
                r.mref = monitor(r.pid)
                by_mref[id(r.mref)] = r
                continue
            if result == "noconnection":
                r.outcome = ("error", RpcError("noconnection"))
            else:
                r.outcome = ("error", RpcError(result[0], result[1]))
        elif got[0] == "DOWN":  # it ended without an answer: a kill, or its node went down
            late = P.receive(lambda m: m if _is(m, RESULT, r.n) else NOMATCH, timeout=0)
            if late is _terms.TIMEOUT:
                reason = got[4]
                r.outcome = ("error", RpcError("noconnection" if reason == "noconnection" else "exit", reason))
            else:
                r.outcome = _outcome(late[2])
        else:  # RESULT
            by_mref.pop(id(r.mref), None)
            demonitor(r.mref, flush=True)
            r.outcome = _outcome(got[2])
        del waiting[r.n]
    for r in waiting.values():  # the deadline passed
        if r.pid is not None:
            _exit_signal(r.pid, "kill")
            demonitor(r.mref, flush=True)
            P.receive(lambda m: m if _is(m, RESULT, r.n) else NOMATCH, timeout=0)  # one that raced the kill
        r.outcome = ("error", RpcError("timeout"))
        r.timed_out = True
    return requests


def _outcome(answer: tuple) -> tuple[str, Any]:
    """A function's ``(kind, value)`` as a request's outcome."""
    kind, value = answer
    return ("ok", value) if kind == "ok" else ("error", RpcError(kind, value))


def cast(node: str, fn: str, *args: Any) -> bool:
    """Run ``fn(*args)`` on ``node`` without waiting (rpc:cast); answers True, whatever happens."""
    _allow.parse(fn)  # a bad name raises BadFunctionName, a Badarg
    from .dist.functions import resolve as _resolve_function
    from .dist.node import NODE_STATE, _run_remote_call

    if node == _terms.NODE:
        target = _resolve_function(fn)
        if target is not None:
            spawn(_run_remote_call, target, args, None, None, 0)
        return True
    dist_node = NODE_STATE.node
    if dist_node is not None:
        dist_node.spawn_request(P.me(), node, fn, args, False, 0, False)
    return True


def multicall(nodes: list[str], fn: str, *args: Any, timeout: float | None = None) -> list[tuple[str, Any]]:
    """:func:`call` on each node, all at once (erpc:multicall): ``[("ok", value) |
    ("error", RpcError), ...]`` in the order of ``nodes``.  Every request is sent before any
    answer is awaited, so ``timeout`` is one deadline for the whole: a slow node takes no time
    from the others."""
    return [r.outcome for r in _requests(nodes, fn, args, timeout)]  # type: ignore[misc]


def _is(m: Any, tag: str, n: int) -> bool:
    return type(m) is tuple and len(m) == 3 and m[0] == tag and m[1] == n


