"""constellation across nodes: a consumer on one node fed by a stage on another, under demand."""

from __future__ import annotations

import constellation
import pytest
from constellation import DuplicateSubscription

import ensemble as e
from ensemble import NOMATCH

from ._cluster import B, WIRES


@pytest.mark.parametrize("wire", WIRES, indirect=True)
def test_a_consumer_on_another_node_gets_what_it_asked_for_and_its_node_going_down_cancels_it(
        node_a, child_b):
    stage = constellation.start()
    try:
        stage.push(list(range(8)))
        me = e.self()
        stage_consumer = e.spawn_on(B, "tests.ensemble.dist._remote_fns:consume", stage.pid, "b1", 5, me)
        got = e.receive(lambda m: m[1] if type(m) is tuple and m[0] == "consumed" else NOMATCH, timeout=10)
        assert got == [0, 1, 2, 3, 4]  # what it asked for, in order, no more
        assert [("process", stage_consumer)] == e.process_info(stage.pid, "monitors")
        e.monitor_node(B)
        child_b.kill()
        assert ("nodedown", B) == e.receive(lambda m: m if m == ("nodedown", B) else NOMATCH, timeout=10)
        for _ in range(200):  # the stage hears its consumer went down (noconnection): a call each try
            stage.push([])
            if e.process_info(stage.pid, "monitors") == []:
                break
        assert [] == e.process_info(stage.pid, "monitors")  # the participant is gone: its monitor too
        with pytest.raises(DuplicateSubscription):  # b1 is tombstoned: cancelled for good
            stage.subscribe("b1", "local")
        stage.subscribe("local-1", "local")
        stage.ask("local-1", 3)
        assert ("events", "local-1", (5, 6, 7)) == e.receive(timeout=5)  # the rest stayed buffered
    finally:
        stage.stop()
