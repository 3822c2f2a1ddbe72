"""The observer's WSGI application: every route, every refusal, and processes that do not answer.

Most tests call the application directly (a WSGI environ, no socket); the last ones go through
``gevent.pywsgi`` and ``python -m ensemble.observer``.
"""

from __future__ import annotations

import io
import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import gevent

import ensemble as e
from ensemble import application, gen_server, observer, supervisor
from ensemble import sys as esys
from tests.browser import off_hub

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 0.3


def call(app, method, path, headers=None, body=b""):
    """``(status, headers, json or bytes)`` of one request to ``app``."""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "test", "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http",
        "CONTENT_LENGTH": str(len(body)) if body else "",
    }
    for k, v in (headers or {}).items():
        environ["CONTENT_LENGTH" if k == "Content-Length" else "HTTP_" + k.upper().replace("-", "_")] = v
    got = {}

    def start_response(status, hdrs):
        got["status"] = int(status.split()[0])
        got["headers"] = dict(hdrs)

    data = b"".join(app(environ, start_response))
    kind = got["headers"].get("Content-Type", "")
    return got["status"], got["headers"], json.loads(data) if kind == "application/json" and data else data


def url_of(pid):
    return repr(pid)[1:-1]


def parked(fn, *args, **opts):
    """Spawn ``fn`` and wait until it is parked in receive."""
    p = e.spawn(fn, *args, **opts)
    while e.process_info(p, "status") != "waiting":
        e.dispatcher.yield_()
    return p


def wait_for(pattern):
    return e.receive(lambda m: m if m == pattern else e.NOMATCH)


class Counter(gen_server.GenServer):
    def init(self):
        return ("ok", {"count": 41})

    def handle_call(self, request, from_, state):
        if request == "block":
            wait_for("release")
        return ("reply", state, state)


def test_pages_and_static_files():
    app = observer.app()
    for path, kind in [("/", "text/html"), ("/process/0.1.0", "text/html"), ("/static/observer.js", "text/javascript"),
                       ("/static/observer.css", "text/css")]:
        status, headers, body = call(app, "GET", path)
        assert 200 == status and headers["Content-Type"].startswith(kind) and body
        assert "no-store" == headers["Cache-Control"]
    assert b"" == call(app, "HEAD", "/")[2]


def test_the_processes_table_lists_a_spawned_process_with_every_column():
    p = parked(wait_for, "stop", name="observed_one", dispatcher="blocking")
    status, _, doc = call(observer.app(), "GET", "/api/processes")
    assert 200 == status and doc["node"] == e.node() and doc["count"] == len(doc["processes"])
    row = next(r for r in doc["processes"] if r["pid"] == repr(p))
    assert row["name"] == "observed_one" and row["status"] == "waiting" and row["url"] == url_of(p)
    assert row["dispatcher"] == "blocking" and row["carrier"].startswith("blocking-")
    assert row["current_function"].startswith(f"{__name__}.wait_for:") and row["memory"] > 0
    assert row["message_queue_len"] == 0 and row["initial_call"] == f"{__name__}.wait_for/1"


def test_a_process_page_shows_links_monitors_and_state():
    server = gen_server.start(Counter())
    actor = e.spawn_actor(lambda total, n: total + n, 7)
    holder = parked(lambda: (e.link(server), e.monitor(actor), wait_for("stop")))
    app = observer.app(TIMEOUT)
    status, _, doc = call(app, "GET", f"/api/processes/{url_of(holder)}")
    assert 200 == status
    assert [repr(server)] == [r["text"] for r in doc["links"]] and [url_of(server)] == [r["url"] for r in doc["links"]]
    assert [repr(actor)] == [r["text"] for r in doc["monitors"]]
    assert {"kind": "none"} == {"kind": doc["state"]["kind"]}
    _, _, doc = call(app, "GET", f"/api/processes/<{url_of(server)}>")
    assert {"kind": "sys", "module": "Counter", "status": "running", "state": "{'count': 41}"} == doc["state"]
    assert [repr(holder)] == [r["text"] for r in doc["links"]]
    _, _, doc = call(app, "GET", f"/api/processes/{url_of(actor)}")
    assert {"kind": "cell", "state": "7"} == doc["state"] and [repr(holder)] == [r["text"] for r in doc["monitored_by"]]


