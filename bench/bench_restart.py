"""Restart-to-connect against the harness's own quit-and-resume done by hand, in the same run.

For each harness (Claude Code and Codex at their pins in use), one real daemon on a private
tmux server launches the real TUI against the stub model with preset Off, and the agent holds
one turn, so its session has a transcript. Ours: the human asks to connect it (the card
"Restart this agent to connect it?") and approves; timed from the approval until the restart
is closed as connected (``restart.done``) with the agent back at its idle composer. By hand,
on a second agent launched the same way: the human types the harness's exit command, waits
for the process to end, and respawns the pane with the harness's resume command for that
session; timed from typing the exit command (with the pause before Enter that Codex needs
so that a fast Enter is not taken as pasted text; ours pauses too) until the idle composer is
back. Printed: p50 of each and
the ratio (target <= 1.2).

Run: ``.venv/bin/python -m bench.bench_restart`` (or ``make bench``); needs ``make harnesses``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from openbus.daemon.core.restart import EXIT_COMMANDS  # noqa: E402
from openbus.daemon.launch_plan import RESUME_FORMS  # noqa: E402
from tests.daemon.test_restart_real_harnesses import (  # noqa: E402
    Agent,
    audit,
    cli_json,
    converse,
    daemon_health,
    directory_entry,
    session_of,
)
from tests.support.daemon import RunningDaemon, running_daemon  # noqa: E402
from tests.support.harnesses import (  # noqa: E402
    PASTE_BURST_SETTLE_SECONDS,
    ClaudeHarness,
    CodexHarness,
    make_claude,
    make_codex,
    pin,
    type_prompt,
)
from tests.support.stub_model import StubModel, running_stub_model  # noqa: E402
from tests.support.tmux import TmuxServer, tmux_server  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

ROUNDS = int(os.environ.get("OPENBUS_BENCH_ROUNDS", "3"))
TARGET = 1.2


def _post(daemon: RunningDaemon, method: str, path: str, body: dict[str, Any]) -> Any:
    with daemon.human(timeout=120) as client:
        response = client.request(method, path, json=body)
    if response.status_code >= 300:
        raise RuntimeError(f"{path}: {response.status_code} {response.text}")
    return response.json()


def _settled_agent(
    daemon: RunningDaemon, agent: Agent, stub: StubModel, project: Path, n: int
) -> tuple[str, str]:
    """A launched-Off agent that held one turn, idle in the directory: (pane, session id)."""
    launched = cli_json(daemon, "launch", "agent", "--preset", "off", "--cwd", str(project))
    pane = str(launched["pane"])
    word = f"TURN-{n}-{pane[1:]}"
    converse(agent, stub, pane, word)
    session_id = session_of(agent, daemon, launched)
    wait_until(
        lambda: f"ANSWER-{word}" in agent.transcript(session_id),
        timeout=30,
        what="the turn in the transcript",
    )
    wait_until(
        lambda: (directory_entry(daemon, pane) or {}).get("composer_empty") is True,
        timeout=30,
        what="the idle pane in the directory",
    )
    return pane, session_id


def ours(daemon: RunningDaemon, agent: Agent, stub: StubModel, project: Path, n: int) -> float:
    pane, _ = _settled_agent(daemon, agent, stub, project, n)
    before = daemon_health(daemon)["restarts"]["done"]
    _post(daemon, "PUT", "/api/connect", {"pane": pane, "preset": "observe"})
    [card] = [c for c in cli_json(daemon, "cards")["cards"] if c["kind"] == "restart_to_connect"]
    started = time.monotonic()
    _post(daemon, "POST", f"/api/cards/{card['id']}", {"decision": "approve"})

    wait_until(
        lambda: daemon_health(daemon)["restarts"]["done"] > before,
        timeout=180,
        interval=0.05,
        what="the restart to finish",
    )
    agent.ready(pane)
    elapsed = time.monotonic() - started
    [closed] = [r for r in audit(daemon) if r["action"] == "restart.done"][-1:]
    if closed["details"].get("outcome") != "connected":
        raise RuntimeError(f"restart ended {closed['details']}")
    agent.tmux.run("kill-pane", "-t", pane)
    return elapsed


def by_hand(
    daemon: RunningDaemon,
    agent: Agent,
    stub: StubModel,
    project: Path,
    harness: ClaudeHarness | CodexHarness,
    n: int,
) -> float:
    pane, session_id = _settled_agent(daemon, agent, stub, project, n)
    tmux: TmuxServer = agent.tmux
    tmux.run("set-option", "-p", "-t", pane, "remain-on-exit", "on")
    started = time.monotonic()
    type_prompt(tmux, pane, EXIT_COMMANDS[agent.kind])
    time.sleep(PASTE_BURST_SETTLE_SECONDS)  # as a person would: Codex takes a fast Enter as text
    tmux.keys(pane, "Enter")
    wait_until(lambda: tmux.pane_dead(pane), timeout=60, interval=0.05, what="the agent to quit")
    resume = [str(harness.binary), *RESUME_FORMS[agent.kind]]
    argv = [word.replace("{session_id}", session_id) for word in resume]
    env = [f"-e{k}={v}" for k, v in harness.env().items()]
    tmux.run("respawn-pane", "-k", "-t", pane, "-c", str(project), *env, *argv)
    agent.ready(pane)
    elapsed = time.monotonic() - started
    tmux.run("kill-pane", "-t", pane)
    return elapsed


def run_one(kind: str) -> None:
    found = pin(kind)
    if found.binary is None:
        print(f"{found.id}: not installed (make harnesses); skipped")
        return
    with tempfile.TemporaryDirectory(prefix="obrestart-", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        subprocess.run(["git", "init", "-q", str(project)], check=True)
        with running_stub_model() as stub, tmux_server(root / "tmux") as tmux:
            if kind == "claude":
                harness: ClaudeHarness | CodexHarness = make_claude(
                    root / "h", stub, project, found.version
                )
            else:
                harness = make_codex(root / "h", stub, project, found.version)
            agent = Agent(harness, tmux)
            extra = {"tmux": {"socket": str(tmux.socket)}, "launchers.agent": agent.launcher}
            (root / "d").mkdir()
            with running_daemon(root / "d", extra) as daemon:
                mine, hand = [], []
                for n in range(ROUNDS):
                    mine.append(ours(daemon, agent, stub, project, n))
                    hand.append(by_hand(daemon, agent, stub, project, harness, n))
    a, b = statistics.median(mine), statistics.median(hand)
    verdict = "met" if a / b <= TARGET else "missed"
    print(
        f"{found.id}: restart-to-connect p50 {a:.2f} s, quit-and-resume by hand p50 {b:.2f} s, "
        f"ratio {a / b:.2f} (target <= {TARGET}: {verdict}); rounds {ROUNDS}; "
        f"ours {[round(x, 2) for x in mine]}, by hand {[round(x, 2) for x in hand]}"
    )


def main() -> None:
    for kind in ("claude", "codex"):
        run_one(kind)


if __name__ == "__main__":
    main()
