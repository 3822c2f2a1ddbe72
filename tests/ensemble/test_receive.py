"""Selective receive: order, the save pointer, timeouts, matchers with Python's match."""

from __future__ import annotations

import time

import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT


def wanting(tag):
    """A matcher taking ``(tag, x)`` messages and answering ``x``."""

    def matcher(m):
        match m:
            case (t, x) if t == tag:
                return x
            case _:
                return NOMATCH

    return matcher


def test_no_matcher_takes_the_oldest():
    """Without a matcher, receive takes messages in the order they were sent."""
    me = e.self()
    for i in range(5):
        e.send(me, i)
    assert [0, 1, 2, 3, 4] == [e.receive(timeout=1) for _ in range(5)]


def test_oldest_matching_message_wins_and_others_stay_in_place():
    """The oldest message some clause takes wins; every other message keeps its place."""
    me = e.self()
    for m in [("a", 1), ("b", 2), ("a", 3), ("b", 4)]:
        e.send(me, m)
    assert 2 == e.receive(wanting("b"), timeout=1)
    assert [("a", 1), ("a", 3), ("b", 4)] == e.process_info(me, "messages")


def test_oldest_message_wins_over_clause_order():
    """A later clause matching an older message beats an earlier clause matching a newer one."""
    me = e.self()
    e.send(me, ("low", 1))
    e.send(me, ("high", 2))

    def matcher(m):
        match m:
            case ("high", x):
                return ("high", x)
            case ("low", x):
                return ("low", x)
            case _:
                return NOMATCH

    assert ("low", 1) == e.receive(matcher, timeout=1)


def test_matcher_answers_any_value_but_nomatch():
    """None, False and 0 are ordinary answers: they take the message."""
    me = e.self()
    e.send(me, "x")
    e.send(me, "y")
    assert None is e.receive(lambda m: None, timeout=1)
    assert False is e.receive(lambda m: False, timeout=1)
    assert TIMEOUT is e.receive(timeout=0)


def test_timeout_zero_polls_once():
    """timeout=0 looks at the mailbox once and answers TIMEOUT when nothing matches."""
    me = e.self()
    e.send(me, ("other", 1))
    assert TIMEOUT == e.receive(wanting("want"), timeout=0)
    assert 1 == e.receive(wanting("other"), timeout=0)


def test_a_poll_takes_the_first_match_and_leaves_the_rest_in_order():
    """timeout=0 (int or float) scans every message once, takes the oldest one the matcher
    takes, and leaves the others in order; with no matcher it takes the oldest."""
    me = e.self()
    for m in [("a", 1), ("b", 2), ("a", 3), ("b", 4)]:
        e.send(me, m)
    assert 2 == e.receive(wanting("b"), timeout=0)
    assert 4 == e.receive(wanting("b"), timeout=0.0)
    assert TIMEOUT is e.receive(wanting("b"), timeout=0)
    assert [("a", 1), ("a", 3)] == e.process_info(me, "messages")
    assert ("a", 1) == e.receive(timeout=0.0)
    assert ("a", 3) == e.receive(None, timeout=0)
    assert TIMEOUT is e.receive(None, timeout=0)
    assert TIMEOUT is e.receive(wanting("a"), timeout=-0.0)


def test_a_poll_checks_its_arguments():
    """A poll refuses what any receive refuses: a bool or negative timeout, a non-callable."""
    with pytest.raises(e.Badarg):
        e.receive(wanting("x"), timeout=False)
    with pytest.raises(e.Badarg):
        e.receive(timeout=-1)
    with pytest.raises(TypeError):
        e.receive("not callable", timeout=0)


def test_a_poll_of_a_doomed_process_raises_its_exit_signal():
    """An exit signal pending when a process polls lands at the poll, which takes nothing."""
    me = e.self()

    def body():
        e.send(e.self(), "kept")
        e.exit(e.self(), "doomed")  # dooms it; the signal lands at its next call into ensemble
        e.send(me, ("polled", e.receive(lambda m: m, timeout=0)))

    p, ref = e.spawn_monitor(body)
    down = e.receive(lambda m: m if type(m) is tuple and m[0] == "DOWN" and m[1] == ref else NOMATCH, timeout=5)
    assert down[4] == "doomed"
    assert TIMEOUT is e.receive(lambda m: m if m[0] == "polled" else NOMATCH, timeout=0)


