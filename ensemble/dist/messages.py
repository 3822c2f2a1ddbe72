"""Messages between nodes: the hot path of a send and of a receipt.

A mixin of :class:`~ensemble.dist.node.Node`.  Sending (:meth:`Messages.send`,
:meth:`Messages.send_named`, :meth:`Messages.send_alias`, through ``P.REMOTE`` from any
thread): on the node's carrier, one encode and one queueing on the peer's
:class:`~ensemble.dist.conn.Conn`, no greenlet switch; from another thread, or to a peer not
connected yet, the frame goes through :meth:`Messages._route` (a dial is started, the frame
waits for it).  Receiving: :meth:`Messages.on_bytes` is the reader's loop over whole frames,
delivering messages in runs; any other envelope goes to :meth:`Messages.on_frame`, and an
operation to :meth:`~ensemble.dist.operations.Operations._dispatch`.
"""

from __future__ import annotations

from typing import Any, Callable

import gevent
import msgpack

from .. import _process as P
from .. import _terms
from .. import logger as _logger
from ..decide import framing, handshake
from ..threads import get_ident
from . import envelope
from .conn import Conn

__all__ = ["Messages"]

_SEND, _SEND_NAMED = envelope.SEND, envelope.SEND_NAMED
_TO_SIZE = envelope.TO_SIZE
_unpack_to = envelope.unpack_to
_pack_to = envelope.pack_to
_HEADER = framing.HEADER
_unpackb = msgpack.unpackb
_deliver_run = P.deliver_many
_unpack_length = framing.unpack_length

#: A frame that is not one of the envelopes a node understands (the connection is dropped).
_BadEnvelope = envelope.BadEnvelope


