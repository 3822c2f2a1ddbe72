"""examples/stage_api.py, the stage HTTP API: every route and every error over real HTTP (gevent.pywsgi on
loopback), its pure routing, and the script serving on --http."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import gevent.socket
import pytest

import ensemble as e
from gevent.pywsgi import WSGIServer

ROOT = Path(__file__).resolve().parents[1]


def load_example():
    """examples/stage_api.py as the module ``stage_api_example`` (examples are scripts, not a package)."""
    if "stage_api_example" not in sys.modules:
        spec = importlib.util.spec_from_file_location("stage_api_example", ROOT / "examples" / "stage_api.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["stage_api_example"] = module
        spec.loader.exec_module(module)
    return sys.modules["stage_api_example"]


api_example = load_example()


def http(server, method, path):
    """One request over a real socket (gevent's, so the server on this hub answers meanwhile):
    ``(status, content type, body)``, the body parsed when it is JSON."""
    host, port = server.address[:2]
    s = gevent.socket.create_connection((host, port), timeout=10)
    s.sendall(f"{method} {path} HTTP/1.0\r\nHost: {host}:{port}\r\nContent-Length: 0\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert "no-store" == headers["cache-control"]
    assert str(len(body)) == headers["content-length"]
    kind = headers["content-type"]
    return int(lines[0].split()[1]), kind, json.loads(body) if kind == "application/json" else body.decode()


def serve(api):
    server = WSGIServer(("127.0.0.1", 0), api_example.app(api), log=None)
    server.start()
    return server


@pytest.fixture
def served():
    api = api_example.StageApi(log=False)
    server = serve(api)
    yield api, server
    server.stop()
    if e.is_alive(api.stage.pid):  # a test may have stopped it already
        api.stop()


JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


# ---- every route over HTTP --------------------------------------------------------------


def test_the_reference_flow(served):
    """The reference README: POST /events/42, POST /demand/1, GET /consumed -> {"events":[42]}."""
    _, server = served
    assert (202, JSON, {"queued": 42}) == http(server, "POST", "/events/42")
    assert (202, JSON, {"demand": 1}) == http(server, "POST", "/demand/1")
    assert (200, JSON, {"events": [42]}) == http(server, "GET", "/consumed")


def test_events_wait_for_demand_and_arrive_in_order(served):
    _, server = served
    for n in (1, 2, 3):
        assert 202 == http(server, "POST", f"/events/{n}")[0]
    assert (200, JSON, {"events": []}) == http(server, "GET", "/consumed")
    http(server, "POST", "/demand/2")
    assert {"events": [1, 2]} == http(server, "GET", "/consumed")[2]
    http(server, "POST", "/demand/5")  # 3 arrives; 4 more stay asked for
    assert (202, JSON, {"queued": -7}) == http(server, "POST", "/events/-7")
    assert (202, JSON, {"queued": 8}) == http(server, "POST", "/events/+8")
    assert {"events": [1, 2, 3, -7, 8]} == http(server, "GET", "/consumed")[2]


def test_the_method_is_not_checked_and_a_trailing_slash_is_the_same_route(served):
    _, server = served
    assert (202, JSON, {"queued": 5}) == http(server, "GET", "/events/5/")
    assert (202, JSON, {"demand": 1}) == http(server, "PUT", "/demand/1")
    assert (200, JSON, {"events": [5]}) == http(server, "DELETE", "/consumed")


# ---- every error over HTTP --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/events/abc", "/demand/1.5", "/events/0x10", "/demand/%D9%A3", "/events/-",
                                  "/events/" + "9" * 31, "/demand/1e3"])
def test_not_an_integer_is_400_expected_an_integer(served, path):
    api, server = served
    assert (400, TEXT, "expected an integer") == http(server, "POST", path)
    assert [] == api.consumer.state()  # nothing was pushed


@pytest.mark.parametrize("path", ["/", "/events", "/events/1/2", "/demand", "/consumed/x", "/nothing", "/api/state"])
def test_any_other_path_is_404_not_found(served, path):
    _, server = served
    assert (404, TEXT, "not found") == http(server, "GET", path)


def test_a_refused_demand_is_400_with_the_library_error(served):
    _, server = served
    assert (400, TEXT, "InvalidDemand(0)") == http(server, "POST", "/demand/0")
    assert (400, TEXT, "InvalidDemand(-3)") == http(server, "POST", "/demand/-3")
    http(server, "POST", "/events/1")
    http(server, "POST", "/demand/1")
    assert {"events": [1]} == http(server, "GET", "/consumed")[2]  # the refusals changed nothing


def test_a_push_past_the_buffer_capacity_is_400_with_the_library_error():
    api = api_example.StageApi(buffer_capacity=1, log=False)
    server = serve(api)
    try:
        assert 202 == http(server, "POST", "/events/1")[0]
        assert (400, TEXT, "BufferCapacityExceeded(1, 2)") == http(server, "POST", "/events/2")
        http(server, "POST", "/demand/5")
        assert {"events": [1]} == http(server, "GET", "/consumed")[2]
    finally:
        server.stop()
        api.stop()


def test_a_stopped_stage_and_consumer_are_400_with_the_library_error(served):
    api, server = served
    api.stop()  # the consumer is cancelled and stops with it
    assert e.exit_reason(api.consumer.pid, timeout=5) is not e.TIMEOUT
    status, kind, body = http(server, "POST", "/events/1")
    assert (400, TEXT, True) == (status, kind, body.startswith("StageUnavailable("))
    status, kind, body = http(server, "POST", "/demand/1")
    assert (400, TEXT, True) == (status, kind, body.startswith("StageUnavailable("))
    status, kind, body = http(server, "GET", "/consumed")
    assert (400, TEXT, True) == (status, kind, body.startswith("ConsumerUnavailable("))


# ---- the pure part ------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("0", 0), ("42", 42), ("-7", -7), ("+8", 8), ("007", 7), ("9" * 30, int("9" * 30)),
                                         ("", None), ("-", None), ("+-1", None), ("1_000", None), (" 1", None),
                                         ("١", None), ("9" * 31, None)])
def test_parse_int(text, value):
    assert value == api_example.parse_int(text)


def test_route_and_answer():
    route, answer = api_example.route, api_example.answer
    assert ("push", 3) == route("/events/3")
    assert ("ask", 2) == route("//demand//2")
    assert ("consumed",) == route("/consumed")
    assert ("bad_integer",) == route("/demand/x")
    assert ("not_found",) == route("/events/x/y")
    assert (202, JSON, b'{"queued": 3}') == answer(("push", 3), ("ok", None))
    assert (400, TEXT, b"ValueError('no')") == answer(("ask", 1), ("error", ValueError("no")))


# ---- the script ---------------------------------------------------------------------------


def test_the_script_serves_on_its_http_address():
    """python examples/stage_api.py --http 127.0.0.1:0 prints its URL and answers there (a separate process)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "examples" / "stage_api.py"), "--http", "127.0.0.1:0", "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.startswith("constellation stage API: http://127.0.0.1:"), (line, proc.stderr.read())
        url = line.split(": ", 1)[1].strip().rstrip("/")
        req = urllib.request.Request(url + "/events/42", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert (202, {"queued": 42}) == (r.status, json.load(r))
        with urllib.request.urlopen(urllib.request.Request(url + "/demand/1", method="POST"), timeout=10) as r:
            assert 202 == r.status
        with urllib.request.urlopen(url + "/consumed", timeout=10) as r:
            assert {"events": [42]} == json.load(r)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_a_bad_address_or_capacity_is_a_usage_error():
    for argv in (["--http", "nowhere:port"], ["--buffer-capacity", "0", "--http", "127.0.0.1:0"]):
        with pytest.raises(SystemExit) as info:
            api_example.main(argv)
        assert 2 == info.value.code
