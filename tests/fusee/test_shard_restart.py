"""A shard server that crashes (a bug: an unexpected exception in a handler) is restarted by its
supervisor, its shard's runs rebuilt from the journal as an open does; the runs go on and nothing
acknowledged is lost.  A call the server crashed with raises ShardCrashed; a result being waited for
is answered after the restart.  Past the restart intensity the engine fails: every call raises
EngineFailed, nothing hangs, and a reopen finds everything acknowledged."""

from __future__ import annotations

import threading

import pytest

import ensemble as e
from ensemble import gen_server
import fusee
from fusee.engine import shard_of
from fusee.shard import _ShardServer

_bodies: dict[str, int] = {}
_lock = threading.Lock()
_told: list = []  # the test process: step bodies report to it


def _count(key: str) -> None:
    with _lock:
        _bodies[key] = _bodies.get(key, 0) + 1


@fusee.workflow("restart.waits")
def waits(ctx, n):
    def a():
        _count(f"{ctx.workflow_id}/a")
        for pid in _told:
            e.send(pid, ("did_a", ctx.workflow_id))
        return n

    got = ctx.step("a", a)
    go = ctx.wait_for("go")
    b = ctx.step("b", lambda: _count(f"{ctx.workflow_id}/b") or go)
    return got + b


def _ids(shard: int, shards: int, count: int, prefix: str) -> list[str]:
    out, i = [], 0
    while len(out) < count:
        wid = f"{prefix}{i}"
        if shard_of(wid, shards) == shard:
            out.append(wid)
        i += 1
    return out


def _await_did_a(ids: list[str]) -> None:
    left = set(ids)
    while left:
        got = e.receive(lambda m: m if type(m) is tuple and m[:1] == ("did_a",) else e.NOMATCH, timeout=30)
        assert got is not e.TIMEOUT, f"no step 'a' from {sorted(left)}"
        left.discard(got[1])


def _crash_once(monkeypatch) -> list[int]:
    """Make the next ``describe`` crash the server it reaches (once); the list counts the crashes."""
    crashes: list[int] = []
    real = _ShardServer._describe

    def broken(self, id):
        if not crashes:
            crashes.append(1)
            raise RuntimeError("a bug in the shard server")
        return real(self, id)

    monkeypatch.setattr(_ShardServer, "_describe", broken)
    return crashes


def _waiter(eng, wid, parent):
    try:
        e.send(parent, ("waited", wid, "ok", eng.result(wid, timeout=60)))
    except Exception as exc:  # reported to the test
        e.send(parent, ("waited", wid, "error", exc))


def _waited(wid: str):
    got = e.receive(lambda m: m if type(m) is tuple and m[:2] == ("waited", wid) else e.NOMATCH, timeout=60)
    assert got is not e.TIMEOUT, f"the wait on {wid} was never answered"
    return got[2:]


@pytest.fixture(autouse=True)
def _reset():
    _bodies.clear()
    _told[:] = [e.self()]
    yield
    _told.clear()


@pytest.mark.parametrize("on_disk", [True, False], ids=["disk", "memory"])
def test_a_crashed_shard_server_comes_back_and_its_runs_complete(tmp_path, monkeypatch, on_disk):
    shards = 2
    eng = fusee.Engine.open(str(tmp_path / "d") if on_disk else None, [waits], shards=shards)
    try:
        crashed = _ids(0, shards, 4, "c")
        other = _ids(1, shards, 2, "o")
        for i, wid in enumerate(crashed + other):
            eng.start(waits, wid, i)  # acknowledged: its Start is durable
        _await_did_a(crashed + other)
        waiter = e.spawn(_waiter, eng, crashed[0], e.self())  # waits on a run of the shard that crashes
        first, spare = eng.host.servers[0], eng.host.servers[1]
        crashes = _crash_once(monkeypatch)

        with pytest.raises(fusee.ShardCrashed) as caught:
            eng.describe(crashed[1])
        assert (caught.value.shard, crashes) == (0, [1])
        assert "a bug in the shard server" in caught.value.reason
        assert e.exit_reason(first, timeout=5) is not e.TIMEOUT
        # back when ShardCrashed is raised: a new server for shard 0 only (one_for_one)
        assert eng.host.servers[0] is not first and e.is_alive(eng.host.servers[0])
        assert eng.host.servers[1] is spare and eng.host.restarts == 1

        # every run of the crashed shard is there again, as the journal says, and goes on
        assert {d["id"]: d["status"] for d in eng.list()} == {w: "running" for w in crashed + other}
        assert eng.describe(crashed[1])["status"] == "running"
        for wid in crashed + other:
            assert eng.signal(wid, "go", 100)
        for i, wid in enumerate(crashed + other):
            assert eng.result(wid, timeout=30) == i + 100
        assert _waited(crashed[0]) == ("ok", 100)  # the wait across the crash was answered
        e.exit_reason(waiter, timeout=10)
        # no step body ran again: each Step was journaled before the crash (and kept)
        assert _bodies == {f"{w}/{s}": 1 for w in crashed + other for s in "ab"}
        # a new start on the restarted shard gets a fresh run number
        fresh = _ids(0, shards, 5, "c")[-1]
        run = eng.start(waits, fresh, 7)
        assert run.run > max(eng.run(w).run for w in crashed)
    finally:
        eng.shutdown()
    if on_disk:  # and a reopen finds what the restarted server recorded
        with fusee.Engine.open(str(tmp_path / "d"), [waits]) as again:
            assert {d["id"]: d["status"] for d in again.list()} == {
                **{w: "completed" for w in crashed + other},
                fresh: "running",
            }
            assert [again.result(w, timeout=10) for w in crashed] == [i + 100 for i in range(4)]


