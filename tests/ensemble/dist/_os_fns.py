"""Functions the dispatcher-of-OS-processes tests spawn on carrier nodes (module-level, so
importable by name in another OS process)."""

import os
from dataclasses import dataclass

import ensemble as e
from ensemble.dist import wire_types


def report_pid(parent, tag):
    """Tell ``parent`` which OS process and node this process runs in."""
    e.send(parent, (tag, os.getpid(), e.node(), e.self()))


def crash(message):
    raise ValueError(message)


def wait_for_message(parent):
    """Say so to ``parent``, then wait for one message and send it back."""
    e.send(parent, ("waiting", e.self(), os.getpid()))
    m = e.receive()
    e.send(parent, ("got", m))


def options(parent):
    """Report this process's trap_exit flag and state cell to ``parent``."""
    flag = e.process_info(e.self(), "trap_exit")
    try:
        state = e.state(e.self())
    except e.Badarg:
        state = "no state cell"
    e.send(parent, ("options", flag, state))


def crunch(parent, values, rounds):
    """CPU-bound work: the checksum of ``values`` after ``rounds`` rounds each."""
    total = 0
    for v in values:
        acc = v
        for r in range(rounds, 0, -1):
            acc = (acc * 48_271 + v + r) % 2_147_483_647
        total = (total + acc) % 2_147_483_647
    e.send(parent, ("crunched", total))


class Unimportable:
    """A callable object: it has no name another OS process could find it by."""

    def __call__(self):
        return None


@dataclass(frozen=True)
class Point:
    """A value registered to cross the wire as itself."""

    x: int
    y: int


wire_types.register(Point)


def shift(dx, point):
    return Point(point.x + dx, point.y)


def apply(parent, fn, value):
    """Send ``fn(value)`` back to ``parent`` (``fn`` and ``value`` crossed the wire)."""
    e.send(parent, ("applied", fn(value)))


def no_state(slot):
    return None


def sum_batch(report_to, state, events):
    """A worker pool's batch handler: report (os pid, how many, their sum) to ``report_to``."""
    e.send(report_to, ("batch", os.getpid(), len(events), sum(events)))
    return state
