"""Shared test fixtures: every test starts with a fresh shell and leaves no process behind."""

from __future__ import annotations

import pytest

import ensemble
from ensemble import _process


@pytest.fixture(autouse=True)
def _isolated_processes():
    """Give each test a fresh shell process; kill what the test spawned when it ends."""
    before = set(_process.TABLE)
    _process.SHELLS.clear()
    yield
    left = [p for i, p in list(_process.TABLE.items()) if i not in before and not p.shell]
    for p in left:
        if p.name == "timer_server":
            continue
        ensemble.exit(p, "kill")
    for p in left:
        if p.name != "timer_server":
            ensemble.exit_reason(p, timeout=5)
    for p in [p for p in list(_process.TABLE.values()) if p.shell]:
        _process.settle(p, "normal", None)
    _process.SHELLS.clear()
