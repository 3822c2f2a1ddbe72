"""ensemble.application as OTP's: load and env, start and stop, dependencies, phases, types, and its decisions' laws."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ensemble as e
from ensemble import NOMATCH, TIMEOUT, application, gen_server, logger
from ensemble.decide import application as appdecide
from ensemble.application import (
    RECORD,
    STOP_OTHERS,
    ApplicationError,
    check_spec,
    dependencies,
    env_after_load,
    interpret_start,
    last_first,
    on_tree_exit,
    start_order,
    start_refusal,
    stop_others,
)
from ensemble.gen_server import GenServer
from ensemble.decide.signal import is_shutdown

from .test_exit_signals import down_of

SETTINGS = settings(max_examples=100, deadline=None)

# -- helpers ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_applications_left():
    """After each test: stop every running application, last started first, and unload everything."""
    yield
    for name in reversed(application.which_applications()):
        try:
            application.stop(name)
        except Exception:  # noqa: BLE001 - a test may leave a stop that raises
            pass
    for name in application.loaded_applications():
        application.unload(name)


@pytest.fixture
def reports():
    """Forward every report made while the test runs to the test's mailbox as ("report", report)."""
    me = e.self()
    previous = logger.set_handler(lambda r: e.send(me, ("report", r)))
    yield
    logger.set_handler(previous)


def next_tagged(tag, timeout=2.0):
    """Take the oldest tuple message whose first element is ``tag`` (TIMEOUT if none comes)."""

    def matcher(m):
        if type(m) is tuple and m and type(m[0]) is str and m[0] == tag:
            return m
        return NOMATCH

    return e.receive(matcher, timeout=timeout)


def next_report(kind, timeout=2.0):
    """Take the oldest forwarded report of ``kind`` (see the reports fixture) and answer it."""

    def matcher(m):
        if type(m) is tuple and len(m) == 2 and m[0] == "report" and m[1]["kind"] == kind:
            return m[1]
        return NOMATCH

    got = e.receive(matcher, timeout=timeout)
    assert got is not TIMEOUT, f"no {kind} report came"
    return got


def no_more(tag):
    """True when no message tagged ``tag`` is in the mailbox now."""
    return TIMEOUT is next_tagged(tag, timeout=0)


def until(fn, expected, steps=400):
    """Poll ``fn()`` until it answers ``expected`` (bounded: about 2 s); answer the last value seen."""
    seen = None
    for _ in range(steps):
        seen = fn()
        if seen == expected:
            return seen
        e.receive(lambda m: NOMATCH, timeout=0.005)
    return seen


def reason_of(err):
    """The reason of a raised ApplicationError (for ``pytest.raises`` blocks)."""
    return err.value.reason


class Top(GenServer):
    """An application's top process: tells its owner when it stops, answers "get" with its name."""

    def __init__(self, owner, name):
        self.owner = owner
        self.name = name

    def init(self):
        return ("ok", self.name)

    def handle_call(self, request, from_, state):
        return ("reply", (state, e.is_alive(e.self())), state)

    def handle_info(self, msg, state):
        match msg:  # it traps exits, as a supervisor does: exit(top, r) from a test stops it with r
            case ("EXIT", _, reason):
                return ("stop", reason, state)
        return ("noreply", state)

    def terminate(self, reason, state):
        e.send(self.owner, ("terminate", state, reason))


def spec(name, owner, *, deps=(), **extra):
    """A spec whose start links a Top and tells ("started", name, top); stop tells ("stopped", name, state)."""

    def start():
        top = gen_server.start_link(Top(owner, name), trap_exit=True)  # a supervisor traps too
        e.send(owner, ("started", name, top))
        return (top, f"{name}-state")

    def stop(state):
        e.send(owner, ("stopped", name, state))

    return {"name": name, "start": start, "stop": stop, "applications": list(deps), **extra}


def started_top(name):
    """The top pid the ("started", name, top) message announced."""
    got = e.receive(lambda m: m[2] if type(m) is tuple and m[:2] == ("started", name) else NOMATCH, timeout=2)
    assert got is not TIMEOUT, f"{name} did not start"
    return got


def stopped_names(n):
    """The names of the next ``n`` ("stopped", name, state) messages, in arrival order."""
    names = []
    for _ in range(n):
        got = next_tagged("stopped")
        assert got is not TIMEOUT, f"only {names} stopped"
        names.append(got[1])
    return names


def load_all(*specs):
    """Load each spec in order."""
    for s in specs:
        application.load(s)


# -- load, unload, env, get_key -------------------------------------------------------------


