"""Every MCP tool is a front end to one gate action: each call leaves exactly one record."""

from __future__ import annotations

import sqlite3
from typing import Any

from tests.daemon.mcp.conftest import Fleet
from tests.daemon.mcp.test_endpoint import mcp_session, run


def records(fleet: Fleet) -> list[tuple[int, str, str, str]]:
    db = sqlite3.connect(f"file:{fleet.daemon.state_dir / 'openbus.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT seq, actor, action, outcome FROM audit ORDER BY seq").fetchall()
    finally:
        db.close()


def test_every_listed_tool_goes_through_the_gate_and_leaves_one_record(fleet: Fleet) -> None:
    launched = fleet.launch("fakeclaude", "collaborate")
    token = fleet.token_of(launched["pid"])
    actor = launched["connect"]["actor"]

    async def walk() -> dict[str, tuple[list[tuple[int, str, str, str]], Any]]:
        seen: dict[str, tuple[list[tuple[int, str, str, str]], Any]] = {}
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            for tool in tools:
                before = records(fleet)[-1][0]
                # Empty arguments: valid for some tools, a field error for others; either
                # way the call must reach the gate (or be refused) with one record.
                result = await session.call_tool(tool.name, {})
                after = [r for r in records(fleet) if r[0] > before]
                seen[tool.name] = (after, result)
        return seen

    seen = run(walk())
    assert {"list_panes", "read_pane", "find_sessions", "get_session", "send_message"} <= set(seen)
    for name, (after, _result) in seen.items():
        mine = [r for r in after if r[1] == actor]
        assert len(mine) == 1, f"{name} left {len(mine)} records as the agent: {after}"
        assert mine[0][3] in {"ok", "refused"}, f"{name}: {mine[0]}"
