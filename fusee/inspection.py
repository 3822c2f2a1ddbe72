"""Read a fusee data directory without opening an engine on it: its runs, one run, a check of
every file (the CLI's ``runs ls``, ``runs show`` and ``verify``).

Nothing here writes, deletes or locks anything (the engine's recovery deletes unused segments;
this does not), so it works on a directory a live engine holds: it reads each shard's segments,
then its checkpoint (an engine's shutdown writes the checkpoint before deleting the segments it
covers, so reading in this order misses nothing), and stops at a torn tail.  What it shows is
consistent up to the last whole batch written, which includes every record the engine has
acknowledged (a batch written but not yet synced may show too).  :func:`holder` says whether an
engine holds the directory, and where its HTTP API is.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from . import blob_refs as _blob_refs
from . import blobs as _blobs
from . import directory as _dir
from . import records as r
from . import segment as _seg
from . import store as _store
from .errors import Cancelled, Corrupt, Failed, NotFound, Terminated, TimedOut
from .replay import History

__all__ = ["Holder", "Problem", "holder", "shard_count", "runs", "describe", "verify", "files_size"]

_SEG_NAME = re.compile(r"^(\d+)\.seg$")
#: The file a serving engine writes into its data directory (fusee.http): ``{"url", "pid"}``.
ADDRESS_FILE = "HTTP"


@dataclass(frozen=True)
class Holder:
    """The engine holding a directory: its process ``pid`` (None if unknown) and HTTP ``url`` (None: not serving)."""

    pid: int | None
    url: str | None


def holder(path: str) -> Holder | None:
    """The engine that holds ``path`` now (a probe of its lock, taken shared and let go at once), or None."""
    p = os.path.join(path, _dir.LOCK_NAME)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            held = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            pid = int(held) if held.isdigit() else None
            url = None
            try:
                with open(os.path.join(path, ADDRESS_FILE)) as f:
                    got = json.load(f)
                if type(got) is dict and type(got.get("url")) is str:
                    url = got["url"]
            except (OSError, ValueError):
                pass
            return Holder(pid, url)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def shard_count(path: str) -> int:
    """The directory's shard count (its manifest's, or its ``shard-<n>`` directories' for format 2);
    :class:`Corrupt` for a damaged manifest, ``FileNotFoundError`` if ``path`` is no fusee directory."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} is not a directory")
    mp = os.path.join(path, _dir.MANIFEST_NAME)
    try:
        with open(mp, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        n = len([d for d in os.listdir(path) if re.match(r"^shard-\d+$", d)])
        if n == 0:
            raise FileNotFoundError(f"{path} holds no fusee data (no MANIFEST, no shard directory)") from None
        return n
    try:
        return _dir.decode_manifest(data).shards
    except ValueError as exc:
        raise Corrupt(mp, 0, str(exc)) from None


def _numbers(d: str) -> list[int]:
    try:
        return sorted(int(m.group(1)) for f in os.listdir(d) if (m := _SEG_NAME.match(f)))
    except FileNotFoundError:
        return []


class _Changed(Exception):
    """A file went away while it was read (an engine's checkpoint deleted it): read the shard again."""


def _log(shard_dir: str) -> list[tuple[int, bytes]]:
    """The shard's log records, in LSN order, up to a torn tail (frames voided by a later header dropped)."""
    out: list[tuple[int, bytes]] = []
    for n in _numbers(shard_dir):
        p = os.path.join(shard_dir, f"{n}.seg")
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise _Changed(p) from None
        if not data[: _seg.HEADER_SIZE].strip(b"\0"):
            continue  # a spare, or a segment whose making never completed
        sc = _seg.scan(data, p)
        assert sc.header is not None
        while out and out[-1][0] > sc.header.prior:  # a failed flush's frames: void
            out.pop()
        out.extend((fr.lsn, fr.body) for fr in sc.frames if not out or fr.lsn > out[-1][0])
    return out


def shard_records(path: str, shard: int) -> list[tuple[int, Any]]:
    """Shard ``shard``'s decoded ``(lsn, record)`` pairs as an open would feed them: its checkpoint's,
    then its log's after it.  :class:`Corrupt` for a damaged acknowledged record."""
    d = os.path.join(path, f"shard-{shard}")
    for _ in range(5):
        try:
            logged = _log(d)
        except _Changed:
            continue
        cp = _store.load(d, shard) if os.path.isdir(d) else None
        after = cp.lsn if cp is not None else 0
        feed = (cp.records if cp is not None else []) + [(lsn, b) for lsn, b in logged if lsn > after]
        load = _blobs.reader(path, shard)  # the checkpoint's were put back by its load
        out = []
        for lsn, body in feed:
            try:
                out.append((lsn, r.decode_record(_blob_refs.join(body, load))))
            except ValueError as exc:
                raise Corrupt(d, 0, f"record {lsn}: {exc}") from None
        return out
    raise Corrupt(d, 0, "the shard's files kept changing while they were read: try again")


def _by_run(recs: list[tuple[int, Any]]) -> dict[int, list[tuple[int, Any]]]:
    runs: dict[int, list[tuple[int, Any]]] = {}
    for lsn, rec in recs:
        runs.setdefault(rec.run, []).append((lsn, rec))
    return {run: rs for run, rs in runs.items() if rs and type(rs[0][1]) is r.Start}


def _summary(shard: int, rs: list[tuple[int, Any]]) -> dict[str, Any]:
    start = rs[0][1]
    done = rs[-1][1] if type(rs[-1][1]) is r.Done else None
    return {
        "id": start.id,
        "run": start.run,
        "type": start.wtype,
        "status": "running" if done is None else done.status,
        "shard": shard,
        "started": start.started,
        "finished": None if done is None else done.finished,
    }


def _latest(path: str) -> dict[str, tuple[int, list[tuple[int, Any]]]]:
    """Each workflow ID's latest run: ``id -> (shard, its records)``."""
    out: dict[str, tuple[int, list[tuple[int, Any]]]] = {}
    for shard in range(shard_count(path)):
        for run, rs in sorted(_by_run(shard_records(path, shard)).items()):
            out[rs[0][1].id] = (shard, rs)  # run numbers grow: the last one seen is the latest
    return out


def runs(path: str) -> list[dict[str, Any]]:
    """The latest run of every workflow ID in directory ``path``: ``id, run, type, status, shard,
    started, finished`` (as the HTTP API lists them)."""
    return [_summary(shard, rs) for shard, rs in _latest(path).values()]


_ERRORS: dict[str, Callable[[Any], Exception]] = {"cancelled": Cancelled, "terminated": Terminated, "timed_out": TimedOut, "failed": Failed}


def describe(path: str, id: str) -> dict[str, Any]:
    """The latest run of ``id`` as ``Engine.describe`` gives it (its ``journal`` the records);
    :class:`NotFound` if the directory holds no run of ``id``."""
    got = _latest(path).get(id)
    if got is None:
        raise NotFound(id)
    shard, rs = got
    s = _summary(shard, rs)
    start = rs[0][1]
    done = rs[-1][1] if type(rs[-1][1]) is r.Done else None
    error = None
    if done is not None and done.status in _ERRORS:
        error = _ERRORS[done.status](done.payload)
    return {
        **s,
        "version": start.version,
        "input": start.input,
        "result": done.payload if done is not None and done.status == "completed" else None,
        "error": error,
        "journal": rs,
    }


# -- verify -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """What :func:`verify` found in file ``path`` at byte ``offset``: ``damage`` (True: data an open
    would refuse or lose) or a note (a torn, never-acknowledged tail; a damaged checkpoint copy the
    other one covers), and ``why``."""

    path: str
    offset: int
    why: str
    damage: bool = True


def files_size(path: str) -> int:
    """The bytes :func:`verify` reads in ``path`` (every segment and checkpoint)."""
    total = 0
    for root, _, names in os.walk(path):
        for n in names:
            if n.endswith((".seg", ".ckpt")) or _blob_refs.is_blob_name(n):
                try:
                    total += os.path.getsize(os.path.join(root, n))
                except OSError:
                    pass
    return total


def verify(path: str, progress: Callable[[int], None] | None = None) -> list[Problem]:
    """Check every file of directory ``path``: the manifest, each shard's HEAD, each segment (header,
    size, every frame's checksum and sequence, the LSN chain between segments), each checkpoint
    copy, and that every record decodes and fits its run.  ``progress(n)`` is told of each ``n``
    bytes read.  Returns the problems found (none: the directory is whole)."""
    problems: list[Problem] = []
    try:
        shards = shard_count(path)
    except Corrupt as exc:
        return [Problem(str(exc.path), exc.offset, exc.why)]
    for shard in range(shards):
        problems += _verify_shard(path, shard, progress or (lambda n: None))
    return problems


def _verify_shard(path: str, shard: int, progress: Callable[[int], None]) -> list[Problem]:
    d = os.path.join(path, f"shard-{shard}")
    out: list[Problem] = []
    if not os.path.isdir(d):
        return out
    try:
        head = _dir.read_head(d)
    except Corrupt as exc:
        out.append(Problem(str(exc.path), 0, exc.why))
        head = None
    cp_lsn = 0
    valid_cps = []
    bad_cps: list[Problem] = []
    for name in _store.NAMES:
        p = os.path.join(d, name)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        progress(len(data))
        try:
            cp = _store.decode(data)
            if cp.shard != shard:
                raise ValueError(f"checkpoint belongs to shard {cp.shard}")
            valid_cps.append(cp)
        except ValueError as exc:
            bad_cps.append(Problem(p, 0, f"checkpoint copy damaged: {exc}"))
    for b in bad_cps:  # one damaged copy loses nothing while the other is whole
        out.append(b if not valid_cps else Problem(b.path, 0, b.why + " (the other copy is whole: nothing is lost)", damage=False))
    if valid_cps:
        cp_lsn = max(c.lsn for c in valid_cps)
    records: list[tuple[int, bytes]] = list(max(valid_cps, key=lambda c: c.lsn).records) if valid_cps else []
    next_lsn, prev = cp_lsn + 1, None
    numbers = _numbers(d)
    for n in numbers:
        p = os.path.join(d, f"{n}.seg")
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        progress(len(data))
        beyond = head is not None and (n > head.number or (n == head.number and not head.exists))
        if not data[: _seg.HEADER_SIZE].strip(b"\0"):
            if not beyond and head is not None:
                out.append(Problem(p, 0, f"segment {n} is empty or its header is gone; HEAD says the log goes on to segment {head.number}"))
            continue
        try:
            sc = _seg.scan(data, p)
        except Corrupt as exc:
            out.append(Problem(p, exc.offset, exc.why))
            continue
        h = sc.header
        assert h is not None
        if beyond:
            continue
        if h.size is not None and len(data) != h.size:
            out.append(Problem(p, len(data), f"segment {n} is {len(data)} bytes, it was made {h.size}: cut short"))
        if h.shard != shard or h.number != n:
            out.append(Problem(p, 0, f"segment header says shard {h.shard}, number {h.number}"))
        if prev is None:
            if h.prior > cp_lsn:
                out.append(Problem(p, 0, f"records {cp_lsn + 1}..{h.prior} are missing: the log begins after them and no checkpoint holds them"))
        elif h.prior >= next_lsn:
            out.append(Problem(prev, 0, f"records {next_lsn}..{h.prior} are missing or damaged (the next segment, {p}, says the log holds up to lsn {h.prior})"))
        tail = sc.end < len(data) and data[sc.end:].strip(b"\0")
        if tail and n == (head.number if head is not None else numbers[-1]):
            out.append(Problem(p, sc.end, "a torn tail: a last batch never acknowledged (an open drops it)", damage=False))
        while records and records[-1][0] > h.prior and records[-1][0] > cp_lsn:
            records.pop()
        records += [(fr.lsn, fr.body) for fr in sc.frames if fr.lsn > max(cp_lsn, records[-1][0] if records else 0)]
        next_lsn = h.base_lsn + len(sc.frames)
        prev = p
    if head is not None and head.exists and head.number not in numbers:
        out.append(Problem(os.path.join(d, f"{head.number}.seg"), 0, f"segment {head.number} is missing: HEAD says it holds the log from lsn {head.base_lsn}"))
    histories: dict[int, History] = {}
    load = _blobs.reader(path, shard)
    for lsn, body in records:
        try:
            body = _blob_refs.join(body, load)
        except Corrupt as exc:  # a blob a record refers to, missing or damaged
            out.append(Problem(str(exc.path), exc.offset, f"record {lsn}: {exc.why}"))
            continue
        except ValueError as exc:
            out.append(Problem(d, 0, f"record {lsn}: {exc}"))
            continue
        try:
            rec = r.decode_record(body)
            histories.setdefault(rec.run, History()).add(rec, lsn)
        except (ValueError, TypeError) as exc:
            out.append(Problem(d, 0, f"record {lsn}: {exc}"))
    return out