def test_load_answers_the_name_and_get_key_reads_the_spec():
    """load answers the name; get_key reads the checked spec, with defaults, and its current env for "env"."""
    assert "shop" == application.load(
        {"name": "shop", "description": "the shop", "applications": ["db"], "env": {"port": 80}}
    )
    assert ["shop"] == application.loaded_applications()
    assert "the shop" == application.get_key("shop", "description")
    assert ("db",) == application.get_key("shop", "applications")
    assert () == application.get_key("shop", "included_applications")
    assert {"port": 80} == application.get_key("shop", "env")
    assert None is application.get_key("shop", "no_such_key")
    assert None is application.get_key("not_loaded", "description")


@pytest.mark.parametrize(
    "bad, reason",
    [
        ({"start": lambda: None}, ("invalid_spec", "name", None)),
        ({"name": ""}, ("invalid_spec", "name", "")),
        ({"name": "a", "start": 42}, ("invalid_spec", "start", 42)),
        ({"name": "a", "applications": "db"}, ("invalid_spec", "applications", "db")),
        ({"name": "a", "env": [1]}, ("invalid_spec", "env", [1])),
        ({"name": "a", "start_phases": [("go", None)]}, ("invalid_spec", "start_phase", None)),
        ({"name": "a", "type": "permanent"}, ("invalid_spec", "type", "permanent")),
        (["name", "a"], ("invalid_spec", None, ["name", "a"])),
    ],
    ids=["no-name", "empty-name", "start", "applications", "env", "phases", "type", "not-a-dict"],
)
def test_load_refuses_a_bad_spec(bad, reason):
    """A spec check_spec refuses raises ("invalid_spec", key, value) and loads nothing."""
    with pytest.raises(ApplicationError) as err:
        application.load(bad)
    assert reason == reason_of(err)
    assert [] == application.loaded_applications()


def test_env_get_set_unset():
    """get_env answers the value or the default; set_env and unset_env answer "ok"; get_all_env is a copy."""
    application.load({"name": "a", "env": {"k": 1}})
    assert (1, "dflt") == (application.get_env("a", "k"), application.get_env("a", "x", "dflt"))
    assert "ok" == application.set_env("a", "x", 2)
    env = application.get_all_env("a")
    env["mutated"] = True
    assert {"k": 1, "x": 2} == application.get_all_env("a")
    assert "ok" == application.unset_env("a", "k")
    assert {"x": 2} == application.get_all_env("a")
    assert {} == application.get_all_env("nobody")


def test_reload_takes_the_new_spec_but_keeps_set_env_values():
    """A reload replaces the spec and its env, but what set_env set is kept."""
    application.load({"name": "a", "description": "old", "env": {"k": "old", "gone": 1, "set": "old"}})
    application.set_env("a", "set", "mine")
    assert "a" == application.load({"name": "a", "description": "new", "env": {"k": "new", "set": "new"}})
    assert "new" == application.get_key("a", "description")
    assert {"k": "new", "set": "mine"} == application.get_all_env("a")


def test_set_env_before_load_is_kept_and_unload_forgets_the_env():
    """A value set before the load survives it; unload drops the env, set values included."""
    application.set_env("a", "early", 1)
    application.load({"name": "a", "env": {"k": 0}})
    assert {"k": 0, "early": 1} == application.get_all_env("a")
    assert "ok" == application.unload("a")
    assert ([], {}) == (application.loaded_applications(), application.get_all_env("a"))
    application.load({"name": "a"})
    assert {} == application.get_all_env("a")


def test_unload_refuses_a_running_or_unknown_application():
    """unload raises ("running", name) while it runs and ("not_loaded", name) for an unknown one."""
    application.load({"name": "lib"})
    application.start("lib")
    with pytest.raises(ApplicationError) as err:
        application.unload("lib")
    assert ("running", "lib") == reason_of(err)
    with pytest.raises(ApplicationError) as err:
        application.unload("nobody")
    assert ("not_loaded", "nobody") == reason_of(err)


# -- start and stop ---------------------------------------------------------------------------


def test_start_runs_start_in_a_master_and_the_top_is_its_child():
    """start answers "ok" once start returned; the top is linked to the application's master, not the caller."""
    me = e.self()
    application.load(spec("a", me))
    assert "ok" == application.start("a")
    top = started_top("a")
    master = e.process_info(top, "ancestors")[0]
    assert [master] == e.process_info(top, "links")
    assert master is not me
    assert (["a"], True) == (application.which_applications(), application.started("a"))


def test_stop_runs_prep_stop_while_the_tree_is_up_then_stop_with_its_state():
    """stop: prep_stop while the tree is up, the top stopped with "shutdown", then stop(prep_stop's state)."""
    me = e.self()
    tops = []

    def prep_stop(state):
        e.send(me, ("prep_stop", state, gen_server.call(tops[0], "get")))
        return "prepped"

    application.load(spec("a", me, prep_stop=prep_stop))
    application.start("a")
    top = started_top("a")
    tops.append(top)
    assert "ok" == application.stop("a")
    assert ("prep_stop", "a-state", ("a", True)) == next_tagged("prep_stop")
    assert ("terminate", "a", "shutdown") == next_tagged("terminate")
    assert ("stopped", "a", "prepped") == next_tagged("stopped")
    assert (False, [], False) == (e.is_alive(top), application.which_applications(), application.started("a"))


