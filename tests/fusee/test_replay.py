"""Laws and examples for fusee.replay: the run machine replays a journal, then goes live."""

from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fusee import records as r
from fusee.errors import Cancelled, ChildFailed, DeterminismError, StepFailed
from fusee.replay import History, Live, Machine, Pending, Replay, child_failure, send_dedup

from ..ensemble._hostile import Weird, WeirdInt, WeirdStr, WeirdTuple

SETTINGS = settings(max_examples=80, deadline=None)
RUN = 7
START = r.Start(RUN, "order-1", "checkout", 1, 100.0, {"n": 1}, None)


# -- a live driver: runs a script on a Machine, recording what it does ---------------------


class Driver:
    """Runs operations live on a machine, appending their records with rising LSNs."""

    def __init__(self, lsn=1):
        self.m = Machine()
        self.lsn = lsn
        self.log = []
        self.add(START)

    def add(self, rec):
        self.m.record(rec, self.lsn)
        self.log.append((self.lsn, rec))
        self.lsn += 1

    def op(self, kind, name, detail):
        """Run one operation live; return what the code got, as (outcome, value)."""
        live = self.m.begin(kind, name)
        assert Live(live.seq, kind, name) == live
        seq = live.seq
        if kind == "step":
            fails, ok, payload = detail
            for i in range(fails):
                self.add(r.Attempt(RUN, seq, name, i + 1, 10.0 * (i + 1), {"type": "E", "message": str(i)}))
            self.add(r.Step(RUN, seq, name, fails + 1, "ok" if ok else "error", payload))
            return ("ok", payload) if ok else ("error", payload)
        if kind == "sleep":
            self.add(r.Timer(RUN, seq, name, detail))
            self.add(r.Fired(RUN, seq))
            return ("fired", None)
        if kind == "wait":
            self.add(r.Wait(RUN, seq, name, detail))
            sig = self.m.signal_for(name)
            if sig is None:
                self.add(r.Waited(RUN, seq, "timeout", None))
                return ("timeout", None)
            self.add(r.Waited(RUN, seq, "signal", sig.payload))
            return ("signal", sig.payload)
        if kind == "child":
            status, payload, deadline = detail
            self.add(r.Child(RUN, seq, name, "kid", {"n": seq}, "terminate", deadline))
            self.add(r.ChildDone(RUN, seq, status, payload))
            if status in ("completed", "started"):
                return (status, payload if status == "completed" else None)
            return (status, payload if status == "failed" else (CHILD_ERRORS[status], payload))
        if kind == "send":
            sname, payload = detail
            self.add(r.Send(RUN, seq, name, sname, payload))
            return ("sent", None)
        self.add(r.Value(RUN, seq, name, detail))
        return ("value", detail)


CHILD_ERRORS = {"cancelled": "Cancelled", "terminated": "Terminated", "timed_out": "TimedOut"}


def delivered(answer):
    """What the code gets from a Replay, as (outcome, value); a child's failure as its payload or (type, reason)."""
    if answer.error is not None:
        err = StepFailed if answer.kind == "step" else ChildFailed
        with pytest.raises(err) as e:
            answer.result()
        if err is StepFailed:
            assert answer.name == e.value.name
            return (answer.outcome, e.value.failure)
        assert (answer.name, answer.outcome) == (e.value.id, e.value.status)
        f = e.value.failure
        return (answer.outcome, f if answer.outcome == "failed" else (f["type"], f["reason"]))
    return (answer.outcome, answer.result())


# -- strategies ---------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c"])
payloads = st.one_of(st.integers(-5, 5), st.sampled_from(["x", "", None]), st.lists(st.integers(0, 3), max_size=2))
signals = st.tuples(names, st.one_of(st.none(), st.integers(0, 6)), payloads)


@st.composite
def operations(draw):
    kind = draw(st.sampled_from(["step", "sleep", "wait", "value", "child", "send"]))
    if kind == "step":
        return (kind, draw(names), (draw(st.integers(0, 3)), draw(st.booleans()), draw(payloads)))
    if kind == "sleep":
        return (kind, draw(names), draw(st.integers(0, 50).map(float)))
    if kind == "wait":
        return (kind, draw(names), draw(st.one_of(st.none(), st.integers(0, 50).map(float))))
    if kind == "child":
        deadline = draw(st.one_of(st.none(), st.integers(0, 50).map(float)))
        return (kind, draw(names), (draw(st.sampled_from(r.CHILD_STATUSES)), draw(payloads), deadline))
    if kind == "send":
        return (kind, draw(names), (draw(names), draw(payloads)))
    vk = draw(st.sampled_from(["now", "random", "uuid"]))
    return (kind, vk, draw(payloads))


