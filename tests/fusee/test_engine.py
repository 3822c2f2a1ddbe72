"""fusee's engine: workflows as processes over the journal, in memory and on disk (issue 6's semantics)."""

from __future__ import annotations

import os
import time

import pytest

import ensemble as e
import fusee
import fusee.run
import fusee.run_process
import fusee.disk
from ensemble import NOMATCH, TIMEOUT
from fusee import records as r

from ._kit import COUNTS, PROBE, SEG, await_probe, count, tell

SEEN: dict[str, list] = {}


@pytest.fixture(autouse=True)
def _reset():
    SEEN.clear()
    yield


@pytest.fixture
def disk(tmp_path):
    """Opens engines on one directory (reopen = open again after shutdown)."""
    opened: list[fusee.Engine] = []
    path = str(tmp_path / "data")

    def open_(workflows, shards=2, **opts):
        eng = fusee.Engine.open(path, workflows=workflows, shards=shards, segment_size=SEG, **opts)
        opened.append(eng)
        return eng

    yield open_
    for eng in opened:
        eng.shutdown()


def kinds(engine, id):
    """The record kinds of the latest run of ``id``, in journal order."""
    return [r.kind_of(rec) for _, rec in engine.describe(id)["journal"]]


def records_of(engine, id, cls):
    """The records of class ``cls`` of the latest run of ``id``."""
    return [rec for _, rec in engine.describe(id)["journal"] if type(rec) is cls]


# -- workflows ------------------------------------------------------------------------------


@fusee.workflow("add", version=1)
def add(ctx, n):
    total = 0
    for i in range(n):
        total = ctx.step(f"add-{i}", lambda total=total, i=i: total + i)
    return total


@fusee.workflow("two_steps")
def two_steps(ctx, x):
    a = ctx.step("a", lambda: (count("a"), x + 1)[1])
    tell("a done")
    go = ctx.wait_for("go")
    b = ctx.step("b", lambda: (count("b"), a * go)[1])
    return [a, b]


@fusee.workflow("flaky")
def flaky(ctx, fails):
    def body(s):
        SEEN.setdefault("keys", []).append(s.key)
        if count("flaky") <= fails:
            raise ValueError(f"attempt {s.attempt} fails")
        return s.attempt

    return ctx.step("charge", body, retry=fusee.Retry(attempts=5, initial=0.01, factor=2, maximum=0.02))


@fusee.workflow("give_up")
def give_up(ctx, catch):
    try:
        ctx.step("doomed", lambda: 1 / 0, retry=fusee.Retry(2, 0.01))
    except fusee.StepFailed as err:
        if not catch:
            raise
        return {"caught": err.name, "type": err.failure["type"]}
    return "unreachable"


@fusee.workflow("slow_retry")
def slow_retry(ctx, _):
    def body(s):
        n = count("slow")
        SEEN.setdefault("at", []).append(time.time())
        if n == 1:
            tell("first attempt failed")
            raise RuntimeError("first")
        return s.attempt

    return ctx.step("charge", body, retry=fusee.Retry(3, initial="150ms"))


@fusee.workflow("napper")
def napper(ctx, seconds):
    ctx.step("before", lambda: (count("before"), tell("before"))[0])
    ctx.sleep("nap", seconds)
    return ctx.step("after", lambda: count("after"))


@fusee.workflow("until")
def until(ctx, at):
    ctx.sleep_until("alarm", at)
    return ctx.now() >= at


@fusee.workflow("collector")
def collector(ctx, n):
    ctx.wait_for(fusee.signal("go"))
    return [ctx.wait_for("item") for _ in range(n)]


@fusee.workflow("patient")
def patient(ctx, _):
    first = ctx.wait_for("never", timeout=0.01)
    ctx.step("after timeout", lambda: count("after timeout"))
    tell("timed out")
    second = ctx.wait_for("go")
    return [first, second]


@fusee.workflow("saga")
def saga(ctx, _):
    ctx.step("charge", lambda: count("charge"))
    tell("charged")
    try:
        ctx.wait_for("shipped")
    except fusee.Cancelled:
        ctx.step("refund", lambda: count("refund"))
        raise
    return "shipped"


