"""Stage telemetry: events, trace ids, structlog, and the notifier's isolation (spec §1.3, §2.4, §3.13)."""

from __future__ import annotations

import gevent.event
import pytest
from structlog.testing import capture_logs

import constellation
import ensemble as e
from constellation import _notifier, telemetry
from constellation.telemetry import Event
from ensemble import NOMATCH, TIMEOUT

WAIT = 5.0


def _forward_all(to):
    return lambda event: e.send(to, ("telemetry", event))


def _until(operation, phase):
    """The telemetry events received up to and including the next (operation, phase)."""
    events = []
    while True:
        got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "telemetry" else NOMATCH, timeout=WAIT)
        assert TIMEOUT is not got
        events.append(got)
        if (got.operation, got.phase) == (operation, phase):
            return events


def _until_stopped():
    """The telemetry events up to and including stop/cancelled."""
    return _until("stop", "cancelled")


def test_format_with_and_without_detail():
    """format joins the fields, and the detail only when there is one."""
    assert [
        "constellation trace_id=3 stage_pid=<0.7.0> operation=push phase=received source_pid=<0.1.0> events=2",
        "constellation trace_id=1 stage_pid=<0.7.0> operation=stop phase=received",
    ] == [
        telemetry.format(Event(3, "<0.7.0>", "push", "received", "source_pid=<0.1.0> events=2")),
        telemetry.format(Event(1, "<0.7.0>", "stop", "received", "")),
    ]


def test_log_goes_through_structlog_at_info():
    """log emits the formatted event through structlog."""
    event = Event(1, "<0.7.0>", "stop", "received", "")
    with capture_logs() as logs:
        telemetry.log(event)
    assert [{"event": telemetry.format(event), "log_level": "info"}] == logs


def test_every_operation_in_order_with_its_trace_id():
    """Each handled command or report has the next trace id, and its steps come in order."""
    me = e.self()
    src = repr(me)
    stage = constellation.start(reporter=_forward_all(me))
    stage.subscribe("s1", "p1")
    stage.push([1, 2])
    stage.ask("s1", 2)
    with pytest.raises(constellation.InvalidDemand):
        stage.ask("s1", 0)
    stage.report_consumed("s1", 2)
    stage.report_consumed("s1", 0)
    stage.cancel("s1")
    stage.stop()
    got = [(ev.trace_id, ev.stage_pid, ev.operation, ev.phase, ev.detail) for ev in _until_stopped()]
    sp = repr(stage.pid)
    assert [
        (1, sp, "subscribe", "received", f"source_pid={src} consumer_pid={src} subscription=s1"),
        (1, sp, "subscribe", "dispatched", "batches=0 events=0"),
        (2, sp, "push", "received", f"source_pid={src} events=2"),
        (2, sp, "push", "dispatched", "batches=0 events=0"),
        (3, sp, "ask", "received", f"source_pid={src} subscription=s1 amount=2"),
        (3, sp, "ask", "dispatched", "batches=1 events=2"),
        (3, sp, "deliver", "mailbox_enqueued", f"consumer_pid={src} subscription=s1 events=2"),
        (4, sp, "ask", "received", f"source_pid={src} subscription=s1 amount=0"),
        (4, sp, "ask", "rejected", f"error={constellation.InvalidDemand(0)!r}"),
        (5, sp, "consume", "reported", f"consumer_pid={src} subscription=s1 events=2"),
        (6, sp, "consume", "rejected", f"error={constellation.InvalidConsumptionReport(0)!r}"),
        (7, sp, "cancel", "received", f"source_pid={src} subscription=s1"),
        (7, sp, "cancel", "dispatched", "batches=1 events=0"),
        (7, sp, "cancel", "mailbox_enqueued", f"consumer_pid={src} subscription=s1"),
        (8, sp, "stop", "received", ""),
        (8, sp, "stop", "cancelled", "subscriptions=0"),
    ] == got


