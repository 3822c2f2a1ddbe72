"""gen_server: a process that serves calls, casts and messages through callbacks (OTP's gen_server).

A server is an object with ``init()``, ``handle_call(request, from_, state)``,
``handle_cast(request, state)``, ``handle_info(msg, state)``,
``handle_continue(continue_, state)``, ``handle_timeout(state)``,
``terminate(reason, state)`` and optionally ``format_status(status)``;
subclass :class:`GenServer` for OTP's defaults.  Returns are OTP's tuples
(see :mod:`ensemble.decide.gen_server`, which decides what each means)::

    class Counter(GenServer):
        def init(self):
            return ("ok", 0)

        def handle_call(self, request, from_, n):
            match request:
                case "get":
                    return ("reply", n, n)
                case ("add", k):
                    return ("reply", n + k, n + k)

    pid = gen_server.start(Counter(), name="counter")
    gen_server.call("counter", ("add", 2))      # 2

The loop: a pending ``("continue", c)`` runs before any message; a returned
timeout runs ``handle_timeout`` (or ``handle_info("timeout", state)`` when
the server has no ``handle_timeout``) unless a message comes first;
``"hibernate"`` hibernates at once.  A callback that raises makes the server
run ``terminate`` with the exception and exit with it; a bad return stops it
with ``("bad_return_value", ret)``.  A server trapping exits whose parent
exits runs ``terminate`` with the parent's reason.  Abnormal ends are
reported through :mod:`ensemble.logger`.
"""

from __future__ import annotations

from typing import Any

from . import _gen
from . import _process as P
from . import _sysmsg
from .decide import gen_server as cb
from . import logger as _logger
from .decide import request as _request
from ._exceptions import Badarg, Exit, StartError
from ._links import demonitor, monitor
from ._names import alias, send, unalias
from ._passivate import passivate
from ._spawn import hibernate
from . import _terms
from ._terms import TIMEOUT
from .decide.receive import NOMATCH
from .decide.signal import is_shutdown

__all__ = [
    "GenServer",
    "start",
    "start_link",
    "call",
    "cast",
    "reply",
    "stop",
    "enter_loop",
    "send_request",
    "wait_response",
    "receive_response",
    "check_response",
    "reqids_new",
    "reqids_add",
    "reqids_size",
    "reqids_to_list",
    "multi_call",
    "abcast",
]

call = _gen.call
reply = _gen.reply
cast = _gen.cast
stop = _gen.stop


class GenServer:
    """A base class with OTP's default callbacks; override what the server needs."""

    def init(self) -> Any:
        """Answer ``("ok", state)`` and friends; the default state is None."""
        return ("ok", None)

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        """Unhandled calls stop the server with ``("bad_call", request)``."""
        return ("stop", ("bad_call", request), state)

    def handle_cast(self, request: Any, state: Any) -> Any:
        """Unhandled casts stop the server with ``("bad_cast", request)``."""
        return ("stop", ("bad_cast", request), state)

    def handle_info(self, msg: Any, state: Any) -> Any:
        """Unexpected messages are dropped."""
        return ("noreply", state)

    def handle_continue(self, continue_: Any, state: Any) -> Any:
        """Unhandled continues stop the server with ``("bad_continue", continue_)``."""
        return ("stop", ("bad_continue", continue_), state)

    def terminate(self, reason: Any, state: Any) -> Any:
        """Nothing to clean up by default."""
        return None


# --------------------------------------------------------------------------
# Starting
# --------------------------------------------------------------------------


def start(
    server: Any,
    *,
    name: str | None = None,
    timeout: float | None = None,
    trap_exit: bool = False,
    hibernate_after: float | None = None,
    passivate_after: float | None = None,
    dispatcher: str = "default",
) -> Any:
    """Start a server process and return its pid once ``init`` has returned.

    Answers ``"ignore"`` when init ignores; raises :class:`ensemble.StartError`
    with ``("already_started", pid)`` for a taken name, ``"timeout"`` when
    init takes longer than ``timeout`` seconds (the process is killed), or
    init's failure reason.  ``server`` is an instance, or a class to
    instantiate with no arguments.
    """
    return _start(server, False, name, timeout, trap_exit, hibernate_after, passivate_after, dispatcher)


