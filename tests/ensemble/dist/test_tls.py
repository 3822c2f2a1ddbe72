"""Nodes over TLS (certificates in tests/ensemble/dist/certs): they connect when their certificates
check out, never otherwise, and everything works inside as over TCP."""

from __future__ import annotations

import os

import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, dist, gen_server

from ._cluster import B, CERTS, COOKIE, NODE_CERTS, Child

NODE = NODE_CERTS
ROGUE = (os.path.join(CERTS, "rogue.pem"), os.path.join(CERTS, "rogue.key"), os.path.join(CERTS, "ca.pem"))


def _start_a(epmd_port, files=NODE, mutual=True):
    return dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, tls=dist.TLS(*files, mutual=mutual))


def test_two_nodes_over_mutual_tls_send_and_call(epmd_port):
    _start_a(epmd_port)
    child = Child(B, COOKIE, epmd_port, tls=(*NODE, "mutual"))
    try:
        me = e.self()
        e.send(("echo", B), ("ping", me, 1))
        assert e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" else NOMATCH, timeout=10)
        assert 4 == gen_server.call(("counter", B), ("add", 4), 10)
        assert [B] == dist.nodes()
    finally:
        child.close()
        dist.stop()


def test_a_node_without_a_trusted_certificate_never_connects(epmd_port):
    """B presents a self-signed certificate: A refuses it (and A's own is checked by B)."""
    _start_a(epmd_port)
    child = Child(B, COOKIE, epmd_port, tls=(*ROGUE, "mutual"))
    try:
        assert dist.connect(B) is False
        e.send(("echo", B), ("ping", e.self(), 2))
        assert TIMEOUT == e.receive(lambda m: m if type(m) is tuple and m[0] == "pong" else NOMATCH, timeout=0.5)
        assert [] == dist.nodes()
    finally:
        child.close()
        dist.stop()


def test_a_tls_node_and_a_plain_node_do_not_connect(epmd_port):
    _start_a(epmd_port)
    child = Child(B, COOKIE, epmd_port)  # plain TCP
    try:
        assert dist.connect(B) is False
        assert [] == dist.nodes()
    finally:
        child.close()
        dist.stop()


def test_bad_tls_settings_are_refused_at_start(epmd_port):
    with pytest.raises(dist.DistError):
        dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port, tls={"certfile": "x"})
    with pytest.raises(OSError):
        dist.start("a@127.0.0.1", cookie=COOKIE, epmd_port=epmd_port,
                   tls=dist.TLS("/nonexistent.pem", "/nonexistent.key", NODE[2]))
    assert e.node() == "nonode@nohost"
