"""fusee's errors: one base class, :class:`Error`, and a subclass per outcome.

Every error has a stable ``code`` (a lowercase ``str`` class attribute, the
same on every instance and across versions; :data:`CODES` maps each code to
its class), keeps its constructor arguments both as named attributes and as
``args`` (in constructor order, so ``pickle`` and ``repr`` round-trip), and
builds a one-line message from them (``str(err)``).  Nothing here does I/O.

=====================  =======================  ===========================================
class                  code                     means
=====================  =======================  ===========================================
:class:`Busy`          ``"busy"``               the shard's queues are full; retry later,
                                                nothing was recorded
:class:`NotFound`      ``"not_found"``          no run with this workflow ID is known
:class:`AlreadyExists` ``"already_exists"``     the ID is taken and the start asked for a new run
:class:`UnknownWorkflow` ``"unknown_workflow"`` no code is registered for this type (lists those that are)
:class:`StepFailed`    ``"step_failed"``        a step failed after its last attempt
:class:`Failed`        ``"failed"``             the workflow failed
:class:`Cancelled`     ``"cancelled"``          the run was cancelled
:class:`Terminated`    ``"terminated"``         the run was terminated
:class:`DeterminismError` ``"determinism"``     the code did something its journal says it did not do
:class:`Corrupt`       ``"corrupt"``            a damaged acknowledged record (says where)
:class:`NotSerializable` ``"not_serializable"`` a value the codec refuses, raised at the call,
                                                nothing recorded
:class:`ChildFailed`   ``"child_failed"``       a child run did not complete (``id``, ``failure``,
                                                ``status``): raised in its parent
:class:`TimedOut`      ``"timed_out"``          the run passed its deadline (``timeout=``)
:class:`Locked`        ``"locked"``             another engine holds the data directory (``pid``)
:class:`WrongLayout`   ``"wrong_layout"``       the directory was made with another layout (shards,
                                                segment size, format) than the open asked for
:class:`StorageFull`   ``"storage_full"``       the disk is full (ENOSPC, EDQUOT): the records the
                                                call waited for were not written; retry later
:class:`StorageFailed` ``"storage_failed"``     the disk failed (EIO, ...): the same, for any other
                                                OS error of a write, sync, rollover or checkpoint
:class:`ShardCrashed`  ``"shard_crashed"``      the shard server crashed handling the call: whether
                                                it took effect is unknown; the shard is recovered
                                                from its journal and restarted (retry idempotently)
:class:`EngineFailed`  ``"engine_failed"``      shard servers crashed more often than the restart
                                                intensity allows: the engine is down (reopen it)
:class:`NotRunning`    ``"not_running"``        the run has ended (an update, a completion, ...
                                                sent to it): nothing recorded
:class:`UpdateRejected` ``"update_rejected"``   the update's validator refused it, or the run has no
                                                handler of that name: nothing recorded
:class:`UpdateFailed`  ``"update_failed"``      the update's handler raised (recorded; the run goes on)
:class:`InvalidToken`  ``"invalid_token"``      not a completion token of this engine's journal
:class:`AlreadySettled` ``"already_settled"``   the async step of this token was settled already
:class:`NotPaused`     ``"not_paused"``         ``resume`` of a run that is not paused
:class:`StreamClosed`  ``"stream_closed"``      a chunk written to a stream closed before: nothing
                                                recorded
:class:`UnknownObjectType` ``"unknown_object_type"`` no object type of that name (lists those there are)
:class:`UnknownHandler` ``"unknown_handler"``   the object type has no handler of that name
:class:`CallFailed`    ``"call_failed"``        an object handler raised (recorded; the state is unchanged)
:class:`VersionMismatch` ``"version_mismatch"`` an edit of an object's state expected another version:
                                                nothing recorded
:class:`ReadOnlyState` ``"read_only_state"``    a shared handler tried to change its object's state
=====================  =======================  ===========================================

A *failure* (``StepFailed.failure``, ``Failed.failure``) is a JSON value
describing what went wrong; :func:`failure_of` makes the usual one from an
exception: ``{"type": "ValueError", "message": "..."}``.
"""

from __future__ import annotations

import errno as _errno
from typing import Any, Final