def test_a_failing_prep_stop_still_stops_the_tree_and_stop_gets_the_first_state():
    """If prep_stop raises, the tree stops, stop gets start's state, and stop raises prep_stop's exception."""
    me = e.self()
    boom = LookupError("prep_stop failed")

    def prep_stop(state):
        raise boom

    application.load(spec("a", me, prep_stop=prep_stop))
    application.start("a")
    with pytest.raises(LookupError) as err:
        application.stop("a")
    assert boom is err.value
    assert ("terminate", "a", "shutdown") == next_tagged("terminate")
    assert ("stopped", "a", "a-state") == next_tagged("stopped")
    assert [] == application.which_applications()


def test_a_top_that_does_not_stop_cleanly_is_killed_and_stop_still_runs():
    """A top whose terminate raises exits with that exception; stop(state) runs all the same."""
    me = e.self()

    class Stubborn(Top):
        def terminate(self, reason, state):
            raise RuntimeError("will not stop")

    def start():
        top = gen_server.start_link(Stubborn(me, "a"), trap_exit=True)
        e.send(me, ("started", "a", top))
        return top

    application.load({"name": "a", "start": start, "stop": lambda s: e.send(me, ("stopped", "a", s))})
    application.start("a")
    ref = e.monitor(started_top("a"))
    assert "ok" == application.stop("a")
    assert isinstance(down_of(ref), RuntimeError)
    assert ("stopped", "a", None) == next_tagged("stopped")


def test_stop_of_an_application_that_does_not_run_answers_none():
    """stop answers None for a loaded application that does not run, and for an unknown name."""
    application.load({"name": "a"})
    assert (None, None) == (application.stop("a"), application.stop("nobody"))


def test_start_refusals():
    """start raises ("not_loaded", name), then ("already_started", name) once it runs."""
    with pytest.raises(ApplicationError) as err:
        application.start("nobody")
    assert ("not_loaded", "nobody") == reason_of(err)
    application.load({"name": "lib"})
    application.start("lib")
    with pytest.raises(ApplicationError) as err:
        application.start("lib")
    assert ("already_started", "lib") == reason_of(err)


def test_start_refuses_an_unknown_restart_type():
    """A type that is not permanent, transient or temporary raises ("invalid_restart_type", t)."""
    application.load({"name": "lib"})
    with pytest.raises(ApplicationError) as err:
        application.start("lib", "forever")
    assert ("invalid_restart_type", "forever") == reason_of(err)
    with pytest.raises(ApplicationError) as err:
        application.ensure_all_started("lib", "forever")
    assert ("invalid_restart_type", "forever") == reason_of(err)
    assert [] == application.which_applications()


@pytest.mark.parametrize("ret", [None, "ok", ("ok", "not a pid"), ("not a pid", "state")], ids=repr)
def test_start_answering_no_pid_is_a_bad_return(ret):
    """A start that answers neither a pid nor (pid, state) fails with ("bad_return", r); nothing runs."""
    application.load({"name": "a", "start": lambda: ret})
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert ("bad_return", ret) == reason_of(err)
    assert [] == application.which_applications()


def test_a_bad_return_takes_down_what_start_linked():
    """What start linked to the master goes down with "shutdown" when the start fails."""
    me = e.self()

    def start():
        top = gen_server.start_link(Top(me, "a"), trap_exit=True)  # so its parent's exit runs terminate
        e.send(me, ("started", "a", top))
        return ("ok", top)  # OTP's shape, not this API's

    application.load({"name": "a", "start": start})
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert ("bad_return", ("ok", started_top("a"))) == reason_of(err)
    assert ("terminate", "a", "shutdown") == next_tagged("terminate")


def test_a_start_that_raises_fails_with_the_exception():
    """A start that raises fails start with the exception as reason and cause; exit(r) fails it with r."""
    boom = ValueError("no start")

    def raising():
        raise boom

    application.load({"name": "a", "start": raising})
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert (boom, boom) == (reason_of(err), err.value.__cause__)
    application.load({"name": "b", "start": lambda: e.exit("nope")})
    with pytest.raises(ApplicationError) as err:
        application.start("b")
    assert "nope" == reason_of(err)
    assert [] == application.which_applications()