def _named_server(server: Any, name: str) -> Any:
    """The pid registered as ``name``, starting ``server`` under it unless one runs: a node's
    own service (pg's scope, global's registrar), which callers may start at once from many
    processes; the one that loses the race gets the winner's pid."""
    pid = P.NAMES.get(name)
    if pid is not None:
        return pid
    try:
        return start(server, name=name)
    except StartError as err:
        reason = err.reason
        if type(reason) is tuple and len(reason) == 2 and reason[0] == "already_started":
            return reason[1]
        raise


def start_link(
    server: Any,
    *,
    name: str | None = None,
    timeout: float | None = None,
    trap_exit: bool = False,
    hibernate_after: float | None = None,
    passivate_after: float | None = None,
    dispatcher: str = "default",
) -> Any:
    """:func:`start`, linked to the caller; a failed start does not take the caller down."""
    return _start(server, True, name, timeout, trap_exit, hibernate_after, passivate_after, dispatcher)


def _start(
    server: Any,
    link: bool,
    name: str | None,
    timeout: float | None,
    trap_exit: bool,
    hibernate_after: float | None,
    passivate_after: float | None,
    dispatcher: str,
) -> Any:
    return _gen.start_behaviour(
        server,
        _init_it,
        (name, hibernate_after, passivate_after),
        link=link,
        name=name,
        timeout=timeout,
        trap_exit=trap_exit,
        dispatcher=dispatcher,
        idle_timeouts=(hibernate_after, passivate_after),
    )


class _Server:
    """The loop's state: what the server is, its state, and what to do next."""

    __slots__ = (
        "server",
        "state",
        "action",
        "parent",
        "name",
        "hibernate_after",
        "passivate_after",
        "debug",
        "last",
        "pid",
        "has_timeout",
    )

    def __init__(self, server: Any, parent: Any, name: Any, hib: Any, pas: Any) -> None:
        self.server = server
        self.state: Any = None
        self.action: Any = cb.WAIT_FOREVER
        self.parent = parent
        self.name = name
        self.hibernate_after = hib
        self.passivate_after = pas
        self.debug = _sysmsg.Debug()
        self.last: Any = None
        self.pid = P.me()
        self.has_timeout = hasattr(server, "handle_timeout")

    # -- sys hooks ---------------------------------------------------------------

    def system_get_state(self) -> Any:
        return self.state

    def system_replace_state(self, fn: Any) -> Any:
        self.state = fn(self.state)
        return self.state

    def system_get_status(self) -> dict:
        return {
            "pid": self.pid,
            "name": self.name,
            "module": type(self.server).__qualname__,
            "parent": self.parent,
            "state": _format_status(self, {"state": self.state})["state"],
        }

    def system_terminate(self, reason: Any) -> None:
        _terminate(self, reason, ("system", ("terminate", reason)))


def _init_it(starter: _gen.Starter, server: Any, name: Any, hib: Any, pas: Any) -> None:
    """The new process: run init, acknowledge the starter, enter the loop.

    The parent is the starter for start_link, and the process itself for an
    unlinked start (OTP's gen: ``Parent = self``), so only a linking starter's
    EXIT stops a trapping server.
    """
    srv = _Server(server, starter.pid if starter.linked else P.me(), name, hib, pas)
    try:
        ret = server.init()
    except Exit as e:
        _gen.init_fail(starter, ("error", e.reason), e.reason)
    except Exception as e:  # a crash in init fails the start with the exception
        _gen.init_fail(starter, ("error", e), e, e)
    outcome = cb.interpret_init(ret)
    if type(outcome) is cb.Start:
        srv.state = outcome.state
        srv.action = outcome.action
        _gen.init_ack(starter, ("ok", srv.pid))
        _loop(srv)
    elif type(outcome) is cb.InitStop:
        _gen.init_fail(starter, ("error", outcome.reason), outcome.reason)
    elif type(outcome) is cb.InitError:
        _gen.init_fail(starter, ("error", outcome.reason), "normal")
    elif type(outcome) is cb.Ignore:
        _gen.init_fail(starter, "ignore", "normal")
    else:
        _gen.init_fail(starter, ("error", outcome.reason), outcome.reason)


