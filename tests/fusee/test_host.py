"""fusee.host.Host: an open engine's parts, built complete at open, and what inner modules ask of it."""

from __future__ import annotations

import pytest

import fusee
from fusee import parking
from fusee.host import Host
from fusee.engine import open_engine
from fusee.workflow import Clock, shard_of


@fusee.workflow("host.echo")
def echo(ctx, x):
    return ctx.step("twice", lambda: 2 * x)


def test_the_engine_is_a_face_over_a_host_built_complete_at_open():
    clock = Clock()
    eng = fusee.Engine.open(
        None, [echo], shards=3, clock=clock, park_after=5, memory_budget=1000, retention=60, max_live_runs=7
    )
    try:
        h = eng.host
        assert type(h) is Host
        assert h.shards == eng.shards == 3 and len(h.servers) == 3
        assert h.clock is clock
        assert h.parking == parking.Settings(5.0, 1000, 60.0) and h.parking.parks
        assert h.max_live_runs == 7
        assert h.workflow("host.echo") is echo and h.workflow(echo) is echo
        assert h.user_workflows() == ["host.echo"]
        with pytest.raises(fusee.UnknownWorkflow):
            h.workflow("nope")
        assert h.shard_of("abc") == shard_of("abc", 3)
        with pytest.raises(TypeError):
            h.shard_of(3)
        assert h.step_body("host.echo", "twice", len) is len  # no hook: the step's own body
        assert eng.execute(echo, "e", 4, timeout=10) == 8
        assert not h.closed
    finally:
        eng.shutdown()
    assert h.closed and eng.closed
    with pytest.raises(fusee.Error, match="shut down"):
        h.call(0, ("list", None))


def test_parking_off_unless_asked():
    assert not parking.Settings().parks
    assert parking.Settings(park_after=0).parks and parking.Settings(memory_budget=0).parks


def test_a_step_hook_given_at_open_replaces_step_bodies():
    eng = open_engine(None, [echo], 1, step_hook={("host.echo", "twice"): lambda: "mocked"})
    try:
        assert eng.execute(echo, "m", 4, timeout=10) == "mocked"
    finally:
        eng.shutdown()
