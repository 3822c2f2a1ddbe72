"""gen_event: an event manager whose handlers are added and removed at run time (OTP's gen_event).

The manager is a process; each handler is an object living inside it with a
state of its own.  Every event goes to every handler, in the order they were
added::

    class Counter(gen_event.Handler):
        def init(self, start):
            return ("ok", start)

        def handle_event(self, event, n):
            return ("ok", n + 1)

        def handle_call(self, request, n):
            return ("ok", n, n)                  # ("ok", reply, state)

    mgr = gen_event.start_link(name="events")
    gen_event.add_handler(mgr, "counter", Counter(), 0)
    gen_event.notify("events", "something happened")
    gen_event.call(mgr, "counter", "how_many")   # 1

A handler is any object with ``init(args)``, ``handle_event(event, state)``,
``handle_call(request, state)``, optional ``handle_info(msg, state)`` and
``terminate(arg, state)``; :class:`Handler` has defaults.  It is added under a
``handler_id``: any label, compared with ``==`` (OTP's ``Module`` or
``{Module, Id}``).  Returns (decided by :func:`interpret_handler_return`):

* ``init(args)``: ``("ok", state)``, ``("ok", state, "hibernate")``, or
  ``("error", reason)`` to refuse;
* ``handle_event`` / ``handle_info``: ``("ok", state)``,
  ``("ok", state, "hibernate")``, ``"remove_handler"``, or
  ``("swap_handler", arg, state, new_id, new_handler)``;
* ``handle_call``: ``("ok", reply, state)``, ``("ok", reply, state,
  "hibernate")``, ``("remove_handler", reply)``, or ``("swap_handler", reply,
  arg, state, new_id, new_handler)``;
* ``terminate(arg, state)``: anything; :func:`delete_handler` answers it.

A swap runs the old handler's ``terminate(arg, state)`` and hands what it
returned to the new handler's ``init``, which takes the old one's place in the
order (OTP passes ``{Args2, Result}``; a handler here is an object, so what
OTP's ``Args2`` carries is set on the new handler before it is handed over).

A handler that raises, or returns anything else, is removed with
``terminate(("error", reason), state)``, ``reason`` being the exception (an
``exit(r)``'s ``r``) or ``("bad_return_value", ret)``, and reported
(``gen_event_terminate``); the manager and the other handlers carry on.  An
exception inside ``terminate`` is ignored: its result is then ``("EXIT", e)``.
``"remove_handler"`` runs ``terminate("remove_handler", state)``.

The manager is a :class:`~ensemble.gen_server.GenServer` run by gen_server,
so :mod:`ensemble.sys` works on it (its state is a tuple of
:class:`Installed`, one per handler), and it always traps exits.  Messages
that are not the manager's own go to each handler's ``handle_info``; an
``("EXIT", pid, reason)`` from an owner first removes its supervised handlers.

Every decision (what a return means, which handler an id names, whether a
swap is refused, who owns what, who is told and reported what) is a pure
function of :mod:`ensemble.decide.gen_event`; the manager below only carries out
its answers.  The return forms and :func:`interpret_handler_return` are
re-exported here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import _gen
from . import _process as P
from .decide import gen_event as _decide
from . import gen_server
from . import logger as _logger
from ._exceptions import EnsembleError, Exit
from ._links import link, unlink
from ._names import send
from .decide.gen_event import KINDS, Bad, Ok, Refuse, Remove, Reply, Swap, interpret_handler_return

__all__ = [
    "HandlerError",
    "Handler",
    "Installed",
    "start",
    "start_link",
    "add_handler",
    "add_sup_handler",
    "delete_handler",
    "swap_handler",
    "swap_sup_handler",
    "notify",
    "sync_notify",
    "call",
    "which_handlers",
    "stop",
    "KINDS",
    "Ok",
    "Reply",
    "Remove",
    "Swap",
    "Refuse",
    "Bad",
    "interpret_handler_return",
]


class HandlerError(EnsembleError):
    """A handler operation failed; ``reason`` says why (what OTP answers as ``{error, Reason}``).

    ``"already_added"`` (add or swap to a taken id), ``"module_not_found"``
    (:func:`delete_handler` of no such handler), ``"bad_module"``
    (:func:`call` to no such handler), a refusing ``init``'s reason, the
    exception a handler raised, or ``("bad_return_value", ret)``.
    """

    def __init__(self, reason: Any) -> None:
        super().__init__(reason)
        self.reason = reason

    def __repr__(self) -> str:
        return f"HandlerError({self.reason!r})"


class Handler:
    """A base class with defaults: state is init's argument, events and messages are ignored."""

    def init(self, args: Any) -> Any:
        """Answer ``("ok", args)``: the state is what add_handler passed."""
        return ("ok", args)

    def handle_event(self, event: Any, state: Any) -> Any:
        """Events are ignored."""
        return ("ok", state)

    def handle_call(self, request: Any, state: Any) -> Any:
        """Unhandled calls remove the handler with ``("bad_call", request)`` as the crash reason."""
        raise Exit(("bad_call", request))

    def handle_info(self, msg: Any, state: Any) -> Any:
        """Other messages are ignored."""
        return ("ok", state)

    def terminate(self, arg: Any, state: Any) -> Any:
        """Nothing to clean up; delete_handler answers None."""
        return None