@fusee.workflow("forever")
def forever(ctx, _):
    stage = ["waiting"]
    ctx.on_query("stage", lambda arg: [stage[0], arg, ctx.workflow_id])
    tell("waiting")
    ctx.wait_for("go")
    stage[0] = "after"
    count("after go")
    return "done"


@fusee.workflow("values")
def values(ctx, _):
    got = [ctx.now(), ctx.random(), ctx.uuid()]
    tell("values")
    ctx.wait_for("go")
    return got


@fusee.workflow("gated")
def gated(ctx, _):
    journal = ENGINES["gated"].host.journal
    st = ctx._st

    def observe(name):
        def body():
            SEEN[name] = (journal.durable_lsn(st.shard), st.machine.gate())

        return body

    ctx.step("effect-1", observe("effect-1"))
    ctx.step("peek", observe("peek"), read_only=True)
    ctx.step("effect-2", observe("effect-2"))
    return "ok"


ENGINES: dict[str, fusee.Engine] = {}


@fusee.workflow("bad_value")
def bad_value(ctx, _):
    try:
        ctx.step("returns a set", lambda: {1, 2})
    except fusee.NotSerializable as err:
        return err.path
    return "unreachable"


# -- tests ----------------------------------------------------------------------------------


def test_execute_runs_a_workflow_to_its_value(opener):
    """execute starts a run and returns its value; the value is the steps' recorded results."""
    engine = opener([add])
    assert 45 == engine.execute(add, "add-10", 10)
    assert 45 == engine.result("add-10")
    assert ["start"] + ["step"] * 10 + ["done"] == kinds(engine, "add-10")


def test_start_returns_a_run_whose_result_waits(opener):
    """start returns a Run; result(timeout) raises TimeoutError while it runs, then gives the value."""
    engine = opener([two_steps])
    run = engine.start(two_steps, "t", 1)
    assert isinstance(run, fusee.Run)
    await_probe("a done")
    with pytest.raises(TimeoutError):
        run.result(timeout=0.01)
    assert True is engine.signal("t", "go", 10)
    assert [2, 20] == run.result(timeout=5)
    assert "completed" == run.status


def test_durable_steps_replay_after_a_reopen(disk):
    """A step whose record is durable never runs again: after close and reopen it returns its recorded value."""
    engine = disk([two_steps])
    engine.start(two_steps, "replayed", 4)
    await_probe("a done")
    engine.shutdown()
    engine = disk([two_steps])
    assert "running" == engine.describe("replayed")["status"]
    engine.signal("replayed", "go", 3)
    assert [5, 15] == engine.result("replayed", timeout=5)
    assert {"a": 1, "b": 1} == COUNTS
    engine.shutdown()
    engine = disk([two_steps])
    assert [5, 15] == engine.result("replayed", timeout=5)
    assert {"a": 1, "b": 1} == COUNTS


def test_a_step_with_effects_waits_for_the_gate_and_read_only_runs_ahead(disk, monkeypatch):
    """An effect body starts only once the run's earlier records are durable; a read_only one does not wait."""
    real = os.fdatasync

    def slow_fdatasync(fd):
        time.sleep(0.05)  # on the flusher's native carrier thread: a slow disk
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # every flush calls os.fdatasync
    engine = disk([gated])
    ENGINES["gated"] = engine
    assert "ok" == engine.execute(gated, "g", None, timeout=10)
    durable, gate = SEEN["effect-1"]
    assert durable >= gate
    durable, gate = SEEN["effect-2"]
    assert durable >= gate
    durable, gate = SEEN["peek"]
    assert durable < gate


def test_start_and_signal_return_once_durable(disk, monkeypatch):
    """start and signal return only once their records are durable."""
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (time.sleep(0.02), real(fd))[1])
    monkeypatch.setattr(fusee.disk, "RWF_DSYNC", None)  # every flush calls os.fdatasync
    engine = disk([two_steps])
    engine.start(two_steps, "acked", 1)
    journal = engine.host.journal
    shard = engine.describe("acked")["shard"]
    start_lsn = engine.describe("acked")["journal"][0][0]
    assert journal.durable_lsn(shard) >= start_lsn
    await_probe("a done")
    engine.signal("acked", "go", 2)
    signal_lsn = [lsn for lsn, rec in engine.describe("acked")["journal"] if type(rec) is r.Signal][0]
    assert journal.durable_lsn(shard) >= signal_lsn
    assert [2, 4] == engine.result("acked", timeout=5)


