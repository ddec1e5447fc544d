"""The fleet directory on the human API: ``GET /api/directory``, ``GET /api/panes/{pane}``,
and the human's keys into a pane: ``POST /api/panes/{pane}/answer`` (``{incarnation,
fingerprint, key}``: press a menu option's key) and ``POST /api/panes/{pane}/type``
(``{incarnation, text}``: type to an idle agent).

Each goes through the gate like every other action (``directory.list``, ``directory.pane``,
registered by ``daemon.directory_service``; ``pane.answer`` and ``pane.type`` by
``daemon.pane_input``).
"""

from __future__ import annotations

import json
from typing import Any

import falcon
import falcon.asgi

from openbus.daemon.directory import Directory
from openbus.daemon.directory_service import LIST, PANE
from openbus.daemon.gate import Gate
from openbus.daemon.http.common import bool_param
from openbus.daemon.http.human import BodyAction
from openbus.daemon.http.identity import require_actor
from openbus.daemon.pane_input import ANSWER, TYPE

MAX_ENCODED = 64  # encoded answers kept (the directory's views of one snapshot)


class DirectoryResource:
    def __init__(self, gate: Gate, directory: Directory) -> None:
        self.gate = gate
        self.directory = directory
        # id -> (answer, its JSON): the directory list answers the very same object until
        # something changes (a view of the snapshot too), so each is encoded once
        self._encoded: dict[int, tuple[Any, bytes]] = {}

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        result = await self.gate.run(require_actor(req), LIST.name, {})
        if result is self.directory.snapshot():
            resp.data = self.directory.snapshot_json()
        else:
            resp.data = self._encode(result)
        resp.content_type = falcon.MEDIA_JSON

    def _encode(self, result: Any) -> bytes:
        known = self._encoded.get(id(result))
        if known is not None and known[0] is result:
            return known[1]
        if len(self._encoded) >= MAX_ENCODED:
            self._encoded.clear()
        data = json.dumps(result, separators=(",", ":")).encode()
        self._encoded[id(result)] = (result, data)
        return data


def pane_id(pane: str) -> str:
    return "%" + pane if pane.isdigit() else pane  # /api/panes/3 means %3


class PaneResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, pane: str) -> None:
        pane = pane_id(pane)
        params = {"pane": pane, "masked": bool_param(req, "masked", default=False)}
        resp.media = await self.gate.run(require_actor(req), PANE.name, params, target=pane)


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate, directory: Directory) -> None:
    app.add_route("/api/directory", DirectoryResource(gate, directory))
    app.add_route("/api/panes/{pane}", PaneResource(gate))
    for action, fields in (
        (ANSWER, ("incarnation", "fingerprint", "key")),
        (TYPE, ("incarnation", "text")),
    ):
        keys = BodyAction(gate, action.name, "pane", fields, normalize=pane_id, target=True)
        app.add_route(f"/api/panes/{{pane}}/{action.name.partition('.')[2]}", keys)