def test_start_can_read_its_env_and_start_another_application():
    """start runs outside the controller: it may call get_env and start another application."""
    me = e.self()

    def start():
        e.send(me, ("env", application.get_env("a", "k")))
        application.start("lib")
        return gen_server.start_link(Top(me, "a"))

    load_all({"name": "lib"}, {"name": "a", "start": start, "env": {"k": "v"}})
    assert "ok" == application.start("a")
    assert ("env", "v") == next_tagged("env")
    assert ["lib", "a"] == application.which_applications()


def test_a_library_application_runs_without_processes():
    """A spec with no start runs as a library: start and stop answer "ok"; stop(None) runs."""
    me = e.self()
    application.load({"name": "lib", "stop": lambda s: e.send(me, ("stopped", "lib", s))})
    assert "ok" == application.start("lib", "permanent")
    assert ["lib"] == application.which_applications()
    assert "ok" == application.stop("lib")
    assert ("stopped", "lib", None) == next_tagged("stopped")


def test_a_second_start_during_a_start_waits_for_it_and_gets_its_answer():
    """Two starts of one application: start runs once, and both callers get "ok" once it runs."""
    me = e.self()
    calls = []

    def start():
        calls.append(1)
        e.send(me, ("starting", e.self()))
        e.receive(lambda m: m if m == "go" else NOMATCH)
        return gen_server.start_link(Top(me, "a"))

    application.load({"name": "a", "start": start})
    first = e.spawn(application.start, "a")
    master = next_tagged("starting")[1]
    second = e.spawn(application.start, "a")
    assert TIMEOUT is e.exit_reason(second, timeout=0.05)  # waiting, not refused
    e.send(master, "go")
    assert ("ok", "ok", [1]) == (e.join(first, timeout=2), e.join(second, timeout=2), calls)


# -- dependencies and ensure_all_started ---------------------------------------------------


def test_start_needs_its_dependencies_running():
    """start raises ("not_started", dep) for the first dependency that does not run; once they run, it starts."""
    me = e.self()
    load_all(spec("a", me), spec("b", me), spec("c", me, deps=["a", "b"]))
    with pytest.raises(ApplicationError) as err:
        application.start("c")
    assert ("not_started", "a") == reason_of(err)
    application.start("a")
    with pytest.raises(ApplicationError) as err:
        application.start("c")
    assert ("not_started", "b") == reason_of(err)
    application.start("b")
    assert "ok" == application.start("c")
    assert ["a", "b", "c"] == application.which_applications()


def test_optional_applications_not_loaded_are_skipped():
    """An optional dependency that is not loaded is skipped; one that is loaded must run."""
    application.load({"name": "a", "optional_applications": ["opt"]})
    assert "ok" == application.start("a")
    application.stop("a")
    application.load({"name": "opt"})
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert ("not_started", "opt") == reason_of(err)
    assert ["opt", "a"] == application.ensure_all_started("a")


def test_ensure_all_started_starts_dependencies_depth_first_in_order():
    """ensure_all_started starts the dependencies depth-first, in the order listed, and answers them."""
    me = e.self()
    load_all(
        spec("top", me, deps=["x", "y"]),
        spec("x", me, deps=["base"]),
        spec("y", me, deps=["base", "z"]),
        spec("base", me),
        spec("z", me),
    )
    assert ["base", "x", "z", "y", "top"] == application.ensure_all_started("top", "permanent")
    assert ["base", "x", "z", "y", "top"] == application.which_applications()
    assert [] == application.ensure_all_started("top")


def test_ensure_all_started_leaves_out_what_runs():
    """Dependencies that already run are neither started nor answered."""
    load_all({"name": "a"}, {"name": "b", "applications": ["a"]}, {"name": "c", "applications": ["a", "b"]})
    application.start("a")
    assert ["b", "c"] == application.ensure_all_started("c")


def test_ensure_all_started_rolls_back_when_a_start_fails():
    """A failing start stops what this call started, the last first, and raises its reason; the rest runs on."""
    me = e.self()
    boom = RuntimeError("c cannot start")

    def failing():
        raise boom

    load_all(
        spec("pre", me),
        spec("a", me),
        spec("b", me, deps=["pre", "a"]),
        {"name": "c", "start": failing},
        spec("top", me, deps=["b", "c"]),
    )
    application.start("pre")
    with pytest.raises(ApplicationError) as err:
        application.ensure_all_started("top")
    assert boom is reason_of(err)
    assert ["b", "a"] == stopped_names(2)
    assert ["pre"] == application.which_applications()


def test_ensure_all_started_of_a_missing_or_circular_dependency():
    """A dependency not loaded raises ("not_loaded", dep); a cycle ("circular_dependencies", app); nothing starts."""
    application.load({"name": "a", "applications": ["missing"]})
    with pytest.raises(ApplicationError) as err:
        application.ensure_all_started("a")
    assert ("not_loaded", "missing") == reason_of(err)
    load_all({"name": "b", "applications": ["c"]}, {"name": "c", "applications": ["d"]})
    application.load({"name": "d", "applications": ["b"]})
    with pytest.raises(ApplicationError) as err:
        application.ensure_all_started("b")
    assert ("circular_dependencies", "b") == reason_of(err)
    assert [] == application.which_applications()


