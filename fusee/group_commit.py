"""Group commit of one shard's log: the queue, the flusher, inline flushes, waiters and voids.

Each shard is one carrier (a native OS thread with its own hub) of a
dispatcher of its own; the shard's flusher process (:func:`flusher`) lives
there, and the engine puts the shard's server and runs there too, so a step's
round trip to the disk crosses no thread.  :func:`append` only queues the body
and assigns its LSN (and kicks an idle flusher with a message); the flusher
first lets every process already runnable on its carrier run
(:func:`ensemble.dispatcher.yield_`, so their records join the batch), then
takes *everything* queued, writes it as one batch (``os.write``) and calls
``os.fdatasync`` once, on its carrier's thread (the GIL is released, so other
shards and the caller's hub go on), then marks it durable and wakes the
waiters.  Records that arrive meanwhile (from other threads) queue up for the
next flush: one flush in flight per shard (the flush turn, ``s.flushing``),
and one ``fdatasync`` covers every record that arrived meanwhile.  A process
on the shard's own carrier that waits flushes inline instead
(:func:`flush_inline`): no hand-off when load is low.  Nothing ever flushes
on another thread.

Threads: appends may come from any greenlet on any carrier (the shard's
native lock guards its queue).  :func:`wait_durable` waits in a selective
receive (the calling process, or the main greenlet as a shell process) until
the flusher sends it a private token (on a timeout the wait is withdrawn, so
no token is left behind).  :func:`on_durable` callbacks run on the shard's
carrier thread, inside the flushing process, right after the ``fdatasync``:
they must not block (send a message instead).

A full or failing disk (any ``OSError`` of a flush, through the shard's
:class:`fusee.disk.Disk`) voids the failed batch and everything appended after
it (:func:`_void`): their waiters get a :class:`fusee.errors.StorageError`,
the next flush starts a new segment whose header says where the durable log
ends, and (with ``on_void``) appends are refused until the owner has rolled
back (:func:`resume`).  Any other error of a flush is kept in ``s.error``:
every later append and wait raises it.
"""

from __future__ import annotations

import heapq
from itertools import count
from time import perf_counter
from typing import Any, Callable

import ensemble as e
from ensemble import NOMATCH
from ensemble.dispatcher import call_soon, yield_
from ensemble.threads import get_ident

from . import segment as _seg
from . import segment_files as _files
from .errors import StorageError, storage_error
from .journal_shard import ShardState

__all__ = [
    "Token",
    "await_token",
    "append",
    "flusher",
    "wait_durable",
    "on_durable",
    "resume",
    "stop",
    "drop_pending",
]

_HUB_TURN = 0.002  # seconds of inline flushes in a row before the carrier's hub gets a turn (a timeslice)
_VOIDS_KEPT = 1024  # voided LSN ranges remembered per shard (a wait on an older voided LSN is not expected)


class _Kick:
    """The message that wakes an idle flusher: "there is something to flush, or the journal closes"."""

    __slots__ = ()


_KICK = _Kick()


def _is_kick(m: Any) -> Any:
    return True if m is _KICK else NOMATCH


class Token:
    """What the flusher puts in a waiter's mailbox (and the waiter takes out): "your LSN is settled".

    ``home``: the waiter runs on the shard's own carrier (see ``ShardState.woken_home``); ``error``: the
    storage error that voided the LSN instead (None: it is durable).
    """

    __slots__ = ("home", "error")

    def __init__(self, home: bool) -> None:
        self.home = home
        self.error: StorageError | None = None


def await_token(tok: Token, timeout: float | None) -> bool:
    """Wait in a selective receive until ``tok`` is in the caller's mailbox; take it.  False on timeout."""
    return e.receive(lambda m: True if m is tok else NOMATCH, timeout=timeout) is True


def _wake(s: ShardState, ready: list, error: StorageError | None = None) -> None:
    """Hand each ready waiter its token, with ``error`` if its LSN was voided (on the shard's carrier;
    ensemble.send is safe from any thread)."""
    send = e.send
    for p, tok in ready:
        if tok.home:
            s.woken_home += 1
        tok.error = error
        send(p, tok)


# ---------------------------------------------------------------------- appending and waiting


def append(s: ShardState, body: bytes) -> int:
    """Queue ``body`` for the next flush of ``s`` and return its LSN; never blocks.

    Raises ValueError once the shard is closing, the error that stopped its
    flushes, or the storage error it refuses appends with (see :func:`resume`).
    """
    with s.lock:
        if s.closing:
            raise ValueError("the journal is closed")
        if s.error is not None:
            raise s.error
        if s.refusing is not None:
            raise s.refusing
        lsn = s.next_lsn
        s.next_lsn = lsn + 1
        s.pending.append(body)
        kick = s.idle
        s.idle = False
    if kick:
        if s.ident == get_ident():
            # On the shard's carrier the appender may be about to wait and flush inline: kick
            # once the processes runnable now have run, and only if they left work behind.
            call_soon(_deferred_kick, s)
        else:
            e.send(s.pid, _KICK)
    return lsn


