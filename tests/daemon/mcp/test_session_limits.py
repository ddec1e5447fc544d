"""One token cannot hold unbounded MCP sessions: an agent keeps at most its cap (opening one
more ends its oldest), turning it Off ends them all, and /healthz shows the counts."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AsyncExitStack
from typing import Any

from mcp.client.session import ClientSession

from openbus.daemon.mcp.endpoint import MAX_SESSIONS_PER_AGENT
from tests.daemon.mcp.conftest import Fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.wait import async_wait_until

OPENED = MAX_SESSIONS_PER_AGENT + 4


def mcp_health(fleet: Fleet) -> dict[str, Any]:
    with fleet.daemon.human() as client:
        section: dict[str, Any] = client.get("/healthz").json()["mcp"]
    return section


async def answers(session: ClientSession) -> bool:
    """Whether the daemon still serves this session (an ended one fails or errors)."""
    try:
        result = await asyncio.wait_for(session.list_tools(), 5)
    except Exception:  # an ended session fails in the client, whichever way
        return False
    return result is not None


def test_one_token_keeps_at_most_its_cap_of_sessions_and_turning_it_off_ends_them(
    fleet: Fleet,
) -> None:
    launched = fleet.launch("fakeclaude", "observe")
    token = fleet.token_of(launched["pid"])
    bystander = fleet.launch("fakeclaude", "observe")
    other_token = fleet.token_of(bystander["pid"])

    async def go() -> None:
        async with AsyncExitStack() as stack:
            other = await stack.enter_async_context(mcp_session(fleet, other_token))
            await other.initialize()
            sessions = []
            for _ in range(OPENED):  # the attack: keep opening sessions with one token
                session = await stack.enter_async_context(mcp_session(fleet, token))
                await session.initialize()
                sessions.append(session)
            health = mcp_health(fleet)
            assert health["sessions"] == MAX_SESSIONS_PER_AGENT + 1  # the cap, and the bystander
            assert health["most_sessions_of_one_agent"] == MAX_SESSIONS_PER_AGENT
            assert health["agents_with_sessions"] == 2
            assert health["evicted"] == OPENED - MAX_SESSIONS_PER_AGENT
            assert health["idle_seconds"] <= 15 * 60
            kept = [await answers(s) for s in sessions]
            assert kept == [False] * (OPENED - MAX_SESSIONS_PER_AGENT) + [True] * (
                MAX_SESSIONS_PER_AGENT
            )  # the oldest were ended, the newest serve

            with fleet.daemon.human() as client:
                off = {"pane": launched["pane"], "preset": "off"}
                assert client.put("/api/connect", json=off).status_code == 200
            await async_wait_until(
                lambda: _sessions_are(fleet, 1), timeout=10, what="the Off agent's sessions to end"
            )
            assert not any([await answers(s) for s in sessions])
            assert await answers(other)  # the other agent's session is untouched
            with contextlib.suppress(Exception):  # ended sessions may fail on the way out
                await stack.aclose()

    asyncio.run(go())


async def _sessions_are(fleet: Fleet, count: int) -> bool:
    return bool(mcp_health(fleet)["sessions"] == count)
