"""Laws for ensemble.decide.deadlines (the receive timeouts that stand on them: test_receive.py)."""

from __future__ import annotations

from heapq import heappush

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import deadlines as d

SETTINGS = settings(max_examples=100, deadline=None)

# A program: push an entry at a deadline, end the wait of an earlier entry (its claim emptied),
# ask what is due at some time, ask the next deadline, or compact.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 20)),
        st.tuples(st.just("end"), st.integers(0, 50)),
        st.tuples(st.just("due"), st.integers(0, 20)),
        st.tuples(st.just("next"), st.just(0)),
        st.tuples(st.just("compact"), st.just(0)),
    ),
    max_size=60,
)


@SETTINGS
@given(ops)
def test_the_heap_answers_as_a_plain_list_of_live_entries_would(program):
    """Against a model (a list of live entries): due answers the live entries at or before now in
    (deadline, push order); next_at the earliest live deadline; compact keeps exactly the live."""
    heap: list[tuple] = []
    model: list[tuple] = []  # live entries
    pushed: list[tuple] = []
    for seq, (op, arg) in enumerate(program):
        if op == "push":
            entry = (float(arg), seq, [seq], f"item{seq}")
            heappush(heap, entry)
            pushed.append(entry)
            model.append(entry)
        elif op == "end" and pushed:
            entry = pushed[arg % len(pushed)]
            entry[2].clear()
            if entry in model:
                model.remove(entry)
        elif op == "due":
            got = d.due(heap, float(arg))
            expected = sorted((x for x in model if x[0] <= arg), key=lambda x: (x[0], x[1]))
            assert expected == got
            for x in got:
                model.remove(x)
                x[2].clear()  # the runtime times it out: its claim is taken
        elif op == "next":
            live = [x[0] for x in model]
            assert (min(live) if live else None) == d.next_at(heap)
        else:
            limit = d.compact(heap)
            assert sorted(model, key=lambda x: x[1]) == sorted(heap, key=lambda x: x[1])
            assert limit == max(d.MIN_LIMIT, 2 * len(model))
        assert all(x in heap for x in model)  # nothing live is ever lost


@SETTINGS
@given(st.integers(0, 10_000))
def test_the_limit_leaves_room_for_as_many_again(n):
    limit = d.limit_after(n)
    assert limit >= d.MIN_LIMIT and limit >= 2 * n
