"""The web inspector in headless Chromium (Debian's chromium and chromium-driver):
pages load, paging works, a message appended through the API appears live, search
finds, the active view toggles; a screenshot is saved in the test's directory."""

from __future__ import annotations

import os
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
            assert "ada \u2192 Helper (helper)" in text
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


def _support_case(api: httpx.Client) -> tuple[str, str, str]:
    """A thread with named people, attachments by URI, a side conversation, a long
    token and a long title; and a long log. Their ids: thread, part, long log."""
    thread = api.post("/v1/sessions", json={"title": "Refund " + "very " * 60 + "long title"})
    tid = thread.json()["id"]
    customer = {"id": "cust-7", "display_name": "Cleo Customer", "email": "cleo@example.org"}
    agent = {"id": "triage", "display_name": "Triage Bot", "kind": "agent"}
    attachments = [
        {"id": "a1", "filename": "invoice.pdf", "storage_uri": "https://files.example.org/inv.pdf"},
        {"id": "a2", "filename": "evil.html", "storage_uri": "javascript:alert(1)"},
        {"id": "a3", "filename": "scan.png", "storage_uri": "s3://bucket/scan.png"},
    ]
    token = "iVBORw0KGgo" + "A" * 20_000
    written = api.post(
        f"/v1/sessions/{tid}/events",
        json=user_message(
            "Please refund " + token, author=customer, recipients=[agent], attachments=attachments
        ),
    )
    assert written.status_code == 201, written.text
    part = api.post(f"/v1/sessions/{tid}/parts", json={"held_with": agent, "title": "Triage notes"})
    pid = part.json()["id"]
    api.post(
        f"/v1/sessions/{pid}/events",
        json={"role": "assistant", "content": "Checked the invoice", "author": "triage"},
    )
    long_log = api.post("/v1/sessions", json={"title": "Long log"}).json()["id"]
    for start in range(0, 450, 150):
        batch = [user_message(f"line {n}") for n in range(start, start + 150)]
        version = api.get(f"/v1/sessions/{long_log}/version").json()["version"]
        api.post(
            f"/v1/sessions/{long_log}/events/batch",
            json={"expected_version": version, "events": batch},
        )
    return tid, pid, long_log