def test_participant_down_and_stop_telemetry():
    """A dead participant is reported with its reason; stop counts the subscriptions it cancels."""
    me = e.self()
    src = repr(me)
    stage = constellation.start(reporter=_forward_all(me))
    doomed = e.spawn(lambda: e.receive())
    stage.subscribe("a", "pa", recipient=doomed)
    stage.subscribe("b", "pb")
    e.exit(doomed, "kill")
    got = _until("participant_down", "cancelled")
    stage.stop()
    got += _until("stop", "cancelled")
    got += _until("cancel", "mailbox_enqueued")
    assert [
        (1, "subscribe", "received", f"source_pid={src} consumer_pid={doomed!r} subscription=a"),
        (1, "subscribe", "dispatched", "batches=0 events=0"),
        (2, "subscribe", "received", f"source_pid={src} consumer_pid={src} subscription=b"),
        (2, "subscribe", "dispatched", "batches=0 events=0"),
        (3, "participant_down", "received", f"participant=pa consumer_pid={doomed!r} reason='killed'"),
        (3, "cancel", "mailbox_enqueued", f"consumer_pid={doomed!r} subscription=a"),
        (3, "participant_down", "cancelled", "subscriptions=1"),
        (4, "stop", "received", ""),
        (4, "stop", "cancelled", "subscriptions=1"),
        (4, "cancel", "mailbox_enqueued", f"consumer_pid={src} subscription=b"),
    ] == [(ev.trace_id, ev.operation, ev.phase, ev.detail) for ev in got]


def test_a_slow_reporter_never_blocks_the_stage():
    """While the reporter is stuck on the first event every push completes; all events follow on release."""
    me = e.self()
    gate = gevent.event.Event()

    def stuck(event):
        gate.wait()
        e.send(me, ("telemetry", event))

    stage = constellation.start(reporter=stuck)
    stage.subscribe("s1", "p1")
    for n in range(10):
        stage.push([n])
    assert (False, TIMEOUT) == (gate.is_set(), e.receive(timeout=0))
    gate.set()
    stage.stop()
    got = _until_stopped()
    assert list(range(1, 13)) == sorted({ev.trace_id for ev in got})


def test_a_raising_reporter_drops_only_that_event():
    """The event the reporter raised on is lost; every other one arrives, in order."""
    me = e.self()

    def flaky(event):
        if (event.trace_id, event.phase) == (2, "received"):
            raise RuntimeError("reporter failed")
        e.send(me, ("telemetry", event))

    stage = constellation.start(reporter=flaky)
    stage.subscribe("s1", "p1")
    stage.push([1])
    stage.stop()
    got = [(ev.trace_id, ev.operation, ev.phase) for ev in _until_stopped()]
    assert [
        (1, "subscribe", "received"),
        (1, "subscribe", "dispatched"),
        (2, "push", "dispatched"),
        (3, "stop", "received"),
        (3, "stop", "cancelled"),
    ] == got


def test_a_killed_notifier_stops_the_stage():
    """The stage exits with "telemetry notifier stopped" and later calls raise StageUnavailable."""
    me = e.self()
    stage = constellation.start(reporter=lambda event: e.send(me, ("notifier", e.self())))
    ref = e.monitor(stage.pid)
    stage.subscribe("s1", "p1")
    notifier = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "notifier" else NOMATCH, timeout=WAIT)
    e.exit(notifier, "kill")
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=WAIT)
    assert "telemetry notifier stopped" == down[4]
    with pytest.raises(constellation.StageUnavailable) as gone:
        stage.push([1])
    assert "telemetry notifier stopped" == gone.value.reason


def test_a_stopped_stage_stops_its_notifier():
    """The notifier ends normally after the stage's last events."""
    me = e.self()
    stage = constellation.start(reporter=lambda event: e.send(me, ("notifier", e.self())))
    stage.subscribe("s1", "p1")
    notifier = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "notifier" else NOMATCH, timeout=WAIT)
    stage.stop()
    assert "normal" == e.exit_reason(notifier, timeout=WAIT)


def test_propagate_lets_a_raising_reporter_crash_the_notifier():
    """Under PROPAGATE the owner sees the notifier's DOWN with the reporter's exception."""

    def bad(event):
        raise ValueError(event)

    pid, ref = _notifier.start(bad, _notifier.PROPAGATE)
    _notifier.notify(pid, "x")
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=WAIT)
    assert (ValueError, ("x",)) == (type(down[4]), down[4].args)


def test_isolate_keeps_the_notifier_running():
    """Under ISOLATE a raising reporter loses the event and the next one is reported."""
    me = e.self()

    def sometimes(event):
        if event == "bad":
            raise ValueError(event)
        e.send(me, ("reported", event))

    pid, _ = _notifier.start(sometimes, _notifier.ISOLATE)
    _notifier.notify(pid, "bad")
    _notifier.notify(pid, "good")
    assert ("reported", "good") == e.receive(timeout=WAIT)
    assert e.is_alive(pid)


def test_the_notifier_ends_with_its_owner():
    """A notifier monitors its owner and stops when the owner exits."""
    me = e.self()

    def owner():
        pid, _ = _notifier.start(lambda event: None)
        e.send(me, ("notifier", pid))

    e.spawn(owner)
    notifier = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "notifier" else NOMATCH, timeout=WAIT)
    assert "normal" == e.exit_reason(notifier, timeout=WAIT)