# each item: the signals sent before the operation, then the operation
scripts = st.lists(st.tuples(st.lists(signals, max_size=2), operations()), max_size=10)


def run_live(script):
    """Drive ``script`` live: (journal, what each operation got)."""
    d = Driver()
    got = []
    for sent, (kind, name, detail) in script:
        for sname, dedup, payload in sent:
            d.add(r.Signal(RUN, sname, dedup, payload))
        got.append(d.op(kind, name, detail))
    return d.log, got


# -- laws ---------------------------------------------------------------------------------


@SETTINGS
@given(scripts)
def test_replay_reproduces_every_outcome_then_goes_live(script):
    log, got = run_live(script)
    m = Machine(History.from_records(log))
    replayed = []
    for i, (_, (kind, name, _)) in enumerate(script):
        answer = m.begin(kind, name)
        assert type(answer) is Replay
        assert (i, i) == (answer.seq, answer.turn)
        replayed.append(delivered(answer))
    assert got == replayed
    assert not m.replaying
    assert Live(len(script), "step", "next") == m.begin("step", "next")


@SETTINGS
@given(scripts, st.data())
def test_a_journal_cut_anywhere_replays_its_prefix_then_resumes_the_op_in_progress(script, data):
    log, got = run_live(script)
    n = data.draw(st.integers(1, len(log)))
    h = History.from_records(log[:n])
    m = Machine(h)
    for i, (_, (kind, name, _)) in enumerate(script):
        answer = m.begin(kind, name)
        if type(answer) is Live:
            break
        assert got[i] == delivered(answer)
    else:
        assert n == len(log)
        return
    op = h.op(i)
    assert i == answer.seq
    assert (0 if op is None else len(op.attempts)) == answer.attempts
    assert (op is not None and op.armed is not None) == answer.armed
    if answer.armed:  # in progress: a Timer, Wait or Child says when it ends
        assert (op.armed.fire_at if op.kind == "sleep" else op.armed.deadline) == answer.at
    # only the operation in progress can be a child begun and not completed
    assert h.pending_children() == ((op.armed,) if answer.kind == "child" and answer.armed else ())
    if answer.attempts:
        assert 10.0 * answer.attempts == answer.retry_at


@SETTINGS
@given(scripts, st.data())
def test_another_kind_or_name_at_a_recorded_position_is_a_determinism_error(script, data):
    log, got = run_live(script)
    if not script:
        return
    p = data.draw(st.integers(0, len(script) - 1))
    m = Machine(History.from_records(log))
    for _, (kind, name, _) in script[:p]:
        assert type(m.begin(kind, name)) is Replay
    _, (kind, name, _) = script[p]
    other = data.draw(
        st.sampled_from(
            [("step", name), ("sleep", name), ("wait", name), ("value", name), ("child", name), ("send", name), (kind, name + "'")]
        ).filter(
            lambda kn: kn != (kind, name)
        )
    )
    with pytest.raises(DeterminismError) as e:
        m.begin(*other)
    assert (p, (kind, name), other) == (e.value.position, e.value.expected, e.value.got)


@SETTINGS
@given(scripts)
def test_signals_are_never_lost_or_duplicated(script):
    log, _ = run_live(script)
    h = History.from_records(log)
    sent = [rec for _, rec in log if type(rec) is r.Signal]
    seen, expected = set(), []
    for s in sent:
        if s.dedup is None or s.dedup not in seen:
            expected.append(s)
            seen.add(s.dedup)
    assert tuple(expected) == h.received
    assert Counter(map(id, h.received)) == Counter(map(id, h.consumed + h.unconsumed))
    assert tuple(s for s in h.received if any(s is u for u in h.unconsumed)) == h.unconsumed
    for name in "abc":
        mine = [s for s in h.received if s.name == name]
        taken = [s for s in h.consumed if s.name == name]
        assert mine[: len(taken)] == taken  # the oldest are taken first


@SETTINGS
@given(scripts)
def test_the_gate_is_the_last_lsn_and_only_rises(script):
    log, _ = run_live(script)
    h = History()
    gates = [h.gate]
    for lsn, rec in log:
        h.add(rec, lsn)
        assert lsn == h.gate
        gates.append(h.gate)
    assert sorted(gates) == gates