def wait_durable(s: ShardState, lsn: int, seq: "count[int]", timeout: float | None) -> bool:
    """Block the calling process or greenlet cooperatively until ``lsn`` of ``s`` is durable; False on
    timeout.  ``seq`` numbers the waiters (ties in the heap).

    Raises ValueError for an LSN not yet appended, the storage error that
    voided ``lsn``, and the error that stopped the shard's flushes.
    """
    if s.voided:
        _raise_if_voided(s, lsn)
    if s.durable_lsn >= lsn:
        return True
    if lsn >= s.next_lsn:
        raise ValueError(f"lsn {lsn} of shard {s.index} has not been appended")
    me = e.self()
    home = s.ident == get_ident()
    # On the shard's carrier the flush turn only ever changes on this thread, so ``flushing`` is read
    # without the lock: while another process here holds the turn (the common case under load: it let
    # this one run before taking the batch), go straight to waiting for its token.
    if home and not s.flushing:
        _flush_inline(s, lsn, me)
        if s.durable_lsn >= lsn:
            return True
    tok = Token(home)
    ent = (me, tok)
    with s.lock:
        if s.voided:
            _raise_if_voided(s, lsn)
        if s.durable_lsn >= lsn:
            return True
        if s.error is not None:
            raise s.error
        heapq.heappush(s.waiters, (lsn, next(seq), ent))
    if not await_token(tok, timeout):
        with s.lock:
            w = s.waiters
            for i, x in enumerate(w):
                if x[2] is ent:  # still queued: the flusher will never deliver the token
                    w[i] = w[-1]
                    w.pop()
                    heapq.heapify(w)
                    return s.durable_lsn >= lsn
        # the flusher took it (durable, or the disk failed): its token is on the way
        await_token(tok, None)
    if home:
        s.woken_home -= 1
    if tok.error is not None:
        raise tok.error
    if s.error is not None and s.durable_lsn < lsn:
        raise s.error
    return True


def on_durable(s: ShardState, lsn: int, seq: "count[int]", callback: Callable[[], Any]) -> None:
    """Call ``callback()`` once ``lsn`` is durable: at once (in the caller) if it is already, else on the
    shard's carrier thread right after the flush (it must not block).  ValueError for an LSN not yet
    appended."""
    with s.lock:
        now = s.durable_lsn >= lsn
        if not now:
            if lsn >= s.next_lsn:
                raise ValueError(f"lsn {lsn} of shard {s.index} has not been appended")
            heapq.heappush(s.waiters, (lsn, next(seq), callback))
    if now:
        callback()


def resume(s: ShardState) -> None:
    """Accept appends again after a failed write voided some: the owner has rolled its state back."""
    with s.lock:
        s.refusing = None


def stop(s: ShardState) -> None:
    """Refuse appends from now on and let the flusher end once it has flushed what is queued."""
    with s.lock:
        s.closing = True
        kick = s.idle
        s.idle = False
    if kick:
        e.send(s.pid, _KICK)


def drop_pending(s: ShardState) -> None:
    """Refuse appends from now on and drop what is queued (a crash, :meth:`Journal.abandon`); the
    caller kills the flusher."""
    with s.lock:
        s.closing = True
        s.idle = False
        s.pending = []


# ---------------------------------------------------------------------- the flusher


def flusher(s: ShardState, opener: Any, started: Token) -> None:
    """The shard's flusher process: flush everything queued, one batch at a time, until closed.

    Notes its thread (``s.ident``) and sends ``started`` to ``opener`` first.
    """
    s.ident = get_ident()
    s.idents.add(s.ident)  # every flush of the shard runs on this thread (the flusher's or inline)
    e.send(opener, started)
    while True:
        # Let every process already runnable on this carrier run first (a flush wakes many runs;
        # a kick comes from one that others may follow), so their records join this batch.
        yield_()
        with s.lock:
            if s.flushing or not s.pending:  # nothing to do, or an inline flush holds the turn
                if s.closing and not s.flushing:
                    return
                s.idle = True
                taken = None
            else:
                taken = _take(s)
        if taken is None:
            e.receive(_is_kick)
            continue
        s.last_inline = None
        try:
            _flush_taken(s, *taken)
        except StorageError:
            continue  # the batch was voided, its waiters told, the turn given back: go on
        except BaseException:
            return  # not the disk: recorded in s.error, every waiter woken
        _hand_back(s)


