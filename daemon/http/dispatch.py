"""The daemon's outer ASGI app: ``/mcp`` over TCP to the MCP endpoint, everything else to falcon.

Lifespan runs both: the MCP session manager's ``run()`` is entered before falcon's startup
(which starts the daemon's services) and left after falcon's shutdown, all in the one lifespan
task, as the SDK's task group requires. A request for ``/mcp`` on the unix socket (the human
side, recognisable by its peer credentials) or on local mode's web address for the human (its
own port) goes to falcon, which does not serve it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from openbus.daemon.http.worker import PEER_EXTENSION, local_port
from openbus.daemon.mcp.endpoint import McpEndpoint, Receive, Scope, Send


def is_mcp_path(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


class Dispatcher:
    def __init__(self, falcon: Any, mcp: McpEndpoint, web_port: int | None = None) -> None:
        self.falcon = falcon
        self.mcp = mcp
        self.web_port = web_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if (
            kind == "http"
            and is_mcp_path(scope.get("path", ""))
            and PEER_EXTENSION not in scope.get("extensions", {})
            and (self.web_port is None or local_port(scope) != self.web_port)
        ):
            await self.mcp(scope, receive, send)
            return
        await self.falcon(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        async with contextlib.AsyncExitStack() as stack:
            message = await receive()
            if message.get("type") != "lifespan.startup":
                return
            try:
                await stack.enter_async_context(self.mcp.run())
            except Exception as exc:  # noqa: BLE001 - reported to the server as a failed startup
                await send({"type": "lifespan.startup.failed", "message": f"MCP endpoint: {exc}"})
                return
            task = asyncio.get_running_loop().create_task(self.falcon(scope, inbox.get, outbox.put))
            await inbox.put(message)
            reply = await outbox.get()
            await send(reply)
            if reply.get("type") != "lifespan.startup.complete":
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                return
            message = await receive()
            await inbox.put(
                message
                if message.get("type") == "lifespan.shutdown"
                else {"type": "lifespan.shutdown"}
            )
            reply = await outbox.get()
            with contextlib.suppress(BaseException):
                await task
        await send(reply)