def enter_loop(
    server: Any,
    state: Any,
    action: Any = cb.WAIT_FOREVER,
    *,
    name: str | None = None,
    hibernate_after: float | None = None,
) -> None:
    """Make the calling process a server with ``state`` (gen_server:enter_loop); never returns.

    With ``name`` the process must already be registered under it, else it
    exits with ``"process_not_registered"``.  A bad action exits with
    ``("bad_return_value", action)``.
    """
    me = P.me()
    if name is not None and P.NAMES.get(name) is not me:
        raise Exit("process_not_registered")
    if not isinstance(action, (cb.Wait, cb.Hibernate, cb.Continue)):
        parsed = cb.action_of(action)
        if not isinstance(parsed, (cb.Wait, cb.Hibernate, cb.Continue)):
            raise Exit(("bad_return_value", action))
        action = parsed
    parent = me.ancestors[0] if me.ancestors else me
    srv = _Server(server, parent, name, hibernate_after, None)
    srv.state = state
    srv.action = action
    _loop(srv)


# --------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------


def _take_any(m: Any) -> Any:
    return m


def _loop(srv: _Server) -> None:
    """Serve until a callback stops the server (the only place that receives)."""
    p = srv.pid
    receive, receive_as = P.receive, P.receive_as
    debug = srv.debug
    while True:
        action = srv.action
        t = type(action)
        if t is cb.Continue:
            srv.action = cb.WAIT_FOREVER
            _dispatch(srv, "continue", action.continue_, None)
            continue
        if t is cb.Hibernate:
            srv.action = cb.WAIT_FOREVER
            hibernate(_loop, srv)
        timeout = action.timeout
        idle = None
        if timeout is None and (srv.hibernate_after is not None or srv.passivate_after is not None):
            idle = srv.passivate_after if srv.passivate_after is not None else srv.hibernate_after
            timeout = idle
        if debug.suspended:
            msg = receive(_sysmsg.suspended_matcher(srv.parent, p.trap))
        elif timeout is None:
            msg = receive_as(p, None, None)
        else:
            msg = receive(timeout=timeout)
        if msg is TIMEOUT:
            if idle is not None:
                if srv.passivate_after is not None:
                    passivate(_loop, srv)  # refused: stays hibernated in memory
                hibernate(_loop, srv)
            srv.action = cb.WAIT_FOREVER
            if srv.has_timeout:
                _dispatch(srv, "timeout", None, "timeout")
            else:
                _dispatch(srv, "info", "timeout", "timeout")
            continue
        if type(msg) is tuple and len(msg) == 3 and type(msg[0]) is str and msg[0] == _CALL:
            _dispatch(srv, "call", msg[2], msg, msg[1])  # _decode's first case, asked here
        else:
            _decode(srv, msg)


_CALL = _gen.CALL


def _decode(srv: _Server, msg: Any) -> None:
    """Hand one message to the right callback (gen_server's decode_msg)."""
    n = len(msg) if type(msg) is tuple else 0
    if n:
        tag = msg[0]
        if n == 3 and type(tag) is str:
            if tag == _gen.CALL:
                _dispatch(srv, "call", msg[2], msg, msg[1])
                return
            if tag == _gen.SYSTEM:
                _sysmsg.handle(srv.debug, msg[1], msg[2], srv)
                return
            if tag == "EXIT" and msg[1] is srv.parent and srv.pid.trap:
                _terminate(srv, msg[2], msg)
        elif n == 2 and type(tag) is str and tag == _gen.CAST:
            _dispatch(srv, "cast", msg[1], msg)
            return
    _dispatch(srv, "info", msg, msg)


def _dispatch(srv: _Server, kind: str, arg: Any, msg: Any, from_: Any = None) -> None:
    """Run one callback, interpret its return (ensemble.decide.gen_server) and carry it out."""
    srv.last = msg
    debug = srv.debug
    if debug.stats is not None or debug.trace:
        _sysmsg.observed(debug, srv.pid, (kind, arg))
    server = srv.server
    try:
        if kind == "call":
            ret = server.handle_call(arg, from_, srv.state)
        elif kind == "cast":
            ret = server.handle_cast(arg, srv.state)
        elif kind == "info":
            ret = server.handle_info(arg, srv.state)
        elif kind == "continue":
            ret = server.handle_continue(arg, srv.state)
        else:
            ret = server.handle_timeout(srv.state)
    except Exit as e:
        _terminate(srv, e.reason, msg)
    except Exception as e:  # a crash in a callback: terminate with the exception
        _terminate(srv, e, msg)
    fast = cb.plain(kind, ret)
    if fast is not None:  # ("reply", r, s) from a call, or ("noreply", s): no answer object
        answer, state = fast
        if answer is not cb.NO_REPLY:
            _gen.reply(from_, answer)
        srv.state = state
        srv.action = cb.WAIT_FOREVER
        return
    outcome = cb.interpret(kind, ret)
    t = type(outcome)
    if t is cb.Reply:
        _gen.reply(from_, outcome.reply)
        srv.state = outcome.state
        srv.action = outcome.action
    elif t is cb.NoReply:
        srv.state = outcome.state
        srv.action = outcome.action
    elif t is cb.Stop:
        srv.state = outcome.state
        _terminate(srv, outcome.reason, msg)
    elif t is cb.StopReply:
        srv.state = outcome.state
        try:
            _terminate(srv, outcome.reason, msg)
        finally:
            _gen.reply(from_, outcome.reply)
    else:
        _terminate(srv, outcome.reason, msg)


