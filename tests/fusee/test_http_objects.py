"""fusee's HTTP API for virtual objects: list the types, read a key's state, call a handler, edit the
state (set one value, clear one or all, with a version check); every route and every error, called as
a WSGI app, and a call and an edit once over a real socket."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

import fusee
import fusee.http as fhttp

from ._kit import COUNTS, count
from .test_http import SEG, Client
from .test_http_interact import _request


def deposit(ctx, amount):
    """Adds ``amount`` (an int, else ValueError: nothing committed) to the balance; counted once per run."""
    count(f"deposit-{ctx.key}-{ctx.call_id}")
    if type(amount) is not int:
        raise ValueError(f"deposit takes an int, not {amount!r}")
    ctx.state.set("balance", ctx.state.get("balance", 0) + amount)
    return ctx.state.get("balance")


def _fragile(s):
    if s.attempt == 1:
        raise RuntimeError("the bank is closed")
    return s.attempt


def slow(ctx, _):
    """Holds the key's turn for an hour (its step's first attempt fails, the retry waits)."""
    return ctx.step("later", _fragile, retry=fusee.Retry(attempts=2, initial="1h"))


def balance(ctx, _):
    return ctx.state.get("balance", 0)


def sneaky(ctx, _):
    ctx.state.set("balance", 10**6)


def define(eng):
    eng.object_type("account").exclusive("deposit", deposit).exclusive("slow", slow).shared("balance", balance).shared("sneaky", sneaky)
    eng.object_type("audit").shared("ping", lambda ctx, _: "pong")


@pytest.fixture
def engine(tmp_path):
    eng = fusee.Engine.open(str(tmp_path / "data"), workflows=[], shards=2, segment_size=SEG)
    define(eng)
    yield eng
    eng.shutdown()


@pytest.fixture
def client(engine):
    return Client(fhttp.app(engine))


def _err(resp):
    st, body, _ = resp
    return st, body["error"]["code"]


ALICE = "/api/objects/account/" + quote("alice/eu", safe="")  # a key holding "/": one segment


def test_the_object_types_are_listed_with_their_handlers(engine, client, tmp_path):
    st, body, _ = client("GET", "/api/objects")
    assert (st, body) == (200, {"objects": [
        {"type": "account", "handlers": [{"name": "balance", "kind": "shared"}, {"name": "deposit", "kind": "exclusive"},
                                         {"name": "slow", "kind": "exclusive"}, {"name": "sneaky", "kind": "shared"}]},
        {"type": "audit", "handlers": [{"name": "ping", "kind": "shared"}]}]})
    assert _err(client("GET", "/api/objects?type=account")) == (400, "bad_request")
    assert _err(client("POST", "/api/objects", {})) == (405, "method_not_allowed")
    bare = fusee.Engine.open(str(tmp_path / "bare"), workflows=[], shards=1, segment_size=SEG)
    try:
        assert Client(fhttp.app(bare))("GET", "/api/objects")[:2] == (200, {"objects": []})
    finally:
        bare.shutdown()


def test_a_call_answers_its_result_once_per_call_id(engine, client):
    st, body, _ = client("POST", ALICE + "/call", {"handler": "deposit", "arg": 5, "call_id": "req-1"})
    assert (st, body) == (200, {"result": 5, "call_id": "req-1"})
    st, body, _ = client("POST", ALICE + "/call", {"handler": "deposit", "arg": 5, "call_id": "req-1", "timeout": "10s"})
    assert (st, body) == (200, {"result": 5, "call_id": "req-1"})  # run once: the same answer
    assert COUNTS["deposit-alice/eu-req-1"] == 1
    st, body, _ = client("POST", ALICE + "/call", {"handler": "deposit", "arg": 2})
    assert st == 200 and body["result"] == 7 and body["call_id"].startswith("fusee.call/http-")
    st, body, _ = client("POST", ALICE + "/call", {"handler": "balance"})  # shared: the last commit
    assert st == 200 and body["result"] == 7 and body["call_id"].startswith("fusee.call/http-")
    assert client("POST", "/api/objects/audit/x/call", {"handler": "ping", "call_id": "p"})[:2] == (200, {"result": "pong", "call_id": "p"})
    assert engine.object("account", "alice/eu").state() == fusee.StateView({"balance": 7}, 2)


def test_the_state_is_read_as_committed(engine, client):
    st, body, _ = client("GET", ALICE)
    assert (st, body) == (200, {"type": "account", "key": "alice/eu", "id": "fusee.object/account/alice/eu", "values": {}, "version": 0})
    engine.object("account", "alice/eu").call("deposit", 3)
    st, body, _ = client("GET", ALICE)
    assert st == 200 and (body["values"], body["version"]) == ({"balance": 3}, 1)
    assert client("HEAD", ALICE)[:2] == (200, b"")
    st, body, _ = client("GET", "/api/objects/nothing/alice")
    assert (st, body["error"]["code"], body["error"]["registered"]) == (404, "unknown_object_type", ["account", "audit"])
    assert _err(client("GET", ALICE + "?journal=1")) == (400, "bad_request")
    assert _err(client("GET", "/api/objects/account/%FF")) == (400, "bad_request")
    assert _err(client("GET", "/api/objects/account/")) == (400, "bad_request")
    assert _err(client("GET", "/api/objects/account")) == (404, "no_route")
    assert _err(client("POST", ALICE, {})) == (405, "method_not_allowed")


def test_call_errors_map_to_their_statuses_and_record_nothing(engine, client):
    st, body, _ = client("POST", ALICE + "/call", {"handler": "deposit", "arg": "lots", "call_id": "bad-1"})
    assert st == 422 and body["error"]["code"] == "call_failed" and body["error"]["call_id"] == "bad-1"
    assert body["error"]["failure"]["type"] == "ValueError"
    st, body, _ = client("POST", ALICE + "/call", {"handler": "deposit", "arg": 1, "call_id": "bad-1"})
    assert st == 422 and body["error"]["failure"]["type"] == "ValueError"  # its answer, again: not run again
    assert client("GET", ALICE)[1]["version"] == 0  # a handler that raised commits nothing
    st, body, _ = client("POST", ALICE + "/call", {"handler": "withdraw", "arg": 1})
    assert (st, body["error"]["code"]) == (404, "unknown_handler")
    assert body["error"]["handlers"] == ["balance", "deposit", "slow", "sneaky"]
    st, body, _ = client("POST", "/api/objects/bank/alice/call", {"handler": "deposit", "arg": 1})
    assert (st, body["error"]["code"], body["error"]["registered"]) == (404, "unknown_object_type", ["account", "audit"])
    st, body, _ = client("POST", ALICE + "/call", {"handler": "sneaky"})
    assert (st, body["error"]["code"]) == (500, "read_only_state")
    for bad in ({}, {"arg": 1}, {"handler": ""}, {"handler": 7}, {"handler": "deposit", "call_id": ""},
                {"handler": "deposit", "call_id": 3}, {"handler": "deposit", "timeout": "soon"},
                {"handler": "deposit", "timeout": 301}, {"handler": "deposit", "colour": 1}, [1], "deposit"):
        assert _err(client("POST", ALICE + "/call", bad)) == (400, "bad_request"), bad
    assert _err(client("POST", ALICE + "/call", raw=b"{", ctype="application/json")) == (400, "bad_request")
    assert _err(client("POST", ALICE + "/call", raw=b'{"handler":"deposit"}', ctype="text/plain")) == (415, "unsupported_media_type")
    assert _err(client("POST", ALICE + "/call", {"handler": "deposit", "arg": 1}, headers={"Origin": "http://evil.example"})) == (403, "forbidden")
    assert _err(client("GET", ALICE + "/call")) == (405, "method_not_allowed")
    assert _err(client("POST", ALICE + "/explode", {})) == (404, "no_route")
    assert client("GET", ALICE)[1]["version"] == 0 and COUNTS == {"deposit-alice/eu-bad-1": 1}  # the refused ones ran nothing


def test_a_call_not_answered_in_time_is_504_with_its_call_id(engine, client):
    held = "/api/objects/account/held"
    st, body, _ = client("POST", held + "/call", {"handler": "slow", "timeout": 0.1, "call_id": "late"})
    assert st == 504 and body["error"]["code"] == "timeout" and body["error"]["call_id"] == "late"
    assert "same call_id" in body["error"]["message"]
    st, body, _ = client("POST", held + "/call", {"handler": "slow", "timeout": "0.1s"})
    assert st == 504 and body["error"]["call_id"].startswith("fusee.call/http-")
    st, body, _ = client("PUT", held + "/state/note", {"value": 1, "timeout": 0.1})  # waits for the held turn
    assert st == 504 and body["error"]["code"] == "timeout"
    assert client("GET", held)[1]["version"] == 0  # a read does not wait
    ups = [rec for _, rec in engine.describe("fusee.object/account/held")["journal"] if type(rec).__name__ == "Update"]
    assert ups[0].id == "late"


def test_the_state_is_edited_with_a_version_check(engine, client):
    engine.object("account", "alice/eu").call("deposit", 3)
    st, body, _ = client("PUT", ALICE + "/state/note", {"value": {"vip": True}})
    assert (st, body) == (200, {"version": 2})
    st, body, _ = client("PUT", ALICE + "/state/" + quote("a/b c", safe=""), {"value": None, "version": 2, "timeout": "5s"})
    assert (st, body) == (200, {"version": 3})
    assert client("GET", ALICE)[1]["values"] == {"balance": 3, "note": {"vip": True}, "a/b c": None}
    before = len(engine.describe("fusee.object/account/alice/eu")["journal"])
    st, body, _ = client("PUT", ALICE + "/state/note", {"value": 1, "version": 2})
    assert (st, body["error"]["code"], body["error"]["version"], body["error"]["expected"]) == (409, "version_mismatch", 3, 2)
    st, body, _ = client("DELETE", ALICE + "/state", {"version": 0})
    assert (st, body["error"]["code"]) == (409, "version_mismatch")
    assert len(engine.describe("fusee.object/account/alice/eu")["journal"]) == before  # refused: nothing recorded
    assert client("DELETE", ALICE + "/state/note", {"version": 3})[:2] == (200, {"version": 4})
    assert client("GET", ALICE)[1]["values"] == {"balance": 3, "a/b c": None}
    assert client("DELETE", ALICE + "/state/never")[:2] == (200, {"version": 5})  # no body: any version
    assert client("DELETE", ALICE + "/state")[:2] == (200, {"version": 6})
    assert client("GET", ALICE)[1] == {"type": "account", "key": "alice/eu", "id": "fusee.object/account/alice/eu", "values": {}, "version": 6}
    assert client("POST", ALICE + "/call", {"handler": "deposit", "arg": 1})[1]["result"] == 1  # handlers see the edits
    assert client("PUT", "/api/objects/account/bob/state/x", {"value": 1})[:2] == (200, {"version": 1})  # a new key


def test_edit_errors_change_nothing(engine, client):
    engine.object("account", "alice/eu").call("deposit", 3)
    for bad in ({}, {"version": 1}, {"value": 1, "version": -1}, {"value": 1, "version": 1.5}, {"value": 1, "version": True},
                {"value": 1, "version": "1"}, {"value": 1, "timeout": "soon"}, {"value": 1, "colour": 1}, [1]):
        assert _err(client("PUT", ALICE + "/state/x", bad)) == (400, "bad_request"), bad
    for bad in ({"value": 1}, {"version": -1}, {"timeout": 1000}, "all"):
        assert _err(client("DELETE", ALICE + "/state", bad)) == (400, "bad_request"), bad
    assert _err(client("PUT", ALICE + "/state/x")) == (415, "unsupported_media_type")  # a PUT needs its JSON body
    assert _err(client("PUT", ALICE + "/state/x", raw=b'{"value":1}', ctype="text/plain")) == (415, "unsupported_media_type")
    assert _err(client("DELETE", ALICE + "/state", raw=b'{"version":1}', ctype="text/plain")) == (415, "unsupported_media_type")
    assert _err(client("DELETE", ALICE + "/state", headers={"Origin": "http://evil.example"})) == (403, "forbidden")
    assert _err(client("PUT", ALICE + "/state/x", {"value": 1}, headers={"Origin": "http://evil.example"})) == (403, "forbidden")
    assert _err(client("PUT", "/api/objects/bank/alice/state/x", {"value": 1})) == (404, "unknown_object_type")
    assert _err(client("DELETE", "/api/objects/bank/alice/state")) == (404, "unknown_object_type")
    assert _err(client("PUT", ALICE + "/state", {"value": 1})) == (405, "method_not_allowed")
    assert _err(client("GET", ALICE + "/state/x")) == (405, "method_not_allowed")
    assert _err(client("PUT", ALICE + "/state/%FF", {"value": 1})) == (400, "bad_request")
    assert _err(client("PUT", ALICE + "/state/x/y", {"value": 1})) == (404, "no_route")
    assert client("GET", ALICE)[1]["values"] == {"balance": 3} and client("GET", ALICE)[1]["version"] == 1


def test_a_token_guards_the_object_routes(engine):
    wsgi = fhttp.app(engine, token="s3cret")
    anon = Client(wsgi)
    for method, path in (("GET", "/api/objects"), ("GET", ALICE), ("POST", ALICE + "/call"), ("PUT", ALICE + "/state/x"),
                         ("DELETE", ALICE + "/state/x"), ("DELETE", ALICE + "/state")):
        assert _err(anon(method, path, {} if method in ("POST", "PUT") else None)) == (401, "unauthorized"), (method, path)
    assert Client(wsgi, "wrong")("GET", "/api/objects")[0] == 401
    assert Client(wsgi, "s3cret")("GET", ALICE)[:2] == (200, {"type": "account", "key": "alice/eu", "id": "fusee.object/account/alice/eu",
                                                             "values": {}, "version": 0})
    assert engine.object("account", "alice/eu").state().version == 0  # nothing the refused requests did


def test_a_call_and_an_edit_over_a_real_socket(tmp_path):
    eng = fusee.Engine.open(str(tmp_path / "d"), workflows=[], shards=2, segment_size=SEG, http="127.0.0.1:0", http_token="t")
    try:
        define(eng)
        st, body = _request(eng.http_url, "POST", "/api/objects/account/s/call", "t", json.dumps({"handler": "deposit", "arg": 4}).encode())
        assert st == 200 and json.loads(body)["result"] == 4
        st, body = _request(eng.http_url, "PUT", "/api/objects/account/s/state/balance", "t", json.dumps({"value": 9, "version": 1}).encode())
        assert (st, json.loads(body)) == (200, {"version": 2})
        st, body = _request(eng.http_url, "DELETE", "/api/objects/account/s/state/balance", "t")
        assert (st, json.loads(body)) == (200, {"version": 3})
        st, body = _request(eng.http_url, "GET", "/api/objects/account/s", "t")
        assert st == 200 and json.loads(body)["values"] == {}
    finally:
        eng.shutdown()