def test_retries_record_each_failed_attempt_with_its_backoff(opener):
    """Each failed attempt records an Attempt with retry_at; the key is the same for every attempt."""
    engine = opener([flaky])
    run = engine.start(flaky, "pay", 2)
    assert 3 == run.result(timeout=5)
    attempts = records_of(engine, "pay", r.Attempt)
    assert [1, 2] == [a.attempt for a in attempts]
    assert ["ValueError", "ValueError"] == [a.error["type"] for a in attempts]
    assert attempts[0].retry_at < attempts[1].retry_at
    step = records_of(engine, "pay", r.Step)[0]
    assert (3, "ok", 3) == (step.attempt, step.status, step.payload)
    assert [f"pay/{run.run}/0"] * 3 == SEEN["keys"]


def test_backoff_survives_a_reopen(disk):
    """A retry after a reopen waits for the recorded retry_at and goes on with the next attempt number."""
    engine = disk([slow_retry])
    engine.start(slow_retry, "retry", None)
    await_probe("first attempt failed")
    engine.shutdown()
    engine = disk([slow_retry])
    assert 2 == engine.result("retry", timeout=5)
    (attempt,) = records_of(engine, "retry", r.Attempt)
    assert 2 == COUNTS["slow"]
    assert SEEN["at"][1] >= attempt.retry_at


def test_step_failed_is_catchable(opener):
    """When attempts run out the workflow gets StepFailed, and may catch it."""
    engine = opener([give_up])
    assert {"caught": "doomed", "type": "ZeroDivisionError"} == engine.execute(give_up, "caught", True)
    step = records_of(engine, "caught", r.Step)[0]
    assert ("error", 2) == (step.status, step.attempt)


def test_an_uncaught_step_failure_fails_the_run(opener):
    """A StepFailed the workflow does not catch fails the run with Failed."""
    engine = opener([give_up])
    with pytest.raises(fusee.Failed) as info:
        engine.execute(give_up, "uncaught", False)
    assert "StepFailed" == info.value.failure["type"]
    assert "failed" == engine.describe("uncaught")["status"]


def test_sleep_is_a_durable_timer_across_a_reopen(disk):
    """A sleep records its Timer; after a reopen it fires at the recorded time and earlier steps do not rerun."""
    engine = disk([napper])
    engine.start(napper, "nap", 0.2)
    await_probe("before")
    engine.shutdown()
    engine = disk([napper])
    assert 1 == engine.result("nap", timeout=5)
    (timer,) = records_of(engine, "nap", r.Timer)
    assert ["start", "step", "timer", "fired", "step", "done"] == kinds(engine, "nap")
    assert engine.describe("nap")["finished"] >= timer.fire_at
    assert {"before": 1, "after": 1} == COUNTS


def test_sleep_until_fires_at_an_absolute_time(opener):
    """sleep_until records a Timer at the given unix time and returns once it has passed."""
    engine = opener([until])
    at = time.time() + 0.02
    assert True is engine.execute(until, "alarm", at)
    (timer,) = records_of(engine, "alarm", r.Timer)
    assert at == timer.fire_at


def test_signals_sent_before_the_wait_are_kept_in_order(opener):
    """Signals that arrive before their wait are buffered and consumed in the order sent."""
    engine = opener([collector])
    engine.start(collector, "c", 3)
    for item in ["x", "y", "z"]:
        engine.signal("c", "item", item)
    engine.signal("c", fusee.signal("go"))
    assert ["x", "y", "z"] == engine.result("c", timeout=5)


