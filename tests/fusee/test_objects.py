"""Virtual objects: ``engine.object_type(name).exclusive(...).shared(...)``, ``engine.object(type, key)``,
``ctx.object(type, key)`` in workflow code.

Checked: an exclusive call answers its handler's result with its state committed in the same record; a
handler that raises commits nothing and answers ``CallFailed`` (again for the same call ID); a call ID
runs once; exclusive calls of one key take turns while shared calls read the last commit without
waiting and cannot write; outside edits with a version check; bad input refused at the call with
nothing recorded; workflow calls recorded in the calling run and replayed after a reopen; a key's run
continuing as new and being terminated keeps its state and answers; parking; ``crash_everywhere``.
"""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import NOMATCH, TIMEOUT

import fusee
from fusee import object_core
from fusee import records as r
from fusee.errors import NotFound, NotSerializable
from fusee.testing import crash_everywhere

from ._kit import COUNTS, SEG, count, next_probe, tell


def add(ctx, item):
    """Adds ``item`` to the cart (a counted step), noting whether ``hold`` had committed first."""
    items = ctx.state.get("items", [])
    ctx.state.set("items", items + [item])
    ctx.state.set("saw_held", ctx.state.get("held"))
    ctx.step("reserve", lambda s: count(f"reserve-{item}"))
    if item == "bad":
        raise ValueError("no such item")
    return len(items) + 1


def total(ctx, _):
    return len(ctx.state.get("items", []))


def sneaky(ctx, _):
    ctx.state.set("items", [])


def hold(ctx, _):
    """Holds the key's turn until the test sends "release" to the step body's process."""
    ctx.state.set("held", True)
    return ctx.step("hold", lambda: (tell("holding", e.self()), e.receive(lambda m: m if m == "release" else NOMATCH, timeout=10))[1])


def define(eng):
    return eng.object_type("cart").exclusive("add", add).exclusive("hold", hold).shared("total", total).shared("sneaky", sneaky)


@fusee.workflow("obj.shop")
def shop(ctx, items):
    """Adds each item to cart ``shop`` through ``ctx.object``, then reads the total (shared)."""
    cart = ctx.object("cart", "shop")
    got = [cart.call("add", i) for i in items]
    got.append(cart.call("total"))
    return got


def kinds(eng, id):
    return [type(rec).__name__ for _, rec in eng.describe(id)["journal"]]


