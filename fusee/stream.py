"""Streams: a run's durable, ordered chunks (``ctx.stream(name)``) and reading them (``engine.read_stream``).

Writing (:class:`Stream`, in the run's process):

* from **workflow code**, ``write(chunk)`` is an operation (kind ``chunk``, named by the stream): a
  ``Chunk`` record completes it, and replay hands back the recorded chunk's offset without recording it
  again (a chunk written before a crash is recorded once).  ``close()`` likewise (kind ``close``,
  ``StreamClose``).
* from a **step body** (the same writer object, used while ``ctx.step`` runs the body), a chunk is the
  step's progress: ``Chunk`` with ``step`` naming the step, appended as it is written (so a reader sees
  tokens while the step still runs), not an operation of its own.  The body runs at least once; a body
  run again (after a crash before its ``Step`` was durable, or for a retry) skips the writes at the
  positions its earlier runs recorded and records only those past them: the recorded prefix is kept
  (:func:`fusee.replay.step_write`).  :meth:`Stream.resume` tells a body how many of its chunks are
  already there and moves its next write after them, so it can go on instead of producing them again.

A chunk is appended at once (it never waits for the disk); a reader gets it only once it is durable, so
a chunk read never changes and is never lost.  Writing to a closed stream raises
:class:`fusee.errors.StreamClosed`; a chunk the codec refuses raises
:class:`fusee.errors.NotSerializable`; nothing is recorded either way.  Closing a closed stream does
nothing.  A stream ends for its readers when it is closed or when its run ends (however it ends).

Reading (:func:`read`): ask the run's shard server for the chunks from ``offset``; wait until the last is
durable, yield them; when there is nothing new, the server tells the reader's alias once a record of
the stream is appended (or the run ends, or the server restarts: then it asks again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT

from . import records as r
from .errors import StorageError, StreamClosed
from .replay import CHUNK, CLOSE, Replay, step_write
from .run_state import _DONE, _STREAM

if TYPE_CHECKING:
    from .ctx import Ctx
    from .host import Host

__all__ = ["Stream", "read", "READ_BATCH"]

READ_BATCH = 1024  # at most this many chunks per answer of the shard server


def _check_name(name: Any) -> str:
    if type(name) is not str or not name:
        raise TypeError(f"a stream's name is a non-empty str, not {name!r}")
    return name


class Stream:
    """The writer of stream ``name`` of a run: :meth:`write` and :meth:`close` (see the module docstring).

    Use it in the run's own process: its workflow code, or the body of a step it runs."""

    __slots__ = ("_ctx", "name")

    def __init__(self, ctx: "Ctx", name: str) -> None:
        self._ctx = ctx
        self.name = _check_name(name)

    def __repr__(self) -> str:
        return f"<fusee.Stream {self.name!r} of {self._ctx.workflow_id!r}>"

    def _state(self) -> Any:
        st = self._ctx._st
        if st.pid is not None and _e.self() != st.pid:
            raise RuntimeError(f"stream {self.name!r} is written by its run's code or its steps' bodies, not from another process")
        return st

    @property
    def written(self) -> int:
        """Inside a step body: how many chunks of this stream that step's bodies have recorded (a body run
        again may start after them).  Elsewhere: the stream's length as recorded so far."""
        st = self._ctx._st
        h = st.machine.history
        if st.stepping is not None:
            return h.step_chunks(st.stepping, self.name)
        log = h.stream(self.name)
        return 0 if log is None else len(log)

    def resume(self) -> int:
        """Inside a step body: how many chunks of this stream the step's earlier runs recorded, and the body's
        next write goes right after them (so a body run again can go on where the last one stopped instead
        of producing those chunks again; without it, its first writes are skipped as already recorded).
        ``RuntimeError`` outside a step body."""
        st = self._state()
        if st.stepping is None:
            raise RuntimeError("Stream.resume() is for a step body (workflow code's writes replay by themselves)")
        n = st.machine.history.step_chunks(st.stepping, self.name)
        if st.step_writes.get(self.name, 0) < n:
            st.own("step_writes")[self.name] = n
        return n

    def write(self, chunk: Any) -> int:
        """Append ``chunk`` (a codec value) to the stream; its offset (0, 1, 2, ...).  Returns at once (the
        chunk is durable, and readers get it, once the journal's flush takes it)."""
        st = self._state()
        name = self.name
        if st.stepping is not None:
            return self._step_write(st, chunk)
        op = self._ctx._begin(CHUNK, name)
        if type(op) is Replay:
            return op.value  # type: ignore[no-any-return]
        log = st.machine.history.stream(name)
        if log is not None and log.closed is not None:
            raise StreamClosed(st.id, name)
        index = 0 if log is None else len(log)
        st.append(r.Chunk(st.run, op.seq, name, index, None, chunk))
        st.stream_changed(name)
        return index

    def _step_write(self, st: Any, chunk: Any) -> int:
        name, seq = self.name, st.stepping
        n = st.step_writes.get(name, 0)
        log = st.machine.history.stream(name)
        what = step_write(log, seq, n)
        if what == "closed":
            raise StreamClosed(st.id, name)
        if what == "skip":
            st.own("step_writes")[name] = n + 1
            return log.by_step[seq][n]  # type: ignore[union-attr]
        index = 0 if log is None else len(log)
        st.append(r.Chunk(st.run, seq, name, index, st.step_name, chunk))  # NotSerializable: nothing recorded
        st.own("step_writes")[name] = n + 1
        st.stream_changed(name)
        return index

    def close(self) -> None:
        """Close the stream: its readers end after its last chunk.  Closing a closed stream does nothing."""
        st = self._state()
        name = self.name
        if st.stepping is not None:
            if step_write(st.machine.history.stream(name), st.stepping, 0, close=True) == "record":
                st.append(r.StreamClose(st.run, st.stepping, name, st.step_name))
                st.stream_changed(name)
            return
        op = self._ctx._begin(CLOSE, name)
        if type(op) is Replay:
            return
        log = st.machine.history.stream(name)
        if log is not None and log.closed is not None:
            return
        st.append(r.StreamClose(st.run, op.seq, name, None))
        st.stream_changed(name)


