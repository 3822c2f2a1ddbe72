"""The port mapper (ensemble.dist.epmd): our client against our EpmdServer, and both against
Erlang's own ``epmd`` and ``erl``.

No sleep synchronises anything here: a test that waits for a change (epmd noticing a closed
connection, a subprocess coming up) waits on a condition with a deadline (:func:`wait_until`).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket as stdsocket
import struct
import subprocess as stdsubprocess
import threading
import time
from typing import Callable, Iterator

import gevent
import pytest
from gevent import socket, subprocess

from ensemble.decide import epmd_wire as w
from ensemble.dist import epmd
from ensemble.dist.epmd import (
    EpmdError,
    EpmdProtocolError,
    EpmdServer,
    EpmdTimeout,
    EpmdUnreachable,
    InvalidName,
    NameTaken,
    NodeEntry,
)

EPMD = shutil.which("epmd") or (os.path.exists("/usr/lib/erlang/bin/epmd") and "/usr/lib/erlang/bin/epmd") or None
ERL = shutil.which("erl")
needs_epmd = pytest.mark.skipif(EPMD is None, reason="Erlang's epmd is not installed")
needs_erl = pytest.mark.skipif(ERL is None or EPMD is None, reason="Erlang (erl and epmd) is not installed")


def wait_until(condition: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> object:
    """``condition()`` once it is truthy, checked every 10 ms cooperatively; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        gevent.sleep(0.01)


def free_port() -> int:
    with stdsocket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send ``data`` to 127.0.0.1:``port`` and close our side; everything answered until the
    peer closes (or resets: closing with our bytes unread, as for a request over the limit)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        c.sendall(data)
        c.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := c.recv(4096):
                out += chunk
        except ConnectionResetError:
            pass
        return out


@pytest.fixture
def server() -> Iterator[EpmdServer]:
    srv = EpmdServer(port=0).start()
    yield srv
    srv.stop()


# -- our client against our server -------------------------------------------------------------------


def test_register_names_port_please_and_lookup(server: EpmdServer) -> None:
    p = server.port
    assert epmd.names(epmd_port=p) == []
    with epmd.register("alpha", 4242, epmd_port=p) as reg:
        assert (reg.name, reg.port) == ("alpha", 4242)
        assert 4 <= reg.creation <= 0xFFFFFFFF  # 32-bit: ALIVE2_X_RESP for version 6
        beta = epmd.register("beta", 4343, epmd_port=p, node_type=epmd.HIDDEN_NODE, highest_version=5, extra=b"x")
        assert 1 <= beta.creation <= 3  # 16-bit ALIVE2_RESP for version 5, 1..3 as epmd
        assert epmd.names(epmd_port=p) == [("beta", 4343), ("alpha", 4242)]  # newest first, as epmd
        assert epmd.port_please("alpha", epmd_port=p) == 4242
        assert epmd.port_please("gamma", epmd_port=p) is None
        assert epmd.lookup("beta", epmd_port=p) == NodeEntry("beta", 4343, 72, 0, 5, 5, b"x")
        beta.close()
        beta.close()  # idempotent
        assert beta.closed and "closed" in repr(beta)
    assert reg.closed


def test_closing_the_registration_unregisters_and_a_new_one_gets_another_creation(server: EpmdServer) -> None:
    p = server.port
    first = epmd.register("node", 1000, epmd_port=p)
    first.close()
    wait_until(lambda: epmd.port_please("node", epmd_port=p) is None, what="unregistration")
    assert server.registered() == []
    second = epmd.register("node", 1001, epmd_port=p)
    assert second.creation != first.creation
    assert epmd.port_please("node", epmd_port=p) == 1001
    second.close()


def test_a_taken_name_raises_name_taken(server: EpmdServer) -> None:
    with epmd.register("dup", 1, epmd_port=server.port):
        with pytest.raises(NameTaken, match="'dup'.*taken"):
            epmd.register("dup", 2, epmd_port=server.port)
        assert epmd.port_please("dup", epmd_port=server.port) == 1  # the first one stays


