"""A tool result built once goes through the SDK's own pipeline (the mcp SDK's in-process
client and server): the client gets the payload, with the SDK's stamp, exactly as built."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
from mcp.client.client import Client
from mcp.server.lowlevel.server import Server

from openbus.daemon.mcp.endpoint import PrebuiltResults, _wire

FRAMED = {"source": "openbus directory", "kind": "data", "result": {"panes": [{"pane": "%1"}]}}


def _server(wire: dict[str, Any]) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[types.Tool(name="list_panes", input_schema={"type": "object"})]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> dict[str, Any]:
        return PrebuiltResults.hand_over(wire)

    server: Server[Any] = Server("t", on_list_tools=list_tools)
    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)
    server.middleware = [PrebuiltResults()]
    return server


def test_a_prebuilt_result_reaches_the_client_whole_through_the_sdk_pipeline() -> None:
    wire = _wire(FRAMED, is_error=False)

    async def go() -> Any:
        async with Client(_server(wire)) as client:
            await client.list_tools()
            return await client.call_tool("list_panes", {})

    result = asyncio.run(go())
    assert not result.is_error
    assert result.structured_content == FRAMED
    assert json.loads(result.content[0].text) == FRAMED
    assert wire["structuredContent"] == FRAMED and wire["content"][0]["text"]  # not consumed


def test_without_the_middleware_the_handler_returns_the_whole_result() -> None:
    wire = _wire(FRAMED, is_error=False)
    assert PrebuiltResults.hand_over(wire) is wire
