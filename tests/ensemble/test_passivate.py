"""Passivation: hibernate to disk, read back on the next message or signal, refused when unsafe."""

from __future__ import annotations

import gc
import os
import socket
import stat
import time
import weakref

import gevent.lock
import gevent.queue
import greenlet
import pytest
from gevent import monkey

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, _passivate

from .test_exit_signals import down_of

# -- module-level functions: what passivate writes must be picklable -----------------


def go_passive(state, fn, *args):
    """Set the state cell, then passivate into ``fn(*args)``."""
    e.set_state(state)
    e.passivate(fn, *args)


def report(to, *rest):
    """Woken: send ``to`` all the args, the state cell and the message that woke it."""
    e.send(to, ("woke", e.self(), (to, *rest), e.state(), e.receive(timeout=2)))


def passive_counter(to):
    """Add each number to the state and passivate again; "get" reports the total."""
    msg = e.receive(timeout=2)
    if msg == "get":
        e.send(to, ("total", e.state()))
    else:
        e.set_state(e.state() + msg)
    e.passivate(passive_counter, to)


def mail_then_passivate(to):
    """Mail itself first, then passivate: the waiting message wakes it at once."""
    e.send(e.self(), "already here")
    e.passivate(report, to)


def call_passivate_with(to, fn):
    """Report what passivate(fn) raises."""
    try:
        e.passivate(fn)
    except e.Badarg as exc:
        e.send(to, ("badarg", str(exc)))


def identity_then_passivate(to, watched):
    """Link to ``to``, monitor ``watched``, register, then passivate."""
    e.link(to)
    e.monitor(watched)
    e.register("passive_one", e.self())
    e.passivate(report, to)


def tripwire_fired(to):
    """Unpickling a Tripwire calls this: it tells ``to``."""
    e.send(to, "unpickled")
    return "tripwire"


class Tripwire:
    """State whose unpickling sends a message: proof of whether an image was unpickled."""

    def __init__(self, to):
        self.to = to

    def __reduce__(self):
        return (tripwire_fired, (self.to,))


UNPICKLABLE_FN = lambda to: e.send(to, ("woke", e.receive(timeout=2)))  # noqa: E731


# -- helpers ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def image_dir(tmp_path):
    """Write images to a directory of this test's own."""
    d = tmp_path / "images"
    _passivate.set_directory(d)
    yield d
    _passivate.set_directory(None)


def wait_status(p, wanted, timeout=5):
    """Poll process_info until ``p``'s status is one of ``wanted``; answer it."""
    deadline = time.monotonic() + timeout
    while (status := e.process_info(p, "status")) not in wanted:
        assert time.monotonic() < deadline, f"status stayed {status!r}"
        e.receive(lambda m: NOMATCH, timeout=0.001)
    return status


def images(d):
    """The image files in ``d``."""
    return sorted(f.name for f in d.iterdir())


def woke(timeout=2):
    """The next ("woke", ...) report."""
    return e.receive(lambda m: m if type(m) is tuple and m[0] == "woke" else NOMATCH, timeout=timeout)


# -- passivate and wake -----------------------------------------------------------------


def test_wake_runs_fn_with_its_args_and_the_state_cell():
    """A message to a passivated process runs fn(*args) with the state cell restored."""
    me = e.self()
    p = e.spawn(go_passive, {"n": [1, 2]}, report, me, 1, "two")
    assert "passivated" == wait_status(p, {"passivated", "hibernating"})
    assert None is e.passivation_refused(p)
    e.send(p, "hello")
    assert ("woke", p, (me, 1, "two"), {"n": [1, 2]}, "hello") == woke()


def test_image_exists_while_passivated_and_is_gone_after_the_wake(image_dir):
    """The image file is there while the process is passivated and deleted when it wakes."""
    me = e.self()
    p = e.spawn(go_passive, "s", report, me)
    wait_status(p, {"passivated"})
    [name] = images(image_dir)
    assert name.startswith(f"ensemble-{p.id}-") and name.endswith(".img")
    e.send(p, "wake")
    assert "wake" == woke()[4]
    assert [] == images(image_dir)