# any typed record, any seq: a malformed history is a ValueError, never a crash, and changes nothing
any_record = st.one_of(
    st.builds(r.Step, st.just(RUN), st.integers(0, 3), names, st.integers(1, 3), st.sampled_from(["ok", "error"]), payloads),
    st.builds(r.Attempt, st.just(RUN), st.integers(0, 3), names, st.integers(1, 3), st.just(5.0), payloads),
    st.builds(r.Timer, st.just(RUN), st.integers(0, 3), names, st.just(5.0)),
    st.builds(r.Fired, st.just(RUN), st.integers(0, 3)),
    st.builds(r.Signal, st.sampled_from([RUN, RUN + 1]), names, st.one_of(st.none(), st.integers(0, 3)), payloads),
    st.builds(r.Wait, st.just(RUN), st.integers(0, 3), names, st.one_of(st.none(), st.just(9.0))),
    st.builds(r.Waited, st.just(RUN), st.integers(0, 3), st.sampled_from(["signal", "timeout"]), payloads),
    st.builds(r.Value, st.just(RUN), st.integers(0, 3), st.sampled_from(["now", "random"]), payloads),
    st.builds(r.Cancel, st.just(RUN), payloads, st.none()),
    st.builds(r.Child, st.just(RUN), st.integers(0, 3), names, st.just("kid"), payloads, st.sampled_from(r.PARENT_CLOSE),
              st.one_of(st.none(), st.just(9.0), st.just(float("nan")))),
    st.builds(r.ChildDone, st.just(RUN), st.integers(0, 3), st.sampled_from(r.CHILD_STATUSES + ("ok",)), payloads),
    st.builds(r.Send, st.just(RUN), st.integers(0, 3), names, names, payloads),
    st.builds(r.Done, st.just(RUN), st.sampled_from(["completed", "failed"]), st.just(1.0), payloads),
    st.builds(r.Update, st.just(RUN), names, names, payloads),
    st.builds(r.UpdateDone, st.just(RUN), names, st.sampled_from(["ok", "error", "bad"]), payloads),
    st.builds(r.Awaiting, st.just(RUN), st.integers(0, 3), names, names),
    st.builds(r.AsyncStarted, st.just(RUN), st.integers(0, 3)),
    st.builds(r.Settled, st.just(RUN), st.integers(0, 3), st.sampled_from(["ok", "error"]), payloads),
    st.builds(r.Paused, st.just(RUN), st.integers(0, 3), names, st.integers(1, 3), payloads),
    st.builds(r.Resumed, st.just(RUN), st.integers(0, 3)),
    st.builds(r.Chunk, st.just(RUN), st.integers(0, 3), st.sampled_from(["s", "t"]), st.integers(0, 2),
              st.one_of(st.none(), names), payloads),
    st.builds(r.StreamClose, st.just(RUN), st.integers(0, 3), st.sampled_from(["s", "t"]), st.one_of(st.none(), names)),
    st.just(START),
)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), any_record), max_size=12), st.lists(operations(), max_size=6))
def test_the_machine_is_total_on_typed_records(pairs, ops):
    h = History()
    for lsn, rec in [(0, START)] + pairs:
        before = (h.records, h.gate, h.received, h.consumed, h.ops, h.turns)
        try:
            h.add(rec, lsn)
        except ValueError as e:
            assert str(e)
            assert before == (h.records, h.gate, h.received, h.consumed, h.ops, h.turns)
    m = Machine(h)
    for kind, name, _ in ops:
        try:
            answer = m.begin("async" if (kind, name) == ("value", "now") else kind, name)
        except (DeterminismError, Cancelled):
            continue
        assert type(answer) in (Replay, Live)
        while m.update_due(answer.seq) is not None:
            assert m.take_update() in h.updates
    h.pending_timers(), h.due(10.0), h.unconsumed, h.paused, h.updates
    assert all(h.op(c.seq).armed is c and h.op(c.seq).done is None for c in h.pending_children())
    assert all(p.kind != "child" for p in h.pending_timers())
    assert h.sends == tuple(rec for _, rec in h.records if type(rec) is r.Send)


# -- children and sends -------------------------------------------------------------------

child_ends = st.sampled_from(r.CHILD_STATUSES)
hostile = st.sampled_from([Weird, lambda: WeirdStr("w"), lambda: WeirdInt(3), lambda: WeirdTuple((1, 2))]).map(lambda f: f())


def with_pending_child(script, cid="kid", deadline=None):
    """``script`` run live, then child ``cid`` begun (its ``Child`` recorded) and not completed: (driver, its Child)."""
    d = Driver()
    for sent, (kind, name, detail) in script:
        for sname, dedup, payload in sent:
            d.add(r.Signal(RUN, sname, dedup, payload))
        d.op(kind, name, detail)
    live = d.m.begin("child", cid)
    assert Live(len(script), "child", cid) == live
    child = r.Child(RUN, live.seq, cid, "kid", None, "abandon", deadline)
    d.add(child)
    return d, child


