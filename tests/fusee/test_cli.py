"""The ``fusee`` CLI: runs ls/show on a closed and on a live directory, verify on whole, torn and
damaged directories, disk-check, and serve in a child process."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import fusee
from fusee import cli, cli_text, inspection
from fusee.errors import Corrupt

from ._ops_workflows import ALL, go

SEG = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _fill(path: str, checkpoint: bool = True) -> None:
    with fusee.Engine.open(path, workflows=ALL, shards=2, segment_size=SEG, checkpoint_on_shutdown=checkpoint) as e:
        e.start("waiter", "w-1", 1)
        e.signal("w-1", go, 5)
        assert e.result("w-1", 10) == 6
        e.start("flaky", "f-1", path)  # a key of its own: the first attempt fails once per key
        assert e.result("f-1", 10) == "ok"
        e.start("waiter", "w-2", 1)
        e.start("kid", "k-1", 3)
        assert e.result("k-1", 10) == 6


def test_runs_ls_and_show_on_a_closed_directory(tmp_path, capsys):
    d = str(tmp_path / "d")
    _fill(d, checkpoint=False)
    code, out, err = run_cli(capsys, "runs", "ls", d)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["WORKFLOW", "ID", "TYPE"]
    assert [ln.split()[0] for ln in lines[1:]] == ["k-1", "w-2", "f-1", "w-1"]  # newest first
    code, out, _ = run_cli(capsys, "runs", "ls", d, "--status", "running", "--json")
    assert [json.loads(ln)["id"] for ln in out.splitlines()] == ["w-2"]
    code, out, _ = run_cli(capsys, "runs", "ls", d, "--type", "waiter", "--limit", "1")
    assert "w-2" in out and "w-1" not in out and "(1 of 2 runs" in out
    code, out, _ = run_cli(capsys, "runs", "show", d, "f-1")
    assert code == 0 and "status    completed" in out and "result    ok" in out
    assert any(ln.split()[1:4] == ["step", "shaky", "ok"] and "after 2 attempts" in ln for ln in out.splitlines())
    assert any(ln.split()[1:4] == ["sleep", "nap", "fired"] for ln in out.splitlines())
    code, out, _ = run_cli(capsys, "runs", "show", d, "w-1", "--json", "--journal")
    v = json.loads(out)
    assert v["result"] == 6 and [e["kind"] for e in v["timeline"]] == ["start", "wait", "signal", "step", "end"]
    assert [r["t"] for r in v["journal"]][-1] == "done"
    code, _, err = run_cli(capsys, "runs", "show", d, "nobody")
    assert code == 1 and "no run with workflow ID 'nobody'" in err
    code, _, err = run_cli(capsys, "runs", "ls", str(tmp_path / "nothing"))
    assert code == 1 and "not a directory" in err


def test_inspecting_a_live_directory_reads_it_and_says_who_holds_it(tmp_path, capsys):
    d = str(tmp_path / "d")
    eng = fusee.Engine.open(d, workflows=ALL, shards=2, segment_size=SEG, http="127.0.0.1:0")
    try:
        eng.start("waiter", "live-1", 1)
        eng.start("kid", "live-2", 2)
        assert eng.result("live-2", 10) == 4
        before = sorted(os.listdir(d))
        code, out, err = run_cli(capsys, "runs", "ls", d)
        assert code == 0 and f"in use by the engine of process {os.getpid()}" in err and eng.http_url in err
        assert {ln.split()[0] for ln in out.splitlines()[1:]} == {"live-1", "live-2"}
        code, out, _ = run_cli(capsys, "runs", "show", d, "live-1", "--json")
        assert json.loads(out)["timeline"][-1]["kind"] == "wait"
        assert run_cli(capsys, "verify", d)[0] == 0
        assert sorted(os.listdir(d)) == before  # read-only: nothing made or deleted
        eng.signal("live-1", go, 1)  # the engine goes on unharmed
        assert eng.result("live-1", 10) == 2
        assert inspection.holder(d) == inspection.Holder(os.getpid(), eng.http_url)
    finally:
        eng.shutdown()
    assert inspection.holder(d) is None
    assert run_cli(capsys, "runs", "ls", d)[2] == ""


def _segments(d: str) -> list[str]:
    out = []
    for shard in sorted(os.listdir(d)):
        if shard.startswith("shard-"):
            out += [os.path.join(d, shard, f) for f in sorted(os.listdir(os.path.join(d, shard))) if f.endswith(".seg")]
    return out


def _frames(path: str) -> list:
    from fusee import segment

    with open(path, "rb") as f:
        return segment.scan(f.read()).frames


def test_verify_finds_damage_and_tells_a_torn_tail_apart(tmp_path, capsys):
    d = str(tmp_path / "d")
    _fill(d, checkpoint=False)
    code, out, _ = run_cli(capsys, "verify", d)
    assert code == 0 and "ok (" in out
    seg = max((p for p in _segments(d) if _frames(p)), key=lambda p: len(_frames(p)))
    frames = _frames(seg)
    # the last frame's body: the torn tail of a never-acknowledged batch, dropped by an open
    last = frames[-1]
    data = bytearray(open(seg, "rb").read())
    data[last.offset + 30] ^= 0xFF
    open(seg, "wb").write(data)
    code, out, _ = run_cli(capsys, "verify", d)
    assert code == 0 and "note:" in out and "torn tail" in out
    # a frame that later batches follow: damage
    data[frames[1].offset + 24] ^= 0xFF
    open(seg, "wb").write(data)
    code, out, _ = run_cli(capsys, "verify", d, "--json")
    got = json.loads(out)
    assert code == 1 and not got["ok"] and any(p["damage"] and p["path"] == seg for p in got["problems"])
    with pytest.raises(Corrupt):
        fusee.Engine.open(d, workflows=ALL)
    code, _, err = run_cli(capsys, "runs", "ls", d)
    assert code == 1 and "corrupt" in err


def test_verify_checks_checkpoints_and_the_manifest(tmp_path, capsys):
    d = str(tmp_path / "d")
    _fill(d)
    cps = sorted(str(p) for p in Path(d).glob("shard-*/checkpoint-*.ckpt"))
    assert cps and run_cli(capsys, "verify", d)[0] == 0
    data = bytearray(open(cps[0], "rb").read())
    data[-10] ^= 1
    open(cps[0], "wb").write(data)
    code, out, _ = run_cli(capsys, "verify", d)
    assert code == 0 and "the other copy is whole" in out
    twin = cps[1] if Path(cps[1]).parent == Path(cps[0]).parent else None
    assert twin is not None
    open(twin, "wb").write(data)
    code, out, _ = run_cli(capsys, "verify", d)
    assert code == 1 and "DAMAGE" in out
    with open(os.path.join(d, "MANIFEST"), "ab") as f:
        f.write(b"x")
    code, out, _ = run_cli(capsys, "verify", d)
    assert code == 1 and "MANIFEST" in out


def test_verify_progress_bar_and_the_pure_printing(tmp_path, capsys):
    d = str(tmp_path / "d")
    _fill(d, checkpoint=False)
    code, out, err = run_cli(capsys, "verify", d, "--progress")
    assert code == 0 and "100%" in err and err.endswith("\n")
    assert cli_text.progress_bar(0, 0) .startswith("[" + "#" * 30)
    assert cli_text.progress_bar(1, 4, width=4).startswith("[#...]  25%")
    assert cli_text.table(("A", "BB"), [(1, None)]) == "A  BB\n1"
    assert cli_text.when(None) == "-"


def test_disk_check_reports_the_floor(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "disk-check", str(tmp_path), "--count", "20")
    assert code == 0 and "fdatasync floor: p50" in out and "steps/s" in out
    code, out, _ = run_cli(capsys, "disk-check", str(tmp_path), "--count", "5", "--json")
    s = json.loads(out)
    assert s["count"] == 5 and 0 < s["p50_us"] <= s["p99_us"] <= s["max_us"]
    assert os.listdir(tmp_path) == []
    assert run_cli(capsys, "disk-check", str(tmp_path), "--count", "0")[0] == 2


def _line(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """The child's next stdout line, waiting at most ``timeout`` seconds for it."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the server printed nothing in time"
    return proc.stdout.readline().decode()