def test_anything_more_on_the_registering_connection_ends_the_registration(server: EpmdServer) -> None:
    reg = epmd.register("chatty", 7, epmd_port=server.port)
    reg._sock.sendall(b"!")  # as in epmd: "got more than expected on ALIVE socket"
    wait_until(lambda: epmd.names(epmd_port=server.port) == [], what="unregistration")
    reg.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00",  # an empty request
        b"\x00\x01\x99",  # an unknown tag
        b"\xff\xff" + b"x" * 100,  # a length over the limit
        b"\x00\x05za",  # truncated, then closed
        b"\x00\x02z\xff",  # a name that is not UTF-8
        b"\x00\x0ex\x04\x57M\x00\x00\x06\x00\x05\x00\x09a\x00\x00",  # a name length past the end
    ],
)
def test_a_malformed_request_closes_that_connection_only(server: EpmdServer, garbage: bytes) -> None:
    p = server.port
    with epmd.register("survivor", 1234, epmd_port=p):
        assert raw_exchange(p, garbage) == b""  # closed, unanswered
        assert epmd.names(epmd_port=p) == [("survivor", 1234)]
        assert epmd.port_please("survivor", epmd_port=p) == 1234


def test_a_silent_client_does_not_hold_up_the_others(server: EpmdServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as silent:
        silent.sendall(b"\x00\x10z")  # promises 16 bytes, sends one
        with epmd.register("busy", 1, epmd_port=server.port):
            assert epmd.names(epmd_port=server.port) == [("busy", 1)]


def test_the_server_closes_an_incomplete_request_after_its_idle_timeout() -> None:
    with EpmdServer(port=0, idle_timeout=0.2) as srv, socket.create_connection(("127.0.0.1", srv.port)) as c:
        c.sendall(b"\x00")
        c.settimeout(5)
        assert c.recv(10) == b""  # closed by the server, well before our own timeout


def test_many_concurrent_registrations(server: EpmdServer) -> None:
    p = server.port
    n = 100
    jobs = [gevent.spawn(epmd.register, f"node{i}", 10000 + i, epmd_port=p) for i in range(n)]
    gevent.joinall(jobs, timeout=10, raise_error=True)
    regs = [j.value for j in jobs]
    assert sorted(epmd.names(epmd_port=p)) == sorted((f"node{i}", 10000 + i) for i in range(n))
    lookups = [gevent.spawn(epmd.port_please, f"node{i}", epmd_port=p) for i in range(n)]
    gevent.joinall(lookups, timeout=10, raise_error=True)
    assert [j.value for j in lookups] == [10000 + i for i in range(n)]
    for r in regs[::2]:
        r.close()
    wait_until(lambda: len(epmd.names(epmd_port=p)) == n // 2, what="half unregistered")
    assert {name for name, _ in epmd.names(epmd_port=p)} == {f"node{i}" for i in range(1, n, 2)}
    for r in regs[1::2]:
        r.close()
    wait_until(lambda: epmd.names(epmd_port=p) == [], what="all unregistered")


def test_stop_ends_every_registration_and_the_port() -> None:
    srv = EpmdServer(port=0).start()
    reg = epmd.register("gone", 5, epmd_port=srv.port)
    srv.stop()
    srv.stop()  # idempotent
    reg._sock.settimeout(5)
    assert reg._sock.recv(1) == b""  # the server closed the registering connection
    with pytest.raises(EpmdUnreachable, match="cannot connect"):
        epmd.names(epmd_port=srv.port)
    reg.close()


def test_start_on_a_taken_port_raises_address_in_use(server: EpmdServer) -> None:
    with pytest.raises(OSError) as info:
        EpmdServer(port=server.port).start()
    assert info.value.errno == errno.EADDRINUSE
    with pytest.raises(EpmdError, match="already started"):
        server.start()
    with pytest.raises(EpmdError, match="not started"):
        EpmdServer(port=0).port


# -- the client's errors and timeouts --------------------------------------------------------------


def test_nothing_listening_is_unreachable() -> None:
    port = free_port()
    for call in (lambda: epmd.names(epmd_port=port), lambda: epmd.port_please("x", epmd_port=port),
                 lambda: epmd.register("x", 1, epmd_port=port)):
        with pytest.raises(EpmdUnreachable, match=f"epmd at 127.0.0.1:{port}"):
            call()


def test_a_silent_peer_never_hangs_a_caller() -> None:
    with socket.socket() as listener:  # accepted by the kernel, never answered
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        for call in (lambda t: epmd.names(epmd_port=port, timeout=t),
                     lambda t: epmd.port_please("x", epmd_port=port, timeout=t),
                     lambda t: epmd.register("x", 1, epmd_port=port, timeout=t),
                     lambda t: epmd.ensure_epmd(port=port, timeout=t)):
            started = time.monotonic()
            with pytest.raises(EpmdTimeout, match="no answer within 0.2 s"):
                call(0.2)
            assert time.monotonic() - started < 2


def test_a_peer_that_is_not_epmd_is_a_protocol_error() -> None:
    def serve(listener: socket.socket, answer: bytes) -> None:
        while True:
            c, _ = listener.accept()
            c.recv(100)
            c.sendall(answer)
            c.close()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        g = gevent.spawn(serve, listener, b"HTTP/1.0 400 Bad Request\r\n\r\n")
        try:
            with pytest.raises(EpmdProtocolError):
                epmd.names(epmd_port=port)
            with pytest.raises(EpmdProtocolError):
                epmd.port_please("x", epmd_port=port)
            with pytest.raises(EpmdProtocolError):
                epmd.register("x", 1, epmd_port=port)
        finally:
            g.kill()


def test_a_connection_closed_before_the_alive2_answer_is_explained() -> None:
    def serve(listener: socket.socket) -> None:
        c, _ = listener.accept()
        c.recv(100)
        c.close()  # what epmd does for a registration from another host

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        g = gevent.spawn(serve, listener)
        with pytest.raises(epmd.EpmdConnectionLost, match="without answering ALIVE2_REQ"):
            epmd.register("x", 1, epmd_port=listener.getsockname()[1])
        g.join()


def test_invalid_names_are_refused_before_any_connection() -> None:
    port = free_port()  # nothing listens: a connection attempt would say EpmdUnreachable
    with pytest.raises(InvalidName, match="over 255"):
        epmd.register("n" * 256, 1, epmd_port=port)
    with pytest.raises(InvalidName, match="UTF-8"):
        epmd.port_please("bad\udcff", epmd_port=port)


def test_the_epmd_port_comes_from_the_environment(monkeypatch, server: EpmdServer) -> None:
    monkeypatch.delenv("ERL_EPMD_PORT", raising=False)
    assert epmd.default_epmd_port() == 4369
    monkeypatch.setenv("ERL_EPMD_PORT", str(server.port))
    assert epmd.default_epmd_port() == server.port
    with epmd.register("envy", 99):
        assert epmd.names() == [("envy", 99)]
        assert epmd.port_please("envy") == 99
    for bad in ("x", "0", "70000"):
        monkeypatch.setenv("ERL_EPMD_PORT", bad)
        with pytest.raises(EpmdError, match="ERL_EPMD_PORT"):
            epmd.names()


# -- ensure_epmd -----------------------------------------------------------------------------------


def test_ensure_epmd_uses_the_one_that_answers(server: EpmdServer) -> None:
    assert epmd.ensure_epmd(port=server.port) is None


def test_ensure_epmd_starts_one_when_none_answers() -> None:
    port = free_port()
    srv = epmd.ensure_epmd(port=port)
    try:
        assert isinstance(srv, EpmdServer) and srv.port == port
        with epmd.register("mine", 1, epmd_port=port):
            assert epmd.names(epmd_port=port) == [("mine", 1)]
        assert epmd.ensure_epmd(port=port) is None
    finally:
        srv.stop()


def test_ensure_epmd_that_loses_the_bind_race_uses_the_winner(monkeypatch, server: EpmdServer) -> None:
    """The probe says nobody answers, then the bind finds the port taken: the other one is used."""
    real_names = epmd.names
    probes = []

    def names_missing_the_first_time(*args, **kwargs):
        probes.append(1)
        if len(probes) == 1:
            raise EpmdUnreachable("nobody yet")
        return real_names(*args, **kwargs)

    monkeypatch.setattr(epmd, "names", names_missing_the_first_time)
    assert epmd.ensure_epmd(port=server.port) is None
    assert len(probes) == 2


def test_ensure_epmd_racing_greenlets_end_with_one_server() -> None:
    port = free_port()
    jobs = [gevent.spawn(epmd.ensure_epmd, port=port) for _ in range(8)]
    gevent.joinall(jobs, timeout=10, raise_error=True)
    servers = [j.value for j in jobs if j.value is not None]
    try:
        assert len(servers) == 1
        assert epmd.names(epmd_port=port) == []
    finally:
        for s in servers:
            s.stop()


def test_ensure_epmd_racing_threads_end_with_one_server() -> None:
    """Two OS threads, each with its own gevent hub, start at once: one server, no crash."""
    port = free_port()
    barrier = threading.Barrier(2)
    release_r, release_w = os.pipe()
    results: list[object] = []

    def contender() -> None:
        try:
            barrier.wait(timeout=5)
            srv = epmd.ensure_epmd(port=port)
            results.append(srv)
        except BaseException as exc:  # reported by the assertion below
            results.append(exc)
            return
        socket.wait_read(release_r, timeout=10)  # keep this thread's hub (and server) running
        if srv is not None:
            srv.stop()

    threads = [threading.Thread(target=contender) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(results) == 2, timeout=10, what="both contenders")
        assert not [r for r in results if isinstance(r, BaseException)], results
        assert sum(isinstance(r, EpmdServer) for r in results) == 1, results
        assert epmd.names(epmd_port=port) == []
    finally:
        os.write(release_w, b"x")
        for t in threads:
            t.join(timeout=10)
        os.close(release_r)
        os.close(release_w)


# -- interoperability with Erlang's epmd and erl ---------------------------------------------------


@pytest.fixture
def real_epmd() -> Iterator[int]:
    """Erlang's epmd in the foreground on a free port (killed at teardown); its port."""
    port = free_port()
    proc = stdsubprocess.Popen([EPMD, "-port", str(port)], stdout=stdsubprocess.DEVNULL, stderr=stdsubprocess.DEVNULL)

    def answers() -> bool:
        assert proc.poll() is None, f"epmd exited with {proc.returncode}"
        try:
            epmd.names(epmd_port=port, timeout=1)
            return True
        except EpmdUnreachable:
            return False

    try:
        wait_until(answers, timeout=10, what="epmd to answer NAMES")
        yield port
    finally:
        proc.kill()
        proc.wait(timeout=10)


def erl(args: list[str], epmd_port: int, **kwargs) -> subprocess.Popen:
    """``erl`` talking to the epmd on ``epmd_port``, never starting one of its own."""
    env = dict(os.environ, ERL_EPMD_PORT=str(epmd_port))
    return subprocess.Popen(
        [ERL, "-noshell", "-start_epmd", "false", *args], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs,
    )


def erl_eval(code: str, epmd_port: int) -> str:
    """What ``erl -eval code`` prints (it must halt)."""
    proc = erl(["-eval", code], epmd_port)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.decode()


@needs_epmd
def test_our_client_against_the_real_epmd(real_epmd: int) -> None:
    p = real_epmd
    with epmd.register("ens_a", 4242, epmd_port=p) as a:
        assert a.creation >= 4  # epmd answered ALIVE2_X_RESP with a 32-bit creation
        b = epmd.register("ens_b", 4343, epmd_port=p, highest_version=5, node_type=epmd.HIDDEN_NODE, extra=b"hi")
        assert 1 <= b.creation <= 3  # and ALIVE2_RESP, 16-bit, for a version-5 node
        assert epmd.names(epmd_port=p) == [("ens_b", 4343), ("ens_a", 4242)]
        assert epmd.port_please("ens_a", epmd_port=p) == 4242
        assert epmd.port_please("nobody", epmd_port=p) is None
        assert epmd.lookup("ens_b", epmd_port=p) == NodeEntry("ens_b", 4343, 72, 0, 5, 5, b"hi")
        with pytest.raises(NameTaken):
            epmd.register("ens_a", 1, epmd_port=p)
        b.close()
        wait_until(lambda: epmd.names(epmd_port=p) == [("ens_a", 4242)], what="epmd to unregister ens_b")
        again = epmd.register("ens_b", 4344, epmd_port=p, highest_version=5)
        assert again.creation != b.creation
        again.close()
    wait_until(lambda: epmd.names(epmd_port=p) == [], what="epmd to unregister everything")


@needs_epmd
def test_our_server_answers_byte_for_byte_as_the_real_epmd(real_epmd: int, server: EpmdServer) -> None:
    """The same registrations on both: the same PORT2 and NAMES bytes (but for the epmd port)."""
    regs = []
    for port in (real_epmd, server.port):
        regs.append(epmd.register("one", 1111, epmd_port=port, extra=b"\x00\x01"))
        regs.append(epmd.register("two\u00e9", 2222, epmd_port=port, highest_version=5, node_type=72))
    try:
        for req in (w.Port2Req("one"), w.Port2Req("two\u00e9"), w.Port2Req("three")):
            data = w.encode_request(req)
            assert raw_exchange(server.port, data) == raw_exchange(real_epmd, data)
        ours = raw_exchange(server.port, w.encode_request(w.NamesReq()))
        theirs = raw_exchange(real_epmd, w.encode_request(w.NamesReq()))
        assert ours[4:] == theirs[4:]
        assert struct.unpack(">I", ours[:4]) == (server.port,) and struct.unpack(">I", theirs[:4]) == (real_epmd,)
        # a taken name: both refuse with result 1 and creation 99
        data = w.encode_request(w.Alive2Req(NodeEntry("one", 3)))
        for port in (server.port, real_epmd):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                c.sendall(data)
                assert w.decode_alive2_response(c.recv(6)) == w.Alive2Resp(1, 99, True)
    finally:
        for r in regs:
            r.close()


@needs_erl
def test_erl_sees_a_name_we_registered_on_the_real_epmd(real_epmd: int) -> None:
    with epmd.register("ens_py", 4343, epmd_port=real_epmd):
        out = erl_eval(
            'io:format("~p~n~p~n", [net_adm:names(), erl_epmd:port_please("ens_py", {127,0,0,1})]), halt().',
            real_epmd,
        )
    assert '{ok,[{"ens_py",4343}]}' in out, out
    assert "{port,4343,6}" in out, out


@needs_erl
def test_erl_registers_with_our_server_and_reads_its_answers(server: EpmdServer) -> None:
    p = server.port
    mine = epmd.register("ens_py", 4242, epmd_port=p)
    code = (
        'io:format("names ~p~n", [net_adm:names()]),'
        ' io:format("port ~p~n", [erl_epmd:port_please("ens_py", {127,0,0,1})]),'
        ' io:format("ready~n"), receive after infinity -> ok end.'
    )
    proc = erl(["-sname", "x", "-setcookie", "c", "-eval", code], p)
    try:
        lines = []
        with gevent.Timeout(30, AssertionError(f"erl did not get ready: {lines}")):
            while not lines or lines[-1] != "ready":
                line = proc.stdout.readline().decode()
                assert line, f"erl ended: {lines}"
                lines.append(line.strip())
        # erl registered with our server (ALIVE2 at start, -sname), versions 6 and 5, a normal node
        entry = epmd.lookup("x", epmd_port=p)
        assert entry is not None and (entry.node_type, entry.highest_version, entry.lowest_version) == (77, 6, 5)
        assert epmd.port_please("x", epmd_port=p) == entry.port > 0
        assert ("x", entry.port) in epmd.names(epmd_port=p)
        # and read our NAMES and PORT2 answers
        assert any(line.startswith("names {ok,[") and '{"x",%d}' % entry.port in line and '{"ens_py",4242}' in line
                   for line in lines), lines
        assert "port {port,4242,6}" in lines, lines
        # Erlang's own epmd tool reads our NAMES answer too
        tool = subprocess.run([EPMD, "-port", str(p), "-names"], capture_output=True, timeout=30)
        assert f"up and running on port {p}".encode() in tool.stdout, tool
        assert f"name x at port {entry.port}\n".encode() in tool.stdout, tool
    finally:
        proc.kill()
        proc.wait(timeout=10)
        mine.close()
    # erl's death closed its registering connection: the name is gone
    wait_until(lambda: epmd.port_please("x", epmd_port=p) is None, what="x to be unregistered")


def test_a_node_host_without_epmd_gets_a_daemon_that_outlives_its_starter_and_exits_when_idle():
    """start_daemon starts ensemble's epmd as its own OS process, which serves other callers and
    exits by itself once nothing has been registered for its idle time."""
    s = stdsocket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    daemon = epmd.start_daemon(port=port, idle_exit=1.0)
    assert daemon is not None
    try:
        assert epmd.start_daemon(port=port, idle_exit=1.0) is None  # one answers now: used, not started
        with epmd.register("daemon_test", 4242, epmd_port=port) as reg:
            assert reg.creation > 0
            assert ("daemon_test", 4242) in epmd.names(epmd_port=port)
        assert 0 == daemon.wait(timeout=30)  # idle for a second after the unregistration: it exits
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