def test_timeout_returns_timeout_and_keeps_messages():
    """On timeout receive answers TIMEOUT and the unmatched messages stay."""
    me = e.self()
    e.send(me, "unwanted")
    assert TIMEOUT is e.receive(wanting("x"), timeout=0.01)
    assert ["unwanted"] == e.process_info(me, "messages")


def test_deadline_is_fixed_when_receive_starts():
    """Non-matching messages arriving during the wait do not extend the deadline."""

    def chatter(dest, n):
        for i in range(n):
            e.send(dest, ("noise", i))
            e.receive(timeout=0.01)

    e.spawn(chatter, e.self(), 50)
    started = time.monotonic()
    assert TIMEOUT is e.receive(wanting("never"), timeout=0.2)
    assert time.monotonic() - started < 0.45


def test_rejected_messages_are_not_scanned_again():
    """Erlang's save pointer: a message rejected once is not offered again to the same receive."""
    seen = []

    def matcher(m):
        seen.append(m)
        return m if m == "wanted" else NOMATCH

    def sender(dest):
        for m in ["a", "b", "wanted"]:
            e.send(dest, m)
            e.receive(timeout=0.005)

    e.spawn(sender, e.self())
    assert "wanted" == e.receive(matcher, timeout=2)
    assert ["a", "b", "wanted"] == seen


def test_receive_wakes_on_a_matching_message_from_another_process():
    """A receive waiting for a message is woken by a send from another process."""
    me = e.self()
    e.spawn(lambda: e.send(me, ("reply", 42)))
    assert 42 == e.receive(wanting("reply"), timeout=2)


def test_receive_for_a_ref_with_pinned_value():
    """A request/reply idiom: match the reply carrying one ref, leave the others."""
    me = e.self()
    ref, other = e.make_ref(), e.make_ref()
    e.send(me, ("reply", other, "not mine"))
    e.send(me, ("reply", ref, "mine"))

    def matcher(m):
        match m:
            case ("reply", r, v) if r == ref:
                return v
            case _:
                return NOMATCH

    assert "mine" == e.receive(matcher, timeout=1)
    assert [("reply", other, "not mine")] == e.process_info(me, "messages")


def test_matcher_exception_propagates_and_leaves_the_mailbox():
    """A matcher that raises makes receive raise; the message stays in the mailbox."""
    me = e.self()
    e.send(me, "boom")

    def matcher(m):
        raise ValueError(m)

    with pytest.raises(ValueError):
        e.receive(matcher, timeout=1)
    assert ["boom"] == e.process_info(me, "messages")


@pytest.mark.parametrize("bad", ["not callable", 42, ("DOWN",)])
def test_a_matcher_that_is_not_callable_is_a_type_error_before_waiting(bad):
    """receive checks its matcher first: TypeError at once, even with an empty mailbox and a long timeout."""
    me = e.self()
    e.spawn(lambda: e.send(me, "later"))
    with pytest.raises(TypeError):
        e.receive(bad, timeout=0)
    with pytest.raises(TypeError):
        e.receive(bad, timeout=5)
    assert "later" == e.receive(timeout=5)


@pytest.mark.parametrize("bad", [-1, -0.5, "1", True, [1]])
def test_bad_timeout_is_badarg(bad):
    """A negative or non-number timeout raises Badarg."""
    with pytest.raises(e.Badarg):
        e.receive(timeout=bad)


def test_selective_receive_inside_a_process():
    """A spawned process receives selectively and replies; join returns its value."""

    def worker():
        m = e.receive(wanting("job"), timeout=2)
        return m * 2

    p = e.spawn(worker)
    e.send(p, ("noise", 0))
    e.send(p, ("job", 21))
    assert 42 == e.join(p, timeout=2)


def test_many_messages_in_order_between_processes():
    """Messages between two processes arrive in send order."""
    n = 2000

    def sink(parent):
        got = [e.receive(timeout=5) for _ in range(n)]
        e.send(parent, got)

    s = e.spawn(sink, e.self())
    for i in range(n):
        e.send(s, i)
    assert list(range(n)) == e.receive(timeout=5)


