"""A failed native build is visible, and no stale artifact hides it (issue 12).

These run the build the way the PEP 517 backend does (``setuptools.setup``
with ``native_build.setup_kwargs()``) on a copy of the project, with
``CC=/bin/false`` as the "no compiler" case:

* ``build`` is what ``pip install .`` runs (into ``build/lib.*``, then the
  wheel); ``build_ext --inplace`` is what ``pip install -e .`` runs;
* before the failing build, an earlier good build left its ``.so`` behind
  (built for real when a C compiler exists, else a planted file);
* afterwards the old ``.so`` is gone, the build report says why the module is
  missing, importing warns, ``python -m ensemble --version`` says it, and an
  old ``.so`` put back by hand is still not loaded;
* the build's warning reaches the controlling terminal even when stdout and
  stderr are captured, as pip captures them.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "native"))
import native_build  # noqa: E402

sys.path.remove(str(ROOT / "native"))

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]
SO = f"_native_crc32c{SUFFIX}"
# What the backend's run_setup does, with the command line given.
BUILD = (
    "import sys; sys.path.insert(0, 'native'); import native_build, setuptools; "
    "setuptools.setup(script_args=sys.argv[1:], **native_build.setup_kwargs())"
)
FAILED_CC = "/bin/false"


pytestmark = pytest.mark.skipif(
    not any(m.name == "crc32c" for m in native_build.declared_modules()),
    reason="needs the crc32c native module declared in native/modules.py",
)


@pytest.fixture(scope="module")
def compiler_problem():
    return native_build.c_compiler_problem()


@pytest.fixture
def project(tmp_path):
    """A copy of the project's sources, without any build output."""
    dst = tmp_path / "proj"
    skip = shutil.ignore_patterns("__pycache__", "*.so", native_build.REPORT_NAME, "build", "*.egg-info")
    for d in ("ensemble", "fusee", "native"):
        shutil.copytree(ROOT / d, dst / d, ignore=skip)
    for f in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / f, dst / f)
    return dst


def _env(cc: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CC", "ENSEMBLE_PURE_PYTHON",
                                                            "ENSEMBLE_REQUIRE_NATIVE")}
    if cc is not None:
        env["CC"] = cc
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run(cwd: Path, *args: str, cc: str | None = None) -> subprocess.CompletedProcess:
    """python args in cwd, in a new session (no controlling terminal), output captured."""
    return subprocess.run(
        [sys.executable, *args], cwd=str(cwd), env=_env(cc), capture_output=True, text=True,
        timeout=300, stdin=subprocess.DEVNULL, start_new_session=True,
    )


def build_lib(project: Path) -> Path:
    return project / "build" / f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"


def earlier_good_build(project: Path, args: list[str], out_dir: Path, compiler_problem) -> bytes:
    """Leave out_dir/SO behind as an earlier build would; answer its bytes."""
    if compiler_problem is None:
        r = run(project, "-c", BUILD, *args)
        assert r.returncode == 0, r.stderr
    else:  # no compiler here: plant it, newer than the sources ("up to date")
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / SO).write_bytes(b"an earlier build")
        os.utime(out_dir / SO, (2**31, 2**31))
    assert (out_dir / SO).is_file()
    return (out_dir / SO).read_bytes()


def report(directory: Path) -> dict:
    return json.loads((directory / native_build.REPORT_NAME).read_text())


def check_runtime_falls_back_visibly(where: Path) -> None:
    """Running ensemble from ``where``: load warns and falls back; --version says why."""
    r = run(where, "-c", "import ensemble, fusee.crc32c as c; "
                          "print(ensemble.__file__); print('impl', c.IMPLEMENTATION)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(str(where)), r.stdout  # this copy, not the repo
    assert "impl python" in r.stdout
    assert 1 == r.stderr.count("NativeFallbackWarning"), r.stderr
    assert "ensemble._native_crc32c: its C build failed" in r.stderr and FAILED_CC in r.stderr

    r = run(where, "-m", "ensemble", "--version")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("crc32c:"))
    assert "pure-Python fallback" in line and "used by fusee.crc32c" in line, line
    assert "build failed" in line and FAILED_CC in line, line


