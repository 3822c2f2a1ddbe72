"""Laws of the HTTP API's pure decisions (fusee.http_api, fusee.timeline, fusee.metrics_text):
whatever a client sends, validation answers with the typed BadRequest and nothing else; paging
covers every matching run once, newest first."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import http_api as api
from fusee import records as r
from fusee.errors import Failed
from fusee.metrics_text import prometheus
from fusee.timeline import error_json, plain, timeline, view

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _only_bad_request(fn, *args):
    try:
        return fn(*args)
    except api.BadRequest as exc:
        assert exc.status in (400, 404, 405, 413, 415) and exc.code and exc.message
        return None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_a_list_query_string_is_accepted_or_a_bad_request(qs):
    q = _only_bad_request(api.parse_list_query, qs)
    if q is not None:
        assert 1 <= q.limit <= api.MAX_LIMIT and (q.status is None or q.status in api.LIST_STATUSES)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()), st.sampled_from(["application/json", "text/plain", None]))
def test_a_body_is_json_or_a_bad_request(data, ctype):
    _only_bad_request(api.parse_body, data, ctype, 200)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_arguments_from_any_json_are_typed_or_a_bad_request(body):
    for fn in (api.start_args, api.signal_args, api.reason_arg, api.query_args):
        _only_bad_request(fn, body)
    a = _only_bad_request(api.start_args, body)
    if a is not None:
        assert type(a.type) is str and type(a.id) is str and a.on_running in ("fail", "attach", "terminate")
    from fusee.schedule import check_spec

    for fn in (api.update_args, api.no_args, lambda b: api.schedule_args(b, check_spec), lambda b: api.token_args(b, "value")):
        _only_bad_request(fn, body)
    u = _only_bad_request(api.update_args, body)
    if u is not None:
        assert type(u.name) is str and 0 <= u.timeout <= api.MAX_WAIT and (u.update_id is None or type(u.update_id) is str)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=5), "workflow": st.sampled_from(["w", "", 3]),
    "cron": st.sampled_from(["* * * * *", "0 2 * * mon-fri", "61 * * * *", "@daily", "x", 5]),
    "every": st.sampled_from(["1h", "0.5s", "15m", 60, -1, "soon", True]),
    "timezone": st.sampled_from(["UTC", "Europe/Paris", "Mars/Olympus"]),
    "overlap": st.sampled_from(["skip", "buffer_one", "allow", "sometimes"]),
    "catchup_window": st.sampled_from(["1s", "1d", 30, None]),
    "input": json_values,
}))
def test_schedule_arguments_are_a_valid_spec_or_a_bad_request(body):
    from fusee import schedule

    a = _only_bad_request(api.schedule_args, body, schedule.check_spec)
    if a is not None:  # what passed makes a spec the engine accepts
        spec = schedule.make_spec(a.name, a.workflow, a.input, a.cron, a.every, a.timezone, a.overlap,
                                  schedule.DEFAULT_CATCHUP if a.catchup_window is None else a.catchup_window)
        assert (spec.cron is None) != (spec.every is None)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60) | st.builds(lambda o, l, w: f"offset={o}&limit={l}&wait={w}", st.integers(-2, 9), st.integers(-1, 20000), st.floats(-1, 100)))
def test_a_stream_query_is_bounded_or_a_bad_request(qs):
    q = _only_bad_request(api.parse_stream_query, qs)
    if q is not None:
        assert q.offset >= 0 and 1 <= q.limit <= api.MAX_STREAM_LIMIT and 0 <= q.wait <= api.MAX_STREAM_WAIT


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD"]), st.text(max_size=80))
def test_any_path_routes_or_is_a_bad_request(method, path):
    got = _only_bad_request(api.route, method, path)
    if got is not None and got.id is not None:
        assert 1 <= len(got.id) <= api.MAX_ID


@given(st.text(min_size=1, max_size=50))
def test_an_id_is_one_percent_encoded_segment(id):
    from urllib.parse import quote

    assert api.route("GET", "/api/runs/" + quote(id, safe="")) == api.Route("describe", id)
    assert api.route("POST", "/api/runs/" + quote(id, safe="") + "/signal") == api.Route("signal", id)
    assert api.route("GET", "/api/runs/" + quote(id, safe="") + "/streams/" + quote(id, safe="")) == api.Route("stream", id, key=id)
    assert api.route("DELETE", "/api/schedules/" + quote(id, safe="")) == api.Route("schedule_delete", key=id)
    assert api.route("POST", "/api/schedules/" + quote(id, safe="") + "/trigger") == api.Route("schedule_trigger", key=id)


@given(st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40))
def test_a_cursor_round_trips(started, id):
    assert api.decode_cursor(api.encode_cursor(started, id)) == (started, id)


runs = st.lists(
    st.fixed_dictionaries({
        "id": st.text(min_size=1, max_size=6),
        "type": st.sampled_from(["a", "b", "fusee.delay"]),
        "status": st.sampled_from(["running", "completed", "failed"]),
        "started": st.integers(0, 20).map(float),
    }),
    max_size=30,
    unique_by=lambda d: d["id"],
)


@settings(max_examples=200, deadline=None)
@given(runs, st.integers(1, 7), st.sampled_from([None, "running", "completed"]), st.sampled_from([None, "a", "fusee.delay"]), st.booleans())
def test_pages_cover_the_matching_runs_once_newest_first(all_runs, limit, status, wtype, internal):
    q = api.ListQuery(status, wtype, limit, None, internal)
    seen: list[dict] = []
    total = None
    while True:
        got, nxt, n = api.page(all_runs, q)
        total = n if total is None else total
        assert len(got) <= limit and n == total
        seen += got
        if nxt is None:
            break
        q = api.ListQuery(status, wtype, limit, api.decode_cursor(nxt), internal)
    want = [d for d in all_runs if (status is None or d["status"] == status)
            and (d["type"] == wtype if wtype else internal or not d["type"].startswith("fusee."))]
    assert sorted(d["id"] for d in seen) == sorted(d["id"] for d in want) and len(seen) == total
    keys = [(d["started"], d["id"]) for d in seen]
    assert keys == sorted(keys, reverse=True)


def test_the_routes_of_updates_completions_streams_and_schedules():
    assert api.route("POST", "/api/runs/x/update") == api.Route("update", "x")
    assert api.route("POST", "/api/runs/x/resume") == api.Route("resume", "x")
    assert api.route("GET", "/api/runs/x/streams") == api.Route("streams", "x")
    assert api.route("HEAD", "/api/runs/x/streams/s") == api.Route("stream", "x", key="s")
    assert api.route("POST", "/api/completions/complete") == api.Route("complete")
    assert api.route("POST", "/api/completions/fail") == api.Route("fail")
    assert api.route("GET", "/api/schedules") == api.Route("schedules")
    assert api.route("POST", "/api/schedules") == api.Route("schedule_create")
    assert api.route("GET", "/api/schedules/n") == api.Route("schedule", key="n")
    for action in ("pause", "resume", "trigger"):
        assert api.route("POST", f"/api/schedules/n/{action}") == api.Route("schedule_" + action, key="n")
    for method, path, status in (("GET", "/api/runs/x/update", 405), ("DELETE", "/api/runs/x/streams", 405),
                                 ("PUT", "/api/schedules/n", 405), ("GET", "/api/completions/complete", 405),
                                 ("POST", "/api/completions", 404), ("POST", "/api/schedules/n/delete", 404),
                                 ("GET", "/api/runs/x/streams/", 400), ("GET", "/api/schedules/%FF", 400)):
        with pytest.raises(api.BadRequest) as info:
            api.route(method, path)
        assert info.value.status == status, (method, path)


def test_every_fusee_error_code_has_a_fitting_status():
    from fusee.errors import CODES

    for code in CODES:
        assert 400 <= api.status_of(code) < 600
    assert api.status_of("not_found") == 404 and api.status_of("already_exists") == 409 and api.status_of("busy") == 503
    assert [api.status_of(c) for c in ("update_rejected", "update_failed", "not_paused", "invalid_token", "already_settled", "timeout")] == [
        400, 422, 409, 400, 409, 504]


def test_the_routes_and_statuses_of_objects():
    assert api.route("GET", "/api/objects") == api.Route("objects")
    assert api.route("HEAD", "/api/objects/cart/a%2Fb") == api.Route("object", key="a/b", type="cart")
    assert api.route("POST", "/api/objects/cart/a/call") == api.Route("object_call", key="a", type="cart")
    assert api.route("PUT", "/api/objects/cart/a/state/n%20b") == api.Route("object_set", key="a", type="cart", field="n b")
    assert api.route("DELETE", "/api/objects/cart/a/state/n") == api.Route("object_clear", key="a", type="cart", field="n")
    assert api.route("DELETE", "/api/objects/cart/a/state") == api.Route("object_clear", key="a", type="cart")
    for method, path, status in (("POST", "/api/objects", 405), ("DELETE", "/api/objects/cart/a", 405),
                                 ("GET", "/api/objects/cart/a/call", 405), ("GET", "/api/objects/cart/a/state", 405),
                                 ("POST", "/api/objects/cart/a/state/n", 405), ("GET", "/api/objects/cart", 404),
                                 ("GET", "/api/objects/", 404), ("POST", "/api/objects/cart/a/run", 404),
                                 ("PUT", "/api/objects/cart/a/state/n/m", 404), ("GET", "/api/objects/cart/%FF", 400),
                                 ("GET", "/api/objects//a", 400), ("PUT", "/api/objects/cart/a/state/", 400)):
        with pytest.raises(api.BadRequest) as info:
            api.route(method, path)
        assert info.value.status == status, (method, path)
    assert [api.status_of(c) for c in ("unknown_object_type", "unknown_handler", "call_failed", "version_mismatch", "read_only_state")] == [
        404, 404, 422, 409, 500]


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_an_object_type_key_and_value_name_are_one_segment_each(t, key, field):
    from urllib.parse import quote

    base = f"/api/objects/{quote(t, safe='')}/{quote(key, safe='')}"
    assert api.route("GET", base) == api.Route("object", key=key, type=t)
    assert api.route("POST", base + "/call") == api.Route("object_call", key=key, type=t)
    assert api.route("PUT", f"{base}/state/{quote(field, safe='')}") == api.Route("object_set", key=key, type=t, field=field)


@settings(max_examples=150, deadline=None)
@given(json_values | st.fixed_dictionaries({}, optional={
    "handler": st.sampled_from(["add", "", 3, None]), "arg": json_values, "call_id": st.sampled_from(["c-1", "", 7, None]),
    "timeout": st.sampled_from([0, 0.5, "10s", 300, 301, "soon", -1, True]), "value": json_values,
    "version": st.sampled_from([0, 3, -1, 1.5, True, "1", None, 1 << 63]),
}))
def test_object_call_and_edit_arguments_are_typed_or_a_bad_request(body):
    c = _only_bad_request(api.call_args, body)
    if c is not None:
        assert type(c.handler) is str and c.handler and 0 <= c.timeout <= api.MAX_WAIT
        assert c.call_id is None or (type(c.call_id) is str and c.call_id)
    for to_set in (True, False):
        a = _only_bad_request(api.edit_args, body, to_set)
        if a is not None:
            assert a.version is None or (type(a.version) is int and 0 <= a.version <= api.MAX_VERSION)
            assert 0 <= a.timeout <= api.MAX_WAIT and (to_set or a.value is None)
            assert not to_set or "value" in body


def test_the_timeline_of_records_in_journal_order():
    journal = [
        (1, r.Start(0, "x", "t", 1, 10.0, {"a": 1}, ["fail", "fail"], None, {"id": "p", "run": 3}, {"run": 4})),
        (2, r.Attempt(0, 0, "s", 1, 12.0, {"type": "E", "message": "m"})),
        (3, r.Step(0, 0, "s", 2, "ok", (1, 2))),
        (4, r.Timer(0, 1, "nap", 20.0)),
        (5, r.Cancel(0, "why", None)),
        (6, r.Fired(0, 1)),
        (7, r.Child(0, 2, "kid", "k", 5, "terminate", None)),
        (8, r.ChildDone(0, 2, "failed", {"type": "E"})),
        (9, r.Send(0, 3, "other", "hey", 1)),
        (10, r.Value(0, 4, "now", 33.0)),
        (11, r.Done(0, "continued", 40.0, 2)),
    ]
    tl = timeline(journal)
    assert [e["kind"] for e in tl] == ["start", "step", "sleep", "cancel", "child", "send", "value", "end"]
    assert tl[0]["continued_from"] == 4 and tl[0]["parent"] == {"id": "p", "run": 3}
    assert [a["outcome"] for a in tl[1]["attempts"]] == ["error", "ok"] and tl[1]["result"] == [1, 2]
    assert tl[2]["fired"] is True and tl[4]["failure"] == {"type": "E"} and tl[7]["next_input"] == 2
    v = view({"id": "x", "status": "continued", "input": {"a": 1}, "result": None, "error": None, "journal": journal})
    assert v["links"] == {"parent": {"id": "p", "run": 3}, "continued_from": {"run": 4}, "continued_as_new": True,
                          "children": [{"id": "kid", "type": "k"}]}
    json.dumps(v, allow_nan=False)


def test_a_runs_streams_from_its_records():
    from fusee.timeline import streams

    journal = [
        (1, r.Start(0, "x", "t", 1, 10.0, None, None)),
        (2, r.Chunk(0, 0, "out", 0, None, "a")),
        (3, r.Chunk(0, 1, "log", 0, "gen", 1)),
        (4, r.Chunk(0, 1, "out", 1, "gen", "b")),
        (5, r.StreamClose(0, 2, "out", None)),
    ]
    assert streams(journal) == [{"name": "out", "chunks": 2, "closed": True, "by_steps": ["gen"]},
                                {"name": "log", "chunks": 1, "closed": False, "by_steps": ["gen"]}]
    assert streams([]) == []


def test_values_and_errors_become_json():
    assert plain((1, {"a": 2})) == [1, {"a": 2}]
    assert plain({1, 2})["$repr"].startswith("{")
    e = error_json(Failed({"type": "X", "message": "m"}))
    assert e["code"] == "failed" and e["failure"] == {"type": "X", "message": "m"}


@given(st.dictionaries(st.sampled_from(["records", "flushes", "runs", "journal", "runs_parked"]), json_values, max_size=5))
def test_prometheus_text_never_raises(m):
    text = prometheus(m)
    assert text.endswith("\n")