# --------------------------------------------------------------------------
# Starting and the client API
# --------------------------------------------------------------------------


class Installed(NamedTuple):
    """One handler in a manager: its id, the object, its state, and its owner (a pid or None)."""

    id: Any
    handler: Any
    state: Any
    owner: Any


def start(
    *,
    name: str | None = None,
    handlers: Any = (),
    timeout: float | None = None,
    dispatcher: str = "default",
) -> Any:
    """Start an event manager and answer its pid.

    ``handlers`` are added in order before start returns: ``(id, handler)``
    or ``(id, handler, args)`` each.  One that fails makes start raise
    :class:`ensemble.StartError` with ``("handler_failed", id, reason)`` (the
    handlers already added are terminated with ``"stop"``); a taken name or a
    slow start fail as gen_server's do.
    """
    return _start(False, name, handlers, timeout, dispatcher)


def start_link(
    *,
    name: str | None = None,
    handlers: Any = (),
    timeout: float | None = None,
    dispatcher: str = "default",
) -> Any:
    """:func:`start`, linked to the caller (the manager's parent: its EXIT stops the manager)."""
    return _start(True, name, handlers, timeout, dispatcher)


def _start(link_: bool, name: Any, handlers: Any, timeout: Any, dispatcher: str) -> Any:
    entries = []
    for entry in handlers:
        if type(entry) is not tuple or len(entry) not in (2, 3):
            raise TypeError(f"a handler entry is (id, handler) or (id, handler, args), not {entry!r}")
        entries.append(entry if len(entry) == 3 else (*entry, None))
    manager = _Manager(entries, P.me() if link_ else None, name)
    starter = gen_server.start_link if link_ else gen_server.start
    return starter(manager, name=name, timeout=timeout, trap_exit=True, dispatcher=dispatcher)


def _rpc(manager: Any, request: Any, timeout: float | None = None) -> Any:
    answer = _gen.call(manager, request, timeout)
    if answer[0] == "ok":
        return answer[1]
    reason = answer[1]
    if isinstance(reason, BaseException):
        raise HandlerError(reason) from reason
    raise HandlerError(reason)


def add_handler(manager: Any, handler_id: Any, handler: Any, args: Any = None) -> str:
    """Add ``handler`` under ``handler_id``, its state being what ``handler.init(args)`` answers.

    Answers ``"ok"``; raises :class:`HandlerError` with ``"already_added"``
    or init's failure (``("error", r)``'s ``r``, the exception it raised, or
    ``("bad_return_value", ret)``); the manager being gone raises
    :class:`ensemble.CallError`.  A class is instantiated with no arguments.
    """
    return _rpc(manager, ("add_handler", handler_id, _instance(handler), args, False))


def add_sup_handler(manager: Any, handler_id: Any, handler: Any, args: Any = None) -> str:
    """:func:`add_handler`, and tie the handler to the calling process both ways.

    The manager links to the caller.  When the caller exits with ``reason``
    the handler is removed with ``terminate(("stop", reason), state)``.  When
    the handler is removed for any other cause than :func:`delete_handler`,
    the caller gets ``("gen_event_EXIT", handler_id, reason)``: ``"normal"``
    (``remove_handler``), ``("swapped", new_id, new_owner)``, ``"shutdown"``
    (the manager stops, or the caller sent it an exit signal) or ``("error",
    r)`` (a crash or bad return).  The link goes with the caller's last
    supervised handler, unless the caller is the manager's linked parent.
    """
    return _rpc(manager, ("add_handler", handler_id, _instance(handler), args, True))


