"""The web inspector in headless Chromium (Debian's chromium and chromium-driver):
pages load, paging works, a message appended through the API appears live, search
finds, the active view toggles; a screenshot is saved in the test's directory."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import BackendUnderTest, in_ci
from .server_helpers import ServerThread, user_message

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,900",
)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        message = f"the browser test needs {', '.join(missing)}: scripts/setup.sh installs them"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _fill(api: httpx.Client) -> str:
    for n in range(11):
        sid = api.post("/v1/sessions", json={"title": f"Session {n:02}", "kind": "chat"}).json()[
            "id"
        ]
        api.post(f"/v1/sessions/{sid}/events", json=user_message(f"hello {n}"))
    rich = api.post("/v1/sessions", json={"title": "Router trouble", "kind": "support"}).json()[
        "id"
    ]
    url = f"/v1/sessions/{rich}/events"
    ada = {"id": "ada", "display_name": "Ada"}
    bot = {"id": "helper", "display_name": "Helper", "kind": "agent"}
    api.post(
        url,
        json=user_message(
            "My router keeps dropping",
            author=ada,
            recipients=[bot],
            attachments=[{"id": "f", "filename": "log.txt", "mime_type": "text/plain"}],
        ),
    )
    api.post(
        url,
        json={
            "role": "assistant",
            "content": "Let me check",
            "author": "helper",
            "recipients": ["ada"],
            "tool_calls": [{"id": "c1", "name": "router.status", "arguments": {"verbose": True}}],
        },
    )
    api.post(
        url,
        json={
            "role": "tool",
            "content": "firmware 1.2",
            "tool_call_id": "c1",
            "data": [
                {"id": "d", "type": "status", "title": "Router status", "json": {"up": False}}
            ],
        },
    )
    api.post(url, json=user_message("Thanks, updating now", author="ada"))
    api.post(url, json={"role": "assistant", "content": "Done?", "author": "helper"})
    compacted = api.post(
        f"/v1/sessions/{rich}/compact",
        json={
            "strategy": {"kind": "turn_window", "keep_turns": 1},
            "summary": "Ada's router dropped; firmware 1.2",
        },
    )
    assert compacted.json()["compacted"] is True
    return str(rich)


def test_the_inspector_pages_follows_live_and_searches(
    backend: BackendUnderTest, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with ServerThread(backend()) as server:
        headers = {"Authorization": f"Bearer {server.key}"}
        with httpx.Client(base_url=server.base, headers=headers, timeout=30) as api:
            rich = _fill(api)
            wait = WebDriverWait(browser, 30)
            browser.get(server.base + "/")
            browser.find_element(By.ID, "key").send_keys(server.key)
            browser.find_element(By.ID, "connect").click()

            def rows() -> list[Any]:
                found: list[Any] = browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
                return found

            wait.until(lambda _: len(rows()) == 10)
            assert rows()[0].text.startswith("Router trouble support 5")
            browser.find_element(By.ID, "next-page").click()
            wait.until(lambda _: len(rows()) == 2)
            assert browser.find_element(By.ID, "page-number").text == "page 2"
            assert not browser.find_element(By.ID, "next-page").is_enabled()
            browser.find_element(By.ID, "prev-page").click()
            wait.until(lambda _: len(rows()) == 10)

            rows()[0].click()

            def log() -> list[str]:
                # Read in one script: the list may be re-rendered between two calls.
                texts: list[str] = browser.execute_script(
                    "return [...document.querySelectorAll('#log li')].map(e => e.innerText)"
                )
                return texts

            wait.until(lambda _: len(log()) == 7)
            text = "\n".join(log())
            assert "ada \u2192 helper" in text
            assert "tool call router.status [c1]" in text
            assert "log.txt (text/plain)" in text
            assert "data status: Router status" in text
            assert "result of c1" in text
            assert "compaction boundary" in text
            browser.find_element(By.ID, "active-view").click()
            wait.until(lambda _: len(log()) == 3)
            assert "Ada's router dropped" in log()[0]
            wait.until(lambda _: browser.find_element(By.ID, "live").text == "live")

            api.post(f"/v1/sessions/{rich}/events", json=user_message("Appended live via the API"))
            wait.until(lambda _: any("Appended live via the API" in item for item in log()))

            browser.find_element(By.ID, "search-query").send_keys("firmware")
            Select(browser.find_element(By.ID, "search-mode")).select_by_value("text")
            browser.find_element(By.ID, "search-go").click()
            wait.until(
                lambda _: "firmware 1.2" in browser.find_element(By.ID, "search-results").text
            )
            assert browser.find_element(By.ID, "error").text == ""
            assert _policy_violations(browser) == []
            shot = tmp_path / "inspector.png"
            assert browser.save_screenshot(str(shot))
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            # Leave the page, closing its live stream, before the server stops.
            browser.get("about:blank")


def _policy_violations(browser: Any) -> list[str]:
    return [
        entry["message"]
        for entry in browser.get_log("browser")
        if "Content Security Policy" in entry["message"] or "Refused to" in entry["message"]
    ]


def test_the_docs_render_from_the_packages_own_files(
    backend: BackendUnderTest, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with ServerThread(backend()) as server:
        browser.get(server.base + "/docs")
        WebDriverWait(browser, 30).until(
            lambda _: len(browser.find_elements(By.CSS_SELECTOR, ".opblock")) > 20
        )
        scripts = browser.execute_script("return [...document.scripts].map(s => s.src)")
        assert scripts
        assert all(s.startswith(server.base + "/") for s in scripts)
        assert _policy_violations(browser) == []
        browser.get("about:blank")
