"""The human API for requests: ``POST /api/ask`` -> ``control.ask``; ``GET /api/threads``
(the requester's thread) and ``GET /api/threads/{request}[?after=N&wait=S]`` (one request and
what it caused, waiting at most 50 s for an entry newer than ``after``) -> ``threads.get``;
``POST /api/control/start`` -> ``control.start`` (the control session, unless it runs);
``POST /api/control/allow-panes`` ``{allow}`` -> ``control.allow_panes`` ("control may open
panes" without a card each time; ``allow: false`` takes it back)."""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.common import read_json
from openbus.daemon.http.identity import require_actor
from openbus.kernel.errors import BadRequest

FIELDS = ("text", "front_end")


def _number(req: falcon.asgi.Request, name: str, kind: type) -> Any:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return None
    try:
        return kind(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a number", field=name) from None


class AskResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        body = await read_json(req)
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise BadRequest(f"unknown field {unknown[0]!r}", field=unknown[0])
        resp.media = await self.gate.run(actor, "control.ask", {k: body.get(k) for k in FIELDS})
        resp.status = falcon.HTTP_201


class ThreadsResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        params = {"thread": req.get_param("thread")} if req.get_param("thread") else {}
        resp.media = await self.gate.run(require_actor(req), "threads.get", params)

    async def on_get_request(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, request: str
    ) -> None:
        params = {
            "request": request,
            "after": _number(req, "after", int),
            "wait_seconds": _number(req, "wait", float),
        }
        resp.media = await self.gate.run(require_actor(req), "threads.get", params)


class ControlStartResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), "control.start", {})


class AllowPanesResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await read_json(req)
        params = {"allow": body.get("allow", True)}
        resp.media = await self.gate.run(require_actor(req), "control.allow_panes", params)


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/api/ask", AskResource(gate))
    app.add_route("/api/control/start", ControlStartResource(gate))
    app.add_route("/api/control/allow-panes", AllowPanesResource(gate))
    threads = ThreadsResource(gate)
    app.add_route("/api/threads", threads)
    app.add_route("/api/threads/{request}", threads, suffix="request")