def delete_handler(manager: Any, handler_id: Any, reason: Any = "delete") -> Any:
    """Remove a handler with ``terminate(reason, state)`` and answer what terminate returned.

    Raises :class:`HandlerError` with ``"module_not_found"`` when there is no
    such handler.  No ``gen_event_EXIT`` is sent for a supervised one.
    """
    return _rpc(manager, ("delete_handler", handler_id, reason))


def swap_handler(manager: Any, old_id: Any, reason: Any, new_id: Any, new_handler: Any) -> str:
    """Replace a handler: ``new_handler.init(old.terminate(reason, state))``, in the old one's place.

    Answers ``"ok"``.  The new handler keeps the old one's owner, who hears
    ``("gen_event_EXIT", old_id, ("swapped", new_id, owner))``.  With no
    handler ``old_id`` the new one is still added, last, and its ``init``
    gets ``"error"`` (OTP's rule).  Raises :class:`HandlerError` with
    ``"already_added"`` when ``new_id`` names another handler (nothing
    changes), or with init's failure (the old handler is gone by then).
    """
    return _rpc(manager, ("swap_handler", old_id, reason, new_id, _instance(new_handler), False))


def swap_sup_handler(manager: Any, old_id: Any, reason: Any, new_id: Any, new_handler: Any) -> str:
    """:func:`swap_handler`, with the new handler supervised by the caller (see :func:`add_sup_handler`)."""
    return _rpc(manager, ("swap_handler", old_id, reason, new_id, _instance(new_handler), True))


def notify(manager: Any, event: Any) -> str:
    """Hand ``event`` to every handler, asynchronously; answers ``"ok"`` and never fails."""
    return _gen.cast(manager, ("notify", event))


def sync_notify(manager: Any, event: Any) -> str:
    """Hand ``event`` to every handler; answers ``"ok"`` once every handler has run."""
    return _rpc(manager, ("sync_notify", event))


def call(manager: Any, handler_id: Any, request: Any, timeout: float | None = 5.0) -> Any:
    """Ask one handler (its ``handle_call``) and answer its reply.

    Raises :class:`HandlerError` with ``"bad_module"`` for no such handler, or
    with what the handler crashed of (it is removed then); a manager that is
    gone or slower than ``timeout`` raises :class:`ensemble.CallError`.
    """
    return _rpc(manager, ("call", handler_id, request), timeout)


def which_handlers(manager: Any) -> list:
    """The ids of the manager's handlers, in the order they were added."""
    return _rpc(manager, "which_handlers")


def stop(manager: Any, reason: Any = "normal", timeout: float | None = None) -> str:
    """Stop the manager and wait for it to exit; each handler's terminate gets ``"stop"``.

    With a reason other than ``"normal"`` terminate gets ``("stop", reason)``
    and owners of supervised handlers get ``("gen_event_EXIT", id,
    "shutdown")``.  Fails as :func:`ensemble.gen_server.stop` does.
    """
    return _gen.stop(manager, reason, timeout)


def _instance(handler: Any) -> Any:
    return handler() if isinstance(handler, type) else handler


# --------------------------------------------------------------------------
# The manager: a gen_server whose state is a tuple of Installed
# --------------------------------------------------------------------------


