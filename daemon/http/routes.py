"""Every route the daemon serves, assembled in one place.

Human-side routes answer only on the unix socket; the agents' side (TCP) sees ``/healthz``
and ``/mcp`` alone (enforced by ``daemon.http.identity``). Every resource other than
``/healthz`` reaches the daemon only through the gate; ``tests/daemon/http``
walks the router to prove it.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.compose import Daemon
from openbus.daemon.http import audit, directory, history, human, launch, messages, web

UNAUDITED = frozenset({"/healthz", "/", "/static/{name}"})  # liveness, the page: no fleet data


class Health:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = self.daemon.health()


def add_routes(app: falcon.asgi.App[Any, Any], daemon: Daemon) -> None:
    gate = daemon.foundation.gate
    app.add_route("/healthz", Health(daemon))
    human.add_routes(app, gate)
    history.add_routes(app, gate)
    audit.add_routes(app, gate, daemon.audit_export)
    directory.add_routes(app, gate, daemon.directory.directory)
    launch.add_routes(app, gate)
    messages.add_routes(app, gate)
    web.add_routes(app, gate)
