"""fusee's HTTP API (fusee.http) over a real engine: every route and every error, called as a WSGI
app, and once over a real socket served by Engine.open(http=...)."""

from __future__ import annotations

import io
import json
import os
from typing import Any
from urllib.parse import quote

import gevent
import gevent.socket
import pytest

import fusee
import fusee.http as fhttp

from ._ops_workflows import ALL, go

SEG = 1 << 20


class Client:
    """Calls a WSGI app the way gevent.pywsgi would (``RAW_URI`` the path as sent)."""

    def __init__(self, wsgi: Any, token: str | None = None) -> None:
        self.wsgi = wsgi
        self.token = token

    def __call__(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                 ctype: str | None = "application/json", headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        p, _, qs = path.partition("?")
        env = {
            "REQUEST_METHOD": method,
            "PATH_INFO": p,
            "RAW_URI": path,
            "QUERY_STRING": qs,
            "CONTENT_LENGTH": str(len(data)) if data else "",
            "wsgi.input": io.BytesIO(data),
            "HTTP_HOST": "127.0.0.1:9",
        }
        if ctype is not None and data:
            env["CONTENT_TYPE"] = ctype
        if self.token:
            env["HTTP_AUTHORIZATION"] = f"Bearer {self.token}"
        for k, v in (headers or {}).items():
            env["HTTP_" + k.upper().replace("-", "_")] = v
        got: dict[str, Any] = {}

        def start_response(status: str, hdrs: list[tuple[str, str]]) -> None:
            got["status"] = int(status.split()[0])
            got["headers"] = dict(hdrs)

        out = b"".join(self.wsgi(env, start_response))
        h = got["headers"]
        if h["Content-Type"] == "application/json" and out:
            return got["status"], json.loads(out), h
        return got["status"], out, h


@pytest.fixture
def engine(tmp_path):
    eng = fusee.Engine.open(str(tmp_path / "data"), workflows=ALL, shards=2, segment_size=SEG)
    yield eng
    eng.shutdown()


@pytest.fixture
def client(engine):
    return Client(fhttp.app(engine))


def _ids(runs: list[dict]) -> list[str]:
    return [r["id"] for r in runs]


def test_start_list_describe_and_the_waiters_whole_life(engine, client):
    st, body, _ = client("POST", "/api/runs", {"type": "waiter", "id": "w-1", "input": 40})
    assert st == 201 and body == {"id": "w-1", "run": 0, "status": "running"}
    st, body, _ = client("GET", "/api/runs")
    assert st == 200 and _ids(body["runs"]) == ["w-1"] and body["total"] == 1 and body["next"] is None
    assert body["runs"][0]["status"] == "running" and body["runs"][0]["started"] > 0
    st, q, _ = client("POST", "/api/runs/w-1/query", {"name": "seen", "arg": [1]})
    assert st == 200 and q == {"result": {"x": 40, "arg": [1]}}
    st, body, _ = client("POST", "/api/runs/w-1/signal", {"name": "go", "value": 2})
    assert (st, body) == (200, {"ok": True})
    assert engine.result("w-1", timeout=10) == 42
    st, d, _ = client("GET", "/api/runs/w-1")
    assert st == 200
    assert (d["status"], d["type"], d["version"], d["input"], d["result"], d["error"]) == ("completed", "waiter", 2, 40, 42, None)
    kinds = [e["kind"] for e in d["timeline"]]
    assert kinds == ["start", "wait", "signal", "step", "end"]
    wait, step, end = d["timeline"][1], d["timeline"][3], d["timeline"][4]
    assert wait["signal"] == "go" and wait["outcome"] == "signal" and wait["value"] == 2
    assert step["name"] == "finish" and step["status"] == "ok" and step["result"] == 42 and len(step["attempts"]) == 1
    assert end["status"] == "completed" and end["result"] == 42 and end["at"] >= d["started"]
    assert "journal" not in d
    st, d, _ = client("GET", "/api/runs/w-1?journal=1")
    assert [r["t"] for r in d["journal"]] == ["start", "wait", "signal", "waited", "step", "done"]


def test_the_timeline_shows_attempts_sleeps_children_and_continue_as_new(engine, client):
    assert client("POST", "/api/runs", {"type": "flaky", "id": "f-1", "input": "f-1"})[0] == 201
    assert engine.result("f-1", timeout=10) == "ok"
    d = client("GET", "/api/runs/f-1")[1]
    step = next(e for e in d["timeline"] if e["kind"] == "step")
    assert [a["outcome"] for a in step["attempts"]] == ["error", "ok"]
    assert step["attempts"][0]["error"]["type"] == "ValueError" and step["attempts"][0]["retry_at"] > 0
    sleep = next(e for e in d["timeline"] if e["kind"] == "sleep")
    assert sleep["name"] == "nap" and sleep["fired"] is True

    assert client("POST", "/api/runs", {"type": "parent", "id": "p/1", "input": 0})[0] == 201
    assert engine.result("p/1", timeout=10) == 2
    st, d, _ = client("GET", "/api/runs/" + quote("p/1", safe=""))
    assert st == 200 and d["id"] == "p/1" and d["run"] >= 1
    assert d["links"]["continued_from"]["run"] == d["run"] - 1 and d["links"]["children"] == [{"id": "p/1/kid", "type": "kid"}]
    child = next(e for e in d["timeline"] if e["kind"] == "child")
    assert child["id"] == "p/1/kid" and child["status"] == "completed" and child["result"] == 2
    kid = client("GET", "/api/runs/" + quote("p/1/kid", safe=""))[1]
    assert kid["links"]["parent"]["id"] == "p/1"

    assert client("POST", "/api/runs", {"type": "boom", "id": "b-1"})[0] == 201
    with pytest.raises(fusee.Failed):
        engine.result("b-1", timeout=10)
    d = client("GET", "/api/runs/b-1")[1]
    assert d["status"] == "failed" and d["error"]["code"] == "failed" and "kaboom" in d["error"]["message"]


def test_list_filters_pages_newest_first_and_hides_fusee_runs(engine, client):
    for i in range(5):
        client("POST", "/api/runs", {"type": "waiter", "id": f"w-{i}", "input": i})
    client("POST", "/api/runs", {"type": "kid", "id": "k-1", "input": 1})
    engine.result("k-1", timeout=10)
    client("POST", "/api/runs", {"type": "waiter", "id": "later", "input": 0, "delay": "1h"})
    everything = client("GET", "/api/runs?limit=1000")[1]["runs"]
    started = [r["started"] for r in everything]
    assert started == sorted(started, reverse=True)
    assert not any(r["type"].startswith("fusee.") for r in everything)
    assert {r["id"]: r["status"] for r in everything}["later"] == "delayed"
    inner = client("GET", "/api/runs?internal=true")[1]["runs"]
    assert "fusee.delay/later" in _ids(inner)
    assert _ids(client("GET", "/api/runs?type=fusee.delay")[1]["runs"]) == ["fusee.delay/later"]
    assert _ids(client("GET", "/api/runs?status=completed")[1]["runs"]) == ["k-1"]
    assert sorted(_ids(client("GET", "/api/runs?type=waiter&status=running")[1]["runs"])) == [f"w-{i}" for i in range(5)]
    # pages of 2 cover the list once, in order
    seen, cursor = [], None
    while True:
        st, body, _ = client("GET", "/api/runs?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert st == 200 and len(body["runs"]) <= 2
        seen += _ids(body["runs"])
        cursor = body["next"]
        if cursor is None:
            break
    assert seen == _ids(everything)


@pytest.mark.parametrize("qs, reason", [
    ("status=sleeping", "status is one of"),
    ("limit=0", "limit is an integer"),
    ("limit=abc", "limit is an integer"),
    ("cursor=%%%", "cursor"),
    ("cursor=bm9wZQ", "cursor"),
    ("colour=red", "unknown query parameter"),
    ("status=running&status=failed", "given twice"),
    ("internal=maybe", "internal is true or false"),
])
def test_a_bad_list_query_is_400_with_the_reason(client, qs, reason):
    st, body, _ = client("GET", "/api/runs?" + qs)
    assert st == 400 and body["error"]["code"] == "bad_request" and reason in body["error"]["message"]


def test_actions_cancel_terminate_and_their_errors(engine, client):
    for id in ("c-1", "t-1"):
        client("POST", "/api/runs", {"type": "waiter", "id": id, "input": 1})
    assert client("POST", "/api/runs/c-1/cancel", {"reason": "no longer needed"})[:2] == (200, {"ok": True})
    with pytest.raises(fusee.Cancelled):
        engine.result("c-1", timeout=10)
    assert client("GET", "/api/runs/c-1")[1]["status"] == "cancelled"
    assert client("POST", "/api/runs/t-1/terminate", {})[:2] == (200, {"ok": True})
    assert client("GET", "/api/runs/t-1")[1]["status"] == "terminated"
    for action, body in (("signal", {"name": "go"}), ("cancel", {}), ("terminate", {"reason": "x"})):
        st, b, _ = client("POST", f"/api/runs/t-1/{action}", body)
        assert st == 409 and b["error"]["code"] == "not_running" and b["error"]["status"] == "terminated"
        st, b, _ = client("POST", f"/api/runs/nobody/{action}", body)
        assert st == 404 and b["error"]["code"] == "not_found"
    assert client("GET", "/api/runs/nobody")[1]["error"]["code"] == "not_found"
    client("POST", "/api/runs", {"type": "waiter", "id": "q-1", "input": 1})
    st, b, _ = client("POST", "/api/runs/q-1/query", {"name": "nothing"})
    assert st == 400 and "answers no query" in b["error"]["message"]


def test_start_errors_change_nothing(engine, client):
    assert client("POST", "/api/runs", {"type": "waiter", "id": "dup", "input": 1})[0] == 201
    st, b, _ = client("POST", "/api/runs", {"type": "waiter", "id": "dup", "input": 1})
    assert st == 409 and b["error"]["code"] == "already_exists"
    st, b, _ = client("POST", "/api/runs", {"type": "waiter", "id": "dup", "input": 1, "id_policy": "attach"})
    assert st == 201 and b["id"] == "dup"
    st, b, _ = client("POST", "/api/runs", {"type": "nope", "id": "n-1"})
    assert st == 400 and b["error"]["code"] == "unknown_workflow" and "waiter" in b["error"]["registered"]
    st, b, _ = client("POST", "/api/runs", {"type": "fusee.delay", "id": "n-2"})
    assert st == 400 and b["error"]["code"] == "unknown_workflow"
    before = engine.list()
    bad = [
        ({"type": "waiter"}, 400, "bad_request"),
        ({"type": "waiter", "id": ""}, 400, "bad_request"),
        ({"type": "waiter", "id": "x", "colour": 1}, 400, "bad_request"),
        ({"type": "waiter", "id": "x", "delay": "soon"}, 400, "bad_request"),
        ({"type": "waiter", "id": "x", "delay": "1m", "at": 5}, 400, "bad_request"),
        ({"type": "waiter", "id": "x", "id_policy": {"on_running": "explode"}}, 400, "bad_request"),
        ([1, 2], 400, "bad_request"),
    ]
    for body, status, code in bad:
        st, b, _ = client("POST", "/api/runs", body)
        assert (st, b["error"]["code"]) == (status, code), body
    raw = [
        (b"{not json", "application/json", 400, "bad_request"),
        (b'{"type": "waiter", "id": "x", "input": NaN}', "application/json", 400, "bad_request"),
        (b"[" * 10_000 + b"]" * 10_000, "application/json", 400, "bad_request"),
        (b'{"type":"waiter","id":"x","input":"' + b"a" * (1 << 20) + b'"}', "application/json", 413, "too_large"),
        (b'{"type": "waiter", "id": "x"}', "text/plain", 415, "unsupported_media_type"),
        (b"\xff\xfe", "application/json", 400, "bad_request"),
    ]
    for data, ctype, status, code in raw:
        st, b, _ = client("POST", "/api/runs", raw=data, ctype=ctype)
        assert (st, b["error"]["code"]) == (status, code), data[:40]
    assert engine.list() == before


def test_routes_methods_origin_and_static_files(client):
    assert client("GET", "/nowhere")[0] == 404
    st, b, _ = client("DELETE", "/api/runs")
    assert st == 405 and b["error"]["code"] == "method_not_allowed"
    assert client("GET", "/api/runs/x/signal")[0] == 405
    st, b, _ = client("POST", "/api/runs", {"type": "waiter", "id": "o-1"}, headers={"Origin": "http://evil.example"})
    assert st == 403 and b["error"]["code"] == "forbidden"
    assert client("POST", "/api/runs", {"type": "waiter", "id": "o-1", "input": 1}, headers={"Origin": "http://127.0.0.1:9"})[0] == 201
    st, page, h = client("GET", "/")
    assert st == 200 and h["Content-Type"].startswith("text/html") and b"ui/app.js" in page
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        st, data, h = client("GET", "/ui/" + name)
        assert st == 200 and h["Content-Type"].startswith(kind) and data
    assert client("GET", "/ui/../setup.cfg")[0] == 404
    assert client("GET", "/api/health")[1] == {"ok": True}
    assert client("GET", "/api/workflows")[1]["workflows"][-1] == {"name": "waiter", "version": 2}
    st, body, _ = client("HEAD", "/api/health")
    assert st == 200 and body == b""


def test_metrics_as_json_and_prometheus_text(engine, client):
    client("POST", "/api/runs", {"type": "kid", "id": "m-1", "input": 1})
    engine.result("m-1", timeout=10)
    st, m, _ = client("GET", "/api/metrics")
    assert st == 200 and m["runs"]["completed"] == 1 and m["records"] >= 3
    st, text, h = client("GET", "/metrics")
    assert st == 200 and h["Content-Type"].startswith("text/plain; version=0.0.4")
    lines = text.decode().splitlines()
    assert 'fusee_runs{status="completed"} 1' in lines
    assert any(line.startswith("fusee_journal_records_total ") for line in lines)
    assert any(line.startswith('fusee_journal_durable_lsn{shard="0"} ') for line in lines)
    for line in lines:  # every sample line is "name{labels} number"
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_a_token_guards_the_api_but_not_the_ui_files(engine):
    wsgi = fhttp.app(engine, token="s3cret")
    anon, wrong, right = Client(wsgi), Client(wsgi, "nope"), Client(wsgi, "s3cret")
    for c in (anon, wrong):
        st, b, h = c("GET", "/api/runs")
        assert st == 401 and b["error"]["code"] == "unauthorized" and h["WWW-Authenticate"].startswith("Bearer")
        assert c("GET", "/metrics")[0] == 401
        assert c("POST", "/api/runs", {"type": "waiter", "id": "a-1"})[0] == 401
    assert anon("GET", "/")[0] == 200 and anon("GET", "/ui/app.js")[0] == 200
    assert right("GET", "/api/runs")[0] == 200
    assert engine.list() == []


def _get(url: str, path: str, token: str | None = None) -> tuple[int, bytes]:
    """A GET over a real socket (gevent's, so the server on this hub answers meanwhile)."""
    host, port = fhttp.parse_addr(url.split("//", 1)[1].rstrip("/"))
    s = gevent.socket.create_connection((host, port), timeout=10)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_engine_open_serves_http_until_shutdown(tmp_path):
    path = str(tmp_path / "data")
    eng = fusee.Engine.open(path, workflows=ALL, shards=2, segment_size=SEG, http="127.0.0.1:0", http_token="t0k")
    try:
        url = eng.http_url
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/")
        with open(os.path.join(path, fhttp.ADDRESS_FILE)) as f:
            assert json.load(f) == {"url": url, "pid": os.getpid()}
        eng.start("waiter", "s-1", 1)
        assert _get(url, "/api/runs", "t0k")[0] == 200
        assert json.loads(_get(url, "/api/runs/s%2F1x", "t0k")[1])["error"]["code"] == "not_found"
        assert _get(url, "/api/runs")[0] == 401
        eng.signal("s-1", go, 1)
        assert eng.result("s-1", timeout=10) == 2
    finally:
        eng.shutdown()
    assert eng.http_url is None and not os.path.exists(os.path.join(path, fhttp.ADDRESS_FILE))
    with pytest.raises(OSError):
        _get(url, "/api/health")


def test_serving_beyond_loopback_needs_a_token(engine):
    with pytest.raises(ValueError, match="needs a token"):
        fhttp.serve(engine, "0.0.0.0:0")
    for bad in ("8080", "host:port", ":80", "h:99999"):
        with pytest.raises(ValueError):
            fhttp.parse_addr(bad)
    assert fhttp.parse_addr("[::1]:80") == ("::1", 80) and fhttp.is_loopback("::1") and fhttp.is_loopback("localhost")
