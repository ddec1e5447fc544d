"""The human API's consent and Connect resources. Each one is a call through the gate."""

from __future__ import annotations

from collections.abc import Callable
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


class BodyAction:
    """``POST`` to a path naming one thing (the route's one field): one action run with that
    thing as ``param`` (and, with ``target``, as the call's target) plus the body's ``fields``."""

    def __init__(
        self,
        gate: Gate,
        action: str,
        param: str,
        fields: tuple[str, ...],
        *,
        normalize: Callable[[str], str] = str,
        target: bool = False,
    ) -> None:
        self.gate = gate
        self.action = action
        self.param = param
        self.fields = fields
        self.normalize = normalize
        self.target = target

    async def on_post(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, **path: str
    ) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        (raw,) = path.values()
        value = self.normalize(raw)
        params = {**{name: body.get(name) for name in self.fields}, self.param: value}
        target = value if self.target else None
        resp.media = await self.gate.run(actor, self.action, params, target=target)


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
    app.add_route("/api/cards/{card_id}", BodyAction(gate, "cards.decide", "card", ("decision",)))
    app.add_route("/api/connect", ConnectResource(gate))
    app.add_route("/api/disconnect-all", DisconnectAllResource(gate))
