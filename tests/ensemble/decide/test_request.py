"""Laws for ensemble.decide.request: which message answers a request, alone or in a collection."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble import gen_server
from ensemble._terms import Alias, Ref, make_ref, new_alias
from ensemble.decide.request import NO_REPLY, NO_REQUEST, ReqId, ReqIdCollection, check, check_collection

from .._hostile import Weird

SETTINGS = settings(max_examples=100, deadline=None)


def new_req(server="srv"):
    """A request id with a fresh alias and monitor ref."""
    return ReqId(new_alias(None), make_ref(), server)


values = st.recursive(
    st.one_of(
        st.integers(),
        st.text(max_size=4),
        st.none(),
        st.sampled_from(["DOWN", "process", "noproc", "EXIT", "reply"]),
        st.builds(Weird),
        st.builds(make_ref),
        st.builds(new_alias, st.none()),
    ),
    lambda inner: st.lists(inner, max_size=5).map(tuple),
    max_leaves=8,
)
servers = st.one_of(st.text(max_size=4), st.tuples(st.text(max_size=4), st.just("nonode@nohost")))
labels = st.one_of(st.integers(), st.text(max_size=3), st.none(), st.builds(Weird))


def unrelated_messages(req):
    """Messages that look like answers but answer no request of ``req``'s kind."""
    return st.one_of(
        values,
        st.tuples(st.builds(new_alias, st.none()), values),  # a reply to another alias
        st.tuples(st.just(req.mref), values),  # the monitor ref is no reply alias
        st.tuples(st.just(req.alias)),
        st.tuples(st.just(req.alias), values, values),
        st.tuples(st.just("DOWN"), st.builds(make_ref), st.just("process"), values, values),
        st.tuples(st.just("DOWN"), st.just(req.alias), st.just("process"), values, values),
        st.tuples(st.just("DOWN"), st.just(req.mref), st.just("process"), values),
        st.tuples(st.just("EXIT"), st.just(req.mref), st.just("process"), values, values),
    )


# -- one request --------------------------------------------------------------------------


@SETTINGS
@given(values, servers)
def test_a_reply_answers_its_request(value, server):
    """(alias, v) answers ("reply", v) with the very v."""
    req = new_req(server)
    answer = check((req.alias, value), req)
    assert ("reply", 2) == (answer[0], len(answer))
    assert value is answer[1]


@SETTINGS
@given(values, values, servers)
def test_a_down_of_the_monitor_answers_an_error(pid, reason, server):
    """("DOWN", mref, "process", pid, reason) answers ("error", (reason, server)) with the server as addressed."""
    req = new_req(server)
    answer = check(("DOWN", req.mref, "process", pid, reason), req)
    assert "error" == answer[0]
    assert (True, True) == (reason is answer[1][0], server is answer[1][1])


@SETTINGS
@given(st.data())
def test_anything_else_answers_no_reply(data):
    """Any other message, also replies to other aliases and DOWNs of other monitors, answers "no_reply"."""
    req = new_req()
    msg = data.draw(unrelated_messages(req))
    assert NO_REPLY == check(msg, req)


def test_a_reply_to_another_request_is_no_reply():
    """The reply to one request does not answer another."""
    a, b = new_req(), new_req()
    assert (("reply", 1), NO_REPLY) == (check((a.alias, 1), a), check((a.alias, 1), b))
    down = ("DOWN", a.mref, "process", "pid", "noproc")
    assert (("error", ("noproc", "srv")), NO_REPLY) == (check(down, a), check(down, b))


def test_a_copied_alias_and_ref_still_answer():
    """Copies of the alias and monitor ref (copy, pickle) answer as the originals do."""
    req = new_req("srv")
    alias_copy = pickle.loads(pickle.dumps(Ref(req.alias._n)))
    assert ("reply", 7) == check((copy.copy(req.alias), 7), req)
    assert NO_REPLY == check((alias_copy, 7), req)  # a plain Ref is no alias
    assert ("error", ("killed", "srv")) == check(
        ("DOWN", pickle.loads(pickle.dumps(req.mref)), "process", "pid", "killed"), req
    )


def test_request_ids_are_equal_by_alias():
    """Two request ids are equal exactly when they name the same alias."""
    a = new_req("x")
    assert a == ReqId(a.alias, make_ref(), "y")
    assert a != ReqId(new_alias(None), a.mref, "x")
    assert hash(a) == hash(ReqId(a.alias, make_ref(), "y"))


# -- collections ------------------------------------------------------------------------


def collection_of(reqs_labels):
    coll = ReqIdCollection()
    for req, label in reqs_labels:
        coll = coll.add(req, label)
    return coll


@SETTINGS
@given(values)
def test_an_empty_collection_answers_no_request(msg):
    """Every message, even a reply to some request, answers "no_request" for an empty collection."""
    req = new_req()
    assert NO_REQUEST == check_collection(msg, ReqIdCollection(), True)
    assert NO_REQUEST == check_collection((req.alias, msg), ReqIdCollection(), False)


