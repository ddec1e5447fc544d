"""The fleet directory on the human API: ``GET /api/directory`` and ``GET /api/panes/{pane}``.

Both go through the gate like every other action (``directory.list``, ``directory.pane``,
registered by ``daemon.directory_service``).
"""

from __future__ import annotations

from typing import Any

import falcon
import falcon.asgi

from openbus.daemon.directory import Directory
from openbus.daemon.directory_service import LIST, PANE
from openbus.daemon.gate import Gate
from openbus.daemon.http.identity import require_actor


class DirectoryResource:
    def __init__(self, gate: Gate, directory: Directory) -> None:
        self.gate = gate
        self.directory = directory

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        result = await self.gate.run(require_actor(req), LIST.name, {})
        if result is self.directory.snapshot():
            resp.data = self.directory.snapshot_json()
            resp.content_type = falcon.MEDIA_JSON
        else:
            resp.media = result


class PaneResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, pane: str) -> None:
        pane = "%" + pane if pane.isdigit() else pane  # /api/panes/3 means %3
        resp.media = await self.gate.run(require_actor(req), PANE.name, {"pane": pane}, target=pane)


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate, directory: Directory) -> None:
    app.add_route("/api/directory", DirectoryResource(gate, directory))
    app.add_route("/api/panes/{pane}", PaneResource(gate))
