"""The public face: every binding name of the API is exported once, with a docstring."""

from __future__ import annotations

import ensemble

BINDING = {
    "spawn", "spawn_link", "spawn_monitor", "spawn_actor", "self", "send", "receive",
    "NOMATCH", "TIMEOUT", "make_ref", "link", "unlink", "trap_exit", "exit", "monitor",
    "demonitor", "register", "unregister", "whereis", "registered", "alias", "unalias",
    "process_info", "processes", "is_alive", "state", "set_state", "update_state",
    "hibernate", "join", "exit_reason", "flush", "node", "timer", "dispatcher",
}  # fmt: skip


def test_every_binding_name_is_exported():
    """Each name the API promises is in ensemble.__all__ and importable."""
    assert set() == BINDING - set(ensemble.__all__)
    for name in ensemble.__all__:
        assert getattr(ensemble, name) is not None


def test_all_has_no_duplicates():
    """ensemble.__all__ names each export once."""
    assert len(set(ensemble.__all__)) == len(ensemble.__all__)


def test_public_functions_state_their_contract():
    """Every public function of ensemble has a docstring."""
    missing = [
        name
        for name in ensemble.__all__
        if callable(getattr(ensemble, name)) and not (getattr(ensemble, name).__doc__ or "").strip()
    ]
    assert [] == missing


def test_timer_and_dispatcher_modules():
    """ensemble.timer and ensemble.dispatcher are the modules with the timer and pool API."""
    for name in ["send_after", "start_timer", "cancel_timer", "read_timer", "apply_after",
                 "send_interval", "apply_interval", "exit_after", "kill_after", "cancel"]:
        assert callable(getattr(ensemble.timer, name)), name
    for name in ["define", "shutdown", "dispatchers"]:
        assert callable(getattr(ensemble.dispatcher, name)), name


def test_the_decision_modules_former_names_still_import():
    """``ensemble.select``, ``from ensemble import order``...: each former name of a decision
    module is the very module object that now lives in ensemble.decide."""
    import importlib

    import ensemble.decide as decide

    assert len(ensemble.FORMER_NAMES) == 12
    for former, name in ensemble.FORMER_NAMES.items():
        module = importlib.import_module(f"ensemble.decide.{name}")
        assert importlib.import_module(f"ensemble.{former}") is module
        assert getattr(ensemble, former) is module
        assert getattr(decide, name) is module
    from ensemble import order, select  # noqa: F401 - the import is the test

    assert select.NOMATCH is ensemble.NOMATCH and order.restart_plan is decide.supervisor.restart_plan


def test_every_decision_module_is_in_ensemble_decide():
    """The pure decision modules live in ensemble.decide, none at the top level."""
    import pathlib

    top = {p.stem for p in pathlib.Path(ensemble.__file__).parent.glob("*.py")}
    assert set() == top & set(ensemble.FORMER_NAMES)
