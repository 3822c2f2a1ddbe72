"""ensemble.logger: reports as dicts to a replaceable handler, the structlog default, crash reports."""

from __future__ import annotations

import pytest
import structlog

import ensemble as e
from ensemble import NOMATCH, logger

from .test_exit_signals import down_of


@pytest.fixture
def reports():
    """Collect every report made while the test runs (the previous handler is restored)."""
    got = []
    previous = logger.set_handler(got.append)
    yield got
    logger.set_handler(previous)


@pytest.fixture
def restore_handler():
    """Restore whatever handler was installed before the test."""
    previous = logger.set_handler(logger.default_handler)
    logger.set_handler(previous)
    yield previous
    logger.set_handler(previous)


def test_report_never_raises(restore_handler):
    """A handler that raises is ignored: report returns None."""
    calls = []

    def failing(report):
        calls.append(report["kind"])
        raise RuntimeError("handler broke")

    logger.set_handler(failing)
    assert None is logger.report("something", field=1)
    assert ["something"] == calls


def test_set_handler_returns_the_previous_one(restore_handler):
    """set_handler installs the new handler and returns the one it replaces."""
    first, second = [].append, [].append
    assert restore_handler is logger.set_handler(first)
    assert first is logger.set_handler(second)


def test_set_handler_refuses_a_non_callable(reports):
    """A non-callable handler raises TypeError and the installed handler stays."""
    with pytest.raises(TypeError):
        logger.set_handler("not callable")
    logger.report("still here")
    assert ["still here"] == [r["kind"] for r in reports]


def test_handler_receives_kind_level_and_fields(reports):
    """The handler gets a dict with kind, level (default "error") and the report's fields."""
    logger.report("first", a=1, b=("x", 2))
    logger.report("second", level="debug")
    assert [{"kind": "first", "level": "error", "a": 1, "b": ("x", 2)}, {"kind": "second", "level": "debug"}] == reports


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_default_handler_goes_through_structlog(level, restore_handler):
    """The default handler emits the report as a structlog event named by its kind, at its level."""
    logger.set_handler(logger.default_handler)
    with structlog.testing.capture_logs() as logs:
        logger.report("my_kind", level=level, pid="<0.1.0>", reason=("x", 1))
    assert [
        {"event": "my_kind", "kind": "my_kind", "log_level": level, "pid": "<0.1.0>", "reason": ("x", 1)}
    ] == logs


def test_default_handler_leaves_the_report_unchanged():
    """default_handler does not change the dict it is given."""
    report = {"kind": "k", "level": "info", "field": 1}
    with structlog.testing.capture_logs():
        logger.default_handler(report)
    assert {"kind": "k", "level": "info", "field": 1} == report


def test_default_handler_prints_to_stderr_without_structlog_configuration(monkeypatch, capsys):
    """With structlog unconfigured, the default handler renders the report to stderr."""
    monkeypatch.setattr(structlog, "is_configured", lambda: False)
    logger.default_handler({"kind": "printed_kind", "level": "error", "detail": "visible"})
    err = capsys.readouterr().err
    assert (True, True) == ("printed_kind" in err, "visible" in err)


def test_default_handler_emits_a_report_with_an_event_field():
    """A report with a field named "event" reaches structlog with that field as report_event."""
    with structlog.testing.capture_logs() as logs:
        logger.default_handler({"kind": "sys_trace", "level": "debug", "event": ("call", "get")})
    assert [
        {"event": "sys_trace", "kind": "sys_trace", "log_level": "debug", "report_event": ("call", "get")}
    ] == logs


def test_crash_report_of_a_crashing_process(reports):
    """A process dying of an uncaught exception is reported: pid, name, initial call, ancestors, reason."""
    exc = KeyError("lost")
    me = e.self()

    def crasher():
        e.receive(lambda m: m if m == "go" else NOMATCH)
        raise exc

    pid, ref = e.spawn_monitor(crasher)
    e.register("crasher", pid)
    e.send(pid, "go")
    assert exc is down_of(ref)
    crashes = [r for r in reports if r["kind"] == "crash_report"]
    assert 1 == len(crashes)
    r = crashes[0]
    assert (
        "error",
        repr(pid),
        "crasher",
        (__name__, "test_crash_report_of_a_crashing_process.<locals>.crasher", 0),
        [repr(me)],
    ) == (r["level"], r["pid"], r["registered_name"], r["initial_call"], r["ancestors"])
    assert (True, True) == (r["reason"] is exc, r["exc_info"] is exc)


def test_crash_report_fields(reports):
    """crash_report(pid, exc) reports exactly the documented fields."""
    exc = ValueError("bad")
    logger.crash_report(e.self(), exc)
    assert [
        {
            "kind": "crash_report",
            "level": "error",
            "pid": repr(e.self()),
            "registered_name": None,
            "initial_call": e.process_info(e.self(), "initial_call"),
            "ancestors": [],
            "reason": exc,
            "exc_info": exc,
        }
    ] == reports


def test_exits_and_orderly_ends_make_no_crash_report(reports):
    """exit(reason), exit signals and normal returns make no crash report."""
    for fn in (lambda: e.exit("deliberate"), lambda: e.exit(("shutdown", 1)), lambda: None):
        e.exit_reason(e.spawn(fn), timeout=2)
    p = e.spawn(lambda: e.receive())
    e.exit(p, "kill")
    e.exit_reason(p, timeout=2)
    assert [] == [r for r in reports if r["kind"] == "crash_report"]
