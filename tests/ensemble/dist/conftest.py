"""Fixtures of the multi-node tests: an epmd on a free port, node A here, node B in a child, over
TCP (or TLS: the ``wire`` fixture)."""

from __future__ import annotations

import pytest

from ensemble import dist
from ensemble.dist import epmd

from ._cluster import B, COOKIE, Child, child_tls, node_tls


@pytest.fixture
def epmd_port():
    server = epmd.EpmdServer(host="127.0.0.1", port=0)
    server.start()
    yield server.port
    server.stop()


@pytest.fixture
def wire(request):
    """The transport between node_a and child_b: "tcp", or "tls" (mutual, certs/) for a test or a
    module that asks with ``pytest.mark.parametrize("wire", WIRES, indirect=True)``."""
    return getattr(request, "param", "tcp")


@pytest.fixture
def node_a(epmd_port, wire):
    name = dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, tls=node_tls(wire))
    yield name
    dist.stop()


@pytest.fixture
def child_b(epmd_port, node_a, wire):
    c = Child(B, COOKIE, epmd_port, tls=child_tls(wire))
    yield c
    c.close()


@pytest.fixture(scope="module")
def node_for_fuzz():
    """A node that lives through a whole module (hypothesis calls its test many times)."""
    server = epmd.EpmdServer(host="127.0.0.1", port=0)
    server.start()
    dist.start("fuzzed@127.0.0.1", cookie=COOKIE, epmd_port=server.port)
    yield
    dist.stop()
    server.stop()
