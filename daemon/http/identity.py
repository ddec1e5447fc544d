"""Who is calling: the identity middleware of the HTTP edge.

* Over TCP (the agents' side) there is no human: only ``/healthz`` and ``/mcp`` answer, and
  ``/mcp`` authenticates its own bearer token on every request. A request there carrying a
  tunnel identity header is refused and audited.
* On the unix socket the human is the connecting peer's user (SO_PEERCRED), except that in
  hosted mode a peer whose uid is the tunnel's may vouch for a human with a signed
  ``X-Tunnel-User``. Any other request carrying an identity header, in any spelling, is
  refused with 401 and audited, naming the peer.
"""

from __future__ import annotations

import pwd
import time
from collections.abc import Callable
from typing import Any

import falcon.asgi

from openbus.daemon.core import actors
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.http.common import MAX_BODY
from openbus.daemon.http.worker import PEER_EXTENSION
from openbus.kernel.errors import BadRequest, NotFound, Unauthenticated
from openbus.kernel.tunnel_signature import TunnelRejected, is_identity_header, target_from_scope

AGENT_SIDE_PATHS = ("/healthz", "/mcp")
__all__ = ["Identity", "is_identity_header", "require_actor", "user_name"]

# (method, target, headers, body) -> user name; raises Unauthenticated
TunnelVerify = Callable[[str, str, list[tuple[str, str]], bytes], str]


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
    ) -> None:
        self.refuse = refuse  # (sampling key, draft): anonymous refusals are sampled
        self.hosted = hosted
        self.tunnel_uid = tunnel_uid
        self.tunnel_verify = tunnel_verify

    async def process_request(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        peer: dict[str, int] | None = req.scope.get("extensions", {}).get(PEER_EXTENSION)
        req.context.peer = peer
        req.context.actor = None
        raw_headers: list[tuple[bytes, bytes]] = req.scope.get("headers", [])
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw_headers]
        claims = [name for name, _ in headers if is_identity_header(name)]

        if peer is None:  # TCP: the agents' side
            if claims:
                self._refuse(req, "tcp", claims)
            if req.path in AGENT_SIDE_PATHS or req.path.startswith("/mcp/"):
                return
            raise NotFound("the agents' port serves only /mcp and /healthz")

        if self.hosted and self.tunnel_uid is not None and peer["uid"] == self.tunnel_uid:
            if self.tunnel_verify is None:
                self._refuse(req, f"uid {peer['uid']} (tunnel)", claims or ["none"])
            assert self.tunnel_verify is not None
            body = await req.stream.read(MAX_BODY + 1)  # verified whole, so bounded first
            if len(body) > MAX_BODY:
                raise BadRequest(f"body larger than {MAX_BODY} bytes", field="body")
            req.context.body = body
            try:
                user = self.tunnel_verify(req.method, target_from_scope(req.scope), headers, body)
            except TunnelRejected as exc:
                self._refuse(
                    req, f"uid {peer['uid']} (tunnel): {exc.rejection_reason}", claims or ["none"]
                )
            except Unauthenticated:
                self._refuse(req, f"uid {peer['uid']} (tunnel)", claims or ["none"])
            req.context.actor = actors.human(user)
            req.context.via = "tunnel"
            return

        if claims:
            self._refuse(req, f"uid {peer['uid']} pid {peer['pid']}", claims)
        if req.path == "/healthz":
            return
        req.context.actor = actors.human(user_name(peer["uid"]))
        req.context.via = "socket"

    def _refuse(self, req: falcon.asgi.Request, peer: str, claims: list[str]) -> None:
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


def require_actor(req: falcon.asgi.Request) -> actors.Actor:
    actor = getattr(req.context, "actor", None)
    if actor is None:
        raise Unauthenticated("no identity")
    assert isinstance(actor, actors.Actor)
    return actor
