"""Which message a selective receive takes.

Erlang's ``receive`` (Erlang Reference Manual, "Expressions", section
"Receive") tries the mailbox's messages oldest first and takes the first
one that matches a clause; messages that match nothing stay in the
mailbox, in order. The runtime keeps a *save pointer*: messages already
rejected by this receive are not tried again when new mail arrives, only
the new ones are. :func:`scan` is that decision, without I/O: it never
removes anything, it reports which index to take, or where to resume.

A *matcher* is a function of one message that answers either the value
the receive produces or :data:`NOMATCH`. Python's ``match`` statement is
the pattern language, guards included::

    def matcher(m):
        match m:
            case ("reply", r, value) if r == ref:
                return value
            case ("DOWN", r, _, _, reason) if r == ref:
                raise RuntimeError(reason)
            case _:
                return NOMATCH

Any value other than :data:`NOMATCH` is a match -- ``None``, ``False`` and
``0`` included. An exception raised by the matcher propagates to the
caller of :func:`scan` (the message stays in the mailbox).

A matcher must be deterministic for the save pointer to be sound: a
message it rejected once is assumed to be rejected again.
"""

from __future__ import annotations

from itertools import islice
from typing import Any, Callable, Final, Iterable

__all__ = ["NOMATCH", "scan"]


class _NoMatch:
    """Type of :data:`NOMATCH`; a singleton."""

    __slots__ = ()
    _instance: "_NoMatch | None" = None

    def __new__(cls) -> "_NoMatch":
        inst = cls._instance
        if inst is None:
            inst = cls._instance = super().__new__(cls)
        return inst

    def __repr__(self) -> str:
        return "NOMATCH"

    def __reduce__(self) -> str:
        return "NOMATCH"


NOMATCH: Final = _NoMatch()
"""What a matcher returns for a message it does not take."""


def scan(
    messages: Iterable[Any],
    matcher: Callable[[Any], Any] | None,
    start: int = 0,
) -> tuple[int | None, Any]:
    """Find the first message at index ``>= start`` that ``matcher`` accepts.

    Returns ``(index, value)`` where ``value`` is the matcher's answer (with
    ``matcher=None`` every message matches and ``value`` is the message), or
    ``(None, n)`` if none matches, ``n`` the number of messages looked at so
    far (``len(messages)`` when nothing was appended meanwhile) -- the next
    ``start``.  ``messages`` needs ``len()`` and ``islice`` (e.g. a deque);
    scan does not mutate it, but others may append to it meanwhile (a sender
    on another thread while the matcher runs): the scan then goes on from where
    it was, and the messages appended are looked at too.  The matcher is called
    on ``messages[start:index + 1]`` only, in order, once each; its exceptions
    propagate. ``start`` must be ``>= 0``.
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, not {start!r}")
    if matcher is None:
        n = len(messages)  # type: ignore[arg-type]
        if n > start:
            return (start, messages[start])  # type: ignore[index]
        return (None, n)
    i = start
    while True:
        n = len(messages)  # type: ignore[arg-type]
        if i >= n:
            return (None, n)
        if i + 1 == n:  # one new message, the commonest case: an index (O(1) at either end)
            r = matcher(messages[i])  # type: ignore[index]
            if r is not NOMATCH:
                return (i, r)
            i = n
            continue
        chunk = _unseen(messages, i, n)
        if chunk is None:  # appended to meanwhile: read again from i
            continue
        for m in chunk:
            r = matcher(m)
            if r is not NOMATCH:
                return (i, r)
            i += 1


def _unseen(messages: Any, i: int, n: int) -> list | None:
    """``messages[i:n]`` as a list, or None if an append interrupted the read (read again).

    When the unseen part is the shorter one it is read from the right end, so a
    save pointer deep in a long deque costs the new messages only, not the
    prefix; if an append moved the right end meanwhile, it is read from the left.
    """
    k = n - i
    if k < i:
        try:
            chunk = list(islice(reversed(messages), k))  # type: ignore[call-overload]
        except RuntimeError:  # "deque mutated during iteration"
            chunk = None
        if chunk is not None and len(messages) == n:
            chunk.reverse()
            return chunk
    try:
        return list(islice(messages, i, n))
    except RuntimeError:
        return None
