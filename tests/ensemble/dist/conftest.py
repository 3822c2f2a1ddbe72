"""Fixtures of the multi-node tests: an epmd on a free port, node A here, node B in a child."""

from __future__ import annotations

import pytest

from ensemble import dist
from ensemble.dist import epmd

from ._cluster import B, COOKIE, Child


@pytest.fixture
def epmd_port():
    server = epmd.EpmdServer(host="127.0.0.1", port=0)
    server.start()
    yield server.port
    server.stop()


@pytest.fixture
def node_a(epmd_port):
    name = dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port)
    yield name
    dist.stop()


@pytest.fixture
def child_b(epmd_port, node_a):
    c = Child(B, COOKIE, epmd_port)
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
