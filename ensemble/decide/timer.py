"""The timer table: Erlang's timers without a clock.

Models ``erlang:send_after/3``, ``erlang:start_timer/3``,
``erlang:read_timer/1``, ``erlang:cancel_timer/1`` (Erlang/OTP ``erlang``
module documentation) and the interval timers of the ``timer`` module
(``timer:send_interval/3``, ``timer:apply_interval/4``). It only keeps the
book: every operation takes ``now`` (monotonic seconds, a float) from the
caller, and firing is done by the caller with the records :meth:`TimerTable.due`
hands back. Deterministic and effect-free.

Contract:

* A timer is due once ``deadline <= now``. :meth:`~TimerTable.due` returns
  every due timer in ``(deadline, seq)`` order, ``seq`` being the order in
  which timers were (re-)armed; each call fires a timer at most once.
* A one-shot timer is removed when it fires. An interval timer is re-armed
  under the same ref at ``deadline + every`` -- fixed deadlines, so the k-th
  firing is due at ``first + k * every`` however late the caller is; a late
  interval fires again on the next call (as ``timer``'s intervals, which do
  not drift).
* :meth:`~TimerTable.left` answers like ``read_timer``: the time left, ``0.0``
  for a timer that is due but not yet fired, ``False`` for an unknown,
  fired or cancelled ref. :meth:`~TimerTable.cancel` answers the same and
  removes the timer, like ``cancel_timer``.
* :meth:`~TimerTable.gone` drops every timer whose ``dest`` or ``owner`` is a
  process that exited (a timer to a dead pid is cancelled in Erlang; an
  interval ends with its owner). Pids are compared by identity.

Implementation: a heap of ``(deadline, seq, ref)`` with lazy deletion (an
entry is live iff the table's timer for ``ref`` still has that ``seq``),
rebuilt whenever stale entries outnumber live ones, plus an index
``id(pid) -> refs``; a pid is kept alive by its timers, so its id cannot be
reused while it is indexed.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any, Hashable, Literal

__all__ = ["Timer", "TimerTable"]


class Timer:
    """One armed timer, as a read-only record (equality is identity).

    ``ref`` identifies it, ``deadline`` is when it is due, ``seq`` its arm
    order, ``every`` the interval period (``None`` for a one-shot),
    ``dest`` the pid or registered name it targets, ``owner`` the pid whose
    exit ends it, ``payload`` what the caller does when it fires.
    """

    __slots__ = ("ref", "deadline", "seq", "every", "dest", "owner", "payload")

    ref: Hashable
    deadline: float
    seq: int
    every: float | None
    dest: Any
    owner: Any
    payload: Any

    def __init__(
        self,
        ref: Hashable,
        deadline: float,
        seq: int,
        every: float | None = None,
        dest: Any = None,
        owner: Any = None,
        payload: Any = None,
    ) -> None:
        # Slot descriptors bypass the read-only __setattr__ (bound below).
        _set_ref(self, ref)
        _set_deadline(self, deadline)
        _set_seq(self, seq)
        _set_every(self, every)
        _set_dest(self, dest)
        _set_owner(self, owner)
        _set_payload(self, payload)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Timer is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Timer is read-only")

    def __repr__(self) -> str:
        every = "" if self.every is None else f", every={self.every!r}"
        return (
            f"Timer({self.ref!r}, deadline={self.deadline!r}, seq={self.seq!r}{every}, "
            f"dest={self.dest!r}, owner={self.owner!r}, payload={self.payload!r})"
        )


(
    _set_ref,
    _set_deadline,
    _set_seq,
    _set_every,
    _set_dest,
    _set_owner,
    _set_payload,
) = (Timer.__dict__[name].__set__ for name in Timer.__slots__)


class TimerTable:
    """The armed timers of a runtime, keyed by ref; see the module docstring for the contract."""

    __slots__ = ("_timers", "_heap", "_seq", "_by_pid")

    def __init__(self) -> None:
        self._timers: dict[Hashable, Timer] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        # id(pid) -> {ref: None}, insertion-ordered; holds live timers only.
        self._by_pid: dict[int, dict[Hashable, None]] = {}

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, ref: object) -> bool:
        return ref in self._timers

    def __repr__(self) -> str:
        return f"<TimerTable {len(self._timers)} timers>"

    def get(self, ref: Hashable) -> Timer | None:
        """The armed timer for ``ref``, or ``None``."""
        return self._timers.get(ref)

    def arm(
        self,
        ref: Hashable,
        deadline: float,
        *,
        every: float | None = None,
        dest: Any = None,
        owner: Any = None,
        payload: Any = None,
    ) -> Timer:
        """Arm a timer due at ``deadline`` (an interval if ``every`` is given) and return it.

        Raises ``ValueError`` if ``ref`` is already armed, ``deadline`` is NaN,
        or ``every`` is not a positive number.
        """
        timers = self._timers
        if ref in timers:
            raise ValueError(f"timer {ref!r} is already armed")
        if deadline != deadline:
            raise ValueError("deadline is NaN")
        if every is not None and not every > 0:
            raise ValueError(f"interval must be > 0, not {every!r}")
        self._seq = seq = self._seq + 1
        t = Timer(ref, deadline, seq, every, dest, owner, payload)
        timers[ref] = t
        heappush(self._heap, (deadline, seq, ref))
        if dest is not None:
            self._index(dest, ref)
        if owner is not None and owner is not dest:
            self._index(owner, ref)
        return t

    def left(self, ref: Hashable, now: float) -> float | Literal[False]:
        """Seconds until ``ref`` is due, ``0.0`` if due but not fired, ``False`` if not armed."""
        t = self._timers.get(ref)
        if t is None:
            return False
        r = t.deadline - now
        return r if r > 0 else 0.0

    def cancel(self, ref: Hashable, now: float) -> float | Literal[False]:
        """Remove ``ref``'s timer; answers what :meth:`left` answered just before."""
        t = self._timers.pop(ref, None)
        if t is None:
            return False
        self._unindex(t)
        self._compact()
        r = t.deadline - now
        return r if r > 0 else 0.0

    def due(self, now: float) -> list[Timer]:
        """Fire every timer due at ``now``: return them as they fired, in ``(deadline, seq)`` order.

        One-shots are removed; intervals are re-armed at ``deadline + every``
        with a new seq and are not fired twice by one call.
        """
        heap = self._heap
        if not heap or heap[0][0] > now:
            return []
        timers = self._timers
        fired: list[Timer] = []
        rearmed: list[Timer] | None = None
        while heap and heap[0][0] <= now:
            deadline, seq, ref = heappop(heap)
            t = timers.get(ref)
            if t is None or t.seq != seq:
                continue  # stale entry
            fired.append(t)
            every = t.every
            if every is None:
                del timers[ref]
                self._unindex(t)
            else:
                self._seq = seq = self._seq + 1
                nt = Timer(ref, deadline + every, seq, every, t.dest, t.owner, t.payload)
                timers[ref] = nt
                if rearmed is None:
                    rearmed = [nt]
                else:
                    rearmed.append(nt)
        if rearmed is not None:
            for nt in rearmed:
                heappush(heap, (nt.deadline, nt.seq, nt.ref))
        self._compact()
        return fired

    def gone(self, pid: Any) -> list[Hashable]:
        """Remove every timer whose ``dest`` or ``owner`` is ``pid`` (identity); return their refs in arm order."""
        refs = self._by_pid.pop(id(pid), None)
        if refs is None:
            return []
        timers = self._timers
        removed: list[Hashable] = []
        for ref in refs:
            t = timers.get(ref)
            if t is None:
                continue
            dest, owner = t.dest, t.owner
            if dest is pid:
                other = owner
            elif owner is pid:
                other = dest
            else:
                continue
            del timers[ref]
            removed.append(ref)
            if other is not None and other is not pid:
                self._unindex_one(other, ref)
        self._compact()
        return removed

    def next_deadline(self) -> float | None:
        """The earliest deadline among armed timers, or ``None`` if there are none."""
        heap = self._heap
        timers = self._timers
        while heap:
            deadline, seq, ref = heap[0]
            t = timers.get(ref)
            if t is not None and t.seq == seq:
                return deadline
            heappop(heap)
        return None

    # -- internals ---------------------------------------------------------

    def _index(self, pid: Any, ref: Hashable) -> None:
        by = self._by_pid
        key = id(pid)
        refs = by.get(key)
        if refs is None:
            by[key] = {ref: None}
        else:
            refs[ref] = None

    def _unindex_one(self, pid: Any, ref: Hashable) -> None:
        by = self._by_pid
        key = id(pid)
        refs = by.get(key)
        if refs is not None:
            refs.pop(ref, None)
            if not refs:
                del by[key]

    def _unindex(self, t: Timer) -> None:
        dest, owner = t.dest, t.owner
        if dest is not None:
            self._unindex_one(dest, t.ref)
        if owner is not None and owner is not dest:
            self._unindex_one(owner, t.ref)

    def _compact(self) -> None:
        # Rebuild the heap once stale entries outnumber live ones; each live
        # timer owns exactly one heap entry, so the rest are stale.
        heap = self._heap
        live = len(self._timers)
        if len(heap) > 2 * live:
            heap[:] = [(t.deadline, t.seq, t.ref) for t in self._timers.values()]
            heapify(heap)
