"""What a gen_server's ``init`` and callback returns mean.

Pure decisions, no I/O: :mod:`ensemble.gen_server` asks :func:`interpret_init`
and :func:`interpret` and carries out the answer.  The shapes are OTP's
(gen_server documentation, "Callback Functions"), as Python tuples:

``init`` may return ``("ok", state)``, ``("ok", state, action)``,
``("stop", reason)``, ``("error", reason)`` or ``"ignore"``.

``handle_call`` may return ``("reply", reply, state[, action])``,
``("noreply", state[, action])``, ``("stop", reason, state)`` or
``("stop", reason, reply, state)``; ``handle_cast``, ``handle_info``,
``handle_continue`` and ``handle_timeout`` the same without the reply forms.

An action is a timeout in seconds (a number >= 0, or ``"infinity"`` or None
for no timeout),
``"hibernate"`` or ``("continue", c)``.  Anything else is a bad return, and
the server stops with ``("bad_return_value", ret)``.
"""

from __future__ import annotations

from typing import Any, Final

from .values import Singleton, Value

__all__ = [
    "Wait",
    "Hibernate",
    "Continue",
    "WAIT_FOREVER",
    "HIBERNATE",
    "Start",
    "InitStop",
    "InitError",
    "Ignore",
    "IGNORE",
    "Reply",
    "NoReply",
    "Stop",
    "StopReply",
    "Bad",
    "interpret_init",
    "interpret",
    "plain",
    "NO_REPLY",
    "action_of",
    "KINDS",
]

#: The callbacks whose returns :func:`interpret` reads.
KINDS: Final = frozenset({"call", "cast", "info", "continue", "timeout"})


_Value = Value  # the shared immutable-answer base (ensemble.decide.values)


# -- actions --------------------------------------------------------------------


class Wait(_Value):
    """Wait for the next message at most ``timeout`` seconds (None: forever)."""

    __slots__ = ("timeout",)
    _fields = ("timeout",)
    __match_args__ = _fields


class Hibernate(_Value):
    """Hibernate until the next message."""

    __slots__ = ()


class Continue(_Value):
    """Run ``handle_continue(continue_, state)`` before taking any message."""

    __slots__ = ("continue_",)
    _fields = ("continue_",)
    __match_args__ = _fields


WAIT_FOREVER: Final = Wait(None)
HIBERNATE: Final = Hibernate()

Action = Wait | Hibernate | Continue

_BAD_ACTION = object()


def action_of(action: Any) -> Any:
    """The action a return's last element names, or ``_BAD_ACTION``."""
    t = type(action)
    if t is int or t is float:
        if action >= 0 and action == action and action != float("inf"):
            return Wait(action)
        if action == float("inf"):
            return WAIT_FOREVER
        return _BAD_ACTION
    if action is None:
        return WAIT_FOREVER
    if t is str:
        if action == "hibernate":
            return HIBERNATE
        if action == "infinity":
            return WAIT_FOREVER
        return _BAD_ACTION
    if t is tuple and len(action) == 2 and type(action[0]) is str and action[0] == "continue":
        return Continue(action[1])
    return _BAD_ACTION


# -- init ---------------------------------------------------------------------------


class Start(_Value):
    """init succeeded: run the loop with ``state``, first doing ``action``."""

    __slots__ = ("state", "action")
    _fields = ("state", "action")
    __match_args__ = _fields


class InitStop(_Value):
    """``("stop", reason)``: start fails with ``reason``; the process exits with it."""

    __slots__ = ("reason",)
    _fields = ("reason",)
    __match_args__ = _fields


class InitError(_Value):
    """``("error", reason)``: start fails with ``reason``; the process exits ``"normal"``."""

    __slots__ = ("reason",)
    _fields = ("reason",)
    __match_args__ = _fields


class Ignore(_Value):
    """``"ignore"``: start answers ``"ignore"``; the process exits ``"normal"``."""

    __slots__ = ()


IGNORE: Final = Ignore()


class Bad(_Value):
    """A return OTP does not know: the server stops with ``reason``, ``("bad_return_value", ret)``."""

    __slots__ = ("reason",)
    _fields = ("reason",)
    __match_args__ = _fields