@SETTINGS
@given(scripts, st.data(), child_ends, payloads)
def test_a_pending_child_is_listed_and_its_live_outcome_waits_for_replay(script, data, status, payload):
    """A Child without its ChildDone is pending (not a timer); a ChildDone recorded while the code still replays
    earlier operations takes the next turn: the earlier ones replay unchanged, then the child gets its outcome."""
    d, child = with_pending_child(script, deadline=data.draw(st.one_of(st.none(), st.just(77.0))))
    _, got = run_live(script)
    h = History.from_records(d.log)
    assert (child,) == h.pending_children()
    assert all(p.seq != child.seq for p in h.pending_timers())
    n = len(script)
    at_child = Machine(History.from_records(d.log))
    for _, (kind, name, _) in script:
        at_child.begin(kind, name)
    assert Live(n, "child", "kid", armed=True, at=child.deadline) == at_child.begin("child", "kid")

    m = Machine(h)
    k = data.draw(st.integers(0, n))
    for i, (_, (kind, name, _)) in enumerate(script[:k]):
        assert got[i] == delivered(m.begin(kind, name))
    m.record(r.ChildDone(RUN, child.seq, status, payload), d.lsn)
    assert () == h.pending_children()
    assert m.replaying  # the child's outcome is a recorded delivery not yet handed out
    for i, (_, (kind, name, _)) in enumerate(script[k:], start=k):
        answer = m.begin(kind, name)
        assert (i, got[i]) == (answer.turn, delivered(answer))
        assert m.replaying
    answer = m.begin("child", "kid")
    assert (type(answer), answer.seq, answer.turn, answer.outcome) == (Replay, n, n, status)
    assert not m.replaying


@SETTINGS
@given(scripts, st.data())
def test_another_operation_at_a_pending_child_is_a_determinism_error(script, data):
    d, child = with_pending_child(script)
    m = Machine(History.from_records(d.log))
    for _, (kind, name, _) in script:
        m.begin(kind, name)
    other = data.draw(st.sampled_from([("child", "kid'"), ("child", "a"), ("step", "kid"), ("sleep", "kid"),
                                       ("wait", "kid"), ("send", "kid"), ("value", "now")]))
    with pytest.raises(DeterminismError) as e:
        m.begin(*other)
    assert (len(script), ("child", "kid"), other) == (e.value.position, e.value.expected, e.value.got)


@SETTINGS
@given(scripts)
def test_sends_are_numbered_by_call_order_and_listed_in_journal_order(script):
    log, _ = run_live(script)
    h = History.from_records(log)
    want = [(i, name, detail) for i, (_, (kind, name, detail)) in enumerate(script) if kind == "send"]
    assert want == [(s.seq, s.target, (s.name, s.payload)) for s in h.sends]
    assert all(type(rec) is r.Send for rec in h.sends)


@SETTINGS
@given(st.lists(st.tuples(st.text(alphabet="a/01", max_size=4), st.integers(0, 12), st.integers(0, 12)), max_size=8))
def test_send_dedups_name_the_sender_run_and_operation_uniquely(triples):
    keys = {t: send_dedup(*t) for t in triples}
    assert len(set(keys.values())) == len(keys)  # distinct (id, run, seq), even with "/" in the id, never collide
    for (sender, run, seq), k in keys.items():  # the key reads back: so no two ever collide
        head, run_, seq_ = k.rsplit("/", 2)
        assert (head, int(run_), int(seq_)) == ("fusee.send/" + sender, run, seq) and str(run) == run_ and str(seq) == seq_


@SETTINGS
@given(st.sampled_from([s for s in r.CHILD_STATUSES if s not in ("completed", "started")]), st.text(max_size=4),
       st.one_of(payloads, hostile))
def test_child_failure_carries_id_and_status_and_the_payload_untouched(status, cid, payload):
    err = child_failure(cid, status, payload)
    assert type(err) is ChildFailed and (err.id, err.status, err.code) == (cid, status, "child_failed")
    if status == "failed":
        assert err.failure is payload  # the child's own failure, as recorded
    else:
        f = err.failure
        assert (type(f), f["type"], type(f["message"])) == (dict, CHILD_ERRORS[status], str) and f["reason"] is payload
    assert repr(cid) in str(err) and status in str(err)


@SETTINGS
@given(child_ends, hostile, hostile)
def test_child_outcomes_inputs_and_send_payloads_are_handed_back_untouched(status, payload, input):
    """Replay never compares, hashes or tests a child's input, its outcome's payload or a send's payload."""
    h = history(
        r.Child(RUN, 0, "kid", "t", input, "abandon", None),
        r.ChildDone(RUN, 0, status, payload),
        r.Send(RUN, 1, "peer", "go", payload),
        r.Child(RUN, 2, "kid2", "t", input, "terminate", 5.0),
    )
    m = Machine(h)
    answer = m.begin("child", "kid")
    if status in ("completed", "started"):
        assert answer.result() is (payload if status == "completed" else None)
    else:
        with pytest.raises(ChildFailed) as e:
            answer.result()
        assert (e.value.failure if status == "failed" else e.value.failure["reason"]) is payload
    assert Replay(1, "send", "peer", "sent", None, None, 1) == m.begin("send", "peer")
    assert h.sends[0].payload is payload and h.pending_children()[0].input is input
    assert Live(2, "child", "kid2", armed=True, at=5.0) == m.begin("child", "kid2")