def _terminate(srv: _Server, reason: Any, msg: Any) -> None:
    """Run ``terminate(reason, state)``, report an abnormal end, and exit; never returns."""
    fn = getattr(srv.server, "terminate", None)
    if fn is not None:
        try:
            fn(reason, srv.state)
        except Exit as e:
            reason = e.reason
        except Exception as e:  # terminate's own crash becomes the exit reason
            reason = e
    if not is_shutdown(reason):
        status = _format_status(srv, {"state": srv.state, "message": msg, "reason": reason})
        _logger.report(
            "gen_server_terminate",
            pid=repr(srv.pid),
            name=srv.name,
            last_message=_shown_message(status.get("message", msg)),
            state=status.get("state"),
            reason=status.get("reason", reason),
        )
    raise Exit(reason)


def _shown_message(msg: Any) -> Any:
    """A call is shown as ``("call", request)``, a cast as ``("cast", request)``."""
    if type(msg) is tuple and msg:
        if len(msg) == 3 and msg[0] == _gen.CALL:
            return ("call", msg[2])
        if len(msg) == 2 and msg[0] == _gen.CAST:
            return ("cast", msg[1])
    return msg


def _format_status(srv: _Server, status: dict) -> dict:
    """``format_status(status)`` if the server has one; the status as is if it raises."""
    fn = getattr(srv.server, "format_status", None)
    if fn is None:
        return status
    try:
        shown = fn(dict(status))
        return shown if isinstance(shown, dict) else status
    except Exception:  # noqa: BLE001 - OTP shows the unformatted status then
        return status


# --------------------------------------------------------------------------
# Asynchronous requests
# --------------------------------------------------------------------------

ReqId = _request.ReqId
ReqIdCollection = _request.ReqIdCollection


def send_request(dest: Any, request: Any, label: Any = None, collection: Any = None) -> Any:
    """Send a call without waiting (gen_server:send_request); answers a request id.

    With ``label`` and ``collection``, answers the collection with the request
    added under that label.  A request to a name nobody holds gets its
    ``"noproc"`` error at once when the response is read.
    """
    me = P.me()
    tag = alias()
    pid = _gen.resolve_or_remote(dest)
    if pid is _gen.REMOTE_DEST:  # on another node: the monitor and the request cross
        mref = monitor(dest)
        send(dest, (_gen.CALL, (me, tag), request))
    else:
        mref = monitor(pid if pid is not None else dest)  # a name nobody holds: "noproc" at once
        if pid is not None:
            send(pid, (_gen.CALL, (me, tag), request))
    req = _request.ReqId(tag, mref, dest)
    if collection is None:
        return req
    return collection.add(req, label)


def _finish(req: ReqId) -> None:
    unalias(req.alias)
    demonitor(req.mref, flush=True)


def _await(req: Any, timeout: float | None, delete: bool, abandon: bool) -> Any:
    if timeout is not None:
        timeout = P.check_timeout(timeout)
    if isinstance(req, _request.ReqIdCollection):
        if not len(req):
            return _request.NO_REQUEST

        def matcher(m: Any) -> Any:
            got = _request.check_collection(m, req, delete)
            return NOMATCH if type(got) is str else got

        got = P.receive(matcher, timeout=timeout)
        if got is TIMEOUT:
            if not abandon:
                return "timeout"
            for r in req:
                _finish(r)
            got = P.receive(matcher, timeout=0)  # a reply that came before the aliases went
            if got is TIMEOUT:
                return "timeout"
        answer, label, rest = got
        _finish_answered(req, rest, delete)
        return (answer, label, rest)

    def one(m: Any) -> Any:
        got = _request.check(m, req)
        return NOMATCH if type(got) is str else got

    got = P.receive(one, timeout=timeout)
    if got is TIMEOUT:
        if not abandon:
            return "timeout"
        _finish(req)
        got = P.receive(one, timeout=0)  # a reply that came before the alias went (OTP's after 0)
        return "timeout" if got is TIMEOUT else got
    _finish(req)
    return got


