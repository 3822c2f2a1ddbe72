"""gen_server's hibernate_after and passivate_after: an idle server leaves memory and comes back."""

from __future__ import annotations

import pickle

import pytest

import ensemble as e
from ensemble import NOMATCH
from ensemble.decide import gen_server as cb
from ensemble import gen_server as gs


class Counter(gs.GenServer):
    """Adds each call's number to its state (module level: passivation pickles it)."""

    def init(self):
        return ("ok", 0)

    def handle_call(self, k, from_, n):
        return ("reply", n + k, n + k)


def wait_status(pid, wanted, limit=400):
    """Poll process_info until the status is ``wanted`` (bounded; each step waits on the mailbox)."""
    for _ in range(limit):
        if e.process_info(pid, "status") == wanted:
            return wanted
        e.receive(lambda m: NOMATCH, timeout=0.005)
    return e.process_info(pid, "status")


def test_passivate_after_idle_then_serves_with_its_state():
    """An idle server with passivate_after goes to disk and serves the next call with its state."""
    p = gs.start(Counter(), passivate_after=0.01)
    assert 5 == gs.call(p, 5)
    assert "passivated" == wait_status(p, "passivated")
    assert None is e.passivation_refused(p)
    assert 12 == gs.call(p, 7)


def test_hibernate_after_idle_then_serves_with_its_state():
    """An idle server with hibernate_after hibernates and serves the next call with its state."""
    p = gs.start(Counter(), hibernate_after=0.01)
    assert 1 == gs.call(p, 1)
    assert "hibernating" == wait_status(p, "hibernating")
    assert 3 == gs.call(p, 2)


class Locked(Counter):
    """A server whose state holds a lock: passivation must refuse it."""

    def init(self):
        import gevent.lock

        return ("ok", gevent.lock.Semaphore())

    def handle_call(self, k, from_, lock):
        return ("reply", k, lock)


def test_passivate_after_refused_stays_hibernated_in_memory():
    """A server whose state cannot be written stays hibernated in memory and still serves."""
    p = gs.start(Locked(), passivate_after=0.01)
    assert 1 == gs.call(p, 1)
    assert "hibernating" == wait_status(p, "hibernating")
    assert "Semaphore" in e.passivation_refused(p)
    assert 2 == gs.call(p, 2)


@pytest.mark.parametrize(
    "value", [cb.WAIT_FOREVER, cb.Wait(0.5), cb.HIBERNATE, cb.Continue(("x", 1)), cb.IGNORE]
)
def test_callback_answers_survive_pickling(value):
    """The callback module's answers pickle and come back equal (a passivated loop holds one)."""
    assert value == pickle.loads(pickle.dumps(value))