def test_serve_runs_an_engine_with_the_http_api_until_sigterm(tmp_path, capsys):
    d = str(tmp_path / "d")
    env = {**os.environ, "FUSEE_HTTP_TOKEN": "tok", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fusee.cli", "serve", d, "--workflows", "tests.fusee._ops_workflows", "--http", "127.0.0.1:0", "--shards", "2"],
        cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0,  # unbuffered: select sees each line
    )
    try:
        assert "workflows: boom, flaky, kid, parent, waiter" in _line(proc)
        url = _line(proc).split(" at ", 1)[1].split()[0]

        def call(method: str, path: str, body=None, token="tok"):
            req = urllib.request.Request(url + path.lstrip("/"), method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        assert call("GET", "/api/runs", token=None)[0] == 401
        assert call("POST", "/api/runs", {"type": "waiter", "id": "srv-1", "input": 1})[0] == 201
        code, out, err = run_cli(capsys, "runs", "ls", d)
        assert code == 0 and "srv-1" in out and url in err
        assert call("POST", "/api/runs/srv-1/signal", {"name": "go", "value": 1}) == (200, {"ok": True})
        deadline = time.monotonic() + 10
        while call("GET", "/api/runs/srv-1")[1]["status"] != "completed":  # the run's end, polled over HTTP
            assert time.monotonic() < deadline
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert inspection.holder(d) is None and not os.path.exists(os.path.join(d, "HTTP"))
    code, out, _ = run_cli(capsys, "runs", "show", d, "srv-1", "--json")
    assert json.loads(out)["result"] == 2


def test_serve_refuses_a_module_without_workflows(tmp_path, capsys):
    code, _, err = run_cli(capsys, "serve", str(tmp_path / "d"), "--workflows", "json")
    assert code == 2 and "no @fusee.workflow in json" in err
    code, _, err = run_cli(capsys, "serve", str(tmp_path / "d"), "--workflows", "no_such_module_here")
    assert code == 2 and "cannot import" in err