# -- cancel order: live code decides by journal order, as replay does ----------------------


LANDED = "the cancel landed here"  # what an operation that raised Cancelled got


class Racer(Driver):
    """Runs a script live the way fusee.run does, with the run's ``Cancel`` recorded at moment ``cut``.

    Moments are the points where a cancel can come in: before each operation, while a step body runs
    or waits for its retry, while a timer or wait is armed, while a child is being started, and
    between a child's ``ChildDone`` (recorded by the shard server) and the parent's process running.
    For a child in ``late``, the parent wakes before its ``ChildDone``: if the cancel is taken then,
    the ``ChildDone`` is recorded after the next operation.  The live code decides with
    ``Machine.next_for`` (journal order), never by a fixed order of checks.
    """

    def __init__(self, cut, late=frozenset(), reason="stop"):
        super().__init__()
        self.cut = cut
        self.late = late
        self.reason = reason
        self.moments = 0
        self.deferred = []
        self.decisions = []  # (seq, what next_for said) at every live decision

    def moment(self):
        if self.moments == self.cut:
            self.add(r.Cancel(RUN, self.reason, None))
        self.moments += 1

    def settle(self, seq):
        """Ctx._next: take what is recorded for ``seq`` in journal order."""
        nxt = self.m.next_for(seq)
        assert nxt == self.m.next_for(seq)  # pure
        self.decisions.append((seq, nxt))
        if nxt == "cancel":
            raise self.m.take_cancel()
        if nxt == "completion":
            return self.m.take(seq)
        assert nxt is None
        return None

    def run_op(self, i, kind, name, detail):
        self.moment()
        seq = self.m.begin(kind, name).seq  # raises a cancel recorded before the operation
        if kind == "step":
            fails, ok, payload = detail
            for j in range(fails):
                self.moment()  # the body runs
                self.add(r.Attempt(RUN, seq, name, j + 1, 10.0 * (j + 1), {"type": "E", "message": str(j)}))
                self.moment()  # waiting for the retry
                assert self.settle(seq) is None
            self.moment()  # the body runs
            self.add(r.Step(RUN, seq, name, fails + 1, "ok" if ok else "error", payload))
            return delivered(self.settle(seq))
        if kind == "sleep":
            self.add(r.Timer(RUN, seq, name, detail))
            self.moment()
            assert self.settle(seq) is None
            self.add(r.Fired(RUN, seq))
            return ("fired", None)
        if kind == "wait":
            self.add(r.Wait(RUN, seq, name, detail))
            self.moment()
            assert self.settle(seq) is None
            sig = self.m.signal_for(name)
            if sig is None:
                self.add(r.Waited(RUN, seq, "timeout", None))
                return ("timeout", None)
            self.add(r.Waited(RUN, seq, "signal", sig.payload))
            return ("signal", sig.payload)
        if kind == "child":
            status, payload, deadline = detail
            self.add(r.Child(RUN, seq, name, "kid", {"n": seq}, "terminate", deadline))
            self.moment()  # the child is being started (and, for ctx.child, runs)
            done = r.ChildDone(RUN, seq, status, payload)
            if status != "started" and i in self.late:
                try:
                    assert self.settle(seq) is None
                except Cancelled:
                    self.deferred.append(done)
                    raise
            self.add(done)
            if status != "started":
                self.moment()  # between the ChildDone and the parent's process running
            return delivered(self.settle(seq))
        if kind == "send":
            sname, payload = detail
            self.add(r.Send(RUN, seq, name, sname, payload))
            self.moment()  # delivering it
            return ("sent", None)
        self.add(r.Value(RUN, seq, name, detail))
        return ("value", detail)

    def run(self, script):
        got = []
        for i, (sent, (kind, name, detail)) in enumerate(script):
            for sname, dedup, payload in sent:
                self.add(r.Signal(RUN, sname, dedup, payload))
            later, self.deferred = self.deferred, []
            try:
                got.append(self.run_op(i, kind, name, detail))
            except Cancelled as e:
                got.append((LANDED, e.reason))
            for rec in later:
                self.add(rec)
        for rec in self.deferred:
            self.add(rec)
        self.moment()
        return got


def replay_all(log, script):
    """Replay ``log`` on a fresh machine with the same code: what each operation got."""
    m = Machine(History.from_records(log))
    got = []
    for _, (kind, name, _) in script:
        try:
            answer = m.begin(kind, name)
        except Cancelled as e:
            got.append((LANDED, e.reason))
            continue
        assert type(answer) is Replay
        got.append(delivered(answer))
    return m, got


