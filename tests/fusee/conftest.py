"""Fixtures every fusee test file gets: a clean mailbox and probe target per test, and ``opener``."""

from __future__ import annotations

import pytest

import ensemble as e
import fusee

from ._kit import COUNTS, PROBE, SEG


@pytest.fixture(autouse=True)
def _probes():
    """The test's process gets the probes; its mailbox is empty before and after; counters start at 0."""
    COUNTS.clear()
    e.flush()
    PROBE["pid"] = e.self()
    yield
    e.flush()


@pytest.fixture(params=["memory", "disk"])
def opener(request, tmp_path):
    """Opens engines in memory or on a directory of tmp_path (``opener.on_disk``); shuts every one down
    at the end.  ``opener(workflows, shards=2, **options)``."""
    opened: list[fusee.Engine] = []
    path = None if request.param == "memory" else str(tmp_path / "data")

    def open_(workflows, shards=2, **opts):
        eng = fusee.Engine.open(path, workflows=workflows, shards=shards, segment_size=SEG, **opts)
        opened.append(eng)
        return eng

    open_.on_disk = path is not None
    yield open_
    for eng in opened:
        eng.shutdown()