def test_ensure_all_started_re_raises_a_dependency_refusal():
    """ensure_all_started raises the reason a dependency's start failed with (here a bad return)."""
    load_all({"name": "dep", "start": lambda: "oops"}, {"name": "a", "applications": ["dep"]})
    with pytest.raises(ApplicationError) as err:
        application.ensure_all_started("a")
    assert ("bad_return", "oops") == reason_of(err)


# -- start phases ---------------------------------------------------------------------------


def test_start_phases_run_in_order_after_start():
    """Each (phase, args) runs start_phase(phase, "normal", args) after start, in order, before start returns."""
    me = e.self()

    def start_phase(phase, start_type, args):
        e.send(me, ("phase", phase, start_type, args))
        return "ok"

    application.load(spec("a", me, start_phases=[("init", 1), ("go", {"x": 2})], start_phase=start_phase))
    assert "ok" == application.start("a")
    started_top("a")
    assert ("phase", "init", "normal", 1) == next_tagged("phase", timeout=0)
    assert ("phase", "go", "normal", {"x": 2}) == next_tagged("phase", timeout=0)


@pytest.mark.parametrize("answer", ["error", ("error", "why"), None], ids=repr)
def test_a_start_phase_that_does_not_answer_ok_stops_the_tree_and_fails_the_start(answer):
    """A phase answering anything but "ok" stops the tree: ("bad_start_phase", phase, r); later phases never run."""
    me = e.self()

    def start_phase(phase, start_type, args):
        e.send(me, ("phase", phase))
        return "ok" if phase == "one" else answer

    phases = [("one", None), ("two", None), ("three", None)]
    application.load(spec("a", me, start_phases=phases, start_phase=start_phase))
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert ("bad_start_phase", "two", answer) == reason_of(err)
    assert ("terminate", "a", "shutdown") == next_tagged("terminate")
    assert [("phase", "one"), ("phase", "two")] == [next_tagged("phase", timeout=0) for _ in range(2)]
    assert no_more("phase")
    assert (False, []) == (application.started("a"), application.which_applications())


def test_a_start_phase_that_raises_is_a_bad_start_phase():
    """A phase that raises fails the start with ("bad_start_phase", phase, exception)."""
    boom = KeyError("phase")

    def start_phase(phase, start_type, args):
        raise boom

    application.load(spec("a", e.self(), start_phases=[("p", None)], start_phase=start_phase))
    with pytest.raises(ApplicationError) as err:
        application.start("a")
    assert ("bad_start_phase", "p", boom) == reason_of(err)


# -- types: a tree exiting on its own ---------------------------------------------------------


def test_a_temporary_tree_exit_is_only_recorded(reports):
    """A temporary application's tree exiting is recorded in exits(); the others run on."""
    me = e.self()
    load_all(spec("a", me), spec("b", me))
    application.start("a")
    application.start("b")
    top = started_top("b")
    e.exit(top, "boom")
    report = next_report("application_exited")
    assert ("b", "boom", "temporary", "info") == (
        report["application"], report["exited"], report["type"], report["level"]
    )
    assert [("b", "boom")] == application.exits()
    assert (["a"], False) == (application.which_applications(), application.started("b"))
    assert no_more("stopped")


def test_a_temporary_application_that_exited_can_start_again(reports):
    """Once its tree exited, an application is not running and start works again."""
    me = e.self()
    application.load(spec("a", me))
    application.start("a")
    e.exit(started_top("a"), "boom")
    next_report("application_exited")
    assert "ok" == application.start("a")
    assert ["a"] == application.which_applications()


@pytest.mark.parametrize("reason", ["normal", "shutdown", ("shutdown", "done")], ids=repr)
def test_a_transient_tree_ending_orderly_is_only_recorded(reports, reason):
    """A transient application whose tree ends with an orderly reason is recorded; the others run on."""
    me = e.self()
    load_all(spec("a", me), spec("t", me))
    application.start("a")
    application.start("t", "transient")
    gen_server.stop(started_top("t"), reason)
    assert reason == next_report("application_exited")["exited"]
    assert (["a"], [("t", reason)]) == (application.which_applications(), application.exits())
    assert no_more("stopped")


