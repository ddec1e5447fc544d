"""The human's side in a real headless Chromium, opened from the address the daemon printed (no
forwarder), against the real daemon, a private tmux server and a real Claude Code TUI (on the
stub model, with the stub's MCP tool not pre-approved, so running it asks first).

At phone size (390×844): Claude Code's permission prompt shows in Needs you with its question,
the call it shows and its options; the title and the icon carry the count, a browser
notification is raised for it and ``openbus cards --follow`` prints it; a tap on an option of
a screen that has changed since is refused with the reason and presses nothing; tapping "Yes"
on the current prompt makes the agent proceed (the tool runs, the turn ends).

At desk size (1280×800): clicking the pane shows its detail beside the fleet, with its current
screen, and text typed there reaches the agent; that page follows the daemon's feed, one
audited subscription instead of a record per poll. Screenshots of each state are written to
``build/screens/`` (gitignored).
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright import sync_api
from playwright.sync_api import expect

from tests.daemon.web.test_browser import ARGS, CHROMIUM
from tests.support.daemon import REPO, RunningDaemon, running_daemon
from tests.support.harnesses import (
    CLAUDE_IDLE,
    CLAUDE_PERMISSION,
    make_claude,
    require_binary,
    submit_prompt,
    workdir,
)
from tests.support.require import skip_missing
from tests.support.stub_model import StubModel, call_tool, reply, running_stub_model
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.chromium, pytest.mark.harness, pytest.mark.timeout(240)]

MCP_SERVER = "stubmcp"
WAIT_MS = 30_000
PHONE = {"width": 390, "height": 844}
DESK = {"width": 1280, "height": 800}
SHOTS = REPO / "build" / "screens"
# Records each notification the page raises (the browser's own would go to the desktop).
NOTES = """
window.__notes = [];
window.Notification = class {
  static permission = "granted";
  static requestPermission() { return Promise.resolve("granted"); }
  constructor(title, options) { window.__notes.push({ title, body: options && options.body }); }
};
"""


@dataclass
class Desk:
    daemon: RunningDaemon
    tmux: TmuxServer
    stub: StubModel
    pane: str
    browser: sync_api.Browser

    def human(self) -> httpx.Client:
        return self.daemon.human()

    def entry(self) -> dict[str, Any]:
        with self.human() as client:
            found: dict[str, Any] = client.get(f"/api/panes/{self.pane[1:]}").json()
        return found

    def page(self, viewport: dict[str, int], **extra: Any) -> sync_api.Page:
        context = self.browser.new_context(viewport=viewport, **extra)
        context.add_init_script(NOTES)
        page = context.new_page()
        page.on("pageerror", lambda e: pytest.fail(f"the page threw: {e}"))
        return page

    def shot(self, page: sync_api.Page, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"))


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        skip_missing("chromium", "chromium is not installed (make system-deps installs it)")
    require_binary("claude")
    root = tmp_path_factory.mktemp("needs-you")
    with (
        running_stub_model() as stub,
        tmux_server(root / "tmux") as tmux,
        sync_api.sync_playwright() as pw,
    ):
        cwd = workdir(root)
        claude = make_claude(root, stub, cwd)
        argv = claude.tui_argv(*claude.mcp_args(MCP_SERVER, stub.mcp_url))
        pane = tmux.new_window(argv, claude.env(), cwd, remain_on_exit=True)
        tmux.wait_for(pane, CLAUDE_IDLE)
        (root / "daemon").mkdir()
        with running_daemon(root / "daemon", {"tmux": {"socket": str(tmux.socket)}}) as daemon:
            browser = pw.chromium.launch(
                executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
                headless=True,
                args=ARGS,
            )
            try:
                yield Desk(daemon, tmux, stub, pane, browser)
            finally:
                browser.close()


def ask_for_echo(desk: Desk, text: str) -> Any:
    """Have the agent want to run the stub's echo tool with ``text``; wait for its prompt."""
    tool = desk.stub.script(
        call_tool(f"mcp__{MCP_SERVER}__echo", {"text": text}),
        reply(f"STUB-FINAL {text} said {{tool_result}}"),
        match=f"run echo {text}",
    )
    submit_prompt(desk.tmux, desk.pane, f"please run echo {text}")
    desk.tmux.wait_for(desk.pane, CLAUDE_PERMISSION)
    desk.tmux.wait_for(desk.pane, text)
    return tool