def test_a_timed_out_wait_returns_none_and_is_recorded(disk):
    """A wait that times out returns None, records it, and replay after a reopen sees the same."""
    engine = disk([patient])
    engine.start(patient, "p", None)
    await_probe("timed out")
    waited = records_of(engine, "p", r.Waited)
    assert [("timeout", None)] == [(w.outcome, w.payload) for w in waited]
    engine.shutdown()
    engine = disk([patient])
    engine.signal("p", "go", "later")
    assert [None, "later"] == engine.result("p", timeout=5)
    assert 1 == COUNTS["after timeout"]


def test_a_timed_out_wait_in_memory(opener):
    """In both modes a wait with a timeout and no signal gives None."""
    engine = opener([patient])
    engine.start(patient, "p", None)
    await_probe("timed out")
    engine.signal("p", "go", 1)
    assert [None, 1] == engine.result("p", timeout=5)


def test_cancel_raises_cancelled_in_the_workflow_which_compensates(opener):
    """cancel raises Cancelled at the workflow's next operation; it runs its compensation and ends cancelled."""
    engine = opener([saga])
    engine.start(saga, "order", None)
    await_probe("charged")
    assert True is engine.cancel("order", "customer changed their mind")
    with pytest.raises(fusee.Cancelled) as info:
        engine.result("order", timeout=5)
    assert "customer changed their mind" == info.value.reason
    assert {"charge": 1, "refund": 1} == COUNTS
    assert "cancelled" == engine.describe("order")["status"]
    assert False is engine.cancel("order", "again")


def test_terminate_ends_a_run_at_once(opener):
    """terminate ends the run without running any more of its code."""
    engine = opener([forever])
    engine.start(forever, "f", None)
    await_probe("waiting")
    assert True is engine.terminate("f", "stop it")
    with pytest.raises(fusee.Terminated) as info:
        engine.result("f", timeout=5)
    assert "stop it" == info.value.reason
    assert "terminated" == engine.describe("f")["status"]
    assert False is engine.signal("f", "go", 1)
    assert {} == COUNTS


def test_query_answers_from_the_running_workflow(opener):
    """query calls the run's on_query handler with the argument."""
    engine = opener([forever])
    engine.start(forever, "q", None)
    await_probe("waiting")
    assert ["waiting", 7, "q"] == engine.query("q", "stage", 7)
    engine.signal("q", "go")
    assert "done" == engine.result("q", timeout=5)
    assert ["after", None, "q"] == engine.query("q", "stage")
    with pytest.raises(fusee.Error, match="no query"):
        engine.query("q", "nope")


@pytest.mark.parametrize(
    ("policy", "finished", "expected"),
    [
        (fusee.IdPolicy(), False, fusee.AlreadyExists),
        (fusee.IdPolicy(), True, fusee.AlreadyExists),
        (fusee.IdPolicy("attach", "fail"), False, "same run"),
        (fusee.IdPolicy("fail", "attach"), True, "same run"),
        (fusee.IdPolicy("terminate", "fail"), False, "new run, old terminated"),
        (fusee.IdPolicy("fail", "start_new"), True, "new run"),
        (fusee.IdPolicy("attach", "fail"), True, fusee.AlreadyExists),
        (fusee.IdPolicy("fail", "start_new"), False, fusee.AlreadyExists),
    ],
)
def test_id_policy_matrix(opener, policy, finished, expected):
    """What a start with a taken ID does, for a running and a finished run, under each policy."""
    engine = opener([two_steps])
    first = engine.start(two_steps, "dup", 1)
    await_probe("a done")
    if finished:
        engine.signal("dup", "go", 1)
        first.result(timeout=5)
    if isinstance(expected, type):
        with pytest.raises(expected):
            engine.start(two_steps, "dup", 2, id_policy=policy)
        return
    second = engine.start(two_steps, "dup", 2, id_policy=policy)
    if expected == "same run":
        assert first.run == second.run
        return
    assert first.run != second.run
    await_probe("a done")
    if expected == "new run, old terminated":
        with pytest.raises(fusee.Terminated):
            first.result(timeout=5)
    engine.signal("dup", "go", 10)
    assert [3, 30] == second.result(timeout=5)
    assert second.run == engine.describe("dup")["run"]


