"""Laws for fusee.replay's updates, async steps and pauses: live code and replay agree exactly.

A live driver mimics fusee.ctx's check points: every operation is numbered (``Machine.number``), then the
updates due there run (``update_due``/``take_update``, each handler one step), then the operation
resolves.  Updates arrive at random moments: before an operation begins (recorded at its check point,
nothing recorded for it yet), or while it is in progress (recorded before its completion).  Replaying
the journal the live run wrote, with the same code, must start every handler at the same operation
number, give every operation the same outcome, and record nothing new.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import records as r
from fusee.replay import (
    ASYNC,
    STEP,
    History,
    Live,
    Machine,
    Replay,
    async_token,
    parse_token,
    step_progress,
    token_matches,
)

SETTINGS = settings(max_examples=120, deadline=None)
RUN = 3
START = r.Start(RUN, "u-1", "acc", 1, 0.0, None, None)


class Code:
    """The workflow code: ``ops`` operations (steps, or async steps settled later), each update's handler one
    step.  Live, it records what it does; on replay, it must find everything recorded."""

    def __init__(self, m: Machine, live: bool, log: list, arrivals: dict, lsn: list) -> None:
        self.m, self.live, self.log, self.arrivals, self.lsn = m, live, log, arrivals, lsn
        self.handled: list[tuple[str, int]] = []  # (update id, the seq its handler's step took)
        self.got: list = []

    def add(self, rec) -> None:
        assert self.live, f"replay recorded {rec!r}"
        self.lsn[0] += 1
        self.m.record(rec, self.lsn[0])
        self.log.append((self.lsn[0], rec))

    def check_point(self, seq: int, moment: str) -> None:
        if self.live:  # updates that arrive now are recorded at this check point, if nothing else is
            for uid in self.arrivals.pop((seq, moment), []):
                if self.m.next_for(seq) is None:
                    self.add(r.Update(RUN, uid, "add", len(uid)))
                else:
                    self.arrivals.setdefault((seq + 1, "begin"), []).append(uid)  # it waits for a later one
        while (u := self.m.update_due(seq)) is not None:
            self.m.take_update()
            hseq = self.m.number(STEP, "h")
            self.check_point(hseq, "nested")  # never nested: the driver's handler runs no updates
            op = self.m.resolve(hseq, STEP, "h")
            if type(op) is Live:
                self.add(r.Step(RUN, hseq, "h", 1, "ok", u.payload))
                self.m.settle(hseq)
            self.handled.append((u.id, hseq))
            if self.m.history.update_outcome(u.id) is None:
                self.add(r.UpdateDone(RUN, u.id, "ok", u.payload))

    def run(self, ops: list[str]) -> None:
        for i, kind in enumerate(ops):
            seq = self.m.number(kind, f"op{i}")
            self.check_point(seq, "begin")
            op = self.m.resolve(seq, kind, f"op{i}")
            if type(op) is Replay:
                self.got.append((seq, op.value))
                continue
            if kind == ASYNC and not op.armed:
                self.add(r.Awaiting(RUN, seq, f"op{i}", "s"))
            if self.live:
                for uid in self.arrivals.pop((seq, "during"), []):  # while the body ran / while waiting
                    self.add(r.Update(RUN, uid, "add", len(uid)))
            done = r.Step(RUN, seq, f"op{i}", 1, "ok", i) if kind == STEP else r.Settled(RUN, seq, "ok", i)
            self.add(done)
            self.check_point(seq, "after")
            self.m.take(seq)
            self.got.append((seq, i))


def _drive(ops, arrivals):
    log, lsn = [(1, START)], [1]
    m = Machine()
    m.record(START, 1)
    live = Code(m, True, log, dict(arrivals), lsn)
    live.run(ops)
    return live, log


ops_st = st.lists(st.sampled_from([STEP, ASYNC]), min_size=1, max_size=6)


@st.composite
def scenarios(draw):
    ops = draw(ops_st)
    arrivals: dict = {}
    for n in range(draw(st.integers(0, 5))):
        at = (draw(st.integers(0, len(ops) - 1)), draw(st.sampled_from(["begin", "during"])))
        arrivals.setdefault(at, []).append(f"u{n}")
    return ops, arrivals


@SETTINGS
@given(scenarios())
def test_replay_starts_every_handler_where_live_code_did(scenario):
    ops, arrivals = scenario
    live, log = _drive(ops, arrivals)
    m = Machine(History.from_records(log))
    again = Code(m, False, log, {}, [0])
    again.run(ops)
    assert again.handled == live.handled
    assert again.got == live.got
    assert not m.updates_pending


@SETTINGS
@given(scenarios(), st.data())
def test_a_journal_cut_anywhere_replays_its_prefix_then_goes_on_live(scenario, data):
    """A crash after any record: the prefix replays (handlers where they were) and the run goes on live."""
    ops, arrivals = scenario
    live, log = _drive(ops, arrivals)
    cut = data.draw(st.integers(1, len(log)))
    prefix = log[:cut]
    m = Machine(History.from_records(prefix))
    lsn = [prefix[-1][0]]
    again = Code(m, True, list(prefix), {}, lsn)
    again.run(ops)
    started = {uid for uid, _ in again.handled}
    recorded = {rec.id for _, rec in prefix if type(rec) is r.Update}
    assert recorded <= started  # every recorded update's handler ran (again, replaying its step)
    for uid, hseq in again.handled:
        if uid in dict(live.handled) and any(type(rec) is r.Step and rec.seq == hseq for _, rec in prefix):
            assert dict(live.handled)[uid] == hseq  # a handler whose step was recorded starts where it did


def test_a_duplicate_update_id_or_a_stray_update_done_is_refused():
    h = History.from_records([(1, START), (2, r.Update(RUN, "a", "add", 1))])
    for bad in (r.Update(RUN, "a", "add", 2), r.UpdateDone(RUN, "b", "ok", 1), r.UpdateDone(RUN, "a", "maybe", 1)):
        try:
            h.add(bad, 9)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was taken")
    h.add(r.UpdateDone(RUN, "a", "ok", 5), 3)
    assert h.update_outcome("a") == (r.UpdateDone(RUN, "a", "ok", 5), 3) and h.update_outcome("b") is None
    try:
        h.add(r.UpdateDone(RUN, "a", "ok", 5), 4)
    except ValueError:
        pass
    else:
        raise AssertionError("a second UpdateDone was taken")


def test_an_update_after_a_cancel_waits_until_the_cancel_is_delivered():
    h = History.from_records([(1, START), (2, r.Cancel(RUN, "stop", None)), (3, r.Update(RUN, "a", "add", 1))])
    m = Machine(h)
    seq = m.number(STEP, "x")
    assert m.update_due(seq) is None  # the cancel comes first (journal order)
    assert m.take_cancel() is not None
    assert m.update_due(seq) is not None


# -- pauses ----------------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.sampled_from(["attempt", "pause", "resume"]), max_size=12))
def test_a_step_pauses_and_resumes_with_a_fresh_budget(events):
    """Whatever order of failed attempts, pauses and resumes the history takes, the progress says how many
    attempts failed, from which one the budget counts, and whether the step waits for a resume."""
    h = History.from_records([(1, START)])
    lsn, n, base, paused = 2, 0, 0, False
    for ev in events:
        rec = {
            "attempt": r.Attempt(RUN, 0, "s", n + 1, 5.0, None),
            "pause": r.Paused(RUN, 0, "s", n + 1, None),
            "resume": r.Resumed(RUN, 0),
        }[ev]
        try:
            h.add(rec, lsn)
        except ValueError:
            assert (ev == "resume") != paused  # only a resume of a paused step, only attempts of a running one
            continue
        lsn += 1
        if ev == "resume":
            paused, base = False, n
        else:
            n += 1
            paused = ev == "pause"
    op = h.op(0)
    got = step_progress(op.attempts) if op is not None else (0, None, 0, False, False)
    assert got[0] == n and got[2] == base and got[3] == paused
    assert h.paused == (0 if paused else None)
    live = Machine(h).begin(STEP, "s")
    assert type(live) is Live and (live.attempts, live.base, live.paused) == (n, base, paused)


def test_a_cancel_means_the_run_is_not_paused():
    h = History.from_records([(1, START), (2, r.Paused(RUN, 0, "s", 1, None))])
    assert h.paused == 0
    h.add(r.Cancel(RUN, None, None), 3)
    assert h.paused is None


# -- async tokens ------------------------------------------------------------------------------


@SETTINGS
@given(st.text(max_size=12), st.integers(0, 2**40), st.integers(0, 2**20), st.text(alphabet="0123456789abcdef", min_size=1, max_size=32))
def test_a_token_names_its_run_and_step_and_reads_back(id, run, seq, secret):
    t = async_token(id, run, seq, secret)
    assert parse_token(t) == (id, run, seq, secret)
    assert token_matches(r.Awaiting(run, seq, "x", secret), secret)
    assert not token_matches(r.Awaiting(run, seq, "x", secret + "0"), secret)


@SETTINGS
@given(st.one_of(st.text(max_size=40), st.integers(), st.none(), st.binary(max_size=8)))
def test_anything_else_is_not_a_token(junk):
    got = parse_token(junk)
    assert got is None or async_token(*got) == junk
