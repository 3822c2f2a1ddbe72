"""The stage process and the consumer: deliveries before replies, participant death, stop (spec §1.3, §3)."""

from __future__ import annotations

import pytest

import constellation
import ensemble as e
from constellation import consumer, core
from ensemble import NOMATCH, TIMEOUT, sys
from tests.constellation.test_core import BAD_CAPACITIES

WAIT = 5.0  # generous bound for messages that must come; never a synchronisation sleep


def _forwarder(to, kinds):
    """A reporter that sends the telemetry events of the given (operation, phase) pairs to ``to``."""

    def report(event):
        if (event.operation, event.phase) in kinds:
            e.send(to, ("telemetry", event))

    return report


def _telemetry(operation, phase):
    def take(m):
        match m:
            case ("telemetry", ev) if (ev.operation, ev.phase) == (operation, phase):
                return ev
        return NOMATCH

    return e.receive(take, timeout=WAIT)


def _sink():
    """A process that waits to be told to stop (or is killed); it receives deliveries."""

    def body():
        e.receive(lambda m: m if m == "stop" else NOMATCH)

    return e.spawn(body)


def test_deliveries_are_in_the_mailbox_when_ask_returns():
    """The stage sends the events before it replies to ask."""
    stage = constellation.start()
    stage.subscribe("s1", "me")
    stage.push([1, 2, 3])
    assert TIMEOUT == e.receive(timeout=0)
    stage.ask("s1", 2)
    assert ("events", "s1", (1, 2)) == e.receive(timeout=0)
    stage.stop()


def test_the_stage_sends_before_it_replies(monkeypatch):
    """Within one command the deliveries are sent first, the reply last."""
    import ensemble._gen as gen

    log = []
    send, reply = e.send, gen.reply
    monkeypatch.setattr(e, "send", lambda to, msg: (log.append(("send", msg)), send(to, msg))[1])
    monkeypatch.setattr(gen, "reply", lambda from_, value: (log.append(("reply", value)), reply(from_, value))[1])
    stage = constellation.start()
    stage.subscribe("s1", "me")
    stage.push([1, 2, 3])
    log.clear()
    stage.ask("s1", 3)
    assert [("send", ("events", "s1", (1, 2, 3))), ("reply", None)] == log
    stage.stop()


def test_deliveries_are_in_the_mailbox_when_push_returns():
    """A push against outstanding demand is delivered before the push returns."""
    stage = constellation.start()
    stage.subscribe("s1", "me")
    stage.ask("s1", 5)
    stage.push([7, 8])
    assert ("events", "s1", (7, 8)) == e.receive(timeout=0)
    stage.stop()


def test_events_go_to_the_recipient_named_at_subscribe():
    """An explicit recipient, not the caller, receives the events."""
    stage = constellation.start()
    box = e.spawn(lambda: e.receive())
    stage.subscribe("s1", "p1", recipient=box)
    stage.push(["x"])
    stage.ask("s1", 1)
    assert ("events", "s1", ("x",)) == e.join(box, timeout=WAIT)
    stage.stop()


def test_subscribe_passes_the_partition_to_the_strategy():
    """With partition(key), each subscription gets the events of its partition."""
    stage = constellation.start(strategy=constellation.partition(lambda n: n % 2))
    stage.subscribe("even", "p", partition=0)
    stage.subscribe("odd", "p", partition=1)
    stage.ask("even", 2)
    stage.ask("odd", 2)
    stage.push([1, 2, 3, 4])
    assert [("events", "odd", (1, 3)), ("events", "even", (2, 4))] == [e.receive(timeout=0), e.receive(timeout=0)]
    stage.stop()