def test_a_busy_process_gives_a_timeout_not_a_hung_observer():
    """A gen_server stuck in a call does not answer sys.get_status: the page says so after the timeout."""
    server = gen_server.start(Counter())
    caller = e.spawn(gen_server.call, server, "block", None)
    while (e.process_info(server, "current_function") or ("", ""))[1] != "wait_for":
        e.dispatcher.yield_()
    started = time.monotonic()
    status, _, doc = call(observer.app(TIMEOUT), "GET", f"/api/processes/{url_of(server)}")
    assert time.monotonic() - started < 5
    assert 200 == status and "error" == doc["state"]["kind"] and "no answer" in doc["state"]["reason"]
    e.send(server, "release")
    assert {"count": 41} == e.join(caller)
    assert {"count": 41} == esys.get_state(server)  # the late system reply went nowhere harmful


def test_malformed_and_unknown_pids():
    app = observer.app()
    for path in ["/api/processes/abc", "/api/processes/0.01.0", "/process/0.x.0", "/api/processes/" + "9" * 50]:
        status, _, doc = call(app, "GET", path)
        assert 400 == status and "malformed pid" in doc["error"], path
    p = e.spawn(lambda: None)
    e.join(p)
    status, _, doc = call(app, "GET", f"/api/processes/{url_of(p)}")
    assert 404 == status and "exited" in doc["error"]
    assert 404 == call(app, "POST", f"/api/processes/{url_of(p)}/kill", {"X-Ensemble-Observer": "1"})[0]


def test_kill_needs_a_post_with_the_header_and_kills():
    p = parked(wait_for, "stop")
    app = observer.app()
    path = f"/api/processes/{url_of(p)}/kill"
    status, headers, doc = call(app, "GET", path)
    assert (405, "POST") == (status, headers["Allow"])
    status, _, doc = call(app, "POST", path)
    assert 400 == status and "X-Ensemble-Observer" in doc["error"] and e.is_alive(p)
    status, _, doc = call(app, "POST", path, {"X-Ensemble-Observer": "1"})
    assert (200, {"killed": repr(p)}) == (status, doc)
    assert "killed" == e.exit_reason(p, timeout=5)
    me = e.self()
    status, _, doc = call(app, "POST", f"/api/processes/{url_of(me)}/kill", {"X-Ensemble-Observer": "1"})
    assert 400 == status and e.is_alive(me)


def test_bad_requests_get_their_reason():
    app = observer.app()
    assert 400 == call(app, "POST", "/api/processes/0.1.0/kill", {"Content-Length": str(10**9), "X-Ensemble-Observer": "1"})[0]
    status, _, doc = call(app, "POST", "/api/processes/0.1.0/kill", {"X-Ensemble-Observer": "1"}, b"x" * (64 * 1024))
    assert 400 == status and "too large" in doc["error"]
    assert 400 == call(app, "GET", "/", {"Content-Length": "lots"})[0]
    assert 404 == call(app, "GET", "/api/nothing")[0]
    assert 404 == call(app, "GET", "/static/%2e%2e/observer.js")[0]
    status, headers, _ = call(app, "PUT", "/api/processes")
    assert (405, "GET, HEAD") == (status, headers["Allow"])


def blocked_start():
    wait_for("go")


def test_supervision_trees_nest_and_a_busy_supervisor_says_so():
    inner_spec = {"id": "inner", "type": "supervisor", "start": lambda: supervisor.start_link(
        {"strategy": "one_for_all"}, [{"id": "leaf", "start": lambda: gen_server.start_link(Counter())}])}
    top = supervisor.start({"strategy": "one_for_one"},
                           [{"id": "worker", "start": lambda: gen_server.start_link(Counter(), name="observed_worker")},
                            inner_spec], name="observed_top")
    stuck_owner = e.spawn(supervisor.start_link, {"strategy": "one_for_one"}, [{"id": "slow", "start": blocked_start}])
    while not any(e.process_info(p, "initial_call") == ("ensemble.supervisor", "_Supervisor.init", 0)
                  and (e.process_info(p, "current_function") or ("", ""))[1] == "wait_for" for p in e.processes()):
        e.dispatcher.yield_()
    status, _, doc = call(observer.app(TIMEOUT), "GET", "/api/supervision")
    assert 200 == status
    mine = next(t for t in doc["trees"] if t["pid"] == repr(top))
    assert "observed_top" == mine["name"] and "ok" == mine["state"]
    assert ["worker", "inner"] == [c["id"] for c in mine["children"]]
    worker, inner = mine["children"]
    assert ("worker", "observed_worker", []) == (worker["type"], worker["name"], worker["children"])
    assert "supervisor" == inner["type"] and ["leaf"] == [c["id"] for c in inner["children"]]
    assert not any(t["pid"] == inner["pid"] for t in doc["trees"])  # a nested supervisor is no root
    stuck = [t for t in doc["trees"] if t["state"].startswith("no answer")]
    assert 1 == len(stuck) and f"{TIMEOUT:g} s" in stuck[0]["state"]
    assert [] == [m for m in e.process_info(e.self(), "messages")]  # late answers are dropped, not left here
    e.exit(stuck_owner, "kill")