__all__ = [
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
    "NotRunning",
    "UpdateRejected",
    "UpdateFailed",
    "InvalidToken",
    "AlreadySettled",
    "NotPaused",
    "StreamClosed",
    "UnknownObjectType",
    "UnknownHandler",
    "CallFailed",
    "VersionMismatch",
    "ReadOnlyState",
    "storage_error",
    "CODES",
    "failure_of",
]


class Error(Exception):
    """The base of fusee's errors: ``code`` names the kind, ``args`` are the constructor's."""

    code: str = "error"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)

    def _message(self) -> str:
        return ", ".join(map(str, self.args)) if self.args else self.code

    def __str__(self) -> str:
        return self._message()


class Busy(Error):
    """The shard's queues are full: retry later; nothing was recorded."""

    code = "busy"

    def __init__(self, shard: int | None = None) -> None:
        super().__init__(shard)
        self.shard = shard

    def _message(self) -> str:
        where = "a shard" if self.shard is None else f"shard {self.shard}"
        return f"{where} is busy (its queues are full): retry later; nothing was recorded"


class NotFound(Error):
    """No run with this workflow ID is known (never started, or forgotten)."""

    code = "not_found"

    def __init__(self, id: str) -> None:
        super().__init__(id)
        self.id = id

    def _message(self) -> str:
        return f"no run with workflow ID {self.id!r} is known"


class AlreadyExists(Error):
    """The workflow ID is taken (``holder``: what holds it, e.g. its status) and the start asked for a new run."""

    code = "already_exists"

    def __init__(self, id: str, holder: Any = None) -> None:
        super().__init__(id, holder)
        self.id = id
        self.holder = holder

    def _message(self) -> str:
        held = "" if self.holder is None else f" (held by {self.holder})"
        return f"workflow ID {self.id!r} already exists{held}"


class UnknownWorkflow(Error):
    """No code is registered for workflow type ``name``; ``registered`` lists what is."""

    code = "unknown_workflow"

    def __init__(self, name: str, registered: Any = ()) -> None:
        super().__init__(name, registered)
        self.name = name
        self.registered = registered

    def _message(self) -> str:
        names = ", ".join(repr(n) for n in self.registered) or "none"
        return f"no workflow {self.name!r} is registered (registered: {names})"


class StepFailed(Error):
    """Step ``name`` failed after its last attempt (or with a failure not retried)."""

    code = "step_failed"

    def __init__(self, name: str, failure: Any) -> None:
        super().__init__(name, failure)
        self.name = name
        self.failure = failure

    def _message(self) -> str:
        return f"step {self.name!r} failed: {_shown(self.failure)}"


class Failed(Error):
    """The workflow failed with ``failure``."""

    code = "failed"

    def __init__(self, failure: Any = None) -> None:
        super().__init__(failure)
        self.failure = failure

    def _message(self) -> str:
        return f"the workflow failed: {_shown(self.failure)}"


