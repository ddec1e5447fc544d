"""The app factory: builds the daemon (``daemon.compose``) and its one ASGI app.

``create_app(config)`` is what gunicorn's worker loads (through ``openbus.daemon.serve``) and
what tests call directly. One app serves both listeners: requests that arrive on the unix
socket carry the peer's credentials (see ``daemon.http.worker``) and reach the human API;
requests over TCP reach only the agents' side (``/mcp``, ``/healthz``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import falcon
import falcon.asgi

from openbus.daemon import compose
from openbus.daemon.compose import Daemon, Extra
from openbus.daemon.config import Config, load_config
from openbus.daemon.http import errors as http_errors
from openbus.daemon.http import routes
from openbus.daemon.http.dispatch import Dispatcher
from openbus.daemon.http.identity import Identity
from openbus.daemon.tunnel_trust import tunnel_trust
from openbus.daemon.web_access import WebAccess
from openbus.kernel.clock import Clock, Random, SystemClock, SystemRandom
from openbus.kernel.tunnel_signature import TunnelVerifier

log = logging.getLogger("openbus")


def create_app(
    config: Config,
    *,
    clock: Clock | None = None,
    random: Random | None = None,
    daemon: Daemon | None = None,
    extra: Sequence[Extra] = (),
) -> Any:
    """The ASGI app for ``config``: a daemon built here (or the one given) behind falcon and
    the MCP endpoint; lifespan starts and stops the daemon."""
    daemon = daemon or compose.build(
        config, clock=clock or SystemClock(), random=random or SystemRandom(), extra=extra
    )
    identity = build_identity(config, daemon)
    middleware: list[Any] = [Lifespan(daemon), identity]
    app: falcon.asgi.App[Any, Any] = falcon.asgi.App(middleware=middleware)
    app.req_options.strip_url_path_trailing_slash = True
    http_errors.install(app)
    routes.add_routes(
        app,
        gate=daemon.foundation.gate,
        fleet=daemon.directory.directory,
        audit_export=daemon.audit_export,
        health=daemon.health,
    )
    web_port = identity.web.port if identity.web is not None else None
    return Dispatcher(
        app, daemon.mcp, web_port
    )  # /mcp on the agents' port -> MCP; the rest -> falcon


class Lifespan:
    """falcon's lifespan events start and stop the daemon."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    async def process_startup(self, scope: Any, event: Any) -> None:
        await self.daemon.start()

    async def process_shutdown(self, scope: Any, event: Any) -> None:
        await self.daemon.stop()


def build_identity(config: Config, daemon: Daemon) -> Identity:
    """Local mode: the peer uid. Hosted: also the tunnel's signed ``X-Tunnel-User``."""
    refusals = daemon.foundation.refusals
    if not config.hosted.enabled:
        return Identity(refusals.refuse, web=WebAccess.for_config(config))
    keys, tunnel_uid = tunnel_trust(config)
    verifier = TunnelVerifier(
        keys, clock=daemon.foundation.clock, window=config.hosted.signature_window_seconds
    )
    return Identity(
        refusals.refuse,
        hosted=True,
        tunnel_uid=tunnel_uid,
        tunnel_verify=verifier.verify,
    )


def app_from_env() -> Any:
    """Entry point for gunicorn: ``openbus.daemon.app:app_from_env()``."""
    return create_app(load_config(os.environ.get("OPENBUS_CONFIG") or None))