@SETTINGS
@given(st.lists(labels, min_size=1, max_size=6), st.data(), values, st.booleans())
def test_a_reply_answers_with_its_label_and_the_rest(labels_, data, value, delete):
    """A reply to the k-th request answers (("reply", v), label_k, rest); delete removes exactly that request."""
    reqs = [new_req(f"s{i}") for i in range(len(labels_))]
    coll = collection_of(zip(reqs, labels_))
    k = data.draw(st.integers(0, len(reqs) - 1))
    answer, label, rest = check_collection((reqs[k].alias, value), coll, delete)
    assert "reply" == answer[0]
    assert value is answer[1]
    assert labels_[k] is label
    if delete:
        expected = [(r, lab) for i, (r, lab) in enumerate(zip(reqs, labels_)) if i != k]
        assert [(r, id(lab)) for r, lab in expected] == [(r, id(lab)) for r, lab in rest.to_list()]
    else:
        assert coll is rest
    assert len(reqs) == len(coll)


@SETTINGS
@given(st.integers(1, 5), st.data(), values, st.booleans())
def test_a_down_answers_an_error_with_its_label(n, data, reason, delete):
    """A DOWN of the k-th request's monitor answers (("error", (reason, server_k)), label_k, rest)."""
    reqs = [new_req(f"s{i}") for i in range(n)]
    coll = collection_of((r, f"label{i}") for i, r in enumerate(reqs))
    k = data.draw(st.integers(0, n - 1))
    answer, label, rest = check_collection(("DOWN", reqs[k].mref, "process", "pid", reason), coll, delete)
    assert ("error", f"s{k}", f"label{k}") == (answer[0], answer[1][1], label)
    assert reason is answer[1][0]
    assert (n - 1 if delete else n) == len(rest)
    assert delete == (reqs[k] not in list(rest))


@SETTINGS
@given(st.integers(1, 5), st.data(), st.booleans())
def test_other_messages_answer_no_reply_for_a_collection(n, data, delete):
    """A message answering no request of a non-empty collection answers "no_reply"."""
    reqs = [new_req() for _ in range(n)]
    coll = collection_of((r, i) for i, r in enumerate(reqs))
    outsider = new_req()
    msg = data.draw(unrelated_messages(outsider))
    assert NO_REPLY == check_collection(msg, coll, delete)
    assert NO_REPLY == check_collection((outsider.alias, 1), coll, delete)


def test_add_returns_a_new_collection_and_keeps_the_old():
    """add answers a new collection; the one added to is unchanged."""
    a, b = new_req(), new_req()
    empty = ReqIdCollection()
    one = empty.add(a, "a")
    two = one.add(b, "b")
    assert (0, [], 1, [(a, "a")], [(a, "a"), (b, "b")]) == (
        len(empty),
        empty.to_list(),
        len(one),
        one.to_list(),
        two.to_list(),
    )
    assert (False, False) == (empty is one, one is two)


def test_without_returns_a_new_collection_and_keeps_the_old():
    """without answers a new collection lacking the request; the original keeps it."""
    a, b = new_req(), new_req()
    coll = collection_of([(a, 1), (b, 2)])
    assert ([(b, 2)], [(a, 1), (b, 2)]) == (coll.without(a).to_list(), coll.to_list())
    assert [(a, 1), (b, 2)] == coll.without(new_req()).to_list()


def test_adding_a_duplicate_raises_and_changes_nothing():
    """Adding a request already in the collection raises ValueError, whatever the label."""
    a = new_req()
    coll = collection_of([(a, "first")])
    with pytest.raises(ValueError):
        coll.add(a, "second")
    with pytest.raises(ValueError):
        coll.add(ReqId(a.alias, make_ref(), "other"), "third")
    assert [(a, "first")] == coll.to_list()


def test_delete_false_keeps_the_answered_request():
    """With delete false the answered request stays, so its next message answers again."""
    a = new_req()
    coll = collection_of([(a, "a")])
    _, _, rest = check_collection((a.alias, 1), coll, False)
    assert (("reply", 2), "a", rest) == check_collection((a.alias, 2), rest, False)


def test_gen_server_reqids_helpers():
    """reqids_new/add/size/to_list build and read collections as the ReqIdCollection methods do."""
    a, b = new_req(), new_req()
    empty = gen_server.reqids_new()
    coll = gen_server.reqids_add(b, "b", gen_server.reqids_add(a, "a", empty))
    assert (0, 2, [(a, "a"), (b, "b")]) == (
        gen_server.reqids_size(empty),
        gen_server.reqids_size(coll),
        gen_server.reqids_to_list(coll),
    )
    assert Alias is type(a.alias)