def test_attach_returns_the_existing_runs_result(opener):
    """execute with IdPolicy.ATTACH on a finished ID returns the existing run's result."""
    engine = opener([add])
    assert 21 == engine.execute(add, "r7", 7)
    assert 21 == engine.execute(add, "r7", 100, id_policy=fusee.IdPolicy.ATTACH)
    with pytest.raises(fusee.AlreadyExists):
        engine.execute(add, "r7", 7)


def test_changed_code_fails_the_run_with_a_determinism_error(disk):
    """A workflow that does something else at a recorded position fails with DeterminismError."""
    engine = disk([two_steps])
    engine.start(two_steps, "d", 1)
    await_probe("a done")
    engine.shutdown()

    @fusee.workflow("two_steps", version=2)
    def changed(ctx, x):
        ctx.step("renamed", lambda: x)
        return ctx.wait_for("go")

    engine = disk([changed])
    with pytest.raises(fusee.DeterminismError) as info:
        engine.result("d", timeout=5)
    assert (0, ("step", "a"), ("step", "renamed")) == (info.value.position, info.value.expected, info.value.got)
    assert "failed" == engine.describe("d")["status"]


def test_values_are_recorded_and_replayed(disk):
    """now, random and uuid are recorded; replay after a reopen returns the same values."""
    engine = disk([values])
    engine.start(values, "v", None)
    await_probe("values")
    recorded = [rec.value for rec in records_of(engine, "v", r.Value)]
    engine.shutdown()
    engine = disk([values])
    engine.signal("v", "go")
    assert recorded == engine.result("v", timeout=5)
    assert ["now", "random", "uuid"] == [rec.kind for rec in records_of(engine, "v", r.Value)]


def test_not_serializable_is_raised_at_the_call_with_nothing_recorded(opener):
    """An input, a signal value or a step result the codec refuses raises NotSerializable and records nothing."""
    engine = opener([two_steps, bad_value])
    with pytest.raises(fusee.NotSerializable) as info:
        engine.start(two_steps, "bad", {"items": [1, {2}]})
    assert "input['items'][1]" == info.value.path
    with pytest.raises(fusee.NotFound):
        engine.describe("bad")
    engine.start(two_steps, "good", 1)
    await_probe("a done")
    before = kinds(engine, "good")
    with pytest.raises(fusee.NotSerializable):
        engine.signal("good", "go", object())
    assert before == kinds(engine, "good")
    assert "result" == engine.execute(bad_value, "bv", None)  # the path inside the step's result
    assert ["start", "done"] == kinds(engine, "bv")


def test_unknown_workflow_and_unknown_id(opener):
    """Starting an unregistered type lists what is registered; an unknown ID is NotFound."""
    engine = opener([add, two_steps])
    with pytest.raises(fusee.UnknownWorkflow) as info:
        engine.start("nope", "x", None)
    assert ["add", "two_steps"] == list(info.value.registered)
    assert "unknown_workflow" == info.value.code
    for call in (engine.describe, engine.result, lambda id: engine.signal(id, "go")):
        with pytest.raises(fusee.NotFound):
            call("missing")


def test_describe_list_and_metrics(opener):
    """describe shows status, type, timestamps and records; list filters by status; metrics counts runs and flushes."""
    engine = opener([add, forever])
    before = time.time()
    engine.execute(add, "a1", 3)
    engine.start(forever, "w1", None)
    await_probe("waiting")
    d = engine.describe("a1")
    assert ("completed", "add", 1, 3, 3) == (d["status"], d["type"], d["version"], d["input"], d["result"])
    assert before <= d["started"] <= d["finished"]
    assert ["start", "step", "step", "step", "done"] == [r.kind_of(rec) for _, rec in d["journal"]]
    lsns = [lsn for lsn, _ in d["journal"]]
    assert sorted(lsns) == lsns
    assert ["a1", "w1"] == [x["id"] for x in engine.list()]
    assert ["w1"] == [x["id"] for x in engine.list(status="running")]
    assert ["a1"] == [x["id"] for x in engine.list("completed")]
    m = engine.metrics()
    assert (1, 1) == (m["runs"]["completed"], m["runs"]["running"])
    if opener.on_disk:
        assert m["flushes"] >= 1
        assert m["records_per_flush"] >= 1
        assert m["flush_seconds_mean"] > 0