def _is(x: Any, tag: str) -> bool:
    return type(x) is str and x == tag


def interpret_init(ret: Any) -> Start | InitStop | InitError | Ignore | Bad:
    """What ``init``'s return ``ret`` means (never raises)."""
    if type(ret) is tuple and ret:
        tag = ret[0]
        n = len(ret)
        if _is(tag, "ok"):
            if n == 2:
                return Start(ret[1], WAIT_FOREVER)
            if n == 3:
                action = action_of(ret[2])
                if action is not _BAD_ACTION:
                    return Start(ret[1], action)
        elif n == 2 and _is(tag, "stop"):
            return InitStop(ret[1])
        elif n == 2 and _is(tag, "error"):
            return InitError(ret[1])
    elif _is(ret, "ignore"):
        return IGNORE
    return Bad(("bad_return_value", ret))


# -- callbacks ---------------------------------------------------------------------


class Reply(_Value):
    """Answer the caller with ``reply``, go on with ``state``, then ``action``."""

    __slots__ = ("reply", "state", "action")
    _fields = ("reply", "state", "action")
    __match_args__ = _fields


class NoReply(_Value):
    """Go on with ``state``, then ``action`` (a call is answered later, if at all)."""

    __slots__ = ("state", "action")
    _fields = ("state", "action")
    __match_args__ = _fields


class Stop(_Value):
    """Run ``terminate(reason, state)`` and exit with ``reason``."""

    __slots__ = ("reason", "state")
    _fields = ("reason", "state")
    __match_args__ = _fields


class StopReply(_Value):
    """Answer the caller with ``reply``, then stop as :class:`Stop` does."""

    __slots__ = ("reason", "reply", "state")
    _fields = ("reason", "reply", "state")
    __match_args__ = _fields


class _NoReplyMark(Singleton):
    """Type of :data:`NO_REPLY`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_REPLY"


#: The first element of :func:`plain`'s answer for a ``("noreply", state)`` return.
NO_REPLY: Final = _NoReplyMark()


def plain(kind: str, ret: Any) -> tuple | None:
    """The two commonest returns, without building an answer object: ``(reply, state)`` for a
    call's ``("reply", reply, state)``, ``(NO_REPLY, state)`` for ``("noreply", state)``; None for
    every other return (ask :func:`interpret`).

    Where it answers, :func:`interpret` answers the same: ``Reply(reply, state, WAIT_FOREVER)``,
    ``NoReply(state, WAIT_FOREVER)``.  The server's loop asks this first, on every message.
    """
    if type(ret) is tuple:
        n = len(ret)
        if n == 3:
            tag = ret[0]
            if type(tag) is str and tag == "reply" and kind == "call":
                return (ret[1], ret[2])
        elif n == 2:
            tag = ret[0]
            if type(tag) is str and tag == "noreply":
                return (NO_REPLY, ret[1])
    return None


def interpret(kind: str, ret: Any) -> Reply | NoReply | Stop | StopReply | Bad:
    """What callback ``kind`` (one of :data:`KINDS`) returning ``ret`` means (never raises).

    The reply forms are only good for ``"call"``; a bad action makes the whole
    return bad.
    """
    if type(ret) is tuple and ret:
        tag = ret[0]
        n = len(ret)
        if type(tag) is str:
            if tag == "noreply" and (n == 2 or n == 3):
                action = WAIT_FOREVER if n == 2 else action_of(ret[2])
                if action is not _BAD_ACTION:
                    return NoReply(ret[1], action)
            elif tag == "reply" and kind == "call" and (n == 3 or n == 4):
                action = WAIT_FOREVER if n == 3 else action_of(ret[3])
                if action is not _BAD_ACTION:
                    return Reply(ret[1], ret[2], action)
            elif tag == "stop":
                if n == 3:
                    return Stop(ret[1], ret[2])
                if n == 4 and kind == "call":
                    return StopReply(ret[1], ret[2], ret[3])
    return Bad(("bad_return_value", ret))