class _Manager(gen_server.GenServer):
    """The event manager's callbacks; its state is the handlers, in order."""

    def __init__(self, entries: list, parent: Any, name: Any) -> None:
        self.entries = entries
        self.parent = parent  # the linked starter, whose link is never dropped
        self.name = name

    def init(self) -> Any:
        hs: list = []
        for handler_id, handler, args in self.entries:
            answer, hib = _add(self, hs, handler_id, _instance(handler), args, None)
            if answer[0] != "ok":
                for inst in hs:
                    _call_terminate(inst, "stop")
                return ("error", ("handler_failed", handler_id, answer[1]))
        self.entries = []
        return ("ok", tuple(hs))

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        hs = list(state)
        hib = False
        match request:
            case ("sync_notify", event):
                hib = _notify(self, hs, "event", event)
                answer = ("ok", "ok")
            case ("call", handler_id, req):
                i = _decide.find(hs, handler_id)
                if i is None:
                    answer = ("error", "bad_module")
                else:
                    answer, hib = _update(self, hs, i, "call", req)
            case ("add_handler", handler_id, handler, args, sup):
                answer, hib = _add(self, hs, handler_id, handler, args, from_[0] if sup else None)
            case ("delete_handler", handler_id, reason):
                i = _decide.find(hs, handler_id)
                if i is None:
                    answer = ("error", "module_not_found")
                else:
                    answer = ("ok", _call_terminate(hs[i], reason))
                    hs[i] = None
            case ("swap_handler", old_id, reason, new_id, handler, sup):
                new_owner = from_[0] if sup else False
                answer, hib = _swap_call(self, hs, old_id, reason, new_id, handler, new_owner)
            case "which_handlers":
                answer = ("ok", [inst.id for inst in hs])
            case _:
                answer = ("error", ("bad_call", request))
        after = _settle(self, state, hs)
        return ("reply", answer, after, "hibernate") if hib else ("reply", answer, after)

    def handle_cast(self, request: Any, state: Any) -> Any:
        hs = list(state)
        if _decide.cast_kind(request) == "event":
            hib = _notify(self, hs, "event", request[1])
        else:
            hib = _notify(self, hs, "info", (_gen.CAST, request))
        return _noreply(_settle(self, state, hs), hib)

    def handle_info(self, msg: Any, state: Any) -> Any:
        hs = list(state)
        exited = _decide.owner_exit(msg, P.Pid)
        if exited is not None:
            owner, reason = exited
            for i, inst in enumerate(hs):
                if inst.owner is owner:
                    hs[i] = None
                    _remove(self, inst, ("stop", reason), inst.state, "shutdown", msg)
        hib = _notify(self, hs, "info", msg)
        return _noreply(_settle(self, state, hs), hib)

    def terminate(self, reason: Any, state: Any) -> Any:
        arg = _decide.terminate_arg(reason)
        if type(state) is not tuple:
            return None
        for inst in state:
            if type(inst) is Installed:
                _remove(self, inst, arg, inst.state, "shutdown", None)
        _settle(self, state, [])
        return None


def _noreply(hs: tuple, hib: bool) -> Any:
    return ("noreply", hs, "hibernate") if hib else ("noreply", hs)


def _settle(mgr: _Manager, before: Any, hs: list) -> tuple:
    """The new state; unlink every owner whose last supervised handler went (never the parent)."""
    after = tuple(inst for inst in hs if inst is not None)
    kept = [inst.owner for inst in after if inst.owner is not None]
    for owner in _decide.owners_to_unlink(before, kept, mgr.parent, P.Pid):
        unlink(owner)
    return after


def _call_terminate(inst: Installed, arg: Any) -> Any:
    """``terminate(arg, state)``'s result; ``("EXIT", reason)`` if it raised; ``"ok"`` if none."""
    fn = getattr(inst.handler, "terminate", None)
    if fn is None:
        return "ok"
    try:
        return fn(arg, inst.state)
    except Exit as e:
        return ("EXIT", e.reason)
    except Exception as e:  # noqa: BLE001 - terminate's crash is ignored (OTP's catch)
        return ("EXIT", e)


def _remove(mgr: _Manager, inst: Installed, arg: Any, state: Any, why: Any, last: Any) -> Any:
    """Terminate a handler already taken out; report a crash, tell its owner ``why``."""
    result = _call_terminate(inst._replace(state=state), arg)
    if _decide.reported(why):
        _logger.report(
            "gen_event_terminate",
            handler=inst.id,
            name=mgr.name,
            last_message=last,
            state=state,
            reason=why[1],
        )
    if inst.owner is not None:
        send(inst.owner, ("gen_event_EXIT", inst.id, why))
    return result


def _init(handler: Any, args: Any) -> Any:
    """Run ``handler.init(args)``: an :class:`Ok`, or ``("error", reason)`` (refused, raised, bad)."""
    try:
        ret = handler.init(args)
    except Exit as e:
        return ("error", e.reason)
    except Exception as e:  # noqa: BLE001 - a crashing init refuses the handler
        return ("error", e)
    return _decide.init_answer(ret)


def _add(mgr: _Manager, hs: list, handler_id: Any, handler: Any, args: Any, owner: Any) -> tuple:
    """Add a handler at the end: ``(answer, hibernate)``; links to a supervising owner."""
    if _decide.find(hs, handler_id) is not None:
        return ("error", "already_added"), False
    out = _init(handler, args)
    if type(out) is not Ok:
        return out, False
    hs.append(Installed(handler_id, handler, out.state, owner))
    if owner is not None:
        link(owner)
    return ("ok", "ok"), out.hibernate


