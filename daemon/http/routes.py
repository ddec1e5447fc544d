"""Every route the daemon serves, in one table.

Human-side routes answer only on the unix socket; the agents' side (TCP) sees ``/healthz``
and ``/mcp`` alone. Every resource reaches the daemon's services through the gate.
"""

from __future__ import annotations

import falcon.asgi

from openbus.daemon.services import Services


class Health:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        seq, _ = self.services.audit.head()
        resp.media = {"ok": True, "audit": {"seq": seq}}


def add_routes(app: falcon.asgi.App, services: Services) -> None:
    app.add_route("/healthz", Health(services))
