"""Web page benchmarks with 200 panes, in a real headless Chromium against the real daemon.

Starts a private tmux server with 200 panes (10 sessions x 20 windows of an idle ``sleep``)
and the real daemon following it, and logs Chromium in on local mode's web address (the
printed secret, exchanged for the cookie). Two measurements, each against its floor in the
same run, rounds of ours and of the floor interleaved so a shared host's load falls on both:

**Page load to the first fleet render** (target: ours <= 2x the floor).

* ours: navigation start to the fleet list holding every pane (``performance.now()`` noted by
  the bench's own observer, an init script, when ``#panes`` first holds all 200), p50 of
  ``RUNS`` loads of ``/`` in one browser context (its script and style sheet cached, as on a
  reload); printed beside it, the frame after that (``requestAnimationFrame`` then a task:
  style, layout and paint done), where the time went (HTML received, ``DOMContentLoaded``:
  the page's scripts have run), and cold loads (a new context each, nothing cached).
* the floor the ratio uses: Chromium navigating to ``GET /api/directory`` itself, navigation
  start to its load event (the same data, fetched as a document by the same browser with the
  same cookie, parsed and laid out as text): a page load cannot be quicker than a navigation,
  and this one fetches exactly what the page draws and nothing else. Printed beside it:
  ``fetch("/api/directory")`` plus ``.json()`` timed inside a page of the same origin (the
  round trip alone, without a navigation's fixed cost), and the same GET from a plain Python
  HTTP client (httpx) with the same cookie, the figure the earlier runs compared against.

**A state change to the page's redraw** (target: ours <= 1.3x the floor).

With the page open, a line is typed into one pane (``tmux send-keys``: the terminal echoes it
under the idle ``sleep``, so the pane's screen changes, tmux announces its output to the
daemon's control client, and the pane's row shows the screen's last line as its summary).
Time from just before the tmux command:

* ours: until the page's DOM shows the new line in that pane's row (a MutationObserver the
  bench installs notes ``performance.timeOrigin + performance.now()``);
* the floor: until the daemon's change feed, ``GET /api/follow``, delivers the frame carrying
  the new line to that same page: the bench's init script tees the page's own follow stream
  and notes when a chunk with the line first reaches the page's main thread (its branch is
  read first, so the page's own parsing is not in it). That stream is the directory's own
  report of the change to a human, on the very connection the page waits on; what the page
  adds beyond it is its own cost (parsing the frame, redrawing). Polling ``/api/directory``
  instead would add a poll interval of its own; a reader of its own (another window, or a
  plain client) would be a second follower, whose frame the daemon serializes before or
  after the page's, so either would be first by some milliseconds for that reason alone.

``ROUNDS`` lines, each to another pane, p50 of each.
Run: ``.venv/bin/python -m bench.bench_web`` (or ``make bench``).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright import sync_api

from bench.bench_directory import Tmux
from tests.support.daemon import RunningDaemon, start_daemon
from tests.support.wait import wait_until

PANES = 200
SESSIONS = 10
RUNS = 15
COLD_RUNS = 5
ROUNDS = 15
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
# The bench's own probe, not the page's: the moment the fleet list first holds every pane,
# and the end of the frame after it; on the floor's document, the end of the frame after load.
DRAWN = """
const painted = () => requestAnimationFrame(() => setTimeout(() => {
  window.__painted = performance.now();
}));
new MutationObserver((changes, observer) => {
  const list = document.getElementById("panes");
  if (list && list.children.length >= PANES) {
    window.__drawn = performance.now();
    observer.disconnect();
    painted();
  }
}).observe(document, { childList: true, subtree: true });
if (location.pathname === "/api/directory") addEventListener("load", painted);
""".replace("PANES", str(PANES))
TIMELINE = """() => {
  const n = performance.getEntriesByType("navigation")[0];
  return [n.responseEnd, n.domContentLoadedEventStart, n.loadEventEnd];
}"""
FETCH = """async () => {
  const started = performance.now();
  const answer = await fetch("/api/directory", { credentials: "same-origin" });
  await answer.json();
  return performance.now() - started;
}"""
# Note when the row of ``pane`` first shows ``text`` as its summary (epoch ms).
WATCH = """([pane, text]) => {
  window.__shown = null;
  const seen = () => {
    const summary = document.querySelector(`#panes li[data-pane="${pane}"] .summary`);
    if (summary && summary.textContent === text) {
      window.__shown = performance.timeOrigin + performance.now();
      return true;
    }
    return false;
  };
  if (seen()) return;
  const observer = new MutationObserver(() => {
    if (seen()) observer.disconnect();
  });
  observer.observe(document.getElementById("panes"), {
    childList: true, subtree: true, characterData: true,
  });
}"""


# The bench's tee of the page's own change feed: notes when ``window.__want`` first arrives.
FOLLOW = """
window.__want = null;
window.__seen = null;
const plainFetch = window.fetch;
const pump = (stream, text, tail) => stream.read().then(({ value, done }) => {
  if (done) return;
  const now = performance.timeOrigin + performance.now();
  window.__open = true;
  const chunk = tail + text.decode(value, { stream: true });
  if (window.__want && window.__seen === null && chunk.includes(window.__want)) {
    window.__seen = now;
  }
  return pump(stream, text, chunk.slice(-200));
});
window.fetch = async (...args) => {
  const answer = await plainFetch(...args);
  if (!String(args[0]).startsWith("/api/follow") || !answer.body) return answer;
  const [ours, page] = answer.body.tee();  // the first branch is read first
  pump(ours.getReader(), new TextDecoder(), "");
  const { status, statusText, headers } = answer;
  return new Response(page, { status, statusText, headers });
};
"""


def p50(values: list[float]) -> float:
    return statistics.median(values)


def fleet(tmux: Tmux) -> None:
    per_session = PANES // SESSIONS
    for s in range(SESSIONS):
        tmux.run("new-session", "-d", "-s", f"s{s}", "-x", "120", "-y", "40", "sleep 3600")
        for _ in range(1, per_session):
            tmux.run("new-window", "-d", "-t", f"s{s}:", "sleep 3600")


def loads(daemon: RunningDaemon, context: Any, cookies: list[Any]) -> dict[str, list[Any]]:
    """Page loads of ``/`` and the floor's navigations and fetches, interleaved."""
    out: dict[str, list[Any]] = {"ours": [], "nav": [], "fetch": [], "cold": []}
    page = context.new_page()
    floor = context.new_page()
    for _ in range(RUNS):
        page.bring_to_front()  # a tab in the background is given less of the CPU
        page.goto(daemon.web_base() + "/", wait_until="commit")
        wait_until(lambda: page.evaluate("window.__painted"), timeout=30, what="the fleet")
        drawn, painted = page.evaluate("[window.__drawn, window.__painted]")
        out["ours"].append((drawn, painted, *page.evaluate(TIMELINE)))
        floor.bring_to_front()
        floor.goto(daemon.web_base() + "/api/directory", wait_until="load")
        wait_until(lambda: floor.evaluate("window.__painted"), timeout=30, what="the floor")
        out["nav"].append((floor.evaluate("window.__painted"), *floor.evaluate(TIMELINE)))
        out["fetch"].append(floor.evaluate(FETCH))
    page.close()
    floor.close()
    browser = context.browser
    for _ in range(COLD_RUNS):
        cold = browser.new_context(viewport={"width": 1280, "height": 800})
        cold.add_cookies(cookies)
        cold.add_init_script(DRAWN)
        fresh = cold.new_page()
        fresh.goto(daemon.web_base() + "/", wait_until="commit")
        out["cold"].append(
            wait_until(lambda p=fresh: p.evaluate("window.__drawn"), timeout=30, what="the fleet")
        )
        cold.close()
    return out