def test_reopen_keeps_finished_results_and_statuses(disk):
    """After a reopen, finished runs keep their results and statuses, and their IDs stay taken."""
    engine = disk([add, give_up])
    engine.execute(add, "sum", 5)
    with pytest.raises(fusee.Failed):
        engine.execute(give_up, "fail", False)
    engine.shutdown()
    engine = disk([add, give_up])
    assert 10 == engine.result("sum")
    with pytest.raises(fusee.Failed):
        engine.result("fail")
    assert {"completed": 1, "failed": 1} == {k: v for k, v in engine.metrics()["runs"].items() if v}
    with pytest.raises(fusee.AlreadyExists):
        engine.start(add, "sum", 5)
    again = engine.start(add, "sum", 4, id_policy=fusee.IdPolicy("fail", "start_new"))
    assert 6 == again.result(timeout=5)


def test_ids_map_to_stable_shards():
    """A workflow ID's shard is crc32c(id) % shards, the same in every process."""
    from fusee.crc32c import crc32c_python
    from fusee.engine import shard_of

    expected = [crc32c_python(f"order-{i}".encode()) % 4 for i in range(20)]
    actual = [shard_of(f"order-{i}", 4) for i in range(20)]
    assert expected == actual
    assert len(set(actual)) > 1


def test_retry_backoff_is_exponential_and_capped():
    """Retry.delay grows by factor from initial and stops at maximum; durations may be strings."""
    retry = fusee.Retry(attempts=5, initial="100ms", factor=3, maximum="1s")
    assert [0.1, 0.3, 0.9, 1.0] == [round(retry.delay(n), 9) for n in range(1, 5)]
    with pytest.raises(ValueError):
        fusee.Retry(attempts=0)


@fusee.workflow("busy_saga")
def busy_saga(ctx, _):
    def long_body():
        e.send(PROBE["pid"], ("probe", "in body", e.self()))
        e.receive(lambda m: m if m == "go on" else NOMATCH, timeout=5)
        return count("long")

    try:
        ctx.step("long", long_body)
    except fusee.Cancelled as err:
        return ["compensated", err.reason, ctx.step("undo", lambda: count("undo"))]
    return "not cancelled"


def test_a_cancel_during_a_step_body_lands_at_that_step(opener):
    """A cancel recorded while a body runs keeps the body's record and raises Cancelled at that step, as replay would."""
    engine = opener([busy_saga])
    engine.start(busy_saga, "busy", None)
    got = e.receive(lambda m: m if m[:2] == ("probe", "in body") else NOMATCH, timeout=5)
    assert TIMEOUT is not got
    assert True is engine.cancel("busy", "too slow")
    e.send(got[2], "go on")
    assert ["compensated", "too slow", 1] == engine.result("busy", timeout=5)
    assert ["start", "cancel", "step", "step", "done"] == kinds(engine, "busy")
    assert {"long": 1, "undo": 1} == COUNTS


# -- back-pressure and dead run processes -------------------------------------------------------


def test_max_live_runs_bounds_a_shard_with_busy_recording_nothing(opener):
    """A start past max_live_runs on its shard raises Busy at the call, records nothing; a finished run frees its place."""
    engine = opener([forever], shards=1, max_live_runs=2)
    engine.start(forever, "a")
    await_probe("waiting")
    engine.start(forever, "b")
    await_probe("waiting")
    with pytest.raises(fusee.Busy) as info:
        engine.start(forever, "c")
    assert ("busy", 0) == (info.value.code, info.value.shard)
    with pytest.raises(fusee.NotFound):
        engine.describe("c")
    assert [("a", 0), ("b", 1)] == [(d["id"], d["run"]) for d in engine.list()]
    assert {"running": 2} == {k: v for k, v in engine.metrics()["runs"].items() if v}
    assert True is engine.signal("a", "go", 1)
    assert "done" == engine.result("a", timeout=5)
    run = engine.start(forever, "c")
    await_probe("waiting")
    assert 2 == run.run  # the Busy start took no run number
    assert "running" == engine.describe("c")["status"]
    with pytest.raises(fusee.Busy):
        engine.start(forever, "d")
    with pytest.raises(fusee.NotFound):
        engine.describe("d")


