"""Links: bidirectional, idempotent, noproc, unlink, and Erlang's exit settlement order."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import NOMATCH

from .test_exit_signals import down_of


def wait_forever():
    e.receive()


def test_link_is_bidirectional():
    """A link shows on both sides and a crash on either end kills the other."""
    a = e.spawn(wait_forever)
    ra = e.monitor(a)

    def linker():
        e.link(a)
        e.exit("crashed")

    b = e.spawn(linker)
    assert "crashed" == down_of(ra)
    assert "crashed" == e.exit_reason(b, timeout=2)


def test_link_is_idempotent():
    """Linking twice makes one link; one unlink removes it."""

    def body(other):
        e.link(other)
        e.link(other)
        links = e.process_info(e.self(), "links")
        e.unlink(other)
        return links, e.process_info(e.self(), "links")

    other = e.spawn(wait_forever)
    links, after = e.join(e.spawn(body, other), timeout=2)
    assert [other] == links
    assert [] == after
    assert [] == e.process_info(other, "links")


def test_link_to_self_is_a_no_op():
    """link(self()) answers True and adds nothing."""
    assert True is e.link(e.self())
    assert [] == e.process_info(e.self(), "links")


def test_link_to_dead_process_kills_with_noproc():
    """Linking to a dead process makes a non-trapping caller die with "noproc"."""
    dead = e.spawn(lambda: None)
    e.join(dead, timeout=2)
    p, ref = e.spawn_monitor(lambda: e.link(dead))
    assert "noproc" == down_of(ref)


def test_link_to_dead_process_while_trapping_gives_exit_message():
    """A trapping caller linking to a dead process gets ("EXIT", pid, "noproc")."""
    dead = e.spawn(lambda: None)
    e.join(dead, timeout=2)

    def body():
        e.link(dead)
        return e.receive(timeout=2)

    assert ("EXIT", dead, "noproc") == e.join(e.spawn(body, trap_exit=True), timeout=2)


def test_normal_exit_is_ignored_by_non_trapping_link():
    """A linked process exiting "normal" leaves a non-trapping partner alive."""
    me = e.self()

    def partner():
        e.receive(lambda m: m if m == "go" else NOMATCH)
        e.send(me, "partner alive")

    p = e.spawn(partner)
    q = e.spawn(lambda: e.link(p))
    assert "normal" == e.exit_reason(q, timeout=2)
    e.send(p, "go")
    assert "partner alive" == e.receive(timeout=2)


def test_trapping_link_gets_normal_exit_message():
    """A trapping linked process gets ("EXIT", pid, "normal") when its partner ends normally."""

    def trapper():
        child = e.spawn_link(lambda: "done")
        return e.receive(timeout=2), child

    msg, child = e.join(e.spawn(trapper, trap_exit=True), timeout=5)
    assert ("EXIT", child, "normal") == msg


def test_link_given_at_spawn_is_in_place_before_the_function_runs():
    """spawn_link's link exists before the child's first step: a child that crashes at once still kills the parent."""

    def parent():
        e.spawn_link(lambda: e.exit("child died"))
        e.receive()

    p, ref = e.spawn_monitor(parent)
    assert "child died" == down_of(ref)


def test_unlink_drops_a_link_signal_not_yet_acted_on():
    """After unlink returns the former link has no effect: the partner's crash does not reach the caller."""
    me = e.self()

    def caller():
        partner = e.spawn_link(lambda: e.receive() and e.exit("crash"))
        e.unlink(partner)
        e.send(partner, "go")
        e.receive(timeout=0.2)
        e.send(me, "caller alive")

    e.spawn(caller)
    assert "caller alive" == e.receive(timeout=5)


def test_unlink_answers_true_also_without_a_link():
    """unlink of a process never linked answers True."""
    p = e.spawn(wait_forever)
    assert True is e.unlink(p)


def test_link_needs_a_pid():
    """link and unlink with a non-pid raise Badarg."""
    with pytest.raises(e.Badarg):
        e.link("name")
    with pytest.raises(e.Badarg):
        e.unlink(3)


def test_settlement_order_name_released_before_links_and_monitors_hear():
    """When the EXIT and the DOWN arrive, the dead process's name is already free and it is gone from the table."""
    me = e.self()

    def watcher(target):
        e.link(target)
        ref = e.monitor(target)
        msgs = [e.receive(timeout=5), e.receive(timeout=5)]
        e.send(me, (msgs, e.whereis("doomed"), target in e.processes(), ref))

    target = e.spawn(wait_forever, name="doomed")
    w = e.spawn(watcher, target, trap_exit=True)
    while e.process_info(target, "monitored_by") != [w]:
        e.receive(timeout=0.001)
    e.exit(target, "bye")
    msgs, name_holder, in_table, ref = e.receive(timeout=5)
    assert [("EXIT", target, "bye"), ("DOWN", ref, "process", target, "bye")] == msgs
    assert None is name_holder
    assert False is in_table