def _flush_inline(s: ShardState, lsn: int, me: Any) -> None:
    """On the shard's own carrier: flush in the waiting process itself until ``lsn`` is durable, or until
    another flush holds the turn (then the caller waits for its token as usual).

    No thread hand-off either way: this is fusee's "inline flush" when load is
    low.  Every runnable process on the carrier gets a turn first (so its
    records join the batch), except when the same process flushed last and that
    flush woke nobody here (a chain of steps): then the flush starts at once,
    until ``_HUB_TURN`` seconds have passed since the hub's last turn.
    """
    while s.durable_lsn < lsn:  # ``me``: the waiting process
        with s.lock:
            if s.error is not None:
                raise s.error
            if s.flushing:
                return
            # The same process flushing again, nobody else woken here: a chain of steps, flush at once.
            quick = not s.woken_home and s.last_inline is me and perf_counter() - s.hub_turn < _HUB_TURN
            s.flushing = True
            if quick and s.pending:  # _take, inlined
                batch = s.pending
                s.pending = []
                taken: tuple[int, list[bytes]] | None = (s.next_lsn - len(batch), batch)
            else:
                taken = None
        released = False
        try:
            if not quick:
                # Runs a flush woke here have yet to run, or others may have work this process
                # has not seen (their records should join this batch), or this carrier's hub has
                # not had a turn for a while: let every runnable process run first.
                yield_()
                s.hub_turn = perf_counter()
                with s.lock:
                    taken = _take(s) if s.pending else None
            s.last_inline = me
            if taken is not None:
                s.inline_flushes += 1
                try:
                    released = _flush_taken(s, *taken, release=True)
                except StorageError:
                    released = True  # _void gave the turn back
                    raise
        finally:
            if not released:
                _hand_back(s)
        _raise_if_voided(s, lsn)  # records after a voided lsn may have become durable past it


def _deferred_kick(s: ShardState) -> None:
    """The kick of an append on the shard's own carrier, sent from its hub a moment later: unless an
    inline flush has taken the records meanwhile (it kicks, if needed, when it hands the turn back)."""
    with s.lock:
        kick = not s.flushing and bool(s.pending or s.closing)
        if not kick:
            s.idle = True
    if kick:
        e.send(s.pid, _KICK)


def _take(s: ShardState) -> tuple[int, list[bytes]]:
    """Under ``s.lock``: take every queued body for one flush (the caller now holds the flush turn)."""
    batch = s.pending
    s.pending = []
    s.flushing = True
    return s.next_lsn - len(batch), batch


def _hand_back(s: ShardState) -> None:
    """Give up the flush turn; kick the idle flusher if records (or a close) wait for it."""
    with s.lock:
        s.flushing = False
        kick = s.idle and bool(s.pending or s.closing)
        if kick:
            s.idle = False
    if kick:
        e.send(s.pid, _KICK)


def _flush_taken(s: ShardState, first: int, batch: list[bytes], release: bool = False) -> bool:
    """Write and sync ``batch`` (the holder of the flush turn), mark it durable and wake its waiters;
    with ``release``, give up the turn too (:func:`_hand_back`, under the same lock).  Returns
    ``release``.

    If the disk fails, the batch and everything queued after it are voided
    (:func:`_void`) and the :class:`StorageError` raised.  On any other error
    nothing more is durable: the error is kept (every later append and wait
    raises it), every waiter is woken, and the error is raised.
    """
    try:
        _flush(s, first, batch)
    except _Failed as f:
        _void(s, first, f.error)
        raise f.error from f.__cause__
    except BaseException as exc:
        with s.lock:
            s.error = exc
            s.closing = True
            woken = [w for _, _, w in s.waiters]
            s.waiters = []
        _wake(s, [w for w in woken if not callable(w)])
        raise
    last = first + len(batch) - 1
    kick = False
    with s.lock:
        s.durable_lsn = last
        ready = []
        w = s.waiters
        while w and w[0][0] <= last:
            ready.append(heapq.heappop(w)[2])
        if release:
            s.flushing = False
            kick = s.idle and bool(s.pending or s.closing)
            if kick:
                s.idle = False
    if kick:
        e.send(s.pid, _KICK)
    if ready:
        ents = [r for r in ready if not callable(r)]
        if ents:
            _wake(s, ents)
        for r in ready:
            if callable(r):
                r()
    return release


