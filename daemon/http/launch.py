"""``POST /api/launch``: the human starts a launcher in a new tmux window (through the gate)."""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.common import read_json
from openbus.daemon.http.identity import require_actor

FIELDS = ("launcher", "cwd", "preset", "prompt")


class LaunchResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        params = {key: body[key] for key in FIELDS if key in body}
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            params["unknown"] = unknown
        resp.media = await self.gate.run(actor, "launch", params)
        resp.status = falcon.HTTP_201


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/launch", LaunchResource(gate))
