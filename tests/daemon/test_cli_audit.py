"""``openbus audit tail``: agents named as people read them, the trail itself under --json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.daemon.mcp.conftest import make_fleet
from tests.daemon.mcp.test_endpoint import mcp_session, run
from tests.support.wait import wait_until


def test_tail_names_an_agent_by_harness_and_pane_and_json_keeps_the_actor_as_recorded(
    tmp_path: Path,
) -> None:
    with make_fleet(tmp_path) as fleet:
        launched = fleet.launch("fakeclaude", "observe")
        token = fleet.token_of(launched["pid"])
        session_id = launched["connect"]["session_id"]
        actor = f"agent:claude:{session_id}"

        async def list_panes() -> None:
            async with mcp_session(fleet, token) as session:
                await session.initialize()
                await session.call_tool("list_panes", {})

        run(list_panes())
        tail = fleet.daemon.cli("audit", "tail", "-n", "200", check=True).stdout
        [line] = [
            row for row in tail.splitlines() if "  directory.list  " in row and "claude" in row
        ]
        assert f"claude {launched['pane']}" in line, tail
        assert actor not in line  # never by its session UUID
        as_json = json.loads(fleet.daemon.cli("audit", "tail", "-n", "200", "--json").stdout)
        assert actor in {r["actor"] for r in as_json["records"]}

        fleet.tmux.run("kill-pane", "-t", launched["pane"])

        def disconnected() -> bool:
            with fleet.daemon.human() as client:
                return client.get("/api/connections").json()["connections"] == []

        wait_until(disconnected, what="the agent to be disconnected when its pane closes")
        after = fleet.daemon.cli("audit", "tail", "-n", "200", check=True).stdout
        [line] = [
            row for row in after.splitlines() if "  directory.list  " in row and "claude" in row
        ]
        assert "claude (no longer connected)" in line and actor not in line, after
