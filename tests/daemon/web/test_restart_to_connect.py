"""Restart-to-connect from the page, in a real headless Chromium against the real daemon and a
private tmux server: an agent openbus launched Off shows "Restart to connect" in its detail,
with the presets the org policy allows (Observe only under a cap of observe); pressing it
asks for the restart through the same ``PUT /api/connect`` the CLI uses, which raises the
"Restart this agent to connect it?" card in Needs you and restarts nothing until it is
approved. A pane a restart cannot connect shows the daemon's reason instead: an opaque
launcher's (``/api/restart-offers``) and a plain shell's (``/api/connections``).

Restore from the page: after the tmux server is killed under a connected agent, the page asks
"Restore 1 session?" naming it; the button brings it back in a new pane with its grant (the
same ``POST /api/restore`` as ``openbus restore``), and the question goes away. The listing's
dry runs stay out of the audit feed as the page's own reads; the restore itself shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api
from playwright.sync_api import expect

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.messaging.test_mcp_messaging import in_directory
from tests.daemon.test_policy_enforcement import governed_fleet
from tests.daemon.test_resume import lose_a_connected_agent
from tests.daemon.web.forward import forwarder
from tests.daemon.web.test_ask_box import chromium
from tests.daemon.web.test_browser import ARGS, PHONE, WAIT_MS

pytestmark = pytest.mark.chromium


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    chromium()
    with make_fleet(tmp_path) as made:
        yield made


@contextmanager
def page_on(fleet: Fleet, problems: list[str]) -> Iterator[sync_api.Page]:
    """The page in a phone-sized Chromium, its console errors and warnings collected."""
    with forwarder(fleet.daemon.socket_path) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True, args=ARGS)
        page = browser.new_context(viewport=PHONE, is_mobile=True).new_page()
        page.on(
            "console",
            lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
        )
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(base + "/")
        try:
            yield page
        finally:
            browser.close()


def open_detail(page: sync_api.Page, pane: str) -> Any:
    page.locator(f'li.pane[data-pane="{pane}"] button.title').click()
    expect(page.locator("#detail-h")).to_contain_text(pane, timeout=WAIT_MS)
    return page.locator("#detail-body")


def test_the_detail_offers_a_restart_where_one_can_connect_and_says_why_not_elsewhere(
    fleet: Fleet, tmp_path: Path
) -> None:
    off = fleet.launch("fakeclaude", "off")
    opaque = fleet.launch("opaque", "off")
    shell = fleet.tmux.run("list-panes", "-t", "main:0", "-F", "#{pane_id}").split()[0]
    for pane in (off["pane"], opaque["pane"], shell):
        in_directory(fleet, pane)
    problems: list[str] = []
    with page_on(fleet, problems) as page:
        # a plain shell: no offer, the reason Connect is unavailable there
        body = open_detail(page, shell)
        expect(body.locator(f'[data-unavailable="{shell}"]')).to_contain_text(
            "not an agent", timeout=WAIT_MS
        )
        expect(body.locator("[data-restart-connect]")).to_have_count(0)
        page.locator("#back").click()

        # an opaque launcher's agent: the restart offers' reason, no button
        body = open_detail(page, opaque["pane"])
        reason = body.locator(f'[data-unavailable="{opaque["pane"]}"][data-restartable="false"]')
        expect(reason).to_contain_text("opaque", timeout=WAIT_MS)
        expect(body.locator("[data-restart-connect]")).to_have_count(0)
        page.locator("#back").click()

        # an agent launched Off: the offer, with the presets the org policy allows
        body = open_detail(page, off["pane"])
        offer = body.locator(f'[data-restart="{off["pane"]}"]')
        expect(offer).to_contain_text(off["session_id"], timeout=WAIT_MS)
        presets = offer.locator("button[data-restart-preset]")
        expect(presets).to_have_count(2)
        expect(offer.locator('button[data-restart-preset="observe"]')).to_have_attribute(
            "aria-checked", "true"
        )
        offer.locator('button[data-restart-preset="collaborate"]').click()
        expect(offer.locator('button[data-restart-preset="collaborate"]')).to_have_attribute(
            "aria-checked", "true"
        )
        expect(
            offer.locator('button[data-restart-connect] svg[data-icon="restart"]')
        ).to_have_count(1)
        page.screenshot(path=str(tmp_path / "restart-offer.png"), full_page=True)
        offer.locator("button[data-restart-connect]").click()

        # the request raised the consent card; the detail waits for it
        card = page.locator('li.card[data-kind="restart_to_connect"]')
        expect(card).to_contain_text("Restart this agent to connect it?", timeout=WAIT_MS)
        expect(offer.locator("[data-pending]")).to_contain_text("Needs you", timeout=WAIT_MS)
        expect(offer.locator("button[data-restart-connect]")).to_have_count(0)
        expect(page.locator("#notice")).to_contain_text("Approve its card")
        page.screenshot(path=str(tmp_path / "restart-card.png"), full_page=True)

    assert problems == [], problems
    with fleet.daemon.human() as client:
        [raised] = client.get("/api/cards").json()["cards"]
        offers = {o["pane"]: o for o in client.get("/api/restart-offers").json()["offers"]}
    assert raised["target"] == off["pane"]
    assert "with Connect collaborate" in raised["summary"]  # the preset chosen on the page
    assert (
        offers[off["pane"]]["restarting"] is False
    )  # nothing restarts before the card is approved
    asked = [r for r in fleet.audit() if r["action"] == "connect.set"]
    assert [(r["target"], r["outcome"]) for r in asked] == [(off["pane"], "card")]
    assert not [r for r in fleet.audit() if r["action"].startswith("restart.step")]


def test_under_an_org_cap_of_observe_the_restart_offers_observe_only(tmp_path: Path) -> None:
    chromium()
    problems: list[str] = []
    with governed_fleet(tmp_path, "observe") as (fleet, _org):
        off = fleet.launch("fakeclaude", "off")
        in_directory(fleet, off["pane"])
        with page_on(fleet, problems) as page:
            offer = open_detail(page, off["pane"]).locator(f'[data-restart="{off["pane"]}"]')
            expect(offer.locator("button[data-restart-connect]")).to_be_visible(timeout=WAIT_MS)
            presets = offer.locator("button[data-restart-preset]")
            expect(presets).to_have_count(1)
            expect(presets).to_have_attribute("data-restart-preset", "observe")
    assert problems == [], problems


def test_the_page_offers_to_restore_the_sessions_a_lost_server_took_and_restores_them(
    fleet: Fleet,
) -> None:
    session_id = lose_a_connected_agent(fleet)["connect"]["session_id"]
    problems: list[str] = []
    with page_on(fleet, problems) as page:
        restore = page.locator("#restore")
        expect(restore).to_be_visible(timeout=WAIT_MS)
        expect(page.locator("#restore-text")).to_contain_text("Restore 1 session?")
        expect(page.locator("#restore-text")).to_contain_text(f"claude {session_id}")
        page.locator("#restore-go").click()
        expect(page.locator("#notice")).to_contain_text("Restored 1 of 1 session.", timeout=WAIT_MS)
        expect(restore).to_be_hidden(timeout=WAIT_MS)
        feed = page.locator("#audit-feed")
        expect(feed).to_contain_text("session.restore", timeout=WAIT_MS)
    records = fleet.audit()
    resumed = [r for r in records if r["action"] == "session.resume"]
    assert [r["details"]["session_id"] for r in resumed] == [session_id]
    assert resumed[0]["details"]["rejoined"] is True  # its grant came back with it
    restores = [r["details"]["dry_run"] for r in records if r["action"] == "session.restore"]
    assert False in restores and True in restores, json.dumps(restores)
    with fleet.daemon.human() as client:
        connections = client.get("/api/connections").json()["connections"]
    assert [c["pane"] for c in connections] == [resumed[0]["details"]["pane"]]
    assert not problems, problems
