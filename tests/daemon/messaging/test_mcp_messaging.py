"""The messaging tools over the daemon's real MCP endpoint and the human API over its socket.

Agents are structured launchers running ``sleep`` (``tests.daemon.mcp.conftest``): they hold
real tokens and principals, and their panes never look idle, so messages to them stay queued.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.mcp.conftest import Fleet, make_fleet
from tests.daemon.mcp.test_endpoint import mcp_session
from tests.support.mcp_results import tool_data
from tests.support.wait import wait_until


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    # these floods measure messaging's own refusals, so the gate's rate limit of an agent
    # refused this often (tests/daemon/mcp/test_refused_flood.py) is set above them
    with make_fleet(tmp_path, {"audit": {"agent_refusal_burst": 100_000}}) as made:
        yield made


def worker_rss_kib(fleet: Fleet) -> int:
    """Resident memory of the daemon's one gunicorn worker (the master's child)."""
    master = fleet.daemon.process.pid
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(master):
            return int(fields["VmRSS"].split()[0])
    raise AssertionError("no worker process found")


def in_directory(fleet: Fleet, pane: str) -> dict[str, Any]:
    def find() -> Any:
        with fleet.daemon.human() as client:
            panes = client.get("/api/directory").json()["panes"]
        return next((p for p in panes if p["pane"] == pane), None)

    found: dict[str, Any] = wait_until(find, timeout=15, what=f"{pane} in the directory")
    return found


def test_send_message_over_mcp_queues_audits_and_answers_status(fleet: Fleet) -> None:
    a = fleet.launch("fakeclaude", "collaborate")
    b = fleet.launch("fakeclaude", "collaborate")
    watcher = fleet.launch("fakeclaude", "observe")
    entry = in_directory(fleet, b["pane"])
    token_a = fleet.token_of(a["pid"])
    token_w = fleet.token_of(watcher["pid"])

    async def go() -> tuple[set[str], Any, Any, Any, set[str]]:
        async with mcp_session(fleet, token_a) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            sent = await session.call_tool(
                "send_message",
                {
                    "target": b["pane"],
                    "incarnation": entry["incarnation"],
                    "text": "hello from A\nsecond line",
                    "message_id": "mcp-1",
                },
            )
            again = await session.call_tool(
                "send_message",
                {
                    "target": b["pane"],
                    "incarnation": entry["incarnation"],
                    "text": "hello from A",
                    "message_id": "mcp-1",
                },
            )
            status = await session.call_tool(
                "message_status", {"message_id": "mcp-1", "wait_seconds": 0.2}
            )
        async with mcp_session(fleet, token_w) as session:
            await session.initialize()
            observer_tools = {t.name for t in (await session.list_tools()).tools}
        return tools, sent, again, status, observer_tools

    tools, sent, again, status, observer_tools = asyncio.run(go())
    assert {"send_message", "message_status"} <= tools
    assert "send_message" not in observer_tools and "message_status" not in observer_tools
    assert not sent.is_error
    body = tool_data(sent)
    assert body["source"] == "openbus messaging" and body["result"]["outcome"] == "queued"
    assert again.is_error and tool_data(again)["error"] == "conflict"
    assert tool_data(status)["result"]["outcome"] == "queued"
    records = [r for r in fleet.audit() if r["action"] == "message.send"]
    assert [(r["message_id"], r["outcome"]) for r in records] == [
        ("mcp-1", "queued"),
        (None, "refused"),
    ]
    assert records[0]["actor"] == a["connect"]["actor"]
    assert records[0]["target"] == b["pane"]
    with fleet.daemon.human() as client:
        listing = client.get("/api/messages", params={"pane": b["pane"]}).json()
        cards = client.get("/api/cards").json()["cards"]
    assert [(m["message_id"], m["outcome"]) for m in listing["received"]] == [("mcp-1", "queued")]
    assert [c["kind"] for c in cards] == ["message"]
    # each pane's detail lists what it sent and received
    detail = json.loads(fleet.daemon.cli("pane", a["pane"], "--json", check=True).stdout)
    assert [m["message_id"] for m in detail["messages"]["sent"]] == ["mcp-1"]
    # revoking the sender cancels the message and its card before the toggle returns
    with fleet.daemon.human() as client:
        done = client.put("/api/connect", json={"pane": a["pane"], "preset": "off"})
        assert done.status_code == 200, done.text
        listing = client.get("/api/messages", params={"pane": b["pane"]}).json()
        cards = client.get("/api/cards").json()["cards"]
    assert listing["received"][0]["outcome"] == "cancelled"
    assert cards == []
    outcomes = [r["outcome"] for r in fleet.audit() if r["message_id"] == "mcp-1"]
    assert outcomes == ["queued", "cancelled"]
    cli = fleet.daemon.cli("messages", "--pane", b["pane"], "--json", check=True)
    assert json.loads(cli.stdout)["received"][0]["outcome"] == "cancelled"
    text = fleet.daemon.cli("messages", check=True).stdout
    assert f"{b['pane']}:" in text and "mcp-1" in text and "cancelled" in text
    assert "hello from A second line" in text  # the preview, on one line
    bad = fleet.daemon.cli("messages", "--pane", "window-1")
    assert bad.returncode != 0 and "pane" in bad.stderr and "Traceback" not in bad.stderr


def test_a_flood_over_mcp_is_refused_before_admission_with_the_daemons_memory_flat(
    fleet: Fleet,
) -> None:
    a = fleet.launch("fakeclaude", "collaborate")
    b = fleet.launch("fakeclaude", "collaborate")
    entry = in_directory(fleet, b["pane"])
    token = fleet.token_of(a["pid"])
    floods = [
        "escape \x1b[2J",
        "tab\tcompletion",
        "carriage\rreturn",
        "rtl \u202e override",
        "x" * 20_000,
    ]

    async def flood(session: Any, count: int, offset: int) -> list[bool]:
        errors = []
        for i in range(count):
            result = await session.call_tool(
                "send_message",
                {
                    "target": b["pane"],
                    "incarnation": entry["incarnation"],
                    "text": floods[i % len(floods)],
                    "message_id": f"flood-{offset + i}",
                },
            )
            errors.append(bool(result.is_error) and tool_data(result)["error"] == "refused")
        return errors

    async def go() -> tuple[int, int, list[bool]]:
        async with mcp_session(fleet, token) as session:
            await session.initialize()
            # the daemon's caches (SQLite pages, the MCP server's) settle within ~4,000 calls:
            # measured, 1.6-2.2 MiB over the thousand after 2,000, then 0-0.2 MiB a thousand,
            # with a step of about 1 MiB now and then (the allocator taking a new arena)
            warm = await flood(session, 4000, 0)
            before = worker_rss_kib(fleet)
            refused = await flood(session, 1000, 10_000)
            after = worker_rss_kib(fleet)
        return before, after, warm + refused

    before, after, refused = asyncio.run(go())
    assert all(refused)
    assert after - before < 2 * 1024, f"the worker grew {after - before} KiB over 1,000 refusals"
    with fleet.daemon.human() as client:
        health = client.get("/healthz").json()
        listing = client.get("/api/messages").json()
    assert health["messaging"]["messages"] == 0 and health["messaging"]["queued_bytes"] == 0
    assert listing["messages"] == []
