"""Web page benchmark: page load to the first fleet render with 200 panes, in a real Chromium.

Starts a private tmux server with 200 panes (10 sessions x 20 windows of an idle ``sleep``)
and the real daemon following it, logs a headless Chromium in on local mode's web address
(the printed secret, exchanged for the cookie) and measures in one run:

* ours: navigation start to the fleet drawn with every pane (``performance.now()`` noted by
  the bench's own observer when the page's list first holds all 200), p50 of ``RUNS`` loads;
* its floor: ``GET /api/directory`` alone over the same address (the data the page draws),
  p50 of ``RUNS`` fetches by a plain HTTP client with the same cookie.

Target: ours <= 2x the floor. Run: ``.venv/bin/python -m bench.bench_web`` (or ``make bench``).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from playwright import sync_api

from bench.bench_directory import Tmux
from tests.support.daemon import start_daemon
from tests.support.wait import wait_until

PANES = 200
SESSIONS = 10
RUNS = 15
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
# The bench's own probe, not the page's: the moment the fleet list first holds every pane.
DRAWN = """
new MutationObserver((changes, observer) => {
  const list = document.getElementById("panes");
  if (list && list.children.length >= PANES) {
    window.__drawn = performance.now();
    observer.disconnect();
  }
}).observe(document, { childList: true, subtree: true });
""".replace("PANES", str(PANES))


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="obbench-web-"))
    tmux = Tmux(root)
    try:
        per_session = PANES // SESSIONS
        for s in range(SESSIONS):
            tmux.run("new-session", "-d", "-s", f"s{s}", "-x", "120", "-y", "40", "sleep 3600")
            for _ in range(1, per_session):
                tmux.run("new-window", "-d", "-t", f"s{s}:", "sleep 3600")
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
            loads = []
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                context.add_init_script(DRAWN)
                page = context.new_page()
                page.goto(daemon.web_url())  # the cookie; later loads reuse it
                for _ in range(RUNS):
                    page.goto(daemon.web_base() + "/", wait_until="commit")
                    drawn = wait_until(
                        lambda: page.evaluate("window.__drawn"), timeout=30, what="the fleet"
                    )
                    loads.append(float(drawn))
                browser.close()
        finally:
            daemon.stop()
    finally:
        subprocess.run(
            [tmux.binary, "-S", str(tmux.socket), "kill-server"], capture_output=True, check=False
        )
        shutil.rmtree(root, ignore_errors=True)

    ours = statistics.median(loads)
    floor = statistics.median(fetches)
    print(f"panes: {PANES}, {RUNS} loads each")
    print(
        f"page load to first fleet render p50 {ours:.0f} ms vs GET /api/directory alone "
        f"{floor:.1f} ms (ratio {ours / floor:.1f}; target <= 2)"
    )


if __name__ == "__main__":
    main()
