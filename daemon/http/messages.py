"""The human API's messages: ``GET /api/messages[?pane=%3]`` -> ``messages.list``.

Without ``pane``: every pane's sent and received messages plus the flat list; with it: that
pane's ``sent`` and ``received``. Each message carries its outcome (``queued`` or final),
sender, recipient, conversation and hop, card, reason and a short preview.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.identity import require_actor


class MessagesResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        pane = req.get_param("pane") or None
        resp.media = await self.gate.run(
            require_actor(req), "messages.list", {"pane": pane}, target=pane
        )


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/messages", MessagesResource(gate))
