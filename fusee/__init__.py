"""fusee: embeddable durable execution on a group-committed journal, built on ensemble.

>>> @fusee.workflow("greet", version=1)
... def greet(ctx, name):
...     return ctx.step("compose", lambda: f"hello, {name}")
>>> with fusee.Engine.open(None, workflows=[greet]) as engine:
...     engine.execute(greet, "greet-1", "world")
'hello, world'

Layers: pure (:mod:`fusee.codec`, :mod:`fusee.records`, :mod:`fusee.segment`,
:mod:`fusee.replay`, :mod:`fusee.parking`, the parsers of :mod:`fusee.directory`);
storage (:mod:`fusee.disk`, :mod:`fusee.journal` over ``segment_files``,
``group_commit``, ``journal_shard``, ``journal_metrics``; :mod:`fusee.store`);
runs (:mod:`fusee.host`, what the inner modules share; :mod:`fusee.shard`, the
shard servers; ``run_state``, ``ctx``, ``run_process``, ``run_family``,
``behalf``, :mod:`fusee.concurrency`, :mod:`fusee.delay`, :mod:`fusee.schedule`
(:mod:`fusee.cron`), :mod:`fusee.objects` (virtual objects; their pure part
:mod:`fusee.object_core`), :mod:`fusee.workflow`);
and the face (:mod:`fusee.engine`, :mod:`fusee.testing`).
"""

from .codec import register
from .cron import CronError
from .durations import parse as parse_duration
from .engine import Ctx, Engine, IdPolicy, Retry, Run, Signal, StepContext, Workflow, signal, workflow
from .schedule import Schedule
from .objects import ObjectCtx, ObjectRef, ObjectType, StateView
from .errors import (
    CODES,
    AlreadyExists,
    AlreadySettled,
    InvalidToken,
    NotPaused,
    NotRunning,
    StreamClosed,
    CallFailed,
    ReadOnlyState,
    UnknownHandler,
    UnknownObjectType,
    VersionMismatch,
    UpdateFailed,
    UpdateRejected,
    Busy,
    Cancelled,
    ChildFailed,
    Corrupt,
    DeterminismError,
    EngineFailed,
    Error,
    Failed,
    Locked,
    NotFound,
    NotSerializable,
    ShardCrashed,
    StepFailed,
    StorageError,
    StorageFailed,
    StorageFull,
    Terminated,
    TimedOut,
    UnknownWorkflow,
    WrongLayout,
)

__all__ = [
    "AlreadySettled",
    "InvalidToken",
    "NotPaused",
    "NotRunning",
    "StreamClosed",
    "UpdateFailed",
    "UpdateRejected",
    "workflow",
    "signal",
    "Engine",
    "Run",
    "IdPolicy",
    "Retry",
    "Ctx",
    "StepContext",
    "Signal",
    "Workflow",
    "Schedule",
    "ObjectType",
    "ObjectRef",
    "ObjectCtx",
    "StateView",
    "CallFailed",
    "ReadOnlyState",
    "UnknownHandler",
    "UnknownObjectType",
    "VersionMismatch",
    "CronError",
    "register",
    "parse_duration",
    "Error",
    "Busy",
    "NotFound",
    "AlreadyExists",
    "UnknownWorkflow",
    "StepFailed",
    "Failed",
    "Cancelled",
    "Terminated",
    "DeterminismError",
    "Corrupt",
    "NotSerializable",
    "ChildFailed",
    "TimedOut",
    "Locked",
    "WrongLayout",
    "StorageError",
    "StorageFull",
    "StorageFailed",
    "ShardCrashed",
    "EngineFailed",
    "CODES",
]
