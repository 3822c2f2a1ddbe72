"""examples/dashboard.py, the traffic observatory: its pure model (hypothesis laws against a simulated
stage), its routes, and its HTTP answers over the real stage, producer and consumer."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]


def load_example():
    """examples/dashboard.py as the module ``dashboard_example`` (examples are scripts, not a package)."""
    if "dashboard_example" not in sys.modules:
        spec = importlib.util.spec_from_file_location("dashboard_example", ROOT / "examples" / "dashboard.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["dashboard_example"] = module
        spec.loader.exec_module(module)
    return sys.modules["dashboard_example"]


dash = load_example()

REFERENCE_FIELDS = {"revision", "pushed", "received", "outstanding_demand", "buffered", "last_events", "activities",
                    "producer", "consumer", "subscription", "producer_pid", "stage_pid", "consumer_pid", "active",
                    "running", "run_total", "run_pushed", "run_received", "rejected_pushes", "backpressured",
                    "buffer_capacity"}


class SimStage:
    """A stage with one subscription, as constellation's demand dispatch behaves: FIFO, bounded, delivering on demand."""

    def __init__(self, capacity):
        self.capacity, self.buffer, self.demand, self.next_id = capacity, deque(), 0, 1

    def push(self, n):
        if len(self.buffer) + n > self.capacity:
            return None
        self.buffer.extend(range(self.next_id, self.next_id + n))
        self.next_id += n
        return self.dispatch()

    def ask(self, n):
        self.demand += n
        return self.dispatch()

    def dispatch(self):
        k = min(self.demand, len(self.buffer))
        self.demand -= k
        return tuple(self.buffer.popleft() for _ in range(k))


def tick(m, stage):
    """One run tick as the Dashboard process carries it out."""
    n = dash.tick_push(m)
    if n:
        out = stage.push(n)
        m = dash.refused(m, n) if out is None else dash.pushed(m, n, True)
        if out:
            m = dash.delivered(m, out)
    n = dash.tick_ask(m)
    if n:
        m = dash.asked(m, n)
        out = stage.ask(n)
        if out:
            m = dash.delivered(m, out)
    return m


def check(m):
    assert 0 <= m.received <= m.pushed and m.outstanding_demand >= 0
    assert 0 <= m.run_received <= m.run_pushed <= m.run_total
    assert len(m.activities) <= dash.KEPT_ACTIVITIES and len(m.last_events) <= dash.KEPT_EVENTS
    assert [a.sequence for a in m.activities] == list(range(m.sequence - len(m.activities) + 1, m.sequence + 1))
    assert {a.kind for a in m.activities} <= set(dash.KINDS)
    json.dumps(dash.state_json(m))


ops = st.lists(st.one_of(st.tuples(st.just("run"), st.integers(-5, 60_000)), st.just(("tick",)), st.just(("stop",)),
                         st.tuples(st.just("push"), st.integers(1, 30_000)), st.tuples(st.just("ask"), st.integers(1, 30_000))),
               max_size=40)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(1_000, 40_000))
def test_any_sequence_of_actions_keeps_the_counts_honest(actions, capacity):
    """Whatever the browser does: counts never go negative, received never passes pushed, every event arrives once."""
    m, stage = dash.Model(capacity=capacity), SimStage(capacity)
    for op in actions:
        try:
            if op[0] == "run":
                m = dash.start_run(m, op[1])
            elif op[0] == "tick":
                m = tick(m, stage)
            elif op[0] == "stop":
                m = dash.stop_run(m)
            elif op[0] == "push":
                dash.manual(m)
                out = stage.push(op[1])
                m = dash.refused(m, op[1]) if out is None else dash.pushed(m, op[1], False)
                if out:
                    m = dash.delivered(m, out)
            else:
                dash.manual(m)
                m = dash.asked(m, op[1])
                out = stage.ask(op[1])
                if out:
                    m = dash.delivered(m, out)
        except dash.Refused as err:
            assert str(err)
        check(m)
        assert m.duplicates == m.gaps == 0
        assert dash.buffered(m) == len(stage.buffer)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400_000), st.sampled_from([80_000, 20_000, 10_000]))