def test_an_exclusive_call_commits_its_state_with_its_result(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    assert c.id == "fusee.object/cart/alice"
    assert (1, 2) == (c.call("add", "a1"), c.call("add", "a2"))
    assert fusee.StateView({"items": ["a1", "a2"], "saw_held": None}, 2) == c.state()
    assert 2 == c.call("total")
    assert ["a1", "a2"] == c.get("items")
    dones = [rec.payload for _, rec in eng.describe(c.id)["journal"] if type(rec) is r.UpdateDone]
    assert [1, 2] == [p["value"] for p in dones]  # the answer and the state change: one record each
    assert [{"items": ["a1"], "saw_held": None}, {"items": ["a1", "a2"], "saw_held": None}] == [p["set"] for p in dones]
    assert fusee.StateView({}, 0) == eng.object("cart", "bob").state()  # a key never called


def test_a_failed_handler_commits_nothing_and_its_call_id_fails_the_same_again(opener):
    eng = opener([])
    cart = define(eng)
    c = cart("alice")  # the type's shortcut for engine.object
    c.call("add", "a1")
    with pytest.raises(fusee.CallFailed) as info:
        c.call("add", "bad", call_id="c-bad")
    assert ("cart", "alice", "add", "c-bad") == (info.value.type, info.value.key, info.value.handler, info.value.call_id)
    assert {"type": "ValueError", "message": "no such item"} == info.value.failure
    assert fusee.StateView({"items": ["a1"], "saw_held": None}, 1) == c.state()
    with pytest.raises(fusee.CallFailed):
        c.call("add", "bad", call_id="c-bad")
    assert 1 == COUNTS["reserve-bad"]


def test_a_call_sent_again_with_its_call_id_runs_once_and_answers_the_same(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    assert 1 == c.call("add", "x", call_id="req-1")
    assert 1 == c.call("add", "x", call_id="req-1")
    assert 2 == c.call("add", "y")
    assert 1 == c.call("add", "x", call_id="req-1")
    assert 1 == COUNTS["reserve-x"]
    assert ["x", "y"] == c.get("items")


def test_a_shared_handler_cannot_write_and_nothing_is_recorded(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    c.call("add", "a1")
    before = len(eng.describe(c.id)["journal"])
    with pytest.raises(fusee.ReadOnlyState):
        c.call("sneaky")
    assert 1 == c.call("total", call_id="t-1")
    assert before == len(eng.describe(c.id)["journal"])


def test_outside_edits_check_the_version_and_a_mismatch_records_nothing(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    assert 1 == c.set("coupon", "SPRING")  # the key's first edit starts its run
    assert 2 == c.set("coupon", "SUMMER", version=1)
    before = len(eng.describe(c.id)["journal"])
    with pytest.raises(fusee.VersionMismatch) as info:
        c.set("coupon", "WINTER", version=1)
    assert (1, 2) == (info.value.expected, info.value.actual)
    with pytest.raises(fusee.VersionMismatch):
        c.clear(version=7)
    assert before == len(eng.describe(c.id)["journal"])
    c.call("add", "a1")
    assert 4 == c.clear("coupon", version=3)
    assert fusee.StateView({"items": ["a1"], "saw_held": None}, 4) == c.state()
    assert 5 == c.clear()
    assert fusee.StateView({}, 5) == c.state()


def test_bad_input_is_refused_at_the_call_with_nothing_recorded(opener):
    eng = opener([])
    define(eng)
    with pytest.raises(fusee.UnknownObjectType):
        eng.object("nope", "k")
    c = eng.object("cart", "alice")
    with pytest.raises(fusee.UnknownHandler) as info:
        c.call("pay", 1)
    assert ["add", "hold", "sneaky", "total"] == info.value.handlers
    with pytest.raises(NotSerializable) as ns:
        c.call("add", {"x": object()})
    assert "arg['x']" == ns.value.path
    with pytest.raises(TypeError):
        c.call("add", "a", call_id=7)
    with pytest.raises(TypeError):
        eng.object("cart", 7)
    with pytest.raises(NotSerializable):
        c.set("k", {1, 2})
    with pytest.raises(TypeError):
        c.set("k", 1, version="1")
    with pytest.raises(ValueError):
        eng.object_type("a/b")
    with pytest.raises(ValueError):
        eng.object_type("cart").shared("add", add)  # exclusive already
    with pytest.raises(NotFound):
        eng.describe(c.id)  # nothing recorded: the key has no run


@fusee.workflow("obj.stray")
def stray(ctx, target):
    ctx.step("first", lambda: 1)
    return ctx.object(target[0], "k").call(target[1], 1)


def test_bad_input_in_workflow_code_raises_at_the_call_with_nothing_recorded(opener):
    eng = opener([stray])
    define(eng)
    for id, target, cls in [("w1", ["cart", "pay"], "UnknownHandler"), ("w2", ["nope", "add"], "UnknownObjectType")]:
        with pytest.raises(fusee.Failed) as info:
            eng.execute(stray, id, target)
        assert cls == info.value.failure["type"]
        assert ["first"] == [rec.name for _, rec in eng.describe(id)["journal"] if type(rec) is r.Step]
    with pytest.raises(NotFound):
        eng.describe("fusee.object/cart/k")


def test_exclusive_calls_of_a_key_take_turns_and_shared_calls_do_not_wait(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    c.call("add", "a0")
    me = e.self()

    def caller(handler, arg):
        e.send(me, ("answer", handler, c.call(handler, arg)))

    e.spawn(caller, "hold", None)
    _, body = next_probe()  # the hold handler runs, holding the key's turn
    e.spawn(caller, "add", "a1")  # its turn comes after hold's
    assert 1 == c.call("total")  # a shared call reads the last commit, not waiting for the turn
    e.send(body, "release")
    got = {}
    for _ in range(2):
        m = e.receive(lambda m: m if type(m) is tuple and m[0] == "answer" else NOMATCH, timeout=10)
        assert m is not TIMEOUT
        got[m[1]] = m[2]
    assert {"hold": "release", "add": 2} == got
    assert c.get("saw_held") is True  # add ran after hold committed
    assert 2 == eng.object("cart", "bob").call("add", "b1") + 1  # other keys are unaffected


def test_workflow_calls_are_recorded_in_the_calling_run_and_replay_after_a_reopen(tmp_path):
    path = str(tmp_path / "data")
    with fusee.Engine.open(path, workflows=[shop], shards=2, segment_size=SEG) as eng:
        define(eng)
        assert [1, 2, 2] == eng.execute(shop, "s1", ["p", "q"])
        steps = [rec.name for _, rec in eng.describe("s1")["journal"] if type(rec) is r.Step]
        assert ["object cart/shop add", "object cart/shop add", "object cart/shop total"] == steps
    with fusee.Engine.open(path, workflows=[shop], shards=2, segment_size=SEG) as eng:
        define(eng)
        assert [1, 2, 2] == eng.result("s1")
        assert fusee.StateView({"items": ["p", "q"], "saw_held": None}, 2) == eng.object("cart", "shop").state()
        assert 3 == eng.object("cart", "shop").call("add", "r")
    assert 1 == COUNTS["reserve-p"]


def test_a_failed_call_from_a_workflow_raises_call_failed_there(opener):
    eng = opener([shop])
    define(eng)
    with pytest.raises(fusee.Failed) as info:
        eng.execute(shop, "s1", ["p", "bad"])
    assert "CallFailed" == info.value.failure["type"]
    assert ["p"] == eng.object("cart", "shop").get("items")


def test_a_key_continues_as_new_and_keeps_its_state_and_answers(opener, monkeypatch):
    monkeypatch.setattr(object_core, "ROLL_AFTER", 4)
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    first = eng.run(c.id).run if c.call("add", "i0", call_id="c0") else None
    for i in range(1, 12):
        c.call("add", f"i{i}", call_id=f"c{i}")
    assert eng.run(c.id).run != first
    assert 1 == c.call("add", "i0", call_id="c0")  # answered by a run before this one
    assert 1 == COUNTS["reserve-i0"]
    assert fusee.StateView({"items": [f"i{i}" for i in range(12)], "saw_held": None}, 12) == c.state()


def test_concurrent_calls_across_continue_as_new_each_run_once(opener, monkeypatch):
    monkeypatch.setattr(object_core, "ROLL_AFTER", 4)
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    me = e.self()
    n = 24
    for i in range(n):
        e.spawn(lambda i=i: e.send(me, ("answer", i, c.call("add", f"i{i}", call_id=f"c{i}"))))
    got = {}
    for _ in range(n):
        m = e.receive(lambda m: m if type(m) is tuple and m[0] == "answer" else NOMATCH, timeout=20)
        assert m is not TIMEOUT, got
        got[m[1]] = m[2]
    assert list(range(1, n + 1)) == sorted(got.values())  # each took its own turn
    st = c.state()
    assert n == st.version and n == len(st.values["items"])
    assert all(1 == COUNTS[f"reserve-i{i}"] for i in range(n))


def test_a_terminated_key_starts_again_with_its_state(opener):
    eng = opener([])
    define(eng)
    c = eng.object("cart", "alice")
    c.call("add", "a1")
    c.set("coupon", "X")
    eng.terminate(c.id, "operator")
    assert fusee.StateView({"items": ["a1"], "saw_held": None, "coupon": "X"}, 2) == c.state()
    assert 2 == c.call("add", "a2")
    assert 3 == c.state().version


def test_a_parked_key_answers_and_its_state_reads(opener):
    eng = opener([], park_after=0)
    define(eng)
    c = eng.object("cart", "alice")
    c.call("add", "a1")
    eng.park_now()
    assert fusee.StateView({"items": ["a1"], "saw_held": None}, 1) == c.state()
    assert 2 == c.call("add", "a2")
    assert 1 == COUNTS["reserve-a1"]


def object_case(eng):
    define(eng)
    c = eng.object("cart", "k")
    out = [c.call("add", "x", call_id="c1")]
    try:
        c.call("add", "bad", call_id="c2")
    except fusee.CallFailed as exc:
        out.append(exc.failure["message"])
    st = c.state()
    if st.values.get("coupon") != 5:  # an edit is not deduplicated: a case run again checks first
        c.set("coupon", 5, version=st.version)
    out.append(c.state().version)
    out.append(eng.start(shop, "s1", ["y"], fusee.IdPolicy.ATTACH).result(20))
    out.append(list(c.state()))
    return out


def test_crash_everywhere_over_objects():
    report = crash_everywhere(object_case, [shop])
    assert [1, "no such item", 2, [1, 1], [{"items": ["x"], "saw_held": None, "coupon": 5}, 2]] == report.result
    assert report.boundaries > 10
