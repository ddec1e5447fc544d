"""On a hosted box each human's agents see that human's panes only (``core.pane_view``).

Two people signed in through the tunnel each launch an agent into the one agents' tmux
server; each agent lists and reads the fleet with its own token over the real MCP endpoint.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.hosted.conftest import HostedBox, needs_root, probe
from tests.hosted.test_history_after_restart import call_tool, token_of
from tests.support.wait import wait_until

pytestmark = [pytest.mark.root, needs_root]


def launch_through_tunnel(box: HostedBox, user: str) -> dict[str, Any]:
    body = json.dumps({"launcher": "fakeclaude", "preset": "observe", "cwd": "/tmp"})
    request = {"method": "POST", "path": "/api/launch", "user": user, "body": body}
    args = {"socket": str(box.daemon.socket_path), "key": str(box.credential)}
    statuses = probe(box.tunnel_user, "signed", {**args, "requests": [request]})
    assert statuses == [[201]], statuses
    with box.daemon.human() as desk:
        records = desk.get("/api/audit", params={"after": 0, "limit": 1000}).json()["records"]
    launched = [r for r in records if r["action"] == "launch" and r["actor"] == f"human:{user}"]
    assert len(launched) == 1, launched
    details: dict[str, Any] = launched[0]["details"]
    return details


def panes_seen(box: HostedBox, token: str) -> set[str]:
    data = call_tool(box, token, "list_panes", {})
    return {p["pane"] for p in data["result"]["panes"]}


def test_an_agent_of_one_human_lists_and_reads_only_that_humans_panes(box: HostedBox) -> None:
    alice, bob = box.accounts.user(), box.accounts.user()
    mine = launch_through_tunnel(box, alice)
    theirs = launch_through_tunnel(box, bob)
    token = token_of(int(mine["pid"]))

    seen = wait_until(
        lambda: panes_seen(box, token) or None, timeout=15, what="alice's pane in the directory"
    )
    assert seen == {mine["pane"]}
    assert call_tool(box, token, "read_pane", {"pane": mine["pane"]})["kind"] == "data"
    other = call_tool(box, token, "read_pane", {"pane": theirs["pane"]})
    assert other["error"] == "not_found" and other["field"] == "pane"

    # the desk (root, an operator of the box) still sees the whole fleet
    with box.daemon.human() as desk:
        every = {p["pane"] for p in desk.get("/api/directory").json()["panes"]}
    assert {mine["pane"], theirs["pane"]} <= every
    # and bob through the tunnel sees his own only
    statuses = probe(
        box.tunnel_user,
        "signed",
        {
            "socket": str(box.daemon.socket_path),
            "key": str(box.credential),
            "requests": [{"method": "GET", "path": f"/api/panes/{mine['pane']}", "user": bob}],
        },
    )
    assert statuses == [[404]]
