"""Restore benchmark: bringing back 20 lost sessions against 20 sequential launches.

One real daemon on a private tmux server, with a structured Claude Code launcher whose argv
is a stand-in agent (a sleeping shell: the daemon's own work is what is measured, not a
harness's start-up). Each round launches 20 connected agents one after another through
``POST /api/launch`` (timed: the peer), kills the tmux server, and times one ``POST
/api/restore`` until all 20 sessions are back, each rejoining its grant. Printed: p50 of each
and the ratio (target <= 1.0: restore runs its resumes concurrently).

Run: ``.venv/bin/python -m bench.bench_restore``.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.daemon import RunningDaemon, running_daemon
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until

SESSIONS = int(os.environ.get("OPENBUS_BENCH_SESSIONS", "20"))
ROUNDS = int(os.environ.get("OPENBUS_BENCH_ROUNDS", "3"))
TARGET = 1.0
AGENT = ["/bin/sh", "-c", "exec sleep 600", "agent"]


def _post(daemon: RunningDaemon, path: str, body: dict[str, Any]) -> Any:
    with daemon.human(timeout=120) as client:
        response = client.post(path, json=body)
    if response.status_code >= 300:
        raise RuntimeError(f"{path}: {response.status_code} {response.text}")
    return response.json()


def main() -> None:
    launches: list[float] = []
    restores: list[float] = []
    with tempfile.TemporaryDirectory(prefix="openbus-bench-restore-") as tmp:
        root = Path(os.environ.get("OPENBUS_BENCH_DIR") or tmp)
        with tmux_server(root / "tmux") as tmux:
            extra = {
                "tmux": {"socket": str(tmux.socket)},
                "launchers.agent": {"harness": "claude", "argv": AGENT},
                # an empty history: the host's own transcripts are not what is measured
                "history": {"claude_config_dirs": [str(root)], "codex_homes": [str(root)]},
            }
            (root / "d").mkdir()
            with running_daemon(root / "d", extra) as daemon:
                for _ in range(ROUNDS):
                    started = time.monotonic()
                    for _ in range(SESSIONS):
                        _post(
                            daemon,
                            "/api/launch",
                            {"launcher": "agent", "preset": "observe", "cwd": str(root)},
                        )
                    launches.append(time.monotonic() - started)
                    tmux.run("kill-server", check=False)
                    started = time.monotonic()
                    done = _post(daemon, "/api/restore", {"dry_run": False})["restored"]
                    restores.append(time.monotonic() - started)
                    ok = sum(1 for r in done if r["ok"])
                    if ok != SESSIONS:
                        raise RuntimeError(f"restored {ok} of {SESSIONS}: {done}")
                    # end the restored agents while the server stays up: exited, not lost
                    tmux.run("new-session", "-d", "-s", "keep", "sleep 3600")
                    tmux.run("kill-session", "-t", "openbus")
                    pids = [int(r["pid"]) for r in done]
                    wait_until(
                        lambda pids=pids: not any(Path(f"/proc/{p}").exists() for p in pids),
                        timeout=30,
                        what="the restored agents to end",
                    )
                    _post(daemon, "/api/restore", {"dry_run": True})  # its sweep sees them end
    ours, peer = statistics.median(restores), statistics.median(launches)
    print(f"restore of {SESSIONS} sessions: p50 {ours:.2f}s")
    print(f"{SESSIONS} sequential launches (peer): p50 {peer:.2f}s")
    verdict = "ok" if ours / peer <= TARGET else "over target"
    print(f"ratio {ours / peer:.2f} (target <= {TARGET}): {verdict}")


if __name__ == "__main__":
    main()
