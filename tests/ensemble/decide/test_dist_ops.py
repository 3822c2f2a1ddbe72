"""ensemble.decide.dist_ops: which operation tuples a node carries out (laws over any input)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble.decide import dist_ops


class FakePid:
    """Stands for the remote pid class the receiving node passes in."""


class FakeAlias:
    """Stands for the remote alias class the receiving node passes in."""


_BY_TYPE = {
    int: st.integers(-(2**70), 2**70),
    str: st.text(max_size=8),
    tuple: st.tuples(st.integers(), st.text(max_size=3)),
    bool: st.booleans(),
    "pid": st.builds(FakePid),
    "reply": st.booleans() | st.builds(FakeAlias),
}
_ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                      st.lists(st.integers(), max_size=3), st.tuples(st.integers()), st.builds(FakePid),
                      st.builds(FakeAlias))


def _field(want):
    return _ANYTHING if want is dist_ops._ANY else _BY_TYPE[want]


@st.composite
def good_ops(draw):
    name = draw(st.sampled_from(sorted(dist_ops.SHAPES)))
    return (name, *(draw(_field(w)) for w in dist_ops.SHAPES[name]))


@settings(max_examples=300, deadline=None)
@given(good_ops())
def test_every_operation_of_its_shape_is_well_formed(env):
    assert dist_ops.well_formed(env, FakePid, FakeAlias)


@settings(max_examples=300, deadline=None)
@given(good_ops(), st.data())
def test_a_field_of_another_type_is_refused(env, data):
    """Changing one typed field to a value of another type (a bool for an int included) is refused."""
    shape = dist_ops.SHAPES[env[0]]
    typed = [i for i, w in enumerate(shape) if w is not dist_ops._ANY]
    if not typed:
        return
    i = data.draw(st.sampled_from(typed))
    wanted = {"pid": (FakePid,), "reply": (bool, FakeAlias)}.get(shape[i], (shape[i],))
    bad = data.draw(_ANYTHING.filter(lambda v: type(v) not in wanted))
    assert not dist_ops.well_formed(env[: i + 1] + (bad,) + env[i + 2 :], FakePid, FakeAlias)


@settings(max_examples=300, deadline=None)
@given(good_ops(), st.integers(-3, 3).filter(bool))
def test_a_field_too_many_or_too_few_is_refused(env, delta):
    changed = env + (None,) * delta if delta > 0 else env[:delta]
    assert not dist_ops.well_formed(changed, FakePid, FakeAlias)


@settings(max_examples=300, deadline=None)
@given(_ANYTHING | st.lists(_ANYTHING, max_size=4).map(tuple) | st.tuples(st.text(max_size=12), _ANYTHING))
def test_anything_else_answers_a_bool_and_unknown_names_are_refused(env):
    got = dist_ops.well_formed(env, FakePid, FakeAlias)
    assert type(got) is bool
    if not (type(env) is tuple and env and type(env[0]) is str and env[0] in dist_ops.SHAPES):
        assert got is False


def test_a_reply_alias_is_refused_when_the_node_names_no_alias_class():
    env = ("spawn", FakePid(), 1, "m:f", (), False, FakeAlias(), 0)
    assert dist_ops.well_formed(env, FakePid, FakeAlias)
    assert not dist_ops.well_formed(env, FakePid)
