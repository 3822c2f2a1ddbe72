"""Laws (against a naive model) and Erlang examples for ensemble.decide.timer."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ensemble.decide.timer import Timer, TimerTable


class Pid:
    """A pid whose == and hash lie: the table must use identity."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return True

    def __hash__(self):
        return 0

    def __repr__(self):
        return f"<pid {self.n}>"


PIDS = [Pid(i) for i in range(4)]
NAMES = ["logger", "db"]
REFS = [0, 1, 2, 3, 4, 5, ("ref", 6), "r7"]

# Multiples of 0.5 keep every sum exact, so fixed-deadline laws hold with ==.
def answer(x):
    """Tell 0.0 from False (False == 0.0 in Python)."""
    return (type(x), x)


halves = st.integers(-6, 20).map(lambda n: n / 2)
periods = st.one_of(st.none(), st.sampled_from([0.5, 1.0, 2.5, 4.0]))


class TimerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.table = TimerTable()
        self.now = 0.0
        self.seq = 0
        # ref -> dict(deadline, seq, every, dest, owner, payload, first, k, armed)
        self.model = {}

    def expected_left(self, ref):
        t = self.model.get(ref)
        if t is None:
            return False
        return max(t["deadline"] - self.now, 0.0)

    @rule(dt=st.integers(0, 8).map(lambda n: n / 2))
    def advance(self, dt):
        self.now += dt

    @rule(
        ref=st.sampled_from(REFS),
        offset=halves,
        every=periods,
        dest=st.sampled_from(PIDS + NAMES + [None]),
        owner=st.sampled_from(PIDS + [None]),
    )
    def arm(self, ref, offset, every, dest, owner):
        deadline = self.now + offset
        payload = object()
        if ref in self.model:
            with pytest.raises(ValueError):
                self.table.arm(ref, deadline, every=every, dest=dest, owner=owner, payload=payload)
            return
        t = self.table.arm(ref, deadline, every=every, dest=dest, owner=owner, payload=payload)
        self.seq += 1
        self.model[ref] = dict(
            deadline=deadline, seq=self.seq, every=every, dest=dest, owner=owner,
            payload=payload, first=deadline, k=0, armed=self.seq,
        )
        assert (ref, deadline, every) == (t.ref, t.deadline, t.every)
        assert dest is t.dest and owner is t.owner and payload is t.payload

    @rule(ref=st.sampled_from(REFS))
    def left(self, ref):
        assert answer(self.expected_left(ref)) == answer(self.table.left(ref, self.now))

    @rule(ref=st.sampled_from(REFS))
    def cancel(self, ref):
        before = self.table.left(ref, self.now)
        assert answer(self.expected_left(ref)) == answer(before)
        assert answer(before) == answer(self.table.cancel(ref, self.now))
        self.model.pop(ref, None)
        assert False is self.table.left(ref, self.now)
        assert False is self.table.cancel(ref, self.now)

    @rule()
    def due(self):
        fired = self.table.due(self.now)
        ready = sorted(
            (t for t in self.model.values() if t["deadline"] <= self.now),
            key=lambda t: (t["deadline"], t["seq"]),
        )
        expected_refs = [r for t in ready for r, m in self.model.items() if m is t]
        assert expected_refs == [t.ref for t in fired]
        assert [t["deadline"] for t in ready] == [t.deadline for t in fired]
        seqs = [t.seq for t in fired]
        assert sorted(seqs) == sorted(set(seqs))
        for ref, t in zip(expected_refs, fired):
            m = self.model[ref]
            assert m["payload"] is t.payload and m["dest"] is t.dest and m["owner"] is t.owner
            assert m["every"] == t.every
            if m["every"] is None:
                del self.model[ref]
                assert False is self.table.left(ref, self.now)
            else:
                # the k-th firing is due at first + k * every
                assert m["first"] + m["k"] * m["every"] == t.deadline
                m["k"] += 1
                self.seq += 1
                m["seq"] = self.seq
                m["deadline"] = t.deadline + m["every"]
                assert m["deadline"] == self.table.get(ref).deadline
        # one call fires each timer at most once
        assert len(set(map(id, fired))) == len(fired)

    @rule(pid=st.sampled_from(PIDS))
    def gone(self, pid):
        expected = [
            r for r, m in sorted(self.model.items(), key=lambda kv: kv[1]["armed"])
            if m["dest"] is pid or m["owner"] is pid
        ]
        assert expected == self.table.gone(pid)
        for r in expected:
            del self.model[r]
        assert [] == self.table.gone(pid)

    @invariant()
    def agrees(self):
        table = self.table
        assert len(self.model) == len(table)
        for ref in REFS:
            assert (ref in self.model) == (ref in table)
        deadlines = [t["deadline"] for t in self.model.values()]
        assert (min(deadlines) if deadlines else None) == table.next_deadline()
        # lazy garbage stays bounded (white box)
        assert len(table._heap) <= 2 * len(table)
        # the pid index holds exactly the live timers' dests and owners (white box)
        index = {}
        for ref, m in self.model.items():
            for p in (m["dest"], m["owner"]):
                if p is not None:
                    index.setdefault(id(p), set()).add(ref)
        assert index == {k: set(v) for k, v in table._by_pid.items()}


TestTimerTable = TimerMachine.TestCase
TestTimerTable.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


