"""The page in a real headless Chromium against the real daemon, a private tmux server and
fake structured agents (``tests.daemon.mcp.conftest``), reached through a byte forwarder.

The browser sees the fleet, each connected pane's Observe or Collaborate icon, turns one
pane off and sees ``connect.set`` in the audit feed, approves a message card one agent's
real MCP call raised, reads the sender's messages in the pane detail, sees a refusal as one
line beside the control, and disconnects everyone. A phone-sized screenshot lands in the
test's tmp dir.
"""

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
from tests.daemon.messaging.test_mcp_messaging import in_directory
from tests.daemon.web.forward import forwarder
from tests.support.mcp_results import tool_data
from tests.support.require import skip_missing

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 15_000
PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.chromium


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        reason = "chromium is not installed (make system-deps installs it)"
        print(f"SKIP: {reason}")
        skip_missing("chromium", reason)
    with make_fleet(tmp_path) as made:
        yield made


def send_over_mcp(fleet: Fleet, token: str, target: str, incarnation: str) -> dict[str, Any]:
    """One agent messages another through the daemon's real MCP endpoint (on its own thread:
    the browser's sync API owns this one's event loop)."""

    async def go() -> dict[str, Any]:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            result = await session.call_tool(
                "send_message",
                {
                    "target": target,
                    "incarnation": incarnation,
                    "text": "please review the parser change",
                    "message_id": "web-1",
                },
            )
        return tool_data(result)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result(timeout=60)


