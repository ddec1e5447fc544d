"""Every route the daemon serves, assembled in one place.

Human-side routes answer only on the unix socket; the agents' side (TCP) sees ``/healthz``
and ``/mcp`` alone (enforced by ``daemon.http.identity``). Every resource other than
``/healthz`` reaches the daemon's services only through the gate; ``tests/daemon/http``
walks the router to prove it.
"""

from __future__ import annotations

from typing import Any

import falcon.asgi

from openbus.daemon.http import human, web
from openbus.daemon.services import Services

UNAUDITED = frozenset({"/healthz", "/", "/static/{name}"})  # liveness, the page: no fleet data


class Health:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        seq, _ = self.services.audit.head()
        body: dict[str, object] = {"ok": True, "audit": {"seq": seq}}
        for name, status in self.services.health.items():
            body[name] = status()
        resp.media = body


def add_routes(app: falcon.asgi.App[Any, Any], services: Services) -> None:
    app.add_route("/healthz", Health(services))
    human.add_routes(app, services)
    from openbus.daemon.http import history

    history.add_routes(app, services)
    from openbus.daemon.http import audit as audit_http

    audit_http.add_routes(app, services)
    from openbus.daemon.http import directory as directory_http

    directory_http.add_routes(app, services)
    from openbus.daemon.http import launch as launch_http

    launch_http.add_routes(app, services)
    from openbus.daemon.http import messages as messages_http

    messages_http.add_routes(app, services)
    web.add_routes(app, services)
