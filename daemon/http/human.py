"""The human API's consent and Connect resources. Each one is a call through the gate."""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.common import bool_param, read_json
from openbus.daemon.http.identity import require_actor


class CardsResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        pending = bool_param(req, "pending", default=True)
        resp.media = {
            "cards": await self.gate.run(require_actor(req), "cards.list", {"pending": pending})
        }


class CardResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, card_id: str
    ) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        resp.media = await self.gate.run(
            actor, "cards.decide", {"card": card_id, "decision": body.get("decision")}
        )


class ConnectResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_put(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        resp.media = await self.gate.run(
            actor, "connect.set", {"pane": body.get("pane"), "preset": body.get("preset")}
        )


class DisconnectAllResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), "connect.disconnect_all", {})


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/cards", CardsResource(gate))
    app.add_route("/api/cards/{card_id}", CardResource(gate))
    app.add_route("/api/connect", ConnectResource(gate))
    app.add_route("/api/disconnect-all", DisconnectAllResource(gate))
