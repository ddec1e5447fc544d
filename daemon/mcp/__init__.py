"""The agents' side: the MCP endpoint at ``/mcp`` and the tools it offers.

``install(services)`` builds the endpoint (``services.extras["mcp"]``), adds the Observe tools
and the launch action (``daemon.launch``). Other features add their own tools with
``openbus.daemon.mcp.tools.add_tool(services, McpTool(...))``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from openbus.daemon.mcp.endpoint import McpEndpoint, bench_noop_enabled
from openbus.daemon.mcp.tools import McpTool, ToolContext, add_tool, frame

if TYPE_CHECKING:
    from openbus.daemon.gate import Call
    from openbus.daemon.services import Services

__all__ = ["McpEndpoint", "McpTool", "ToolContext", "add_tool", "frame", "install"]


def _install_bench_noop(services: Services) -> None:
    """A no-op read tool on the same stack, for ``bench/bench_mcp.py`` only (env-gated)."""
    from openbus.daemon.core.actions import Action
    from openbus.daemon.core.consent import Tier
    from openbus.daemon.core.scopes import Scope

    async def noop(call: Call) -> Any:
        return {"ok": True}

    services.gate.register(Action("bench.noop", scope=Scope.READ, tier=Tier.READ), noop)
    add_tool(
        services,
        McpTool(
            name="noop",
            action="bench.noop",
            description="Does nothing (benchmark).",
            source="openbus bench",
        ),
    )


def install(services: Services) -> McpEndpoint:
    from openbus.daemon import launch
    from openbus.daemon.mcp import observe

    endpoint = McpEndpoint(services)
    services.extras["mcp"] = endpoint
    observe.install(services)
    if bench_noop_enabled():
        _install_bench_noop(services)
    launch.install(services)
    return endpoint