def _flush(s: ShardState, first: int, batch: list[bytes]) -> None:
    """Write ``batch`` as one run of frames at the segment's end (rolling over if it does not fit, or
    first if a failed flush left the segment void) and ``fdatasync`` it; count the flush.  A failure
    of the disk is :class:`_Failed`."""
    noted: list[tuple[int, bytes]] | None = None
    store = s.blobs
    if store is not None and store.threshold is not None:
        batch, noted = _offload(s, store, first, batch)
    data = _seg.encode_batch(first, batch)
    size = len(data)
    disk = s.disk
    if s.void_after is not None or s.seg_pos + size > s.seg_size:
        try:
            _files.new_segment(s, first, max(s.segment_size, _seg.HEADER_SIZE + size), s.void_after)
        except OSError as exc:
            raise _Failed(storage_error(exc, "making a segment in", s.dir)) from exc
        s.void_after = None
    s.in_flight += 1
    if s.in_flight > s.max_in_flight:
        s.max_in_flight = s.in_flight
    t0 = perf_counter()
    try:
        # O_DIRECT from an aligned buffer where it can (fusee.direct_io), else one pwritev2(RWF_DSYNC) through
        # the page cache: either way one system call writes and syncs.  An appender that wrote nothing
        # (False) is behind from then on, and the segment's later flushes skip it.
        direct = s.direct
        if direct is None or direct.end != s.seg_pos or not direct.write(data):
            disk.write_durable(s.fd, data, s.seg_pos)
    except OSError as exc:
        raise _Failed(storage_error(exc, "writing", s.seg_path)) from exc
    finally:
        s.in_flight -= 1
    dt = perf_counter() - t0
    s.seg_pos += size
    if noted:
        for lsn, body in noted:
            store.note_logged(lsn, body)
    if s.seg_pos > s.seg_size // 2 and s.spare_fd < 0 and not s.spare_pending:
        _files.start_spare(s)
    # the flush's counters (fusee.journal_metrics sums them over the shards)
    s.flushes += 1
    s.records += len(batch)
    s.flush_seconds += dt
    if dt > s.flush_seconds_max:
        s.flush_seconds_max = dt


def _offload(s: ShardState, store: Any, first: int, batch: list[bytes]) -> tuple[list[bytes], list[tuple[int, bytes]]]:
    """``batch`` with each payload over the shard's offload threshold moved to a blob (:mod:`fusee.blobs`),
    the blobs durable before this returns (so before any frame refers to them), and the ``(lsn, body)`` of
    the bodies that refer to blobs.  A failure of the disk is :class:`_Failed`: the flush writes nothing."""
    limit = store.threshold
    out: list[bytes] | None = None
    noted: list[tuple[int, bytes]] = []
    blobs: list[tuple[str, bytes]] = []
    for i, body in enumerate(batch):
        if len(body) <= limit:
            continue
        new, found = store.split(body)
        if not found:
            continue
        if out is None:
            out = list(batch)
        out[i] = new
        noted.append((first + i, new))
        blobs.extend(found)
    if out is None:
        return batch, noted
    try:
        store.put(blobs)
    except OSError as exc:
        raise _Failed(storage_error(exc, "writing a blob in", store.dir)) from exc
    return out, noted


class _Failed(Exception):
    """A flush's write, sync or rollover failed with ``error`` (inside the flush path only)."""

    def __init__(self, error: StorageError) -> None:
        self.error = error


# ---------------------------------------------------------------------- voids


def _void(s: ShardState, first: int, error: StorageError) -> None:
    """A flush from ``first`` failed: void every LSN from ``first`` to the last appended (the batch and
    what queued behind it), tell their waiters ``error``, and give the flush turn back.

    Nothing voided is ever acknowledged: the next flush first makes a new
    segment whose header says the log holds up to ``durable_lsn``, so any of the
    batch's frames that reached the old segment are void at every open, and
    LSNs are never reused.  With an ``on_void`` listener, appends are refused
    (raising ``error``) until it calls :func:`resume`.
    """
    kick = False
    with s.lock:
        hi = s.next_lsn - 1
        s.pending = []
        s.voided.append((first, hi, error))
        if len(s.voided) > _VOIDS_KEPT:
            del s.voided[0]
        s.void_after = s.durable_lsn
        s.failures += 1
        s.last_error = error
        woken = [w for _, _, w in s.waiters]  # every waiter's LSN is past durable_lsn: all voided
        s.waiters = []
        if s.on_void is not None:
            s.refusing = error
        s.flushing = False
        kick = s.idle and s.closing
        if kick:
            s.idle = False
        if s.on_void is not None:
            s.on_void(s.index, first, hi, error)  # under the lock: before any append can be refused
    if kick:
        e.send(s.pid, _KICK)
    _wake(s, [w for w in woken if not callable(w)], error)


def _raise_if_voided(s: ShardState, lsn: int) -> None:
    """Raise the storage error that voided ``lsn`` of ``s``, if one did (cheap while nothing was voided)."""
    if s.voided:
        err = _void_error(s, lsn)
        if err is not None:
            raise err


def _void_error(s: ShardState, lsn: int) -> StorageError | None:
    """The error that voided ``lsn`` of shard ``s`` (None: not voided)."""
    for lo, hi, err in reversed(s.voided):
        if lo <= lsn <= hi:
            return err
        if hi < lsn:
            return None
    return None
