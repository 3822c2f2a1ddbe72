"""The shard server's vocabulary (fusee.shard.CALLS) and what it does with an error: a fusee API error
(or a query handler's) is the caller's answer; anything else is a bug of the server, which crashes."""

from __future__ import annotations

import pytest

import ensemble as e
import fusee
from fusee import shard as fshard
from fusee.shard import CALLS, _ShardServer
from fusee.testing import wait_until


@fusee.workflow("asked")
def asked(ctx, input):
    def answer(arg):
        if arg == "boom":
            raise ValueError("the handler's own error")
        return arg

    ctx.on_query("echo", answer)
    return ctx.wait_for("go")


def test_every_request_kind_names_a_method_of_the_server():
    assert CALLS, "the vocabulary is declared"
    for kind, name in CALLS.items():
        assert callable(getattr(_ShardServer, name, None)), (kind, name)


def test_an_unknown_request_is_a_clear_error_and_the_server_lives_on():
    eng = fusee.Engine.open(None, [asked], shards=1)
    try:
        pid = eng.host.servers[0]
        for request in [("bogus", 1), ("_start",), (), "list", (42,)]:
            with pytest.raises(ValueError, match="takes no request"):
                eng.host.call(0, request)
        assert e.is_alive(pid)
        assert eng.list() == []
    finally:
        eng.shutdown()


def test_fusee_errors_and_query_handler_errors_reach_the_caller_and_the_server_lives_on():
    eng = fusee.Engine.open(None, [asked], shards=1, park_after=3600)
    try:
        pid = eng.host.servers[0]
        with pytest.raises(fusee.NotFound):
            eng.describe("nobody")
        eng.start(asked, "a")
        with pytest.raises(fusee.AlreadyExists):
            eng.start(asked, "a")
        wait_until(lambda: eng.metrics()["runs_waiting"] == 1, 10, "the run waits (its handler registered)")
        assert eng.query("a", "echo", 3) == 3
        with pytest.raises(ValueError, match="the handler's own error"):
            eng.query("a", "echo", "boom")
        with pytest.raises(fusee.Error, match="no query"):
            eng.query("a", "nope")
        assert e.is_alive(pid)
        eng.signal("a", "go", 5)
        assert eng.result("a", timeout=10) == 5
    finally:
        eng.shutdown()


def test_an_unexpected_exception_crashes_the_shard_server(monkeypatch):
    """A bug inside the server (here: describe raising a RuntimeError) is not passed off as an answer:
    the server exits with it (let it crash) and the caller gets ShardCrashed carrying the exit reason;
    its supervisor restarts it (tests/fusee/test_shard_restart.py), so a later request is answered."""
    real = _ShardServer._describe

    def broken(self, id):
        monkeypatch.setattr(_ShardServer, "_describe", real)
        raise RuntimeError("a bug in the shard server")

    eng = fusee.Engine.open(None, [asked], shards=1)
    try:
        pid = eng.host.servers[0]
        monkeypatch.setattr(_ShardServer, "_describe", broken)
        with pytest.raises(fusee.ShardCrashed) as caught:
            eng.describe("x")
        assert "a bug in the shard server" in caught.value.reason
        assert e.exit_reason(pid, timeout=5) is not e.TIMEOUT
        assert not e.is_alive(pid)
        assert eng.list() == []
        with pytest.raises(fusee.NotFound):
            eng.describe("x")
    finally:
        eng.shutdown()
    assert eng.closed


def test_the_vocabulary_is_the_module_constant():
    assert fshard.CALLS is CALLS


def test_bad_input_through_the_api_is_refused_and_takes_no_shard_down():
    """A careless caller's values that only the records' checks refuse (a TypeError or ValueError inside
    the server) come back as that error, nothing recorded, and the shard server lives on."""
    eng = fusee.Engine.open(None, [asked], shards=1)
    try:
        pid = eng.host.servers[0]
        eng.start(asked, "a", 1)
        with pytest.raises(TypeError, match="dedup"):
            eng.signal("a", "go", 1, dedup=[1])
        with pytest.raises(fusee.NotSerializable):
            eng.cancel("a", {1})
        assert e.is_alive(pid)
        assert eng.describe("a")["status"] == "running"
        assert eng.signal("a", "go", 7)
        assert eng.result("a", timeout=10) == 7
    finally:
        eng.shutdown()
