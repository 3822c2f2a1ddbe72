"""What an exit signal does to the process that receives it.

Pure decision rules, no I/O: the runtime asks :func:`on_signal` and carries
out the answer. The rules are Erlang's, as written in the Erlang/OTP
Reference Manual ("Processes", section "Receiving Exit Signals") and in
the documentation of ``erlang:exit/2`` and ``erlang:process_flag(trap_exit,
...)``, and checked against a real ``erl``:

1. A link signal (kind :data:`LINK`, sent because a linked process exited)
   is acted on only while the link stands; ``unlink/1`` drops one already
   in flight, so an unlinked receiver ignores it.
2. ``exit(Pid, kill)`` (kind :data:`EXIT`, reason exactly ``"kill"``) cannot
   be trapped: the receiver dies with reason ``"killed"``, even if it sent
   the signal to itself.
3. A trapping receiver turns every other signal into the message
   ``("EXIT", from, reason)`` -- including ``"normal"``, self-sent ones, and
   a link signal that carries ``"kill"`` or ``"killed"`` (only ``exit/2``'s
   ``kill`` is special).
4. A receiver that is not trapping ignores reason ``"normal"``, except
   ``exit(self(), normal)``, which kills it with reason ``"normal"``.
5. A receiver that is not trapping dies with any other reason as given
   (a link signal carrying ``"kill"`` kills with ``"kill"``, not
   ``"killed"``).

Reasons are arbitrary Python values. They are never compared with ``==``
(an object's ``__eq__`` may raise or answer an array): :func:`is_normal`,
:func:`is_kill` and :func:`is_shutdown` accept only exact ``str`` (and
``tuple``) instances, so a ``str`` subclass that equals ``"normal"`` is an
ordinary reason.
"""

from __future__ import annotations

from typing import Any, Final

from .values import Singleton, same

__all__ = [
    "NORMAL",
    "KILL",
    "KILLED",
    "SHUTDOWN",
    "EXIT",
    "LINK",
    "Die",
    "Deliver",
    "Ignore",
    "IGNORE",
    "Outcome",
    "on_signal",
    "is_normal",
    "is_kill",
    "is_shutdown",
]

NORMAL: Final = "normal"
KILL: Final = "kill"
KILLED: Final = "killed"
SHUTDOWN: Final = "shutdown"

EXIT: Final = "exit"
"""Signal kind: sent explicitly by ``exit(pid, reason)``."""
LINK: Final = "link"
"""Signal kind: a linked process exited with ``reason``."""


def is_normal(reason: Any) -> bool:
    """True iff ``reason`` is exactly the string ``"normal"`` (never calls a foreign ``==``)."""
    return type(reason) is str and reason == NORMAL


def is_kill(reason: Any) -> bool:
    """True iff ``reason`` is exactly the string ``"kill"`` (never calls a foreign ``==``)."""
    return type(reason) is str and reason == KILL


def is_shutdown(reason: Any) -> bool:
    """True for OTP's orderly reasons: ``"normal"``, ``"shutdown"`` or a 2-tuple ``("shutdown", term)``.

    These are the reasons a supervisor does not report as errors
    (OTP Design Principles, "Supervisor Behaviour"). Only exact ``str`` and
    ``tuple`` instances qualify.
    """
    t = type(reason)
    if t is str:
        return reason == NORMAL or reason == SHUTDOWN
    if t is tuple and len(reason) == 2:
        head = reason[0]
        return type(head) is str and head == SHUTDOWN
    return False


class _Outcome:
    __slots__ = ("reason",)
    __match_args__ = ("reason",)
    reason: Any

    def __init__(self, reason: Any) -> None:
        _set_reason(self, reason)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return same(self.reason, other.reason)  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash((type(self), self.reason))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r})"

    def __reduce__(self) -> tuple:
        return (type(self), (self.reason,))


# The slot descriptor bypasses the immutable __setattr__.
_set_reason = _Outcome.__dict__["reason"].__set__


class Die(_Outcome):
    """The receiver must exit with ``reason``."""

    __slots__ = ()


class Deliver(_Outcome):
    """The receiver traps exits: enqueue ``("EXIT", from, reason)`` in its mailbox."""

    __slots__ = ()


class Ignore(Singleton):
    """The signal has no effect. Use the singleton :data:`IGNORE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "IGNORE"


IGNORE: Final = Ignore()

Outcome = Die | Deliver | Ignore

_DIE_KILLED: Final = Die(KILLED)
_DIE_NORMAL: Final = Die(NORMAL)


def on_signal(
    kind: str,
    reason: Any,
    *,
    trapping: bool,
    self_sent: bool,
    linked: bool = True,
) -> Outcome:
    """Decide what an exit signal of ``kind`` (:data:`EXIT` or :data:`LINK`) with ``reason`` does.

    ``trapping`` is the receiver's trap_exit flag, ``self_sent`` whether the
    receiver sent it to itself, ``linked`` whether the link still stands
    (only consulted for :data:`LINK`). Returns :class:`Die`,
    :class:`Deliver` (carrying the very same ``reason`` object) or
    :data:`IGNORE`; raises ``ValueError`` for an unknown kind.
    """
    if kind == EXIT:
        if type(reason) is str:
            if reason == KILL:
                return _DIE_KILLED
            if trapping:
                return Deliver(reason)
            if reason == NORMAL:
                return _DIE_NORMAL if self_sent else IGNORE
            return Die(reason)
        return Deliver(reason) if trapping else Die(reason)
    if kind == LINK:
        if not linked:
            return IGNORE
        if trapping:
            return Deliver(reason)
        if type(reason) is str and reason == NORMAL:
            return IGNORE
        return Die(reason)
    raise ValueError(f"unknown signal kind {kind!r}; expected {EXIT!r} or {LINK!r}")
