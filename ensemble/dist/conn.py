"""One connection between two nodes: its socket's bytes in and out, on the node's carrier.

Until the handshake ends a connection reads and writes one frame at a time
(:meth:`Conn.send_now`, :meth:`Conn.read_frame`).  After it, a reader greenlet cuts what
arrives into frames (:func:`ensemble.decide.framing.split`) and hands them to the node in
order, and writes go through an outbox that batches them:

* :meth:`Conn.put` queues a frame; the first one queued schedules a flush at the carrier's
  next turn (a hub callback), so the frames a process sends before it waits go in one write;
  :data:`BATCH` frames queued flush at once, so a long burst streams while it is made.
* A flush writes straight to the socket, without blocking (a plain socket's
  ``send``).  What the kernel does not take goes to the writer greenlet, which blocks on it
  and then writes whatever was queued meanwhile, in one write each time, until the outbox is
  empty.  Frames keep their order: while the writer holds bytes, flushes leave the outbox to it.
* Under TLS every write goes through the writer greenlet.

No write blocks the caller of :meth:`Conn.put` (callers may hold ``P.LOCK``); a failed write
ends the connection from a hub callback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import gevent.socket

from .. import _process as P
from ..decide import framing
from . import codec
from .envelope import BadEnvelope

if TYPE_CHECKING:
    from .node import Node

__all__ = ["Conn", "BATCH", "READ_SIZE"]

#: Frames queued that flush at once, without waiting for the carrier's next turn (the raw
#: socket peer of ``bench/distribution.py`` writes the same number per ``sendall``).
BATCH = 1000
#: Bytes asked of the socket per read.
READ_SIZE = 262144

_length_header = framing.length_header
_KEEP_BUFFER = codec.KEEP_BUFFER
_unpack_length = framing.unpack_length
_HEADER = framing.HEADER
_wait_handing_off = P.wait_handing_off


class Conn:
    """One established (or handshaking) connection to a peer node, on the node's carrier."""

    def __init__(self, node: "Node", sock: Any, dialled_by: str) -> None:
        self.node = node
        self.sock = sock
        self.dialled_by = dialled_by
        self.peer: str | None = None
        self.creation: int | None = None
        self.closed = False
        self.writer: Any = None
        self.reader: Any = None
        self.buffer = bytearray()  # bytes read past the last whole frame of the handshake
        #: length, envelope header and body of each frame queued, in order, not yet handed to
        #: the socket (three items a frame)
        self.out: list[bytes] = []
        self.flushing = False  # a flush is scheduled on the carrier
        self.stalled = False  # the writer greenlet holds bytes the kernel did not take yet
        self.held: Any = b""  # those bytes
        self.wake = gevent.event.Event()
        self.failing = False
        self.read_watcher: Any = None  # the reader's, on a plain socket
        self.loop = node.carrier.loop
        self.encoder = node.encoder
        self.limit = node.max_frame
        # a plain gevent socket's own non-blocking socket: written without a greenlet switch
        self.direct: Any = getattr(sock, "_sock", None) if type(sock) is gevent.socket.socket else None

    # -- raw frames (handshake) -----------------------------------------------------------

    def send_now(self, value: Any) -> None:
        """Encode ``value`` and write it as one handshake frame, blocking this greenlet."""
        self.sock.sendall(framing.frame(self.node.encode(value), framing.HANDSHAKE_LIMIT))

    def read_frame(self, limit: int) -> bytes | None:
        """The next whole frame's payload, or None at the end of the stream."""
        while True:
            frames, used = framing.split(self.buffer, limit)
            if frames:
                first = frames[0]
                del self.buffer[: framing.HEADER + len(first)]
                return first
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buffer += data

    # -- after the handshake ----------------------------------------------------------------

    def start(self) -> None:
        """Start the writer and the reader greenlets of an established connection."""
        self.writer = gevent.spawn(self._write_loop)
        self.reader = gevent.spawn(self._read_loop)

    def put_message(self, header: bytes, value: Any) -> bool:
        """:meth:`put_parts` of ``header`` and ``value`` in the node's codec, encoded here (the
        hot path of a send: no call but msgpack's); answers False, queueing nothing, when
        ``value`` needs :meth:`Node.encode` to say why it fails, the frame is over
        ``max_frame``, or the encoder is in use further up the stack."""
        enc = self.encoder
        if enc.busy[0]:
            return False
        try:
            body = enc.pack(value)
        except Exception:  # noqa: BLE001 - the caller encodes again, to raise the right error
            return False
        n = len(header) + len(body)
        if n > self.limit:
            return False
        if n > _KEEP_BUFFER:
            enc.renew()
        if self.closed:
            return True
        out = self.out
        out.append(_length_header(n))
        out.append(header)
        out.append(body)
        if len(out) % (3 * BATCH) == 0:  # another BATCH frames queued
            if self.stalled:
                if self.direct is not None:
                    self._push()  # the kernel may take more by now (the writer waits for it)
            else:
                self.flush()
        elif not self.flushing and not self.stalled:
            self.flushing = True
            self.loop.run_callback(self.flush)
        return True

    def put(self, payload: bytes) -> None:
        """On the node's carrier: queue one frame (its payload checked against ``max_frame``
        by the caller); never blocks."""
        self.put_parts(b"", payload)

    def put_parts(self, header: bytes, body: bytes) -> None:
        """:meth:`put` of the frame whose payload is ``header + body`` (not joined here)."""
        if self.closed:
            return
        out = self.out
        out.append(_length_header(len(header) + len(body)))
        out.append(header)
        out.append(body)
        if len(out) % (3 * BATCH) == 0:  # another BATCH frames queued
            if self.stalled:
                if self.direct is not None:
                    self._push()  # the kernel may take more by now (the writer waits for it)
            else:
                self.flush()
        elif not self.flushing and not self.stalled:
            self.flushing = True
            self.loop.run_callback(self.flush)

    def flush(self) -> None:
        """On the node's carrier: hand the outbox to the socket, without blocking; what the
        kernel does not take goes to the writer greenlet."""
        self.flushing = False
        out = self.out
        if not out or self.stalled or self.closed:
            return
        data = b"".join(out)
        self.out = []
        direct = self.direct
        sent = 0
        if direct is not None:
            try:
                sent = direct.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as e:
                self._failed(e)
                return
        if sent < len(data):
            self.held = data[sent:] if sent else data
            self.stalled = True
            self.wake.set()

    def _push(self) -> bool:
        """While stalled, on a plain socket: write what the kernel takes now, without
        blocking; answers whether the outbox is all written (no longer stalled)."""
        direct = self.direct
        while True:
            held = self.held
            try:
                sent = direct.send(held)
            except BlockingIOError:
                return False
            except OSError as e:
                self._failed(e)
                return False
            if sent < len(held):
                self.held = held[sent:]
                return False
            out = self.out
            if not out:
                self.held = b""
                self.stalled = False
                return True
            self.held = b"".join(out)  # frames queued meanwhile go in one write
            self.out = []

    def _failed(self, e: OSError) -> None:
        if not self.failing:
            self.failing = True
            self.loop.run_callback(self.node.connection_lost, self, ("write_failed", str(e)))

    def _write_loop(self) -> None:
        if self.direct is not None:
            self._direct_write_loop()
            return
        try:
            while not self.closed:
                self.wake.wait()
                self.wake.clear()
                while self.stalled and not self.closed:
                    self.sock.sendall(self.held)
                    out = self.out
                    if out:  # frames queued meanwhile go in one write
                        self.held = b"".join(out)
                        self.out = []
                    else:
                        self.held = b""
                        self.stalled = False
        except OSError as e:
            self.node.connection_lost(self, ("write_failed", str(e)))

    def _direct_write_loop(self) -> None:
        """The writer of a plain socket: waits until the kernel takes more, then pushes."""
        hub = gevent.get_hub()
        watcher = self.loop.io(self.sock.fileno(), 2)  # 2: writable
        try:
            while not self.closed:
                self.wake.wait()
                self.wake.clear()
                while self.stalled and not self.closed and not self.failing:
                    hub.wait(watcher)
                    self._push()
        finally:
            watcher.close()

    def _read_loop(self) -> None:
        """Read and hand over whole frames until the stream ends or fails.

        On a plain socket the reader reads the socket's own non-blocking socket: after a read
        that took less than it asked (the kernel had no more), it waits until the socket is
        readable before it reads again, so a connection that goes quiet costs no failed read
        (an ``EAGAIN`` raised and caught) per wake-up, only the wait.
        """
        reason: Any = "closed"
        node = self.node
        limit = node.max_frame
        on_bytes = node.on_bytes
        direct = self.direct
        if direct is not None:
            recv = direct.recv
            watcher = self.read_watcher = self.loop.io(self.sock.fileno(), 1)  # 1: readable
            carrier = node.carrier
            wait_handing_off = _wait_handing_off
        else:
            recv = self.sock.recv
        drained = False  # the last read took less than it asked: wait before the next
        pending: Any = bytes(self.buffer)  # read, not carried out: bytes, or a bytearray
        self.buffer = bytearray()  # that grows while a frame is partial
        need = 0  # the bytes pending must hold before a frame in it is whole
        try:
            while True:
                if pending and len(pending) >= need:
                    data = pending if type(pending) is bytes else bytes(pending)
                    used = on_bytes(self, data, limit)
                    if used < len(data):
                        pending = bytearray(memoryview(data)[used:])
                        need = _HEADER + _unpack_length(pending, 0)[0] if len(pending) >= _HEADER else _HEADER
                    else:
                        pending = b""
                        need = 0
                if self.closed:
                    break
                if direct is not None:
                    if drained:  # the process just woken, if any, runs first
                        wait_handing_off(carrier, watcher)
                        if self.closed:
                            break
                    try:
                        data = recv(READ_SIZE)
                    except BlockingIOError:  # readable, then read by nobody: wait again
                        drained = True
                        continue
                    drained = len(data) < READ_SIZE
                else:
                    data = recv(READ_SIZE)
                if not data:
                    break
                if pending:
                    pending += data
                else:
                    pending = data
                    need = 0
        except framing.FrameTooLarge as e:
            reason = ("frame_too_large", e.size)
        except codec.CodecError as e:
            reason = ("undecodable", str(e))
        except BadEnvelope as e:
            reason = ("bad_envelope", e.args[0])
        except ConnectionResetError:  # the peer closed with bytes of ours unread: a close, not a fault
            reason = "reset"
        except OSError as e:
            reason = ("read_failed", str(e))
        finally:
            if direct is not None:
                self.read_watcher = None
                watcher.close()
        node.connection_lost(self, reason)

    def close(self) -> None:
        """Close the socket and stop both greenlets (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self.out = []
        self.wake.set()
        if self.read_watcher is not None:
            self.read_watcher.stop()  # before its descriptor is closed (and maybe reused)
        try:
            self.sock.close()
        except OSError:
            pass
        current = gevent.getcurrent()
        for g in (self.reader, self.writer):
            if g is not None and g is not current:
                g.kill(block=False)
