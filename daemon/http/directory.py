"""The fleet directory on the human API, and its wiring into the daemon.

``install(services)`` builds the tmux adapter, the directory and the watcher, registers the two
read actions on the gate (``directory.list``, ``directory.pane``; scope ``read``) and the
watcher's start/stop hooks. ``add_routes(app, services)`` serves ``GET /api/directory`` and
``GET /api/panes/{pane}``; both go through the gate like every other action.
"""

from __future__ import annotations

import contextlib
import os
import socket as socketlib
from pathlib import Path
from typing import Any

import falcon
import falcon.asgi

from openbus.daemon.core.actions import Action
from openbus.daemon.core.consent import Tier
from openbus.daemon.core.scopes import Scope
from openbus.daemon.directory import Directory
from openbus.daemon.directory_probe import ProcessProbe
from openbus.daemon.gate import Call
from openbus.daemon.http.identity import require_actor
from openbus.daemon.services import Services
from openbus.daemon.tmux.adapter import Tmux, check_pane_id
from openbus.daemon.tmux.watcher import Watcher

LIST = Action("directory.list", Scope.READ, Tier.READ)
PANE = Action("directory.pane", Scope.READ, Tier.READ)
SECRET_FILE = "directory.secret"  # noqa: S105 - a file name, not a secret


def _secret(services: Services) -> bytes:
    """The per-daemon secret keying incarnation tokens, kept 0600 in the state dir so tokens
    survive a restart of the daemon."""
    path: Path = services.config.daemon.state_dir / SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if len(data) >= 32:
            return data
    data = services.random.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return data


def directory_of(services: Services) -> Directory:
    found: Directory = services.extras["directory"]
    return found


def install(services: Services) -> Directory:
    tmux = Tmux(services.config.tmux.socket)
    directory = Directory(
        services.clock,
        _secret(services),
        ProcessProbe(),
        socket=str(tmux.socket),
        hostname=socketlib.gethostname(),
    )
    watcher = Watcher(tmux, directory)
    services.extras["tmux"] = tmux
    services.extras["directory"] = directory
    services.extras["watcher"] = watcher

    async def list_panes(call: Call) -> Any:
        snapshot = directory.snapshot()
        call.details["panes"] = len(snapshot["panes"])
        return snapshot

    async def one_pane(call: Call) -> Any:
        pane = check_pane_id(call.params.get("pane"), "pane")  # type: ignore[arg-type]
        detail = directory.pane(pane)
        if call.actor.is_human:  # the messages a pane sent and received are the human's view
            detail = dict(detail)
            for hook in services.extras.get("pane_detail_hooks", []):
                detail.update(hook(pane))
        return detail

    services.gate.register(LIST, list_panes)
    services.gate.register(PANE, one_pane)
    services.started.append(watcher.start)
    services.stopping.append(watcher.stop)
    services.health["tmux"] = lambda: {
        "running": directory.server_running,
        "panes": len(directory.entries()),
    }
    return directory


class DirectoryResource:
    def __init__(self, services: Services) -> None:
        self.gate = services.gate
        self.directory = directory_of(services)

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        result = await self.gate.run(require_actor(req), "directory.list", {})
        if result is self.directory.snapshot():
            resp.data = self.directory.snapshot_json()
            resp.content_type = falcon.MEDIA_JSON
        else:
            resp.media = result


class PaneResource:
    def __init__(self, services: Services) -> None:
        self.gate = services.gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, pane: str) -> None:
        pane = "%" + pane if pane.isdigit() else pane  # /api/panes/3 means %3
        resp.media = await self.gate.run(
            require_actor(req), "directory.pane", {"pane": pane}, target=pane
        )


def add_routes(app: falcon.asgi.App[Any, Any], services: Services) -> None:
    app.add_route("/api/directory", DirectoryResource(services))
    app.add_route("/api/panes/{pane}", PaneResource(services))