def test_failed_build_after_a_good_one_ships_no_stale_module(project, compiler_problem):
    """`pip install .` path: a leftover build/lib.*/ensemble/_native_crc32c*.so is not reused."""
    lib = build_lib(project)
    earlier_good_build(project, ["build"], lib / "ensemble", compiler_problem)

    r = run(project, "-c", BUILD, "build", cc=FAILED_CC)
    assert r.returncode == 0, r.stderr  # the install goes on...
    assert "WARNING: ensemble:   ensemble._native_crc32c (used by fusee.crc32c)" in r.stderr
    assert not (lib / "ensemble" / SO).exists(), "a stale .so would go into the wheel"
    assert native_build.compiled_artifacts(lib / "ensemble") == []
    entry = report(lib / "ensemble")["modules"]["ensemble._native_crc32c"]
    assert entry["built"] is False and FAILED_CC in entry["error"]
    check_runtime_falls_back_visibly(lib)  # build_lib is what the wheel installs


def test_failed_in_place_build_removes_the_old_module_next_to_the_sources(project, compiler_problem):
    """`pip install -e .` path: the earlier in-place .so is removed, and not loaded if put back."""
    pkg = project / "ensemble"
    old = earlier_good_build(project, ["build_ext", "--inplace"], pkg, compiler_problem)

    r = run(project, "-c", BUILD, "build_ext", "--inplace", cc=FAILED_CC)
    assert r.returncode == 0, r.stderr
    assert "WARNING: ensemble:" in r.stderr
    assert not (pkg / SO).exists()
    assert report(pkg)["modules"]["ensemble._native_crc32c"]["built"] is False
    check_runtime_falls_back_visibly(project)

    # An old .so put back next to the sources (by hand, by another tool) does not
    # mask the failure either: the report of the last build wins.
    (pkg / SO).write_bytes(old)
    check_runtime_falls_back_visibly(project)


def test_a_good_build_after_a_failed_one_is_native_again(project, compiler_problem):
    if compiler_problem:
        pytest.skip(compiler_problem)
    assert run(project, "-c", BUILD, "build_ext", "--inplace", cc=FAILED_CC).returncode == 0
    r = run(project, "-c", BUILD, "build_ext", "--inplace")
    assert r.returncode == 0 and "WARNING: ensemble:" not in r.stderr, r.stderr
    assert report(project / "ensemble")["modules"]["ensemble._native_crc32c"]["built"] is True
    r = run(project, "-W", "error", "-c", "import fusee.crc32c as c; print('impl', c.IMPLEMENTATION)")
    assert "impl native" in r.stdout, r.stderr
    r = run(project, "-m", "ensemble", "--version")
    assert "  crc32c: native (ensemble._native_crc32c, used by fusee.crc32c)" in r.stdout, r.stdout


def test_failed_build_warns_on_the_terminal_even_with_output_captured(project):
    """pip captures the backend's stdout/stderr; the warning still reaches the user's terminal."""
    master, slave = pty.openpty()
    ctty_exec = (
        "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
        f"os.execv(sys.executable, [sys.executable, '-c', {BUILD!r}, 'build_ext'])"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", ctty_exec], cwd=str(project), env=_env(FAILED_CC),
            stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
    finally:
        os.close(slave)
    screen = b""
    try:
        deadline = time.monotonic() + 300
        while True:  # until the build closes the terminal
            left = deadline - time.monotonic()
            assert left > 0, f"the build did not finish; terminal: {screen!r}"
            ready, _, _ = select.select([master], [], [], left)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: no process holds the terminal any more
                break
            if not chunk:
                break
            screen += chunk
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0, err
    text = screen.decode("utf-8", "replace")
    assert "WARNING: ensemble: a C hot path was not built" in text, text
    assert "ensemble._native_crc32c (used by fusee.crc32c)" in text and FAILED_CC in text, text
    assert b"WARNING: ensemble:" in err  # and on stderr too, for pip -v