@SETTINGS
@given(scripts, st.data(), st.sets(st.integers(0, 9)))
@example([([], ("child", "a", ("completed", 1, None))), ([], ("step", "b", (0, True, 2)))], 2, set())
@example([([], ("child", "a", ("failed", 1, None))), ([], ("step", "b", (0, True, 2)))], 2, set())
@example([([], ("child", "a", ("started", None, None))), ([], ("step", "b", (0, True, 2)))], 1, set())
@example([([], ("child", "a", ("completed", 1, None))), ([], ("step", "b", (0, True, 2)))], 1, {0})
def test_live_code_lands_a_cancel_where_replay_does_for_any_interleaving(script, cut, late):
    """Law: with the live decision made by next_for (journal order), the replayed run gets exactly what the
    live run got at every operation, wherever the Cancel falls among the completions."""
    if not isinstance(cut, int):  # drawn: a moment of this script's live run (or none: after the last)
        quiet = Racer(10**9, late)
        quiet.run(script)
        cut = cut.draw(st.integers(0, quiet.moments))
    d = Racer(cut, late)
    got = d.run(script)
    m, replayed = replay_all(d.log, script)
    assert got == replayed
    landed = sum(1 for g in got if g[0] == LANDED)
    assert landed <= 1  # once
    assert m.cancelling == (cut < d.moments and landed == 0)  # recorded after the last operation took its turn


@SETTINGS
@given(scripts, st.data(), st.sampled_from(["completion first", "cancel first", "cancel only", "neither"]))
def test_next_for_is_the_decision_begin_makes_on_replay(script, data, order):
    """Law: for a begun operation, next_for answers what begin answers on replay for the same journal:
    "cancel" <=> begin raises Cancelled, "completion" <=> a Replay, None <=> Live."""
    d = Driver()
    for sent, (kind, name, detail) in script:
        for sname, dedup, payload in sent:
            d.add(r.Signal(RUN, sname, dedup, payload))
        d.op(kind, name, detail)
    kind = data.draw(st.sampled_from(["step", "child", "sleep", "wait"]))
    seq = d.m.begin(kind, "x").seq
    completion = {
        "step": [r.Step(RUN, seq, "x", 1, "ok", 5)],
        "child": [r.Child(RUN, seq, "x", "kid", None, "abandon", None), r.ChildDone(RUN, seq, "completed", 5)],
        "sleep": [r.Timer(RUN, seq, "x", 3.0), r.Fired(RUN, seq)],
        "wait": [r.Wait(RUN, seq, "x", 3.0), r.Waited(RUN, seq, "timeout", None)],
    }[kind]
    begun, done = completion[:-1], completion[-1]
    for rec in begun:
        d.add(rec)
    cancel = r.Cancel(RUN, "stop", None)
    recs = {"completion first": [done, cancel], "cancel first": [cancel, done], "cancel only": [cancel], "neither": []}
    for rec in recs[order]:
        d.add(rec)
    live = d.m.next_for(seq)
    assert live == {"completion first": "completion", "neither": None}.get(order, "cancel")
    m = Machine(History.from_records(d.log))
    for _, (k, n, _) in script:
        m.begin(k, n)
    if live == "cancel":
        with pytest.raises(Cancelled):
            m.begin(kind, "x")
        return
    answer = m.begin(kind, "x")
    assert type(answer) is (Replay if live == "completion" else Live)
    if live == "completion":
        assert answer == d.m.take(seq)
        with pytest.raises(Cancelled):  # the cancel lands at the next operation, live and replayed
            d.m.begin("step", "next")
        with pytest.raises(Cancelled):
            m.begin("step", "next")


def test_a_child_that_ended_just_before_the_cancel_returns_its_result_live_and_replayed():
    """The reported bug: Child, ChildDone, Cancel recorded before the parent's process ran.  Taking the cancel
    first (a fixed order of checks) raised Cancelled at the child live while replay returns its result."""
    d = Driver()
    seq = d.m.begin("child", "kid").seq
    d.add(r.Child(RUN, seq, "kid", "kid", None, "terminate", None))
    d.add(r.ChildDone(RUN, seq, "completed", 42))
    d.add(r.Cancel(RUN, "stop", None))
    assert d.m.cancelling and "completion" == d.m.next_for(seq)
    assert 42 == d.m.take(seq).result()
    with pytest.raises(Cancelled):
        d.m.begin("step", "undo")
    m = Machine(History.from_records(d.log))
    assert 42 == m.begin("child", "kid").result()
    with pytest.raises(Cancelled):
        m.begin("step", "undo")


