"""The human opens agents (through the gate): ``POST /api/launch`` starts a launcher in a new
tmux window, ``POST /api/resume`` reopens a past session, ``POST /api/restore`` lists
(``dry_run``) or brings back the sessions a lost tmux server took with it; ``GET
/api/restart-offers`` says which running agents without a token a restart can connect (and why
not the others)."""

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


class ResumeResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        params = {key: body.get(key) for key in ("harness", "session_id", "preset")}
        resp.media = await self.gate.run(require_actor(req), "session.resume", params)
        resp.status = falcon.HTTP_201


class RestoreResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        params = {"dry_run": body.get("dry_run") is True}
        resp.media = await self.gate.run(require_actor(req), "session.restore", params)


class RestartOffersResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), "restart.offers", {})


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/launch", LaunchResource(gate))
    app.add_route("/api/resume", ResumeResource(gate))
    app.add_route("/api/restore", RestoreResource(gate))
    app.add_route("/api/restart-offers", RestartOffersResource(gate))