def test_the_page_shows_the_fleet_connect_cards_messages_and_audit_in_a_real_browser(
    fleet: Fleet, tmp_path: Path
) -> None:
    a = fleet.launch("fakeclaude", "collaborate")
    b = fleet.launch("fakecodex", "collaborate")
    c = fleet.launch("fakeclaude", "observe")
    opaque = fleet.launch("opaque", "off")
    entry_b = in_directory(fleet, b["pane"])
    in_directory(fleet, opaque["pane"])
    token_a = fleet.token_of(a["pid"])

    problems: list[str] = []
    outside: list[str] = []
    with forwarder(fleet.daemon.socket_path) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            headless=True,
            args=ARGS,
        )
        context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
        page = context.new_page()
        page.on(
            "console",
            lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))
        with fleet.daemon.human() as client:
            opened = client.get("/api/audit", params={"after": 0, "limit": 1}).json()
        page.goto(base + "/")

        def pane(p: dict[str, Any]) -> Any:
            return page.locator(f'li.pane[data-pane="{p["pane"]}"]')

        # the fleet: every pane, with its Connect indicator (none for Off)
        for launched in (a, b, c, opaque):
            expect(pane(launched)).to_be_visible(timeout=WAIT_MS)
        expect(pane(c).locator('.indicator svg[data-icon="observe"]')).to_be_visible()
        expect(pane(a).locator('.indicator svg[data-icon="collaborate"]')).to_be_visible()
        expect(pane(opaque).locator(".indicator svg")).to_have_count(0)
        expect(pane(c).locator('button[data-preset="observe"]')).to_have_attribute(
            "aria-checked", "true"
        )
        expect(page.locator("text=not a sandbox")).to_be_visible()

        # Needs you: A's message to B raises a card; it shows its expiry
        sent = send_over_mcp(fleet, token_a, b["pane"], entry_b["incarnation"])
        assert sent.get("result", {}).get("outcome") == "queued", sent
        card = page.locator('li.card[data-kind="message"]')
        expect(card).to_be_visible(timeout=WAIT_MS)
        expect(card.locator(".expiry")).to_contain_text("expires at")
        expect(card.locator('button[data-decision="approve_pair"]')).to_be_visible()
        expect(page.locator("#cards-count")).to_have_text("1")
        expect(page).to_have_title("(1) openbus")
        assert "needs you: message" in fleet.daemon.log()  # one line per new card
        page.screenshot(path=str(tmp_path / "phone.png"), full_page=False)
        page.screenshot(path=str(tmp_path / "phone-full.png"), full_page=True)

        card.locator('button[data-decision="approve"]').click()
        expect(page.locator("li.card")).to_have_count(0, timeout=WAIT_MS)
        expect(page.locator('#audit-feed li[data-action="cards.decide"]')).to_be_visible(
            timeout=WAIT_MS
        )
        # the feed names the sending agent by harness and pane, never by its session id
        sender = page.locator('#audit-feed li[data-action="message.send"] .rec-actor').first
        expect(sender).to_contain_text(f"claude {a['pane']}")
        expect(page.locator("#audit-feed .rec-actor", has_text="agent:")).to_have_count(0)

        # the sender's detail lists the message it sent
        pane(a).locator("button.title").click()
        sent_list = page.locator('#detail .msgs[data-direction="sent"]')
        expect(sent_list.locator('li[data-message="web-1"]')).to_be_visible(timeout=WAIT_MS)
        expect(sent_list).to_contain_text("please review the parser change")
        fields = page.locator("#detail dl.fields")
        expect(fields).to_contain_text("Harness")
        expect(fields).to_contain_text("collaborate")
        assert "[object" not in page.locator("#detail").inner_text()
        page.screenshot(path=str(tmp_path / "phone-detail.png"))
        page.locator("#back").click()
        expect(page.locator("#fleet")).to_be_visible()

        # turning one pane off: the icon goes, the feed shows connect.set
        pane(c).locator('button[data-preset="off"]').click()
        expect(pane(c).locator(".indicator svg")).to_have_count(0, timeout=WAIT_MS)
        # Off revoked its token: no toggle any more, the reason instead
        expect(pane(c).locator("[data-unavailable]")).to_contain_text("revoked", timeout=WAIT_MS)
        expect(pane(c).locator("button[data-preset]")).to_have_count(0)
        expect(page.locator('#audit-feed li[data-action="connect.set"]')).to_be_visible(
            timeout=WAIT_MS
        )

        # an opaque launcher's pane offers no toggle: the API's reason, as one readable line
        reason = pane(opaque).locator("[data-unavailable]")
        expect(reason).to_contain_text("opaque command launcher")
        expect(pane(opaque).locator("button[data-preset]")).to_have_count(0)
        assert "\n" not in reason.inner_text()

        # disconnect all, after a confirm
        dialogs: list[str] = []

        def accept(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        page.locator("#disconnect-all").click()
        expect(page.locator("#notice")).to_contain_text("Disconnected 2 agents", timeout=WAIT_MS)
        expect(page.locator("li.pane .indicator svg")).to_have_count(0, timeout=WAIT_MS)
        expect(page.locator('#audit-feed li[data-action="connect.disconnect_all"]')).to_be_visible(
            timeout=WAIT_MS
        )
        assert dialogs and "Disconnect every agent" in dialogs[0]

        # the page's own reads stay out of the feed unless asked for
        feed = page.locator('#audit-feed li[data-action="human.follow"]')
        expect(feed).to_have_count(0)
        page.locator("#show-reads").check()
        expect(feed.first).to_be_visible()
        page.screenshot(path=str(tmp_path / "phone-after.png"), full_page=True)
        browser.close()

    assert outside == [], f"the page loaded from outside the box: {outside}"
    assert problems == [], problems
    with fleet.daemon.human() as client:
        connections = client.get("/api/connections").json()["connections"]
    assert connections == []  # off revoked every token: nothing is connected any more
    # the feed followed the NDJSON stream: one audited call, not a poll every few seconds
    with fleet.daemon.human() as client:
        records = client.get(
            "/api/audit", params={"after": opened["export"]["seq"], "limit": 1000}
        ).json()["records"]
    # (what the page did since it opened, and this test's last read of the connections)
    actions = [r["action"] for r in records if r["actor"].startswith("human:")]
    assert actions.count("audit.follow") == 1, actions
    # the page followed the fleet too: one subscription, no directory or card polls
    assert actions.count("human.follow") == 1, actions
    assert "directory.list" not in actions and "cards.list" not in actions, " ".join(actions)