def test_a_run_completes_with_every_event_once_and_fills_the_buffer(total, capacity):
    """A run of any size ends, complete, within its ticks; a run bigger than the buffer meets back-pressure."""
    m, stage = dash.start_run(dash.Model(capacity=capacity), total), SimStage(capacity)
    for _ in range(2 * total // dash.ASK_BATCH + 10):
        if not m.running:
            break
        m = tick(m, stage)
        check(m)
    assert not m.running and m.run_received == m.run_pushed == m.run_total == total == m.received
    assert (m.duplicates, m.gaps, m.completed_runs) == (0, 0, 1) and m.activities[-1].kind == "COMPLETE"
    if total >= 2 * capacity + dash.PUSH_BATCH:  # pushes gain 5,000 a tick on demand: full before the run is pushed
        assert m.rejected_pushes >= 1


def test_the_reference_preset_fills_the_buffer_and_drains():
    """500,000 events through a buffer of 80,000: back-pressure at the top, then the stage drains."""
    m, stage = dash.start_run(dash.Model(), 500_000), SimStage(dash.BUFFER_CAPACITY)
    peak, kinds = 0, set()
    while m.running:
        m = tick(m, stage)
        peak = max(peak, dash.buffered(m))
        kinds |= {a.kind for a in m.activities}
    assert peak > dash.BUFFER_CAPACITY - dash.PUSH_BATCH and 0 == dash.buffered(m)
    assert {"RUN", "PUSH", "PRESSURE", "DEMAND", "DELIVER", "COMPLETE"} <= kinds
    assert m.rejected_pushes > 0 and m.received == 500_000


def test_delivery_out_of_order_is_counted():
    m = dash.delivered(dash.Model(), (1, 2, 3))
    m = dash.delivered(m, (3, 6))
    assert (m.duplicates, m.gaps, m.next_expected) == (1, 2, 7)


def test_start_run_refusals():
    with pytest.raises(dash.Refused, match="positive"):
        dash.start_run(dash.Model(), 0)
    running = dash.start_run(dash.Model(), 10)
    with pytest.raises(dash.Refused, match="already"):
        dash.start_run(running, 10)
    with pytest.raises(dash.Refused, match="buffer holds 5"):
        dash.start_run(dash.pushed(dash.Model(), 5, False), 10)
    with pytest.raises(dash.Refused, match="no run"):
        dash.stop_run(dash.Model())


@given(st.text(max_size=30) | st.sampled_from(["/api/push/5000", "/api/run/500000", "/api/ask/0", "/api/run/stop",
                                               "/api/push/99999999999", "/api/push/-1", "/api/push/٣"]))
def test_any_path_is_a_route_or_invalid_amount(path):
    try:
        got = dash.route(path)
    except dash.Refused as err:
        assert "invalid amount" == str(err)
        return
    assert got[0] in ("page", "static", "state", "push", "ask", "run", "stop", "not_found")
    if got[0] in ("push", "ask", "run"):
        assert 0 < got[1] <= dash.MAX_RUN and path.endswith("/" + str(got[1]))


# ---- HTTP over the real processes ---------------------------------------------------------

def request(app, path, method="POST"):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO(b"")}
    got = {}

    def start_response(status, headers):
        got["status"], got["headers"] = int(status.split()[0]), dict(headers)

    body = b"".join(app(environ, start_response))
    assert "no-store" == got["headers"]["Cache-Control"]
    kind = got["headers"]["Content-Type"]
    return got["status"], json.loads(body) if kind == "application/json" else body


@pytest.fixture
def observatory():
    obs = dash.Observatory(tick=0.002)
    yield obs
    obs.stop()


def test_the_http_answers(observatory):
    app = dash.app(observatory)
    status, page = request(app, "/", "GET")
    assert 200 == status and b"RUN 500,000 EVENTS" in page
    assert 200 == request(app, "/static/dashboard.js", "GET")[0]
    status, s = request(app, "/api/state", "GET")
    assert 200 == status and REFERENCE_FIELDS <= set(s) and 80_000 == s["buffer_capacity"]
    assert ["PROCESS"] * 3 == [a["kind"] for a in s["activities"]] and s["active"]
    assert (400, {"error": "invalid amount"}) == request(app, "/api/push/abc")
    assert (400, {"error": "invalid amount"}) == request(app, "/api/ask/0")
    assert (404, {"error": "not found"}) == request(app, "/api/nothing")
    status, s = request(app, "/api/push/50000")
    assert (200, 50_000, 50_000) == (status, s["pushed"], s["buffered"])
    status, doc = request(app, "/api/push/50000")  # 100,000 > 80,000: refused whole
    assert 400 == status and "back-pressure" in doc["error"]
    status, s = request(app, "/api/state", "GET")
    assert (1, True, 50_000) == (s["rejected_pushes"], s["backpressured"], s["pushed"])
    status, doc = request(app, "/api/run/1000")
    assert 400 == status and "buffer holds 50000" in doc["error"]
    status, s = request(app, "/api/ask/50000")
    assert (200, 50_000) == (status, s["outstanding_demand"])
    status, s = request(app, "/api/state", "GET")  # the deliveries came before this request, in the mailbox
    assert (50_000, 0, 0) == (s["received"], s["buffered"], s["outstanding_demand"])
    assert list(range(49_983, 50_001)) == s["last_events"]
    status, s = request(app, "/api/run/20000")
    assert 200 == status and s["running"]
    status, doc = request(app, "/api/push/5000")
    assert 400 == status and "run is running" in doc["error"]
    s = observatory.call("await_idle")[1]
    assert (70_000, 70_000, 20_000, 0, 0) == (s["pushed"], s["received"], s["run_received"], s["duplicates"], s["gaps"])
    assert (400, {"error": "no run is running"}) == request(app, "/api/run/stop")


def test_a_run_can_be_stopped(observatory):
    app = dash.app(observatory)
    status, s = request(app, "/api/run/1000000")
    assert 200 == status
    status, s = request(app, "/api/run/stop")
    assert 200 == status and not s["running"] and "CANCEL" == s["activities"][-1]["kind"]
    assert not observatory.call("await_idle")[1]["running"]