def test_memory_holds_no_fn_args_or_state_while_passivated():
    """While passivated, fn, args and the state cell are not in memory."""
    me = e.self()
    p = e.spawn(go_passive, "big state", report, me, "arg")
    wait_status(p, {"passivated"})
    assert (None, None, None) == (p.fn, p.args, p.state)
    e.send(p, "wake")
    assert (me, "arg") == woke()[2]


def test_state_survives_repeated_round_trips():
    """set_state before passivate, state after the wake: a counter on disk between messages."""
    me = e.self()
    p = e.spawn(go_passive, 0, passive_counter, me)
    for n in (1, 2, 39):
        wait_status(p, {"passivated"})
        e.send(p, n)
    wait_status(p, {"passivated"})
    e.send(p, "get")
    assert ("total", 42) == e.receive(timeout=2)


def test_state_of_a_passivated_process_is_read_from_its_image(image_dir):
    """state(pid) of a passivated process answers its state; the image stays."""
    p = e.spawn(go_passive, {"k": "v"}, report, e.self())
    wait_status(p, {"passivated"})
    assert {"k": "v"} == e.state(p)
    assert 1 == len(images(image_dir))
    assert "passivated" == e.process_info(p, "status")


def test_pids_come_back_as_the_same_objects():
    """Pids in args and state come back as the same Pid objects, live or dead."""
    me = e.self()
    live = e.spawn(e.receive)
    dead = e.spawn(lambda: None)
    assert "normal" == e.exit_reason(dead, timeout=2)
    p = e.spawn(go_passive, {"live": live, "dead": dead}, report, me, live, dead)
    wait_status(p, {"passivated"})
    e.send(p, "wake")
    _, _, args, state, _ = woke()
    assert (me, live, dead) == args
    assert args[0] is me and args[1] is live and args[2] is dead
    assert state["live"] is live and state["dead"] is dead


def test_a_pid_whose_handle_is_gone_comes_back_dead_with_noproc():
    """A pid of an exited process nobody holds any more comes back as a dead handle ("noproc")."""
    me = e.self()
    gone = e.spawn(lambda: None)
    assert "normal" == e.exit_reason(gone, timeout=2)
    gone_id = gone.id
    p = e.spawn(go_passive, [gone], report, me)
    wait_status(p, {"passivated"})
    handle = weakref.ref(gone)
    del gone
    gc.collect()
    assert None is handle()
    e.send(p, "wake")
    [back] = woke()[3]
    assert (f"<0.{gone_id}.0>", "noproc", False) == (repr(back), e.exit_reason(back, timeout=0), e.is_alive(back))


def test_identity_is_kept_while_on_disk():
    """Name, links, monitors, trap flag and mailbox stay in memory while passivated."""
    me = e.self()
    e.trap_exit(True)
    watched = e.spawn(e.receive)
    p = e.spawn(identity_then_passivate, me, watched, trap_exit=True)
    wait_status(p, {"passivated"})
    info = e.process_info(p)
    assert (p, [me], [("process", watched)], True) == (
        e.whereis("passive_one"),
        info["links"],
        info["monitors"],
        info["trap_exit"],
    )
    e.exit(watched, "bye")
    _, who, _, _, msg = woke()
    assert (p, "DOWN", watched, "bye") == (who, msg[0], msg[3], msg[4])  # the DOWN woke it


def test_mail_already_waiting_wakes_at_once_without_the_disk(image_dir):
    """A message already waiting when passivate is called wakes the process at once; nothing is written."""
    me = e.self()
    p = e.spawn(mail_then_passivate, me)
    assert ("woke", p, (me,), None, "already here") == woke()
    assert [] == images(image_dir)


def test_a_trapped_exit_signal_wakes_it():
    """A trapping passivated process wakes with ("EXIT", from, reason) as its message."""
    me = e.self()
    p = e.spawn(go_passive, None, report, me, trap_exit=True)
    wait_status(p, {"passivated"})
    e.exit(p, "poke")
    assert ("EXIT", me, "poke") == woke()[4]


