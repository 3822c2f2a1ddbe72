"""The stage process: an ensemble gen_server around a :class:`constellation.runtime.Runtime`.

Each client operation is a ``gen_server.call``.  Per command the server logs
``<op>/received``, applies the runtime transition, and then either logs
``<op>/rejected`` and replies with the error (state unchanged), or logs
``<op>/dispatched``, **sends every delivery to its recipient, and only then
replies**: a caller that hears back from ``ask`` already has the events in the
recipient's mailbox.  Each participant's recipient pid is monitored once; its
``DOWN`` cancels that participant's subscriptions (``Cancelled`` goes to the
dead recipient) and re-dispatches the buffer to the others.
"""

from __future__ import annotations

from typing import Any, Hashable

import ensemble as e
from ensemble import CallError, gen_server

from . import _notifier, core, runtime
from .core import InvalidBufferCapacity as InvalidBufferCapacity  # the core's rule and error
from .telemetry import Event

__all__ = ["Stage", "StageUnavailable", "StageTimeout", "InvalidCallTimeout", "InvalidBufferCapacity", "start"]

_REJECTIONS = (core.StageError, runtime.RoutingError)
NOTIFIER_STOPPED = "telemetry notifier stopped"
START_TIMEOUT = 5.0


class StageUnavailable(Exception):
    """The stage is not running (stopped, crashed, never started); ``reason`` is its exit reason."""

    def __init__(self, reason: Any) -> None:
        super().__init__(f"the stage is unavailable: {reason!r}")
        self.reason = reason

    def __repr__(self) -> str:
        return f"StageUnavailable({self.reason!r})"


class StageTimeout(Exception):
    """No reply within the call timeout.  Not a rejection: the command may still be applied."""

    def __init__(self, request: Any = None) -> None:
        super().__init__("the stage did not reply in time (the command may still complete)")
        self.request = request


class InvalidCallTimeout(ValueError):
    """The call timeout must be a positive number of seconds."""

    def __init__(self, timeout: Any) -> None:
        super().__init__(f"the call timeout must be positive, not {timeout!r}")
        self.timeout = timeout


# --------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------


class Stage:
    """A handle on a running stage process: its ``pid`` and the ``call_timeout`` of every call.

    Every call raises the core's :class:`~constellation.core.StageError`
    subclasses and the runtime's :class:`~constellation.runtime.RoutingError`
    subclasses for a rejected command, :class:`StageUnavailable` when the
    stage is gone, and :class:`StageTimeout` when it did not answer in time.
    A timed-out call is not withdrawn: it may still complete, so only retry
    idempotent operations (``cancel``, ``stop``).
    """

    __slots__ = ("pid", "call_timeout")

    def __init__(self, pid: e.Pid, call_timeout: float) -> None:
        self.pid = pid
        self.call_timeout = call_timeout

    def __repr__(self) -> str:
        return f"Stage({self.pid!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stage) and other.pid is self.pid

    def __hash__(self) -> int:
        return hash(self.pid)

    def subscribe(
        self,
        id: Hashable,  # noqa: A002 - the spec's name
        participant_id: Hashable,
        recipient: Any = None,
        partition: int = 0,
    ) -> None:
        """Subscribe ``id`` for ``participant_id``; events go to ``recipient`` (default: the caller).

        The recipient (an ensemble pid) receives ``("events", id, events)`` and
        ``("cancelled", id)``; the stage monitors it once per participant, and
        its death cancels all that participant's subscriptions.  A new
        subscription has no demand.  Raises ``DuplicateSubscription`` or
        ``ParticipantAlreadyRegistered`` (same participant, other recipient).
        A timed-out call may still complete.
        """
        if recipient is None:
            recipient = e.self()
        self._call(("subscribe", id, participant_id, partition, recipient))

    def ask(self, id: Hashable, n: int) -> None:  # noqa: A002
        """Add ``n`` demand to ``id``; what it releases is in the recipient's mailbox on return.

        Raises ``InvalidDemand``, ``UnknownSubscription`` or
        ``SubscriptionCancelled``.  A timed-out call may still complete.
        """
        self._call(("ask", id, n))

    def push(self, events: Any) -> None:
        """Push ``events`` (a list or tuple); deliveries are enqueued before it returns.

        Raises ``BufferCapacityExceeded`` (nothing delivered or buffered then).
        A timed-out push may still complete: retrying it may duplicate events.
        """
        self._call(("push", tuple(events)))

    def cancel(self, id: Hashable) -> None:  # noqa: A002
        """Cancel ``id`` (idempotent); its recipient gets ``("cancelled", id)``.

        Raises ``UnknownSubscription`` for an id never subscribed.  A timed-out
        call may still complete.
        """
        self._call(("cancel", id))

    def report_consumed(self, id: Hashable, amount: int) -> None:  # noqa: A002
        """Tell the stage ``amount`` events of ``id`` were handled (a cast; never fails).

        Telemetry only (``consume/reported`` or ``consume/rejected``): not a
        protocol acknowledgement, it changes no demand.
        """
        gen_server.cast(self.pid, ("consumed", id, amount, e.self()))

    def stop(self) -> None:
        """Cancel every active subscription (each recipient gets ``cancelled``) and stop.

        Buffered events are discarded.  After it, every call raises
        :class:`StageUnavailable`.  A timed-out stop may still complete.
        """
        self._call(("stop",))

    def _call(self, request: tuple) -> None:
        try:
            got = gen_server.call(self.pid, request, self.call_timeout)
        except CallError as err:
            if err.reason == "timeout":
                raise StageTimeout(request) from None
            reason = err.reason
            if reason == "noproc":
                gone = e.exit_reason(self.pid, timeout=0)
                if gone is not e.TIMEOUT:
                    reason = gone
            raise StageUnavailable(reason) from None
        if got is not None:
            raise got


