"""Streams: ``ctx.stream(name)`` writes durable chunks in order (from workflow code or a step body),
``engine.read_stream(id, name, offset)`` reads them.

Checked: chunks come in order, each once; a reader blocks for new chunks and ends when the stream closes
or the run ends; a reader that reconnects continues at its offset; a chunk written by workflow code is
recorded once across replay and reopen; a step body run again keeps the recorded prefix (and may go on
after it with ``resume()``); bad input raises at the call with nothing recorded; a finished run's stream
survives a clean shutdown (checkpoint); the timeline shows the stream; every record boundary survives a
crash with the durable chunks unchanged (``crash_everywhere``); the pure parts (the history's stream
index, ``step_write``) keep their laws.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import fusee
from fusee import records as r
from fusee.errors import NotFound, NotSerializable, StreamClosed
from fusee.replay import History, step_write
from fusee.testing import TestEngine, crash_everywhere
from fusee.timeline import timeline

from ._kit import SEG, count

go = fusee.signal("go")


@fusee.workflow("stream.chat")
def chat(ctx, words):
    w = ctx.stream("tokens")
    w.write({"role": "assistant"})

    def generate(s):
        count("generate")
        for t in words:
            w.write(t)
        return len(words)

    n = ctx.step("generate", generate)
    w.close()
    return n


@fusee.workflow("stream.paced")
def paced(ctx, n):
    w = ctx.stream("s")
    for i in range(n):
        w.write(i)
        ctx.wait_for(go)
    return "done"  # never closed: the run's end ends it


@fusee.workflow("stream.bad")
def bad(ctx, _):
    w = ctx.stream("s")
    out = []
    try:
        w.write({1, 2})
    except NotSerializable:
        out.append("not_serializable")
    w.write("ok")
    w.close()
    w.close()  # a no-op
    try:
        w.write("late")
    except StreamClosed as e:
        out.append(e.code)
    try:
        ctx.stream("")
    except TypeError:
        out.append("type")
    return out


ATTEMPTS: dict[str, int] = {}


@fusee.workflow("stream.retry")
def retried(ctx, _):
    w = ctx.stream("s")

    def body(s):
        # the first attempt writes a, b then fails; the second writes x, y, z: a, b are kept, z is new
        if s.attempt == 1:
            w.write("a")
            w.write("b")
            raise ConnectionError("dropped")
        return [w.write(t) for t in ("x", "y", "z")]

    return ctx.step("llm", body, retry=fusee.Retry(attempts=2, initial=0.001))


@fusee.workflow("stream.resume")
def resumed(ctx, _):
    w = ctx.stream("s")
    tokens = ["t0", "t1", "t2", "t3"]

    def body(s):
        start = w.resume()  # chunks an earlier run of this body recorded: go on after them
        for t in tokens[start:]:
            w.write(t)
            if s.attempt == 1 and t == "t1":
                raise ConnectionError("dropped")
        return start

    return ctx.step("llm", body, retry=fusee.Retry(attempts=2, initial=0.001))


def chunks_of(eng, id, name="s"):
    return list(eng.read_stream(id, name, timeout=10))


def test_chunks_from_code_and_a_step_in_order_and_offsets(opener):
    eng = opener([chat])
    run = eng.start(chat, "c1", ["Hel", "lo", "!"])
    assert run.result(10) == 3
    want = [{"role": "assistant"}, "Hel", "lo", "!"]
    assert chunks_of(eng, "c1", "tokens") == want
    assert list(run.read_stream("tokens", 2)) == want[2:]  # a reader that reconnects continues at its offset
    assert list(eng.read_stream("c1", "tokens", offset=9)) == []  # past the end of a closed stream: ends
    assert list(eng.read_stream("c1", "nothing")) == []  # a stream never written: ends with its run
    recs = [rec for _, rec in eng.describe("c1")["journal"]]
    assert [type(x).__name__ for x in recs] == ["Start", "Chunk", "Chunk", "Chunk", "Chunk", "Step", "StreamClose", "Done"]
    assert [x.step for x in recs if type(x) is r.Chunk] == [None, "generate", "generate", "generate"]


def test_a_reader_blocks_for_new_chunks_and_ends_with_the_run(opener):
    eng = opener([paced])
    eng.start(paced, "p1", 3)
    it = eng.read_stream("p1", "s", timeout=10)
    assert next(it) == 0  # written; the run now waits for a signal
    eng.signal("p1", go)
    assert next(it) == 1
    with pytest.raises(TimeoutError):
        next(eng.read_stream("p1", "s", offset=2, timeout=0.05))
    eng.signal("p1", go)
    eng.signal("p1", go)
    assert list(it) == [2]  # the run ended: the stream ends (it was never closed)
    assert eng.result("p1", 10) == "done"


def test_bad_input_raises_at_the_call_with_nothing_recorded(opener):
    eng = opener([bad, chat])
    assert eng.execute(bad, "b1", None, timeout=10) == ["not_serializable", "stream_closed", "type"]
    recs = [rec for _, rec in eng.describe("b1")["journal"]]
    assert [(x.index, x.payload) for x in recs if type(x) is r.Chunk] == [(0, "ok")]
    assert sum(type(x) is r.StreamClose for x in recs) == 1
    with pytest.raises(NotFound):
        eng.read_stream("nobody", "s")  # at the call, not at the first chunk
    eng.execute(chat, "c2", [], timeout=10)
    with pytest.raises(TypeError):
        eng.read_stream("c2", 7)
    with pytest.raises(TypeError):
        eng.read_stream("c2", "tokens", offset="0")
    with pytest.raises(ValueError):
        eng.read_stream("c2", "tokens", offset=-1)
    assert issubclass(StreamClosed, fusee.errors.Error) and fusee.errors.CODES["stream_closed"] is StreamClosed


def test_a_step_run_again_keeps_the_recorded_prefix(opener):
    eng = opener([retried, resumed])
    assert eng.execute(retried, "r1", None, timeout=10) == [0, 1, 2]  # x, y skipped at 0, 1; z recorded at 2
    assert chunks_of(eng, "r1") == ["a", "b", "z"]
    assert eng.execute(resumed, "r2", None, timeout=10) == 2
    assert chunks_of(eng, "r2") == ["t0", "t1", "t2", "t3"]


def test_replay_and_reopen_record_no_chunk_twice(tmp_path):
    path = str(tmp_path / "d")
    with fusee.Engine.open(path, workflows=[paced], shards=2, segment_size=SEG) as eng:
        eng.start(paced, "p2", 3)
        it = eng.read_stream("p2", "s", timeout=10)
        assert next(it) == 0
        eng.signal("p2", go)
        assert next(it) == 1
    # no checkpoint: the run replays its journal (its two writes replay, not recorded again)
    with fusee.Engine.open(path, workflows=[paced], shards=2, segment_size=SEG, checkpoint_on_shutdown=False) as eng:
        it = eng.read_stream("p2", "s", offset=1, timeout=10)
        assert next(it) == 1
        eng.signal("p2", go)
        eng.signal("p2", go)
        assert list(it) == [2]
        assert eng.result("p2", 10) == "done"
    # the finished run's stream survives the clean shutdown's checkpoint
    with fusee.Engine.open(path, workflows=[paced], shards=2, segment_size=SEG) as eng:
        assert chunks_of(eng, "p2") == [0, 1, 2]
        entry = [e for e in timeline(eng.describe("p2")["journal"]) if e["kind"] == "stream"]
        assert entry and entry[0]["name"] == "s" and entry[0]["chunks"] == 3 and entry[0]["closed"] is False


def test_timeline_shows_a_stream_entry(opener):
    eng = opener([chat])
    eng.execute(chat, "c3", ["a", "b"], timeout=10)
    (entry,) = [e for e in timeline(eng.describe("c3")["journal"]) if e["kind"] == "stream"]
    assert entry["name"] == "tokens" and entry["chunks"] == 3 and entry["closed"] is True
    assert entry["by_steps"] == ["generate"] and entry["first"] == [{"role": "assistant"}, "a", "b"]


def stream_case(eng: TestEngine):
    run = eng.start(chat, "sc", ["x", "y"], fusee.IdPolicy.ATTACH)
    got = list(eng.read_stream("sc", "tokens", timeout=10))
    return run.result(10), got


def test_crash_everywhere_over_a_stream():
    report = crash_everywhere(stream_case, [chat])
    assert report.result == (2, [{"role": "assistant"}, "x", "y"])
    assert report.boundaries == 7  # Start, Chunk, Chunk x2 (the step's), Step, StreamClose, Done


# -- the pure parts -------------------------------------------------------------------------


def _history(ops):
    """Records for ``ops``: ("code", payload) a write by code, ("step", seq-offset, payload) by a step
    body, ("close",) a close by code; with LSNs 1, 2, ..."""
    recs = [r.Start(0, "x", "w", 1, 0.0, None, None)]
    seq = 0
    size = 0
    in_step = False
    for op in ops:
        if op[0] == "code" and in_step:  # the step ends before the code goes on
            recs.append(r.Step(0, seq, "gen", 1, "ok", None))
            seq += 1
            in_step = False
        if op[0] == "code":
            recs.append(r.Chunk(0, seq, "s", size, None, op[1]))
            seq += 1
            size += 1
        elif op[0] == "step":
            recs.append(r.Chunk(0, seq, "s", size, "gen", op[1]))
            size += 1
            in_step = True
        elif op[0] == "stepdone":
            in_step = False
            recs.append(r.Step(0, seq, "gen", 1, "ok", None))
            seq += 1
    return recs


_ops = hs.lists(
    hs.one_of(
        hs.tuples(hs.just("code"), hs.integers(0, 9)),
        hs.tuples(hs.just("step"), hs.integers(0, 9)),
        hs.tuples(hs.just("stepdone")),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(_ops)
def test_law_the_stream_holds_every_chunk_in_journal_order_at_its_index(ops):
    recs = _history(ops)
    h = History.from_records([(i + 1, x) for i, x in enumerate(recs)])
    chunks = [x for x in recs if type(x) is r.Chunk]
    log = h.stream("s")
    if not chunks:
        assert log is None
        return
    assert log.chunks == [x.payload for x in chunks]
    assert log.lsns == sorted(log.lsns) and len(log.lsns) == len(chunks)
    assert log.since(0) == list(zip(log.lsns, log.chunks))
    for k in range(len(chunks) + 1):  # a reader at any offset gets the rest, in order
        assert [c for _, c in log.since(k)] == log.chunks[k:]
    # the chunks a step recorded are counted per step, by their index
    for seq, idx in log.by_step.items():
        assert all(chunks[i].seq == seq and chunks[i].step is not None for i in idx)


@settings(max_examples=100, deadline=None)
@given(hs.lists(hs.integers(0, 9), max_size=10), hs.lists(hs.integers(0, 9), max_size=10), hs.booleans())
def test_law_a_body_run_again_records_only_past_its_recorded_prefix(first, second, closed):
    """Run 1 of a step body wrote ``first``; run 2 writes ``second``: what the stream holds is ``first`` then
    ``second[len(first):]`` (the recorded prefix kept, nothing twice); a closed stream refuses the rest."""
    h = History.from_records([(1, r.Start(0, "x", "w", 1, 0.0, None, None))])
    lsn = 2

    def run_body(tokens):
        nonlocal lsn
        out = []
        for n, t in enumerate(tokens):
            what = step_write(h.stream("s"), 0, n)
            out.append(what)
            if what == "record":
                log = h.stream("s")
                h.add(r.Chunk(0, 0, "s", 0 if log is None else len(log), "gen", t), lsn)
                lsn += 1
        return out

    run_body(first)
    if closed:
        assert step_write(h.stream("s"), 0, 0, close=True) == "record"
        h.add(r.StreamClose(0, 0, "s", "gen"), lsn)
        lsn += 1
        assert step_write(h.stream("s"), 0, 0, close=True) == "skip"  # a close run again: recorded once
    decisions = run_body(second)
    log = h.stream("s")
    held = [] if log is None else log.chunks
    assert decisions[: len(first)] == ["skip"] * min(len(first), len(second))
    if closed:
        assert held == first and all(d == "closed" for d in decisions[len(first):])
    else:
        assert held == first + second[len(first):]


def test_history_refuses_what_a_stream_cannot_hold():
    start = (1, r.Start(0, "x", "w", 1, 0.0, None, None))
    with pytest.raises(ValueError, match="index"):
        History.from_records([start, (2, r.Chunk(0, 0, "s", 1, None, "a"))])
    with pytest.raises(ValueError, match="closed"):
        History.from_records([start, (2, r.StreamClose(0, 0, "s", None)), (3, r.Chunk(0, 1, "s", 0, None, "a"))])
    with pytest.raises(ValueError, match="already"):
        History.from_records([start, (2, r.Chunk(0, 0, "s", 0, None, "a")), (3, r.Chunk(0, 0, "s", 1, None, "b"))])
    with pytest.raises(ValueError, match="completed"):  # a step's chunk after its Step
        History.from_records([start, (2, r.Step(0, 0, "gen", 1, "ok", None)), (3, r.Chunk(0, 0, "s", 0, "gen", "a"))])
    with pytest.raises(ValueError):  # a step's chunk naming another step than the one recorded there
        History.from_records([start, (2, r.Chunk(0, 0, "s", 0, "gen", "a")), (3, r.Step(0, 0, "other", 1, "ok", None))])