def test_kill_reaches_links_as_killed():
    """A process killed with "kill" makes its links exit with "killed"."""
    me = e.self()

    def trapper():
        victim = e.spawn_link(wait_forever)
        e.send(me, victim)
        return e.receive(timeout=5)

    t = e.spawn(trapper, trap_exit=True)
    victim = e.receive(timeout=5)
    e.exit(victim, "kill")
    assert ("EXIT", victim, "killed") == e.join(t, timeout=5)


def test_exit1_kill_reaches_links_as_kill_and_is_trappable():
    """exit("kill") from the process itself reaches links as an ordinary "kill"."""

    def trapper():
        child = e.spawn_link(lambda: e.exit("kill"))
        return e.receive(timeout=5), child

    msg, child = e.join(e.spawn(trapper, trap_exit=True), timeout=5)
    assert ("EXIT", child, "kill") == msg

    def non_trapper():
        e.spawn_link(lambda: e.exit("kill"))
        e.receive()

    p, ref = e.spawn_monitor(non_trapper)
    assert "kill" == down_of(ref)


def test_crash_propagates_along_a_chain_of_links():
    """A crash travels along a chain of links to every non-trapping process."""
    me = e.self()

    def node(depth):
        if depth:
            e.spawn_link(node, depth - 1)
        else:
            e.send(me, "leaf ready")
        e.receive()

    head, ref = e.spawn_monitor(node, 20)
    assert "leaf ready" == e.receive(timeout=5)
    count = len(e.processes())
    leafish = [p for p in e.processes() if p is not head and p.id > head.id]
    e.exit(leafish[-1], "chain")
    assert "chain" == down_of(ref)
    assert count - 21 == len(e.processes())


def exit_from(pid):
    """A matcher for ("EXIT", pid, reason): answers the reason."""
    return lambda m: m[2] if type(m) is tuple and len(m) == 3 and m[0] == "EXIT" and m[1] is pid else NOMATCH


def test_unlink_removes_the_exit_message_the_link_produced():
    """A trapping caller's ("EXIT", pid, r) from the link, not yet received, is gone once unlink returns."""
    e.trap_exit(True)
    p, ref = e.spawn_monitor(lambda: e.receive() and e.exit("boom"))
    e.link(p)
    e.send(p, "go")
    assert "boom" == down_of(ref)  # links hear before monitors: the EXIT is in the mailbox
    assert [("EXIT", p, "boom")] == [m for m in e.process_info(e.self(), "messages") if m[0] == "EXIT"]
    assert True is e.unlink(p)
    assert e.TIMEOUT is e.receive(exit_from(p), timeout=0)


def test_unlink_keeps_an_exit_message_from_exit2():
    """Only the link's own EXIT is removed: one the partner sent with exit/2 stays."""
    e.trap_exit(True)
    me = e.self()
    p, ref = e.spawn_monitor(lambda: (e.exit(me, "explicit"), e.receive()) and e.exit("boom"))
    e.link(p)
    e.send(p, "go")
    assert "boom" == down_of(ref)
    e.unlink(p)
    assert "explicit" == e.receive(exit_from(p), timeout=0)
    assert e.TIMEOUT is e.receive(exit_from(p), timeout=0)


@pytest.mark.parametrize("trapping", [False, True])
@pytest.mark.parametrize("reason", ["normal", "boom"])
def test_a_link_is_gone_from_both_sides_once_an_end_exits(trapping, reason):
    """Whatever the reason, "normal" included, process_info(links) never lists a dead process."""
    me = e.self()

    def survivor():
        e.trap_exit(trapping)
        e.link(e.receive())
        e.send(me, ("linked",))
        while True:
            if e.receive() == "links?":
                e.send(me, ("links", e.process_info(e.self(), "links")))

    d, ref = e.spawn_monitor(lambda: e.receive() and e.exit(reason))
    s = e.spawn(survivor)
    e.send(s, d)
    assert ("linked",) == e.receive(timeout=5)
    assert [s] == e.process_info(d, "links")
    e.send(d, "go")
    assert reason == down_of(ref)
    if reason != "normal" and not trapping:
        assert reason == e.exit_reason(s, timeout=5)  # the survivor died of it too
        return
    e.send(s, "links?")
    assert ("links", []) == e.receive(timeout=5)


def test_the_link_exit_messages_a_trapping_process_received_are_forgotten():
    """unlink's memory of link EXIT messages stays bounded for a trapper that never unlinks (a supervisor)."""
    e.trap_exit(True)
    me = e.self()
    for _ in range(300):
        p = e.spawn_link(lambda: None)
        assert "normal" == e.receive(exit_from(p), timeout=5)
    assert len(me.link_exits or ()) <= 64
