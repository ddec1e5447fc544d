"""The page's request box in a real headless Chromium against the real daemon: a request
typed into it is routed (to control here: nothing matches) and named at once; no control ran,
so it starts control (first use), whose pane shows with its own indicator; control's
``reply``, made over its real MCP session, shows under it without a reload."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api
from playwright.sync_api import expect

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.daemon.web.forward import forwarder
from tests.daemon.web.test_browser import ARGS, CHROMIUM, PHONE, WAIT_MS
from tests.support.mcp_results import tool_data
from tests.support.require import skip_missing

pytestmark = pytest.mark.chromium


def chromium() -> str:
    """The Chromium binary, or skip (fail where ``OPENBUS_REQUIRE`` names chromium)."""
    found = str(CHROMIUM) if CHROMIUM.exists() else shutil.which("chromium")
    if found is None:
        skip_missing("chromium", "chromium is not installed (make system-deps installs it)")
    assert found is not None
    return found


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    chromium()
    with make_fleet(tmp_path, {"control": {"launcher": "fakeclaude"}}) as made:
        yield made


def reply_as_control(fleet: Fleet, token: str, thread: str, text: str) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            result = await session.call_tool("reply", {"thread": thread, "text": text})
        return tool_data(result)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result(timeout=60)


def test_a_request_from_the_box_starts_control_and_controls_reply_shows_under_it(
    fleet: Fleet,
) -> None:
    with forwarder(fleet.daemon.socket_path) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=ARGS)
        page = browser.new_context(viewport=PHONE, is_mobile=True).new_page()
        page.goto(base + "/")
        page.fill("#ask-text", "what is everyone up to?")
        page.click("#ask-form button[type=submit]")
        route = page.locator("#ask-log li.ask-route")
        expect(route).to_contain_text("r1 to control", timeout=WAIT_MS)
        # no control ran: this first request started it, shown with its own indicator
        marked = page.locator('li.pane .indicator svg[data-icon="control"]')
        expect(marked).to_have_count(1, timeout=WAIT_MS)
        with fleet.daemon.human() as client:
            panes = client.get("/api/directory").json()["panes"]
        [control] = [p for p in panes if p.get("control")]
        assert control["session"] == "control"
        assert page.locator(f'li.pane[data-pane="{control["pane"]}"] .indicator svg').count()
        token = fleet.token_of(control["pid"])
        answered = reply_as_control(fleet, token, "r1", "All quiet on the fleet.")
        assert answered["result"]["request_state"] == "answered", answered
        expect(page.locator("#ask-log li.ask-reply")).to_contain_text(
            "All quiet on the fleet.", timeout=WAIT_MS
        )
        browser.close()
