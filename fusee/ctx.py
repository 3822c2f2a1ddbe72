"""The :class:`Ctx` workflow code gets (durable operations numbered by call order), the
:class:`StepContext` a step body gets, and delivering a ``Send`` (:func:`_deliver_send`).

Every record of a run is appended to its shard's journal and fed, at once, to the run's
:class:`fusee.replay.Machine`; appending never waits for the disk.  A step body with effects waits
until the journal is durable through the run's gate (``Machine.gate()``); a ``read_only`` step does not."""

from __future__ import annotations

import random as _random
import secrets as _secrets
import uuid as _uuid
from typing import TYPE_CHECKING, Any, Callable

import ensemble as _e
from ensemble import NOMATCH, TIMEOUT

from . import durations as _durations
from . import records as r
from .errors import (
    Cancelled,
    DeterminismError,
    EngineFailed,
    Error,
    NotFound,
    NotSerializable,
    ShardCrashed,
    StepFailed,
    StorageError,
    Terminated,
    failure_of,
)
from .replay import ASYNC, CANCEL, CHILD, COMPLETION, SEND, SLEEP, STEP, VALUE, WAIT, Replay, async_token, send_dedup
from .workflow import _NO_RETRY, Retry, _signal_name, _wake, shard_of
from .run_state import NO_ENTRIES, RUNNING, _RunState, _UpdateRequest
from .run_family import _parent_ref
from .step_context import StepContext, _arity_cache, _FunctionType, _takes_step_context

if TYPE_CHECKING:
    from .host import Host
    from .stream import Stream

class _Deadline(BaseException):
    """Raised in a run past its deadline: it ends ``timed_out`` (not an Exception: code does not catch it)."""


class _ContinueAsNew(BaseException):
    """Raised by :meth:`Ctx.continue_as_new`: the run ends ``continued`` and a new run starts with ``input``."""

    def __init__(self, input: Any) -> None:
        super().__init__(input)
        self.input = input


def _result_refused(exc: NotSerializable, step: str) -> NotSerializable:
    """``exc`` (refusing a ``Step`` record's payload) told of step ``step``'s result: the path is rooted at
    ``result`` (``result['items'][2]``) and the reason names the step."""
    path = exc.path
    if type(path) is str and path.startswith("payload"):
        path = "result" + path[len("payload") :]
    return NotSerializable(exc.value, f"{exc.why} (in the result of step {step!r})", path)


