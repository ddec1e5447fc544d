"""The page carries its first frame: ``GET /`` embeds what ``/api/follow`` sends first (and the
session families), escaped so that no pane title or screen text can end its data block, and
the page draws the whole fleet from it before any request of its own.

Real parts: a private tmux server whose pane has a hostile title (set with ``select-pane -T``)
and hostile text on its screen, the real daemon, and a real headless Chromium in which
``/api/follow`` is held back, so what the first render shows can only have come with the page.
"""

from __future__ import annotations

import html.parser
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright import sync_api
from playwright.sync_api import expect

from openbus.daemon.http.web import CSP
from openbus.daemon.state import StateDB
from tests.daemon.web.test_browser import ARGS, CHROMIUM
from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.require import skip_missing
from tests.support.tmux import TmuxServer, tmux_server
from tests.support.wait import wait_until

pytestmark = pytest.mark.chromium

WAIT_MS = 15_000
TITLE = "</script><script>window.__pwned=1</script><!-- \"quoted\" 'single' & more"
SCREEN = '</SCRIPT ><img src=x onerror=window.__pwned=2> "done" & <!--'


@dataclass
class Page:
    daemon: RunningDaemon
    tmux: TmuxServer
    pane: str


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Page]:
    with tmux_server(tmp_path / "tmux") as tmux:
        pane = tmux.new_window(["sh", "-c", 'printf "%s\\n" "$0"; exec sleep 3600', SCREEN])
        tmux.run("select-pane", "-t", pane, "-T", TITLE)
        tmux.wait_for(pane, "done")
        (tmp_path / "daemon").mkdir()
        with running_daemon(tmp_path / "daemon", {"tmux": {"socket": str(tmux.socket)}}) as d:
            with d.human() as client:
                wait_until(
                    lambda: any(
                        p["pane"] == pane and p["title"] == TITLE and p["summary"] == SCREEN
                        for p in client.get("/api/directory").json()["panes"]
                    ),
                    timeout=30,
                    what="the hostile pane in the directory",
                )
            yield Page(d, tmux, pane)