def test_a_transient_tree_crashing_stops_the_others_last_started_first(reports):
    """A transient application whose tree exits abnormally stops every other running application, last first."""
    me = e.self()
    load_all(spec("a", me), spec("b", me), spec("t", me), spec("c", me))
    for name, type_ in [("a", "temporary"), ("b", "permanent"), ("t", "transient"), ("c", "temporary")]:
        application.start(name, type_)
    tops = {name: started_top(name) for name in ["a", "b", "t", "c"]}
    e.exit(tops["t"], "boom")
    assert ["c", "b", "a"] == stopped_names(3)
    assert [] == until(application.which_applications, [])
    assert [("t", "boom")] == application.exits()


@pytest.mark.parametrize("reason", ["normal", "boom"])
def test_a_permanent_tree_exit_stops_the_others_whatever_the_reason(reports, reason):
    """A permanent application's tree exiting, even normally, stops every other application, last started first."""
    me = e.self()
    load_all(spec("a", me), spec("p", me), spec("b", me))
    application.start("a")
    application.start("p", "permanent")
    application.start("b")
    gen_server.stop(started_top("p"), reason)
    assert ["b", "a"] == stopped_names(2)
    assert [] == until(application.which_applications, [])
    assert [("p", reason)] == application.exits()


def test_a_failing_stop_during_the_stop_all_is_reported_and_the_others_still_stop(reports):
    """A stop that raises during the stop-all is reported as application_stop_failed; the rest still stop."""
    me = e.self()
    boom = RuntimeError("stop failed")

    def bad_stop(state):
        raise boom

    load_all(spec("a", me), {**spec("b", me), "stop": bad_stop}, spec("c", me), spec("p", me))
    for name in ["a", "b", "c"]:
        application.start(name)
    application.start("p", "permanent")
    e.exit(started_top("p"), "boom")
    assert "c" == next_tagged("stopped")[1]
    report = next_report("application_stop_failed")
    assert ("b", boom) == (report["application"], report["reason"])
    assert "a" == next_tagged("stopped")[1]
    assert [] == until(application.which_applications, [])


def test_a_master_that_dies_is_a_tree_exit(reports):
    """A master killed takes its tree with it; the controller records the exit with the master's reason."""
    me = e.self()
    application.load(spec("a", me))
    application.start("a")
    top = started_top("a")
    ref = e.monitor(top)
    e.exit(e.process_info(top, "ancestors")[0], "kill")
    assert "killed" == down_of(ref)
    assert "killed" == next_report("application_exited")["exited"]
    assert [("a", "killed")] == application.exits()


# -- included applications ------------------------------------------------------------------


def test_an_included_application_must_be_loaded():
    """Starting an application whose included application is not loaded raises ("not_loaded", inc)."""
    application.load({"name": "outer", "included_applications": ["inner"]})
    with pytest.raises(ApplicationError) as err:
        application.start("outer")
    assert ("not_loaded", "inner") == reason_of(err)


def test_an_included_application_does_not_start_on_its_own_while_its_includer_runs():
    """While its includer runs, starting an included application raises ("included", inc, includer)."""
    load_all({"name": "inner", "env": {"k": 1}}, {"name": "outer", "included_applications": ["inner"]})
    application.start("outer")
    with pytest.raises(ApplicationError) as err:
        application.start("inner")
    assert ("included", "inner", "outer") == reason_of(err)
    assert (["outer"], 1) == (application.which_applications(), application.get_env("inner", "k"))
    application.stop("outer")
    assert "ok" == application.start("inner")


def test_an_includer_does_not_start_while_its_included_application_runs_alone():
    """An included application running on its own keeps its includer from starting: ("included", inc, includer)."""
    load_all({"name": "inner"}, {"name": "outer", "included_applications": ["inner"]})
    application.start("inner")
    with pytest.raises(ApplicationError) as err:
        application.start("outer")
    assert ("included", "inner", "outer") == reason_of(err)


# -- the controller ----------------------------------------------------------------------------


def test_the_controller_is_started_on_first_use_and_again_after_it_died():
    """The controller is registered; killed, its masters stop their trees, and the next call starts a fresh one."""
    me = e.self()
    application.load(spec("a", me))
    application.start("a")
    ref = e.monitor(started_top("a"))
    controller = e.whereis("application_controller")
    e.exit(controller, "kill")
    assert "killed" == e.exit_reason(controller, timeout=2)
    assert "shutdown" == down_of(ref)
    assert ([], []) == (application.which_applications(), application.loaded_applications())
    assert e.whereis("application_controller") not in (None, controller)


def test_the_runtime_does_what_on_tree_exit_decides(monkeypatch, reports):
    """A tree exit is decided by on_tree_exit: told to stop the others, a temporary exit stops them."""
    me = e.self()
    seen = []

    def spy(type_, reason):
        seen.append((type_, reason))
        return STOP_OTHERS

    monkeypatch.setattr(appdecide, "on_tree_exit", spy)
    load_all(spec("a", me), spec("b", me))
    application.start("a")
    application.start("b")
    e.exit(started_top("b"), "boom")
    assert ["a"] == stopped_names(1)
    assert [("temporary", "boom")] == seen


