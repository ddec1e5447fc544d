"""The human API of the session tools: ``GET /api/sessions`` (``sessions.families``: child pane
-> parent pane) and ``POST /api/sessions/allow`` ``{pane}`` (``sessions.allow``: the agent in
that pane may start sessions without a card, until its grant goes)."""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.common import read_json
from openbus.daemon.http.identity import require_actor


class SessionsResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), "sessions.families", {})


class AllowResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        resp.media = await self.gate.run(actor, "sessions.allow", {"pane": body.get("pane")})


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/sessions", SessionsResource(gate))
    app.add_route("/api/sessions/allow", AllowResource(gate))
