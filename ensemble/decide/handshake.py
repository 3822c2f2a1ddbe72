"""The handshake two nodes go through before anything else crosses a connection.

The initiator ``A`` dialled the acceptor ``B``.  Each message is a tuple (sent with the wire
codec, in a frame of at most :data:`ensemble.decide.framing.HANDSHAKE_LIMIT` bytes)::

    A -> B   ("name", A, creation_A)
    B -> A   ("status", s)                      s: "ok", "nok" or "alive" (see name_status)
    B -> A   ("challenge", B, creation_B, c_B)  only after "ok"
    A -> B   ("reply", c_A, proof(c_B, A, B))
    B -> A   ("ack", proof(c_A, B, A))

``proof(challenge, signer, peer)`` is the lowercase hex HMAC-SHA256 of the three, one per line,
keyed with the cookie: each end proves it holds the cookie, over a challenge the other chose,
bound to both names and to who signs, so a proof can be neither replayed nor reflected.  A wrong
cookie fails at the first proof checked; nothing else is accepted before the end.

Pure: no sockets, no clock, no randomness (the runtime draws the challenges and passes them in).
Each ``*_step`` takes a state and one received message and answers ``(state, to_send, outcome)``;
``outcome`` is None while the handshake goes on, then :class:`Done` or :class:`Failed`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Callable, Final

from .values import Value

__all__ = [
    "STATUSES",
    "MAX_NAME",
    "proof",
    "valid_name",
    "name_status",
    "on_up",
    "Done",
    "Failed",
    "Initiator",
    "Acceptor",
    "initiate",
    "initiator_step",
    "accept",
    "acceptor_step",
]

#: The statuses an acceptor answers a name with.
STATUSES: Final = frozenset({"ok", "nok", "alive"})
#: The longest node name, in characters.
MAX_NAME: Final = 255


def proof(cookie: str, challenge: str, signer: str, peer: str) -> str:
    """Lowercase hex HMAC-SHA256, keyed with ``cookie``, of ``challenge``, ``signer`` and ``peer``
    one per line (UTF-8)."""
    msg = f"{challenge}\n{signer}\n{peer}".encode()
    return hmac.new(cookie.encode(), msg, hashlib.sha256).hexdigest()


def valid_name(name: Any) -> bool:
    """Whether ``name`` is a node name: a str ``"name@host"`` of at most :data:`MAX_NAME`
    characters, both parts non-empty, one ``@``, no whitespace or control characters."""
    if type(name) is not str or not 3 <= len(name) <= MAX_NAME or name.count("@") != 1:
        return False
    alive, host = name.split("@")
    return bool(alive) and bool(host) and name.isprintable() and not any(ch.isspace() for ch in name)


def name_status(me: str, peer: str, peer_creation: int, *, dialling_peer: bool,
                connected_creation: int | None) -> str:
    """What an acceptor answers a peer's name with.

    ``"nok"`` for its own name, or when it is itself dialling that peer and its own name sorts
    higher (of two simultaneous connects, the one the higher name dialled goes on); ``"alive"`` when
    it is connected to that very run of the peer already; otherwise ``"ok"`` (also when the
    connection it has is to an earlier run: that one is replaced).
    """
    if peer == me or (dialling_peer and me > peer):
        return "nok"
    if connected_creation is not None and connected_creation == peer_creation:
        return "alive"
    return "ok"


def on_up(existing_creation: int | None, new_creation: int, *, existing_from: str | None,
          new_from: str) -> str:
    """What a node does with a connection that finished its handshake, given the one it may
    already have to that peer.

    ``"install"`` when it has none; ``"replace_down"`` when the existing one is to another run
    of the peer (that run goes down first: nodedown before nodeup); for the same run, the
    connection dialled by the higher-named node is kept: ``"replace"`` when that is the new one,
    ``"drop"`` (the new one) otherwise.  ``existing_from``/``new_from`` name the node that dialled
    each connection.
    """
    if existing_creation is None:
        return "install"
    if existing_creation != new_creation:
        return "replace_down"
    return "replace" if existing_from is None or new_from > existing_from else "drop"


class Done(Value):
    """The handshake succeeded: ``peer`` (its name) and ``creation`` (its run) are proven."""

    __slots__ = ("peer", "creation")
    _fields = ("peer", "creation")


class Failed(Value):
    """The handshake failed with ``reason``: the connection is closed, nothing was accepted."""

    __slots__ = ("reason",)
    _fields = ("reason",)


class Initiator(Value):
    """The dialling side: who it is, whom it dialled, its challenge, and what it waits for."""

    __slots__ = ("me", "creation", "peer", "cookie", "challenge", "waiting", "peer_creation")
    _fields = ("me", "creation", "peer", "cookie", "challenge", "waiting", "peer_creation")


class Acceptor(Value):
    """The accepting side: who it is, its challenge, the peer once named, and what it waits for."""

    __slots__ = ("me", "creation", "cookie", "challenge", "waiting", "peer", "peer_creation")
    _fields = ("me", "creation", "cookie", "challenge", "waiting", "peer", "peer_creation")


Step = tuple[Any, list[tuple], "Done | Failed | None"]


def _is_int(x: Any) -> bool:
    return type(x) is int


def _is_str(x: Any) -> bool:
    return type(x) is str and 0 < len(x) <= MAX_NAME


def _shaped(msg: Any, tag: str, *checks: Callable[[Any], bool]) -> bool:
    """Whether ``msg`` is ``(tag, x1, ...)`` with each ``xi`` passing its check."""
    return (
        type(msg) is tuple
        and len(msg) == len(checks) + 1
        and type(msg[0]) is str
        and msg[0] == tag
        and all(check(x) for check, x in zip(checks, msg[1:]))
    )


def initiate(me: str, creation: int, peer: str, cookie: str, challenge: str) -> tuple[Initiator, list[tuple]]:
    """Start dialling ``peer``: the state, and the name message to send."""
    state = Initiator(me, creation, peer, cookie, challenge, "status", None)
    return state, [("name", me, creation)]


def initiator_step(state: Initiator, msg: Any) -> Step:
    """The dialling side receives ``msg``."""
    if state.waiting == "status":
        if not _shaped(msg, "status", lambda s: type(s) is str and s in STATUSES):
            return state, [], Failed(("unexpected", msg))
        if msg[1] != "ok":
            return state, [], Failed(msg[1])
        return _with(state, waiting="challenge"), [], None
    if state.waiting == "challenge":
        if not _shaped(msg, "challenge", _is_str, _is_int, _is_str):
            return state, [], Failed(("unexpected", msg))
        _, name, peer_creation, theirs = msg
        if name != state.peer:
            return state, [], Failed(("wrong_node", name))
        mine = proof(state.cookie, theirs, state.me, state.peer)
        return _with(state, waiting="ack", peer_creation=peer_creation), [("reply", state.challenge, mine)], None
    if state.waiting == "ack":
        if not _shaped(msg, "ack", _is_str):
            return state, [], Failed(("unexpected", msg))
        if not _same_proof(msg[1], proof(state.cookie, state.challenge, state.peer, state.me)):
            return state, [], Failed("bad_cookie")
        return _with(state, waiting="nothing"), [], Done(state.peer, state.peer_creation)
    return state, [], Failed(("unexpected", msg))


def accept(me: str, creation: int, cookie: str, challenge: str) -> Acceptor:
    """Start accepting a connection: the state (the peer speaks first)."""
    return Acceptor(me, creation, cookie, challenge, "name", None, None)


Facts = Callable[[str], tuple[bool, "int | None"]]


def acceptor_step(state: Acceptor, msg: Any, facts: Facts) -> Step:
    """The accepting side receives ``msg``.

    ``facts(peer)`` answers ``(dialling_peer, connected_creation)`` about a peer once it has
    given its name (see :func:`name_status`).
    """
    if state.waiting == "name":
        if not _shaped(msg, "name", valid_name, _is_int):
            return state, [], Failed(("unexpected", msg))
        _, peer, peer_creation = msg
        dialling, connected = facts(peer)
        status = name_status(state.me, peer, peer_creation, dialling_peer=dialling, connected_creation=connected)
        if status != "ok":
            return state, [("status", status)], Failed(status)
        out = [("status", "ok"), ("challenge", state.me, state.creation, state.challenge)]
        return _with(state, waiting="reply", peer=peer, peer_creation=peer_creation), out, None
    if state.waiting == "reply":
        if not _shaped(msg, "reply", _is_str, _is_str):
            return state, [], Failed(("unexpected", msg))
        _, theirs, their_proof = msg
        if not _same_proof(their_proof, proof(state.cookie, state.challenge, state.peer, state.me)):
            return state, [], Failed("bad_cookie")
        ack = ("ack", proof(state.cookie, theirs, state.me, state.peer))
        return _with(state, waiting="nothing"), [ack], Done(state.peer, state.peer_creation)
    return state, [], Failed(("unexpected", msg))


def _same_proof(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, in constant time (any str from the wire: as UTF-8 bytes)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def _with(state: Any, **changes: Any) -> Any:
    """A copy of ``state`` with ``changes``."""
    values = {f: getattr(state, f) for f in state._fields}
    values.update(changes)
    return type(state)(*(values[f] for f in state._fields))
