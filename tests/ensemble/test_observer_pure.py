"""The observer's decisions, pure: pids in URLs, routes and refusals, the JSON shaping, supervision trees, addresses."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.observer import address, pids, routes, shape, tree
from ensemble.observer.pids import MalformedPid, parse_pid, pid_id, url_text
from ensemble.observer.routes import MAX_BODY, Refusal, Route, route

PURE = ["pids", "routes", "shape", "tree", "address"]
ALLOWED_IMPORTS = {"__future__", "re", "reprlib", "dataclasses", "typing", "collections"}


@pytest.mark.parametrize("name", PURE)
def test_the_decision_modules_import_nothing_effectful(name):
    """pids, routes, shape, tree and address import only pure standard modules and each other."""
    path = Path(shape.__file__).with_name(f"{name}.py")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            assert {a.name.split(".")[0] for a in node.names} <= ALLOWED_IMPORTS, (name, ast.dump(node))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            assert node.module.split(".")[0] in ALLOWED_IMPORTS, (name, node.module)
        elif isinstance(node, ast.ImportFrom):
            assert node.module in PURE, (name, node.module)


def dumps(doc) -> str:
    return json.dumps(doc, allow_nan=False)


# ---- pids -------------------------------------------------------------------

numbers = st.integers(min_value=0, max_value=10**pids.MAX_DIGITS - 1)


@given(numbers)
def test_a_pid_number_reads_back_from_both_forms(n):
    """0.N.0 and <0.N.0> both read as N; url_text of the printed pid is the short form."""
    assert n == parse_pid(f"0.{n}.0") == parse_pid(f"<0.{n}.0>")
    assert f"0.{n}.0" == url_text(f"<0.{n}.0>")
    assert n == pid_id(f"<0.{n}.0>")


@given(st.one_of(st.text(max_size=60), st.from_regex(r"<?0\.[0-9]{1,25}\.0>?", fullmatch=True), st.integers(), st.none()))
def test_any_text_is_a_pid_number_or_a_malformed_pid(text):
    """parse_pid answers N only for the canonical forms of N, else raises MalformedPid with a reason."""
    try:
        n = parse_pid(text)
    except MalformedPid as err:
        assert err.reason
        return
    assert text in (f"0.{n}.0", f"<0.{n}.0>")


@pytest.mark.parametrize("text", ["", "0.1", "1", "<0.1.0", "0.1.0>", "0.01.0", "0.-1.0", "0.1.1", "node@h.1.2",
                                  "0.١.0", "0.1.0\n", " 0.1.0", "0." + "9" * 19 + ".0", "<<0.1.0>>"])
def test_these_are_malformed_pids(text):
    with pytest.raises(MalformedPid):
        parse_pid(text)


# ---- routes -------------------------------------------------------------------

@given(st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "get", ""]) | st.text(max_size=10),
       st.text(max_size=80) | st.sampled_from(["/", "/api/processes", "/api/processes/0.1.0", "/process/<0.2.0>",
                                              "/api/processes/0.3.0/kill", "/static/observer.js", "/static/x"]),
       st.none() | st.text(max_size=14) | st.integers(0, 10**9).map(str),
       st.none() | st.just("1"))
def test_any_request_is_a_route_or_a_refusal_with_a_reason(method, path, length, header):
    """route never raises; a refusal is 400, 404 or 405 with a reason (405s say what is allowed)."""
    got = route(method, path, length, header)
    if isinstance(got, Refusal):
        assert got.status in (400, 404, 405) and got.reason
        assert (got.allow is not None) == (got.status == 405)
    else:
        assert isinstance(got, Route)
        assert method in ("GET", "HEAD", "POST")
        if got.pid is not None:
            assert f"0.{got.pid}.0" in path
        if got.kind == "static":
            assert got.name in routes.STATIC
        if got.kind == "kill":
            assert method == "POST" and header


@given(st.integers(MAX_BODY + 1, 10**15))
def test_a_body_over_the_limit_is_refused_with_400(n):
    got = route("POST", "/api/processes/0.1.0/kill", str(n), "1")
    assert got == Refusal(400, f"request body too large: at most {MAX_BODY} bytes")


def test_the_routes():
    assert Route("index") == route("GET", "/")
    assert Route("processes") == route("GET", "/api/processes")
    assert Route("process", pid=7) == route("GET", "/api/processes/0.7.0")
    assert Route("process", pid=7) == route("GET", "/api/processes/<0.7.0>")
    assert Route("process_page", pid=7) == route("GET", "/process/0.7.0")
    assert Route("kill", pid=7) == route("POST", "/api/processes/0.7.0/kill", "0", "1")
    assert Route("static", name="observer.css") == route("GET", "/static/observer.css")
    for kind in ["supervision", "applications", "dispatchers"]:
        assert Route(kind) == route("GET", f"/api/{kind}")
    assert 400 == route("GET", "/api/processes/zz").status
    assert 400 == route("POST", "/api/processes/0.7.0/kill").status  # no X-Ensemble-Observer header
    assert 404 == route("GET", "/static/../../etc/passwd").status
    assert 404 == route("GET", "/nope").status
    assert (405, "POST") == (route("GET", "/api/processes/0.7.0/kill").status, route("GET", "/api/processes/0.7.0/kill").allow)
    assert 405 == route("DELETE", "/api/processes").status
    assert 400 == route("GET", "/" + "a" * 5000).status
    assert 400 == route("GET", "/", "-1").status


# ---- shape ----------------------------------------------------------------------

class Hostile:
    def __repr__(self):
        raise RuntimeError("no")

    def __eq__(self, other):
        raise RuntimeError("no")

    __hash__ = object.__hash__


terms = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30) | st.binary(max_size=20)
    | st.builds(Hostile) | st.just(float("nan")) | st.just(10**100),
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner) | st.tuples(inner, inner, inner)
    | st.tuples(st.sampled_from(["ensemble.supervisor", "app"]), st.sampled_from(["X.init", "loop"]), inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=30,
)
info_keys = st.sampled_from(["registered_name", "status", "message_queue_len", "messages", "links", "monitors",
                             "monitored_by", "trap_exit", "initial_call", "ancestors", "dispatcher", "carrier",
                             "exit_pending", "current_function", "memory"])


@given(terms, st.integers(3, 5000))
def test_show_is_bounded_text_for_any_term(x, limit):
    text = shape.show(x, limit)
    assert type(text) is str and len(text) <= limit


@given(st.dictionaries(info_keys, terms), terms)
def test_any_process_info_shapes_into_valid_json(info, state):
    """process_row and process_detail give JSON (no NaN, no huge ints) for any values under any keys."""
    row = shape.process_row("<0.5.0>", info)
    detail = shape.process_detail("<0.5.0>", info, state)
    dumps(row)
    dumps(detail)
    assert row["pid"] == detail["pid"] == "<0.5.0>" and row["url"] == "0.5.0"
    for n in (row["memory"], row["message_queue_len"]):
        assert n is None or (type(n) is int and abs(n) < 2**53)
    assert shape.process_row("<0.5.0>", None) is None


def test_a_process_row_from_a_real_answer():
    info = {"registered_name": "db", "status": "waiting", "message_queue_len": 2, "memory": 3000,
            "dispatcher": "blocking", "carrier": "blocking-3", "current_function": ("app.db", "Db.loop", 42),
            "initial_call": ("app.db", "Db.init", 0)}
    assert {"pid": "<0.9.0>", "url": "0.9.0", "name": "db", "status": "waiting", "message_queue_len": 2,
            "memory": 3000, "dispatcher": "blocking", "carrier": "blocking-3", "current_function": "app.db.Db.loop:42",
            "initial_call": "app.db.Db.init/0", "supervisor": False} == shape.process_row("<0.9.0>", info)


@given(terms)
def test_is_supervisor_only_for_a_supervisors_initial_call(call):
    assert not shape.is_supervisor(call) or (call[0] == "ensemble.supervisor" and shape.is_behaviour(call))
    assert shape.is_supervisor(("ensemble.supervisor", "_Supervisor.init", 0))
    assert shape.is_behaviour(("app", "Counter.init", 0)) and not shape.is_behaviour(("app", "loop", 0))


placements = st.lists(st.tuples(st.sampled_from(["default", "blocking", "io", "gone"]),
                                st.sampled_from(["default", "blocking-0", "blocking-2", "blocking-10", "io-1"])) | terms,
                      max_size=40)


@given(st.lists(st.sampled_from(["default", "blocking", "io", "x"]), max_size=5), placements)
def test_dispatcher_load_counts_every_placement_once(defined, places):
    """Each dispatcher once, the defined ones first in their order; carrier counts add up to the placements."""
    load = shape.dispatcher_load(defined, places)
    dumps(load)
    names = [d["name"] for d in load]
    assert len(names) == len(set(names))
    assert names[: len(dict.fromkeys(defined))] == list(dict.fromkeys(defined))
    well_formed = [p for p in places if type(p) is tuple and len(p) == 2]
    assert sum(c["processes"] for d in load for c in d["carriers"]) == len(well_formed)
    for d in load:
        assert d["processes"] == sum(c["processes"] for c in d["carriers"])
        assert [c["name"] for c in d["carriers"]] == sorted((c["name"] for c in d["carriers"]), key=shape.natural_key)
        assert d["defined"] == (d["name"] in defined)


def test_carriers_sort_naturally():
    load = shape.dispatcher_load(["blocking"], [("blocking", "blocking-10"), ("blocking", "blocking-2"), ("blocking", "blocking-2")])
    assert [{"name": "blocking-2", "processes": 2}, {"name": "blocking-10", "processes": 1}] == load[0]["carriers"]


def test_idle_carriers_are_listed_with_no_process():
    load = shape.dispatcher_load(["default", "io"], [("io", "io-1")], {"io": ["io-0", "io-1"], "gone": ["x"]})
    io = next(d for d in load if d["name"] == "io")
    assert io["carriers"] == [{"name": "io-0", "processes": 0}, {"name": "io-1", "processes": 1}]
    assert io["processes"] == 1
    assert all(d["name"] != "gone" for d in load), "only defined dispatchers get idle carriers"


# ---- tree ----------------------------------------------------------------------------

sup_ids = st.integers(1, 8).map(lambda n: f"<0.{n}.0>")
rows = st.lists(st.tuples(st.text(max_size=3), sup_ids | st.integers(20, 30).map(lambda n: f"<0.{n}.0>")
                          | st.sampled_from(["restarting", None]), st.sampled_from(["worker", "supervisor"]), st.just([])),
                max_size=4)
answers = st.dictionaries(sup_ids, st.tuples(st.just("ok"), rows) | st.tuples(st.just("error"), st.text(max_size=10))
                          | st.tuples(st.just("ok"), st.lists(st.tuples(terms, terms | sup_ids, terms, terms), max_size=3)) | terms)


def nodes(forest):
    stack = list(forest)
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n["children"])


@given(st.lists(sup_ids, max_size=8), answers)
def test_every_supervisor_is_drawn_once_whatever_the_answers_say(sups, ans):
    """Cycles, children under two supervisors, missing answers: each supervisor found is expanded exactly once."""
    forest = tree.build_forest(sups, ans)
    dumps(forest)
    for s in set(sups):
        assert 1 == sum(1 for n in nodes(forest) if n["pid"] == s and n["state"] != "shown above"), s
    assert all(n["children"] == [] for n in nodes(forest) if n["pid"] not in set(sups))
    total_rows = sum(len(tree.child_rows(ans.get(s)) or ()) for s in set(sups))
    assert sum(1 for _ in nodes(forest)) <= len(set(sups)) + total_rows


@given(st.integers(1, 6), st.randoms(use_true_random=False))
def test_an_acyclic_tree_is_drawn_as_answered(n, rnd):
    """A real tree (each supervisor under at most one parent) comes back with the same parent/child edges."""
    sups = [f"<0.{i}.0>" for i in range(1, n + 1)]
    parent = {s: (rnd.choice(sups[:i]) if i and rnd.random() < 0.8 else None) for i, s in enumerate(sups)}
    ans = {s: ("ok", [(f"c{k}", k, "supervisor", []) for k in sups if parent[k] == s] + [("w", f"<0.{100 + i}.0>", "worker", [])])
           for i, s in enumerate(sups)}
    forest = tree.build_forest(sups, ans, {"<0.1.0>": "top"})
    assert [t["pid"] for t in forest] == [s for s in sups if parent[s] is None]
    edges = {(k["pid"], c["pid"]) for k in nodes(forest) for c in k["children"] if c["type"] == "supervisor"}
    assert edges == {(p, s) for s, p in parent.items() if p is not None}
    assert all(len(k["children"]) == 1 + sum(1 for s in sups if parent[s] == k["pid"]) for k in nodes(forest) if k["type"] == "supervisor")
    if parent["<0.1.0>"] is None:
        assert forest[0]["name"] == "top"


def test_a_supervisor_that_did_not_answer_says_so():
    forest = tree.build_forest(["<0.1.0>"], {"<0.1.0>": ("error", "no answer within 1 s")})
    assert "no answer: no answer within 1 s" == forest[0]["state"] and [] == forest[0]["children"]
    forest = tree.build_forest(["<0.1.0>"], {"<0.1.0>": ("ok", [("w", "restarting", "worker", []), ("v", None, "worker", [])])})
    assert ["restarting", "undefined"] == [c["state"] for c in forest[0]["children"]]


def test_a_deep_chain_does_not_recurse():
    sups = [f"<0.{i}.0>" for i in range(1, 5001)]
    ans = {s: ("ok", [("next", sups[i + 1], "supervisor", [])] if i + 1 < len(sups) else []) for i, s in enumerate(sups)}
    forest = tree.build_forest(sups, ans)
    assert 1 == len(forest) and 5000 == sum(1 for _ in nodes(forest))


# ---- address -----------------------------------------------------------------------

hosts = st.sampled_from(["127.0.0.1", "localhost", "0.0.0.0", "::1", "example.org"])


@given(hosts, st.integers(0, 65535))
def test_an_address_reads_back(host, port):
    assert (host, port) == address.parse_address(address.format_address(host, port))


@given(st.text(max_size=30) | st.integers() | st.none())
def test_any_text_is_an_address_or_bad_address(text):
    try:
        host, port = address.parse_address(text)
    except address.BadAddress as err:
        assert str(err)
        return
    assert 0 <= port <= 65535 and host


def test_loopback_is_the_default_host():
    assert ("127.0.0.1", 8091) == address.parse_address(":8091") == address.parse_address("8091")
    for bad in ["host:", "host:70000", "::1:80", "a b:80", "[::1:80"]:
        with pytest.raises(address.BadAddress):
            address.parse_address(bad)