def redraws(tmux: Tmux, page: Any) -> list[Any]:
    """(page, feed) seconds from a line typed into a pane to each showing it, per round."""
    listed = page.evaluate("[...document.querySelectorAll('#panes > li')].map(r => r.dataset.pane)")
    out = []
    for n in range(ROUNDS):
        pane = listed[(n * 37) % len(listed)]
        line = f"changed-{n}-{time.monotonic_ns() % 1_000_000}"
        page.evaluate(WATCH, [pane, line])
        page.evaluate("(line) => { window.__want = line; window.__seen = null; }", line)
        started = time.time()
        tmux.run("send-keys", "-t", pane, "-l", line, ";", "send-keys", "-t", pane, "Enter")
        shown = wait_until(lambda: page.evaluate("window.__shown"), timeout=30, what="the redraw")
        seen = wait_until(lambda: page.evaluate("window.__seen"), timeout=30, what="the feed")
        out.append((shown / 1000 - started, seen / 1000 - started))
    print("rounds (page, feed) ms:", " ".join(f"{a * 1000:.0f}/{b * 1000:.0f}" for a, b in out))
    return out


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="obbench-web-"))
    tmux = Tmux(root)
    try:
        fleet(tmux)
        (root / "d").mkdir()
        daemon = start_daemon(root / "d", {"tmux": {"socket": str(tmux.socket)}})
        try:
            with httpx.Client(base_url=daemon.web_base(), timeout=30) as web:
                web.get(daemon.web_url())
                wait_until(
                    lambda: len(web.get("/api/directory").json()["panes"]) == PANES,
                    timeout=60,
                    what="all panes in the directory",
                )
                fetches = []
                for _ in range(RUNS):
                    started = time.perf_counter()
                    web.get("/api/directory").raise_for_status()
                    fetches.append((time.perf_counter() - started) * 1000)
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                context.add_init_script(DRAWN)
                login = context.new_page()
                login.goto(daemon.web_url())  # the cookie; later loads reuse it
                login.close()
                measured = loads(daemon, context, context.cookies())
                context.add_init_script(FOLLOW)  # for the page opened next
                page = context.new_page()
                page.goto(daemon.web_base() + "/")
                wait_until(lambda: page.evaluate("window.__open"), timeout=30, what="the feed")
                rounds = redraws(tmux, page)
                browser.close()
        finally:
            daemon.stop()
    finally:
        subprocess.run(
            [tmux.binary, "-S", str(tmux.socket), "kill-server"], capture_output=True, check=False
        )
        shutil.rmtree(root, ignore_errors=True)
    report(measured, fetches, rounds)


