"""How this node's pids, aliases and named values cross the wire: the codec's converters.

A mixin of :class:`~ensemble.dist.node.Node` (its state is the node's: ``name``, ``creation``,
``sent_pids``, ``sent_aliases``, ``remote_pids``...).  Going out, a local pid is remembered
(``sent_pids``, weakly) so that one that comes back is the same object, dead or alive; coming
in, a pid of another node is interned (``remote_pids``), so equal handles are one object.  The
ext a pid travels as is made once (per local process, per remote handle), and the decoder
answers an interned handle again for the same bytes without a converter call
(:class:`~ensemble.dist.codec.Encoder`'s ``quick``, :func:`~ensemble.dist.codec.decoder`'s
``keep``).
"""

from __future__ import annotations

from typing import Any

from .. import _process as P
from .. import _terms
from ..decide import allow as _allow
from ..threads import get_ident
from . import codec, functions, wire_types

__all__ = ["Identities", "ref_in"]


def ref_in(node: str, n: int, creation: int) -> _terms.Ref:
    """A reference that crossed the wire: equal to the one made on ``node`` (refs compare by
    number and node), this node's own included."""
    return _terms.Ref(n, node)


class Identities:
    """The codec's view of this node's values (a part of :class:`~ensemble.dist.node.Node`)."""


    def encode(self, value: Any) -> bytes:
        """``value`` in the codec, with this node's pids, refs and aliases (from any thread)."""
        if get_ident() == self.carrier_ident:
            return self.encoder.encode(value)
        return codec.encode(value, pid_out=self.pid_out, alias_out=self.alias_out,
                            named_out=wire_types.named_out)

    def named_in(self, name: str, fields: tuple) -> Any:
        """A value that crossed by name (:mod:`ensemble.dist.wire_types`); a function is let in
        when the peer it came from is trusted or this node's ``allow`` lets it in."""
        return wire_types.named_in(name, fields, self._function_in)

    def _function_in(self, fname: str) -> Any:
        if self.reading_from in self.trusted or _allow.allowed(self.allow, fname):
            return functions.resolve(fname)
        return None

    def alias_out(self, a: Any) -> tuple[str, int, int] | None:
        """An alias as the wire carries it (a local one is remembered, to come back as itself)."""
        t = type(a)
        if t is _terms.Alias:
            self.sent_aliases[a._n] = a
            return (self.name, a._n, self.creation)
        if t is _terms.RemoteAlias:
            return (a._node, a._n, a.creation)
        return None

    def alias_in(self, node: str, n: int, creation: int) -> Any:
        """The in-memory alias for one that arrived: this node's own (the same object), else a
        :class:`~ensemble._terms.RemoteAlias`."""
        if node == self.name and creation == self.creation:
            a = self.sent_aliases.get(n)
            if a is not None:
                return a
        return _terms.RemoteAlias(n, node, creation)

    def pid_out(self, pid: Any) -> tuple[str, int, int] | None:
        """A pid as the wire carries it, or None for a value that is not a pid."""
        t = type(pid)
        if t is P.Pid:
            known = self._sent_refs.get(pid.id)
            if known is None or known() is not pid:
                self.sent_pids[pid.id] = pid
            return (self.name, pid.id, self.creation)
        if t is P.RemotePid:
            return (pid._node, pid.id, pid.creation)
        return None

    def _local_pid_ext(self, pid: P.Pid) -> Any:
        """The ext of a local pid, made once per process (the encoder's quick path)."""
        ext = self._pid_exts.get(pid.id)
        if ext is None:  # (a pid whose ext is kept is in sent_pids: it is alive, being sent)
            ext = codec.pid_ext(*self.pid_out(pid))
            exts = self._pid_exts
            if len(exts) >= 4096:
                exts.clear()
            exts[pid.id] = ext
        return ext

    def _remote_pid_ext(self, pid: P.RemotePid) -> Any:
        """The ext of a remote pid, made once per handle (the encoder's quick path)."""
        known = self._remote_exts.get(id(pid))
        if known is not None and known[0] is pid:
            return known[1]
        ext = codec.pid_ext(pid._node, pid.id, pid.creation)
        if ext is not None:
            exts = self._remote_exts
            if len(exts) >= 4096:
                exts.clear()
            exts[id(pid)] = (pid, ext)
        return ext

    def _interned(self, pid: Any) -> bool:
        """Whether :meth:`pid_in` answers ``pid`` again for the same fields: a pid of another
        node (interned in ``remote_pids``), not one of this node's."""
        return type(pid) is P.RemotePid and pid._node != self.name

    def pid_in(self, node: str, id: int, creation: int) -> Any:
        """The in-memory pid for one that arrived: a local process of this run, else a handle."""
        if node == self.name and creation == self.creation:
            p = P.TABLE.get(id) or self.sent_pids.get(id)
            if p is not None:
                return p
        key = (node, id, creation)
        p = self.remote_pids.get(key)
        if p is None:
            p = self.remote_pids.setdefault(key, P.new_remote_pid(node, id, creation))
        return p
