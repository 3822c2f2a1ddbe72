"""appdecide: laws for the application controller's pure decisions.

The laws of check_spec, start_order, start_refusal, on_tree_exit, stop_others
and env_after_load over generated graphs and reasons are in
test_application.py (they import them through ensemble.application, which
re-exports these very functions); here are the laws of the decisions the
runtime used to make inline, and the re-export itself.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ensemble import application
from ensemble.decide import application as appdecide
from ensemble.decide.application import (
    TYPES,
    already_started_meanwhile,
    answer_of,
    interpret_start,
    key_value,
    phase_ok,
    restart_type_refusal,
)

from .._hostile import Weird, WeirdStr

SETTINGS = settings(max_examples=100, deadline=None)


class Pid:
    """A stand-in for the runtime's pid type: the decisions only read ``type(x) is pid_type``."""


class SubPid(Pid):
    """Not exactly the pid type: not a pid."""


class Str(str):
    """A str subclass equal to a tag but not exactly a str."""


leaf = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=4),
    st.sampled_from(["ok", "error", "already_started", "normal", "env"]),
    st.builds(Weird),
    st.builds(Pid),
    st.builds(SubPid),
    st.builds(Str, st.sampled_from(["ok", "env"])),
)
values = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)


def test_application_re_exports_the_decisions():
    """ensemble.application's public decisions are appdecide's own objects (one definition each)."""
    for name in ["ApplicationError", "TYPES", "RECORD", "STOP_OTHERS", "check_spec", "dependencies",
                 "start_refusal", "start_order", "on_tree_exit", "stop_others", "last_first", "env_after_load"]:
        assert getattr(appdecide, name) is getattr(application, name), name
    for name in appdecide.__all__:
        assert hasattr(appdecide, name), name


@SETTINGS
@given(st.one_of(st.sampled_from(TYPES), st.text(max_size=10), st.integers(), st.none()))
def test_law_only_the_three_types_are_taken(type_):
    """A restart type is refused exactly when it is none of TYPES, with OTP's reason."""
    got = restart_type_refusal(type_)
    if type_ in TYPES:
        assert got is None
    else:
        assert ("invalid_restart_type", type_) == got


@SETTINGS
@given(st.one_of(st.text(max_size=4), st.integers(), st.none(), st.tuples(st.text(max_size=3), st.text(max_size=3))),
       st.text(max_size=4))
def test_law_only_already_started_of_that_app_is_skipped(reason, app):
    """ensure_all_started skips a failed start only when that very app was started meanwhile."""
    assert already_started_meanwhile(("already_started", app), app) is True
    expected = type(reason) is tuple and reason == ("already_started", app)
    assert expected is already_started_meanwhile(reason, app)
    assert already_started_meanwhile(("not_started", app), app) is False


@SETTINGS
@given(values)
def test_law_a_phase_goes_on_only_on_the_exact_str_ok(answer):
    """phase_ok never raises, and is True for exactly the str "ok" (not a subclass, not a tuple)."""
    assert (type(answer) is str and answer == "ok") is phase_ok(answer)


def test_phase_ok_examples():
    assert True is phase_ok("ok")
    assert False is phase_ok(Str("ok"))
    assert False is phase_ok(("ok",))
    assert False is phase_ok(Weird())
    assert False is phase_ok(WeirdStr("ok"))


@SETTINGS
@given(st.one_of(st.just("ok"), st.tuples(st.just("error"), values)))
def test_law_an_ok_outcome_runs_and_answers_ok_anything_else_is_passed_on(outcome):
    """A master's "ok" is (True, ("ok", "ok")); an ("error", r) is answered as it is, never examined."""
    runs, answer = answer_of(outcome)
    if type(outcome) is str:
        assert (True, ("ok", "ok")) == (runs, answer)
    else:
        assert runs is False
        assert answer is outcome


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), st.integers()), st.dictionaries(st.text(max_size=4), st.integers()),
       st.text(max_size=6))
def test_law_get_key_reads_the_spec_or_a_copy_of_the_env(spec, env, key):
    """"env" answers a fresh copy of the current env; any other key the spec's value or None."""
    got = key_value(spec, env, key)
    if key == "env":
        assert got == env
        assert got is not env
    else:
        assert spec.get(key) == got