def test_a_request_that_finds_the_server_down_goes_to_the_restarted_one(monkeypatch):
    """Calls made while the server is down never reached it: they wait for its successor and are
    answered there (not ShardCrashed)."""
    eng = fusee.Engine.open(None, [waits], shards=1)
    try:
        eng.start(waits, "w", 1)
        _await_did_a(["w"])
        pid = eng.host.servers[0]
        _crash_once(monkeypatch)
        # crash it with a raw call (no waiting for the restart), then ask through the engine at once
        with pytest.raises(e.CallError):
            gen_server.call(pid, ("describe", "w"), timeout=10)
        assert not e.is_alive(pid)
        assert eng.describe("w")["status"] == "running"  # waited for the restart, answered by it
        assert eng.host.servers[0] is not pid and eng.host.restarts == 1
        assert eng.signal("w", "go", 2)
        assert eng.result("w", timeout=30) == 3
    finally:
        eng.shutdown()


def test_past_the_restart_intensity_the_engine_fails_visibly_and_a_reopen_loses_nothing(tmp_path, monkeypatch):
    path = str(tmp_path / "d")
    eng = fusee.Engine.open(path, [waits], shards=1, restart_intensity=(1, 60.0))
    ids = ["x", "y"]
    for i, wid in enumerate(ids):
        eng.start(waits, wid, i)
    _await_did_a(ids)
    waiter = e.spawn(_waiter, eng, "x", e.self())
    real = _ShardServer._describe

    def always(self, id):
        raise RuntimeError("a bug that comes back")

    monkeypatch.setattr(_ShardServer, "_describe", always)
    with pytest.raises(fusee.ShardCrashed):
        eng.describe("x")  # restart 1 of 1: allowed
    assert eng.host.restarts == 1 and eng.host.failed is None
    with pytest.raises(fusee.EngineFailed):
        eng.describe("x")  # the second within 60 s: the supervisor gives up
    monkeypatch.setattr(_ShardServer, "_describe", real)
    for call in (lambda: eng.list(), lambda: eng.signal("x", "go", 1), lambda: eng.start(waits, "z", 0)):
        with pytest.raises(fusee.EngineFailed, match="restart intensity|supervisor"):
            call()
    kind, exc = _waited("x")  # the result wait does not hang: it fails too
    assert kind == "error" and isinstance(exc, fusee.EngineFailed)
    e.exit_reason(waiter, timeout=10)
    assert not eng.closed
    eng.shutdown()  # closes the journal; nothing more to say
    assert eng.closed
    with fusee.Engine.open(path, [waits]) as again:
        assert {d["id"]: d["status"] for d in again.list()} == {w: "running" for w in ids}
        for i, wid in enumerate(ids):
            assert again.signal(wid, "go", 10)
            assert again.result(wid, timeout=30) == i + 10
    assert _bodies == {f"{w}/{s}": 1 for w in ids for s in "ab"}


def test_restart_intensity_is_checked():
    for bad in [(1,), (-1, 5.0), (1, 0), ("1", 5.0), [1, 5.0]]:
        with pytest.raises(ValueError, match="restart_intensity"):
            fusee.Engine.open(None, [waits], restart_intensity=bad)


@fusee.workflow("restart.kid")
def kid(ctx, _):
    return ctx.wait_for("go")


@fusee.workflow("restart.parent")
def parent(ctx, kid_id):
    ctx.start_child(kid, kid_id, None, parent_close="terminate")
    return "done"


def test_a_parent_close_told_while_the_childs_server_was_down_is_told_again(monkeypatch):
    """Messages to a crashed server are lost (as in OTP); a parent's closing of its children is made good
    by the restart: every other shard's ended parents close their children again."""
    shards = 2
    eng = fusee.Engine.open(None, [kid, parent], shards=shards)
    try:
        pid_a, kid_b = _ids(0, shards, 1, "p")[0], _ids(1, shards, 1, "k")[0]
        from fusee.shard import _PARENT_CLOSED

        me, real_tell, dropped = e.self(), eng.host.tell, []

        def lossy(shard, msg):
            if type(msg) is tuple and msg[:1] == (_PARENT_CLOSED,) and not dropped:
                dropped.append(msg)  # as if sent while shard 1's server was down
                e.send(me, "dropped")
                return
            real_tell(shard, msg)

        monkeypatch.setattr(eng.host, "tell", lossy)
        assert eng.execute(parent, pid_a, kid_b, timeout=30) == "done"
        assert e.receive(lambda m: m if m == "dropped" else e.NOMATCH, timeout=30) == "dropped"
        assert eng.describe(kid_b)["status"] == "running"  # the closing was lost
        _crash_once(monkeypatch)
        with pytest.raises(fusee.ShardCrashed):
            eng.describe(kid_b)  # shard 1's server crashes and is restarted
        with pytest.raises(fusee.Terminated):
            eng.result(kid_b, timeout=30)  # closed again once it was back
    finally:
        eng.shutdown()
