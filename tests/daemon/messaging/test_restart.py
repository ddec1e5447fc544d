"""At most once across a daemon restart, with the real daemon (gunicorn subprocess), a real
tmux server and the fake agent TUI in the recipient's pane: a message is delivered, the daemon
is killed with SIGKILL and started again on the same state directory, and the sender retries
the same message id over MCP: refused, and the recipient's pane shows the text once."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import SLEEPER, Fleet, read_token
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.daemon import start_daemon
from tests.support.mcp_results import tool_data
from tests.support.tmux import tmux_server
from tests.support.wait import wait_until

FAKE_AGENT = Path(__file__).parent / "fake_agent.py"


@dataclass
class Box:
    fleet: Fleet
    extra: dict[str, Any]  # the config sections, for a restart on the same state directory


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    script = tmp_path / "agent" / "bin" / "claude"  # named so the directory sees Claude Code
    script.parent.mkdir(parents=True)
    shutil.copy(FAKE_AGENT, script)
    control = tmp_path / "agent" / "control"
    control.mkdir()
    with tmux_server(tmp_path / "tmux") as tmux:
        extra = {
            "tmux": {"socket": str(tmux.socket)},
            "history": {"claude_config_dirs": [], "codex_homes": []},
            "launchers.sleeper": {"harness": "claude", "argv": SLEEPER},
            "launchers.tui": {
                "harness": "claude",
                "argv": [sys.executable, str(script), str(control)],
            },
        }
        made = Fleet(start_daemon(tmp_path, extra), tmux, project)
        try:
            yield Box(made, extra)
        finally:
            if made.daemon.process.poll() is None:
                made.daemon.stop()
            if made.daemon.process.poll() is None:
                os.killpg(made.daemon.process.pid, signal.SIGKILL)


def entry_of(fleet: Fleet, pane: str, *, idle: bool = False) -> dict[str, Any]:
    def find() -> Any:
        with fleet.daemon.human() as client:
            panes = client.get("/api/directory").json()["panes"]
        found = next((p for p in panes if p["pane"] == pane), None)
        if found and idle and not (found["state"] == "idle" and found["composer_empty"]):
            return None
        return found

    entry: dict[str, Any] = wait_until(find, timeout=20, what=f"{pane} in the directory")
    return entry


def send(fleet: Fleet, token: str, args: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            return await session.call_tool("send_message", args)

    return asyncio.run(go())


def outcomes(fleet: Fleet, message_id: str) -> list[str]:
    return [r["outcome"] for r in fleet.audit() if r["message_id"] == message_id]


def test_a_retried_id_is_refused_after_kill_9_and_restart_and_nothing_is_typed_twice(
    box: Box, tmp_path: Path
) -> None:
    fleet = box.fleet
    sender = fleet.launch("sleeper", "collaborate")
    waiting = fleet.launch("sleeper", "collaborate")  # never idle: its message stays queued
    recipient = fleet.launch("tui", "collaborate")
    token = wait_until(lambda: read_token(sender["pid"]), timeout=10, what="the sender's token")
    entry = entry_of(fleet, recipient["pane"], idle=True)
    text = "rebase onto main, once only"
    args = {
        "target": recipient["pane"],
        "incarnation": entry["incarnation"],
        "text": text,
        "message_id": "once-1",
    }
    assert tool_data(send(fleet, token, args))["result"]["outcome"] == "queued"
    with fleet.daemon.human() as client:
        [card] = client.get("/api/cards").json()["cards"]
        assert client.post(f"/api/cards/{card['id']}", json={"decision": "approve"}).is_success
    wait_until(
        lambda: outcomes(fleet, "once-1") == ["queued", "delivered"],
        timeout=20,
        what="the delivered record",
    )
    stuck = {
        "target": waiting["pane"],
        "incarnation": entry_of(fleet, waiting["pane"])["incarnation"],
        "text": "for the pane that is never idle",
        "message_id": "open-1",
    }
    sent = tool_data(send(fleet, token, stuck))
    assert sent.get("result", {}).get("outcome") == "queued", sent
    with fleet.daemon.human() as client:
        open_card = client.get("/api/cards").json()["cards"][0]["id"]

    fleet.daemon.stop(signal.SIGKILL)
    os.killpg(fleet.daemon.process.pid, signal.SIGKILL)  # the worker too, as a crash would
    fleet.daemon = start_daemon(tmp_path, box.extra)

    again = send(fleet, token, args)
    assert again.is_error and tool_data(again)["error"] == "conflict"
    assert "already used" in tool_data(again)["message"]
    assert outcomes(fleet, "once-1") == ["queued", "delivered"]  # the refusal names no id
    received = (tmp_path / "agent" / "control" / "received").read_text().splitlines()
    assert [json.loads(line).endswith(text) for line in received] == [True]
    assert fleet.tmux.capture(recipient["pane"]).count(text) == 1
    # the message that was still waiting when the daemon died: its outcome is recorded once,
    # unconfirmed, its id is refused too, and its orphaned card is cancelled
    assert outcomes(fleet, "open-1") == ["queued", "unconfirmed"]
    assert tool_data(send(fleet, token, stuck))["error"] == "conflict"
    with fleet.daemon.human() as client:
        assert client.get("/api/cards").json()["cards"] == []
    resolved = [r for r in fleet.audit() if r["action"] == "cards.resolve"]
    assert [(r["target"], r["outcome"]) for r in resolved] == [(open_card, "cancelled")]
