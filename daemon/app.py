"""The app factory: builds the daemon's services and its one ASGI app.

``create_app(config)`` is what gunicorn's worker loads (through ``openbus.daemon.serve``) and
what tests call directly. One app serves both listeners: requests that arrive on the unix
socket carry the peer's credentials (see ``daemon.http.worker``) and reach the human API;
requests over TCP reach only the agents' side (``/mcp``, ``/healthz``).
"""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.asgi

from openbus.daemon.config import Config
from openbus.daemon.core.clock import Clock, Random, SystemClock, SystemRandom
from openbus.daemon.http import errors as http_errors
from openbus.daemon.http.identity import Identity
from openbus.daemon.services import Services

log = logging.getLogger("openbus")


def create_app(
    config: Config,
    *,
    clock: Clock | None = None,
    random: Random | None = None,
    services: Services | None = None,
) -> Any:
    services = services or Services.build(config, clock=clock or SystemClock(), random=random or SystemRandom())
    identity = Identity(services.gate.record, hosted=config.hosted.enabled)
    app = falcon.asgi.App(middleware=[services.lifespan_middleware(), identity])
    app.req_options.strip_url_path_trailing_slash = True
    http_errors.install(app)
    from openbus.daemon.http import routes

    routes.add_routes(app, services)
    from openbus.daemon.mcp.asgi import Dispatcher

    return Dispatcher(app, services.extras["mcp"])  # /mcp over TCP -> MCP; the rest -> falcon


def app_from_env() -> Any:
    """Entry point for gunicorn: ``openbus.daemon.app:app_from_env()``."""
    import os

    from openbus.daemon.config import load_config

    return create_app(load_config(os.environ.get("OPENBUS_CONFIG") or None))