def read(host: "Host", id: str, name: str, offset: int = 0, timeout: float | None = None) -> Iterator[Any]:
    """``engine.read_stream``: check the arguments and find the run now (``NotFound``, ``TypeError``,
    ``ValueError`` raised at the call), then iterate its chunks from ``offset``."""
    if type(id) is not str:
        raise TypeError(f"a workflow ID is a str, not {id!r}")
    _check_name(name)
    if type(offset) is not int:
        raise TypeError(f"offset is an int >= 0, not {offset!r}")
    if offset < 0:
        raise ValueError(f"offset is an int >= 0, not {offset!r}")
    if timeout is not None and (type(timeout) not in (int, float) or not timeout >= 0):
        raise ValueError(f"timeout is None or seconds >= 0, not {timeout!r}")
    shard = host.shard_of(id)
    first = host.call(shard, ("stream_read", id, None, name, offset, None))
    return _chunks(host, shard, id, name, offset, timeout, first)


def _chunks(host: "Host", shard: int, id: str, name: str, offset: int, timeout: float | None, got: Any) -> Iterator[Any]:
    run = got[0]
    pause = 0.05
    while True:
        if got is None:
            a = _e.alias()
            try:
                got = host.call(shard, ("stream_read", id, run, name, offset, a))
                if not got[1] and got[2] is None:  # nothing new: wait to be told

                    def match(m: Any) -> Any:
                        if type(m) is tuple and len(m) == 2 and m[1] == a and (m[0] == _STREAM or m[0] == _DONE):
                            return m
                        return NOMATCH

                    if _e.receive(match, timeout=timeout) is TIMEOUT:
                        raise TimeoutError(f"stream {name!r} of run {id!r}: nothing new within {timeout} s")
                    got = None
                    continue
            finally:
                _e.unalias(a)
                while _e.receive(lambda m: m if type(m) is tuple and len(m) == 2 and m[1] == a else NOMATCH, timeout=0) is not TIMEOUT:
                    pass
        _, chunks, end = got
        got = None
        if not chunks and end is None:
            continue  # nothing yet: ask again, to be told when there is
        try:
            host.wait_durable(shard, chunks[-1][0] if chunks else end)
        except StorageError:  # the disk voided them: the run rolls back and writes again; ask again after a pause
            _e.receive(lambda m: NOMATCH, timeout=pause)
            pause = min(2.0, pause * 2)
            continue
        pause = 0.05
        if not chunks:
            return
        for _lsn, chunk in chunks:
            offset += 1
            yield chunk
