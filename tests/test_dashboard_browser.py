"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium
through chromium-driver. Skipped where Chromium is missing; ``pytest
--require-servers`` (CI, which installs it) fails instead.

With AGENTPLANE_SCREENSHOTS=<folder> the tests also save the screenshots
docs/dashboard.md shows (``overview.png``, ``dead-letters.png``, ``run.png``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentplane_redis.dashboard import create_app
from agentplane_redis.testing import fake_server, fake_store

from helpers import at, ev, sub, timer


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        why = "no chromium or chromedriver (apt-get install chromium chromium-driver)"
        if request.config.getoption("--require-servers"):
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    yield browser
    browser.quit()


class Served:
    """The dashboard served by uvicorn on a loopback port, on a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.05)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def _filled() -> tuple[Any, Any]:
    server = fake_server()
    acme = fake_store("acme", server=server)
    acme.events.buffer(ev("late", "order/A-1", payload={"amount": 1250}), at=at(0))
    for n in range(55):
        acme.events.buffer(ev(f"d{n:02d}", f"order/D-{n % 2}"), at=at(1 + n))
    acme.events.sweep_unclaimed(at(100), "nobody waited")
    acme.events.buffer(ev("held", "order/B-1"), at=at(200))
    acme.events.wait(sub("run-1", "await-payment", "order/B-1"), at=at(201))
    acme.events.subscribe(sub("run-1", "await-refund", "order/C-1"), at=at(202))
    acme.timers.arm(timer("run-1", "reminder", 300))
    acme.timers.claim_due(now=at(300), lease=timedelta(minutes=5))
    acme.timers.arm(timer("run-1", "escalate", 400))
    beta = fake_store("beta", server=server)
    beta.timers.arm(timer("run-9", "nightly", 500))
    return acme, beta


@pytest.fixture
def served() -> Iterator[tuple[Served, Any]]:
    acme, beta = _filled()
    dashboard = Served(create_app([acme, beta]))
    yield dashboard, acme
    dashboard.stop()


@pytest.fixture
def served_with_actions() -> Iterator[tuple[Served, Any]]:
    acme, beta = _filled()
    dashboard = Served(create_app([acme, beta], allow_actions=True))
    yield dashboard, acme
    dashboard.stop()


def shot(browser: Any, name: str) -> None:
    folder = os.environ.get("AGENTPLANE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / name))


def live_count(browser: Any) -> str:
    """The acme row's live count, read in one step: the overview swaps its
    rows on every refresh, so a found element can go stale before it is read."""
    cell = browser.execute_script(
        "const c = document.querySelector('tr[data-tenant=\"acme\"] td.live');"
        " return c ? c.textContent.trim() : null;"
    )
    assert cell is not None, "no live cell for acme on the overview"
    return str(cell)


def test_the_overview_updates_when_events_arrive(browser, served):
    from selenium.webdriver.support.ui import WebDriverWait

    dashboard, acme = served
    browser.get(dashboard.url("/"))
    assert live_count(browser) == "0"
    shot(browser, "overview.png")
    acme.events.buffer(ev("fresh", "order/Z-9"))
    WebDriverWait(browser, 15).until(lambda b: live_count(b) == "1")  # no reload


def test_filtering_and_paging_dead_letters(browser, served):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    def rows() -> list[Any]:
        return list(browser.find_elements(By.CSS_SELECTOR, "#items tr"))

    def after(action: Any) -> None:
        """Runs ``action`` (a click or a submit) and waits for the page it loads."""
        old = browser.find_element(By.ID, "items")
        action()
        WebDriverWait(browser, 15).until(expected_conditions.staleness_of(old))

    dashboard, _acme = served
    browser.get(dashboard.url("/t/acme/dead-letters"))
    # Under load the driver can answer before the table is in the document
    # (its source, read just after, held every row).
    with contextlib.suppress(TimeoutException):  # then the assertion says what it got
        WebDriverWait(browser, 15).until(lambda b: len(rows()) == 51)
    assert len(rows()) == 51, browser.page_source[:3000]  # a header and 50 rows
    shot(browser, "dead-letters.png")
    after(browser.find_element(By.ID, "next").click)
    assert len(rows()) == 1 + 6
    browser.get(dashboard.url("/t/acme/dead-letters"))
    box = browser.find_element(By.NAME, "key")
    box.send_keys("order/A-1")
    after(box.submit)
    assert [r.text.split()[1] for r in rows()[1:]] == ["late"]


def test_a_run_page_shows_its_waits_and_timers_and_links_there(browser, served):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    dashboard, _acme = served
    browser.get(dashboard.url("/t/acme/waiting"))
    browser.find_element(By.LINK_TEXT, "run-1").click()
    WebDriverWait(browser, 15).until(lambda b: b.find_elements(By.ID, "waits"))
    assert browser.current_url.endswith("/t/acme/run/run-1")
    waits = browser.find_element(By.ID, "waits").text
    assert "await-payment" in waits
    assert "await-refund" in waits
    timers = browser.find_element(By.ID, "timers").text
    assert "reminder" in timers
    assert "escalate" in timers
    shot(browser, "run.png")
    browser.find_element(By.LINK_TEXT, "src/held").click()
    WebDriverWait(browser, 15).until(
        lambda b: "Event src/held" in b.find_element(By.TAG_NAME, "h1").text
    )


def test_no_actions_and_a_cross_site_post_is_refused(browser, served):
    from selenium.webdriver.common.by import By

    dashboard, _acme = served
    for path in ("/", "/t/acme/dead-letters", "/t/acme/run/run-1", "/t/acme/timer/run-1/reminder"):
        browser.get(dashboard.url(path))
        assert not browser.find_elements(
            By.CSS_SELECTOR, 'form[method="post"], button:not([type="submit"])'
        )
    # A page of another origin posting to the dashboard: refused.
    browser.get("data:text/html,<p>elsewhere</p>")
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"fetch('{dashboard.url('/')}', {{method: 'POST', mode: 'no-cors', body: 'x=1'}})"
        ".then(r => done(r.type)).catch(e => done('refused'));"
    )
    assert status in ("opaque", "refused")  # the browser sees nothing of the answer
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as answered:
        urllib.request.urlopen(urllib.request.Request(dashboard.url("/"), data=b"x=1"), timeout=10)
    assert answered.value.code == 405


def test_actions_ask_first_work_and_refuse_another_site(browser, served_with_actions):
    """With actions: revive asks, and on yes revives; declining does nothing; a form
    another site submits to the dashboard is refused."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    dashboard, acme = served_with_actions
    browser.get(dashboard.url("/t/acme/dead-letters?key=order/A-1"))
    browser.find_element(By.CSS_SELECTOR, "button.act-revive").click()
    WebDriverWait(browser, 10).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.dismiss()  # no
    assert acme.events.stats().dead == 56
    browser.find_element(By.CSS_SELECTOR, "button.act-revive").click()
    WebDriverWait(browser, 10).until(expected_conditions.alert_is_present())
    browser.switch_to.alert.accept()  # yes
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "done"))
    assert "revived src/late" in browser.find_element(By.ID, "done").text
    assert acme.events.stats().dead == 55
    # Another site's page posting a revive form to the dashboard: refused.
    target = dashboard.url("/t/acme/actions/revive")
    browser.get(
        "data:text/html,<form id=f method=post action='" + target + "'>"
        "<input name=source value=src><input name=id value=d00></form>"
        "<script>document.getElementById('f').submit()</script>"
    )
    WebDriverWait(browser, 10).until(lambda b: "refused" in b.page_source)
    assert acme.events.stats().dead == 55
    browser.get(dashboard.url("/t/acme/run/run-1"))
    assert browser.find_elements(By.CSS_SELECTOR, "button.act-close")
    shot(browser, "run-actions.png")
