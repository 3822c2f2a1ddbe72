"""Small values of the process model: references, aliases, the node name, TIMEOUT.

A reference is unique among every reference this node makes in this run
(``make_ref``); two references compare equal only when they are the same one,
also after being copied.  An alias is a reference that also names its owner.
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["NODE", "Ref", "Alias", "RemoteAlias", "make_ref", "TIMEOUT"]

#: The name of this node: ``"nonode@nohost"`` until distribution starts a node
#: (:func:`ensemble.dist.start` sets it, :func:`ensemble.dist.stop` sets it back).  Read it as
#: ``_terms.NODE`` at the time of use, never copy it with ``from ._terms import NODE``.
NODE = "nonode@nohost"
#: The name of a node that is not distributed.
NO_NODE = "nonode@nohost"

_counter = itertools.count(1)  # next() on a count is atomic under the GIL


class _Timeout:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TIMEOUT"

    def __reduce__(self) -> str:
        return "TIMEOUT"


#: What ``receive`` answers when its timeout passes with no message taken.
TIMEOUT = _Timeout()


class Ref:
    """A unique reference (Erlang's ``make_ref()``): equal only to itself and its copies."""

    __slots__ = ("_n", "_node")

    def __init__(self, n: int, node: str | None = None) -> None:
        self._n = n
        self._node = NODE if node is None else node  # this node's name now, by default

    def __eq__(self, other: Any) -> bool:
        return other is self or (
            isinstance(other, Ref) and self._n == other._n and self._node == other._node
        )

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._n)

    def __repr__(self) -> str:
        return f"#Ref<0.{self._n}>"

    @property
    def node(self) -> str:
        """The node that made this reference."""
        return self._node


class Alias(Ref):
    """A reference that routes messages to its owner while the alias is active."""

    __slots__ = ("_owner", "__weakref__")

    def __init__(self, n: int, owner: Any) -> None:  # no super(): every call makes one
        self._n = n
        self._node = NODE
        self._owner = owner

    def __repr__(self) -> str:
        return f"#Alias<0.{self._n}>"


class RemoteAlias(Ref):
    """An alias of a process on another node (``node``, its number there, that node's run):
    a message sent to it crosses to that node, which delivers it while the alias is active."""

    __slots__ = ("creation",)

    def __init__(self, n: int, node: str, creation: int) -> None:
        self._n = n
        self._node = node
        self.creation = creation

    def __eq__(self, other: Any) -> bool:
        return (
            type(other) is RemoteAlias
            and self._n == other._n
            and self._node == other._node
            and self.creation == other.creation
        )

    def __hash__(self) -> int:
        return hash(self._n)

    def __repr__(self) -> str:
        return f"#Alias<{self._node}.{self._n}>"


def make_ref() -> Ref:
    """A fresh reference, unique on this node (erlang:make_ref/0)."""
    r = _new_object(Ref)  # Ref(n) without the __init__ frame: every monitor makes one
    r._n = _next_n()
    r._node = NODE
    return r


def new_alias(owner: Any) -> Alias:
    """A fresh alias owned by ``owner`` (used by ``ensemble.alias`` and every call)."""
    a = _new_object(Alias)  # Alias(n, owner) without the __init__ frame: every call makes one
    a._n = _next_n()
    a._node = NODE
    a._owner = owner
    return a


_new_object = object.__new__
_next_n = _counter.__next__
