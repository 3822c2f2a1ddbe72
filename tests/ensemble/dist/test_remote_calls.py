"""gen_server calls and casts to a server on another node (an OS process of its own)."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import CallError, gen_server

from ._cluster import B, WIRES


@pytest.fixture(params=WIRES)
def wire(request):
    """Every test here with two nodes runs over TCP and over TLS."""
    return request.param


def test_call_and_cast_a_server_on_another_node_by_name_and_by_pid(node_a, child_b):
    assert 0 == gen_server.call(("counter", B), "get", 10)
    assert 5 == gen_server.call(("counter", B), ("add", 5), 10)
    gen_server.cast(("counter", B), ("add", 2))
    assert 7 == gen_server.call(("counter", B), "get", 10)  # the cast came first, on one connection
    kind, request, caller = gen_server.call(("counter", B), ("who", 1), 10)
    assert (kind, request, caller) == ("echo", ("who", 1), e.self())  # the caller's pid came back as itself


def test_a_call_to_a_server_that_stops_raises_its_reason(node_a, child_b):
    with pytest.raises(CallError) as info:
        gen_server.call(("counter", B), ("crash", "on_purpose"), 10)
    assert info.value.reason == "on_purpose"
    with pytest.raises(CallError) as info:  # nobody is registered as counter any more
        gen_server.call(("counter", B), "get", 10)
    assert info.value.reason == "noproc"


def test_a_call_to_a_node_that_cannot_be_reached_raises_noconnection(node_a):
    with pytest.raises(CallError) as info:
        gen_server.call(("counter", "nobody@127.0.0.1"), "get", 10)
    assert info.value.reason == "noconnection"


def test_a_call_that_times_out_leaves_nothing_behind(node_a, child_b):
    echo = gen_server.call(("counter", B), ("who", 2), 10)  # connected, warm
    assert echo[0] == "echo"
    with pytest.raises(CallError) as info:
        gen_server.call(("echo", B), "never answered", 0.2)  # echo is not a gen_server
    assert info.value.reason == "timeout"
    assert [] == [m for m in e.process_info(e.self(), "messages") if type(m) is tuple and m and m[0] == "DOWN"]


def test_multi_call_and_abcast_reach_every_connected_node(node_a, child_b):
    class Local(gen_server.GenServer):
        def init(self):
            return ("ok", 100)

        def handle_call(self, request, from_, n):
            return ("reply", n, n)

        def handle_cast(self, request, n):
            return ("noreply", n + request[1])

    local = gen_server.start(Local, name="counter")
    try:
        assert gen_server.call(("counter", B), "get", 10) == 0  # connects
        gen_server.abcast("counter", ("add", 1))
        replies, bad = gen_server.multi_call("counter", "get", timeout=10)
        assert sorted(replies) == sorted([(e.node(), 101), (B, 1)]) and bad == []
        replies, bad = gen_server.multi_call("counter", "get", nodes=[B, "nobody@127.0.0.1"], timeout=10)
        assert replies == [(B, 1)] and bad == ["nobody@127.0.0.1"]
    finally:
        gen_server.stop(local)


def test_send_request_to_a_remote_server(node_a, child_b):
    req = gen_server.send_request(("counter", B), ("add", 3))
    assert ("reply", 3) == gen_server.receive_response(req, 10)
