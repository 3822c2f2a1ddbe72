"""Laws of fusee.object_core, the pure part of virtual objects: commits, their fold, call-ID answers, versions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fusee import records as r
from fusee.object_core import (
    RECENT_CALLS,
    Delta,
    Obj,
    again,
    answer_of,
    apply,
    check_version,
    commit,
    edit,
    new,
    object_id,
    parse_object_id,
    recall,
    rolled,
    state_of,
)

keys = st.sampled_from(["a", "b", "c", "d"])
values = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.lists(st.integers(0, 3), max_size=2))
deltas = st.builds(
    lambda sets, removed, cleared: Delta(sets, tuple(sorted(set(removed))), cleared),
    st.dictionaries(keys, values, max_size=3),
    st.lists(keys, max_size=2),
    st.booleans(),
)
# one step of a key's life: an exclusive call (ok or failed, with a delta), or an outside edit
calls = st.tuples(st.just("call"), st.integers(0, 6), st.booleans(), values, deltas)
edits = st.tuples(st.just("edit"), st.sampled_from(["set", "clear"]), st.one_of(st.none(), keys), values)
lives = st.lists(st.one_of(calls, edits), max_size=25)


def by_hand(values_: dict, d: Delta) -> dict:
    out = {} if d.cleared else dict(values_)
    for k in d.removed:
        out.pop(k, None)
    out.update(d.sets)
    return out


def play(life):
    """Each commit of ``life`` on a new key, applied one by one: the commits and each state after."""
    o = new("cart", "alice")
    commits, states = [], [o]
    for ev in life:
        if ev[0] == "call":
            _, n, ok, res, d = ev
            cid = f"c{n}"
            prev = recall(o, cid)
            p = again(o, cid, prev) if prev is not None else commit(o, cid, ok, res, d)
        else:
            _, op, k, v = ev
            if op == "set" and k is None:
                k = "a"
            p = edit(o, op, k, v)
        o = apply(o, p)
        commits.append(p)
        states.append(o)
    return commits, states


@given(deltas, values, st.booleans())
def test_a_commit_applied_is_the_state_the_handler_left_and_a_failure_changes_nothing(d, res, ok):
    o = Obj("cart", "k", {"a": 1, "b": 2}, version=3)
    after = apply(o, commit(o, "c1", ok, res, d))
    if ok:
        assert by_hand(o.values, d) == after.values
        assert (o.version + 1 if d else o.version) == after.version
    else:
        assert o.values == after.values and o.version == after.version
    assert {"a": 1, "b": 2} == o.values  # never mutated


@given(lives)
def test_the_version_grows_by_one_exactly_when_a_commit_changes_something(life):
    commits, states = play(life)
    for p, before, after in zip(commits, states, states[1:]):
        changed = bool(p.get("set") or p.get("del") or p.get("clear"))
        if "edit" in p:
            assert before.version + 1 == after.version
        else:
            assert (before.version + 1 if changed else before.version) == after.version


@given(lives)
def test_the_fold_of_the_journal_is_the_commits_applied_one_by_one(life):
    commits, states = play(life)
    journal = [(i + 1, r.Update(7, f"u{i}", "fusee.call", None)) for i in range(len(commits))]
    journal += [(100 + i, r.UpdateDone(7, f"u{i}", "ok", p)) for i, p in enumerate(commits)]
    journal.append((999, r.UpdateDone(7, "x", "error", {"type": "E", "message": ""})))  # not a commit: skipped
    o, lsn = state_of(new("cart", "alice").plain(), journal)
    assert states[-1] == o
    assert (99 + len(commits) if commits else 0) == lsn


@given(lives)
def test_a_call_id_answers_the_same_every_time_and_changes_nothing_again(life):
    commits, states = play(life)
    first: dict = {}
    for p, before, after in zip(commits, states, states[1:]):
        cid = p.get("call")
        if cid is None:
            continue
        if cid in first:
            assert first[cid] == answer_of(p)
            assert before.values == after.values and before.version == after.version
        else:
            first[cid] = answer_of(p)


@given(lives)
def test_rolled_keeps_values_version_and_answers_and_survives_plain(life):
    _, states = play(life)
    o = states[-1]
    n = rolled(o)
    assert (o.values, o.version, o.recent, 0) == (n.values, n.version, n.recent, n.calls)
    assert n == Obj.of_plain(n.plain())
    for cid, a in o.recent:
        assert recall(o, cid) == recall(n, cid)


@settings(max_examples=20)
@given(st.integers(RECENT_CALLS + 1, RECENT_CALLS + 40))
def test_a_key_remembers_at_most_its_latest_answers(n):
    o = new("t", "k")
    for i in range(n):
        o = apply(o, commit(o, f"c{i}", True, i, Delta()))
    assert RECENT_CALLS == len(o.recent)
    assert recall(o, "c0") is None
    assert {"ok": True, "value": n - 1} == recall(o, f"c{n - 1}")


@given(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 5)))
def test_check_version(version, expected):
    o = Obj("t", "k", version=version)
    assert (None if expected in (None, version) else version) == check_version(o, expected)


@given(st.text(alphabet="ab/c", min_size=1, max_size=5).filter(lambda s: "/" not in s), st.text(max_size=5))
def test_object_ids_parse_back(t, key):
    assert (t, key) == parse_object_id(object_id(t, key))
    assert parse_object_id("fusee.schedule/x") is None
