"""A child started on someone's behalf: a slot (:mod:`fusee.concurrency`) or a delay run
(:mod:`fusee.delay`) runs the run it stands for as a child that outlives it, forwards a cancel to
it once asked for, and ends with it."""

from __future__ import annotations

from typing import Any

from .errors import Cancelled
from .replay import CANCEL, COMPLETION, Replay
from .run_family import _parent_ref

__all__ = ["run_child"]


def run_child(ctx: Any, wtype: str, id: str, input: Any, timeout: Any = None) -> Any:
    """``ctx.child(wtype, id, input, parent_close="abandon", timeout=timeout)`` for a slot or delay run
    that starts a run on someone's behalf: a cancel of the caller that lands once the child has been
    asked for (its ``Child`` recorded) is forwarded to the child (:func:`_forward_cancel`), and this
    still waits for the child's end and returns (or raises) its outcome, so the caller ends only
    when the run it started does.  A cancel that lands before: raised here (nothing was started)."""
    st = ctx._st
    m = st.machine
    h = m.history
    seq = m.next_seq
    try:
        op = ctx._child_op(wtype, id, input, "abandon", timeout, True)
    except Cancelled as exc:
        asked = h.op(seq)
        if asked is None or asked.armed is None:
            raise  # the child was never asked for
        return _forward_cancel(ctx, seq, exc.reason)
    if type(op) is Replay:
        return op.result()
    while True:
        got = m.next_for(seq)  # journal order, as on replay: the child's end or the cancel, first recorded
        if got == COMPLETION:
            return m.take(seq).result()
        if got == CANCEL:
            exc = m.take_cancel()
            return _forward_cancel(ctx, seq, exc.reason)
        ctx._pause(None)


def _forward_cancel(ctx: Any, seq: int, reason: Any) -> Any:
    """Cancel the child of operation ``seq`` (a step: asked for again first, in case a crash came between
    its ``Child`` and its start; a child that ended already is not touched), then wait for its end."""
    st = ctx._st
    host = st.host
    m = st.machine
    h = m.history
    rec = h.op(seq).armed
    parent = _parent_ref(st, seq, True)

    def forward() -> bool:
        shard = host.shard_of(rec.id)
        host.wait_durable(shard, host.call(shard, ("child", rec, parent)))
        lsn = host.call(shard, ("cancel", rec.id, reason))
        host.wait_durable(shard, lsn)
        return lsn is not None

    ctx.step("fusee.cancel", forward)
    while True:
        got = h.op(seq)
        if got is not None and got.done is not None:
            return m.take(seq).result()
        ctx._pause(None)