def start(
    strategy: Any = None,
    buffer_capacity: int | None = None,
    call_timeout: float = 5.0,
    reporter: Any = None,
) -> Stage:
    """Start a stage process (unlinked) and answer its :class:`Stage`; see :func:`constellation.start`."""
    if isinstance(call_timeout, bool) or not isinstance(call_timeout, (int, float)) or not call_timeout > 0:
        raise InvalidCallTimeout(call_timeout)
    core.check_buffer_capacity(buffer_capacity)  # before the reporter check, as documented
    if reporter is not None and not callable(reporter):
        raise TypeError(f"a reporter must be callable, not {reporter!r}")
    rt = runtime.new(strategy, buffer_capacity)
    pid = gen_server.start(_StageServer(rt, reporter), timeout=START_TIMEOUT)
    return Stage(pid, float(call_timeout))


# --------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------


class _State:
    """The server's mutable state (the runtime itself is a value, replaced per command)."""

    __slots__ = ("rt", "trace_id", "monitors", "by_ref", "notifier", "notifier_ref", "me")

    def __init__(self, rt: runtime.Runtime) -> None:
        self.rt = rt
        self.trace_id = 0
        self.monitors: dict = {}  # participant id -> monitor ref
        self.by_ref: dict = {}  # monitor ref -> (participant id, pid)
        self.notifier: Any = None
        self.notifier_ref: Any = None
        self.me = ""

    def __repr__(self) -> str:
        return (
            f"<stage subscriptions={len(self.rt.routes)} participants={len(self.rt.participants)} "
            f"trace_id={self.trace_id}>"
        )


_RECEIVED = {
    "subscribe": lambda req, src: f"source_pid={src} consumer_pid={req[4]!r} subscription={req[1]}",
    "ask": lambda req, src: f"source_pid={src} subscription={req[1]} amount={req[2]}",
    "push": lambda req, src: f"source_pid={src} events={len(req[1])}",
    "cancel": lambda req, src: f"source_pid={src} subscription={req[1]}",
}