@SETTINGS
@given(values)
def test_law_start_answers_a_pid_or_pid_and_state_for_any_value(ret):
    """interpret_start reads only types and lengths: never raises, pids are exactly pid_type."""
    got = interpret_start(ret, Pid)
    if type(ret) is Pid:
        assert got is not None and got[0] is ret and got[1] is None
    elif type(ret) is tuple and len(ret) == 2 and type(ret[0]) is Pid:
        assert got is ret
    else:
        assert got is None


def test_interpret_start_examples():
    p, state = Pid(), Weird()
    assert (p, None) == interpret_start(p, Pid)
    pair = (p, state)
    assert pair is interpret_start(pair, Pid)
    assert None is interpret_start(SubPid(), Pid)
    assert None is interpret_start((p,), Pid)
    assert None is interpret_start((p, 1, 2), Pid)
    assert None is interpret_start(Weird(), Pid)


# -- master_event / controller_event --------------------------------------------------------

MASTER = appdecide.MASTER
messages = st.one_of(
    values,
    st.tuples(st.sampled_from([MASTER, "EXIT", "DOWN", "other"]), values),
    st.tuples(st.sampled_from([MASTER, "EXIT", "DOWN"]), values, values),
    st.tuples(st.sampled_from([MASTER, "EXIT"]), values, values, values),
    st.tuples(st.just("DOWN"), values, values, values, values),
)


@SETTINGS
@given(messages, st.one_of(st.none(), st.builds(Pid)), st.builds(Pid))
def test_law_a_master_reads_a_tree_exit_a_stop_or_its_controllers_exit(msg, mref, controller):
    """Exactly one meaning per message, by shape, identity of mref/controller, and the tags' ``==``.

    The tags are compared with ``==`` as the master always did: a message with
    a hostile value where a tag belongs raises (it never comes from the runtime).
    """
    try:
        got = appdecide.master_event(msg, mref, controller)
    except RuntimeError:
        assert type(msg) is tuple and len(msg) in (2, 3) and any(type(x) is Weird for x in msg[:2])
        return
    is_tuple = type(msg) is tuple
    if is_tuple and len(msg) == 5 and mref is not None and msg[1] is mref:
        assert appdecide.TREE_EXITED == got
    elif is_tuple and len(msg) == 2 and msg[0] == MASTER and msg[1] == "stop":
        assert appdecide.STOP == got
    elif is_tuple and len(msg) == 3 and msg[0] == "EXIT" and msg[1] is controller:
        assert appdecide.CONTROLLER_GONE == got
    else:
        assert got is None


def test_master_event_examples():
    mref, controller = Pid(), Pid()
    assert appdecide.TREE_EXITED == appdecide.master_event(("DOWN", mref, "process", Pid(), Weird()), mref, controller)
    assert None is appdecide.master_event(("DOWN", None, "process", Pid(), "x"), None, controller), "a library has no tree"
    assert appdecide.STOP == appdecide.master_event((MASTER, "stop"), mref, controller)
    assert appdecide.CONTROLLER_GONE == appdecide.master_event(("EXIT", controller, Weird()), mref, controller)
    assert None is appdecide.master_event(("EXIT", Pid(), "x"), mref, controller)
    assert None is appdecide.master_event(Weird(), mref, controller)


def _hashable(x):
    try:
        hash(x)
    except RuntimeError:
        return False
    return True


@SETTINGS
@given(messages, st.lists(st.builds(Pid), max_size=3), st.data())
def test_law_the_controller_reads_reports_and_deaths_of_its_masters(msg, pool, data):
    """A 4-tuple tagged MASTER is a report, passed on as it is; an EXIT is a death only from a known master."""
    if pool and data.draw(st.booleans()) and type(msg) is tuple and len(msg) == 3:
        msg = ("EXIT", pool[0], msg[2])
    masters = {p: "app" for p in pool}
    try:
        got = appdecide.controller_event(msg, masters)
    except RuntimeError:  # a hostile tag, or ("EXIT", unhashable, r): raises, as the controller always did
        assert type(msg) is tuple and len(msg) in (3, 4)
        assert type(msg[0]) is Weird or (len(msg) == 3 and not _hashable(msg[1]))
        return
    if type(msg) is tuple and len(msg) == 4 and type(msg[0]) is str and msg[0] == MASTER:
        assert "told" == got[0] and all(a is b for a, b in zip(got[1:], msg[1:]))
    elif type(msg) is tuple and len(msg) == 3 and type(msg[0]) is str and msg[0] == "EXIT" and any(msg[1] is p for p in pool):
        assert "died" == got[0] and got[1] is msg[1] and got[2] is msg[2]
    else:
        assert got is None
