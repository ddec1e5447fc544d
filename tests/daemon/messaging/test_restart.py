"""At most once across a daemon restart, with the real daemon (gunicorn subprocess), a real
tmux server and the fake agent TUI in the recipient's pane: a message is delivered, the daemon
is killed with SIGKILL and started again on the same state directory, and the sender retries
the same message id over MCP: refused, and the recipient's pane shows the text once."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.daemon.mcp.conftest import read_token
from tests.daemon.messaging.conftest import Box, approve_and_deliver, entry_of, outcomes, send
from tests.support.daemon import start_daemon
from tests.support.mcp_results import tool_data
from tests.support.wait import wait_until


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
    approve_and_deliver(fleet, "once-1")
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