def test_rejections_raise_the_core_and_routing_errors():
    """Each rejected call raises its error and the stage keeps serving."""
    stage = constellation.start(buffer_capacity=2)
    stage.subscribe("s1", "p1")
    with pytest.raises(constellation.InvalidDemand) as demand:
        stage.ask("s1", 0)
    with pytest.raises(constellation.UnknownSubscription) as unknown:
        stage.cancel("nope")
    with pytest.raises(constellation.DuplicateSubscription) as dup:
        stage.subscribe("s1", "p1")
    with pytest.raises(constellation.ParticipantAlreadyRegistered) as taken:
        stage.subscribe("s2", "p1", recipient=_sink())
    with pytest.raises(constellation.BufferCapacityExceeded) as full:
        stage.push([1, 2, 3])
    assert [
        constellation.InvalidDemand(0),
        constellation.UnknownSubscription("nope"),
        constellation.DuplicateSubscription("s1"),
        constellation.ParticipantAlreadyRegistered("p1"),
        constellation.BufferCapacityExceeded(2, 3),
    ] == [demand.value, unknown.value, dup.value, taken.value, full.value]
    stage.push([1, 2])
    stage.stop()


def test_cancel_sends_cancelled_and_is_idempotent():
    """The recipient hears ("cancelled", id) once; a second cancel is accepted silently."""
    stage = constellation.start()
    stage.subscribe("s1", "p1")
    stage.cancel("s1")
    stage.cancel("s1")
    assert [("cancelled", "s1"), TIMEOUT] == [e.receive(timeout=0), e.receive(timeout=0)]
    with pytest.raises(constellation.SubscriptionCancelled):
        stage.ask("s1", 1)
    stage.stop()


def test_participant_death_cancels_its_subscriptions_and_redispatches():
    """A dead recipient's subscriptions are cancelled and the buffer goes to the others."""
    me = e.self()
    stage = constellation.start(
        strategy=constellation.broadcast(),
        reporter=_forwarder(me, {("participant_down", "cancelled")}),
    )
    doomed = _sink()
    stage.subscribe("a1", "pa", recipient=doomed)
    stage.subscribe("a2", "pa", recipient=doomed)
    stage.subscribe("b", "pb")
    stage.ask("b", 2)
    stage.push([1, 2])
    assert TIMEOUT == e.receive(timeout=0)  # the barrier: a1 and a2 have no demand
    e.exit(doomed, "kill")
    assert "subscriptions=2" == _telemetry("participant_down", "cancelled").detail
    assert ("events", "b", (1, 2)) == e.receive(timeout=0)
    with pytest.raises(constellation.SubscriptionCancelled):
        stage.ask("a1", 1)
    stage.stop()


def test_a_dead_participants_id_is_free_again():
    """After its subscriptions go, the participant id may subscribe with a new recipient."""
    me = e.self()
    stage = constellation.start(reporter=_forwarder(me, {("participant_down", "cancelled")}))
    doomed = _sink()
    stage.subscribe("a1", "pa", recipient=doomed)
    e.exit(doomed, "kill")
    _telemetry("participant_down", "cancelled")
    stage.subscribe("a2", "pa")
    stage.push([1])
    stage.ask("a2", 1)
    assert ("events", "a2", (1,)) == e.receive(timeout=0)
    stage.stop()


def test_stop_cancels_every_subscriber_and_discards_the_buffer():
    """Each active subscriber gets cancelled; later calls raise StageUnavailable."""
    stage = constellation.start()
    stage.subscribe("s1", "p1")
    stage.subscribe("s2", "p1")
    stage.push([1, 2, 3])
    stage.stop()
    got = [e.receive(timeout=0), e.receive(timeout=0), e.receive(timeout=0)]
    assert [("cancelled", "s1"), ("cancelled", "s2"), TIMEOUT] == got
    with pytest.raises(constellation.StageUnavailable) as gone:
        stage.push([4])
    assert "normal" == gone.value.reason


def test_a_timed_out_call_may_still_complete():
    """StageTimeout means no reply in time: the push is applied once the stage runs again."""
    stage = constellation.start(call_timeout=0.05)
    stage.subscribe("s1", "p1")
    sys.suspend(stage.pid)
    with pytest.raises(constellation.StageTimeout):
        stage.push([1, 2])
    sys.resume(stage.pid)
    stage.ask("s1", 2)
    assert ("events", "s1", (1, 2)) == e.receive(timeout=0)
    stage.stop()


