"""fusee's web UI in a real headless Chromium (Debian's chromium + chromium-driver, through selenium):
the runs table shows a run as it starts, its page shows the step timeline, and its buttons signal,
cancel and terminate; a paused run's page resumes it; a run's page lists its updates and streams
(and shows a stream's chunks as they come) and sends an update; the schedules page lists schedules
and pauses, resumes, triggers, deletes and creates them.  The engine runs in a child process (``fusee serve``), so selenium's blocking
calls never stall its server.  A screenshot of each page is kept under ``test-artifacts/fusee-ui/``
(see tests/browser.py).  Without chromium the tests skip, except in CI (``CI=true``), where they
fail."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests import browser as browser_kit

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ui-token"


class Server:
    """``fusee serve`` in a child process, with the test workflows and a token."""

    def __init__(self, directory: str) -> None:
        env = {**os.environ, "FUSEE_HTTP_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fusee.cli", "serve", directory, "--workflows", "tests.fusee._ops_workflows",
             "--workflows", "tests.fusee._ops_interact", "--on-exhausted", "pause", "--http", "127.0.0.1:0", "--shards", "2"],
            cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0,
        )
        self._line()
        self.url = self._line().split(" at ", 1)[1].split()[0]

    def _line(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert ready, "fusee serve printed nothing within 30 s"
        return self.proc.stdout.readline().decode()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path.lstrip("/"), method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """A served engine and a headless Chromium on its UI (the server runs in a child process,
    so selenium's blocking calls need no care here)."""
    browser_kit.require()
    server = Server(str(tmp_path_factory.mktemp("ui") / "data"))
    try:
        with browser_kit.chromium() as browser:
            yield server, browser
    finally:
        server.stop()


def _wait(browser, condition, timeout: float = 15.0, what: str = "") -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # a table's rows are replaced whenever what they show changes: an element found may go stale
    return WebDriverWait(browser, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)).until(condition, message=what)


def _click(browser, css: str, what: str = "") -> None:
    """Click the element ``css`` (found again if the refreshed table replaced it in between)."""
    from selenium.webdriver.common.by import By

    _wait(browser, lambda b: b.find_element(By.CSS_SELECTOR, css).click() or True, what=what or css)


def _text(browser, css: str) -> str:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(20):  # a refreshed table may replace the element between finding and reading it: find it again
        found = browser.find_elements(By.CSS_SELECTOR, css)
        try:
            return found[0].text if found else ""
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} kept being replaced")


def _shot(browser, name: str, height: int | None = None) -> None:
    """A screenshot of the window (``height``: made that tall for it, to show a whole page)."""
    path = browser_kit.artifacts("fusee-ui") / f"{name}.png"
    if height is not None:
        size = browser.get_window_size()
        browser.set_window_size(size["width"], height)
    try:
        assert browser.save_screenshot(str(path)) and path.stat().st_size > 0
    finally:
        if height is not None:
            browser.set_window_size(size["width"], size["height"])


def _open_run(browser, id: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(browser.current_url.split("#")[0] + "#/runs/" + id)
    _wait(browser, lambda b: _text(b, "#run-status") == "running", what=f"{id}'s page says running")
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#timeline tr.entry"), what="its timeline")


def test_a_run_appears_live_and_its_page_signals_it_to_completion(ui):
    from selenium.webdriver.common.by import By

    server, browser = ui
    browser.get(server.url)
    _wait(browser, lambda b: b.find_element(By.ID, "auth").is_displayed(), what="the token form")
    browser.find_element(By.ID, "auth-token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#auth-form button").click()
    _wait(browser, lambda b: "no runs" in _text(b, "#runs-table tbody"), what="an empty runs table")

    assert server.call("POST", "/api/runs", {"type": "waiter", "id": "ui-1", "input": 40})[0] == 201
    row = '#runs-table tr[data-id="ui-1"]'
    _wait(browser, lambda b: _text(b, row + " .status"), what="the new run in the table")  # no reload: the table refreshes
    assert "waiter" in _text(browser, row) and _text(browser, row + " .status") == "running"
    _shot(browser, "runs")

    browser.find_element(By.CSS_SELECTOR, row + " a.run-link").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "running", what="the run page")
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#timeline tr[data-kind="wait"]'), what="the wait in the timeline")
    assert "waiting" in _text(browser, '#timeline tr[data-kind="wait"]')
    _wait(browser, lambda b: b.find_element(By.ID, "signal-name").get_attribute("value") == "go", what="the awaited signal's name")
    _shot(browser, "run-waiting")
    value = browser.find_element(By.ID, "signal-value")
    value.clear()
    value.send_keys("2")
    browser.find_element(By.ID, "signal-send").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "completed", what="the run completes")
    assert _text(browser, "#run-result") == "42"
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#timeline tr[data-kind="end"]'), what="its end in the timeline")
    kinds = [r.get_attribute("data-kind") for r in browser.find_elements(By.CSS_SELECTOR, "#timeline tr.entry")]
    assert kinds == ["start", "wait", "signal", "step", "end"]
    assert "finish" in _text(browser, '#timeline tr[data-kind="step"]')
    assert browser.find_element(By.ID, "signal-send").get_attribute("disabled") is not None
    _shot(browser, "run-completed")