class Messages:
    """Sending and receiving messages (a part of :class:`~ensemble.dist.node.Node`)."""

    # -- the sending side (called through REMOTE from any thread) ----------------------------

    def send(self, pid: P.RemotePid, msg: Any) -> None:
        """Send ``msg`` to the remote process ``pid`` (dropped when its node cannot be reached)."""
        node = pid._node
        if node == self.name:  # a pid of an earlier run of this node: names no process
            return
        if get_ident() == self.carrier_ident:  # the hot path: one call to encode, one to queue
            conn = self.conns.get(node)
            if conn is not None and conn.put_message(_pack_to(_SEND, pid.id, pid.creation), msg):
                return
        self._route(node, envelope.send(pid.id, pid.creation, self.encode(msg)))

    def send_alias(self, a: _terms.RemoteAlias, msg: Any) -> None:
        """Send ``msg`` through the alias ``a`` of a process on another node."""
        if a._node == self.name:  # an alias of an earlier run of this node: names nobody
            return
        self._route(a._node, envelope.alias(a._n, a.creation, self.encode(msg)))

    def send_named(self, name: str, node: str, msg: Any) -> None:
        """Send ``msg`` to the process registered as ``name`` on ``node``."""
        header = self.named_headers.get(name)
        if header is not None and get_ident() == self.carrier_ident:  # the hot path
            conn = self.conns.get(node)
            if conn is not None and conn.put_message(header, msg):
                return
        if header is None:
            if len(self.named_headers) >= 4096:
                self.named_headers.clear()
            header = self.named_headers[name] = envelope.named_header(name)
        if header is None:  # a name no header carries: the operation's tuple does
            self._route(node, envelope.op(self.encode(("send_named", name, msg))))
        else:
            self._route(node, header + self.encode(msg))

    def _route(self, peer: str, payload: bytes, on_fail: Callable[[], None] | None = None) -> None:
        if len(payload) > self.max_frame:
            raise framing.FrameTooLarge(len(payload), self.max_frame)
        if get_ident() == self.carrier_ident:
            conn = self.conns.get(peer)
            if conn is not None:
                conn.put(payload)
                return
            self._route_here(peer, payload, on_fail)
        else:
            self.carrier.call_soon(self._route_here, peer, payload, on_fail)

    def _route_here(self, peer: str, payload: bytes, on_fail: Callable[[], None] | None = None) -> None:
        conn = self.conns.get(peer)
        if conn is not None:
            conn.put(payload)
            return
        if not handshake.valid_name(peer) or peer == self.name:
            if on_fail is not None:  # later: the caller may hold P.LOCK
                self.carrier.call_soon(on_fail)
            return
        self.pending.setdefault(peer, []).append((payload, on_fail))
        if peer not in self.dialling:
            gevent.spawn(self.dial, peer)

    # -- frames ------------------------------------------------------------------------------

    def on_bytes(self, conn: Conn, data: bytes, limit: int) -> int:
        """Carry out the whole frames at the start of ``data`` in order (each as
        :meth:`on_frame` does); answer how many bytes they took.

        Cut as :func:`ensemble.decide.framing.split` cuts (``FrameTooLarge`` as soon as a
        header announces more than ``limit``), in one loop with the hot path: a message to a
        name or a pid is decoded and delivered here, without a Python call but delivery's or a
        copy of the frame (the codec's decode runs again on a body that fails, to say why).
        Consecutive messages to one process are handed over together
        (:func:`ensemble._process.deliver_many`: one append, at most one wake); a run is
        delivered before anything else is carried out (another frame, an error), so every
        message keeps its place.
        """
        decode, eh, lh, open_tags = self.decoder
        self.reading_from = conn.peer
        creation = self.creation
        table = P.TABLE
        names = P.NAMES
        names_in = self._names_in
        last_key = None  # the header of the last message to a name here, and that name
        key_end = 0  # len(last_key)
        last_name = ""
        run_to: Any = None  # the process the messages of ``run`` go to
        run: list = []
        end = len(data)
        at = 0
        try:
            while end - at >= _HEADER:
                (n,) = _unpack_length(data, at)
                if n > limit:
                    raise framing.FrameTooLarge(n, limit)
                start = at + _HEADER
                stop = start + n
                if stop > end:
                    break
                at = stop
                if last_key is not None and n >= key_end and data[start : start + key_end] == last_key:
                    body = data[start + key_end : stop]
                    try:
                        msg = _unpackb(body, ext_hook=eh, list_hook=lh, strict_map_key=False,
                                       unicode_errors="surrogatepass")
                    except Exception:  # noqa: BLE001 - decode says why, as Undecodable
                        msg = decode(body)
                    if open_tags[0]:
                        decode(body)
                    p = names.get(last_name)
                    if p is not None:
                        if p is run_to:
                            run.append(msg)
                        else:
                            if run:
                                _deliver_run(run_to, run)
                            run_to = p
                            run = [msg]
                    continue
                form = data[start] if n else -1
                if form == _SEND_NAMED:
                    key = data[start : min(stop, start + 2 + (data[start + 1] if n > 1 else 0))]
                    name = names_in.get(key)  # (a key cut short by the frame's end is never known)
                    if name is not None:  # a header that arrived whole and valid before
                        last_key, last_name, key_end = key, name, len(key)
                        at = start - _HEADER
                        continue  # again, through the path above
                elif form == _SEND and n >= _TO_SIZE:
                    _, id, c = _unpack_to(data, start)
                    body = data[start + _TO_SIZE : stop]
                    try:
                        msg = _unpackb(body, ext_hook=eh, list_hook=lh, strict_map_key=False,
                                       unicode_errors="surrogatepass")
                    except Exception:  # noqa: BLE001 - decode says why, as Undecodable
                        msg = decode(body)
                    if open_tags[0]:
                        decode(body)
                    if c == creation:
                        p = table.get(id)
                        if p is not None:
                            if p is run_to:
                                run.append(msg)
                            else:
                                if run:
                                    _deliver_run(run_to, run)
                                run_to = p
                                run = [msg]
                    continue
                if run:
                    _deliver_run(run_to, run)
                    run_to, run = None, []
                self.on_frame(conn, data[start:stop])
        finally:
            if run:
                _deliver_run(run_to, run)
        return at

    def on_frame(self, conn: Conn, payload: bytes) -> None:
        """One frame arrived on ``conn``: an envelope (:mod:`ensemble.dist.envelope`).

        A frame that does not decode, or is not an envelope, raises (the connection is
        dropped); an operation that fails is reported and the connection goes on.
        """
        form, to, creation, at = envelope.parse(payload)
        value = self.decode(payload[at:])
        if form == envelope.SEND_NAMED:
            names_in = self._names_in
            if len(names_in) >= 4096:
                names_in.clear()
            names_in[payload[:at]] = to  # the header's bytes name this name from now on
            p = P.NAMES.get(to)
            if p is not None:
                P.deliver(p, value)
            return
        if form == envelope.SEND:
            if creation == self.creation:
                p = P.TABLE.get(to)
                if p is not None:
                    P.deliver(p, value)
            return
        if form == envelope.ALIAS:
            if creation == self.creation:
                a = self.sent_aliases.get(to)
                if a is not None:
                    P.deliver_alias(a, value)
            return
        env = value
        if type(env) is not tuple or not env or type(env[0]) is not str:
            raise _BadEnvelope(repr(env)[:200])
        try:
            self._dispatch(conn, env)
        except _BadEnvelope:
            raise
        except Exception as why:  # noqa: BLE001 - one failed operation does not end the connection
            _logger.report("dist_frame_failed", node=self.name, peer=conn.peer, op=env[0],
                           reason=repr(why)[:200])
