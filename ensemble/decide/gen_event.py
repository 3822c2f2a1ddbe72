"""What an event manager decides: what a handler's return means, which handler an id names, who is told what.

Pure decisions, no processes and no I/O: :mod:`ensemble.gen_event` (the
manager, a gen_server) asks these functions and carries out the answer.  The
rules are OTP's ``gen_event``:

* :func:`interpret_handler_return`: a callback's return is keep
  (:class:`Ok`, :class:`Reply`), ``remove_handler`` (:class:`Remove`),
  ``swap_handler`` (:class:`Swap`), an init's refusal (:class:`Refuse`), or
  a bad return (:class:`Bad`), which removes the handler as a crash;
* :func:`init_answer`: what adding a handler whose ``init`` returned that
  answers;
* :func:`find`: which handler an id names (identity, then a guarded ``==``);
* :func:`swap_refused`: a swap to an id another handler holds changes nothing;
* :func:`swap_owner`: who owns a swapped-in handler;
* :func:`cast_kind`: a cast ``("notify", event)`` is an event, any other a message;
* :func:`owner_exit`: which messages are a supervising owner's exit;
* :func:`terminate_arg`: what ``terminate`` gets when the manager stops;
* :func:`reported`: which removals are reported as crashes;
* :func:`owners_to_unlink`: whose link goes with their last supervised handler.

None of them calls a handler's, a state's or a reason's own ``==``, ``bool``
or ``hash`` except :func:`find`, whose ``==`` is guarded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Sequence

from .values import same

__all__ = [
    "KINDS",
    "Ok",
    "Reply",
    "Remove",
    "Swap",
    "Refuse",
    "Bad",
    "interpret_handler_return",
    "init_answer",
    "find",
    "swap_refused",
    "swap_owner",
    "cast_kind",
    "owner_exit",
    "terminate_arg",
    "reported",
    "owners_to_unlink",
]


#: The callbacks whose returns :func:`interpret_handler_return` reads.
KINDS: Final = frozenset({"init", "event", "info", "call"})


@dataclass(frozen=True, slots=True)
class Ok:
    """Keep the handler with ``state``; the manager hibernates if ``hibernate``."""

    state: Any
    hibernate: bool


@dataclass(frozen=True, slots=True)
class Reply:
    """A call's answer: reply with ``reply``, keep the handler with ``state``."""

    reply: Any
    state: Any
    hibernate: bool


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove the handler with ``terminate("remove_handler", state)``; a call is answered ``reply``."""

    reply: Any


@dataclass(frozen=True, slots=True)
class Swap:
    """Terminate the handler with ``terminate(arg, state)`` and put ``new_handler`` in its place."""

    arg: Any
    state: Any
    new_id: Any
    new_handler: Any
    reply: Any


@dataclass(frozen=True, slots=True)
class Refuse:
    """init's ``("error", reason)``: the handler is not added."""

    reason: Any


@dataclass(frozen=True, slots=True)
class Bad:
    """A return OTP does not know; ``reason`` is ``("bad_return_value", ret)``."""

    reason: Any


def _is(x: Any, tag: str) -> bool:
    return type(x) is str and x == tag


def interpret_handler_return(kind: str, ret: Any) -> Ok | Reply | Remove | Swap | Refuse | Bad:
    """What handler callback ``kind`` (one of :data:`KINDS`) returning ``ret`` means.

    Never raises for any ``ret`` (it reads only tuples, their lengths and exact
    ``str`` tags, never calling the values' own ``==``); an unknown ``kind`` is
    a ValueError.  Anything that is not one of the forms :mod:`ensemble.gen_event`'s docstring
    lists for ``kind`` is ``Bad(("bad_return_value", ret))``.
    """
    if kind not in KINDS:
        raise ValueError(f"not a handler callback kind: {kind!r}")
    if type(ret) is tuple and ret:
        tag = ret[0]
        n = len(ret)
        if _is(tag, "ok"):
            if kind == "call":
                if n == 3:
                    return Reply(ret[1], ret[2], False)
                if n == 4 and _is(ret[3], "hibernate"):
                    return Reply(ret[1], ret[2], True)
            elif n == 2:
                return Ok(ret[1], False)
            elif n == 3 and _is(ret[2], "hibernate"):
                return Ok(ret[1], True)
        elif _is(tag, "error"):
            if kind == "init" and n == 2:
                return Refuse(ret[1])
        elif _is(tag, "swap_handler"):
            if kind == "call" and n == 6:
                return Swap(ret[2], ret[3], ret[4], ret[5], ret[1])
            if (kind == "event" or kind == "info") and n == 5:
                return Swap(ret[1], ret[2], ret[3], ret[4], None)
        elif _is(tag, "remove_handler"):
            if kind == "call" and n == 2:
                return Remove(ret[1])
    elif _is(ret, "remove_handler") and (kind == "event" or kind == "info"):
        return Remove(None)
    return Bad(("bad_return_value", ret))