# -- a real supervision tree ----------------------------------------------------------------


def test_an_application_runs_a_supervisor_tree():
    """A supervisor as the top process: its children run; stop takes the whole tree down, children first."""
    supervisor = pytest.importorskip("ensemble.supervisor")
    me = e.self()

    def start():
        return supervisor.start_link(
            {"strategy": "one_for_one"},
            [{"id": n, "start": lambda n=n: gen_server.start_link(Top(me, n), trap_exit=True)} for n in ["w1", "w2"]],
        )

    application.load({"name": "app", "start": start})
    application.start("app")
    assert "ok" == application.stop("app")
    assert [("terminate", "w2", "shutdown"), ("terminate", "w1", "shutdown")] == [
        next_tagged("terminate") for _ in range(2)
    ]


def test_a_permanent_supervisor_giving_up_stops_the_other_applications(reports):
    """A supervisor that reaches its restart intensity exits "shutdown": permanent, it stops the others."""
    supervisor = pytest.importorskip("ensemble.supervisor")
    me = e.self()

    def start():
        sup = supervisor.start_link(
            {"strategy": "one_for_one", "intensity": 0, "period": 5},
            [{"id": "w", "start": lambda: gen_server.start_link(Top(me, "w"))}],
        )
        e.send(me, ("started", "sup", sup))
        return sup

    load_all(spec("a", me), spec("b", me), {"name": "sup", "start": start})
    application.start("a")
    application.start("sup", "permanent")
    application.start("b")
    sup = started_top("sup")
    [(_, worker, _, _)] = supervisor.which_children(sup)
    e.exit(worker, "boom")
    assert "shutdown" == next_report("application_exited")["exited"]
    assert ["b", "a"] == stopped_names(2)
    assert [("sup", "shutdown")] == application.exits()


# -- laws of the decisions ---------------------------------------------------------------------

NAMES = ["a", "b", "c", "d", "e", "f"]
names = st.sampled_from(NAMES)


def a_spec(name, apps=(), optional=(), included=()):
    """A checked spec with these lists."""
    return check_spec(
        {"name": name, "applications": list(apps), "optional_applications": list(optional),
         "included_applications": list(included)}
    )  # fmt: skip


# the dependency lists graphs() draws, built once (a strategy built inside every draw costs more than the law)
_DEPS = {
    (acyclic, i, size): st.lists(st.sampled_from(NAMES[i + 1 :] if acyclic else NAMES), unique=True, max_size=size)
    for acyclic in (False, True)
    for i in range(len(NAMES) - (1 if acyclic else 0))
    for size in (2, 3)
}


@st.composite
def graphs(draw, acyclic=False):
    """Loaded specs over NAMES (some not loaded); acyclic: all loaded, each depending only on later names."""
    loaded = {}
    for i, name in enumerate(NAMES):
        if acyclic or draw(st.booleans()):
            pool = NAMES[i + 1 :] if acyclic else NAMES
            apps = draw(_DEPS[acyclic, i, 3]) if pool else []
            optional = draw(_DEPS[acyclic, i, 2]) if pool else []
            loaded[name] = a_spec(name, apps, optional)
    return loaded


def reachable_cycle(app, loaded, running):
    """True when ``app`` reaches itself through loaded, non-running dependencies."""
    seen, todo = set(), [d for d in dependencies(loaded[app]) if d in loaded and d not in running]
    while todo:
        x = todo.pop()
        if x == app:
            return True
        if x in seen:
            continue
        seen.add(x)
        todo.extend(d for d in dependencies(loaded[x]) if d in loaded and d not in running)
    return False


def reference_order(name, loaded, running):
    """A plain recursive depth-first walk (the model start_order must agree with on acyclic graphs)."""
    order = []

    def visit(app):
        if app in running or app in order or app not in loaded:
            return
        for dep in dependencies(loaded[app]):
            visit(dep)
        order.append(app)

    visit(name)
    return order


@SETTINGS
@given(graphs(acyclic=True), st.sets(names))
def test_law_start_order_is_the_depth_first_walk_on_acyclic_graphs(loaded, running):
    """With every application loaded and no cycle, start_order is the plain depth-first walk, in listed order."""
    assert reference_order("a", loaded, running) == start_order("a", loaded, running)


@SETTINGS
@given(graphs(), st.sets(names), names)
def test_law_start_order_puts_dependencies_first_or_names_the_problem(loaded, running, name):
    """start_order: each app once, after its dependencies, none running; or a missing dependency, or an app on a cycle."""
    try:
        order = start_order(name, loaded, running)
    except ApplicationError as err:
        kind, culprit = err.reason
        if kind == "not_loaded":
            assert culprit not in loaded
        else:
            assert ("circular_dependencies", True) == (kind, reachable_cycle(culprit, loaded, running))
        return
    assert len(set(order)) == len(order)
    assert set() == set(order) & running
    assert (order[-1:] == [name]) if name not in running else ([] == order)
    for i, app in enumerate(order):
        for dep in dependencies(loaded[app]):
            if dep in loaded and dep not in running:
                assert dep in order[:i]