class _StageServer(gen_server.GenServer):
    def __init__(self, rt: runtime.Runtime, reporter: Any) -> None:
        self._rt = rt
        self._reporter = reporter

    def init(self) -> Any:
        st = _State(self._rt)
        self._rt = None
        st.me = repr(e.self())
        if self._reporter is not None:
            st.notifier, st.notifier_ref = _notifier.start(self._reporter, _notifier.ISOLATE)
        return ("ok", st)

    # -- calls --------------------------------------------------------------

    def handle_call(self, request: Any, from_: Any, st: _State) -> Any:
        op = request[0]
        if op == "stop":
            return self._stop(st)
        if op not in _RECEIVED:
            return ("reply", ValueError(f"unknown stage request {request!r}"), st)
        st.trace_id += 1
        tid = st.trace_id
        if st.notifier is not None:
            self._trace(st, tid, op, "received", _RECEIVED[op](request, repr(from_[0])))
        rt = st.rt
        try:
            if op == "push":
                rt, out = runtime.push(rt, request[1])
            elif op == "ask":
                rt, out = runtime.ask(rt, request[1], request[2])
            elif op == "subscribe":
                _, id_, participant, partition, recipient = request
                rt, out = runtime.subscribe(rt, id_, participant, partition, recipient)
            else:
                rt, out = runtime.cancel(rt, request[1])
        except _REJECTIONS as err:  # core and routing errors go back to the caller
            if st.notifier is not None:
                self._trace(st, tid, op, "rejected", f"error={err!r}")
            return ("reply", err, st)
        st.rt = rt
        if st.notifier is not None:
            count = sum(len(d.message.events) for d in out if type(d.message) is runtime.Events)
            self._trace(st, tid, op, "dispatched", f"batches={len(out)} events={count}")
        self._execute(st, tid, out)
        if op == "subscribe":
            self._ensure_monitor(st, request[2], request[4])
        elif out:
            self._remove_unused(st)
        return ("reply", None, st)

    def _stop(self, st: _State) -> Any:
        st.trace_id += 1
        tid = st.trace_id
        if st.notifier is not None:
            self._trace(st, tid, "stop", "received", "")
        st.rt, out = runtime.shutdown(st.rt)
        if st.notifier is not None:
            self._trace(st, tid, "stop", "cancelled", f"subscriptions={len(out)}")
        self._execute(st, tid, out)
        self._remove_unused(st)
        if st.notifier is not None:
            e.demonitor(st.notifier_ref, flush=True)
            _notifier.stop(st.notifier)
        return ("stop", "normal", None, st)

    # -- casts and messages ---------------------------------------------------

    def handle_cast(self, request: Any, st: _State) -> Any:
        if type(request) is tuple and len(request) == 4 and request[0] == "consumed":
            _, id_, amount, consumer = request
            st.trace_id += 1
            if st.notifier is not None:
                try:
                    runtime.check_consumption(st.rt, id_, amount)
                except runtime.RoutingError as err:
                    self._trace(st, st.trace_id, "consume", "rejected", f"error={err!r}")
                else:
                    self._trace(
                        st,
                        st.trace_id,
                        "consume",
                        "reported",
                        f"consumer_pid={consumer!r} subscription={id_} events={amount}",
                    )
        return ("noreply", st)

    def handle_info(self, msg: Any, st: _State) -> Any:
        if type(msg) is tuple and len(msg) == 5 and msg[0] == "DOWN":
            ref = msg[1]
            if st.notifier_ref is not None and ref == st.notifier_ref:
                return ("stop", NOTIFIER_STOPPED, st)
            entry = st.by_ref.pop(ref, None)
            if entry is not None:
                self._participant_down(st, entry[0], entry[1], msg[4])
        return ("noreply", st)

    def _participant_down(self, st: _State, participant: Hashable, pid: Any, reason: Any) -> None:
        st.monitors.pop(participant, None)
        st.trace_id += 1
        tid = st.trace_id
        if st.notifier is not None:
            self._trace(
                st,
                tid,
                "participant_down",
                "received",
                f"participant={participant} consumer_pid={pid!r} reason={reason!r}",
            )
        try:
            rt, out = runtime.participant_down(st.rt, participant)
        except _REJECTIONS as err:  # a routing error: logged, state kept
            if st.notifier is not None:
                self._trace(st, tid, "participant_down", "rejected", f"error={err!r}")
            return
        st.rt = rt
        self._execute(st, tid, out)
        if st.notifier is not None:
            cancelled = sum(1 for d in out if type(d.message) is runtime.Cancelled)
            self._trace(st, tid, "participant_down", "cancelled", f"subscriptions={cancelled}")
        self._remove_unused(st)

    # -- helpers --------------------------------------------------------------

    def _execute(self, st: _State, tid: int, out: list) -> None:
        """Send each delivery to its recipient, in order, with its telemetry."""
        tracing = st.notifier is not None
        send = e.send
        for d in out:
            m = d.message
            if type(m) is runtime.Events:
                _send(send, d.to, ("events", m.id, m.events))
                if tracing:
                    self._trace(
                        st,
                        tid,
                        "deliver",
                        "mailbox_enqueued",
                        f"consumer_pid={d.to!r} subscription={m.id} events={len(m.events)}",
                    )
            else:
                _send(send, d.to, ("cancelled", m.id))
                if tracing:
                    self._trace(st, tid, "cancel", "mailbox_enqueued", f"consumer_pid={d.to!r} subscription={m.id}")

    def _ensure_monitor(self, st: _State, participant: Hashable, recipient: Any) -> None:
        """Monitor a participant's recipient once (only a pid can be monitored)."""
        if participant in st.monitors or not isinstance(recipient, e.Pid):  # a remote pid too
            return
        ref = e.monitor(recipient)
        st.monitors[participant] = ref
        st.by_ref[ref] = (participant, recipient)

    def _remove_unused(self, st: _State) -> None:
        """Drop the monitors of participants the runtime no longer has."""
        participants = st.rt.participants
        for participant in [p for p in st.monitors if p not in participants]:
            ref = st.monitors.pop(participant)
            st.by_ref.pop(ref, None)
            e.demonitor(ref, flush=True)

    def _trace(self, st: _State, tid: int, operation: str, phase: str, detail: str) -> None:
        _notifier.notify(st.notifier, Event(tid, st.me, operation, phase, detail))

    def format_status(self, status: dict) -> dict:
        return status


def _send(send: Any, to: Any, msg: Any) -> None:
    """Send to a recipient; one that names nobody any more loses the message (best effort)."""
    try:
        send(to, msg)
    except e.Badarg:
        pass
