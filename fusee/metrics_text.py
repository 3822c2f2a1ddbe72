"""``Engine.metrics()`` in the Prometheus text exposition format (version 0.0.4), pure.

Every figure gets a ``fusee_`` name, a ``# HELP`` and a ``# TYPE`` line; runs by status carry a
``status`` label and per-shard figures a ``shard`` label.  A figure missing from the metrics, or not
a finite number, is left out (never an exception).
"""

from __future__ import annotations

import math
from typing import Any, Final

__all__ = ["prometheus", "CONTENT_TYPE"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

# (metric key, name, type, help)
_SCALARS: Final = (
    ("records", "fusee_journal_records_total", "counter", "Records written to the journal since open."),
    ("flushes", "fusee_journal_flushes_total", "counter", "Journal flushes (one fdatasync each) since open."),
    ("records_per_flush", "fusee_journal_records_per_flush", "gauge", "Mean records per flush (group commit)."),
    ("flush_seconds_mean", "fusee_journal_flush_seconds_mean", "gauge", "Mean seconds of a flush's write and fdatasync."),
    ("flush_seconds_max", "fusee_journal_flush_seconds_max", "gauge", "Longest flush, seconds."),
    ("inline_flushes", "fusee_journal_inline_flushes_total", "counter", "Flushes done inline by a waiting run."),
    ("storage_failures", "fusee_storage_failures_total", "counter", "Flushes a full or failing disk voided."),
    ("runs_parked", "fusee_runs_parked", "gauge", "Unfinished runs unloaded (records kept)."),
    ("runs_loaded", "fusee_runs_loaded", "gauge", "Unfinished runs with a process."),
    ("runs_waiting", "fusee_runs_waiting", "gauge", "Loaded runs paused (sleep, signal wait, backoff)."),
    ("parks", "fusee_parks_total", "counter", "Runs parked since open."),
    ("loads", "fusee_loads_total", "counter", "Parked runs loaded again since open."),
    ("recovered_log_records", "fusee_recovered_log_records", "gauge", "Records the open replayed from the log."),
    ("recovered_checkpoint_records", "fusee_recovered_checkpoint_records", "gauge", "Records the open read from checkpoints."),
)


def _num(v: Any) -> str | None:
    if type(v) is bool or type(v) not in (int, float) or not math.isfinite(v):
        return None
    return repr(float(v)) if type(v) is float else str(v)


def _label(v: Any) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def prometheus(m: dict[str, Any]) -> str:
    """The text exposition of metrics ``m`` (``Engine.metrics()``'s shape)."""
    lines: list[str] = []
    runs = m.get("runs")
    if type(runs) is dict:
        lines += ["# HELP fusee_runs Runs known to the engine, by status.", "# TYPE fusee_runs gauge"]
        for status in sorted(runs, key=str):
            v = _num(runs[status])
            if v is not None:
                lines.append(f'fusee_runs{{status="{_label(status)}"}} {v}')
    for key, name, kind, help in _SCALARS:
        v = _num(m.get(key))
        if v is None:
            continue
        lines += [f"# HELP {name} {help}", f"# TYPE {name} {kind}", f"{name} {v}"]
    journal = m.get("journal")
    for key, name, help in (
        ("durable_lsn", "fusee_journal_durable_lsn", "The last durable LSN of each shard."),
        ("segments", "fusee_journal_segment", "The current segment number of each shard."),
    ):
        per = journal.get(key) if type(journal) is dict else None
        if type(per) is not list:
            continue
        vals = [(i, _num(v)) for i, v in enumerate(per)]
        if not any(v is not None for _, v in vals):
            continue
        lines += [f"# HELP {name} {help}", f"# TYPE {name} gauge"]
        lines += [f'{name}{{shard="{i}"}} {v}' for i, v in vals if v is not None]
    return "\n".join(lines) + "\n"
