"""Every route the daemon serves, assembled in one place.

Human-side routes answer only on the unix socket; the agents' side (TCP) sees ``/healthz``
and ``/mcp`` alone (enforced by ``daemon.http.identity``). Every resource other than
``/healthz`` reaches the daemon only through the gate; ``tests/daemon/http``
walks the router to prove it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import falcon.asgi

from openbus.daemon.audit_export import AuditExport
from openbus.daemon.directory import Directory
from openbus.daemon.gate import Gate
from openbus.daemon.http import (
    audit,
    control,
    directory,
    history,
    human,
    launch,
    messages,
    sessions,
    web,
)

UNAUDITED = frozenset({"/healthz", "/static/{name}"})  # liveness, the page's files: no data


class Health:
    def __init__(self, health: Callable[[], Mapping[str, Any]]) -> None:
        self.health = health

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = dict(self.health())


def add_routes(
    app: falcon.asgi.App[Any, Any],
    *,
    gate: Gate,
    fleet: Directory,
    audit_export: AuditExport,
    health: Callable[[], Mapping[str, Any]],
) -> None:
    app.add_route("/healthz", Health(health))
    human.add_routes(app, gate)
    history.add_routes(app, gate)
    audit.add_routes(app, gate, audit_export)
    directory.add_routes(app, gate, fleet)
    launch.add_routes(app, gate)
    messages.add_routes(app, gate)
    sessions.add_routes(app, gate)
    control.add_routes(app, gate)
    web.add_routes(app, gate)
