"""Restore from the page, in a real headless Chromium against the real daemon: after the tmux
server is killed under a connected agent, the page asks "Restore 1 session?" naming it; the
button brings it back in a new pane with its grant (the same ``POST /api/restore`` as
``openbus restore``), and the question goes away. The listing's dry runs stay out of the
audit feed as the page's own reads; the restore itself shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from openbus.daemon.launch_proc import identity_of
from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.web.test_ask_box import chromium
from tests.daemon.web.test_browser import WAIT_MS
from tests.daemon.web.test_restart_to_connect import page_on
from tests.support.wait import wait_until

pytestmark = pytest.mark.chromium


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    chromium()
    with make_fleet(tmp_path) as made:
        yield made


def test_the_page_offers_to_restore_the_sessions_a_lost_server_took_and_restores_them(
    fleet: Fleet,
) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    session_id = launched["connect"]["session_id"]
    before = identity_of(launched["pid"])
    fleet.tmux.run("kill-server", check=False)
    wait_until(lambda: identity_of(launched["pid"]) != before, timeout=30, what="the agent to end")
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
