"""The operations one node asks of another: which tuples are well formed (``ensemble.dist``).

Pure: a frame's ``OP`` envelope carries a tuple ``(op_name, *fields)`` in the codec (see
:mod:`ensemble.dist.node` for what each does); a node carries one out only when
:func:`well_formed` says its fields have the types below, and drops the connection otherwise
(a peer that sends such a tuple is not a node of ours).  ``int`` means exactly ``int`` (not
``bool``); ``pid`` a remote pid, as the receiving node decodes one (its class is passed in);
``reply`` a bool or a remote alias (its class is passed in too).

=================  ================================================================
operation          fields
=================  ================================================================
``send``           id (int), creation (int), message
``send_named``     name (str), message
``alias``          alias number (int), creation (int), message
``spawn``          sender (pid), request (int), function name (str), args (tuple),
                   link (bool), reply (bool, or an alias of the sender's that the
                   result goes to), monitor ref (int)
``spawned``        id (int), creation (int), request (int), result
``link``           sender (pid), id (int), creation (int)
``unlink``         sender (pid), id (int), creation (int)
``exit``           sender (pid), id (int), creation (int), reason, is_link (bool)
``monitor``        watcher (pid), id (int), creation (int), ref (int)
``monitor_named``  watcher (pid), name (str), ref (int)
``demonitor``      ref (int)
``down``           id (int), creation (int), ref (int), reason
=================  ================================================================
"""

from __future__ import annotations

from typing import Any

__all__ = ["SHAPES", "well_formed"]

_ANY = object()

#: operation name -> the type each field must have exactly (``"pid"``: the remote pid class
#: given to :func:`well_formed`; ``"reply"``: a bool or the remote alias class given to it;
#: ``_ANY``: any value)
SHAPES: dict[str, tuple[Any, ...]] = {
    "send": (int, int, _ANY),
    "send_named": (str, _ANY),
    "alias": (int, int, _ANY),
    "spawn": ("pid", int, str, tuple, bool, "reply", int),
    "spawned": (int, int, int, _ANY),
    "link": ("pid", int, int),
    "unlink": ("pid", int, int),
    "exit": ("pid", int, int, _ANY, bool),
    "monitor": ("pid", int, int, int),
    "monitor_named": ("pid", str, int),
    "demonitor": (int,),
    "down": (int, int, int, _ANY),
}


def well_formed(env: Any, pid_type: type, alias_type: type | None = None) -> bool:
    """Whether ``env`` is a tuple ``(op_name, *fields)`` of an operation in :data:`SHAPES`, its
    fields of the types there (``pid_type`` for a pid, ``alias_type`` for a reply's alias)."""
    if type(env) is not tuple or not env or type(env[0]) is not str:
        return False
    shape = SHAPES.get(env[0])
    if shape is None or len(env) != len(shape) + 1:
        return False
    for want, value in zip(shape, env[1:]):
        if want is _ANY:
            continue
        if want == "reply":
            if type(value) is not bool and (alias_type is None or type(value) is not alias_type):
                return False
            continue
        if type(value) is not (pid_type if want == "pid" else want):
            return False
    return True
