"""fusee.tracing: with a tracer, each run execution and each step attempt is a span with the
workflow's type and ID, the step's name and attempt; without one, the workflows are unchanged."""

from __future__ import annotations

import pytest

import fusee
from fusee import tracing

from ._ops_workflows import ALL, flaky, go, waiter

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed (pip install -e '.[test]')")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("fusee-test"), exporter
    provider.shutdown()


def test_runs_and_step_attempts_are_spans(tmp_path, spans):
    tracer, exporter = spans
    wfs = tracing.traced(ALL, tracer)
    with fusee.Engine.open(str(tmp_path / "d"), workflows=wfs, shards=2, segment_size=1 << 20) as eng:
        assert eng.execute(flaky, "tr-1", "tr-1") == "ok"
        eng.start(waiter, "tr-2", 1)
        eng.signal("tr-2", go, 2)
        assert eng.result("tr-2", timeout=10) == 3
    got = exporter.get_finished_spans()
    steps = [s for s in got if s.name == "fusee.step shaky"]
    assert [s.attributes["fusee.step.attempt"] for s in steps] == [1, 2]
    assert steps[0].status.status_code.name == "ERROR" and steps[1].status.status_code.name == "UNSET"
    assert steps[0].attributes["fusee.workflow.type"] == "flaky" and steps[0].attributes["fusee.workflow.id"] == "tr-1"
    assert steps[0].attributes["fusee.step.key"].startswith("tr-1/")
    runs = {s.attributes["fusee.workflow.id"]: s for s in got if s.name.startswith("fusee.run ")}
    assert runs["tr-1"].name == "fusee.run flaky" and runs["tr-1"].attributes["fusee.run.outcome"] == "returned"
    assert all(s.parent is not None and s.parent.span_id == runs["tr-1"].context.span_id for s in steps)
    finish = next(s for s in got if s.name == "fusee.step finish")
    assert finish.parent.span_id == runs["tr-2"].context.span_id and finish.attributes["fusee.step.attempt"] == 1


def test_without_a_tracer_nothing_changes(monkeypatch):
    assert not tracing.enabled()  # no provider configured in the tests
    assert all(a is b for a, b in zip(tracing.traced(ALL), ALL))
    monkeypatch.setattr(tracing, "_trace", lambda: None)  # opentelemetry not installed
    assert not tracing.enabled() and tracing.traced(ALL) == ALL
