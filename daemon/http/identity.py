"""Who is calling: the identity middleware of the HTTP edge.

* Over TCP (the agents' side) there is no human: only ``/healthz`` and ``/mcp`` answer, and
  ``/mcp`` authenticates its own bearer token on every request. A request there carrying a
  tunnel identity header is refused and audited.
* On the unix socket the human is the connecting peer's user (SO_PEERCRED), except that in
  hosted mode a peer whose uid is the tunnel's may vouch for a human with a signed
  ``X-Tunnel-User`` (or one MAC'd under the key the tunnel gave that very connection, see
  ``kernel.tunnel_signature``). Any other request carrying an identity header, in any spelling, is
  refused with 401 and audited, naming the peer.
* On local mode's web address for the human (``daemon.web_access``: a loopback port of its
  own, told apart by the port the connection was accepted on) the human is the daemon's own
  user, once the request shows this start's secret: ``GET /?token=SECRET`` is answered with a
  redirect to ``/`` setting it as a cookie, and every other request needs the cookie. Host
  must be the web address and an Origin, when sent, too; a wrong Host, Origin or secret is
  refused and audited (sampled, like every anonymous refusal).
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable
from typing import Any, NoReturn

import falcon
import falcon.asgi

from openbus.daemon.core import actors
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.http.common import MAX_BODY
from openbus.daemon.http.worker import CONNECTION_EXTENSION, PEER_EXTENSION, local_port
from openbus.daemon.web_access import COOKIE, TOKEN_PARAM, WebAccess
from openbus.kernel.errors import BadRequest, Forbidden, NotFound, Unauthenticated
from openbus.kernel.tunnel_signature import (
    TunnelConnection,
    TunnelRejected,
    is_identity_header,
    target_from_scope,
)

AGENT_SIDE_PATHS = ("/healthz", "/mcp")
__all__ = ["Identity", "is_identity_header", "require_actor", "user_name"]

# (method, target, headers, body, the connection's state) -> user name; raises Unauthenticated
TunnelVerify = Callable[[str, str, list[tuple[bytes, bytes]], bytes, TunnelConnection | None], str]


_NAMES: dict[int, tuple[float, str]] = {}
NAME_TTL = 30.0  # an NSS lookup costs ~0.2 ms; a renamed account shows within this


def user_name(uid: int) -> str:
    now = time.monotonic()
    cached = _NAMES.get(uid)
    if cached is not None and cached[0] > now:
        return cached[1]
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise Unauthenticated(f"peer uid {uid} has no user name") from None
    _NAMES[uid] = (now + NAME_TTL, name)
    return name


class Identity:
    def __init__(
        self,
        refuse: Callable[[str, AuditDraft], Any],
        *,
        hosted: bool = False,
        tunnel_uid: int | None = None,
        tunnel_verify: TunnelVerify | None = None,
        web: WebAccess | None = None,
    ) -> None:
        self.refuse = refuse  # (sampling key, draft): anonymous refusals are sampled
        self.hosted = hosted
        self.tunnel_uid = tunnel_uid
        self.tunnel_verify = tunnel_verify
        self.web = web

    async def process_request(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        peer: dict[str, int] | None = req.scope.get("extensions", {}).get(PEER_EXTENSION)
        req.context.peer = peer
        req.context.actor = None
        raw_headers: list[tuple[bytes, bytes]] = req.scope.get("headers", [])
        if self.hosted and peer is not None and peer["uid"] == self.tunnel_uid:
            await self._tunnel(req, peer, raw_headers)
            return
        claims = _claims(raw_headers)

        if peer is None and self.web is not None and local_port(req.scope) == self.web.port:
            headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw_headers]
            self._web(req, resp, self.web, headers, claims)
            return
        if peer is None:  # TCP: the agents' side
            if claims:
                self._refuse(req, "tcp", claims)
            if req.path in AGENT_SIDE_PATHS or req.path.startswith("/mcp/"):
                return
            raise NotFound("the agents' port serves only /mcp and /healthz")

        if claims:
            self._refuse(req, f"uid {peer['uid']} pid {peer['pid']}", claims)
        if req.path == "/healthz":
            return
        req.context.actor = actors.human(user_name(peer["uid"]))
        req.context.via = "socket"

    async def _tunnel(
        self, req: falcon.asgi.Request, peer: dict[str, int], raw_headers: list[tuple[bytes, bytes]]
    ) -> None:
        """A request from the tunnel's uid: the human it vouches for, or refused (the claims
        are listed only then, for the audit record)."""

        def refuse(reason: str = "") -> NoReturn:
            suffix = f": {reason}" if reason else ""
            self._refuse(
                req, f"uid {peer['uid']} (tunnel){suffix}", _claims(raw_headers) or ["none"]
            )

        if self.tunnel_verify is None:
            refuse()
        body = await req.stream.read(MAX_BODY + 1)  # verified whole, so bounded first
        if len(body) > MAX_BODY:
            raise BadRequest(f"body larger than {MAX_BODY} bytes", field="body")
        req.context.body = body
        try:
            user = self.tunnel_verify(
                req.method,
                target_from_scope(req.scope),
                raw_headers,
                body,
                req.scope["extensions"].get(CONNECTION_EXTENSION),
            )
        except TunnelRejected as exc:
            refuse(exc.rejection_reason)
        except Unauthenticated:
            refuse()
        req.context.actor = actors.human(user)
        req.context.via = "tunnel"

    def _web(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        web: WebAccess,
        headers: list[tuple[str, str]],
        claims: list[str],
    ) -> None:
        if claims:
            self._refuse(req, "web", claims)
        values = {name.lower(): value for name, value in headers}
        if values.get("host") not in web.hosts:
            self._refuse_web(req, "bad host", Forbidden("Host is not this daemon's web address"))
        origin = values.get("origin")
        if origin is not None and origin not in web.origins:
            self._refuse_web(req, "bad origin", Forbidden("Origin is not allowed"))
        if req.path == "/healthz":
            return
        token = req.get_param(TOKEN_PARAM)
        if token is not None and req.path == "/" and req.method in ("GET", "HEAD"):
            if not web.opens(token):
                self._refuse_web(
                    req,
                    "bad secret",
                    Unauthenticated(
                        "this address's token is not the daemon's current one (it changes at "
                        "every start): run openbus ui for the address"
                    ),
                )
            resp.set_cookie(
                COOKIE, token, secure=False, http_only=True, same_site="Strict", path="/"
            )
            resp.status = falcon.HTTP_303
            resp.location = "/"
            resp.complete = True  # the secret leaves the address bar at once
            return
        if not any(web.opens(value) for value in req.get_cookie_values(COOKIE) or ()):
            self._refuse_web(
                req,
                "no secret",
                Unauthenticated(
                    "open this page from the address openbus ui prints (it carries this "
                    "start's secret)"
                ),
            )
        req.context.actor = actors.human(user_name(os.getuid()))
        req.context.via = "web"

    def _refuse_web(self, req: falcon.asgi.Request, reason: str, error: Exception) -> None:
        self.refuse(
            "web.refused " + reason,
            AuditDraft(
                actor="system",
                action="web.refused",
                outcome="refused",
                target=req.path,
                details={"reason": reason, "method": req.method},
            ),
        )
        raise error

    def _refuse(self, req: falcon.asgi.Request, peer: str, claims: list[str]) -> NoReturn:
        self.refuse(
            # sampled per listener and uid (not per pid or reason)
            "identity.refused " + peer.partition(" pid ")[0].partition(":")[0],
            AuditDraft(
                actor="system",
                action="identity.refused",
                outcome="refused",
                target=req.path,
                details={"peer": peer, "headers": sorted(set(claims)), "method": req.method},
            ),
        )
        raise Unauthenticated("identity headers are honoured only from the tunnel, signed")


def _claims(raw_headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The names of the identity headers a request carries (any spelling)."""
    return [k.decode("latin-1") for k, _ in raw_headers if is_identity_header(k)]


def require_actor(req: falcon.asgi.Request) -> actors.Actor:
    actor = getattr(req.context, "actor", None)
    if actor is None:
        raise Unauthenticated("no identity")
    assert isinstance(actor, actors.Actor)
    return actor