def test_the_run_page_cancels_one_run_and_terminates_another(ui):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, browser = ui
    for id in ("ui-2", "ui-3"):
        assert server.call("POST", "/api/runs", {"type": "waiter", "id": id, "input": 1})[0] == 201
    _open_run(browser, "ui-2")
    browser.find_element(By.ID, "cancel-reason").send_keys("changed my mind")
    browser.find_element(By.ID, "cancel-btn").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "cancelled", what="the run is cancelled")
    assert "changed my mind" in _text(browser, '#timeline tr[data-kind="cancel"]')
    assert "cancelled" in _text(browser, "#run-error")
    _shot(browser, "run-cancelled")

    _open_run(browser, "ui-3")
    browser.find_element(By.ID, "terminate-btn").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "terminated", what="the run is terminated")
    assert server.call("GET", "/api/runs/ui-3")[1]["status"] == "terminated"

    browser.get(browser.current_url.split("#")[0] + "#/")
    _wait(browser, lambda b: _text(b, '#runs-table tr[data-id="ui-2"] .status') == "cancelled", what="the table shows it")
    Select(browser.find_element(By.ID, "filter-status")).select_by_visible_text("terminated")
    _wait(browser, lambda b: [r.get_attribute("data-id") for r in b.find_elements(By.CSS_SELECTOR, "#runs-table tr[data-id]")] == ["ui-3"],
          what="the status filter")
    _shot(browser, "runs-filtered")


def _open(browser, id: str, status: str) -> None:
    browser.get(browser.current_url.split("#")[0] + "#/runs/" + id)
    _wait(browser, lambda b: _text(b, "#run-status") == status, what=f"{id}'s page says {status}")


def _shown(browser, css: str) -> bool:
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, css)
    return bool(found) and found[0].is_displayed()


def test_a_paused_run_shows_a_resume_button_that_resumes_it(ui):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    server, browser = ui
    assert server.call("POST", "/api/runs", {"type": "stuck", "id": "ui-p"})[0] == 201
    _open(browser, "ui-p", "paused")
    _wait(browser, lambda b: _shown(b, "#resume-form"), what="the resume button")
    assert "paused" in _text(browser, '#timeline tr[data-kind="step"]') and "the service is down" in _text(browser, '#timeline tr[data-kind="step"]')
    _shot(browser, "run-paused")
    browser.find_element(By.ID, "resume-btn").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "completed", what="the resumed run completes")
    assert _text(browser, "#run-result") == "2" and not _shown(browser, "#resume-form")
    assert "resumed" in _text(browser, "#message")
    _open(browser, "ui-2", "cancelled")  # a run that is not paused shows no resume button
    assert not _shown(browser, "#resume-form")
    browser.get(browser.current_url.split("#")[0] + "#/")
    Select(browser.find_element(By.ID, "filter-status")).select_by_visible_text("paused")
    _wait(browser, lambda b: "no runs" in _text(b, "#runs-table tbody"), what="no paused run is left")