def test_kill_while_passivated_ends_it_and_deletes_the_image(image_dir):
    """A kill to a passivated process ends it with "killed" and deletes its image."""
    p, ref = e.spawn_monitor(go_passive, None, report, e.self())
    wait_status(p, {"passivated"})
    assert 1 == len(images(image_dir))
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert [] == images(image_dir)


def test_kill_right_after_the_waking_message_deletes_the_image_unread(image_dir):
    """A process woken and killed before its greenlet ran deletes its image and never runs fn."""
    me = e.self()
    p, ref = e.spawn_monitor(go_passive, Tripwire(me), report, me)
    wait_status(p, {"passivated"})
    e.send(p, "wake")
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert [] == images(image_dir)
    assert TIMEOUT == e.receive(lambda m: m if m == "unpickled" or m[0] == "woke" else NOMATCH, timeout=0)


# -- refusal ----------------------------------------------------------------------------


def _gevent_lock(_tmp):
    return gevent.lock.Semaphore(), "Semaphore"


def _thread_lock(_tmp):
    return monkey.get_original("_thread", "allocate_lock")(), "lock"


def _gevent_queue(_tmp):
    return gevent.queue.Queue(), "Queue"


def _socket(_tmp):
    return socket.socket(), "socket"


def _greenlet(_tmp):
    return greenlet.greenlet(lambda: None), "greenlet"


def _open_file(tmp):
    return open(tmp / "f.txt", "w"), "TextIOWrapper"


@pytest.mark.parametrize(
    "make", [_gevent_lock, _thread_lock, _gevent_queue, _socket, _greenlet, _open_file]
)
def test_unsafe_state_refuses_and_hibernates_in_memory(make, tmp_path, image_dir):
    """State holding a lock, queue, socket, greenlet or open file stays in memory, and says why."""
    obj, type_name = make(tmp_path)
    try:
        me = e.self()
        p = e.spawn(go_passive, {"unsafe": obj}, report, me, "arg")
        assert "hibernating" == wait_status(p, {"passivated", "hibernating"})
        why = e.passivation_refused(p)
        assert "cannot passivate a shared reference" in why and type_name in why, why
        assert [] == images(image_dir)
        e.send(p, "still works")
        _, _, args, state, msg = woke()
        assert ((me, "arg"), "still works") == (args, msg)
        assert state["unsafe"] is obj  # hibernated in memory: the very object
    finally:
        close = getattr(obj, "close", None)
        if close is not None:
            close()


def test_a_lambda_as_fn_refuses_with_pickles_message(image_dir):
    """fn that pickle cannot write (a lambda) refuses with pickle's message; the process still works."""
    me = e.self()
    p = e.spawn(go_passive, None, UNPICKLABLE_FN, me)
    assert "hibernating" == wait_status(p, {"passivated", "hibernating"})
    assert "<lambda>" in e.passivation_refused(p)
    assert [] == images(image_dir)
    e.send(p, "still works")
    assert ("woke", "still works") == woke()


def test_passivation_refused_is_none_for_a_dead_pid():
    """passivation_refused answers None once the process has exited."""
    me = e.self()
    p, ref = e.spawn_monitor(go_passive, gevent.lock.Semaphore(), report, me)
    wait_status(p, {"hibernating"})
    assert e.passivation_refused(p) is not None
    e.exit(p, "kill")
    assert "killed" == down_of(ref)
    assert None is e.passivation_refused(p)


# -- the image is this run's own ------------------------------------------------------------


def _flip_a_byte(path, monkeypatch):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _other_runs_key(path, monkeypatch):
    monkeypatch.setattr(_passivate, "_KEY", os.urandom(32))


def _swap_for_another_process_image(path, monkeypatch):
    """The image of another process of this run, under this one's name."""
    other = sorted(q for q in path.parent.iterdir() if q != path)[0]
    path.write_bytes(other.read_bytes())


