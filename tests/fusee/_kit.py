"""What fusee's engine tests share: small segments, body-execution counters, and probes (ensemble
messages from workflow code, which runs on the shards' carriers, to the test's process)."""

from __future__ import annotations

from typing import Any

import ensemble as e
from ensemble import NOMATCH, TIMEOUT

SEG = 1 << 20  # small zero-filled segments keep every open quick
PROBE: dict[str, object] = {}  # "pid": the test's process (set before each test by conftest)
COUNTS: dict[str, int] = {}  # how often each counted step body ran (emptied before each test by conftest)


def count(name: str) -> int:
    """Add one to the body-execution counter ``name`` and return it."""
    COUNTS[name] = COUNTS.get(name, 0) + 1
    return COUNTS[name]


def tell(*what: Any) -> None:
    """Tell the test's process that ``what`` happened: the message ``("probe", *what)``."""
    e.send(PROBE["pid"], ("probe",) + what)


def await_probe(what: Any, timeout: float = 5.0) -> None:
    """Wait for ``tell(what)``."""
    got = e.receive(lambda m: m if m == ("probe", what) else NOMATCH, timeout=timeout)
    assert got is not TIMEOUT, f"no probe {what!r} within {timeout} s"


def next_probe(timeout: float = 10.0) -> Any:
    """The next probe message (a tuple without its "probe" tag)."""
    got = e.receive(lambda m: m[1:] if type(m) is tuple and m and m[0] == "probe" else NOMATCH, timeout=timeout)
    assert got is not TIMEOUT, f"no probe within {timeout} s"
    return got


def no_probe_pending() -> bool:
    """Whether no probe waits in the test process's mailbox."""
    return e.receive(lambda m: m if type(m) is tuple and m and m[0] == "probe" else NOMATCH, timeout=0) is TIMEOUT