class Ctx:
    """What workflow code gets: durable operations numbered by call order (see the module docstring)."""

    __slots__ = ("_st",)

    def __init__(self, state: _RunState) -> None:
        self._st = state

    @property
    def workflow_id(self) -> str:
        """The run's workflow ID."""
        return self._st.id

    @property
    def run_id(self) -> int:
        """The run's number (unique within its shard's journal)."""
        return self._st.run

    def __repr__(self) -> str:
        return f"<fusee.Ctx {self._st.id!r} run {self._st.run}>"

    # -- machinery

    def _begin(self, kind: str, name: Any) -> Any:
        st = self._st
        if st.determinism is not None:
            raise st.determinism
        if st.status != RUNNING:
            raise Terminated(None)
        if st.parking:  # unwinding to park (a finally in workflow code): record nothing
            raise _Parked()
        if st.past_deadline():
            raise _Deadline()
        if st.validating:
            raise Error("an update's validator runs no operations (it only reads the workflow's state)")
        m = st.machine
        try:
            if st.update_requests or m._upd < len(m.history._updates):
                seq = m.number(kind, name)
                self._updates(seq)  # due updates run here, once the operation has its number (as on replay)
                return m.resolve(seq, kind, name)
            return m.begin(kind, name)
        except DeterminismError as e:
            st.determinism = e
            raise

    def _next(self, seq: int) -> Replay | None:
        """Live operation ``seq``: take what is recorded for it, in the order it was recorded, as replay will.

        Raises the run's cancel if it is recorded (not yet delivered) before the
        operation's completion, or the completion is not recorded; returns the
        completion (handed out) if it is recorded first; ``None`` if neither is
        recorded.  The decision is :meth:`fusee.replay.Machine.next_for`'s, by
        journal order, the same :meth:`~fusee.replay.Machine.begin` makes on
        replay: never a fixed order of checks (a child's ``ChildDone`` recorded
        just before a ``Cancel`` is the child's result here, and the cancel lands
        at the next operation, as after a reopen).  Ends the run (``_Deadline``)
        first if its deadline passed.
        """
        st = self._st
        if st.past_deadline():
            raise _Deadline()
        m = st.machine
        if st.update_requests or m._upd < len(m.history._updates):
            self._updates(seq)
        nxt = m.next_for(seq)
        if nxt == CANCEL:
            raise m.take_cancel()  # type: ignore[misc]
        if nxt == COMPLETION:
            return m.take(seq)
        return None

    def _settled(self, seq: int) -> None:
        """Live operation ``seq`` just recorded its own completion: raise a cancel recorded before it (as
        replay will), else go on (:meth:`fusee.replay.Machine.settle`); ends the run past its deadline."""
        st = self._st
        if st.past_deadline():
            raise _Deadline()
        m = st.machine
        if st.update_requests or m._upd < len(m.history._updates):
            self._updates(seq)  # an update recorded before this completion runs first, as on replay
        c = m.settle(seq)
        if c is not None:
            raise c

    # -- updates (docs: fusee.replay, "Updates")

    def _updates(self, seq: int) -> None:
        """A check point of begun operation ``seq``: run the handler of each recorded update due here (its turn
        before the operation's completion and an undelivered cancel: :meth:`fusee.replay.Machine.update_due`),
        then, while nothing is recorded for the operation (no completion, no cancel), take the requests the
        shard server queued: each is validated and, accepted, recorded (``Update``) and run at once.  Never
        inside a handler or a validator (a handler runs to its end before the next update starts)."""
        st = self._st
        if st.in_update or st.validating:
            return
        m = st.machine
        while True:
            u = m.update_due(seq)
            if u is not None:
                m.take_update()
                self._apply_update(u)
                continue
            if st.update_requests and m.next_for(seq) is None:
                self._accept_update(st.update_requests.pop(0))
                continue
            return

    def _accept_update(self, req: _UpdateRequest) -> None:
        """Validate request ``req`` and record its ``Update`` (its waiters then wait for its outcome), or answer
        them the refusal with nothing recorded: no handler of that name, or the validator raised."""
        st = self._st
        h = st.machine.history
        if h.has_update(req.id):  # recorded already (this request was sent again): wait for that one's outcome
            done = h.update_outcome(req.id)
            if done is None:
                st.own("update_waiters").setdefault(req.id, []).extend(req.waiters)
            else:
                rec, lsn = done
                st.answer_update(req.waiters, rec.status, rec.payload, lsn)
            return
        entry = st.update_handlers.get(req.name)
        if entry is None:
            known = ", ".join(repr(n) for n in sorted(st.update_handlers)) or "none"
            failure = {"type": "UnknownUpdate", "message": f"the run has no update handler {req.name!r} (it has: {known})"}
            st.answer_update(req.waiters, "rejected", failure, 0)
            return
        validator = entry[1]
        if validator is not None:
            st.validating = True
            try:
                validator(req.value)
            except Exception as exc:
                st.answer_update(req.waiters, "rejected", failure_of(exc), 0)
                return
            finally:
                st.validating = False
        st.append(r.Update(st.run, req.id, req.name, req.value))  # a delivery: due at once (nothing else is recorded)
        st.own("update_waiters").setdefault(req.id, []).extend(req.waiters)

    def _apply_update(self, u: r.Update) -> None:
        """Run the handler of recorded update ``u`` (live, or replaying) and record its ``UpdateDone`` (unless
        recorded already), then answer its waiters.  A handler that raises fails the update, not the run; a
        cancel raised in it fails the update and goes on to the code (the run is being cancelled)."""
        st = self._st
        entry = st.update_handlers.get(u.name)
        st.in_update = True
        try:
            if entry is None:  # recorded by code that had the handler: not this code (it changed)
                status, payload = "error", {"type": "UnknownUpdate", "message": f"the run has no update handler {u.name!r}"}
            else:
                try:
                    status, payload = "ok", entry[0](u.payload)
                except (DeterminismError, Terminated, StorageError, ShardCrashed, EngineFailed):
                    raise
                except Cancelled as exc:
                    st.in_update = False
                    self._update_done(u, "error", failure_of(exc))
                    raise
                except Exception as exc:
                    status, payload = "error", failure_of(exc)
        finally:
            st.in_update = False
        self._update_done(u, status, payload)

    def _update_done(self, u: r.Update, status: str, payload: Any) -> None:
        st = self._st
        done = st.machine.history.update_outcome(u.id)
        if done is None:
            try:
                lsn = st.append(r.UpdateDone(st.run, u.id, status, payload))
            except NotSerializable as exc:  # the handler's result: the update fails, saying where
                status, payload = "error", failure_of(_result_refused(exc, f"update {u.name}"))
                lsn = st.append(r.UpdateDone(st.run, u.id, status, payload))
        else:
            rec, lsn = done
            status, payload = rec.status, rec.payload
        waiters = st.update_waiters and st.own("update_waiters").pop(u.id, None)
        if waiters:
            st.answer_update(waiters, status, payload, lsn)

    def on_update(self, name: str, handler: Callable[[Any], Any], validator: Callable[[Any], Any] | None = None) -> None:
        """Answer ``engine.update(id, name, value)`` with ``handler(value)``.

        ``validator(value)``, if given, runs first and records nothing: if it raises, the update is
        rejected (the caller gets :class:`fusee.errors.UpdateRejected`) and nothing is recorded.  It
        must not run operations.  An accepted update is recorded (``Update``) and its handler runs at
        that place in the journal, at the code's next operation or wake-up (and again there on
        replay); it may run steps, sleeps, waits.  Its result (or failure) is recorded (``UpdateDone``)
        and answered to the caller once durable; a handler that raises fails the update
        (:class:`fusee.errors.UpdateFailed`), not the run.  Register handlers before the code's first
        operation: an update that arrives while none of that name is registered is rejected."""
        if type(name) is not str or not name:
            raise TypeError(f"an update's name is a non-empty str, not {name!r}")
        if not callable(handler):
            raise TypeError(f"an update handler is a function handler(value), not {handler!r}")
        if validator is not None and not callable(validator):
            raise TypeError(f"an update validator is None or a function validator(value), not {validator!r}")
        self._st.own("update_handlers")[name] = (handler, validator)

    def _pause(self, at: float | None) -> None:
        """Park until woken (a signal or a cancel arrived) or until unix time ``at``.

        While paused the run may be parked (fusee.parking): its shard server
        sets ``parking`` and wakes it, and it ends here with ``_Parked``
        (nothing recorded; a wake loads it again and it replays to here).
        """
        st = self._st
        host = st.host
        if st.deadline is not None and (at is None or at > st.deadline):
            at = st.deadline  # wake at the run's deadline (then _next ends it)
        if st.parking:
            raise _Parked()
        st.wake_pending = False  # the caller looked at what was recorded for it: a wake from now on is new
        st.waiting_since = host.clock.now()
        st.wake_at = at
        if host.parking.parks:
            host.tell(st.shard, (_WAITING, st))
        try:
            host.clock.pause(at)
        finally:
            st.waiting_since = None
        if st.parking:
            raise _Parked()
        while _e.receive(_wake, timeout=0) is not TIMEOUT:  # drain the wakes that piled up
            pass

    # -- operations

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        retry: Retry | None = None,
        read_only: bool = False,
    ) -> Any:
        """Run ``fn()`` (or ``fn(s)``, ``s.key`` the idempotency key) once, durably; on replay return what it returned.

        A failed attempt is recorded with when the next is due; when ``retry``'s
        attempts run out, :class:`StepFailed` is raised here.  A body with effects
        starts only once the run's earlier records are durable; a ``read_only``
        body does not wait.  A result that cannot be serialized raises
        :class:`NotSerializable` here, naming the step and the path inside the
        result (``result['items'][2]``), with nothing recorded: the body ran, and
        runs again when the run is resumed (a body runs at least once; ``s.key``
        is what makes its effect happen once).

        Cancel: journal order decides (:meth:`fusee.replay.Machine.next_for`).  A
        cancel recorded while the body ran (or while waiting for a retry) comes
        before the ``Step``, so it is raised here once the ``Step`` is recorded,
        as on replay; one recorded after the ``Step`` lands at the next operation.
        """
        if type(name) is not str:
            raise TypeError(f"a step's name is a str, not {name!r}")
        if retry is None:
            retry = _NO_RETRY
        elif type(retry) is not Retry:
            raise TypeError(f"retry is a fusee.Retry, not {retry!r}")
        st = self._st
        # _begin, inlined (once per step), with the machine's answer for an operation it knows nothing of
        # being its bare seq (no Live built)
        if st.determinism is not None:
            raise st.determinism
        if st.status != RUNNING:
            raise Terminated(None)
        if st.parking:  # unwinding to park (a finally in workflow code): record nothing
            raise _Parked()
        if st.deadline is not None and st.past_deadline():
            raise _Deadline()
        m = st.machine
        try:
            if st.update_requests or m._upd < len(m.history._updates) or st.validating:
                op = self._begin(STEP, name)
            else:
                op = m.begin_new(STEP, name)
        except DeterminismError as e:
            st.determinism = e
            raise
        base, paused = 0, False
        if type(op) is int:
            seq, attempt, retry_at = op, 1, None
        elif type(op) is Replay:
            return op.result()
        else:
            seq, attempt, retry_at, base, paused = op.seq, op.attempts + 1, op.retry_at, op.base, op.paused
        host = st.host
        hook = host._step_hook  # host.step_body, inlined (once per step)
        if hook:
            fn = hook.get((st.wtype, name), fn)
        # _takes_step_context, its cache hit for a plain function inlined
        takes = _arity_cache.get(fn.__code__) if type(fn) is _FunctionType else None
        if takes is None:
            takes = _takes_step_context(fn)
        clock = host.clock
        while True:
            if paused:  # the retry budget was used up (on_exhausted="pause"): wait for engine.resume
                h = m.history
                while True:
                    self._next(seq)  # no Step yet: a recorded cancel (or a due update) lands here
                    if seq not in h._paused:
                        break
                    self._pause(None)
                base, paused, retry_at = attempt - 1, False, None  # a fresh budget from here
            if retry_at is not None:
                while True:
                    self._next(seq)  # no Step yet: a recorded cancel lands here
                    if clock.now() >= retry_at:
                        break
                    self._pause(retry_at)
            if not read_only and host.journal.path is not None:  # in memory every record is durable at once
                st.await_durable()
            st.stepping = seq  # a stream written in the body records the step's chunks (fusee.stream)
            st.step_name = name
            try:
                try:
                    if takes:
                        value = fn(StepContext(f"{st.id}/{st.run}/{seq}", name, attempt))
                    else:
                        value = fn()
                finally:
                    st.stepping = None
                    if st.step_writes:
                        st.step_writes = NO_ENTRIES
            except Exception as exc:
                failure = failure_of(exc)
                if attempt - base >= retry.attempts:
                    if getattr(host, "on_exhausted", "fail") == "pause":
                        st.append(r.Paused(st.run, seq, name, attempt, failure))
                        attempt += 1
                        paused = True
                        continue
                    st.append(r.Step(st.run, seq, name, attempt, "error", failure))
                    self._settled(seq)  # a cancel recorded before the Step lands here, as on replay
                    raise StepFailed(name, failure) from exc
                retry_at = clock.now() + retry.delay(attempt)
                st.append(r.Attempt(st.run, seq, name, attempt, retry_at, failure))
                attempt += 1
                continue
            try:
                st.append_step(seq, name, attempt, value)
            except NotSerializable as exc:  # nothing recorded: name the step, and the path inside its result
                raise _result_refused(exc, name) from None
            # _settled, inlined: a cancel recorded while the body ran (before the Step) lands here, as on replay
            if st.deadline is not None and st.past_deadline():
                raise _Deadline()
            if st.update_requests or m._upd < len(m.history._updates):
                self._updates(seq)  # an update recorded while the body ran runs first, as on replay
            if m.history._cancel is None or m._cancel_delivered:  # Machine.settle when no cancel is pending
                m._handed += 1
                return value
            c = m.settle(seq)
            if c is not None:
                raise c
            return value

    def sleep(self, name: str, d: Any) -> None:
        """Sleep durably for ``d`` (seconds or a string like ``"5m"``): a ``Timer`` record, then ``Fired``."""
        seconds = _durations.parse(d)
        clock = self._st.host.clock
        self._sleep(name, lambda: clock.now() + seconds)

    def sleep_until(self, name: str, unix_seconds: float) -> None:
        """Sleep durably until the unix time ``unix_seconds``."""
        if type(unix_seconds) not in (int, float):
            raise TypeError(f"sleep_until takes unix seconds, not {unix_seconds!r}")
        self._sleep(name, lambda: float(unix_seconds))

    def _sleep(self, name: str, at_of: Callable[[], float]) -> None:
        """A cancel recorded before the ``Fired`` lands here (journal order, :meth:`_next`): the ``Fired`` is
        appended only when no cancel is pending, so a cancel that comes while the time has come but the run
        has not yet run is raised here, as replay does (its ``Fired`` is not recorded, or follows the cancel)."""
        if type(name) is not str:
            raise TypeError(f"a sleep's name is a str, not {name!r}")
        op = self._begin(SLEEP, name)
        if type(op) is Replay:
            return None
        st = self._st
        clock = st.host.clock
        if op.armed:
            at = op.at
        else:
            at = at_of()
            st.append(r.Timer(st.run, op.seq, name, at))
        while True:
            if self._next(op.seq) is not None:  # journal order; a Fired is only ever recorded here
                return None
            if clock.now() >= at:
                st.append(r.Fired(st.run, op.seq))
                return None
            self._pause(at)

    def wait_for(self, signal: Any, timeout: Any = None, *, until: float | None = None) -> Any:
        """The next value of ``signal`` (a :func:`signal` or its name), or ``None`` once ``timeout`` passes
        (or the clock reaches ``until``, unix seconds: an absolute deadline, not both).

        Signals sent before the wait are kept, in order; a timeout is recorded.

        Cancel: journal order decides (:meth:`fusee.replay.Machine.next_for`), and the wait's completion is
        its ``Waited``, not the ``Signal``: a cancel recorded before the ``Waited`` is raised here even if a
        signal was received before the cancel (it stays unconsumed), as on replay.
        """
        name = _signal_name(signal)
        if until is not None and timeout is not None:
            raise ValueError("wait_for takes timeout or until, not both")
        if until is not None and (type(until) not in (int, float) or until != until):
            raise TypeError(f"until is unix seconds (int or float), not {until!r}")
        seconds = None if timeout is None else _durations.parse(timeout)
        op = self._begin(WAIT, name)
        if type(op) is Replay:
            return op.result()
        st = self._st
        m = st.machine
        clock = st.host.clock
        if op.armed:
            deadline = op.at
        else:
            deadline = float(until) if until is not None else None if seconds is None else clock.now() + seconds
            st.append(r.Wait(st.run, op.seq, name, deadline))
        while True:
            got = self._next(op.seq)  # journal order; a Waited is only ever recorded here
            if got is not None:
                return got.result()
            sig = m.signal_for(name)
            if sig is not None:
                st.append(r.Waited(st.run, op.seq, "signal", sig.payload))
                return sig.payload
            if deadline is not None and clock.now() >= deadline:
                st.append(r.Waited(st.run, op.seq, "timeout", None))
                return None
            self._pause(deadline)

    def step_async(self, name: str, start_fn: Callable[[str], Any]) -> Any:
        """A step an outside system finishes: ``start_fn(token)`` hands the completion token (an opaque str
        naming this run and step, with a random part recorded in the journal) to that system, and the run
        waits durably until ``engine.complete(token, value)`` (this returns ``value``) or
        ``engine.fail(token, error)`` (this raises :class:`StepFailed` with the failure).

        Records ``Awaiting`` (the token's secret) before ``start_fn`` runs, once it is durable (so no
        completion of a token anyone saw is ever lost), then ``AsyncStarted`` once ``start_fn`` returns:
        ``start_fn`` runs at least once, as a step body does (again only after a crash before its
        ``AsyncStarted`` is durable, with the same token), never on replay after that.  If ``start_fn``
        raises, the step fails at once (``Settled`` "error": :class:`StepFailed`).  The outcome is a
        ``Settled`` record (one per step: a second settle raises :class:`fusee.errors.AlreadySettled`).
        A settle that comes before ``start_fn`` returned counts (``start_fn`` may hand the token on
        and the outside system answer at once)."""
        if type(name) is not str:
            raise TypeError(f"an async step's name is a str, not {name!r}")
        if not callable(start_fn):
            raise TypeError(f"start_fn is a function start_fn(token), not {start_fn!r}")
        op = self._begin(ASYNC, name)
        if type(op) is Replay:
            return op.result()
        st = self._st
        h = st.machine.history
        if op.armed:
            secret = h.awaiting(op.seq).secret
        else:
            secret = _secrets.token_hex(16)
            st.append(r.Awaiting(st.run, op.seq, name, secret))
        if not op.started:
            st.await_durable()  # the token is durable before anyone sees it
            if h.op(op.seq).done is None:  # not settled meanwhile
                try:
                    start_fn(async_token(st.id, st.run, op.seq, secret))
                except Exception as exc:
                    if h.op(op.seq).done is None:
                        st.append(r.Settled(st.run, op.seq, "error", failure_of(exc)))
                else:
                    if h.op(op.seq).done is None:
                        st.append(r.AsyncStarted(st.run, op.seq))
        while True:
            got = self._next(op.seq)  # journal order: the Settled or the Cancel, whichever was recorded first
            if got is not None:
                return got.result()
            self._pause(None)

    def _value(self, kind: str, make: Callable[[], Any]) -> Any:
        op = self._begin(VALUE, kind)
        if type(op) is Replay:
            return op.value
        st = self._st
        v = make()
        st.append(r.Value(st.run, op.seq, kind, v))
        return v

    def now(self) -> float:
        """The unix time, recorded (replay sees the same)."""
        return self._value("now", self._st.host.clock.now)

    def random(self) -> float:
        """A random float in [0, 1), recorded."""
        return self._value("random", _random.random)

    def uuid(self) -> str:
        """A random UUID4 string, recorded."""
        return self._value("uuid", lambda: str(_uuid.uuid4()))

    # -- composition: children, messages between runs, continue-as-new

    def child(
        self, wf: Any, id: str, input: Any = None, parent_close: str = "terminate", timeout: Any = None
    ) -> Any:
        """Run workflow ``wf`` (a Workflow or its type name) as child run ``id`` and return its result.

        The child may live on another shard.  Its outcome is recorded in this
        journal (``Child``, then ``ChildDone``) and replays the same; a child
        that fails, is cancelled or terminated, or times out (``timeout``: a
        duration) raises :class:`ChildFailed`.  A running run with that ID is
        attached to.  ``parent_close`` says what this run's end does to the
        child if it still runs: ``"terminate"``, ``"request_cancel"`` or ``"abandon"``.

        Cancel: journal order decides (:meth:`fusee.replay.Machine.next_for`).  The
        child's ``ChildDone`` recorded before the run's ``Cancel`` is returned (or
        raised) here and the cancel lands at the next operation; a ``Cancel``
        recorded first (the ``ChildDone`` after it, or not yet) is raised here:
        exactly what replay does after a reopen.
        """
        op = self._child_op(wf, id, input, parent_close, timeout, True)
        if type(op) is Replay:
            return op.result()
        while True:
            got = self._next(op.seq)  # journal order: the ChildDone or the Cancel, whichever was recorded first
            if got is not None:
                return got.result()
            self._pause(None)

    def start_child(
        self, wf: Any, id: str, input: Any = None, parent_close: str = "terminate", timeout: Any = None
    ) -> None:
        """Start child run ``id`` (see :meth:`child`) and return once its ``Start`` is durable, not waiting for
        its end (attaching if a run with that ID is running).  Records ``Child`` then ``ChildDone("started")``.

        Cancel: journal order decides (:meth:`fusee.replay.Machine.next_for`).  A cancel recorded while the
        child was being started comes before the ``ChildDone("started")``: it is raised here (the child is
        started all the same, and closed by this run's end per ``parent_close``), as on replay."""
        op = self._child_op(wf, id, input, parent_close, timeout, False)
        if type(op) is Replay:
            return None
        st = self._st
        st.append(r.ChildDone(st.run, op.seq, "started", None))
        self._next(op.seq)  # a cancel recorded before the "started" lands here, as on replay
        return None

    def _child_op(self, wf: Any, id: str, input: Any, parent_close: str, timeout: Any, wait: bool) -> Any:
        """Begin a child operation: its Replay, or (live) the Live op once ``Child`` is recorded and the child's
        shard server has started or attached it (its ``Start`` durable).  Idempotent on replay: a recorded
        ``Child`` without its ``ChildDone`` asks again (start if missing, attach if running, the outcome if ended)."""
        st = self._st
        host = st.host
        w = host.workflow(wf)
        shard = host.shard_of(id)
        if parent_close not in r.PARENT_CLOSE:
            raise ValueError(f"parent_close is one of {r.PARENT_CLOSE}, not {parent_close!r}")
        seconds = None if timeout is None else _durations.parse(timeout)
        op = self._begin(CHILD, id)
        if type(op) is Replay:
            return op
        if op.armed:
            rec = st.machine.history.op(op.seq).armed
        else:
            deadline = None if seconds is None else host.clock.now() + seconds
            rec = r.Child(st.run, op.seq, id, w.name, input, parent_close, deadline, host.clock.now())
            st.append(rec)
        st.await_durable()  # the Child first: a crash then finds it and asks again
        lsn = host.call(shard, ("child", rec, _parent_ref(st, op.seq, wait)))
        host.wait_durable(shard, lsn)
        return op

    def signal_workflow(self, id: str, signal: Any, value: Any = None) -> None:
        """Send ``signal`` with ``value`` to the run of workflow ID ``id``, durably and exactly once.

        Recorded here (``Send``), and durable, before it is delivered; delivered with dedup
        :func:`fusee.replay.send_dedup` (redelivered after a crash, the target
        keeps one).  Returns once the target's ``Signal`` is durable (or the
        target does not exist or has ended: then it is dropped).
        """
        name = _signal_name(signal)
        if type(id) is not str:
            raise TypeError(f"a workflow ID is a str, not {id!r}")
        op = self._begin(SEND, id)
        if type(op) is Replay:
            return None
        st = self._st
        rec = r.Send(st.run, op.seq, id, name, value)
        st.append(rec)
        st.await_durable()  # the Send first (and what led to it): a crash never takes back a delivered signal
        _deliver_send(st.host, st.id, rec)
        return None

    def continue_as_new(self, input: Any = None) -> None:
        """End this run (``Done`` ``"continued"`` with ``input``) and start a new run of the same type and ID
        with ``input`` and a fresh journal; ``result`` follows to the last run.  Does not return."""
        r.encode_record(r.Done(self._st.run, "continued", 0.0, input))  # NotSerializable: raised here
        raise _ContinueAsNew(input)

    def stream(self, name: str) -> "Stream":
        """The writer of this run's stream ``name`` (:class:`fusee.stream.Stream`): ``write(chunk)`` appends a
        durable chunk, ``close()`` ends it; ``engine.read_stream(id, name, offset)`` reads it.  Used by
        workflow code, a write is an operation (recorded once, replayed to its offset); used inside a step
        body, its chunks are that step's, recorded as they are written (a body run again keeps the
        recorded prefix).  Records nothing itself; ``TypeError`` for a name that is not a non-empty str."""
        from .stream import Stream

        return Stream(self, name)

    def object(self, type: Any, key: str) -> Any:
        """Object ``type`` / ``key`` (:class:`fusee.objects.WorkflowObjectRef`): ``call(handler, arg,
        call_id=None)`` is a step of this run, its answer recorded here and replayed (the object runs an
        exclusive call once per call ID, so a body run again after a crash is answered the same)."""
        return self._st.host.object_ref(self, type, key)  # set by fusee.engine.open_engine

    def on_query(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Answer ``engine.query(id, name, arg)`` with ``fn(arg)`` (read-only: records nothing)."""
        if type(name) is not str:
            raise TypeError(f"a query's name is a str, not {name!r}")
        self._st.own("queries")[name] = fn


def _deliver_send(host: "Host", sender: str, rec: r.Send) -> None:
    """Deliver a ``Send`` as a signal to its target (dedup from the sender's id, run and seq); wait till durable.
    A target that does not exist is not an error (the signal is dropped)."""
    shard = shard_of(rec.target, host.shards)
    pause = 0.05
    while True:
        try:
            lsn = host.call(shard, ("signal", rec.target, rec.name, rec.payload, send_dedup(sender, rec.run, rec.seq)))
            host.wait_durable(shard, lsn)
            return
        except NotFound:
            return
        except (StorageError, ShardCrashed):
            # the target's disk refused it (or its server crashed with it): the Send is durable, so deliver
            # it again once the disk works (the target's dedup keeps one); a pause between tries, doubled up to 2 s
            if host.closed:
                raise
            _e.receive(lambda m: NOMATCH, timeout=pause)
            pause = min(2.0, pause * 2)


class _Parked(BaseException):
    """Raised in a paused run told to park: its process ends, nothing recorded (not an Exception:
    workflow code's ``except Exception`` does not catch it)."""



_WAITING = "fusee_waiting"