def test_the_stage_is_a_gen_server_sys_can_inspect():
    """sys.get_state answers the stage's state."""
    stage = constellation.start()
    stage.subscribe("s1", "p1")
    state = sys.get_state(stage.pid)
    assert {"s1": "p1"} == constellation.runtime.routes(state.rt)
    stage.stop()


def test_bad_settings_are_rejected():
    """A non-positive call timeout or buffer capacity raises at start."""
    with pytest.raises(constellation.InvalidCallTimeout):
        constellation.start(call_timeout=0)
    with pytest.raises(constellation.InvalidBufferCapacity):
        constellation.start(buffer_capacity=0)


@pytest.mark.parametrize("capacity", BAD_CAPACITIES)
def test_start_uses_the_core_buffer_capacity_rule(capacity):
    """start refuses exactly what core.check_buffer_capacity refuses, with the core's one error class."""
    assert constellation.InvalidBufferCapacity is core.InvalidBufferCapacity
    with pytest.raises(core.InvalidBufferCapacity) as info:
        constellation.start(buffer_capacity=capacity)
    assert core.InvalidBufferCapacity(capacity) == info.value


# --------------------------------------------------------------------------
# The consumer
# --------------------------------------------------------------------------


def _collect(seen, events):
    return seen + list(events)


def test_consumer_end_to_end():
    """A consumer folds what it asked for, reports it, and stops normally when stopped."""
    me = e.self()
    stage = constellation.start(reporter=_forwarder(me, {("consume", "reported")}))
    c = consumer.start(stage, "c1", "worker-1", [], _collect)
    stage.push([1, 2, 3, 4, 5])
    c.ask(3)
    assert [1, 2, 3] == c.state()
    assert f"consumer_pid={c.pid!r} subscription=c1 events=3" == _telemetry("consume", "reported").detail
    c.ask(2)
    assert [1, 2, 3, 4, 5] == c.state()
    c.stop()
    assert "normal" == e.exit_reason(c.pid, timeout=0)
    with pytest.raises(consumer.ConsumerUnavailable):
        c.state()
    stage.stop()


def test_consumer_stops_when_the_stage_stops():
    """A stage stop cancels the consumer's subscription and the consumer exits normally."""
    stage = constellation.start()
    c = consumer.start(stage, "c1", "worker-1", 0, lambda n, events: n + len(events))
    stage.stop()
    assert "normal" == e.exit_reason(c.pid, timeout=WAIT)


def test_a_crashing_consumer_is_cancelled_like_any_dead_participant():
    """on_events raising kills the consumer; the stage cancels its subscription."""
    me = e.self()
    stage = constellation.start(reporter=_forwarder(me, {("participant_down", "cancelled")}))

    def boom(state, events):
        raise ValueError("boom")

    c = consumer.start(stage, "c1", "worker-1", None, boom)
    stage.push([1])
    c.ask(1)
    assert "subscriptions=1" == _telemetry("participant_down", "cancelled").detail
    assert isinstance(e.exit_reason(c.pid, timeout=0), ValueError)
    with pytest.raises(constellation.SubscriptionCancelled):
        stage.ask("c1", 1)
    stage.stop()


def test_consumer_start_fails_with_the_stage_error():
    """A subscribe the stage rejects fails the start with that error."""
    stage = constellation.start()
    stage.subscribe("c1", "other")
    with pytest.raises(constellation.DuplicateSubscription) as err:
        consumer.start(stage, "c1", "worker-1", None, _collect)
    assert constellation.DuplicateSubscription("c1") == err.value
    stage.stop()


def test_the_readme_example_runs(capsys):
    """The README's constellation example prints what its comments say."""
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("## constellation") :]
    code = section[section.index("```python\n") + len("```python\n") : section.index("```\n", section.index("```python"))]
    exec(compile(code, "README.md", "exec"), {})
    assert "('events', 's1', (1, 2))\n33\n('cancelled', 's1')\n" == capsys.readouterr().out