def test_take_wants_a_recorded_completion():
    m = Machine(history())
    seq = m.begin("sleep", "nap").seq
    assert m.next_for(seq) is None
    with pytest.raises(ValueError, match="no recorded completion"):
        m.take(seq)


# -- examples -----------------------------------------------------------------------------


def history(*recs):
    return History.from_records([(lsn, rec) for lsn, rec in enumerate((START,) + recs, start=1)])


def test_a_failed_step_replays_as_step_failed_with_its_failure():
    h = history(r.Attempt(RUN, 0, "pay", 1, 5.0, "e1"), r.Step(RUN, 0, "pay", 2, "error", {"type": "E", "message": "no"}))
    answer = Machine(h).begin("step", "pay")
    with pytest.raises(StepFailed) as e:
        answer.result()
    assert ("pay", {"type": "E", "message": "no"}) == (e.value.name, e.value.failure)


def test_backoff_survives_a_crash():
    h = history(r.Attempt(RUN, 0, "pay", 1, 12.5, "e1"), r.Attempt(RUN, 0, "pay", 2, 30.0, "e2"))
    assert Live(0, "step", "pay", 2, 30.0) == Machine(h).begin("step", "pay")
    assert (2, 30.0) == h.attempts(0)
    assert (0, None) == h.attempts(1)


def test_a_sleep_fired_or_pending():
    h = history(r.Timer(RUN, 0, "nap", 50.0), r.Fired(RUN, 0), r.Timer(RUN, 1, "long", 900.0))
    m = Machine(h)
    assert ("fired", None) == delivered(m.begin("sleep", "nap"))
    assert Live(1, "sleep", "long", armed=True, at=900.0) == m.begin("sleep", "long")
    assert (Pending(1, "sleep", "long", 900.0),) == m.pending_timers()
    assert () == m.due(899.0)
    assert (Pending(1, "sleep", "long", 900.0),) == m.due(900.0)


def test_a_wait_that_timed_out_replays_as_none():
    h = history(r.Wait(RUN, 0, "review", 60.0), r.Waited(RUN, 0, "timeout", None))
    assert ("timeout", None) == delivered(Machine(h).begin("wait", "review"))


def test_signals_sent_before_the_wait_are_kept_in_order():
    h = history(
        r.Signal(RUN, "review", 1, "first"),
        r.Signal(RUN, "other", 2, "x"),
        r.Signal(RUN, "review", 1, "dup"),
        r.Signal(RUN, "review", 3, "second"),
    )
    m = Machine(h)
    assert ["first", "x", "second"] == [s.payload for s in h.received]
    assert "first" == m.signal_for("review").payload
    assert Live(0, "wait", "review") == m.begin("wait", "review")
    m.record(r.Wait(RUN, 0, "review", None), 10)
    m.record(r.Waited(RUN, 0, "signal", "first"), 11)
    assert "second" == m.signal_for("review").payload
    assert ["first"] == [s.payload for s in h.consumed]
    assert ["x", "second"] == [s.payload for s in h.unconsumed]


def test_a_value_replays_its_recorded_value():
    h = history(r.Value(RUN, 0, "now", 123.5))
    assert ("value", 123.5) == delivered(Machine(h).begin("value", "now"))
    with pytest.raises(DeterminismError):
        Machine(h).begin("value", "random")


def test_cancel_raises_at_the_next_operation_once_then_compensation_runs():
    h = history(r.Step(RUN, 0, "reserve", 1, "ok", 1), r.Cancel(RUN, "changed my mind", "user"), r.Step(RUN, 2, "refund", 1, "ok", 2))
    m = Machine(h)
    assert ("ok", 1) == delivered(m.begin("step", "reserve"))
    with pytest.raises(Cancelled) as e:
        m.begin("step", "charge")
    assert "changed my mind" == e.value.reason
    assert ("ok", 2) == delivered(m.begin("step", "refund"))
    assert Live(3, "step", "notify") == m.begin("step", "notify")


def test_cancel_recorded_while_a_step_ran_is_raised_by_that_step_on_replay():
    h = history(r.Cancel(RUN, "stop", None), r.Step(RUN, 0, "charge", 1, "ok", 1))
    m = Machine(h)
    with pytest.raises(Cancelled):
        m.begin("step", "charge")
    assert Live(1, "step", "refund") == m.begin("step", "refund")


def test_a_live_cancel_is_taken_once():
    m = Machine(history())
    assert Live(0, "sleep", "nap") == m.begin("sleep", "nap")
    m.record(r.Cancel(RUN, "stop", None), 10)
    assert m.cancelling
    assert "stop" == m.take_cancel().reason
    assert None is m.take_cancel()
    assert Live(1, "step", "undo") == m.begin("step", "undo")