def test_applications_with_their_top_supervisor():
    app = observer.app(TIMEOUT)
    if e.whereis("application_controller") is None:
        assert {"applications": []} == call(app, "GET", "/api/applications")[2]
    tops = []
    application.load({"name": "observed_app", "start": lambda: tops.append(
        supervisor.start_link({"strategy": "one_for_one"}, [])) or tops[-1]})
    application.start("observed_app")
    try:
        status, _, doc = call(app, "GET", "/api/applications")
        assert 200 == status
        assert {"name": "observed_app", "supervisor": {"text": repr(tops[0]), "url": url_of(tops[0])}} in doc["applications"]
    finally:
        application.stop("observed_app")


def test_dispatchers_show_the_load_of_each_carrier():
    e.dispatcher.define("observed_io", 2)
    try:
        ps = [parked(wait_for, "stop", dispatcher="observed_io") for _ in range(3)]
        status, _, doc = call(observer.app(), "GET", "/api/dispatchers")
        assert 200 == status and "default" == doc["dispatchers"][0]["name"]
        io_ = next(d for d in doc["dispatchers"] if d["name"] == "observed_io")
        assert 3 == io_["processes"] and [2, 1] == [c["processes"] for c in io_["carriers"]]
        assert ["observed_io-0", "observed_io-1"] == [c["name"] for c in io_["carriers"]]
        for p in ps:
            e.send(p, "stop")
    finally:
        e.dispatcher.shutdown("observed_io")


def fetch(url, method="GET", data=None):
    req = urllib.request.Request(url, method=method, data=data)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_served_by_pywsgi_garbage_never_stops_it():
    server = observer.serve("127.0.0.1:0", log=None)
    try:
        base = f"http://127.0.0.1:{server.address[1]}"
        p = parked(wait_for, "stop")
        status, doc = off_hub(fetch, base + "/api/processes")
        assert 200 == status and repr(p) in [r["pid"] for r in doc["processes"]]

        def garbage():
            with socket.create_connection(("127.0.0.1", server.address[1]), timeout=5) as s:
                s.sendall(b"\x00\xff NOT HTTP\r\n\r\n")
                return s.recv(100)

        assert off_hub(garbage).startswith(b"HTTP/1.1 400")
        assert 400 == off_hub(fetch, base + "/api/processes/bogus")[0]
        assert 200 == off_hub(fetch, base + "/api/dispatchers")[0]
    finally:
        server.stop()


def test_python_m_ensemble_observer_serves_this_node():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, "-m", "ensemble.observer", "--http", "nowhere:99999"],
                         capture_output=True, text=True, timeout=60, env=env, cwd=str(ROOT))
    assert 2 == bad.returncode and "out of range" in bad.stderr
    proc = subprocess.Popen([sys.executable, "-m", "ensemble.observer", "--http", "127.0.0.1:0", "--demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(ROOT))
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "python -m ensemble.observer printed nothing"
        line = proc.stdout.readline().decode()
        assert line.startswith("observer: http://127.0.0.1:")
        base = line.split()[1].rstrip("/")
        status, doc = fetch(base + "/api/supervision")
        assert 200 == status and "demo_sup" == doc["trees"][0]["name"]
        assert ["counter", "workers"] == [c["id"] for c in doc["trees"][0]["children"]]
        assert "demo" == fetch(base + "/api/applications")[1]["applications"][0]["name"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