@pytest.mark.parametrize("spoil", [_flip_a_byte, _other_runs_key, _swap_for_another_process_image])
def test_an_image_that_does_not_verify_is_never_unpickled(spoil, image_dir, monkeypatch):
    """A tampered image (or another run's or process's) is never unpickled: the process exits with passivation_failed."""
    me = e.self()
    decoy = e.spawn(go_passive, Tripwire(me), report, me)
    wait_status(decoy, {"passivated"})
    p, ref = e.spawn_monitor(go_passive, Tripwire(me), report, me)
    wait_status(p, {"passivated"})
    [path] = [q for q in image_dir.iterdir() if q.name.startswith(f"ensemble-{p.id}-")]
    spoil(path, monkeypatch)
    e.send(p, "wake")
    reason = down_of(ref)
    assert "passivation_failed" == reason[0], reason
    assert "does not verify" in reason[1]
    assert TIMEOUT == e.receive(lambda m: m if m == "unpickled" else NOMATCH, timeout=0)
    assert not path.exists()


def test_the_tripwire_fires_when_an_intact_image_is_read():
    """Control for the tampering test: reading an intact image does unpickle the Tripwire."""
    me = e.self()
    p = e.spawn(go_passive, Tripwire(me), report, me)
    wait_status(p, {"passivated"})
    e.send(p, "wake")
    assert "unpickled" == e.receive(lambda m: m if m == "unpickled" else NOMATCH, timeout=2)
    assert "tripwire" == woke()[3]


def test_a_missing_image_ends_the_process_with_passivation_failed(image_dir):
    """An image deleted behind the runtime's back ends the process with passivation_failed."""
    p, ref = e.spawn_monitor(go_passive, None, report, e.self())
    wait_status(p, {"passivated"})
    [name] = images(image_dir)
    os.unlink(image_dir / name)
    e.send(p, "wake")
    reason = down_of(ref)
    assert ("passivation_failed", True) == (reason[0], "cannot read the image" in reason[1]), reason


def test_image_mode_is_0600_in_a_0700_directory():
    """The default directory is private (0700) and each image is readable by its owner only (0600)."""
    _passivate.set_directory(None)
    p = e.spawn(go_passive, None, report, e.self())
    wait_status(p, {"passivated"})
    d = _passivate.directory()
    [name] = [n for n in os.listdir(d) if n.startswith(f"ensemble-{p.id}-")]
    assert (0o700, 0o600) == (
        stat.S_IMODE(os.stat(d).st_mode),
        stat.S_IMODE(os.stat(os.path.join(d, name)).st_mode),
    )
    assert os.path.basename(d).startswith("ensemble-passivate-")


def test_set_directory_makes_a_missing_directory_private(image_dir):
    """A directory given to set_directory that does not exist yet is made with mode 0700."""
    p = e.spawn(go_passive, None, report, e.self())
    wait_status(p, {"passivated"})
    assert 0o700 == stat.S_IMODE(os.stat(image_dir).st_mode)


# -- misuse -------------------------------------------------------------------------------


def test_passivate_from_the_shell_is_badarg():
    """passivate outside a spawned process raises Badarg."""
    with pytest.raises(e.Badarg):
        e.passivate(report, e.self())


def test_passivate_of_a_non_callable_is_badarg():
    """passivate(fn) with fn not callable raises Badarg in the process."""
    p = e.spawn(call_passivate_with, e.self(), 42)
    assert "badarg" == e.receive(timeout=2)[0]
    assert "normal" == e.exit_reason(p, timeout=2)


def test_a_process_on_another_carrier_passivates_and_wakes():
    """Passivation works for a process on a carrier thread, woken from this one."""
    me = e.self()
    p = e.spawn(go_passive, ["s"], report, me, dispatcher="blocking")
    wait_status(p, {"passivated"})
    e.send(p, "across")
    assert ("woke", p, (me,), ["s"], "across") == woke()
