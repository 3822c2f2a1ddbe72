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

import time
from typing import Any

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
    _allow.parse(fn)  # a bad name raises BadFunctionName, a Badarg
    if timeout is not None:
        timeout = P.check_timeout(timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    me = P.me()
    ref = _terms.make_ref()
    n = ref._n
    from .dist.functions import resolve as _resolve_function
    from .dist.node import NODE_STATE, RESULT, SPAWNED, _run_remote_call

    if node == _terms.NODE:  # here: no policy, no wire
        target = _resolve_function(fn)
        if target is None:
            raise RpcError("undefined", fn)
        pid = spawn(_run_remote_call, target, args, None, me, n)
    else:
        dist_node = NODE_STATE.node
        if dist_node is None:
            raise RpcError("noconnection")
        dist_node.spawn_request(me, node, fn, args, False, n, True)
        got = P.receive(lambda m: m if _is(m, SPAWNED, n) else NOMATCH, timeout=_left(deadline))
        if got is _terms.TIMEOUT:
            raise RpcError("timeout")
        result = got[2]
        if not (type(result) is tuple and len(result) == 2 and result[0] == "ok"):
            if result == "noconnection":
                raise RpcError("noconnection")
            raise RpcError(result[0], result[1])
        pid = result[1]
    mref = monitor(pid)
    got = P.receive(
        lambda m: m if _is(m, RESULT, n) or (type(m) is tuple and len(m) == 5 and m[1] is mref and m[0] == "DOWN")
        else NOMATCH,
        timeout=_left(deadline),
    )
    if got is _terms.TIMEOUT:
        _exit_signal(pid, "kill")
        demonitor(mref, flush=True)
        P.receive(lambda m: m if _is(m, RESULT, n) else NOMATCH, timeout=0)  # one that raced the kill
        raise RpcError("timeout")
    if got[0] == "DOWN":  # it ended without an answer: a kill, or its node went down
        late = P.receive(lambda m: m if _is(m, RESULT, n) else NOMATCH, timeout=0)
        if late is _terms.TIMEOUT:
            reason = got[4]
            raise RpcError("noconnection" if reason == "noconnection" else "exit", reason)
        got = late
    else:
        demonitor(mref, flush=True)
    kind, value = got[2]
    if kind == "ok":
        return value
    raise RpcError(kind, value)


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
    """:func:`call` on each node, in order: ``[("ok", value) | ("error", RpcError), ...]``;
    ``timeout`` bounds the whole."""
    deadline = None if timeout is None else time.monotonic() + P.check_timeout(timeout)  # type: ignore[operator]
    out: list[tuple[str, Any]] = []
    for node in nodes:
        try:
            out.append(("ok", call(node, fn, *args, timeout=_left(deadline))))
        except RpcError as err:
            out.append(("error", err))
    return out


def _is(m: Any, tag: str, n: int) -> bool:
    return type(m) is tuple and len(m) == 3 and m[0] == tag and m[1] == n


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