def report(
    measured: dict[str, list[Any]], fetches: list[float], rounds: list[tuple[float, float]]
) -> None:
    ours = [row[0] for row in measured["ours"]]
    column = list(zip(*measured["ours"], strict=True))
    drawn, painted, html, scripts = (p50(list(c)) for c in column[:4])
    nav_load = p50([row[3] for row in measured["nav"]])
    nav_painted = p50([row[0] for row in measured["nav"]])
    in_page = p50(measured["fetch"])
    httpx_floor = p50(fetches)
    print(f"panes: {PANES}, {RUNS} loads each (interleaved), {COLD_RUNS} cold loads")
    print(
        f"page load: HTML received {html:.0f} ms, scripts run (DOMContentLoaded) {scripts:.0f}, "
        f"fleet in the DOM {drawn:.0f}, painted {painted:.0f}; cold (nothing cached) "
        f"{p50(measured['cold']):.0f} ms to the DOM"
    )
    print(
        f"floor: Chromium navigating to /api/directory, to its load event {nav_load:.0f} ms "
        f"(painted {nav_painted:.0f}); fetch() in a page of the same origin {in_page:.1f} ms; "
        f"httpx GET {httpx_floor:.1f} ms"
    )
    print(
        f"page load to first fleet render p50 {p50(ours):.0f} ms vs navigating to "
        f"/api/directory {nav_load:.0f} ms (ratio {p50(ours) / nav_load:.2f}; target <= 2); "
        f"painted {painted:.0f} vs {nav_painted:.0f} ({painted / nav_painted:.2f}); "
        f"against fetch() {p50(ours) / in_page:.1f}, against httpx {p50(ours) / httpx_floor:.1f}"
    )
    page_ms = p50([r[0] * 1000 for r in rounds])
    feed_ms = p50([r[1] * 1000 for r in rounds])
    extra = p50([(r[0] - r[1]) * 1000 for r in rounds])
    print(
        f"state change to the page's redraw p50 {page_ms:.0f} ms vs the change feed "
        f"(/api/follow reaching the page) {feed_ms:.0f} ms (ratio {page_ms / feed_ms:.2f}; "
        f"target <= 1.3); the page's own share per round p50 {extra:.1f} ms; {len(rounds)} rounds"
    )


if __name__ == "__main__":
    main()