def test_max_live_runs_counts_a_run_its_start_terminates_as_freed(opener):
    """IdPolicy terminate at the bound replaces the running run; a Busy start terminates nothing."""
    engine = opener([forever], shards=1, max_live_runs=1)
    engine.start(forever, "a")
    await_probe("waiting")
    with pytest.raises(fusee.Busy):
        engine.start(forever, "b", id_policy=fusee.IdPolicy.TERMINATE)
    assert "running" == engine.describe("a")["status"]
    run = engine.start(forever, "a", id_policy=fusee.IdPolicy.TERMINATE)
    await_probe("waiting")
    assert (1, "running") == (run.run, engine.describe("a")["status"])


def test_a_terminating_start_with_an_unserializable_input_terminates_nothing(opener):
    """IdPolicy terminate with an input the codec refuses raises NotSerializable; the running run runs on."""
    engine = opener([forever], shards=1)
    engine.start(forever, "a")
    await_probe("waiting")
    records = len(engine.describe("a")["journal"])
    with pytest.raises(fusee.NotSerializable):
        engine.start(forever, "a", {1, 2}, id_policy=fusee.IdPolicy.TERMINATE)
    assert ("running", records) == (engine.describe("a")["status"], len(engine.describe("a")["journal"]))


def test_max_live_runs_is_validated_at_open(tmp_path):
    """max_live_runs is None or an int > 0; anything else is a ValueError at open, before the directory."""
    path = str(tmp_path / "data")
    for bad in (0, -1, 1.5, True, "2", [2]):
        with pytest.raises(ValueError):
            fusee.Engine.open(path, workflows=[forever], shards=1, segment_size=SEG, max_live_runs=bad)
        assert not os.path.exists(path)
    with fusee.Engine.open(None, workflows=[add], max_live_runs=None) as engine:
        assert 3 == engine.execute(add, "unbounded", 3)


def test_a_killed_run_process_fails_the_run_and_a_reopen_resumes_it(disk):
    """A run process killed in wait_for: result raises Failed, describe says failed, nothing is recorded,
    and a reopen resumes the run as its journal says."""
    engine = disk([forever], shards=1, max_live_runs=1)
    run = engine.start(forever, "k")
    await_probe("waiting")
    journal = kinds(engine, "k")
    e.exit(run._st.pid, "kill")
    with pytest.raises(fusee.Failed) as info:
        run.result(timeout=5)
    assert {"type": "RunProcessDied", "reason": "'killed'"} == {
        k: info.value.failure[k] for k in ("type", "reason")
    }
    described = engine.describe("k")
    assert "failed" == described["status"]
    assert isinstance(described["error"], fusee.Failed)
    assert journal == kinds(engine, "k")  # no Done: the crash is not recorded
    assert False is engine.signal("k", "go", 1)
    engine.start(forever, "other")  # the dead run's place is free
    await_probe("waiting")
    engine.shutdown()

    engine = disk([forever], shards=1)
    await_probe("waiting")
    await_probe("waiting")
    assert "running" == engine.describe("k")["status"]
    assert True is engine.signal("k", "go", 1)
    assert "done" == engine.result("k", timeout=5)


@fusee.workflow("raises")
def raises(ctx, _):
    tell("raising")
    raise ValueError("the workflow's own failure")


def test_a_bug_escaping_the_engine_fails_the_run_in_memory(opener, monkeypatch):
    """An exception escaping the engine's own code in a run process fails the run (RunProcessDied), unrecorded."""

    def broken(exc):
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(fusee.run_process, "failure_of", broken)  # where the run process takes it from
    engine = opener([raises])
    run = engine.start(raises, "bug")
    await_probe("raising")
    with pytest.raises(fusee.Failed) as info:
        run.result(timeout=5)
    assert "RunProcessDied" == info.value.failure["type"]
    assert "a bug in the engine" in info.value.failure["reason"]
    assert "failed" == engine.describe("bug")["status"]
    assert "done" not in kinds(engine, "bug")