def _finish_answered(coll: ReqIdCollection, rest: ReqIdCollection, delete: bool) -> None:
    """Release the alias and monitor of the request just answered (the one not in ``rest``)."""
    if delete:
        for r in coll:
            if r not in rest:
                _finish(r)


def wait_response(req: Any, timeout: float | None = None, delete: bool = True) -> Any:
    """Wait for the answer to a request id or collection; ``"timeout"`` keeps the request.

    Answers ``("reply", value)`` or ``("error", (reason, server))`` for a
    request id, ``(answer, label, rest)`` or ``"no_request"`` for a collection.
    """
    return _await(req, timeout, delete, abandon=False)


def receive_response(req: Any, timeout: float | None = None, delete: bool = True) -> Any:
    """:func:`wait_response`, but a timeout abandons the request: a late reply is dropped."""
    return _await(req, timeout, delete, abandon=True)


def check_response(msg: Any, req: Any, delete: bool = True) -> Any:
    """What ``msg`` (already received) answers: a reply, an error, ``"no_reply"``, ``"no_request"``."""
    if isinstance(req, _request.ReqIdCollection):
        got = _request.check_collection(msg, req, delete)
        if type(got) is tuple:
            _finish_answered(req, got[2], delete)
        return got
    got = _request.check(msg, req)
    if type(got) is tuple:
        _finish(req)
    return got


def reqids_new() -> ReqIdCollection:
    """An empty request id collection."""
    return _request.ReqIdCollection()


def reqids_add(req: ReqId, label: Any, collection: ReqIdCollection) -> ReqIdCollection:
    """``collection`` with ``req`` added under ``label``."""
    return collection.add(req, label)


def reqids_size(collection: ReqIdCollection) -> int:
    """How many requests ``collection`` holds."""
    return len(collection)


def reqids_to_list(collection: ReqIdCollection) -> list:
    """``[(req, label), ...]`` of ``collection``."""
    return collection.to_list()


# --------------------------------------------------------------------------
# Many servers at once (the local node for now)
# --------------------------------------------------------------------------


def multi_call(name: str, request: Any, nodes: list | None = None, timeout: float | None = None) -> tuple:
    """Call the server registered as ``name`` on each node; answers ``(replies, bad_nodes)``.

    ``replies`` is ``[(node, reply), ...]``; a node where nobody holds the name, that cannot be
    reached, whose server fails, or that has not answered by ``timeout`` (one deadline for the
    whole call: every request is sent first, as OTP's) is a bad node.  ``nodes`` defaults to this
    node and every node it is connected to (OTP's ``[node() | nodes()]``).
    """
    if type(name) is not str:
        raise Badarg(f"multi_call needs a registered name, not {name!r}")
    deadline = P.deadline_of(timeout)
    replies, bad = [], []
    reqs = []
    for node in nodes if nodes is not None else _known_nodes():
        if node == _terms.NODE and P.NAMES.get(name) is not None:
            reqs.append((node, send_request(name, request)))
        elif node != _terms.NODE and P.REMOTE is not None and type(node) is str:
            reqs.append((node, send_request((name, node), request)))
        else:
            bad.append(node)
    for node, req in reqs:
        got = receive_response(req, P.time_left(deadline))
        if type(got) is tuple and got[0] == "reply":
            replies.append((node, got[1]))
        else:
            bad.append(node)
    return replies, bad


def abcast(name: str, request: Any, nodes: list | None = None) -> str:
    """Cast ``request`` to the server registered as ``name`` on each node (default: this one and
    every connected node); answers ``"abcast"``."""
    for node in nodes if nodes is not None else _known_nodes():
        cast((name, node), request)
    return "abcast"


def _known_nodes() -> list[str]:
    """This node and the nodes it is connected to (``[node() | nodes()]``)."""
    if P.REMOTE is None:
        return [_terms.NODE]
    from . import dist

    return [_terms.NODE, *dist.nodes()]