@settings(max_examples=100, deadline=None)
@given(
    first=st.floats(-1e6, 1e6, allow_nan=False),
    every=st.floats(1e-3, 1e3),
    lateness=st.integers(0, 20),
)
def test_interval_never_drifts(first, every, lateness):
    table = TimerTable()
    table.arm("i", first, every=every)
    now = first + lateness * every
    fired = []
    for _ in range(lateness + 3):
        fired.extend(table.due(now))
    for k, t in enumerate(fired):
        assert True is math.isclose(first + k * every, t.deadline, rel_tol=1e-9, abs_tol=1e-6)
    assert 1 == len(table)


# -- examples -------------------------------------------------------------------


def test_read_timer_answers_time_left():
    table = TimerTable()
    table.arm("t", 10.0)
    assert answer(7.5) == answer(table.left("t", 2.5))
    assert answer(0.0) == answer(table.left("t", 10.0))  # due, not fired: 0, not False
    assert answer(0.0) == answer(table.left("t", 12.0))
    assert answer(0.0) == answer(table.cancel("t", 12.0))
    assert False is table.left("t", 12.0)
    assert False is table.cancel("t", 12.0)


def test_cancel_answers_time_left_and_removes():
    table = TimerTable()
    table.arm("t", 5.0)
    assert answer(3.0) == answer(table.cancel("t", 2.0))
    assert [] == table.due(100.0)
    assert 0 == len(table)


def test_fired_one_shot_is_gone():
    table = TimerTable()
    t = table.arm("t", 1.0, dest=PIDS[0], payload=("msg",))
    assert [t] == table.due(1.0)
    assert False is table.left("t", 1.0)
    assert "t" not in table
    assert [] == table.gone(PIDS[0])


def test_due_order_is_deadline_then_start_order():
    table = TimerTable()
    table.arm("c", 2.0)
    table.arm("a", 1.0)
    table.arm("b", 1.0)
    table.arm("late", 3.0)
    assert ["a", "b", "c"] == [t.ref for t in table.due(2.0)]
    assert ["late"] == [t.ref for t in table.due(3.0)]


def test_late_interval_fires_once_per_call_with_fixed_deadlines():
    table = TimerTable()
    table.arm("i", 1.0, every=1.0)
    assert [1.0] == [t.deadline for t in table.due(3.5)]
    assert [2.0] == [t.deadline for t in table.due(3.5)]
    assert [3.0] == [t.deadline for t in table.due(3.5)]
    assert [] == table.due(3.5)
    assert 4.0 == table.next_deadline()
    assert answer(0.5) == answer(table.left("i", 3.5))


def test_interval_gets_a_new_seq_when_rearmed():
    table = TimerTable()
    first = table.arm("i", 1.0, every=1.0)
    other = table.arm("o", 2.0)
    (fired,) = table.due(1.0)
    assert first is fired
    assert fired.seq < other.seq < table.get("i").seq
    # tie at 2.0: "o" was armed before "i" was re-armed
    assert ["o", "i"] == [t.ref for t in table.due(2.0)]


def test_interval_ends_with_its_owner():
    owner, dest = Pid(1), Pid(2)
    table = TimerTable()
    table.arm("i", 1.0, every=1.0, dest=dest, owner=owner)
    table.arm("j", 1.0, dest=dest)
    table.arm("k", 1.0, dest="logger", owner=owner)
    assert ["i", "k"] == table.gone(owner)
    assert ["j"] == table.gone(dest)
    assert 0 == len(table)
    assert {} == table._by_pid


def test_gone_is_by_identity():
    table = TimerTable()
    a, b = Pid(1), Pid(2)
    assert a == b  # they lie
    table.arm("t", 1.0, dest=a)
    assert [] == table.gone(b)
    assert ["t"] == table.gone(a)


def test_same_pid_as_dest_and_owner():
    p = Pid(1)
    table = TimerTable()
    table.arm("t", 1.0, dest=p, owner=p)
    assert ["t"] == table.gone(p)
    assert {} == table._by_pid


def test_arm_rejects_bad_input():
    table = TimerTable()
    table.arm("t", 1.0)
    with pytest.raises(ValueError):
        table.arm("t", 2.0)
    with pytest.raises(ValueError):
        table.arm("u", math.nan)
    with pytest.raises(ValueError):
        table.arm("u", 1.0, every=0.0)
    with pytest.raises(ValueError):
        table.arm("u", 1.0, every=-1.0)
    assert 1 == len(table)


def test_ref_can_be_rearmed_after_cancel():
    table = TimerTable()
    table.arm("t", 1.0)
    table.cancel("t", 0.0)
    table.arm("t", 5.0)
    assert [] == table.due(1.0)
    assert ["t"] == [t.ref for t in table.due(5.0)]


def test_stale_entries_are_collected():
    table = TimerTable()
    for i in range(100):
        table.arm(i, float(i))
    for i in range(90):
        table.cancel(i, 0.0)
        assert True is (len(table._heap) <= 2 * len(table))
    assert 10 == len(table)
    assert 90.0 == table.next_deadline()


def test_empty_table():
    table = TimerTable()
    assert None is table.next_deadline()
    assert [] == table.due(1e9)
    assert [] == table.gone(Pid(0))
    assert 0 == len(table)
    assert None is table.get("x")


def test_timer_is_read_only():
    t = TimerTable().arm("t", 1.0)
    with pytest.raises(AttributeError):
        t.deadline = 2.0
    assert 1.0 == t.deadline
    assert True is isinstance(t, Timer)
    assert "Timer('t'" in repr(t)
