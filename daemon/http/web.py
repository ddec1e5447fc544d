"""The human side's web page, served on the daemon's unix socket (and so through the tunnel).

``GET /`` is the page and ``GET /static/{name}`` its script and style sheet: fixed files
shipped as package data in ``openbus.daemon.web``, read once, carrying no fleet data, so they
are the only unaudited routes besides ``/healthz``. Everything the page shows comes from the
``/api/*`` resources, each a call through the gate. The identity middleware already keeps
these paths off the agents' TCP port (404 there).

Every answer carries a strict Content-Security-Policy (``default-src 'self'``, no inline
script or style, no frames, no plugins): nothing the page uses may load from outside the box.

``GET /api/connections`` (action ``connect.list``, for humans only) lists the caller's
connected agents by pane with the preset granted, the preset in effect under the org
policy's cap and the cap itself: the one piece of fleet state the page needs for its Connect
indicator that the directory does not carry.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import falcon
import falcon.asgi

from openbus.daemon.connect import LIST_CONNECTIONS
from openbus.daemon.gate import Gate
from openbus.daemon.http.identity import require_actor
from openbus.kernel.errors import NotFound

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
PAGE = "index.html"
STATIC = ("app.js", "ask.js", "app.css", "favicon.svg")
ROUTES = ("/", "/static/{name}")  # the unaudited, data-free routes (see routes.UNAUDITED)


class Asset:
    def __init__(self, name: str) -> None:
        self.body = resources.files("openbus.daemon.web").joinpath(name).read_bytes()
        self.type = TYPES[name[name.rindex(".") :]]
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:32] + '"'

    def serve(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        resp.etag = self.etag
        resp.content_type = self.type
        if self.etag in (req.get_header("If-None-Match") or ""):
            resp.status = falcon.HTTP_304
            return
        resp.data = self.body


class PageResource:
    def __init__(self) -> None:
        self.page = Asset(PAGE)

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        require_actor(req)
        self.page.serve(req, resp)


class StaticResource:
    def __init__(self) -> None:
        self.assets = {name: Asset(name) for name in STATIC}

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        require_actor(req)
        asset = self.assets.get(name)
        if asset is None:
            raise NotFound(f"no static file {name!r}")
        asset.serve(req, resp)


class ConnectionsResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), LIST_CONNECTIONS.name, {})


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    app.add_route("/", PageResource())
    app.add_route("/static/{name}", StaticResource())
    app.add_route("/api/connections", ConnectionsResource(gate))