def first_followed(desk: Desk) -> dict[str, Any]:
    """The first item ``openbus cards --follow --json`` prints."""
    argv = [sys.executable, "-m", "openbus.daemon.cli", "cards", "--follow", "--json"]
    follower = subprocess.Popen(
        [*argv, "--config", str(desk.daemon.config_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert follower.stdout is not None
        ready = select.select([follower.stdout], [], [], 30)[0]
        assert ready, "openbus cards --follow printed nothing"
        found: dict[str, Any] = json.loads(follower.stdout.readline())
        return found
    finally:
        follower.kill()
        follower.wait(timeout=10)
        if follower.stdout is not None:
            follower.stdout.close()


def test_a_permission_prompt_is_answered_from_the_phone_and_a_stale_tap_is_refused(
    desk: Desk,
) -> None:
    page = desk.page(PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    # this page polls (its feed refused), so its clock can hold it on one screen below
    page.route("**/api/follow", lambda route: route.abort())
    page.clock.install()
    page.goto(desk.daemon.web_url())  # the printed address: the secret becomes a cookie
    assert "token=" not in page.url
    expect(page.locator(f'li.pane[data-pane="{desk.pane}"]')).to_be_visible(timeout=WAIT_MS)
    expect(page).to_have_title("openbus")

    first = ask_for_echo(desk, "alpha")
    asks = page.locator(f'li.card.asks[data-asks="{desk.pane}"]')
    expect(asks).to_be_visible(timeout=WAIT_MS)
    expect(asks.locator(".question")).to_have_text("Do you want to proceed?")
    expect(asks.locator(".menu-detail")).to_contain_text('echo(text: "alpha")')
    expect(asks.locator('.options button[data-key="1"]')).to_contain_text("Yes")
    expect(asks.locator(".options button").last).to_contain_text("No")
    expect(page.locator("#cards-count")).to_have_text("1")
    expect(page).to_have_title("(1) openbus")
    expect(page.locator('link[rel="icon"]')).to_have_attribute("href", "/static/favicon-1.svg")
    notes = page.evaluate("window.__notes")
    assert any("asks" in n["title"] and n["body"] == "Do you want to proceed?" for n in notes)
    desk.shot(page, "phone-needs-you")
    item = first_followed(desk)
    assert (item["kind"], item["pane"], item["question"]) == ("asks", desk.pane, CLAUDE_PERMISSION)
    assert item["options"][0]["label"] == "Yes"

    # the page is frozen on the alpha prompt while the screen moves on to another question
    page.clock.pause_at(page.evaluate("Date.now()") + 1000)
    stale = asks.get_attribute("data-fingerprint")
    desk.tmux.keys(desk.pane, "Escape")  # the person declines at the desk instead
    desk.tmux.wait_for(desk.pane, CLAUDE_IDLE)
    submit_prompt(desk.tmux, desk.pane, "never mind")  # the model hears of the refusal
    first.wait_finished(timeout=30)
    desk.tmux.wait_for(desk.pane, CLAUDE_IDLE, "STUB-FINAL alpha")
    second = ask_for_echo(desk, "beta")
    asks.locator('.options button[data-key="1"]').tap()
    refusal = asks.locator(".error.inline")
    expect(refusal).to_contain_text("changed since it was shown", timeout=WAIT_MS)
    expect(refusal).to_contain_text("Nothing was pressed")
    assert refusal.bounding_box() is not None  # beside the tapped control, on screen
    desk.shot(page, "phone-stale-tap-refused")
    refused_row = page.locator('#audit-feed li.outcome-refused[data-action="pane.answer"]')
    expect(refused_row.locator(".rec-why")).to_contain_text("changed since it was shown")
    assert not second.finished.is_set()
    # still asking about beta: nothing was pressed (the reading may catch a redraw first)
    wait_until(lambda: desk.entry()["state"] == "menu", timeout=10, what="the beta menu read")
    desk.tmux.wait_for(desk.pane, CLAUDE_PERMISSION, "beta")
    assert not second.finished.is_set()

    # the page catches up: the beta prompt, and "Yes" makes the agent proceed
    page.clock.resume()
    expect(asks).not_to_have_attribute("data-fingerprint", stale or "", timeout=WAIT_MS)
    expect(asks.locator(".menu-detail")).to_contain_text('echo(text: "beta")')
    asks.locator('.options button[data-key="1"]').tap()
    second.wait_finished(timeout=30)
    assert second.last_tool_result is not None and "beta" in second.last_tool_result
    expect(page.locator("li.card.asks")).to_have_count(0, timeout=WAIT_MS)
    expect(page).to_have_title("openbus")
    expect(page.locator("#cards-empty")).to_be_visible()
    desk.shot(page, "phone-answered")

    with desk.human() as client:
        records = client.get("/api/audit", params={"after": 0, "limit": 1000}).json()["records"]
    answers = [r for r in records if r["action"] == "pane.answer"]
    assert [r["outcome"] for r in answers] == ["refused", "ok"], answers
    assert answers[-1]["target"] == desk.pane and answers[-1]["actor"].startswith("human:")
    page.context.close()


def test_on_a_desk_the_panes_detail_shows_beside_the_fleet_with_its_screen(desk: Desk) -> None:
    wait_until(lambda: desk.entry()["state"] == "idle", timeout=30, what="claude to be idle")
    with desk.human() as client:
        start = client.get("/api/audit", params={"after": 0, "limit": 1}).json()["export"]["seq"]
    page = desk.page(DESK)
    page.goto(desk.daemon.web_url())
    pane = page.locator(f'li.pane[data-pane="{desk.pane}"]')
    expect(pane).to_be_visible(timeout=WAIT_MS)
    pane.locator("button.title").click()
    screen = page.locator("#detail pre.screen")
    expect(screen).to_contain_text("STUB-FINAL beta", timeout=WAIT_MS)
    expect(page.locator("#fleet")).to_be_in_viewport()  # beside, not instead of, the fleet
    expect(page.locator("#detail")).to_be_in_viewport()
    desk.shot(page, "desk-detail")

    # text typed on the page reaches the idle agent, through the one keystroke path
    turn = desk.stub.script(reply("STUB-REPLY typed from the page"), match="from the page")
    page.locator("#type-text").fill("a line typed from the page")
    page.locator("#type-form button").click()
    turn.wait_finished(timeout=30)
    expect(screen).to_contain_text("STUB-REPLY typed from the page", timeout=WAIT_MS)
    desk.shot(page, "desk-typed")

    # older records load as the feed is scrolled, back to the log's first
    page.locator("#show-reads").check()
    rows = page.locator("#audit-feed li")
    older = page.locator("#audit-older")
    while "beginning" not in older.inner_text():
        before = rows.count()
        older.scroll_into_view_if_needed()
        expect(rows).not_to_have_count(before, timeout=WAIT_MS)
    expect(page.locator('#audit-feed li[data-seq="1"]')).to_have_count(1)
    page.context.close()

    # the page followed the fleet: one audited subscription, no polls of the directory or cards
    with desk.human() as client:
        records = client.get("/api/audit", params={"after": start, "limit": 1000}).json()
    actions = [r["action"] for r in records["records"] if r["actor"].startswith("human:")]
    assert actions.count("human.follow") == 1, actions
    assert "directory.list" not in actions and "cards.list" not in actions, actions
    assert actions.count("pane.type") == 1, actions


def test_a_pane_that_does_not_exist_says_so_instead_of_loading_forever(desk: Desk) -> None:
    page = desk.page(PHONE)
    page.goto(desk.daemon.web_url())
    page.goto(desk.daemon.web_base() + "/#/pane/%25999")
    expect(page.locator("#detail .error.inline")).to_contain_text("no pane %999", timeout=WAIT_MS)
    desk.shot(page, "phone-missing-pane")
    page.context.close()


def test_the_page_uses_the_real_lucide_icons(desk: Desk) -> None:
    with httpx.Client(base_url=desk.daemon.web_base()) as web:
        web.get(desk.daemon.web_url())
        script = web.get("/static/app.js").text
        favicon = web.get("/static/favicon-3.svg").text
    assert "/*LUCIDE-ICONS*/" not in script
    # Lucide's own eye, not a hand-drawn one
    assert "M2.062 12.348a1 1 0 0 1 0-.696 10.75 10.75 0 0 1 19.876 0" in script
    assert ">3</text>" in favicon
