"""The human API's history resources. Each one is a call through the gate.

* ``GET /api/history/search?q=&repo=&limit=`` -> ``history.search``
* ``GET /api/history/sessions/{harness}/{session_id}`` -> ``history.get``
* ``DELETE /api/history/sessions/{harness}/{session_id}`` -> ``history.expunge``
* ``POST /api/history/push`` (JSON body) -> ``history.push``
* ``POST /api/history/reindex`` (JSON body ``{"full"?}``) -> ``history.reindex``
"""

from __future__ import annotations

import falcon.asgi

from openbus.daemon.gate import Gate
from openbus.daemon.http.common import int_param, read_json
from openbus.daemon.http.identity import require_actor


class HistorySearch:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        params = {
            "q": req.get_param("q") or "",
            "repo": req.get_param("repo") or None,
            "limit": int_param(req, "limit", 10, minimum=1, maximum=100),
        }
        resp.media = await self.gate.run(actor, "history.search", params)


class HistorySession:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, harness: str, session_id: str
    ) -> None:
        params = {"harness": harness, "session_id": session_id}
        resp.media = await self.gate.run(require_actor(req), "history.get", params)

    async def on_delete(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, harness: str, session_id: str
    ) -> None:
        params = {"harness": harness, "session_id": session_id}
        resp.media = await self.gate.run(require_actor(req), "history.expunge", params)


class HistoryWrite:
    """A POST whose JSON body is the action's parameters."""

    def __init__(self, gate: Gate, action: str) -> None:
        self.gate = gate
        self.action = action

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        actor = require_actor(req)
        resp.media = await self.gate.run(actor, self.action, await read_json(req))


def add_routes(app: falcon.asgi.App[falcon.asgi.Request, falcon.asgi.Response], gate: Gate) -> None:
    app.add_route("/api/history/search", HistorySearch(gate))
    app.add_route("/api/history/sessions/{harness}/{session_id}", HistorySession(gate))
    app.add_route("/api/history/push", HistoryWrite(gate, "history.push"))
    app.add_route("/api/history/reindex", HistoryWrite(gate, "history.reindex"))