@SETTINGS
@given(graphs(), st.sets(names), names)
def test_law_starting_in_start_order_is_never_refused(loaded, running, name):
    """Starting the apps of start_order in turn, start_refusal never refuses any."""
    running = [n for n in NAMES if n in running]
    try:
        order = start_order(name, loaded, running)
    except ApplicationError:
        return
    active = {n: () for n in running}
    for app in order:
        assert None is start_refusal(app, loaded, active)
        active[app] = ()


@SETTINGS
@given(graphs(), st.sets(names), names)
def test_law_start_refusal_names_a_real_problem(loaded, running, name):
    """A refusal is about name itself, or a required dependency not running; None means all such run."""
    active = {n: () for n in NAMES if n in running}
    reason = start_refusal(name, loaded, active)
    if name not in loaded:
        assert ("not_loaded", name) == reason
    elif name in active:
        assert ("already_started", name) == reason
    else:
        spec_ = loaded[name]
        needed = [d for d in dependencies(spec_) if d in loaded or d not in spec_["optional_applications"]]
        missing = [d for d in needed if d not in active]
        assert (("not_started", missing[0]) if missing else None) == reason


@SETTINGS
@given(names, st.lists(names, unique=True), st.lists(names, unique=True, max_size=2))
def test_law_an_includer_and_its_included_never_run_together(name, others, included):
    """Neither an included application while its includer is active, nor an includer while it runs alone."""
    loaded = {n: a_spec(n) for n in NAMES}
    loaded[name] = a_spec(name, included=[i for i in included if i != name])
    includer = next((o for o in others if o != name), None)
    if includer is not None:
        active = {includer: (name,)}
        assert ("included", name, includer) == start_refusal(name, loaded, {}, active)
    for inc in loaded[name]["included_applications"]:
        assert ("included", inc, name) == start_refusal(name, loaded, {inc: ()})


reasons = st.one_of(
    st.sampled_from(["normal", "shutdown", "killed", "boom"]),
    st.tuples(st.sampled_from(["shutdown", "other"]), st.integers()),
    st.integers(),
    st.builds(RuntimeError, st.text(max_size=3)),
)


@SETTINGS
@given(reasons)
def test_law_what_a_tree_exit_means_for_each_type(reason):
    """permanent always stops the others, temporary never, transient iff the reason is not orderly."""
    assert STOP_OTHERS == on_tree_exit("permanent", reason)
    assert RECORD == on_tree_exit("temporary", reason)
    assert (RECORD if is_shutdown(reason) else STOP_OTHERS) == on_tree_exit("transient", reason)


@SETTINGS
@given(st.lists(names, unique=True), names)
def test_law_stop_others_is_every_other_app_last_started_first(running, exited):
    """stop_others leaves out the exited app and reverses start order; last_first reverses."""
    assert [n for n in running[::-1] if n != exited] == stop_others(running, exited)
    assert running[::-1] == last_first(running)


@SETTINGS
@given(st.dictionaries(names, st.integers()), st.dictionaries(names, st.integers()))
def test_law_set_env_values_win_over_the_spec(spec_env, kept):
    """After a load each kept value is there, every other key of the spec has its spec value, nothing else."""
    env = env_after_load(spec_env, kept)
    assert set(spec_env) | set(kept) == set(env)
    assert all(env[k] == v for k, v in kept.items())
    assert all(env[k] == v for k, v in spec_env.items() if k not in kept)


@SETTINGS
@given(st.one_of(st.none(), st.integers(), st.text(), st.tuples(st.integers(), st.integers())))
def test_law_start_answers_a_pid_or_pid_and_state(ret):
    """interpret_start takes a pid or (pid, state) and nothing else."""
    pid = e.self()
    assert (pid, None) == interpret_start(pid)
    assert (pid, ret) == interpret_start((pid, ret))
    assert None is interpret_start(ret)
    assert None is interpret_start((ret, pid))


def test_a_plain_process_top_is_stopped_by_the_shutdown_signal():
    """A top that is no behaviour is stopped by the exit signal "shutdown", as OTP's master sends it."""
    me = e.self()

    def start():
        top = e.spawn_link(e.receive)
        e.send(me, ("started", "plain", top))
        return top

    application.load({"name": "plain", "start": start})
    application.start("plain")
    ref = e.monitor(started_top("plain"))
    assert "ok" == application.stop("plain")
    assert "shutdown" == down_of(ref)
