"""Laws and cases for ensemble.decide.handshake: a cookie proven both ways, nothing else accepted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import handshake as hs

NAMES = st.sampled_from(["a@h", "b@h", "shop@box", "z@h"])
COOKIES = st.text(min_size=1, max_size=20)
CHALLENGES = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)


def _run(a_name, b_name, dialled, a_cookie, b_cookie, ca, cb, *, facts=lambda peer: (False, None)):
    """Drive both machines against each other; answer (A's outcome, B's outcome, every message)."""
    a, out_a = hs.initiate(a_name, 1, dialled, a_cookie, ca)
    b = hs.accept(b_name, 2, b_cookie, cb)
    seen = []
    to_b, to_a = list(out_a), []
    a_done = b_done = None
    while (to_b or to_a) and not (a_done and b_done):
        while to_b and b_done is None:
            m = to_b.pop(0)
            seen.append(("A->B", m))
            b, out, b_done = hs.acceptor_step(b, m, facts)
            to_a.extend(out)
        while to_a and a_done is None:
            m = to_a.pop(0)
            seen.append(("B->A", m))
            a, out, a_done = hs.initiator_step(a, m)
            to_b.extend(out)
    return a_done, b_done, seen


@settings(max_examples=100, deadline=None)
@given(NAMES, NAMES, COOKIES, CHALLENGES, CHALLENGES)
def test_the_same_cookie_connects_and_each_side_learns_the_other(a_name, b_name, cookie, ca, cb):
    if a_name == b_name:
        return
    a_done, b_done, _ = _run(a_name, b_name, b_name, cookie, cookie, ca, cb)
    assert a_done == hs.Done(b_name, 2) and b_done == hs.Done(a_name, 1)


@settings(max_examples=100, deadline=None)
@given(NAMES, NAMES, COOKIES, COOKIES, CHALLENGES, CHALLENGES)
def test_a_wrong_cookie_never_connects_either_side(a_name, b_name, ca_cookie, cb_cookie, ca, cb):
    if a_name == b_name or ca_cookie == cb_cookie:
        return
    a_done, b_done, seen = _run(a_name, b_name, b_name, ca_cookie, cb_cookie, ca, cb)
    assert b_done == hs.Failed("bad_cookie")
    assert not isinstance(a_done, hs.Done)
    assert not any(m[0] == "ack" for _, m in seen)  # B never proves anything to a wrong cookie


def test_the_challenge_must_come_from_the_node_dialled():
    a_done, _, _ = _run("a@h", "b@h", "c@h", "k", "k", "1" * 32, "2" * 32)
    assert a_done == hs.Failed(("wrong_node", "b@h"))


def test_a_proof_is_bound_to_its_challenge_signer_and_peer():
    p = hs.proof("k", "c", "a@h", "b@h")
    assert len(p) == 64 and p == p.lower()
    assert p != hs.proof("k", "c", "b@h", "a@h")  # not reflectable
    assert p != hs.proof("k", "d", "a@h", "b@h")  # not replayable on another challenge
    assert p != hs.proof("K", "c", "a@h", "b@h")


def test_a_reflected_proof_is_refused():
    """B cannot be made to accept its own proof sent back: the signer is part of the proof."""
    b = hs.accept("b@h", 2, "k", "c" * 32)
    b, out, done = hs.acceptor_step(b, ("name", "a@h", 1), lambda peer: (False, None))
    assert done is None
    reflected = hs.proof("k", "c" * 32, "b@h", "a@h")
    _, _, done = hs.acceptor_step(b, ("reply", "x" * 32, reflected), lambda peer: (False, None))
    assert done == hs.Failed("bad_cookie")


def test_status_rules():
    assert "nok" == hs.name_status("a@h", "a@h", 1, dialling_peer=False, connected_creation=None)
    assert "nok" == hs.name_status("b@h", "a@h", 1, dialling_peer=True, connected_creation=None)
    assert "ok" == hs.name_status("a@h", "b@h", 1, dialling_peer=True, connected_creation=None)
    assert "alive" == hs.name_status("a@h", "b@h", 7, dialling_peer=False, connected_creation=7)
    assert "ok" == hs.name_status("a@h", "b@h", 8, dialling_peer=False, connected_creation=7)


def test_simultaneous_connects_keep_exactly_one():
    """Each node dials the other: exactly one of the two acceptors answers ok."""
    for x, y in [("a@h", "b@h"), ("b@h", "a@h"), ("z@h", "shop@box")]:
        x_accepts = hs.name_status(x, y, 1, dialling_peer=True, connected_creation=None)
        y_accepts = hs.name_status(y, x, 1, dialling_peer=True, connected_creation=None)
        assert sorted([x_accepts, y_accepts]) == ["nok", "ok"]


def test_a_nok_or_alive_status_ends_the_dialler_with_that_reason():
    for status, facts in [("nok", lambda p: (True, None)), ("alive", lambda p: (False, 1))]:
        a_done, b_done, _ = _run("a@h", "b@h", "b@h", "k", "k", "1" * 32, "2" * 32, facts=facts)
        if status == "nok":  # b sorts higher than a and is dialling a too
            assert (a_done, b_done) == (hs.Failed("nok"), hs.Failed("nok"))
        else:
            assert (a_done, b_done) == (hs.Failed("alive"), hs.Failed("alive"))


def test_on_up_rules():
    assert "install" == hs.on_up(None, 5, existing_from=None, new_from="a@h")
    assert "replace_down" == hs.on_up(4, 5, existing_from="a@h", new_from="a@h")
    assert "replace" == hs.on_up(5, 5, existing_from="a@h", new_from="b@h")
    assert "drop" == hs.on_up(5, 5, existing_from="b@h", new_from="a@h")


anything = st.recursive(
    st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=5) | st.floats(),
    lambda inner: st.lists(inner, max_size=4).map(tuple) | st.lists(inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=250, deadline=None)
@given(st.lists(anything, max_size=6))
def test_nothing_but_the_expected_message_moves_either_side_and_nothing_raises(msgs):
    """Arbitrary received values never raise and never complete a handshake without the cookie."""
    a, _ = hs.initiate("a@h", 1, "b@h", "k", "1" * 32)
    b = hs.accept("b@h", 2, "k", "2" * 32)
    for m in msgs:
        a, _, a_done = hs.initiator_step(a, m)
        b, _, b_done = hs.acceptor_step(b, m, lambda peer: (False, None))
        assert not isinstance(a_done, hs.Done) and not isinstance(b_done, hs.Done)


@given(st.text(max_size=300))
def test_valid_names(name):
    ok = hs.valid_name(name)
    if ok:
        assert name.count("@") == 1 and len(name) <= hs.MAX_NAME and " " not in name
    assert hs.valid_name("a@h") and not hs.valid_name("a") and not hs.valid_name("a@b@c")
    assert not hs.valid_name("@h") and not hs.valid_name("a@") and not hs.valid_name(b"a@h")