class Cancelled(Error):
    """The run was cancelled (``reason`` as given to ``cancel``); raised inside the workflow at its next operation."""

    code = "cancelled"

    def __init__(self, reason: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason

    def _message(self) -> str:
        return "the run was cancelled" + ("" if self.reason is None else f": {self.reason}")


class Terminated(Error):
    """The run was terminated (``reason`` as given to ``terminate``), without compensation."""

    code = "terminated"

    def __init__(self, reason: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason

    def _message(self) -> str:
        return "the run was terminated" + ("" if self.reason is None else f": {self.reason}")


class DeterminismError(Error):
    """At operation ``position`` the journal recorded ``expected`` but the code did ``got``."""

    code = "determinism"

    def __init__(self, position: int, expected: Any, got: Any) -> None:
        super().__init__(position, expected, got)
        self.position = position
        self.expected = expected
        self.got = got

    def _message(self) -> str:
        return (
            f"nondeterminism at operation {self.position}: "
            f"the journal recorded {self.expected!r}, the code did {self.got!r}"
        )


class Corrupt(Error):
    """A damaged acknowledged record in file ``path`` at byte ``offset``; ``why`` says what is wrong."""

    code = "corrupt"

    def __init__(self, path: Any, offset: int, why: str) -> None:
        super().__init__(path, offset, why)
        self.path = path
        self.offset = offset
        self.why = why

    def _message(self) -> str:
        return f"corrupt journal: {self.path} at offset {self.offset}: {self.why}"


class NotSerializable(Error):
    """``value`` cannot be serialized (``why``), found at ``path`` (e.g. ``"input['items'][2]"``)."""

    code = "not_serializable"

    def __init__(self, value: Any, why: str, path: str | None = None) -> None:
        super().__init__(value, why, path)
        self.value = value
        self.why = why
        self.path = path

    def _message(self) -> str:
        return f"not serializable: {self.why}" if self.path is None else f"not serializable: {self.path}: {self.why}"


class ChildFailed(Error):
    """Child run ``id`` ended ``status`` (failed, cancelled, terminated, timed_out) with ``failure``, a JSON
    value: the child's failure when it failed, else ``{"type": <status error>, "message", "reason"}``."""

    code = "child_failed"

    def __init__(self, id: str, failure: Any = None, status: str | None = None) -> None:
        super().__init__(id, failure, status)
        self.id = id
        self.failure = failure
        self.status = status

    def _message(self) -> str:
        how = "failed" if self.status is None else self.status
        return f"child {self.id!r} {how}: {_shown(self.failure)}"


class TimedOut(Error):
    """The run passed its deadline (unix seconds ``deadline``, from ``timeout=``) and was ended."""

    code = "timed_out"

    def __init__(self, deadline: Any = None) -> None:
        super().__init__(deadline)
        self.deadline = deadline

    def _message(self) -> str:
        return "the run timed out" + ("" if self.deadline is None else f" (deadline {self.deadline})")


class Locked(Error):
    """Data directory ``path`` is held by another engine, in process ``pid`` (None if it did not say)."""

    code = "locked"

    def __init__(self, path: Any, pid: int | None = None) -> None:
        super().__init__(path, pid)
        self.path = path
        self.pid = pid

    def _message(self) -> str:
        holder = "another engine" if self.pid is None else f"the engine of process {self.pid}"
        return f"{self.path} is locked by {holder}: one engine per directory"


class WrongLayout(Error):
    """Data directory ``path`` does not fit the open: ``why`` says what was recorded and what was asked."""

    code = "wrong_layout"

    def __init__(self, path: Any, why: str) -> None:
        super().__init__(path, why)
        self.path = path
        self.why = why

    def _message(self) -> str:
        return f"{self.path}: {self.why}"


class StorageError(Error):
    """The base of :class:`StorageFull` and :class:`StorageFailed`: ``op`` on ``path`` failed with ``errno``
    (``why``: its text); nothing the call waited for was written.

    Acknowledged records stay readable, and writes succeed again by themselves
    once the disk does (no reopen needed)."""

    code = "storage"

    def __init__(self, op: str, path: Any, errno: int | None = None, why: str = "") -> None:
        super().__init__(op, path, errno, why)
        self.op = op
        self.path = path
        self.errno = errno
        self.why = why

    def _message(self) -> str:
        return f"storage error: {self.op} {self.path}: {self.why or self.errno}"


class StorageFull(StorageError):
    """The disk is full (ENOSPC, EDQUOT)."""

    code = "storage_full"

    def _message(self) -> str:
        return f"storage full: {self.op} {self.path}: {self.why or self.errno}"


class StorageFailed(StorageError):
    """The disk failed: an OS error other than a full disk (EIO, EROFS, ...)."""

    code = "storage_failed"

    def _message(self) -> str:
        return f"storage failed: {self.op} {self.path}: {self.why or self.errno}"


class ShardCrashed(Error):
    """Shard ``shard``'s server crashed (``reason``: its exit reason, shown) while this call was with it.

    Whether the request took effect is unknown: the server is restarted by its
    supervisor with the shard's runs rebuilt from the journal (nothing
    acknowledged is lost), so retry it idempotently (a start with
    ``IdPolicy.ATTACH``, a signal with a ``dedup`` key).  Waits for results are
    not affected: they are answered once the run ends after the restart."""

    code = "shard_crashed"

    def __init__(self, shard: int, reason: str) -> None:
        super().__init__(shard, reason)
        self.shard = shard
        self.reason = reason

    def _message(self) -> str:
        return f"shard {self.shard}'s server crashed during the call ({self.reason}); it restarts from its journal: retry"


class EngineFailed(Error):
    """The shard servers crashed more often than the engine's restart intensity allows (``why``): their
    supervisor gave up and every call raises this.  Nothing acknowledged is lost: shut the engine down
    and open it again."""

    code = "engine_failed"

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why

    def _message(self) -> str:
        return f"the engine has failed: {self.why}; shut it down and open it again"


class NotRunning(Error):
    """Run ``id`` has ended (``status``): what was sent to it (an update, a completion) is refused, nothing
    recorded."""

    code = "not_running"

    def __init__(self, id: str, status: str | None = None, what: str = "the call") -> None:
        super().__init__(id, status, what)
        self.id = id
        self.status = status
        self.what = what

    def _message(self) -> str:
        how = "" if self.status is None else f" ({self.status})"
        return f"run {self.id!r} has ended{how}: {self.what} is refused, nothing recorded"


class UpdateRejected(Error):
    """Update ``name`` (update ID ``update_id``) of run ``id`` was refused before anything was recorded:
    its validator raised (``failure``), or the run has no handler of that name (``failure`` says so)."""

    code = "update_rejected"

    def __init__(self, id: str, name: str, update_id: str | None, failure: Any = None) -> None:
        super().__init__(id, name, update_id, failure)
        self.id = id
        self.name = name
        self.update_id = update_id
        self.failure = failure

    def _message(self) -> str:
        return f"update {self.name!r} of run {self.id!r} was rejected (nothing recorded): {_shown(self.failure)}"


class UpdateFailed(Error):
    """The handler of update ``name`` (update ID ``update_id``) of run ``id`` raised: ``failure`` (recorded in
    the run's ``UpdateDone``; the run goes on)."""

    code = "update_failed"

    def __init__(self, id: str, name: str, update_id: str | None, failure: Any = None) -> None:
        super().__init__(id, name, update_id, failure)
        self.id = id
        self.name = name
        self.update_id = update_id
        self.failure = failure

    def _message(self) -> str:
        return f"update {self.name!r} of run {self.id!r} failed: {_shown(self.failure)}"


class InvalidToken(Error):
    """``token`` is not a completion token of an async step this engine's journal holds (malformed, or its
    secret does not match): nothing recorded."""

    code = "invalid_token"

    def __init__(self, token: Any, why: str = "") -> None:
        super().__init__(token, why)
        self.token = token
        self.why = why

    def _message(self) -> str:
        shown = repr(self.token) if type(self.token) is not str else repr(self.token[:60])
        return f"not a valid completion token: {shown}" + (f" ({self.why})" if self.why else "")


class AlreadySettled(Error):
    """The async step of ``token`` was settled already (``status`` "ok" or "error"); this settle changed nothing."""

    code = "already_settled"

    def __init__(self, token: Any, status: str | None = None) -> None:
        super().__init__(token, status)
        self.token = token
        self.status = status

    def _message(self) -> str:
        how = "" if self.status is None else f" ({'completed' if self.status == 'ok' else 'failed'})"
        return f"the async step of this token was settled already{how}: nothing changed"


class NotPaused(Error):
    """``resume`` of run ``id``, which is not paused (``status``: its status): nothing recorded."""

    code = "not_paused"

    def __init__(self, id: str, status: str | None = None) -> None:
        super().__init__(id, status)
        self.id = id
        self.status = status

    def _message(self) -> str:
        return f"run {self.id!r} is not paused ({self.status}): nothing to resume"


class StreamClosed(Error):
    """A chunk written to stream ``stream`` of run ``id`` after its ``close()``: nothing recorded."""

    code = "stream_closed"

    def __init__(self, id: str, stream: str) -> None:
        super().__init__(id, stream)
        self.id = id
        self.stream = stream

    def _message(self) -> str:
        return f"stream {self.stream!r} of run {self.id!r} is closed: the chunk is refused, nothing recorded"


class UnknownObjectType(Error):
    """No object type ``name`` is defined on this engine (``engine.object_type(name)``); ``registered``
    lists those that are.  Raised at the call, nothing recorded."""

    code = "unknown_object_type"

    def __init__(self, name: Any, registered: Any = ()) -> None:
        super().__init__(name, registered)
        self.name = name
        self.registered = registered

    def _message(self) -> str:
        known = ", ".join(repr(n) for n in self.registered) or "none"
        return f"no object type {self.name!r} (defined: {known})"


class UnknownHandler(Error):
    """Object type ``type`` has no handler ``handler`` (``handlers``: those it has).  Raised at the call,
    nothing recorded."""

    code = "unknown_handler"

    def __init__(self, type: Any, handler: Any, handlers: Any = ()) -> None:
        super().__init__(type, handler, handlers)
        self.type = type
        self.handler = handler
        self.handlers = handlers

    def _message(self) -> str:
        known = ", ".join(repr(n) for n in self.handlers) or "none"
        return f"object type {self.type!r} has no handler {self.handler!r} (it has: {known})"


class CallFailed(Error):
    """Handler ``handler`` of object ``type`` / ``key`` raised in call ``call_id``: ``failure`` (recorded as
    the call's answer; the state it set is not committed).  The same call ID sent again raises it again."""

    code = "call_failed"

    def __init__(self, type: Any, key: Any, handler: Any, call_id: Any = None, failure: Any = None) -> None:
        super().__init__(type, key, handler, call_id, failure)
        self.type = type
        self.key = key
        self.handler = handler
        self.call_id = call_id
        self.failure = failure

    def _message(self) -> str:
        return f"handler {self.handler!r} of object {self.type}/{self.key} failed: {_shown(self.failure)}"


class VersionMismatch(Error):
    """An edit of object ``type`` / ``key``'s state expected version ``expected``; it is at ``actual``.
    Nothing recorded: read the state again (``ObjectRef.state()``) and retry."""

    code = "version_mismatch"

    def __init__(self, type: Any, key: Any, expected: Any, actual: Any) -> None:
        super().__init__(type, key, expected, actual)
        self.type = type
        self.key = key
        self.expected = expected
        self.actual = actual

    def _message(self) -> str:
        return (
            f"object {self.type}/{self.key} is at version {self.actual}, not {self.expected}: "
            "the edit is refused, nothing recorded"
        )


class ReadOnlyState(Error):
    """A shared handler (``handler`` of object type ``type``) tried to change its state: shared handlers
    only read (make it an exclusive handler).  Usually a programming error."""

    code = "read_only_state"

    def __init__(self, type: Any, handler: Any) -> None:
        super().__init__(type, handler)
        self.type = type
        self.handler = handler

    def _message(self) -> str:
        return f"handler {self.handler!r} of object type {self.type!r} is shared: its state is read-only"


_FULL = (_errno.ENOSPC, getattr(_errno, "EDQUOT", -1))  # the errnos of a full disk (or quota)


def storage_error(exc: OSError, op: str, path: Any) -> StorageError:
    """The fusee error for OS error ``exc`` of ``op`` on ``path``: :class:`StorageFull` for ENOSPC and
    EDQUOT, else :class:`StorageFailed`."""
    code = exc.errno
    cls = StorageFull if code in _FULL else StorageFailed
    return cls(op, path, code, exc.strerror or str(exc))


CODES: Final[dict[str, type[Error]]] = {
    cls.code: cls
    for cls in (
        Busy,
        NotFound,
        AlreadyExists,
        UnknownWorkflow,
        StepFailed,
        Failed,
        Cancelled,
        Terminated,
        DeterminismError,
        Corrupt,
        NotSerializable,
        ChildFailed,
        TimedOut,
        Locked,
        WrongLayout,
        StorageFull,
        StorageFailed,
        ShardCrashed,
        EngineFailed,
        NotRunning,
        UpdateRejected,
        UpdateFailed,
        InvalidToken,
        AlreadySettled,
        NotPaused,
        StreamClosed,
        UnknownObjectType,
        UnknownHandler,
        CallFailed,
        VersionMismatch,
        ReadOnlyState,
    )
}
"""Each code to its class (the base's ``"error"`` is not listed)."""


def failure_of(exc: BaseException) -> dict[str, str]:
    """The JSON failure describing ``exc``: ``{"type": <class name>, "message": str(exc)}``."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the failure
        message = object.__repr__(exc)
    return {"type": _recordable(type(exc).__qualname__), "message": _recordable(message)}


def _recordable(text: Any) -> str:
    """``text`` as a str the journal can hold: lone surrogates (a ``surrogateescape``d file name) are
    written as ``\\udcxx`` escapes, so the failure is recorded instead of refused."""
    if type(text) is not str:
        text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _shown(failure: Any) -> str:
    """A failure for a message: ``"Type: message"`` for the usual dict, else its repr."""
    if type(failure) is dict and type(failure.get("type")) is str and type(failure.get("message")) is str:
        return f"{failure['type']}: {failure['message']}" if failure["message"] else failure["type"]
    return repr(failure)