class Scripts(html.parser.HTMLParser):
    """Every ``<script>`` element of a document as the HTML tokenizer sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._open = dict(attrs)
            self.found.append((self._open, ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            attrs, text = self.found[-1]
            self.found[-1] = (attrs, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._open = None


def audit_actions(daemon: RunningDaemon) -> list[str]:
    db = StateDB(daemon.state_dir / "openbus.db")
    rows = db.conn.execute("SELECT action FROM audit ORDER BY seq").fetchall()
    db.close()
    return [row[0] for row in rows]


def test_the_page_embeds_its_first_frame_inert_and_audited(hostile: Page) -> None:
    before = audit_actions(hostile.daemon)
    with hostile.daemon.human() as client:
        response = client.get("/")
        frame_now = client.get("/api/directory").json()
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["cache-control"] == "no-store"  # it carries the fleet
    page = response.text
    # the hostile text is nowhere as markup: every < > & inside the data block is escaped
    assert TITLE not in page and SCREEN not in page
    assert "</script><script>window.__pwned" not in page.lower()
    parser = Scripts()
    parser.feed(page)
    kinds = [(attrs.get("type"), attrs.get("id")) for attrs, _ in parser.found]
    assert kinds == [("module", None), ("module", None), ("application/json", "first-frame")]
    frame = json.loads(parser.found[-1][1])
    assert set(frame) == {"directory", "cards", "connections", "families"}
    assert [p["pane"] for p in frame["directory"]["panes"]] == [
        p["pane"] for p in frame_now["panes"]
    ]
    (ours,) = [p for p in frame["directory"]["panes"] if p["pane"] == hostile.pane]
    assert ours["title"] == TITLE and ours["summary"] == SCREEN
    assert frame["families"] == {} and frame["cards"] == []
    # one audited read for the page; /api/directory above is the other
    assert audit_actions(hostile.daemon)[len(before) :] == ["human.page", "directory.list"]


def test_the_page_links_its_files_by_hash_and_they_are_cached_for_good(hostile: Page) -> None:
    with hostile.daemon.human() as client:
        page = client.get("/").text
        parser = Scripts()
        parser.feed(page)
        src = parser.found[0][0]["src"]
        assert src is not None and src.startswith("/static/app.js?v=")
        versioned = client.get(src)
        plain = client.get("/static/app.js")
        stale = client.get("/static/app.js?v=0123")
    assert versioned.status_code == 200 and versioned.content == plain.content
    assert versioned.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert plain.headers["cache-control"] == "no-cache"  # an unversioned name is revalidated
    assert stale.headers["cache-control"] == "no-cache"
    assert versioned.headers["content-security-policy"] == CSP


def test_the_first_render_comes_with_the_page_and_shows_hostile_text_as_text(
    hostile: Page,
) -> None:
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        skip_missing("chromium", "chromium is not installed (make system-deps installs it)")
    problems: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            headless=True,
            args=ARGS,
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
        page.on(
            "console",
            lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None,
        )
        held: list[Any] = []

        def hold(route: sync_api.Route) -> None:
            held.append(route)  # never answered

        page.route("**/api/follow", hold)
        page.goto(hostile.daemon.web_url())

        row = page.locator(f'#panes li[data-pane="{hostile.pane}"]')
        expect(row.locator(".title")).to_have_text(TITLE, timeout=WAIT_MS)
        expect(row.locator(".summary")).to_have_text(SCREEN)
        expect(page.locator("#panes-count")).to_have_text("2")  # and the session's shell
        expect(page.locator("#panes-empty")).to_be_hidden()
        wait_until(lambda: held, timeout=15, what="the page to ask for /api/follow")
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#panes img, #panes script").count() == 0
        assert page.locator("#first-frame").count() == 0  # read once, then gone
        assert page.locator("#live").text_content() == "connecting"  # not following yet
        for route in held:
            route.abort()
        browser.close()
    assert problems == [], problems


def test_the_page_without_a_readable_frame_still_draws_from_the_feed(hostile: Page) -> None:
    """A frame the page cannot parse (here: a proxy mangling the HTML) is skipped; the fleet
    comes from the feed as before."""
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        skip_missing("chromium", "chromium is not installed (make system-deps installs it)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            headless=True,
            args=ARGS,
        )
        context = browser.new_context()
        page = context.new_page()
        page.goto(hostile.daemon.web_url())  # the cookie

        def mangle(route: sync_api.Route) -> None:
            answer = route.fetch()
            body = answer.text()
            start = body.index('id="first-frame">') + len('id="first-frame">')
            route.fulfill(response=answer, body=body[:start] + "{" + body[start:])

        page.route(hostile.daemon.web_base() + "/", mangle)
        page.goto(hostile.daemon.web_base() + "/")
        row = page.locator(f'#panes li[data-pane="{hostile.pane}"]')
        expect(row.locator(".title")).to_have_text(TITLE, timeout=WAIT_MS)
        expect(page.locator("#live")).to_have_text("live")
        browser.close()


def test_a_new_line_on_a_screen_redraws_only_that_panes_row(hostile: Page) -> None:
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        skip_missing("chromium", "chromium is not installed (make system-deps installs it)")
    other = hostile.tmux.new_window(["sh", "-c", "echo other; exec sleep 3600"])
    with httpx.Client(base_url=hostile.daemon.web_base()) as web:
        web.get(hostile.daemon.web_url())
        wait_until(
            lambda: len(web.get("/api/directory").json()["panes"]) == 3,
            timeout=30,
            what="both panes listed",
        )
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium")),
            headless=True,
            args=ARGS,
        )
        page = browser.new_context().new_page()
        page.goto(hostile.daemon.web_url())
        expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
        expect(page.locator(f'#panes li[data-pane="{other}"] .summary')).to_have_text("other")
        page.evaluate(
            """() => { for (const li of document.querySelectorAll("#panes > li")) {
                li.dataset.mark = "kept"; } }"""
        )
        hostile.tmux.send_text(other, "a new line")
        hostile.tmux.keys(other, "Enter")
        changed = page.locator(f'#panes li[data-pane="{other}"]')
        expect(changed.locator(".summary")).to_have_text("a new line", timeout=WAIT_MS)
        assert changed.get_attribute("data-mark") is None  # this row was drawn anew
        kept = page.locator(f'#panes li[data-pane="{hostile.pane}"]')
        assert kept.get_attribute("data-mark") == "kept"  # the others were left alone
        expect(kept.locator(".title")).to_have_text(TITLE)
        browser.close()