def init_answer(ret: Any) -> Ok | tuple:
    """What a handler whose ``init`` returned ``ret`` means for the add: its :class:`Ok`, or ``("error", reason)``.

    ``reason`` is a :class:`Refuse`'s reason or a :class:`Bad`'s
    ``("bad_return_value", ret)``; any other form (a :class:`Remove`,
    :class:`Swap` or :class:`Reply` cannot come out of ``"init"``) is not
    reachable.  Never raises.
    """
    out = interpret_handler_return("init", ret)
    if type(out) is Ok:
        return out
    return ("error", out.reason)  # type: ignore[union-attr]


def find(installed: Sequence, handler_id: Any) -> int | None:
    """The index of the first entry of ``installed`` that is not None and whose ``id`` is ``handler_id``; or None.

    Ids compare by identity, then by a guarded ``==``
    (:func:`ensemble.decide.values.same`): an id whose ``==`` raises or answers no
    truth value names nothing else.  Never raises for any ids.
    """
    for i, inst in enumerate(installed):
        if inst is not None and same(inst.id, handler_id):
            return i
    return None


def swap_refused(old: int | None, taken: int | None) -> bool:
    """Whether a swap of the handler at index ``old`` (None: there is none) to an id found at ``taken`` is refused.

    Refused (``"already_added"``) when the new id names a handler other than
    the one swapped out.
    """
    return taken is not None and taken != old


def swap_owner(requested: Any, old_owner: Any) -> Any:
    """The owner of a swapped-in handler: ``requested``, except False, which keeps ``old_owner``.

    ``old_owner`` is None when no handler was swapped out.  Only identity is
    read.
    """
    return old_owner if requested is False else requested


def cast_kind(request: Any) -> str:
    """``"event"`` for a cast ``("notify", event)`` (the event is ``request[1]``); ``"info"`` for any other cast.

    Only the tuple's length and an exact ``str`` tag are read.
    """
    if type(request) is tuple and len(request) == 2 and _is(request[0], "notify"):
        return "event"
    return "info"


def owner_exit(msg: Any, pid_type: type) -> tuple | None:
    """``(pid, reason)`` when ``msg`` is an ``("EXIT", pid, reason)`` from a process; None for any other message.

    A process is an instance of exactly ``pid_type`` (the runtime's ``Pid``).
    Handlers owned by that pid are removed first (``terminate(("stop",
    reason), state)``).  Never raises.
    """
    if type(msg) is tuple and len(msg) == 3 and _is(msg[0], "EXIT") and type(msg[1]) is pid_type:
        return (msg[1], msg[2])
    return None


def terminate_arg(reason: Any) -> Any:
    """What each handler's ``terminate`` gets when the manager stops with ``reason``.

    ``"stop"`` for the exact str ``"normal"``; ``("stop", reason)`` for
    anything else.  Never raises.
    """
    return "stop" if _is(reason, "normal") else ("stop", reason)


def reported(why: Any) -> bool:
    """Whether a handler removed for ``why`` (what its owner is told) is reported as a crash.

    True for ``("error", reason)`` (a crash or a bad return); False for
    ``"normal"``, ``"shutdown"``, ``("swapped", ...)`` and anything else.
    """
    return type(why) is tuple and len(why) > 0 and _is(why[0], "error")


def owners_to_unlink(before: Any, kept: Sequence, parent: Any, pid_type: type) -> list:
    """The owners whose link the manager drops: once each, in the order they appear in ``before``.

    ``before`` is the previous state (a tuple of handlers with an ``owner``;
    anything else has none), ``kept`` the owners still holding a handler.  An
    owner is dropped when it is a ``pid_type`` instance, is not ``parent``
    (the linked starter) and holds nothing in ``kept``.  Only identity is
    compared.
    """
    gone: list = []
    for inst in before if type(before) is tuple else ():
        owner = getattr(inst, "owner", None)
        if type(owner) is pid_type and owner is not parent and all(o is not owner for o in kept):
            if all(o is not owner for o in gone):
                gone.append(owner)
    return gone