def _swap(
    mgr: _Manager, hs: list, i: int | None, arg: Any, state: Any, new_id: Any, handler: Any, owner: Any
) -> tuple:
    """Terminate ``hs[i]`` (or nothing: None) and init ``handler`` in its place.

    ``owner`` is the new handler's owner; False keeps the old one's.  Answers
    ``(answer, hibernate)`` as :func:`_add` does.
    """
    taken = _decide.find(hs, new_id)
    if i is not None:
        old = hs[i]
        hs[i] = None  # its place, kept for the new handler
        owner = _decide.swap_owner(owner, old.owner)
        result = _remove(mgr, old, arg, state, ("swapped", new_id, owner), None)
    else:
        owner = _decide.swap_owner(owner, None)
        result = "error"
    if _decide.swap_refused(i, taken):
        out: Any = ("error", "already_added")
    else:
        out = _init(handler, result)
    if type(out) is not Ok:
        return out, False
    inst = Installed(new_id, handler, out.state, owner)
    if i is None:
        hs.append(inst)
    else:
        hs[i] = inst
    if owner is not None:
        link(owner)
    return ("ok", "ok"), out.hibernate


def _swap_call(
    mgr: _Manager, hs: list, old_id: Any, reason: Any, new_id: Any, handler: Any, owner: Any
) -> tuple:
    """swap_handler's request: refuse a taken ``new_id`` before touching the old handler."""
    i = _decide.find(hs, old_id)
    taken = _decide.find(hs, new_id)
    if _decide.swap_refused(i, taken):
        return ("error", "already_added"), False
    return _swap(mgr, hs, i, reason, hs[i].state if i is not None else None, new_id, handler, owner)


def _notify(mgr: _Manager, hs: list, kind: str, event: Any) -> bool:
    """Run ``event`` through every handler in order; answers whether the manager hibernates."""
    hib = False
    for i in range(len(hs)):
        if hs[i] is not None:
            _, h = _update(mgr, hs, i, kind, event)
            hib = hib or h
    return hib


def _update(mgr: _Manager, hs: list, i: int, kind: str, arg: Any) -> tuple:
    """Run one callback of ``hs[i]`` and carry out its return: ``(call answer, hibernate)``.

    A removed handler leaves None in its place, so the indices of the handlers
    still to run hold; :func:`_settle` drops the Nones.
    """
    inst = hs[i]
    handler = inst.handler
    try:
        if kind == "event":
            ret = handler.handle_event(arg, inst.state)
        elif kind == "info":
            fn = getattr(handler, "handle_info", None)
            if fn is None:
                return ("ok", None), False  # a handler without handle_info ignores messages
            ret = fn(arg, inst.state)
        else:
            ret = handler.handle_call(arg, inst.state)
    except Exit as e:
        return _crash(mgr, hs, i, e.reason, arg), False
    except Exception as e:  # noqa: BLE001 - a crashing handler is removed, the manager carries on
        return _crash(mgr, hs, i, e, arg), False
    out = _decide.interpret_handler_return(kind, ret)
    t = type(out)
    if t is Ok:
        hs[i] = inst._replace(state=out.state)
        return ("ok", None), out.hibernate
    if t is Reply:
        hs[i] = inst._replace(state=out.state)
        return ("ok", out.reply), out.hibernate
    if t is Remove:
        hs[i] = None
        _remove(mgr, inst, "remove_handler", inst.state, "normal", arg)
        return ("ok", out.reply), False
    if t is Swap:
        answer, hib = _swap(mgr, hs, i, out.arg, out.state, out.new_id, out.new_handler, False)
        if answer[0] != "ok":
            _logger.report(
                "gen_event_swap_failed",
                handler=inst.id,
                new_handler=out.new_id,
                name=mgr.name,
                reason=answer[1],
            )
            owner = inst.owner
            if owner is not None:
                send(owner, ("gen_event_EXIT", out.new_id, ("error", answer[1])))
        return ("ok", out.reply), hib
    return _crash(mgr, hs, i, out.reason, arg), False  # type: ignore[union-attr]


def _crash(mgr: _Manager, hs: list, i: int, reason: Any, last: Any) -> Any:
    inst = hs[i]
    hs[i] = None
    _remove(mgr, inst, ("error", reason), inst.state, ("error", reason), last)
    return ("error", reason)
