"""The MCP endpoint at ``/mcp``: the official SDK's stateful streamable HTTP, behind openbus's
own checks on every request.

Theory of operation
-------------------
Each HTTP request to ``/mcp`` passes, in order:

1. **No query string.** MCP's streamable HTTP uses none; a token there would end up in logs,
   so any query string is refused (400) and the refusal audited without the query itself.
2. **No identity headers.** ``X-Tunnel-User`` and friends mean nothing on the agents' port;
   a request carrying one is refused (401) and audited, as on the rest of the TCP side.
3. **Host and Origin** (DNS rebinding): Host must be ``127.0.0.1:<port>`` or
   ``localhost:<port>`` (else 421); an Origin, when sent, must be ``http://`` one of those
   (else 403). The SDK's own check is switched on with the same lists.
4. **Bearer token**, on every request, not only at initialize: an unknown, revoked or
   malformed token is 401; a token whose agent's process has exited is revoked on the spot
   and refused (the ``PrincipalVerifier`` port: ``daemon.launch.LiveTokens``).
5. **Session binding.** A session belongs to the principal whose token opened it. A session
   id presented with another agent's token is answered as if it did not exist (404) and
   audited. (The SDK enforces the same through ``scope["user"]``, which is set here.)
6. The SDK's session manager serves the request (body limit 1 MiB: 413 above it).

``tools/list`` shows only the tools the caller's scopes allow right now. ``tools/call`` runs
``gate.run(actor, tool.action, params)`` with the principal's actor (``agent:<harness>:<session
id>``, or the pane form before the session id is bound); every result is framed as data.
A result is one compact JSON text block (no ``structuredContent``: no tool declares an output
schema, and the same data twice would double what every client parses), built once per
projected object (``list_panes``: once per directory snapshot).
Revoking or narrowing an agent (``Connect.on_revocation``: turning it Off, disconnect-all,
a narrower org cap, its process exiting) ends every open MCP session of that agent at once:
its streams close, its session ids answer 404 from then on.

Sessions are bounded, so one token cannot exhaust the daemon's memory (each open session
holds a server task and its streams, ~50 kB): an agent holds at most
``MAX_SESSIONS_PER_AGENT`` sessions, and opening one more ends its oldest. Evicting rather
than refusing keeps a real agent working when its client lost sessions without ending them
(a restarted MCP client, a dropped connection): the sessions it loses are only ever its own.
A session with no request in flight and no open stream ends after ``SESSION_IDLE_SECONDS``.
The counts are this feature's section of ``/healthz``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import mcp_types as types
import orjson
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from openbus.daemon.config import DaemonConfig
from openbus.daemon.connect import Connect
from openbus.daemon.core.actors import Actor
from openbus.daemon.core.audit import AuditDraft
from openbus.daemon.feature import Feature
from openbus.daemon.gate import Gate
from openbus.daemon.grants import Grants, Principal
from openbus.daemon.mcp.instructions import SERVING_ROLE, RoleServer
from openbus.daemon.mcp.tools import LaunchRecords, McpTool, ToolContext, ToolRegistry, frame
from openbus.daemon.refusals import AnonymousRefusals
from openbus.kernel.clock import Clock
from openbus.kernel.errors import BadRequest, NotFound, OpenbusError
from openbus.kernel.scopes import Preset
from openbus.kernel.tunnel_signature import is_identity_header

log = logging.getLogger("openbus.mcp")

MAX_BODY = 1024 * 1024
SESSION_IDLE_SECONDS = 10 * 60.0
MAX_SESSIONS_PER_AGENT = 8
PRINCIPAL_SCOPE_KEY = "openbus.principal"
SERVER_NAME = "openbus"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class PrincipalVerifier(Protocol):
    async def verify(self, token: str) -> Principal | None:
        """The active principal holding ``token`` right now (its process alive), else None."""
        ...


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _respond(
    send: Send,
    status: int,
    body: Mapping[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _drain(receive: Receive) -> None:
    """Read the request body away before answering early (bounded by the server's limits)."""
    while True:
        message = await receive()
        if message.get("type") != "http.request" or not message.get("more_body"):
            return


def bearer_token(scope: Mapping[str, Any]) -> str | None:
    value = _header(scope, b"authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def allowed_hosts(host: str, port: int) -> list[str]:
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}"]
    if host not in ("127.0.0.1", "localhost", "0.0.0.0", "", "::"):  # noqa: S104 - a listen value, compared
        hosts.append(f"{host}:{port}")
    return hosts


class McpEndpoint(Feature):
    """The ``/mcp`` ASGI app and the MCP server behind it."""

    name = "mcp"

    def __init__(
        self,
        *,
        listen: DaemonConfig,
        gate: Gate,
        grants: Grants,
        connect: Connect,
        tools: ToolRegistry,
        verifier: PrincipalVerifier,
        launches: LaunchRecords,
        refusals: AnonymousRefusals,
        clock: Clock,
        max_body: int = MAX_BODY,
        max_sessions_per_agent: int = MAX_SESSIONS_PER_AGENT,
        role_instructions: Mapping[str, str] | None = None,
    ) -> None:
        self.gate = gate
        self.grants = grants
        self.tools = tools
        self.verifier = verifier
        self.launches = launches
        self.refusals = refusals
        self.clock = clock
        port = listen.listen_port
        self.hosts = allowed_hosts(listen.listen_host, port)
        self.origins = [f"http://{h}" for h in self.hosts]
        self.server: Server[Any] = RoleServer(
            SERVER_NAME,
            version="0.1.0",
            title="openbus",
            on_list_tools=self._list_tools,
            by_role=role_instructions or {},
        )
        # ``tools/call`` is registered with the SDK's generic handler API so it can answer the
        # wire dict itself: a result built once (see ``_framed``) is not rebuilt per call.
        self.server.add_request_handler("tools/call", types.CallToolRequestParams, self._call_tool)
        # No per-message tracing spans: the gate's audit is the record.
        self.server.middleware = []
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(self.hosts),
            allowed_origins=list(self.origins),
        )
        self.manager = StreamableHTTPSessionManager(
            self.server,
            security_settings=security,
            max_request_body_size=max_body,
            session_idle_timeout=SESSION_IDLE_SECONDS,
        )
        self.max_sessions_per_agent = max_sessions_per_agent
        self.owners: dict[str, str] = {}  # MCP session id -> principal id, oldest first
        self.evicted = 0  # sessions ended because their agent opened one more than its cap
        self._framed: dict[str, tuple[Any, dict[str, Any]]] = {}  # tool -> (data, wire result)
        connect.on_revocation(self.on_revoked)

    # ------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    # ------------------------------------------------------------------ the HTTP edge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            return
        if scope.get("query_string"):
            self._audit_query_refusal(scope)
            await _drain(receive)
            await _respond(
                send,
                400,
                BadRequest(
                    "/mcp takes no query string; send the token in the Authorization header",
                    field="query",
                ).to_dict(),
            )
            return
        claims = sorted(
            {
                k.decode("latin-1").lower()
                for k, _ in scope.get("headers", [])
                if is_identity_header(k.decode("latin-1"))
            }
        )
        if claims:
            self.refusals.refuse(
                "identity.refused tcp",
                AuditDraft(
                    actor="system",
                    action="identity.refused",
                    outcome="refused",
                    target="/mcp",
                    details={"peer": "tcp", "headers": claims, "method": scope.get("method")},
                ),
            )
            await _drain(receive)
            await _respond(
                send,
                401,
                {"error": "unauthenticated", "message": "identity headers are not honoured here"},
            )
            return
        host = _header(scope, b"host")
        if host not in self.hosts:
            await _drain(receive)
            await _respond(
                send, 421, {"error": "bad_host", "message": "Host is not this daemon's agent port"}
            )
            return
        origin = _header(scope, b"origin")
        if origin is not None and origin not in self.origins:
            await _drain(receive)
            await _respond(send, 403, {"error": "bad_origin", "message": "Origin is not allowed"})
            return
        principal = await self._authenticate(scope)
        if principal is None:
            await _drain(receive)
            await _respond(
                send,
                401,
                {
                    "error": "not_connected",
                    "message": "not connected: missing, unknown or revoked token",
                },
                [(b"www-authenticate", b'Bearer error="invalid_token"')],
            )
            return
        session = _header(scope, MCP_SESSION_ID_HEADER.encode())
        if session is not None:
            owner = self.owners.get(session)
            if owner is not None and owner != principal.id:
                actor = principal.actor()
                await self._refused(
                    actor,
                    AuditDraft(
                        actor=actor.name,
                        action="mcp.session_refused",
                        outcome="refused",
                        target="/mcp",
                        details={
                            "reason": "session of another agent",
                            "principal": principal.id,
                            "method": scope.get("method"),
                        },
                    ),
                )
                await _drain(receive)
                await _respond(send, 404, {"error": "not_found", "message": "Session not found"})
                return
        inner = dict(scope)
        inner["user"] = AuthenticatedUser(
            AccessToken(token=principal.id, client_id=principal.id, scopes=[])
        )
        inner[PRINCIPAL_SCOPE_KEY] = principal.id
        send_on = send
        if session is None:
            send_on = self._capturing(send, principal.id)
        role = SERVING_ROLE.set(principal.role)
        try:
            await self.manager.handle_request(inner, receive, send_on)  # type: ignore[arg-type]
        finally:
            SERVING_ROLE.reset(role)

    def _capturing(self, send: Send, principal_id: str) -> Send:
        header = MCP_SESSION_ID_HEADER.encode()

        async def capture(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start" and message.get("status", 500) < 400:
                for key, value in message.get("headers", []):
                    if key.lower() == header:
                        self._prune()
                        self.owners[value.decode("latin-1")] = principal_id
                        await self._evict_over_cap(principal_id)
            await send(message)

        return capture

    async def _evict_over_cap(self, principal_id: str) -> None:
        """End the agent's oldest sessions beyond its cap (the newest, just opened, stays)."""
        sessions = self.sessions_of(principal_id)
        for sid in sessions[: max(0, len(sessions) - self.max_sessions_per_agent)]:
            if await self._end(sid):
                self.evicted += 1

    def _prune(self) -> None:
        live = self.manager._server_instances  # the SDK keeps no public view of open sessions
        for sid in [s for s in self.owners if s not in live]:
            del self.owners[sid]

    async def _end(self, sid: str) -> bool:
        self.owners.pop(sid, None)
        transport = self.manager._server_instances.get(sid)
        if transport is None:
            return False
        await self.manager._discard_session(sid, transport)
        return True

    # ------------------------------------------------------------------ feature

    def tick(self) -> None:
        self._prune()  # forget sessions the SDK ended (idle, client DELETE)

    def health(self) -> Mapping[str, Any]:
        self._prune()
        per_agent: dict[str, int] = {}
        for owner in self.owners.values():
            per_agent[owner] = per_agent.get(owner, 0) + 1
        return {
            "sessions": len(self.manager._server_instances),
            "agents_with_sessions": len(per_agent),
            "most_sessions_of_one_agent": max(per_agent.values(), default=0),
            "max_sessions_per_agent": self.max_sessions_per_agent,
            "evicted": self.evicted,
            "idle_seconds": SESSION_IDLE_SECONDS,
        }

    async def _authenticate(self, scope: Mapping[str, Any]) -> Principal | None:
        token = bearer_token(scope)
        if token is None:
            return None
        return await self.verifier.verify(token)

    def _audit_query_refusal(self, scope: Mapping[str, Any]) -> None:
        draft = AuditDraft(
            actor="system",
            action="mcp.refused",
            outcome="refused",
            target="/mcp",
            details={"reason": "query string", "method": scope.get("method")},
        )
        try:  # no token was checked: sampled, so a flood cannot fill the store
            self.refusals.refuse("mcp.refused query", draft)
        except OpenbusError:
            log.warning("could not audit a refused MCP request")

    async def _refused(self, actor: Actor, draft: AuditDraft) -> None:
        try:  # an agent's refusals are sampled per agent by the gate
            await self.gate.refuse(actor, draft)
        except OpenbusError:
            log.warning("could not audit a refused MCP request")

    # ------------------------------------------------------------------ revocation

    def sessions_of(self, principal_id: str) -> list[str]:
        return [sid for sid, owner in self.owners.items() if owner == principal_id]

    async def close_sessions(self, principal_id: str) -> int:
        """End every open MCP session (and its streams) of one agent. Returns how many."""
        closed = 0
        for sid in self.sessions_of(principal_id):
            closed += await self._end(sid)
        return closed

    async def on_revoked(self, principal: Principal, preset: Preset) -> None:
        await self.close_sessions(principal.id)

    # ------------------------------------------------------------------ MCP handlers

    def _principal_of(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        request = ctx.request
        principal_id = request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None
        if not principal_id:
            raise NotFound("no authenticated agent on this request")
        return self.grants.get(str(principal_id))

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        try:
            principal = self._principal_of(ctx)
        except OpenbusError:
            return types.ListToolsResult(tools=[])
        actor = principal.actor()
        listed = self.tools.listed(self.gate, actor, self.grants.scopes_for(actor))
        result = types.ListToolsResult(tools=[_tool_model(tool) for tool in listed])
        self.launches.tools_listed(principal.id)
        return result

    def _result(self, tool: McpTool, data: Any) -> dict[str, Any]:
        """The ``tools/call`` result for ``data`` in wire form: framed as data with its source,
        as JSON text. A tool whose projection hands back the same object while nothing changed
        (``list_panes``: one per directory snapshot) gets the result built once; the cache
        holds that object, so its identity stays unique."""
        cached = self._framed.get(tool.name)
        if cached is not None and cached[0] is data:
            wire = cached[1]
        else:
            wire = _wire(frame(tool, data), is_error=False)
            self._framed[tool.name] = (data, wire)
        return wire

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        tool = self.tools.get(params.name)
        if tool is None:
            return _error_result({"error": "not_found", "message": f"no tool named {params.name}"})
        try:
            principal = self._principal_of(ctx)
        except OpenbusError as exc:
            return _error_result(exc.to_dict())
        actor = principal.actor()
        mcp_session = (
            _header(ctx.request.scope, MCP_SESSION_ID_HEADER.encode())
            if ctx.request is not None
            else None
        )
        tool_ctx = ToolContext(principal, actor, self.launches, self.clock, mcp_session)
        args = dict(params.arguments or {})
        try:
            self.gate.throttle(actor)
        except OpenbusError as exc:
            return _error_result(exc.to_dict())
        try:
            call_params = tool.params(args, tool_ctx)
        except OpenbusError as exc:
            await self._refused(
                actor,
                AuditDraft(
                    actor=actor.name,
                    action=tool.action,
                    outcome="refused",
                    details={"reason": exc.code, "message": exc.message, "tool": tool.name},
                ),
            )
            return _error_result(exc.to_dict())
        try:
            result = await self.gate.run(
                actor,
                tool.action,
                call_params,
                target=tool.target(call_params),
                message_id=tool.message_id(call_params),
            )
            data = tool.project(result, tool_ctx)
        except OpenbusError as exc:
            return _error_result(exc.to_dict())
        return self._result(tool, data)


def _tool_model(tool: McpTool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            open_world_hint=False,
            destructive_hint=not tool.read_only,
        ),
    )


def _wire(framed: dict[str, Any], *, is_error: bool) -> dict[str, Any]:
    """A ``CallToolResult`` as the SDK puts it on the wire: the framed result as one compact
    JSON text block, the form every client reads and shows its model. No tool declares an
    output schema, so there is no ``structuredContent``: sending it too would double what
    each call carries and what every client parses and validates (for 200 panes, most of
    the call)."""
    text = _json_text(framed)
    return {
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
        "resultType": "complete",  # required from protocol 2026-07-28, dropped before it
    }


def _json_text(value: Any) -> str:
    """``value`` as compact JSON text, what is not ASCII kept as it is: orjson's (a tenth of
    the standard library's time for a search's answer, the same text), or the standard
    library's for what orjson refuses (a lone surrogate, an integer past 64 bits)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _error_result(body: Mapping[str, Any]) -> dict[str, Any]:
    return _wire({"source": "openbus", "kind": "error", **body}, is_error=True)
