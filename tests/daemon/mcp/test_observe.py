"""The Observe tools over the real daemon, the mcp SDK's client and a real tmux server."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.daemon.mcp.conftest import Fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.mcp_results import tool_data
from tests.support.wait import wait_until

SECRET = "AKIAIOSFODNN7EXAMPLE"


def read_pane(fleet: Fleet, token: str, **args: str) -> Any:
    async def go() -> Any:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            return tool_data(await session.call_tool("read_pane", args))

    return asyncio.run(go())


def test_read_pane_returns_the_masked_screen_and_refuses_a_stale_incarnation(
    fleet: Fleet,
) -> None:
    printer = ["/bin/sh", "-c", f"echo 'deploy with {SECRET} today'; echo first-42; exec sleep 600"]
    pane = fleet.tmux.new_window(printer)
    launched = fleet.launch("fakeclaude", "observe")
    token = fleet.token_of(launched["pid"])

    def shown(marker: str, not_of: str | None = None) -> Any:
        data = read_pane(fleet, token, pane=pane)
        result = data.get("result", {})
        fresh = not_of is None or result.get("incarnation") != not_of
        return result if marker in (result.get("screen") or "") and fresh else None

    first = wait_until(lambda: shown("first-42"), timeout=15, what="the pane's screen")
    assert SECRET not in first["screen"] and "[masked AWS Access Key]" in first["screen"]
    assert first["masked"] == ["AWS Access Key"] and first["screen_truncated"] is False
    old = first["incarnation"]
    assert read_pane(fleet, token, pane=pane, incarnation=old)["result"]["screen"]

    # the pane id now runs another process: the old incarnation must not read it
    fleet.tmux.run("respawn-pane", "-k", "-t", pane, "sh", "-c", "echo second-77; exec sleep 600")
    wait_until(lambda: shown("second-77", not_of=old), timeout=15, what="the new incarnation")
    stale = read_pane(fleet, token, pane=pane, incarnation=old)
    assert stale["error"] == "conflict" and stale["field"] == "incarnation"
    assert "second-77" not in str(stale)
    refused = [
        r
        for r in fleet.audit()
        if r["action"] == "directory.pane" and r["outcome"] not in ("ok", "queued")
    ]
    assert refused and refused[-1]["target"] == pane
