"""The human side's web page, served on the daemon's unix socket (and so through the tunnel).

``GET /static/{name}`` are the page's script, style sheet and icons: fixed files shipped as
package data in ``openbus.daemon.web``, read once, carrying no fleet data, so they are the
only unaudited routes besides ``/healthz``. The page links each as ``?v=`` its hash, and such
a request is answered cacheable for good (``immutable``): a reload revalidates nothing, and a
new daemon's page names new hashes. ``GET /`` is the page with its first frame in it: one
``human.page`` call through the gate (what ``human.follow`` would send first, with the
human's session families), as JSON in a ``<script type="application/json">`` data block
with every ``<``, ``>`` and ``&`` escaped (so no pane title or screen text can end the block
or start markup), never cached (``no-store``). The page draws the fleet from it at once, then
follows ``/api/follow``; everything else it shows comes from the ``/api/*`` resources, each a
call through the gate. The identity middleware already keeps these paths off the agents' TCP
port (404 there).

The icons are the real Lucide SVGs from the ``lucide`` package, inlined into ``app.js`` when
it is read (``ICONS``: the page's names to Lucide's), so nothing is fetched at run time. The
page's icon carries the Needs-you count: ``/static/favicon-N.svg`` (0-9, ``9plus``) is the
favicon with that number drawn on it.

Every answer carries a strict Content-Security-Policy (``default-src 'self'``, no inline
script or style, no frames, no plugins): nothing the page uses may load from outside the box.

``GET /api/connections`` (action ``connect.list``, for humans only) lists the caller's
connected agents by pane with the preset granted, the preset in effect under the org
policy's cap and the cap itself: the one piece of fleet state the page needs for its Connect
indicator that the directory does not carry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any
from xml.etree import ElementTree

import falcon
import falcon.asgi
import lucide

from openbus.daemon.connect import LIST_CONNECTIONS
from openbus.daemon.gate import Gate
from openbus.daemon.http.identity import require_actor
from openbus.daemon.human_feed import FIRST_FRAME, FOLLOW
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
ROUTES = ("/static/{name}",)  # the unaudited, data-free routes (see routes.UNAUDITED)
FRAME_MARK = "/*FIRST-FRAME*/"
FOREVER = "public, max-age=31536000, immutable"
# JSON inside an HTML data block: nothing in it may close the block or open markup
JSON_IN_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


# the page's icon names -> Lucide's
ICONS = {
    "observe": "eye",
    "collaborate": "users",
    "check": "check",
    "pair": "check-check",
    "x": "x",
    "power": "power",
    "branch": "git-branch",
    "pr": "git-pull-request",
    "sent": "arrow-up-right",
    "received": "arrow-down-left",
    "back": "chevron-left",
    "clock": "clock",
    "terminal": "terminal",
    "send": "send",
    "restart": "rotate-ccw",
    "control": "route",
}
ICONS_MARK = b"/*LUCIDE-ICONS*/ {}"


def lucide_shapes(name: str) -> list[list[Any]]:
    """The child elements of Lucide's ``name`` icon as ``[tag, attributes]`` pairs."""
    svg = lucide._render_icon(name, None)  # the package's own SVG text for the icon
    root = ElementTree.fromstring(svg)  # noqa: S314 - the lucide package's own files
    return [[child.tag.rpartition("}")[2], dict(child.attrib)] for child in root]


def icons_json() -> bytes:
    icons = {ours: lucide_shapes(theirs) for ours, theirs in ICONS.items()}
    return json.dumps(icons, separators=(",", ":"), sort_keys=True).encode()


def badge_svg(base: bytes, count: str) -> bytes:
    """The favicon with the Needs-you count in a red disc at its corner."""
    text = "9+" if count == "9plus" else count
    disc = (
        '<circle cx="17" cy="7" r="7" fill="#d92d20" stroke="none"/>'
        '<text x="17" y="10.5" font-size="10" font-family="system-ui,sans-serif" '
        f'font-weight="700" text-anchor="middle" fill="#fff" stroke="none">{text}</text>'
    )
    if count == "0":
        return base
    return base.replace(b"</svg>", disc.encode() + b"</svg>")


class Asset:
    def __init__(self, name: str, body: bytes | None = None) -> None:
        if body is None:
            body = resources.files("openbus.daemon.web").joinpath(name).read_bytes()
        if name == "app.js":
            body = body.replace(ICONS_MARK, icons_json(), 1)
        self.body = body
        self.type = TYPES[name[name.rindex(".") :]]
        self.version = hashlib.sha256(self.body).hexdigest()[:32]
        self.etag = f'"{self.version}"'

    def serve(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        if req.get_param("v") == self.version:
            resp.cache_control = [FOREVER]
        resp.etag = self.etag
        resp.content_type = self.type
        if self.etag in (req.get_header("If-None-Match") or ""):
            resp.status = falcon.HTTP_304
            return
        resp.data = self.body


def embed_json(value: Any) -> str:
    """``value`` as JSON that is inert inside an HTML ``<script type="application/json">``."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text.translate(JSON_IN_HTML)


class PageResource:
    def __init__(self, gate: Gate, assets: dict[str, Asset]) -> None:
        self.gate = gate
        text = resources.files("openbus.daemon.web").joinpath(PAGE).read_text()
        for name in STATIC:
            text = text.replace(f'"/static/{name}"', f'"/static/{name}?v={assets[name].version}"')
        self.head, _, self.tail = text.partition(FRAME_MARK)
        assert self.tail, f"{PAGE} has no {FRAME_MARK}"

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        frame = await self.gate.run(require_actor(req), FIRST_FRAME.name, {})
        resp.set_headers(SECURITY_HEADERS)
        resp.cache_control = ["no-store"]  # it carries this human's fleet
        resp.content_type = TYPES[".html"]
        resp.data = (self.head + embed_json(frame) + self.tail).encode()


class StaticResource:
    def __init__(self) -> None:
        self.assets = {name: Asset(name) for name in STATIC}
        favicon = self.assets["favicon.svg"].body
        for count in (*map(str, range(10)), "9plus"):
            name = f"favicon-{count}.svg"
            self.assets[name] = Asset(name, badge_svg(favicon, count))

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response, name: str) -> None:
        require_actor(req)
        asset = self.assets.get(name)
        if asset is None:
            raise NotFound(f"no static file {name!r}")
        asset.serve(req, resp)


class FollowResource:
    """``GET /api/follow``: one ``human.follow`` call, then its frames as NDJSON (an empty line
    for a keep-alive) until the client goes away or the daemon stops."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        frames = await self.gate.run(require_actor(req), FOLLOW.name, {})
        resp.content_type = "application/x-ndjson"
        resp.set_header("Cache-Control", "no-store")
        resp.stream = _lines(frames)


async def _lines(frames: AsyncIterator[dict[str, Any] | None]) -> AsyncIterator[bytes]:
    async for frame in frames:
        if frame is None:
            yield b"\n"
        else:
            yield json.dumps(frame, separators=(",", ":"), default=str).encode() + b"\n"


class ConnectionsResource:
    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.media = await self.gate.run(require_actor(req), LIST_CONNECTIONS.name, {})


def add_routes(app: falcon.asgi.App[Any, Any], gate: Gate) -> None:
    static = StaticResource()
    app.add_route("/", PageResource(gate, static.assets))
    app.add_route("/static/{name}", static)
    app.add_route("/api/connections", ConnectionsResource(gate))
    app.add_route("/api/follow", FollowResource(gate))
