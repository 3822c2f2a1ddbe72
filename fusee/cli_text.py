"""What the ``fusee`` CLI prints, pure: tables, times, a run with its timeline, a progress bar."""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

__all__ = ["when", "table", "runs_table", "run_text", "progress_bar"]


def when(t: Any) -> str:
    """Unix seconds as local ``YYYY-MM-DD HH:MM:SS.mmm`` ("-" for None)."""
    if type(t) not in (int, float):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int((t % 1) * 1000):03d}"


def _short(v: Any, width: int = 60) -> str:
    text = v if type(v) is str else json.dumps(v, separators=(",", ":"), default=repr)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """``rows`` under ``headers`` in aligned columns (two spaces apart)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def runs_table(runs: Sequence[dict[str, Any]]) -> str:
    """The runs of ``fusee runs ls`` as a table."""
    return table(
        ("WORKFLOW ID", "TYPE", "STATUS", "STARTED", "FINISHED", "RUN", "SHARD"),
        [(d["id"], d.get("type"), d.get("status"), when(d.get("started")), when(d.get("finished")), d.get("run"), d.get("shard")) for d in runs],
    )


def _entry(e: dict[str, Any]) -> tuple[str, str, str, str, str]:
    k = e["kind"]
    name, outcome, detail, at = "", "", "", ""
    if k == "start":
        name, detail, at = e["type"], "input " + _short(e["input"]), when(e["at"])
    elif k == "step":
        tries = len(e["attempts"])
        name, outcome = e["name"], e["status"] + (f" after {tries} attempts" if tries > 1 else "")
        if e["status"] == "ok":
            detail = _short(e.get("result"))
        elif e["attempts"]:
            last = e["attempts"][-1]
            detail = _short(last.get("error"))
            if last.get("retry_at") is not None and e["status"] == "running":
                at = "retry at " + when(last["retry_at"])
    elif k == "sleep":
        name, outcome, at = e["name"], "fired" if e["fired"] else "sleeping", "until " + when(e["fire_at"])
    elif k == "wait":
        name, outcome = e["signal"], e["outcome"] or "waiting"
        detail = _short(e.get("value")) if e["outcome"] == "signal" else ""
        at = "" if e["deadline"] is None else "deadline " + when(e["deadline"])
    elif k == "signal":
        name, outcome, detail = e["name"], "arrived", _short(e["value"])
    elif k == "value":
        name, detail = e["value_kind"], _short(e["value"])
    elif k == "child":
        name, outcome = e["id"], e["status"]
        detail = e["type"] + ("" if "result" not in e and "failure" not in e else " -> " + _short(e.get("result", e.get("failure"))))
    elif k == "send":
        name, detail = e["target"], e["name"] + " " + _short(e["value"])
    elif k == "cancel":
        detail = _short(e["reason"])
    elif k == "end":
        outcome, at = e["status"], when(e["at"])
        detail = _short(next((e[x] for x in ("result", "failure", "reason", "next_input", "deadline") if x in e), None))
    return k, name, outcome, detail, at


def run_text(v: dict[str, Any]) -> str:
    """One run (:func:`fusee.timeline.view`'s JSON) for a person: its fields, links and timeline."""
    lines = [
        f"{v['id']}  ({v.get('type')} v{v.get('version')}, run {v.get('run')}, shard {v.get('shard')})",
        f"status    {v.get('status')}",
        f"started   {when(v.get('started'))}",
        f"finished  {when(v.get('finished'))}",
        f"input     {_short(v.get('input'), 200)}",
    ]
    if v.get("status") == "completed":
        lines.append(f"result    {_short(v.get('result'), 200)}")
    if v.get("error"):
        lines.append(f"error     {v['error'].get('code')}: {v['error'].get('message')}")
    links = v.get("links") or {}
    if "parent" in links:
        lines.append(f"parent    {links['parent']['id']} (run {links['parent']['run']})")
    if "continued_from" in links:
        lines.append(f"continued from run {links['continued_from']['run']}")
    if links.get("continued_as_new"):
        lines.append("continued as new (see the ID's latest run)")
    lines += ["", "timeline:", table(("LSN", "WHAT", "NAME", "OUTCOME", "DETAIL", "TIME"),
                                     [(e["lsn"], *_entry(e)) for e in v.get("timeline", [])])]
    return "\n".join(lines)


def progress_bar(done: int, total: int, width: int = 30) -> str:
    """``[#####.....]  42%  12.0/28.5 MiB`` for ``done`` of ``total`` bytes."""
    frac = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = int(frac * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {frac * 100:3.0f}%  {done / 2**20:.1f}/{total / 2**20:.1f} MiB"