def test_done_says_how_the_run_finished_and_nothing_follows_it():
    h = history(r.Done(RUN, "completed", 200.0, {"total": 3}))
    assert h.finished and ("completed", {"total": 3}) == (h.done.status, h.done.payload)
    with pytest.raises(ValueError, match="after the run's Done"):
        h.add(r.Signal(RUN, "late", None, 1), 99)


def test_the_gate_is_the_last_record_of_the_run():
    m = Machine(history(r.Step(RUN, 0, "a", 1, "ok", 1)))
    assert 2 == m.gate()
    m.record(r.Signal(RUN, "s", None, 1), 40)
    assert 40 == m.gate()
    assert 0 == History().gate


@pytest.mark.parametrize(
    "recs, why",
    [
        ((r.Fired(RUN, 0),), "without its Timer"),
        ((r.Waited(RUN, 0, "timeout", None),), "without its Wait"),
        ((r.Wait(RUN, 0, "x", None), r.Waited(RUN, 0, "signal", 1)), "never received"),
        ((r.Step(RUN, 0, "a", 1, "ok", 1), r.Step(RUN, 0, "a", 1, "ok", 1)), "already completed"),
        ((r.Attempt(RUN, 0, "a", 1, 1.0, None), r.Step(RUN, 0, "b", 2, "ok", 1)), "recorded as step 'a'"),
        ((r.Timer(RUN, 0, "a", 1.0), r.Timer(RUN, 0, "a", 1.0)), "already begun"),
        ((r.Signal(RUN + 1, "s", None, 1),), "run 8"),
        ((START,), "second Start"),
        ((r.ChildDone(RUN, 0, "completed", 1),), "without its Child"),
        ((r.Timer(RUN, 0, "a", 1.0), r.ChildDone(RUN, 0, "completed", 1)), "without its Child"),
        ((r.Child(RUN, 0, "k", "t", None, "abandon", None), r.Child(RUN, 0, "k", "t", None, "abandon", None)), "already begun"),
        ((r.Child(RUN, 0, "k", "t", None, "abandon", None), r.ChildDone(RUN, 0, "ok", 1)), "status is one of"),
        ((r.Child(RUN, 0, "k", "t", None, "abandon", float("inf")),), "deadline is a time"),
        ((r.Send(RUN, 0, "x", "go", 1), r.Send(RUN, 0, "x", "go", 1)), "already completed"),
        ((r.Send(RUN, 0, "x", "go", 1), r.ChildDone(RUN, 0, "completed", 1)), "recorded as send|without its Child|already"),
    ],
)
def test_a_history_that_cannot_be_is_a_clear_value_error(recs, why):
    with pytest.raises(ValueError, match=why):
        history(*recs)


def test_the_first_record_is_start_and_lsns_rise():
    with pytest.raises(ValueError, match="first record is its Start"):
        History.from_records([(1, r.Fired(RUN, 0))])
    with pytest.raises(ValueError, match="does not follow"):
        History.from_records([(5, START), (5, r.Signal(RUN, "s", None, 1))])
    with pytest.raises(TypeError, match="not a fusee record"):
        History.from_records([(1, ("Start", 1))])
    with pytest.raises(ValueError, match="kind is one of"):
        Machine().begin("update", "x")


def test_steps_completed_at_once_read_back_as_full_ops():
    """A step recorded by its Step alone reads back as the same Op every query gives, before and after replay."""
    from fusee.replay import Op

    h = History()
    h.add(r.Start(7, "w", "t", 1, 0.0, None, None), 1)
    h.add(r.Step(7, 0, "a", 1, "ok", 10), 2)
    h.add(r.Attempt(7, 1, "b", 1, 5.0, "boom"), 3)
    h.add(r.Step(7, 1, "b", 2, "error", "bad"), 4)
    h.add(r.Step(7, 2, "c", 1, "ok", [1]), 5)
    assert h.op(0) == Op(0, "step", "a", (), None, r.Step(7, 0, "a", 1, "ok", 10), 0)
    assert h.op(0) is h.op(0)
    assert h.ops[2] == Op(2, "step", "c", (), None, r.Step(7, 2, "c", 1, "ok", [1]), 2)
    assert h.attempts(0) == (0, None) and h.attempts(1) == (1, 5.0)
    assert h.pending_timers() == ()
    with pytest.raises(ValueError):
        h.add(r.Step(7, 2, "c", 1, "ok", 1), 6)  # a second completion
    with pytest.raises(ValueError):
        h.add(r.Attempt(7, 2, "c", 1, 5.0, None), 6)
    assert len(h) == 5 and h.gate == 5
    m = Machine(h)
    assert m.begin("step", "a").value == 10
    with pytest.raises(StepFailed):
        m.begin("step", "b").result()
    with pytest.raises(DeterminismError):
        m.begin("step", "not-c")
