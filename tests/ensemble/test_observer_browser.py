"""The observer's pages in a real headless Chromium: a spawned process appears, its page shows its links and
state, the kill button kills it; a supervision tree is drawn as a tree.  Screenshots go to
``test-artifacts/observer/``.  Skipped without chromium, chromedriver or selenium (failed when ``CI=true``)."""

from __future__ import annotations

import pytest

import ensemble as e
from ensemble import gen_server, observer, supervisor
from tests.browser import artifacts, chromium, off_hub

WAIT = 15  # seconds a page may take to show what the test waits for


@pytest.fixture(scope="module")
def driver():
    with chromium() as d:
        yield d


@pytest.fixture
def base():
    server = observer.serve("127.0.0.1:0", log=None, timeout=1.0)
    try:
        yield f"http://127.0.0.1:{server.address[1]}"
    finally:
        server.stop()


class Counter(gen_server.GenServer):
    def init(self):
        return ("ok", {"count": 41})


def wait_for(pattern):
    return e.receive(lambda m: m if m == pattern else e.NOMATCH)


def until(driver, condition, what):
    """Wait (selenium's WebDriverWait, off the hub) until ``condition(driver)`` is truthy; answer it."""
    from selenium.webdriver.support.ui import WebDriverWait

    return off_hub(lambda: WebDriverWait(driver, WAIT).until(condition, f"waited {WAIT} s for {what}"))


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def url_of(pid):
    return repr(pid)[1:-1]


def test_a_spawned_process_appears_its_page_shows_links_and_state_and_kill_ends_it(driver, base):
    target = gen_server.start(Counter(), name="browser_target")
    partner = e.spawn(lambda: (e.link(target), wait_for("stop")))
    row = f'#processes tr[data-pid="{url_of(target)}"]'

    off_hub(driver.get, base + "/")
    until(driver, lambda d: css(d, row), "the target's row")
    assert "browser_target" in off_hub(lambda: css(driver, row)[0].text)
    off_hub(driver.save_screenshot, str(artifacts("observer") / "processes.png"))

    off_hub(lambda: css(driver, row + " a")[0].click())
    until(driver, lambda d: repr(partner) in d.find_element("id", "links").text, "the partner among the links")
    until(driver, lambda d: "'count': 41" in d.find_element("id", "state").text, "the state through sys.get_status")
    assert "sys.get_status" in off_hub(lambda: driver.find_element("id", "state-source").text)
    off_hub(driver.save_screenshot, str(artifacts("observer") / "process.png"))

    off_hub(lambda: driver.find_element("id", "kill").click())
    until(driver, lambda d: d.find_element("id", "gone").is_displayed(), "the page to say the process is gone")
    assert "killed" == e.exit_reason(target, timeout=5)
    assert "killed" == e.exit_reason(partner, timeout=5)  # linked, not trapping: it went too
    off_hub(driver.save_screenshot, str(artifacts("observer") / "process-killed.png"))

    off_hub(driver.get, base + "/")
    until(driver, lambda d: css(d, "#processes tbody tr"), "the processes table")
    until(driver, lambda d: not css(d, row), "the killed process to leave the table")


def test_a_supervision_tree_is_drawn_as_a_tree(driver, base):
    inner = {"id": "pool", "type": "supervisor", "start": lambda: supervisor.start_link(
        {"strategy": "one_for_all"}, [{"id": f"w{i}", "start": lambda: gen_server.start_link(Counter())} for i in range(2)])}
    top = supervisor.start({"strategy": "one_for_one"},
                           [{"id": "cache", "start": lambda: gen_server.start_link(Counter())}, inner], name="browser_tree")
    pool = next(pid for cid, pid, _, _ in supervisor.which_children(top) if cid == "pool")
    top_li = f'#supervision li[data-pid="{url_of(top)}"]'
    nested = f'{top_li} > ul > li[data-pid="{url_of(pool)}"] > ul > li.node-worker'

    off_hub(driver.get, base + "/")
    until(driver, lambda d: len(css(d, nested)) == 2, "the pool's two workers under the pool under the top")
    ids = off_hub(lambda: [x.text.strip() for x in css(driver, f"{top_li} > ul > li > .label > .child-id")])
    assert ["cache", "pool"] == ids
    assert "browser_tree" in off_hub(lambda: css(driver, top_li)[0].text)
    off_hub(lambda: driver.execute_script("document.getElementById('supervision-section').scrollIntoView()"))
    off_hub(driver.save_screenshot, str(artifacts("observer") / "supervision.png"))
