"""Which message answers an asynchronous request, alone or in a collection.

Pure decisions, no I/O (OTP's gen_server:check_response/2,3).  A request id
names the alias its reply comes to and the monitor of the server; the answer
to a message is:

* ``("reply", value)`` for ``(alias, value)``, the server's reply;
* ``("error", (reason, server))`` for the monitor's ``("DOWN", mref, ...)``;
* ``"no_reply"`` for any other message.

A collection maps request ids to labels; answering from a collection also
names the label and the collection that is left (with the request removed
when ``delete`` is true), or says ``"no_request"`` for an empty collection.
"""

from __future__ import annotations

from typing import Any, Final, Iterator

from .._terms import Alias, Ref

__all__ = [
    "ReqId",
    "ReqIdCollection",
    "NO_REPLY",
    "NO_REQUEST",
    "check",
    "check_collection",
]

NO_REPLY: Final = "no_reply"
NO_REQUEST: Final = "no_request"


class ReqId:
    """A request id: the reply's alias, the server's monitor, and the server as addressed."""

    __slots__ = ("alias", "mref", "server")

    def __init__(self, alias: Alias, mref: Ref, server: Any) -> None:
        self.alias = alias
        self.mref = mref
        self.server = server

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReqId) and self.alias == other.alias

    def __hash__(self) -> int:
        return hash(self.alias)

    def __repr__(self) -> str:
        return f"ReqId({self.alias!r}, {self.server!r})"


def check(msg: Any, req: ReqId) -> Any:
    """The answer ``msg`` is to request ``req``: a reply, an error, or ``"no_reply"``."""
    if type(msg) is tuple:
        n = len(msg)
        if n == 2 and type(msg[0]) is Alias and msg[0] == req.alias:
            return ("reply", msg[1])
        if (
            n == 5
            and type(msg[0]) is str
            and msg[0] == "DOWN"
            and type(msg[1]) is Ref
            and msg[1] == req.mref
        ):
            return ("error", (msg[4], req.server))
    return NO_REPLY


class ReqIdCollection:
    """An immutable collection of request ids with their labels (reqids_new and friends)."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[ReqId, Any] | None = None) -> None:
        self._items: dict[ReqId, Any] = dict(items) if items else {}

    def add(self, req: ReqId, label: Any) -> "ReqIdCollection":
        """A new collection with ``req`` labelled ``label`` added."""
        if req in self._items:
            raise ValueError(f"{req!r} is already in the collection")
        items = dict(self._items)
        items[req] = label
        return ReqIdCollection(items)

    def without(self, req: ReqId) -> "ReqIdCollection":
        """A new collection without ``req``."""
        items = dict(self._items)
        items.pop(req, None)
        return ReqIdCollection(items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[ReqId]:
        return iter(self._items)

    def to_list(self) -> list[tuple[ReqId, Any]]:
        """``[(req, label), ...]`` in the order they were added."""
        return list(self._items.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReqIdCollection) and self.to_list() == other.to_list()

    def __repr__(self) -> str:
        return f"ReqIdCollection({self.to_list()!r})"


def check_collection(msg: Any, coll: ReqIdCollection, delete: bool) -> Any:
    """The answer ``msg`` is to some request of ``coll``.

    ``(answer, label, rest)`` when it answers one (``rest`` without that request
    if ``delete``), ``"no_request"`` for an empty collection, else ``"no_reply"``.
    """
    if not len(coll):
        return NO_REQUEST
    if type(msg) is tuple and (len(msg) == 2 or len(msg) == 5):
        for req, label in coll.to_list():
            answer = check(msg, req)
            if answer is not NO_REPLY:
                return (answer, label, coll.without(req) if delete else coll)
    return NO_REPLY
