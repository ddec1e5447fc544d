"""The tunnel's ASGI app: login, logout, and the signing proxy to the daemon's socket.

Theory of operation
-------------------
Every request arrives over TLS. ``/login`` (GET: the page; POST: a form) and ``/logout``
(POST) are the tunnel's own. Any other request needs a session cookie that opens (see
``session``); without one a browser navigation is sent to the login page and anything else
gets 401. With one, the request is forwarded to the daemon's unix socket: hop-by-hop headers,
``Cookie``, ``Authorization``, ``Host`` and every spelling of every identity header are
removed, and the ``X-Tunnel-*`` headers are added, vouching for the exact method, target
and body sent: on a connection's first request an Ed25519 signature, which also offers the
daemon a random key for that connection, and once the daemon has taken it (it answered
below 400) a MAC under that key (see ``kernel.tunnel_signature``: an Ed25519 signature and
its check cost both processes about half a millisecond of CPU together; a MAC, a
hundredth). The daemon's answer streams back chunk by chunk, so server-sent events pass
through as they happen. Upstream connections are kept alive and reused one request at
a time (``upstream``); each request is written byte for byte as it was signed (the target
on the wire is the one signed) and the answer is parsed with llhttp. While waiting on the
daemon the proxy watches for the client leaving (at once during a stream, after
``WATCH_AFTER`` otherwise) and then drops the upstream connection, so an abandoned event
stream does not hold the daemon.

Logins go through the throttle (per user and per address) and then the PAM helper; a wrong
password costs a delay; "PAM unavailable" is answered 503 and never counted as a guess.
State-changing requests whose ``Origin`` names another site are refused (SameSite=Strict is
the main guard; this is a second one).
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import string
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from openbus.kernel.clock import Clock, Random
from openbus.kernel.tunnel_signature import (
    KEY_BYTES,
    is_identity_header,
    mac,
    sign,
    target_from_scope,
)
from openbus.tunnel.pam_helper import USER_RE, PamResult
from openbus.tunnel.session import COOKIE_NAME, SessionSealer
from openbus.tunnel.throttle import LoginThrottle
from openbus.tunnel.upstream import (
    ResponseParser,
    Upstream,
    UpstreamError,
    UpstreamPool,
    request_head,
)

log = logging.getLogger("openbus.tunnel")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Authenticator = Callable[[str, str], Awaitable[PamResult]]

MAX_BODY = 1024 * 1024
MAX_LOGIN_BODY = 8 * 1024
WATCH_AFTER = 0.05  # seconds of waiting on the daemon before watching for the client leaving
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {
    "host",
    "cookie",
    "authorization",
    "content-length",
    "expect",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
}
_NOT_FORWARDED = frozenset(name.encode("latin-1") for name in NOT_FORWARDED)
# The daemon's Date and Server are not relayed: the tunnel's server sends its own Date, and
# names no server (one header less for every client to parse, and nothing about what runs
# behind the tunnel).
NOT_RELAYED = HOP_BY_HOP | {"date", "server"}
_NOT_RELAYED = frozenset(name.encode("latin-1") for name in NOT_RELAYED)
SECURITY_HEADERS = [
    (b"strict-transport-security", b"max-age=31536000"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
        b"frame-ancestors 'none'",
    ),
    (b"cache-control", b"no-store"),
]


class _TooLarge(Exception):
    pass


@dataclass
class TunnelApp:
    sealer: SessionSealer
    throttle: LoginThrottle
    authenticate: Authenticator
    signing_key: Ed25519PrivateKey
    daemon_socket: Path
    clock: Clock
    random: Random
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    page: str = ""

    def __post_init__(self) -> None:
        self._page = string.Template(self.page or login_page())
        self._pool = UpstreamPool(self.daemon_socket)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            if path == "/login" and method in ("GET", "HEAD"):
                await self._login_page(scope, send, 200, "", "", self._next_of(scope))
            elif path == "/login" and method == "POST":
                await self._login(scope, receive, send)
            elif path == "/logout" and method == "POST":
                await self._logout(scope, send)
            else:
                await self._forward(scope, receive, send)
        except _TooLarge:
            await self._plain(send, 413, "request body too large")

    # ------------------------------------------------------------------ helpers

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self._pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    def _headers(scope: Scope) -> list[tuple[bytes, bytes]]:
        return [(bytes(k).lower(), bytes(v)) for k, v in scope.get("headers", [])]

    def _header(self, scope: Scope, name: bytes) -> str | None:
        return _header_of(self._headers(scope), name)

    def _cookie(self, scope: Scope) -> str | None:
        return _cookie_of(self._headers(scope))

    @staticmethod
    def _address(scope: Scope) -> str:
        client = scope.get("client")
        return str(client[0]) if client else "unknown"

    @staticmethod
    def _next_of(scope: Scope) -> str:
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return _safe_next(query.get("next", ["/"])[0])

    def _cross_site(self, scope: Scope) -> bool:
        origin = self._header(scope, b"origin")
        if origin is None:
            return False
        host = self._header(scope, b"host") or ""
        return origin != f"https://{host}"

    async def _read_body(self, receive: Receive, limit: int) -> bytes:
        body = b""
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise asyncio.CancelledError
            body += bytes(message.get("body", b""))
            if len(body) > limit:
                raise _TooLarge
            if not message.get("more_body", False):
                return body

    async def _plain(
        self, send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        body = json.dumps({"error": "tunnel", "message": text}).encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"),
                    *SECURITY_HEADERS,
                    *(extra or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _redirect(
        self, send: Send, location: str, extra: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1")),
                    (b"content-length", b"0"),
                    (b"cache-control", b"no-store"),
                    *SECURITY_HEADERS,
                    *(extra or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})

    async def _login_page(  # noqa: PLR0917
        self,
        scope: Scope,
        send: Send,
        status: int,
        message: str,
        user: str,
        next_path: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        notice = f'<p class="msg" role="alert">{html.escape(message)}</p>' if message else ""
        host = (self._header(scope, b"host") or "this box").split(":")[0]
        body = self._page.substitute(
            host=html.escape(host),
            message=notice,
            user=html.escape(user),
            next=html.escape(next_path),
        ).encode("utf-8")
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                    *PAGE_HEADERS,
                    *SECURITY_HEADERS,
                    *(extra or []),
                ],
            }
        )
        await send(
            {"type": "http.response.body", "body": body if scope["method"] != "HEAD" else b""}
        )

    # ------------------------------------------------------------------ login and logout

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._cross_site(scope):
            await self._plain(send, 403, "cross-site login refused")
            return
        form = urllib.parse.parse_qs(
            (await self._read_body(receive, MAX_LOGIN_BODY)).decode("utf-8", "replace")
        )
        user = form.get("user", [""])[0].strip()
        password = form.get("password", [""])[0]
        next_path = _safe_next(form.get("next", ["/"])[0])
        address = self._address(scope)
        shown_user = user if USER_RE.fullmatch(user) else ""
        wait = self.throttle.retry_after(user, address)
        if wait > 0:
            seconds = int(wait) + 1
            await self._login_page(
                scope,
                send,
                429,
                f"Too many failed sign-ins. Try again in {seconds} s.",
                shown_user,
                next_path,
                [(b"retry-after", str(seconds).encode())],
            )
            return
        if USER_RE.fullmatch(user) and password:
            result = await self.authenticate(user, password)
        else:
            result = PamResult("denied")
        if result.outcome == "ok":
            self.throttle.succeeded(user)
            value, _session = self.sealer.seal(user)
            log.info("login accepted from %s", address)
            cookie = self.sealer.cookie(value, int(self.sealer.ttl))
            await self._redirect(send, next_path, [(b"set-cookie", cookie.encode("latin-1"))])
            return
        if result.outcome == "unavailable":
            log.error("login unavailable: %s", result.detail)
            await self._login_page(
                scope,
                send,
                503,
                "Sign-in is unavailable: the box's authentication (PAM) "
                "is not working. Ask the box operator.",
                shown_user,
                next_path,
            )
            return
        delay = self.throttle.failed(user, address)
        log.warning("login refused from %s", address)
        await self.sleep(delay)
        await self._login_page(
            scope, send, 401, "Wrong user name or password.", shown_user, next_path
        )

    async def _logout(self, scope: Scope, send: Send) -> None:
        if self._cross_site(scope):
            await self._plain(send, 403, "cross-site logout refused")
            return
        session = self.sealer.open(self._cookie(scope))
        if session is not None:
            self.sealer.revoke(session)
        await self._redirect(
            send, "/login", [(b"set-cookie", self.sealer.clearing_cookie().encode("latin-1"))]
        )

    # ------------------------------------------------------------------ the proxy

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        incoming = self._headers(scope)
        session = self.sealer.open(_cookie_of(incoming))
        method = scope["method"]
        if session is None:
            accept = _header_of(incoming, b"accept") or ""
            if method in ("GET", "HEAD") and "text/html" in accept:
                target = target_from_scope(scope)
                await self._redirect(send, "/login?next=" + urllib.parse.quote(target, safe=""))
            else:
                await self._plain(send, 401, "sign in first")
            return
        if method not in SAFE_METHODS and self._cross_site(scope):
            await self._plain(send, 403, "cross-site request refused")
            return
        body = await self._read_body(receive, MAX_BODY)
        target = target_from_scope(scope)
        headers = [
            (k, v) for k, v in incoming if k not in _NOT_FORWARDED and not is_identity_header(k)
        ]
        headers.append((b"host", b"openbus"))
        if body:  # without it (and without a transfer coding) HTTP/1.1 means no body
            headers.append((b"content-length", str(len(body)).encode()))
        try:
            head = request_head(method, target, headers)
        except ValueError as exc:
            await self._plain(send, 400, str(exc))
            return
        now, nonce = self.clock.now(), self.random.token_bytes(16)
        for _attempt in range(2):
            try:
                upstream = await self._pool.get()
            except OSError:
                break
            if upstream.mac_key is not None:
                vouch = mac(upstream.mac_key, method, target, session.user, body, now, nonce)
            else:  # a new connection: signed, offering the key its next requests are MAC'd by
                upstream.offered_key = self.random.token_bytes(KEY_BYTES)
                vouch = sign(
                    self.signing_key,
                    method,
                    target,
                    session.user,
                    body,
                    now,
                    nonce,
                    mac_key=upstream.offered_key,
                )
            request = b"".join(
                [head, *(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in vouch.items())]
            )
            request += b"\r\n" + body
            if await self._exchange(upstream, request, method == "HEAD", receive, send):
                return
            if upstream.fresh or method not in SAFE_METHODS:
                break
            # A kept-alive connection the daemon closed before answering a byte: once more
            # on a new connection, with the same time and nonce (so if the daemon did take
            # the first, it refuses this one as a replay).
        await self._plain(send, 502, "the openbus daemon is not answering")

    async def _exchange(
        self, upstream: Upstream, request: bytes, head_only: bool, receive: Receive, send: Send
    ) -> bool:
        """Relay one exchange; False when the daemon closed before sending a byte."""
        upstream.write(request)
        response = ResponseParser(head_only=head_only)
        watch = _ClientWatch(receive, upstream)
        received = started = False
        try:
            while True:
                # A stream under way is watched at once; a slow answer after a moment.
                watch.arm(0.0 if started else WATCH_AFTER)
                data = await upstream.read()
                watch.disarm()
                if watch.gone:
                    return True
                if not data:  # the daemon closed: the end of a body read to the close, or not
                    if started:
                        await send({"type": "http.response.body", "body": response.take_body()})
                    elif received:
                        await self._plain(send, 502, "the openbus daemon closed the connection")
                    return received
                received = True
                try:
                    response.feed(data)
                except UpstreamError as exc:
                    log.error("%s", exc)
                    if started:
                        await send({"type": "http.response.body", "body": b""})
                    else:
                        await self._plain(send, 502, "the openbus daemon's answer is broken")
                    return True
                if response.status is not None and not started:
                    upstream.answered(response.status)
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status,
                            "headers": [
                                (name, value)
                                for name, value in map(_lowered, response.headers)
                                if name not in _NOT_RELAYED
                            ]
                            + SECURITY_HEADERS,
                        }
                    )
                    started = True
                if response.complete:
                    upstream.keep = response.keep_alive
                    await send({"type": "http.response.body", "body": response.take_body()})
                    return True
                if started and (chunk := response.take_body()):
                    await _more(send, chunk)
        finally:
            watch.stop()
            self._pool.put(upstream)


class _ClientWatch:
    """Notices the client leaving while the proxy waits on the daemon, and then closes the
    upstream connection (ending an endless event stream). Started only when a wait is long or
    a stream is under way, so a quick exchange costs no task."""

    def __init__(self, receive: Receive, upstream: Upstream) -> None:
        self._receive = receive
        self._upstream = upstream
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.gone = False

    def arm(self, delay: float) -> None:
        if self._task is not None:
            return
        if delay <= 0:
            self._start()
        else:
            self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _start(self) -> None:
        self._timer = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        await _disconnected(self._receive)
        self.gone = True
        self._upstream.close()

    def stop(self) -> None:
        self.disarm()
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _lowered(header: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    return header[0].lower(), header[1]


def _header_of(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def _cookie_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    for key, value in headers:
        if key != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            name, _, val = part.strip().partition("=")
            if name == COOKIE_NAME:
                return val
    return None


def login_page() -> str:
    return resources.files("openbus.tunnel").joinpath("login.html").read_text("utf-8")


async def _more(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _safe_next(value: str) -> str:
    """Only a local absolute path: never ``//host`` or a scheme (no open redirect)."""
    if (
        not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(c < " " for c in value)
    ):
        return "/"
    return value
