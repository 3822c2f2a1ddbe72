"""A stateful consumer process: subscribes itself to a stage and folds the events it gets.

::

    c = consumer.start(stage, "s1", "worker-1", [], lambda seen, events: seen + list(events))
    c.ask(3)          # the stage delivers before it replies...
    c.state()         # ...so the events are already folded in: [1, 2, 3]
    c.stop()          # cancels the subscription; the consumer stops normally

The consumer is an ensemble gen_server that subscribes in its ``init`` with
itself as the recipient, so the stage monitors it: if ``on_events`` raises,
the consumer dies and the stage cancels its subscription.  For each
``("events", id, events)`` it runs ``state = on_events(state, events)`` and then
reports the count to the stage (telemetry only).  On ``("cancelled", id)`` it
stops normally.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable

import ensemble as e
from ensemble import CallError, StartError, gen_server

from ._stage import Stage

__all__ = ["Consumer", "ConsumerTimeout", "ConsumerUnavailable", "start", "TIMEOUT"]

TIMEOUT = 5.0  # init, state and the stop wait (the original's fixed 5000 ms)


class ConsumerTimeout(Exception):
    """The consumer did not answer within its fixed timeout."""


class ConsumerUnavailable(Exception):
    """The consumer process is gone; ``reason`` is its exit reason."""

    def __init__(self, reason: Any) -> None:
        super().__init__(f"the consumer is unavailable: {reason!r}")
        self.reason = reason


class Consumer:
    """A handle on a consumer process: ``pid``, its ``stage`` and ``subscription_id``."""

    __slots__ = ("pid", "stage", "subscription_id")

    def __init__(self, pid: e.Pid, stage: Stage, subscription_id: Hashable) -> None:
        self.pid = pid
        self.stage = stage
        self.subscription_id = subscription_id

    def __repr__(self) -> str:
        return f"Consumer({self.pid!r}, {self.subscription_id!r})"

    def ask(self, n: int) -> None:
        """Ask the stage for ``n`` more events for this consumer (stage errors raise as themselves).

        A rejected ask does not stop the consumer; a timed-out one may still complete.
        """
        self.stage.ask(self.subscription_id, n)

    def state(self) -> Any:
        """The consumer's current state; raises :class:`ConsumerTimeout` or :class:`ConsumerUnavailable`."""
        try:
            return gen_server.call(self.pid, "state", TIMEOUT)
        except CallError as err:
            if err.reason == "timeout":
                raise ConsumerTimeout("the consumer did not answer in time") from None
            raise ConsumerUnavailable(_reason(self.pid, err.reason)) from None

    def stop(self) -> None:
        """Cancel the subscription and wait (up to 5 s) for the consumer to exit.

        Stage errors from the cancel raise as themselves; a consumer already
        gone raises :class:`ConsumerUnavailable`, one that does not exit in
        time :class:`ConsumerTimeout`.
        """
        if not e.is_alive(self.pid):
            raise ConsumerUnavailable(_reason(self.pid, "noproc"))
        self.stage.cancel(self.subscription_id)
        if e.exit_reason(self.pid, timeout=TIMEOUT) is e.TIMEOUT:
            raise ConsumerTimeout("the consumer did not stop in time")


def start(
    stage: Stage,
    subscription_id: Hashable,
    participant_id: Hashable,
    initial_state: Any,
    on_events: Callable[[Any, tuple], Any],
    partition: int = 0,
) -> Consumer:
    """Start a consumer subscribed to ``stage`` as ``subscription_id`` (no demand yet).

    A failed subscribe fails the start: the stage's error (e.g.
    ``DuplicateSubscription``, ``ParticipantAlreadyRegistered``,
    ``StageUnavailable``) is raised here.
    """
    server = _ConsumerServer(stage, subscription_id, participant_id, partition, initial_state, on_events)
    try:
        pid = gen_server.start(server, timeout=TIMEOUT)
    except StartError as err:
        reason = err.reason
        if type(reason) is tuple and len(reason) == 2 and reason[0] == "could not subscribe consumer":
            raise reason[1] from None
        raise
    return Consumer(pid, stage, subscription_id)


def _reason(pid: e.Pid, fallback: Any) -> Any:
    got = e.exit_reason(pid, timeout=0)
    return fallback if got is e.TIMEOUT else got


class _ConsumerServer(gen_server.GenServer):
    def __init__(
        self,
        stage: Stage,
        id_: Hashable,
        participant: Hashable,
        partition: int,
        state: Any,
        on_events: Callable[[Any, tuple], Any],
    ) -> None:
        self.stage = stage
        self.id = id_
        self.participant = participant
        self.partition = partition
        self.initial = state
        self.on_events = on_events

    def init(self) -> Any:
        try:
            self.stage.subscribe(self.id, self.participant, e.self(), self.partition)
        except Exception as err:  # noqa: BLE001 - any failure to subscribe fails the start
            return ("stop", ("could not subscribe consumer", err))
        state, self.initial = self.initial, None
        return ("ok", state)

    def handle_call(self, request: Any, from_: Any, state: Any) -> Any:
        if request == "state":
            return ("reply", state, state)
        return super().handle_call(request, from_, state)

    def handle_info(self, msg: Any, state: Any) -> Any:
        if type(msg) is tuple and len(msg) >= 2 and msg[1] == self.id:
            if msg[0] == "events" and len(msg) == 3:
                state = self.on_events(state, msg[2])
                self.stage.report_consumed(self.id, len(msg[2]))
            elif msg[0] == "cancelled" and len(msg) == 2:
                return ("stop", "normal", state)
        return ("noreply", state)
