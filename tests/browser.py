"""A real headless Chromium for the browser tests (Debian's ``chromium`` and ``chromium-driver``, through selenium).

::

    from tests.browser import chromium, off_hub, artifacts

    with chromium() as driver:                       # skips without chromium (fails when CI=true)
        off_hub(driver.get, url)                     # the hub keeps serving while the browser loads
        off_hub(driver.save_screenshot, str(artifacts("observer") / "index.png"))

Selenium's calls block their OS thread.  A server on this process's gevent hub
(an ensemble observer, a dashboard) cannot answer the browser while the hub's
thread is blocked in one, so :func:`off_hub` runs them on gevent's thread pool:
the calling greenlet waits cooperatively and the hub keeps serving.  A server
in a child process needs no such care, but :func:`off_hub` does no harm there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Chromium's flags: headless, sandbox off (containers run as root), nothing that reaches the network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)

T = TypeVar("T")


def missing() -> str | None:
    """Why the browser tests cannot run here (chromium, chromedriver or selenium missing), or None."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium is not installed (apt-get install -y chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed (apt-get install -y chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def require() -> tuple[str, str]:
    """Chromium's and chromedriver's paths; skips the test when one is missing, fails it when ``CI=true``."""
    why = missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser tests: {why}")
        pytest.skip(why)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    assert binary and driver
    return binary, driver


def off_hub(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on gevent's thread pool, the calling greenlet waiting without blocking the hub."""
    import gevent

    return gevent.get_hub().threadpool.apply(fn, args, kwargs)


def artifacts(name: str) -> Path:
    """The directory keeping test artifacts (screenshots) of ``name``: ``test-artifacts/<name>/`` at the
    checkout's root, or under ``$TEST_ARTIFACTS`` when set; made if missing."""
    base = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / "test-artifacts")
    d = base / name
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A selenium ``WebDriver`` on a fresh headless Chromium (its own ``--user-data-dir``), quit on exit."""
    binary, driver_path = require()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    driver = off_hub(webdriver.Chrome, options=opts, service=Service(driver_path))
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        try:
            off_hub(driver.quit)
        finally:
            shutil.rmtree(profile, ignore_errors=True)
