"""Payload offload, the pure part (fusee.blob_refs): the reference shape, the decision, naming, liveness."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings, strategies as st

from fusee import blob_refs as br
from fusee import records as r

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=30,
)


def records_with(payload):
    return st.sampled_from(
        [
            r.Step(1, 2, "s", 1, "ok", payload),
            r.Start(3, "id", "wf", 1, 1.5, payload, None),
            r.Signal(4, "sig", None, payload),
            r.Done(5, "completed", 2.0, payload),
            r.Send(6, 0, "t", "n", payload),
        ]
    )


records = json_values.flatmap(records_with)


@settings(max_examples=100, deadline=None)
@given(records, st.integers(0, 200) | st.none())
def test_split_then_join_gives_the_body_back(rec, threshold):
    body = r.encode_record(rec)
    new, blobs = br.split(body, threshold)
    store = dict(blobs)
    assert br.join(new, lambda name, size: store[name]) == body
    assert r.decode_record(br.join(new, lambda name, size: store[name])) == r.decode_record(body)
    if not blobs:
        assert new is body
    else:
        # the journaled body refers to exactly the blobs listed, each named by its content's SHA-256
        assert set(br.refs(new)) == set(store)
        for name, content in blobs:
            assert name == hashlib.sha256(content).hexdigest() and len(content) > threshold
        with pytest.raises(ValueError):  # a reader that does not resolve refuses it: never a wrong value
            r.decode_record(new)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 10**6) | st.none())
def test_the_decision(size, threshold):
    assert br.should_offload(size, threshold) == (threshold is not None and size > threshold)


def test_two_payloads_of_the_same_content_are_one_blob():
    big = "x" * 500
    body = r.encode_record(r.Start(1, "id", "wf", 1, 1.0, big, None, None, big, None))
    new, blobs = br.split(body, 100)
    assert len(blobs) == 1 and br.refs(new) == [blobs[0][0]]
    assert br.join(new, lambda n, s: dict(blobs)[n]) == body


def test_a_users_dict_with_the_marker_key_is_a_value_not_a_reference():
    rec = r.Step(1, 2, "s", 1, "ok", {"a": 1, "$blobs": {"payload": ["0" * 64, 3]}})
    body = r.encode_record(rec)
    assert br.refs(body) == []
    assert br.join(body, lambda n, s: pytest.fail("no blob to load")) is body
    new, blobs = br.split(body, 10)
    assert r.decode_record(br.join(new, lambda n, s: dict(blobs)[n])) == rec


@pytest.mark.parametrize(
    "marker",
    ['{"payload":["zz",3]}', '{"payload":["' + "a" * 64 + '",-1]}', '{"nope":["' + "a" * 64 + '",3]}', "{}", "[]"],
)
def test_a_malformed_reference_is_refused(marker):
    body = ('{"t":"step","run":1,"seq":2,"name":"s","attempt":1,"status":"ok","payload":null,"$blobs":' + marker + "}").encode()
    with pytest.raises(ValueError):  # refused by join, or (no marker it knows) by the record's reader
        r.decode_record(br.join(body, lambda n, s: b"1"))


@given(st.text())
def test_blob_names(s):
    assert br.is_blob_name(br.blob_name(s.encode()))
    assert not br.is_blob_name(br.blob_name(s.encode()) + ".tmp")


@given(
    st.sets(st.sampled_from("abcdef")),
    st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 20)),
    st.integers(0, 20),
    st.sets(st.sampled_from(["a", "b", "c", "d", "e", "f", "a.tmp", "z"])),
)
def test_which_blobs_are_live_and_which_go(checkpoint, logged, after, files):
    keep = br.live(checkpoint, logged, after)
    assert keep == set(checkpoint) | {n for n, lsn in logged.items() if lsn > after}
    gone = br.garbage(files, keep)
    assert set(gone) == set(files) - keep and set(gone).isdisjoint(keep)


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_a_bad_threshold_is_refused(bad):
    with pytest.raises(ValueError):
        br.check_threshold(bad)
    assert br.check_threshold(None) is None and br.check_threshold(0) == 0
