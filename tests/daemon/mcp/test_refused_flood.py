"""A connected agent whose calls are refused cannot flood the audit store: the first refusals
of a window are recorded, then it is rate-limited and the rest counted in one summary."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.mcp_results import tool_data
from tests.support.wait import wait_until

BURST = 5
WINDOW = 4.0
FLOOD = 60


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    limits = {"agent_refusal_burst": BURST, "agent_refusal_window_seconds": WINDOW}
    with make_fleet(tmp_path, {"audit": limits}) as made:
        yield made


def test_a_flood_of_refused_calls_is_recorded_up_to_the_burst_and_then_rate_limited(
    fleet: Fleet,
) -> None:
    flooder = fleet.launch("fakeclaude", "observe")
    bystander = fleet.launch("fakeclaude", "observe")
    flood_token = fleet.token_of(flooder["pid"])
    other_token = fleet.token_of(bystander["pid"])
    flood_actor, other_actor = flooder["connect"]["actor"], bystander["connect"]["actor"]
    message = {"target": bystander["pane"], "text": "hello", "message_id": "m1"}

    async def go() -> tuple[list[str], float, Any]:
        async with (
            mcp_session(fleet, flood_token) as flooding,
            mcp_session(fleet, other_token) as other,
        ):
            await flooding.initialize()
            await other.initialize()
            started = time.monotonic()
            codes = []
            for _ in range(FLOOD):  # an Observe token calling a Collaborate tool, again and again
                result = await flooding.call_tool("send_message", message)
                assert result.is_error
                codes.append(tool_data(result)["error"])
            elapsed = time.monotonic() - started
            return codes, elapsed, await other.call_tool("list_panes", {})

    codes, elapsed, unaffected = asyncio.run(go())
    assert codes[:BURST] == ["not_connected"] * BURST
    assert codes[BURST] == "rate_limited"
    assert not unaffected.is_error  # another agent's calls run as before
    windows = int(elapsed // WINDOW) + 1  # a slow flood may span more than one window

    def summaries() -> list[dict[str, Any]]:
        return [
            r
            for r in fleet.audit()
            if r["action"] == "refusals.suppressed" and r["target"] == flood_actor
        ]

    wait_until(summaries, timeout=WINDOW * 5, what="the flood's summary record")
    records = fleet.audit()
    own = [r for r in records if r["actor"] == flood_actor and r["outcome"] == "refused"]
    assert BURST <= len(own) <= BURST * windows
    assert codes.count("not_connected") == len(own)
    # complete in number: every refused call is its own record or counted in a summary
    assert len(own) + sum(s["details"]["count"] for s in summaries()) == FLOOD
    assert [r["outcome"] for r in records if r["actor"] == other_actor] == ["ok"]
    with fleet.daemon.human() as client:
        gate = client.get("/healthz").json()["gate"]
    assert gate["rate_limited"] == FLOOD - len(own)