def test_the_inspector_as_a_support_engineer_uses_it(
    backend: BackendUnderTest, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)

    def script(code: str) -> Any:
        return browser.execute_script(code)

    def shot(name: str) -> None:
        # Kept in the test's directory, or where CONVOSTORE_SCREENSHOTS says.
        folder = Path(os.environ.get("CONVOSTORE_SCREENSHOTS") or tmp_path)
        folder.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(folder / f"{name}.png"))

    def log() -> list[str]:
        texts: list[str] = script(
            "return [...document.querySelectorAll('#log li')].map(e => e.innerText)"
        )
        return texts

    def login(key: str, *, remember: bool = False) -> None:
        field = browser.find_element(By.ID, "key")
        field.clear()
        field.send_keys(key)
        box = browser.find_element(By.ID, "remember")
        if box.is_selected() != remember:
            box.click()
        browser.find_element(By.ID, "connect").click()

    def open_row(title_start: str) -> None:
        wait.until(
            lambda _: any(
                r.text.startswith(title_start)
                for r in browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")
            )
        )
        for row in browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"):
            if row.text.startswith(title_start):
                row.click()
                return

    def fits_the_window() -> bool:
        return bool(
            script(
                "const pane = document.getElementById('log-pane').getBoundingClientRect();"
                "return document.documentElement.scrollWidth <= window.innerWidth"
                " && pane.right <= window.innerWidth + 1;"
            )
        )

    with ServerThread(backend(), owners=("ada", "grace")) as server:
        headers = {"Authorization": f"Bearer {server.keys['ada']}"}
        with httpx.Client(base_url=server.base, headers=headers, timeout=60) as api:
            tid, pid, _ = _support_case(api)
        grace = {"Authorization": f"Bearer {server.keys['grace']}"}
        with httpx.Client(base_url=server.base, headers=grace, timeout=60) as api:
            api.post("/v1/sessions", json={"title": "Grace's only session"})
        browser.get(server.base + "/")

        # A wrong key: the error shows beside the form, in view.
        login("cs_0000000000000000_" + "A" * 43)
        wait.until(lambda _: "401" in browser.find_element(By.ID, "error").text)
        assert script(
            "const r = document.getElementById('error').getBoundingClientRect();"
            "return r.top >= 0 && r.bottom <= window.innerHeight && r.height > 0;"
        )
        shot("wrong-key")

        # The key is kept for this tab only, unless "remember" is ticked.
        login(server.keys["ada"])
        open_row("Refund")
        assert script("return sessionStorage.getItem('convostore.key')") == server.keys["ada"]
        assert script("return localStorage.getItem('convostore.key')") is None
        assert browser.find_element(By.ID, "error").text == ""

        # People by name, files by URI (a link only for http(s)), the part reachable.
        wait.until(lambda _: len(log()) == 1)
        text = log()[0]
        assert "Cleo Customer (cust-7) \u2192 Triage Bot (triage)" in text
        links = script(
            "return [...document.querySelectorAll('#log a')].map(a => a.getAttribute('href'))"
        )
        assert links == ["https://files.example.org/inv.pdf"]
        assert "javascript:alert(1)" in text
        assert "s3://bucket/scan.png" in text
        assert fits_the_window()
        title_cell = browser.find_element(By.CSS_SELECTOR, "#sessions tbody tr.open td.title")
        assert title_cell.size["height"] < 40
        shot("thread")
        browser.find_element(By.CSS_SELECTOR, f"#parts a[data-id='{pid}']").click()
        wait.until(lambda _: any("Checked the invoice" in t for t in log()))
        assert "Triage Bot (triage)" in browser.find_element(By.ID, "thread").text
        browser.find_element(By.CSS_SELECTOR, f"#thread a[data-id='{tid}']").click()
        wait.until(lambda _: any("Please refund" in t for t in log()))

        # At 520 px nothing is cut: the page is one column as wide as the window.
        browser.set_window_size(520, 900)
        wait.until(lambda _: fits_the_window())
        shot("narrow")
        browser.set_window_size(1400, 900)

        # A long log is paged: 200 events, then more on demand, then live.
        open_row("Long log")
        wait.until(lambda _: len(log()) == 200)
        assert browser.find_element(By.ID, "live").text != "live"
        more = browser.find_element(By.ID, "more-events")
        more.click()
        wait.until(lambda _: len(log()) == 400)
        more.click()
        wait.until(lambda _: len(log()) == 450)
        assert not more.is_displayed()
        wait.until(lambda _: browser.find_element(By.ID, "live").text == "live")
        assert log()[-1].endswith("line 449")
        shot("long-log")

        # Another key: the previous owner's session is closed, its stream ended.
        login(server.keys["grace"], remember=True)
        open_row("Grace's only session")
        assert log() == []
        page = browser.find_element(By.TAG_NAME, "body").text
        assert "Long log" not in page
        assert "line 449" not in page
        assert script("return localStorage.getItem('convostore.key')") == server.keys["grace"]
        assert script("return sessionStorage.getItem('convostore.key')") is None

        # Forget: no key anywhere, nothing of the owner on screen.
        browser.find_element(By.ID, "forget").click()
        assert script("return localStorage.getItem('convostore.key')") is None
        assert script("return sessionStorage.getItem('convostore.key')") is None
        assert browser.find_element(By.ID, "key").get_attribute("value") == ""
        assert browser.find_elements(By.CSS_SELECTOR, "#sessions tbody tr") == []
        browser.refresh()
        assert browser.find_element(By.ID, "key").get_attribute("value") == ""
        assert _policy_violations(browser) == []
        browser.get("about:blank")
