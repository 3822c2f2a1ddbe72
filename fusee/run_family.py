"""A run's family ties: the parent refs a child records, telling a waiting parent how its child ended
(:func:`_tell_parents`), and closing an ended parent's children (:func:`_close_children`).
The messages go to shard servers through the run's :class:`fusee.host.Host`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ensemble as _e

from . import records as r
from .errors import StorageError
from .workflow import shard_of

if TYPE_CHECKING:
    from .run_state import _RunState

_CHILD_DONE = "fusee_child_done"  # (tag, parent id, parent run, seq, status, payload): to the parent's shard server
_PARENT_CLOSED = "fusee_parent_closed"  # (tag, child id, parent ref, action): to the child's shard server


def _parent_ref(st: _RunState, seq: int, wait: bool) -> dict[str, Any]:
    """The ``Start.parent`` of a child begun by operation ``seq`` of ``st``: where its result goes."""
    return {"shard": st.shard, "run": st.run, "seq": seq, "id": st.id, "wait": wait}


def _same_parent(a: Any, b: Any) -> bool:
    """Whether two parent refs name the same parent operation (shard, run, seq, id)."""
    if type(a) is not dict or type(b) is not dict:
        return False
    return all(a.get(k) == b.get(k) for k in ("shard", "run", "seq", "id"))


def _same_parent_run(a: Any, b: Any) -> bool:
    """Whether two parent refs name the same parent run (shard, run, id), whatever its operation."""
    if type(a) is not dict or type(b) is not dict:
        return False
    return all(a.get(k) == b.get(k) for k in ("shard", "run", "id"))


def _tell_parents(st: _RunState) -> None:
    """Once ``st``'s ``Done`` is durable, tell each waiting parent's shard server (a message) how it ended."""
    parents, st.parents = st.parents, []
    if not parents:
        return
    host, done = st.host, st.machine.done
    if done is None:
        return

    lsn = st.done_lsn  # read now: a failed write may void it (and reset the run) before tell runs

    def tell() -> None:
        try:
            host.journal.wait_durable(st.shard, lsn)
        except StorageError:  # the Done was voided: the run runs again and tells them when it ends
            st.parents.extend(p for p in parents if not any(_same_parent(p, q) for q in st.parents))
            return
        for p in parents:
            host.tell(p["shard"], (_CHILD_DONE, p["id"], p["run"], p["seq"], done.status, done.payload))

    _e.spawn(tell, dispatcher=host.home(st.shard))


def _children_to_close(st: _RunState) -> list[r.Child]:
    """The ``Child`` records of ``st`` whose child its end closes: not abandoned, and not known ended
    (no ``ChildDone``, or one that says only ``started``)."""
    out = []
    for op in st.machine.history.child_ops():
        if op.armed is None or op.armed.parent_close == "abandon":
            continue
        if op.done is not None and op.done.status != "started":
            continue
        out.append(op.armed)
    return out


def _close_children(st: _RunState, durable: bool = False) -> None:
    """The parent ``st`` ended: once its ``Done`` is durable (a crash must not take back the end that closed
    them), tell the shard server of each child it started and does not abandon.  Idempotent (the child's
    server acts only on a running child this parent started): the open does it again for every ended
    parent (:meth:`fusee.shard._ShardServer._resume`), as a crash may have lost the first telling;
    ``durable``: the ``Done`` is known durable (recovered), so the tellings are sent here and now."""
    host = st.host
    tells = []
    for rec in _children_to_close(st):
        shard = shard_of(rec.id, host.shards)
        tells.append((shard, (_PARENT_CLOSED, rec.id, _parent_ref(st, rec.seq, False), rec.parent_close)))
    if not tells:
        return
    if durable:
        for shard, msg in tells:
            host.tell(shard, msg)
        return

    lsn = st.done_lsn

    def tell() -> None:
        try:
            host.journal.wait_durable(st.shard, lsn)
        except StorageError:
            return  # the Done was voided: the parent runs again
        for shard, msg in tells:
            host.tell(shard, msg)

    _e.spawn(tell, dispatcher=host.home(st.shard))