def test_a_runs_page_lists_its_streams_and_updates_and_sends_an_update(ui):
    from selenium.webdriver.common.by import By

    server, browser = ui
    assert server.call("POST", "/api/runs", {"type": "chat", "id": "ui-c", "input": ["Hel", "lo", " world"]})[0] == 201
    _open(browser, "ui-c", "running")
    _wait(browser, lambda b: _text(b, '#streams tr[data-stream="tokens"] .stream-count') == "3", what="the stream and its 3 chunks")
    assert not _shown(browser, "#updates-box")  # no update yet
    assert "generate" in _text(browser, '#streams tr[data-stream="tokens"]')
    browser.find_element(By.CSS_SELECTOR, '#streams button.stream-show[data-name="tokens"]').click()
    _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#stream-chunks li")) == 3, what="the stream's chunks")
    assert [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#stream-chunks li")] == ["Hel", "lo", " world"]
    assert "reading as they come" in _text(browser, "#stream-state")

    browser.find_element(By.ID, "update-name").send_keys("add")
    value = browser.find_element(By.ID, "update-value")
    value.clear()
    value.send_keys("5")
    browser.find_element(By.ID, "update-send").click()
    _wait(browser, lambda b: "update add answered 5" in _text(b, "#message"), what="the update's answer")
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#updates tr[data-status="ok"]'), what="the update in the list")
    _shot(browser, "run-streams", height=1500)
    value.clear()
    value.send_keys("null")
    browser.find_element(By.ID, "update-send").click()
    _wait(browser, lambda b: "update_rejected" in _text(b, "#message"), what="the validator's refusal")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#updates tbody tr")) == 1  # a refusal records nothing
    assert "5" in _text(browser, '#updates tr[data-status="ok"] .update-result')
    assert _text(browser, '#timeline tr[data-kind="update"]') and _text(browser, '#timeline tr[data-kind="stream"]')

    _wait(browser, lambda b: b.find_element(By.ID, "signal-name").get_attribute("value") == "go", what="the awaited signal's name")
    browser.find_element(By.ID, "signal-send").click()
    _wait(browser, lambda b: _text(b, "#run-status") == "completed", what="the run completes")
    _wait(browser, lambda b: b.find_element(By.ID, "stream-view").get_attribute("data-ended") == "true", what="the stream ends")
    assert "closed" in _text(browser, '#streams tr[data-stream="tokens"]') and _text(browser, "#run-result") == "5"
    assert browser.find_element(By.ID, "update-send").get_attribute("disabled") is not None


def test_the_schedules_page_pauses_resumes_triggers_deletes_and_creates(ui):
    from selenium.webdriver.common.by import By

    server, browser = ui
    assert server.call("POST", "/api/schedules", {"name": "nightly", "workflow": "kid", "cron": "0 2 * * mon-fri", "input": 3})[0] == 201
    browser.get(browser.current_url.split("#")[0] + "#/")
    browser.find_element(By.ID, "nav-schedules").click()
    row = '#schedules-table tr[data-name="nightly"]'
    _wait(browser, lambda b: _text(b, row + " .status") == "active", what="the schedule in the table")
    assert "cron 0 2 * * mon-fri (UTC)" in _text(browser, row) and _text(browser, row + " .next")
    _click(browser, row + " button.sched-pause")
    _wait(browser, lambda b: _text(b, row + " .status") == "paused", what="paused")
    assert _text(browser, row + " .next") == ""
    _click(browser, row + " button.sched-resume")
    _wait(browser, lambda b: _text(b, row + " .status") == "active", what="active again")
    _click(browser, row + " button.sched-trigger")
    _wait(browser, lambda b: _text(b, "#message").startswith("started nightly@"), what="the triggered run")
    fired = _text(browser, "#message").split(" ", 1)[1]
    _wait(browser, lambda b: _text(b, row + " .last") == fired, what="the fired run as the last one")

    browser.find_element(By.CSS_SELECTOR, "#schedule-box summary").click()
    browser.find_element(By.ID, "schedule-name").send_keys("hourly")
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, '#schedule-workflow option[value="kid"]'), what="the workflow types")
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "schedule-workflow")).select_by_value("kid")
    browser.find_element(By.ID, "schedule-every").send_keys("1h")
    browser.find_element(By.ID, "schedule-create").click()
    _wait(browser, lambda b: _text(b, '#schedules-table tr[data-name="hourly"] .status') == "active", what="the new schedule")
    assert "every 1h" in _text(browser, '#schedules-table tr[data-name="hourly"]')
    assert server.call("GET", "/api/schedules/hourly")[1]["every"] == 3600.0
    _shot(browser, "schedules")

    _click(browser, '#schedules-table tr[data-name="hourly"] button.sched-delete')
    _wait(browser, lambda b: not b.find_elements(By.CSS_SELECTOR, '#schedules-table tr[data-name="hourly"]'), what="deleted")
    assert server.call("GET", "/api/schedules/hourly")[0] == 404
    _click(browser, row + " a")  # the last fired run's page
    _wait(browser, lambda b: _text(b, "#run-id") == fired and _text(b, "#run-status") == "completed", what="the fired run's page")
    assert _text(browser, "#run-result") == "6"


def test_a_run_page_shows_nothing_of_the_run_shown_before_under_a_new_id(ui):
    """Going from one run's page to another's, the page clears the first run's status, fields and
    links at once: until the second run's answer arrives, nothing under its id is the first's."""
    from selenium.webdriver.common.by import By

    server, browser = ui
    assert server.call("POST", "/api/runs", {"type": "kid", "id": "ui-before", "input": 4})[0] == 201
    browser.get(browser.current_url.split("#")[0] + "#/runs/ui-before")
    _wait(browser, lambda b: _text(b, "#run-status") == "completed" and _text(b, "#run-result") == "8",
          what="the first run's page")
    # the route change runs at once (a hashchange dispatched here); the second run's fetch answers later
    shown = browser.execute_script(
        'history.replaceState(null, "", "#/runs/ui-after");'
        'window.dispatchEvent(new HashChangeEvent("hashchange"));'
        'return [document.querySelector("#run-id").textContent, document.querySelector("#run-status").textContent,'
        ' document.querySelectorAll("#run-fields dd").length, !!document.querySelector("#run-result")];')
    assert shown == ["ui-after", "", 0, False]
    _wait(browser, lambda b: b.find_elements(By.ID, "message") and "ui-after" in _text(b, "#message"),
          what="the second run is not found")