# -- timeouts: one hub timer per carrier over a heap of deadlines (ensemble.decide.deadlines) --


def test_receive_timeouts_fire_in_deadline_order_whatever_the_order_they_were_set():
    """Processes parked with timeouts 0.09, 0.03, 0.06 time out in deadline order."""
    me = e.self()

    def waiter(tag, timeout):
        assert TIMEOUT is e.receive(timeout=timeout)
        e.send(me, tag)

    for tag, timeout in [("c", 0.09), ("a", 0.03), ("b", 0.06)]:
        e.spawn(waiter, tag, timeout)
    assert ["a", "b", "c"] == [e.receive(timeout=5) for _ in range(3)]


def test_a_timeout_still_fires_behind_thousands_of_waits_that_ended_otherwise():
    """Thousands of receives with a long timeout end by a message (their entries go stale and are
    compacted away); one with a short timeout among them still times out, and a message still
    ends a long one."""
    me = e.self()

    def echo():
        while True:
            m = e.receive()
            if m is None:
                return
            e.send(m, "pong")

    pong = e.spawn(echo)

    def short():
        e.send(me, ("short", e.receive(timeout=0.05)))

    for _ in range(3000):
        e.send(pong, me)
        assert "pong" == e.receive(timeout=30)
    e.spawn(short)
    for _ in range(3000):
        e.send(pong, me)
        assert "pong" == e.receive(lambda m: m if m == "pong" else e.NOMATCH, timeout=30)
    assert ("short", TIMEOUT) == e.receive(lambda m: m if m[0] == "short" else e.NOMATCH, timeout=5)
    e.send(pong, None)


def test_a_process_gets_a_mailbox_of_its_own_with_its_first_message():
    """Until its first message a process reads the one shared empty mailbox; mail then has a deque."""
    from ensemble import _process

    def idle():
        return e.receive()

    p, q = e.spawn(idle), e.spawn(idle)
    e.join(e.spawn(lambda: None))  # processes start in spawn order: p and q are parked
    assert p.mailbox is _process.NO_MAIL and q.mailbox is _process.NO_MAIL
    assert e.process_info(p, "message_queue_len") == 0
    with pytest.raises(_process.NoMailYet):
        _process.NO_MAIL.append("lost")
    assert len(_process.NO_MAIL) == 0
    e.send(p, "first")
    assert e.join(p, timeout=10) == "first"
    assert q.mailbox is _process.NO_MAIL
    e.exit(q, "kill")


def test_first_messages_from_many_threads_all_arrive():
    """Senders on several OS threads racing to give a process its mailbox lose no message."""
    from ensemble._threads import allocate_lock, start_new_thread

    senders, each = 4, 200
    p = e.spawn(lambda: sorted(e.receive() for _ in range(senders * each)))
    go = allocate_lock()
    go.acquire()
    done = [allocate_lock() for _ in range(senders)]

    def send_from_thread(k):
        try:
            with go:
                pass
            for i in range(each):
                e.send(p, k * each + i)
        finally:
            done[k].release()

    for k in range(senders):
        done[k].acquire()
        start_new_thread(send_from_thread, (k,))
    go.release()
    assert e.join(p, timeout=30) == list(range(senders * each))
    for lock in done:
        lock.acquire()


def test_a_process_keeps_its_rare_fields_in_a_record_of_its_own():
    """A process reads defaults from one shared record; its first write gives it its own."""
    from ensemble import _process

    def idle():
        return e.receive()

    p, q = e.spawn(idle), e.spawn(idle)
    assert p._rare is _process._NO_RARE and q._rare is _process._NO_RARE
    assert (p.name, p.trap, p.dispatcher, p.value, p.link_exits) == (None, False, "default", None, None)
    e.register("rare_fields_p", p)
    assert p.name == "rare_fields_p" and p._rare is not _process._NO_RARE
    assert q.name is None and q._rare is _process._NO_RARE
    assert _process._NO_RARE.name is None
    e.send(p, ("v",))
    assert e.join(p, timeout=10) == ("v",)
    assert p.value == ("v",) and e.whereis("rare_fields_p") is None
    e.exit(q, "kill")
