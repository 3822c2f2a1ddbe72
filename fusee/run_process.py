"""The run process: :func:`_run_main` runs a run's workflow function, then records its ``Done``
(or, parked or stalled on storage, nothing)."""

from __future__ import annotations


import ensemble as _e

from .errors import (
    Cancelled,
    DeterminismError,
    EngineFailed,
    ShardCrashed,
    Failed,
    NotSerializable,
    StorageError,
    Terminated,
    TimedOut,
    failure_of,
)
from .run_state import RUNNING, _RunState
from .ctx import Ctx, _ContinueAsNew, _Deadline, _Parked

_STALLED = "fusee_stalled"  # exit reason (tag, error): a run's write (or its child's) hit a StorageError


def _run_main(state: _RunState) -> None:
    """A run's process: the workflow function, then its ``Done`` (or, parked, nothing).  A
    :class:`StorageError`, or a :class:`ShardCrashed` of a call to another shard, ends the process with
    reason ``(_STALLED, error)``, nothing recorded: its shard loads the run again after a pause (and it
    replays to the call, asking again)."""
    try:
        _run_body(state)
    except _Parked:
        pass
    except (StorageError, ShardCrashed) as exc:
        _e.exit((_STALLED, exc))
    except EngineFailed as exc:
        _e.exit(("fusee_engine_failed", exc))


def _run_body(state: _RunState) -> None:
    ctx = Ctx(state)
    try:
        try:
            value = state.wf.fn(ctx, state.input)  # type: ignore[union-attr]
        except DeterminismError as exc:
            state.fail_unrecorded(state.determinism or exc)
            return
        except Terminated:
            if state.status != RUNNING:
                return
            raise
        except Cancelled as exc:
            if state.determinism is not None:
                state.fail_unrecorded(state.determinism)
                return
            state.finish("cancelled", exc.reason, ("error", exc))
            return
        except _Deadline:
            state.finish("timed_out", state.deadline, ("error", TimedOut(state.deadline)))
            return
        except _ContinueAsNew as c:
            state.host.call(state.shard, ("continue", state, c.input))
            return
        except (StorageError, ShardCrashed, EngineFailed):
            raise  # not the workflow's failure: the disk's, or a shard server's crash (see _run_main)
        except Exception as exc:
            if state.determinism is not None:
                state.fail_unrecorded(state.determinism)
                return
            failure = failure_of(exc)
            state.finish("failed", failure, ("error", Failed(failure)))
            return
        if state.determinism is not None:
            state.fail_unrecorded(state.determinism)
            return
        try:
            state.finish("completed", value, ("ok", value))
        except NotSerializable as exc:
            failure = failure_of(exc)
            state.finish("failed", failure, ("error", Failed(failure)))
    except Terminated:
        if state.status == RUNNING:
            raise
