"""fusee's HTTP API for what came after its first routes: updates, resume of a paused run, async
completions, streams and schedules; every route and every error, called as a WSGI app (and the
stream's wait and an update once over a real socket)."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import gevent
import gevent.socket
import pytest

import fusee
import fusee.http as fhttp
from fusee import schedule as fschedule
from fusee.testing import wait_until

from ._ops_interact import ALL as INTERACT
from ._ops_interact import TOKENS, go
from ._ops_workflows import ALL
from .test_http import SEG, Client


@pytest.fixture
def engine(tmp_path):
    eng = fusee.Engine.open(str(tmp_path / "data"), workflows=ALL + INTERACT, shards=2, segment_size=SEG, on_exhausted="pause")
    yield eng
    eng.shutdown()


@pytest.fixture
def client(engine):
    return Client(fhttp.app(engine))


def _err(resp):
    st, body, _ = resp
    return st, body["error"]["code"]


# -- updates -----------------------------------------------------------------------------------


def test_an_update_answers_its_handlers_result_once_per_update_id(engine, client):
    engine.start("chat", "u-1", ["a", "b"])
    st, body, _ = client("POST", "/api/runs/u-1/update", {"name": "add", "value": 2, "update_id": "req-1"})
    assert (st, body) == (200, {"result": 2, "update_id": "req-1"})
    st, body, _ = client("POST", "/api/runs/u-1/update", {"name": "add", "value": 2, "update_id": "req-1"})
    assert (st, body) == (200, {"result": 2, "update_id": "req-1"})  # applied once: the same answer
    st, body, _ = client("POST", "/api/runs/u-1/update", {"name": "add", "value": 5, "timeout": "10s"})
    assert st == 200 and body["result"] == 7 and body["update_id"].startswith("fusee.update/http-")
    d = client("GET", "/api/runs/u-1")[1]
    ups = [e for e in d["timeline"] if e["kind"] == "update"]
    assert [(u["update_id"], u["name"], u["value"], u["status"], u["result"]) for u in ups] == [
        ("req-1", "add", 2, "ok", 2), (body["update_id"], "add", 5, "ok", 7)]
    engine.signal("u-1", go)
    assert engine.result("u-1", timeout=10) == 7


def test_update_errors_map_to_their_statuses(engine, client):
    engine.start("chat", "u-2", ["a"])
    before = len(engine.describe("u-2")["journal"])
    st, body, _ = client("POST", "/api/runs/u-2/update", {"name": "add", "value": None, "update_id": "r-0"})
    assert st == 400 and body["error"]["code"] == "update_rejected" and "no value" in body["error"]["message"]
    assert body["error"]["update_id"] == "r-0"
    st, body, _ = client("POST", "/api/runs/u-2/update", {"name": "nothing", "value": 1})
    assert st == 400 and body["error"]["code"] == "update_rejected"
    assert len(engine.describe("u-2")["journal"]) == before  # a refusal records nothing
    st, body, _ = client("POST", "/api/runs/u-2/update", {"name": "add", "value": "x", "update_id": "r-1"})
    assert st == 422 and body["error"]["code"] == "update_failed" and body["error"]["update_id"] == "r-1"
    assert body["error"]["failure"]["type"] == "ValueError"
    assert client("POST", "/api/runs/u-2/update", {"name": "add", "value": 1})[1]["result"] == 1  # the run went on
    engine.signal("u-2", go)
    engine.result("u-2", timeout=10)
    st, body, _ = client("POST", "/api/runs/u-2/update", {"name": "add", "value": 1})
    assert st == 409 and body["error"]["code"] == "not_running"
    assert _err(client("POST", "/api/runs/nobody/update", {"name": "add", "value": 1})) == (404, "not_found")
    for bad in ({"value": 1}, {"name": ""}, {"name": "add", "update_id": 5}, {"name": "add", "timeout": "soon"},
                {"name": "add", "timeout": 301}, {"name": "add", "colour": 1}, [1]):
        assert _err(client("POST", "/api/runs/u-2/update", bad)) == (400, "bad_request"), bad


def test_an_update_not_answered_in_time_is_504_with_its_update_id(engine, client):
    engine.start("chat", "u-3", ["a"])
    st, body, _ = client("POST", "/api/runs/u-3/update", {"name": "slow", "timeout": 0.2, "update_id": "late"})
    assert st == 504 and body["error"]["code"] == "timeout" and body["error"]["update_id"] == "late"
    assert "same update_id" in body["error"]["message"]
    st, body, _ = client("POST", "/api/runs/u-3/update", {"name": "slow", "timeout": "0.1s", "update_id": "late"})
    assert st == 504 and body["error"]["update_id"] == "late"
    ups = [rec for _, rec in engine.describe("u-3")["journal"] if type(rec).__name__ == "Update"]
    assert [u.id for u in ups] == ["late"]  # sent twice, recorded once


# -- resume ------------------------------------------------------------------------------------


def test_resume_retries_a_paused_run_and_refuses_others(engine, client):
    engine.start("stuck", "p-1", None)
    wait_until(lambda: engine.describe("p-1")["status"] == "paused", 10)
    st, body, _ = client("GET", "/api/runs?status=paused")
    assert st == 200 and [r["id"] for r in body["runs"]] == ["p-1"]
    step = next(e for e in client("GET", "/api/runs/p-1")[1]["timeline"] if e["kind"] == "step")
    assert step["status"] == "paused"
    assert client("POST", "/api/runs/p-1/resume", {})[:2] == (200, {"ok": True})
    assert engine.result("p-1", timeout=10) == 2
    st, body, _ = client("POST", "/api/runs/p-1/resume", {})
    assert st == 409 and body["error"]["code"] == "not_paused" and body["error"]["status"] == "completed"
    engine.start("waiter", "p-2", 1)
    assert _err(client("POST", "/api/runs/p-2/resume", {})) == (409, "not_paused")
    assert _err(client("POST", "/api/runs/nobody/resume", {})) == (404, "not_found")
    assert _err(client("POST", "/api/runs/p-2/resume", {"force": True})) == (400, "bad_request")


# -- async completions -------------------------------------------------------------------------


def test_complete_and_fail_settle_an_async_step_once(engine, client):
    engine.start("external", "a-1", "a-1")
    engine.start("external", "a-2", "a-2")
    wait_until(lambda: "a-1" in TOKENS and "a-2" in TOKENS, 10)
    st, body, _ = client("POST", "/api/completions/complete", {"token": TOKENS["a-1"], "value": {"ok": True}})
    assert (st, body) == (200, {"ok": True})
    assert engine.result("a-1", timeout=10) == {"ok": True}
    st, body, _ = client("POST", "/api/completions/complete", {"token": TOKENS["a-1"], "value": 2})
    assert st == 409 and body["error"]["code"] == "already_settled"
    assert TOKENS["a-1"] not in json.dumps(client("GET", "/api/runs/a-1")[1])  # the secret is never shown
    st, body, _ = client("POST", "/api/completions/fail", {"token": TOKENS["a-2"], "error": {"type": "Rejected", "message": "no"}})
    assert (st, body) == (200, {"ok": True})
    with pytest.raises(fusee.Failed):
        engine.result("a-2", timeout=10)
    assert _err(client("POST", "/api/completions/fail", {"token": TOKENS["a-2"]})) == (409, "already_settled")
    forged = TOKENS["a-1"][:-4] + ("0000" if not TOKENS["a-1"].endswith("0000") else "1111")
    assert _err(client("POST", "/api/completions/complete", {"token": forged, "value": 1})) == (400, "invalid_token")
    assert _err(client("POST", "/api/completions/complete", {"token": "nonsense"})) == (400, "invalid_token")
    for bad in ({}, {"token": ""}, {"token": 7}, {"token": "t", "error": 1}, {"token": "x" * 5000}):
        assert _err(client("POST", "/api/completions/complete", bad)) == (400, "bad_request"), bad
    assert _err(client("POST", "/api/completions/fail", {"token": "t", "value": 1})) == (400, "bad_request")
    assert _err(client("GET", "/api/completions/complete")) == (405, "method_not_allowed")
    assert _err(client("POST", "/api/completions/settle", {})) == (404, "no_route")


def test_completing_a_token_of_an_ended_run_is_not_running(engine, client):
    engine.start("external", "a-3", "a-3")
    wait_until(lambda: "a-3" in TOKENS, 10)
    engine.terminate("a-3", "gone")
    st, body, _ = client("POST", "/api/completions/complete", {"token": TOKENS["a-3"], "value": 1})
    assert st == 409 and body["error"]["code"] == "not_running"


# -- streams -----------------------------------------------------------------------------------


def test_streams_are_listed_and_read_from_an_offset(engine, client):
    engine.start("chat", "s/1", ["Hel", "lo", "!"])
    sid = quote("s/1", safe="")
    wait_until(lambda: client("GET", f"/api/runs/{sid}/streams")[1]["streams"][:1]
               and client("GET", f"/api/runs/{sid}/streams")[1]["streams"][0]["chunks"] == 3, 10)
    st, body, _ = client("GET", f"/api/runs/{sid}/streams")
    assert (st, body) == (200, {"streams": [{"name": "tokens", "chunks": 3, "closed": False, "by_steps": ["generate"]}]})
    st, body, _ = client("GET", f"/api/runs/{sid}/streams/tokens")
    assert (st, body) == (200, {"stream": "tokens", "offset": 0, "chunks": ["Hel", "lo", "!"], "next": 3, "ended": False})
    assert client("GET", f"/api/runs/{sid}/streams/tokens?offset=1&limit=1")[1] == {
        "stream": "tokens", "offset": 1, "chunks": ["lo"], "next": 2, "ended": False}
    assert client("GET", f"/api/runs/{sid}/streams/tokens?offset=3")[1] == {
        "stream": "tokens", "offset": 3, "chunks": [], "next": 3, "ended": False}  # nothing new yet, no wait
    engine.signal("s/1", go)
    engine.result("s/1", timeout=10)
    assert client("GET", f"/api/runs/{sid}/streams/tokens?offset=2")[1] == {
        "stream": "tokens", "offset": 2, "chunks": ["!"], "next": 3, "ended": True}
    assert client("GET", f"/api/runs/{sid}/streams/tokens?offset=3&wait=5")[1]["ended"] is True  # ended: no wait
    assert client("GET", f"/api/runs/{sid}/streams")[1]["streams"][0]["closed"] is True
    assert client("GET", f"/api/runs/{sid}/streams/never")[1] == {
        "stream": "never", "offset": 0, "chunks": [], "next": 0, "ended": True}  # never written: ended with its run


def test_stream_errors(engine, client):
    engine.start("chat", "s-2", ["a"])
    assert _err(client("GET", "/api/runs/nobody/streams")) == (404, "not_found")
    assert _err(client("GET", "/api/runs/nobody/streams/tokens")) == (404, "not_found")
    for qs in ("offset=-1", "offset=x", "limit=0", "limit=10001", "wait=61", "wait=nan", "wait=-1", "colour=1", "offset=1&offset=2"):
        assert _err(client("GET", "/api/runs/s-2/streams/tokens?" + qs)) == (400, "bad_request"), qs
    assert _err(client("GET", "/api/runs/s-2/streams?offset=1")) == (400, "bad_request")
    assert _err(client("POST", "/api/runs/s-2/streams/tokens", {})) == (405, "method_not_allowed")
    assert _err(client("POST", "/api/runs/s-2/streams", {})) == (405, "method_not_allowed")
    assert _err(client("GET", "/api/runs/s-2/streams/tokens/x")) == (404, "no_route")
    assert _err(client("GET", "/api/runs/s-2/streams/%FF")) == (400, "bad_request")


def test_a_stream_read_waits_for_a_new_chunk_over_a_real_socket(tmp_path):
    eng = fusee.Engine.open(str(tmp_path / "d"), workflows=INTERACT, shards=2, segment_size=SEG, http="127.0.0.1:0", http_token="t")
    try:
        eng.start("chat", "w-1", ["a", "b"])
        it = eng.read_stream("w-1", "tokens", 0, timeout=10)
        got = [next(it), next(it)]
        assert got == ["a", "b"]
        # a reader at offset 2 waits; the run's end (after the signal) ends its wait with ended=True
        reader = gevent.spawn(_get, eng.http_url, "/api/runs/w-1/streams/tokens?offset=2&wait=30", "t")
        eng.signal("w-1", go)  # whether the reader waits yet or not, the run's end answers it
        st, body = reader.get(timeout=20)
        assert st == 200 and json.loads(body) == {"stream": "tokens", "offset": 2, "chunks": [], "next": 2, "ended": True}
        st, body = _post(eng.http_url, "/api/runs/w-1/update", {"name": "add", "value": 1}, "t")
        assert st == 409 and json.loads(body)["error"]["code"] == "not_running"
    finally:
        eng.shutdown()


def _request(url: str, method: str, path: str, token: str, data: bytes = b"") -> tuple[int, bytes]:
    host, port = fhttp.parse_addr(url.split("//", 1)[1].rstrip("/"))
    s = gevent.socket.create_connection((host, port), timeout=30)
    head = (f"{method} {path} HTTP/1.0\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    s.sendall(head.encode() + data)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    h, _, body = out.partition(b"\r\n\r\n")
    return int(h.split()[1]), body


def _get(url: str, path: str, token: str) -> tuple[int, bytes]:
    return _request(url, "GET", path, token)


def _post(url: str, path: str, body: object, token: str) -> tuple[int, bytes]:
    return _request(url, "POST", path, token, json.dumps(body).encode())


# -- schedules ---------------------------------------------------------------------------------


def test_schedules_create_list_describe_pause_resume_trigger_delete(engine, client):
    st, body, _ = client("POST", "/api/schedules", {"name": "hourly", "workflow": "kid", "every": "1h", "input": 4})
    assert st == 201 and body["name"] == "hourly" and body["state"] == "active" and body["every"] == 3600.0
    assert body["next"] > time.time() and body["next"] % 3600 == 0
    st, body, _ = client("POST", "/api/schedules", {"name": "night/ly", "workflow": "kid", "cron": "0 2 * * mon-fri",
                                                     "timezone": "Europe/Paris", "overlap": "allow"})
    assert st == 201 and body["cron"] == "0 2 * * mon-fri" and body["timezone"] == "Europe/Paris"
    st, body, _ = client("GET", "/api/schedules")
    assert st == 200 and [s["name"] for s in body["schedules"]] == ["hourly", "night/ly"]
    assert all(s["next"] > time.time() for s in body["schedules"])
    night = quote("night/ly", safe="")
    st, body, _ = client("GET", f"/api/schedules/{night}")
    assert st == 200 and body["name"] == "night/ly" and body["overlap"] == "allow"
    assert client("POST", f"/api/schedules/{night}/pause", {})[:2] == (200, {"ok": True})
    d = client("GET", f"/api/schedules/{night}")[1]
    assert d["state"] == "paused" and d["next"] is None
    assert client("POST", f"/api/schedules/{night}/resume", {})[:2] == (200, {"ok": True})
    assert client("GET", f"/api/schedules/{night}")[1]["state"] == "active"
    st, body, _ = client("POST", "/api/schedules/hourly/trigger", {})
    assert st == 200 and body["id"].startswith("hourly@")
    assert engine.schedule_handle("hourly").result(body["id"], timeout=10) == 8
    wait_until(lambda: client("GET", "/api/schedules/hourly")[1]["recent"], 10)
    assert client("GET", "/api/schedules/hourly")[1]["recent"][0]["id"] == body["id"]
    assert client("DELETE", "/api/schedules/hourly")[:2] == (200, {"ok": True})
    assert [s["name"] for s in client("GET", "/api/schedules")[1]["schedules"]] == ["night/ly"]
    assert engine.result(body["id"]) == 8  # its runs stay
    for method, path in (("GET", "/api/schedules/hourly"), ("DELETE", "/api/schedules/hourly"),
                         ("POST", "/api/schedules/hourly/pause"), ("POST", "/api/schedules/hourly/resume"),
                         ("POST", "/api/schedules/hourly/trigger")):
        assert _err(client(method, path, {} if method == "POST" else None)) == (404, "not_found"), (method, path)


def test_schedule_errors_change_nothing(engine, client):
    assert client("POST", "/api/schedules", {"name": "s", "workflow": "kid", "every": "1h"})[0] == 201
    st, body, _ = client("POST", "/api/schedules", {"name": "s", "workflow": "kid", "every": "1h"})
    assert st == 409 and body["error"]["code"] == "already_exists"
    st, body, _ = client("POST", "/api/schedules", {"name": "t", "workflow": "nope", "every": "1h"})
    assert st == 400 and body["error"]["code"] == "unknown_workflow" and "kid" in body["error"]["registered"]
    assert _err(client("POST", "/api/schedules", {"name": "t", "workflow": fschedule.SCHEDULE_TYPE, "every": "1h"})) == (400, "unknown_workflow")
    before = engine.list()
    bad = [
        {"name": "t", "workflow": "kid"},  # neither cron nor every
        {"name": "t", "workflow": "kid", "cron": "* * * * *", "every": "1h"},
        {"name": "t", "workflow": "kid", "cron": "61 * * * *"},
        {"name": "t", "workflow": "kid", "cron": "* * * * *", "timezone": "Mars/Olympus"},
        {"name": "t", "workflow": "kid", "every": "0.5s"},
        {"name": "t", "workflow": "kid", "every": "1h", "timezone": "UTC"},
        {"name": "t", "workflow": "kid", "every": "1h", "overlap": "sometimes"},
        {"name": "t", "workflow": "kid", "every": "1h", "catchup_window": "1s"},
        {"name": "t", "workflow": "kid", "every": True},
        {"name": "", "workflow": "kid", "every": "1h"},
        {"name": "t", "workflow": "kid", "every": "1h", "colour": 1},
        "hourly",
    ]
    for b in bad:
        assert _err(client("POST", "/api/schedules", b)) == (400, "bad_request"), b
    assert engine.list() == before
    assert _err(client("POST", "/api/schedules/s/pause", {"now": True})) == (400, "bad_request")
    assert _err(client("GET", "/api/schedules?x=1")) == (400, "bad_request")
    assert _err(client("PUT", "/api/schedules")) == (405, "method_not_allowed")
    assert _err(client("POST", "/api/schedules/s")) == (405, "method_not_allowed")
    assert _err(client("GET", "/api/schedules/s/trigger")) == (405, "method_not_allowed")
    assert _err(client("POST", "/api/schedules/s/explode", {})) == (404, "no_route")
    assert _err(client("DELETE", "/api/schedules/s", headers={"Origin": "http://evil.example"})) == (403, "forbidden")
    assert client("GET", "/api/schedules/s")[0] == 200  # still there


def test_a_token_guards_the_new_routes(engine):
    wsgi = fhttp.app(engine, token="s3cret")
    anon = Client(wsgi)
    for method, path in (("POST", "/api/runs/x/update"), ("POST", "/api/runs/x/resume"), ("GET", "/api/runs/x/streams"),
                         ("GET", "/api/runs/x/streams/s"), ("POST", "/api/completions/complete"), ("POST", "/api/completions/fail"),
                         ("GET", "/api/schedules"), ("POST", "/api/schedules"), ("GET", "/api/schedules/s"),
                         ("DELETE", "/api/schedules/s"), ("POST", "/api/schedules/s/trigger")):
        assert _err(anon(method, path, {} if method == "POST" else None)) == (401, "unauthorized"), path
    assert Client(wsgi, "s3cret")("GET", "/api/schedules")[:2] == (200, {"schedules": []})
